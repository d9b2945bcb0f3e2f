package nodeassignment

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nestdev/nest/internal/controller/globalnode"
	"github.com/nestdev/nest/internal/controller/virtualcluster"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/testutil"
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
	cfg       *rest.Config
)

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the controller tests with `make unit`, which points it at our kube-apiserver and etcd builds")
		os.Exit(1)
	}
	// go test shows the manager's logs only when a test fails.
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true)))
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
	}
	var err error
	cfg, err = env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start envtest:", err)
		os.Exit(1)
	}
	code := run(m)
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop envtest:", err)
	}
	os.Exit(code)
}

func run(m *testing.M) int {
	scheme := kube.NewScheme()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Cache: virtualcluster.CacheOptions(), Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := (&globalnode.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Several workers, so VirtualClusters race for nodes as they would
	// against a second writer.
	if err := (&Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Workers: 4}).SetupWithManager(mgr); err != nil {
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
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	apiReader = k8sClient
	return m.Run()
}

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, check)
}
