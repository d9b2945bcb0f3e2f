package nodeassignment

import (
	"testing"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/controller/globalnode"
	"github.com/nestdev/nest/internal/controller/virtualcluster"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/internal/testutil/envsuite"
)

// The suite runs this controller and the GlobalNode inventory controller in
// one manager, with nest-manager's cache options, against a real
// kube-apiserver and etcd (our own builds, found through KUBEBUILDER_ASSETS).
// envtest runs no kubelet: tests create Nodes as kubelets would, and the
// inventory makes their GlobalNodes. The VirtualCluster controller does not
// run (it would start tenant control planes); tests stand in for it where
// they need its finalizer or its status writes.
var (
	k8sClient client.Client
	apiReader client.Reader
)

func TestMain(m *testing.M) {
	envsuite.Suite{
		Logs:    true,
		Options: ctrl.Options{Cache: virtualcluster.CacheOptions()},
		Setup: func(mgr ctrl.Manager) error {
			if err := (&globalnode.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
				return err
			}
			// Several workers, so VirtualClusters race for nodes as they
			// would against a second writer.
			return (&Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Workers: 4}).SetupWithManager(mgr)
		},
		Started: func(_ *rest.Config, c client.Client) { k8sClient, apiReader = c, c },
	}.Main(m)
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, check)
}
