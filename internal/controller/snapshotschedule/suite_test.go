package snapshotschedule

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-containerregistry/pkg/registry"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/snapshot"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/internal/testutil/envsuite"
)

// The suite runs the controller against a real API server (envtest, our
// builds) with a fake clock the tests set, and a registry on loopback
// (go-containerregistry's). No tenant control plane runs: takes stands
// for snapshot.Take and writes a small real archive of the VirtualCluster,
// or fails when the test says so.
var (
	host      client.Client
	testClock = clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second))
	reg       string
	takes     = &fakeTake{}
)

// fakeTake writes a snapshot archive whose manifest names the
// VirtualCluster, taken at the fake clock's time.
type fakeTake struct {
	mu  sync.Mutex
	err error
	// sealed counts the snapshots taken with recipients.
	sealed int
	// withVolumes says, by VirtualCluster name, whether its last snapshot
	// was asked to include volumes.
	withVolumes map[string]bool
}

func (f *fakeTake) failWith(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeTake) take(_ context.Context, key types.NamespacedName, w io.Writer, rs []age.Recipient, includeVolumes bool) (snapshot.Manifest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.withVolumes == nil {
		f.withVolumes = map[string]bool{}
	}
	f.withVolumes[key.Name] = includeVolumes
	if f.err != nil {
		return snapshot.Manifest{}, f.err
	}
	if len(rs) > 0 {
		f.sealed++
	}
	etcd := filepath.Join(os.TempDir(), "snapshotschedule-etcd-"+key.Name)
	if err := os.WriteFile(etcd, []byte(strings.Repeat("etcd ", 100)), 0o600); err != nil {
		return snapshot.Manifest{}, err
	}
	defer os.Remove(etcd)
	m := snapshot.Manifest{NestVersion: "v0.test", KubernetesVersion: "v1.37.2", Namespace: key.Namespace, VirtualCluster: key.Name,
		Created: testClock.Now().UTC(), EtcdRevision: 7}
	return snapshot.Write(w, m, snapshot.Contents{VirtualCluster: []byte("{}"), PKI: map[string][]byte{"ca.key": []byte("k")}, EtcdPath: etcd}, rs, len(rs) == 0)
}

func TestMain(m *testing.M) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg = strings.TrimPrefix(srv.URL, "http://")
	envsuite.Suite{
		Logs: true,
		Setup: func(mgr ctrl.Manager) error {
			return (&Reconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("nest-manager"),
				Take: takes.take, Clock: testClock, TempDir: os.TempDir(),
			}).SetupWithManager(mgr)
		},
		Started: func(_ *rest.Config, c client.Client) { host = c },
	}.Main(m)
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, check)
}

func (f *fakeTake) sealedCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sealed
}
