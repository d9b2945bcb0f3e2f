package virtualcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/internal/testutil/envsuite"
)

// The suite runs the reconciler against a real kube-apiserver and etcd (our
// own builds, found through KUBEBUILDER_ASSETS). envtest runs no kubelet and
// no controller-manager: pods never start, so tests stand in for them where
// needed (StatefulSet status, the PVC protection finalizer), and the tenant
// API server is the fakeTenants below.
var (
	k8sClient client.Client
	tenants   = &fakeTenants{}
)

// testOptions are the reconciler's; the host network is the local host
// cluster's, so the API server validates NetworkPolicies with exceptions.
var testOptions = controlplane.Options{
	KubeImageRepository: "nest.local/kube", SyncerImage: "nest.local/nest-syncer:test", CoreDNSImage: "nest.local/coredns:test", ImagePullPolicy: "IfNotPresent",
	HostNetwork: controlplane.HostNetwork{
		PodCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")},
		NodeCIDRs:    []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
	},
	ManagerNamespace: "nest-system",
}

// probeTimeout bounds the tests' tenant probes.
const probeTimeout = 2 * time.Second

// fakeTenants answers for tenant API servers, which do not run in envtest.
// A tenant in an unreachable namespace hangs until the probe times out, as
// a dead API server behind a black-holed address does.
type fakeTenants struct {
	ready       atomic.Bool
	unreachable sync.Map // host namespace -> true
	// blockers holds, by host namespace, what Preflight answers, and
	// ignored whether it was asked to ignore removed APIs.
	blockers sync.Map // host namespace -> string
	ignored  sync.Map // host namespace -> bool
}

func (f *fakeTenants) Ready(ctx context.Context, kubeconfig []byte) error {
	var hang bool
	f.unreachable.Range(func(ns, _ any) bool {
		hang = hang || bytes.Contains(kubeconfig, []byte("."+ns.(string)+".svc:"))
		return !hang
	})
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if f.ready.Load() {
		return nil
	}
	return errors.New("connection refused")
}

func (f *fakeTenants) VirtualNodeReady(ctx context.Context, kubeconfig []byte) error {
	return f.Ready(ctx, kubeconfig)
}

func (f *fakeTenants) AdministratorsAuthorized(ctx context.Context, kubeconfig []byte) error {
	return f.Ready(ctx, kubeconfig)
}

// Preflight answers what blockers holds for the tenant's namespace, which
// the kubeconfig's server names; nothing when ignoreRemovedAPIs.
func (f *fakeTenants) Preflight(_ context.Context, kubeconfig []byte, _ []string, _ string, ignoreRemovedAPIs bool) (string, error) {
	var out string
	f.blockers.Range(func(ns, b any) bool {
		if bytes.Contains(kubeconfig, []byte("."+ns.(string)+".svc:")) {
			f.ignored.Store(ns, ignoreRemovedAPIs)
			if !ignoreRemovedAPIs {
				out = b.(string)
			}
			return false
		}
		return true
	})
	return out, nil
}

// withoutWatch lets the interceptor wrap the manager's client, which does
// not watch: the reconciler never calls Watch.
type withoutWatch struct{ client.Client }

func (withoutWatch) Watch(context.Context, client.ObjectList, ...client.ListOption) (watch.Interface, error) {
	return nil, errors.New("the reconciler's client does not watch")
}

// faults injects errors into the reconciler's reads of PKI Secrets in one
// namespace, as a flaky API server or cache would return them.
var faults struct {
	namespace atomic.Value // string
	hits      atomic.Int64
}

// created records what the reconciler creates, as "Kind/name" by namespace,
// so tests compare it with controlplane.HostObjects.
var created struct {
	sync.Mutex
	objects map[string]map[string]bool
}

// createdIn returns what the reconciler created in namespace, sorted.
func createdIn(namespace string) []string {
	created.Lock()
	defer created.Unlock()
	return slices.Sorted(maps.Keys(created.objects[namespace]))
}

// specPatchedFrom holds the resourceVersions the reconciler's own patches
// of a VirtualCluster (finalizer, spec.kubeconfig) moved on from.
var specPatchedFrom sync.Map // resourceVersion -> namespace

// staleLocks counts, by namespace, the status patches refused with a
// conflict because their optimistic lock held a resourceVersion the same
// reconciler had already moved on from with a patch of its own: a stale
// base of its own making, unlike a cache that lags.
var staleLocks sync.Map // namespace -> *atomic.Int64

// staleLocksIn returns how many status patches in namespace locked on a
// resourceVersion the reconciler had patched away.
func staleLocksIn(namespace string) int64 {
	n, _ := staleLocks.LoadOrStore(namespace, &atomic.Int64{})
	return n.(*atomic.Int64).Load()
}

// intercept injects the faults into the reconciler's reads and records its
// creates, its own patches of VirtualClusters and its stale status locks.
var intercept = interceptor.Funcs{
	Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		from := obj.GetResourceVersion()
		err := c.Patch(ctx, obj, patch, opts...)
		if _, ok := obj.(*nestv1.VirtualCluster); ok && err == nil && obj.GetResourceVersion() != from {
			specPatchedFrom.Store(from, obj.GetNamespace())
		}
		return err
	},
	SubResourcePatch: func(ctx context.Context, c client.Client, subResource string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		data, dataErr := patch.Data(obj)
		err := c.SubResource(subResource).Patch(ctx, obj, patch, opts...)
		if !apierrors.IsConflict(err) || dataErr != nil {
			return err
		}
		var lock struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if json.Unmarshal(data, &lock) == nil {
			if _, own := specPatchedFrom.Load(lock.Metadata.ResourceVersion); own {
				n, _ := staleLocks.LoadOrStore(obj.GetNamespace(), &atomic.Int64{})
				n.(*atomic.Int64).Add(1)
			}
		}
		return err
	},
	Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.Secret); ok && strings.HasSuffix(key.Name, "-pki") && key.Namespace == faults.namespace.Load() {
			faults.hits.Add(1)
			return errors.New("injected: etcdserver: request timed out")
		}
		return c.Get(ctx, key, obj, opts...)
	},
	Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if err := c.Create(ctx, obj, opts...); err != nil {
			return err
		}
		created.Lock()
		defer created.Unlock()
		if created.objects == nil {
			created.objects = map[string]map[string]bool{}
		}
		if created.objects[obj.GetNamespace()] == nil {
			created.objects[obj.GetNamespace()] = map[string]bool{}
		}
		created.objects[obj.GetNamespace()][reflect.TypeOf(obj).Elem().Name()+"/"+obj.GetName()] = true
		return nil
	},
}

func TestMain(m *testing.M) {
	envsuite.Suite{
		Options: ctrl.Options{Cache: CacheOptions()},
		Setup: func(mgr ctrl.Manager) error {
			health := NewHealth()
			r := &Reconciler{
				Client: interceptor.NewClient(withoutWatch{mgr.GetClient()}, intercept), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("nest-manager"),
				ControlPlane:      testOptions,
				HostClusterDomain: "cluster.local",
				Health:            health,
				Workers:           4,
			}
			if err := r.SetupWithManager(mgr); err != nil {
				return err
			}
			prober := &HealthProber{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Tenants: tenants, Health: health, Workers: 4, ProbeTimeout: probeTimeout}
			return prober.SetupWithManager(mgr)
		},
		Started: func(_ *rest.Config, c client.Client) { k8sClient = c },
	}.Main(m)
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, check)
}
