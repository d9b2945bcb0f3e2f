package globalnode

import (
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/client-go/rest"

	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/internal/testutil/envsuite"
)

// The suite runs the controller in a manager against a real kube-apiserver
// and etcd (our own builds, found through KUBEBUILDER_ASSETS). envtest runs no
// kubelet, so the tests create and edit Nodes as kubelets would, and stand in
// for node promotion where a GlobalNode must be held.
var k8sClient client.Client

func TestMain(m *testing.M) {
	envsuite.Suite{
		Logs: true,
		Setup: func(mgr ctrl.Manager) error {
			return (&Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
		},
		Started: func(_ *rest.Config, c client.Client) { k8sClient = c },
	}.Main(m)
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, check)
}
