// Package envsuite runs a package's controller tests in a controller-runtime
// manager against a real kube-apiserver and etcd: envtest with our own
// builds, found through KUBEBUILDER_ASSETS (`make unit` sets it), and the
// CRDs in config/crd.
package envsuite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nestdev/nest/internal/kube"
)

// Suite is one package's envtest setup.
type Suite struct {
	// Options are the manager's. Scheme (Nest's) and Metrics (off) are
	// filled in.
	Options ctrl.Options
	// Setup registers the package's controllers with the manager.
	Setup func(mgr ctrl.Manager) error
	// Started receives the API server's config and a client that reads it
	// directly, once the manager runs and before the tests do.
	Started func(cfg *rest.Config, c client.Client)
	// Logs sends the manager's logs to stderr, which go test shows only
	// for a failed test.
	Logs bool
	// Stop, when set, runs after the tests and before envtest stops.
	Stop func()
	// Member, when set, is a second environment the package started with
	// StartMember; it is stopped after the tests.
	Member *envtest.Environment
}

// StartMember starts a second API server and etcd, without Nest's CRDs,
// that stands for a member cluster, and returns it with its admin config.
// It exits the test binary when KUBEBUILDER_ASSETS is unset or the start
// fails, as Main does. Hand it to Suite.Member to have it stopped.
func StartMember() (*envtest.Environment, *rest.Config) {
	requireAssets()
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the member's envtest:", err)
		os.Exit(1)
	}
	return env, cfg
}

func requireAssets() {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the controller tests with `make unit`, which points it at our kube-apiserver and etcd builds")
		os.Exit(1)
	}
}

// Main starts envtest, the manager and the tests, stops envtest and exits
// with the tests' code. It fails at once when KUBEBUILDER_ASSETS is unset.
func (s Suite) Main(m *testing.M) {
	requireAssets()
	if s.Logs {
		ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	}
	env := &envtest.Environment{
		// Relative to the test's package: internal/controller/<name>.
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start envtest:", err)
		os.Exit(1)
	}
	code := s.run(m, cfg)
	if s.Stop != nil {
		s.Stop()
	}
	if s.Member != nil {
		if err := s.Member.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the member's envtest:", err)
		}
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop envtest:", err)
	}
	os.Exit(code)
}

func (s Suite) run(m *testing.M, cfg *rest.Config) int {
	opts := s.Options
	opts.Scheme = kube.NewScheme()
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := s.Setup(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	c, err := client.New(cfg, client.Options{Scheme: opts.Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if s.Started != nil {
		s.Started(cfg, c)
	}
	return m.Run()
}
