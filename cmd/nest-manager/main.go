// Command nest-manager is the Nest operator: it runs in the host cluster and
// reconciles VirtualClusters into tenant control planes. Flags and wiring only;
// the controllers live in internal/controller.
package main

import (
	"flag"
	"os"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nestdev/nest/internal/controller/virtualcluster"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/kube"
)

func main() {
	var (
		metricsAddr, probeAddr, hostDomain, kubeImage, corednsImage, syncerImage, pullPolicy string
		leaderElect                                                                          bool
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint; 0 disables it")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	flag.BoolVar(&leaderElect, "leader-elect", true, "elect a leader so only one replica reconciles")
	flag.StringVar(&hostDomain, "host-cluster-domain", "cluster.local", "DNS suffix of the host cluster, named in tenant API server certificates")
	flag.StringVar(&kubeImage, "kube-image", images.Kube, "image of the tenant control-plane components")
	flag.StringVar(&corednsImage, "coredns-image", images.CoreDNS, "image of the tenant CoreDNS in control-plane pods")
	flag.StringVar(&syncerImage, "syncer-image", images.NestSyncer, "image of nest-syncer in control-plane pods")
	flag.StringVar(&pullPolicy, "image-pull-policy", string(corev1.PullIfNotPresent), "pull policy of tenant control-plane images")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	scheme := kube.NewScheme()

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                        scheme,
		Cache:                         virtualcluster.CacheOptions(),
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                leaderElect,
		LeaderElectionID:              "nest-manager.nest.dev",
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		log.Error(err, "Unable to create manager")
		os.Exit(1)
	}
	r := &virtualcluster.Reconciler{
		Client:            mgr.GetClient(),
		APIReader:         mgr.GetAPIReader(),
		Scheme:            scheme,
		Recorder:          mgr.GetEventRecorder("nest-manager"),
		ControlPlane:      controlplane.Options{KubeImage: kubeImage, SyncerImage: syncerImage, CoreDNSImage: corednsImage, ImagePullPolicy: corev1.PullPolicy(pullPolicy)},
		HostClusterDomain: hostDomain,
		Tenants:           virtualcluster.APITenants{},
	}
	if err := r.SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up controller", "controller", "virtualcluster")
		os.Exit(1)
	}
	must(mgr.AddHealthzCheck("healthz", healthz.Ping))
	must(mgr.AddReadyzCheck("readyz", healthz.Ping))
	log.Info("Starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Manager exited")
		os.Exit(1)
	}
}

func must(err error) {
	if err != nil {
		ctrl.Log.Error(err, "Setup failed")
		os.Exit(1)
	}
}
