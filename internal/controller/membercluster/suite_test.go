package membercluster

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/nestdev/nest/internal/controller/virtualcluster"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/internal/testutil/envsuite"
)

// The suite runs the controller against two real API servers (envtest, our
// builds): the host, where MemberClusters and their Secrets live, and a
// second one that stands for the member. No kubelet runs in the member: the
// tests create its Nodes and write their status as kubelets would.
var (
	host, member client.Client
	memberEnv    *envtest.Environment
	// memberKubeconfig reaches the member as its admin; deniedKubeconfig
	// as a user the member knows but grants nothing.
	memberKubeconfig, deniedKubeconfig []byte
)

// managerNamespace is where the suite's controller reads kubeconfig Secrets.
const managerNamespace = "nest-system"

// testProbeInterval is short so a test sees the periodic probe without
// touching the MemberCluster or its Secret.
const testProbeInterval = 2 * time.Second

func TestMain(m *testing.M) {
	var memberCfg *rest.Config
	memberEnv, memberCfg = envsuite.StartMember()
	envsuite.Suite{
		Logs:    true,
		Options: ctrl.Options{Cache: virtualcluster.CacheOptions()},
		Setup: func(mgr ctrl.Manager) error {
			if err := memberSetup(memberCfg); err != nil {
				return err
			}
			return (&Reconciler{
				Client: mgr.GetClient(), ManagerNamespace: managerNamespace,
				ProbeInterval: testProbeInterval, ProbeTimeout: 5 * time.Second,
			}).SetupWithManager(mgr)
		},
		Started: func(_ *rest.Config, c client.Client) {
			host = c
			if err := host.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}}); err != nil {
				fmt.Fprintln(os.Stderr, "create the manager namespace:", err)
				os.Exit(1)
			}
		},
		Member: memberEnv,
	}.Main(m)
}

// memberSetup makes the member's client and kubeconfigs.
func memberSetup(cfg *rest.Config) error {
	var err error
	if member, err = client.New(cfg, client.Options{}); err != nil {
		return err
	}
	admin, err := memberEnv.AddUser(envtest.User{Name: "nest-member-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	if memberKubeconfig, err = admin.KubeConfig(); err != nil {
		return err
	}
	nobody, err := memberEnv.AddUser(envtest.User{Name: "nobody"}, nil)
	if err != nil {
		return err
	}
	deniedKubeconfig, err = nobody.KubeConfig()
	return err
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, check)
}
