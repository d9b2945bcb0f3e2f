package memberusage

import (
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/controller/virtualcluster"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/internal/testutil/envsuite"
)

// The suite runs the controller against two real API servers (envtest, our
// builds): the host, where VirtualClusters, the members Secrets and the
// usage ConfigMaps live, and a member. No grant controller runs: the tests
// write each members Secret as it would, with a token of a service account
// they make in the member. The member has no kubelet: tests create member
// pods and write their status (startTime, phase, finishedAt) themselves.
var (
	host         client.Client
	member       client.Client
	memberCS     kubernetes.Interface
	memberConfig *rest.Config
	// testClock is the controller's clock: tests move it to make running
	// pods count up. Whole seconds, as metav1.Time keeps them.
	testClock = clocktesting.NewFakePassiveClock(time.Now().Truncate(time.Second))
)

// maxRecords is the suite controller's bound on finished records.
const maxRecords = 3

func TestMain(m *testing.M) {
	memberEnv, cfg := envsuite.StartMember()
	memberConfig = cfg
	var err error
	envsuite.Suite{
		Logs:    true,
		Options: ctrl.Options{Cache: virtualcluster.CacheOptions()},
		Setup: func(mgr ctrl.Manager) error {
			if member, err = client.New(memberConfig, client.Options{}); err != nil {
				return err
			}
			if memberCS, err = kubernetes.NewForConfig(memberConfig); err != nil {
				return err
			}
			return (&Reconciler{
				Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
				Interval: 300 * time.Millisecond, MaxRecords: maxRecords, RequestTimeout: 5 * time.Second, Clock: testClock,
			}).SetupWithManager(mgr)
		},
		Started: func(_ *rest.Config, c client.Client) { host = c },
		Member:  memberEnv,
	}.Main(m)
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, check)
}
