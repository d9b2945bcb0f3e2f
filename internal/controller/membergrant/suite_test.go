package membergrant

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/nestdev/nest/internal/controller/virtualcluster"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/internal/testutil/envsuite"
)

// The suite runs the controller against two real API servers (envtest, our
// builds): the host, where VirtualClusters, MemberClusters and their
// Secrets live, and a second one that stands for every member (the tests
// register it under several MemberCluster names). The membercluster
// controller does not run: the tests write each MemberCluster's status as
// its probe would. The member has no namespace controller, so a deleted
// namespace stays Terminating until a test finalizes it.
var (
	host         client.Client
	member       client.Client
	memberCS     kubernetes.Interface
	memberEnv    *envtest.Environment
	memberConfig *rest.Config
	// memberKubeconfig reaches the member as its admin.
	memberKubeconfig []byte
	// testClock is the controller's clock: tests move it to renew tokens.
	testClock = clocktesting.NewFakePassiveClock(time.Now())
)

// managerNamespace is where the suite's controller reads kubeconfig Secrets.
const managerNamespace = "nest-system"

// kubeconfigSecret holds memberKubeconfig in the manager namespace.
const kubeconfigSecret = "nest-member"

func TestMain(m *testing.M) {
	memberEnv, memberConfig = envsuite.StartMember()
	envsuite.Suite{
		Logs:    true,
		Options: ctrl.Options{Cache: virtualcluster.CacheOptions()},
		Setup: func(mgr ctrl.Manager) error {
			if err := memberSetup(memberConfig); err != nil {
				return err
			}
			return (&Reconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ManagerNamespace: managerNamespace,
				ResyncInterval: 2 * time.Second, RetryInterval: time.Second, RequestTimeout: 5 * time.Second,
				Clock: testClock,
			}).SetupWithManager(mgr)
		},
		Started: func(_ *rest.Config, c client.Client) {
			host = c
			ctx := context.Background()
			err := host.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}})
			if err == nil {
				err = host.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: kubeconfigSecret},
					Data: map[string][]byte{"kubeconfig": memberKubeconfig}})
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "create the manager namespace and the member's kubeconfig Secret:", err)
				os.Exit(1)
			}
		},
		Member: memberEnv,
	}.Main(m)
}

// memberSetup makes the member's clients and admin kubeconfig.
func memberSetup(cfg *rest.Config) error {
	var err error
	if member, err = client.New(cfg, client.Options{}); err != nil {
		return err
	}
	if memberCS, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	admin, err := memberEnv.AddUser(envtest.User{Name: "nest-member-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	memberKubeconfig, err = admin.KubeConfig()
	return err
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, check)
}
