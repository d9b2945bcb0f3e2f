// Command nest-manager is the Nest operator: it runs in the host cluster,
// reconciles VirtualClusters into tenant control planes, keeps the
// GlobalNode inventory of promotable host nodes, probes MemberClusters and
// sets VirtualClusters' member grants up in them.
// Flags and wiring only; the controllers live in internal/controller.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/controller/globalnode"
	"github.com/nestdev/nest/internal/controller/membercluster"
	"github.com/nestdev/nest/internal/controller/membergrant"
	"github.com/nestdev/nest/internal/controller/memberusage"
	"github.com/nestdev/nest/internal/controller/nodeassignment"
	"github.com/nestdev/nest/internal/controller/nodepromotion"
	"github.com/nestdev/nest/internal/controller/snapshotschedule"
	"github.com/nestdev/nest/internal/controller/virtualcluster"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/version"
)

// namespaceFile is where a pod finds its own namespace.
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ownNamespace is the namespace the manager runs in, or nest-system outside a pod.
func ownNamespace() string {
	if data, err := os.ReadFile(namespaceFile); err == nil && strings.TrimSpace(string(data)) != "" {
		return strings.TrimSpace(string(data))
	}
	return "nest-system"
}

// cidrsFlag parses a comma-separated CIDR list flag into *dst.
func cidrsFlag(name, usage string, dst *[]netip.Prefix) {
	flag.Func(name, usage, func(s string) error {
		p, err := components.ParseCIDRs(name, s)
		*dst = p
		return err
	})
}

// allowListFlag parses a comma-separated allow-list flag into *dst, which
// holds its default; an empty value is an empty list.
func allowListFlag(name, usage string, dst *[]string) {
	def := strings.Join(*dst, ",")
	if def == "" {
		def = "none"
	}
	flag.Func(name, usage+" (default "+def+")", func(s string) error {
		l, err := contract.ParseAllowList(s)
		*dst = l
		return err
	})
}

func main() {
	if version.HandleFlag(os.Args[1:], "nest-manager", os.Stdout) {
		return
	}
	var (
		metricsAddr, probeAddr, hostDomain, kubeRepository, corednsImage, syncerImage, pullPolicy string
		leaderElect                                                                               bool
		cp                                                                                        controlplane.Options
		workers, probeWorkers                                                                     int
		probeTimeout                                                                              time.Duration
		agentCASecret, hostAPIServer                                                              string
	)
	flag.IntVar(&workers, "max-concurrent-reconciles", 4, "VirtualClusters reconciled at once")
	flag.IntVar(&probeWorkers, "tenant-probe-workers", 8, "tenant API servers probed at once; a slow or dead tenant holds one worker for at most --tenant-probe-timeout")
	flag.DurationVar(&probeTimeout, "tenant-probe-timeout", virtualcluster.DefaultProbeTimeout, "how long one probe of a tenant API server may take")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint; 0 disables it")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	flag.BoolVar(&leaderElect, "leader-elect", true, "elect a leader so only one replica reconciles")
	flag.StringVar(&hostDomain, "host-cluster-domain", "cluster.local", "DNS suffix of the host cluster, named in tenant API server certificates")
	flag.StringVar(&kubeRepository, "kube-image-repository", images.KubeRepository, "repository of the tenant control-plane components' images: a tenant runs REPOSITORY:VERSION, VERSION its spec.kubernetesVersion (one image per supported version)")
	flag.StringVar(&corednsImage, "coredns-image", images.CoreDNS, "image of the tenant CoreDNS in control-plane pods")
	flag.StringVar(&syncerImage, "syncer-image", images.NestSyncer, "image of nest-syncer in control-plane pods")
	flag.StringVar(&pullPolicy, "image-pull-policy", string(corev1.PullIfNotPresent), "pull policy of tenant control-plane images")
	cidrsFlag("host-pod-cidrs", "comma-separated pod CIDRs of the host cluster, such as 10.244.0.0/16: tenant pods cannot reach them, and NodePort tenant API servers take no traffic from them",
		&cp.HostNetwork.PodCIDRs)
	cidrsFlag("host-service-cidrs", "comma-separated Service CIDRs of the host cluster, such as 10.96.0.0/16: tenant pods cannot reach them",
		&cp.HostNetwork.ServiceCIDRs)
	cidrsFlag("host-node-cidrs", "comma-separated CIDRs holding the host nodes' IPs, such as 192.0.2.0/24: tenant pods cannot reach them, and the kubelets' probes and NodePort traffic from them reach tenant API servers",
		&cp.HostNetwork.NodeCIDRs)
	flag.StringVar(&cp.ManagerNamespace, "manager-namespace", ownNamespace(), "namespace of nest-manager, whose pods may reach tenant API servers")
	cp.HostMetadata = contract.MetadataAllowList{Labels: slices.Clone(contract.DefaultHostLabels), Annotations: slices.Clone(contract.DefaultHostAnnotations)}
	allowListFlag("host-label-allowlist", "comma-separated tenant pod label keys copied to host pods for VirtualClusters that set no spec.virtualNode.hostMetadata.labels: whole keys or prefixes ending in *; empty copies none", &cp.HostMetadata.Labels)
	allowListFlag("host-annotation-allowlist", "comma-separated tenant pod annotation keys copied to host pods for VirtualClusters that set no spec.virtualNode.hostMetadata.annotations, as for --host-label-allowlist", &cp.HostMetadata.Annotations)
	flag.Func("image-registry-denylist", "comma-separated registries no tenant image may come from: host, host:port, *.domain, or CIDRs for registries written as addresses; the host's own ranges, loopback, link-local and localhost are always denied", func(s string) error {
		l, err := contract.ParseRegistryList(s)
		cp.ImageRegistryDenylist = l
		return err
	})
	flag.Func("default-service-type", "type of the tenant API server Service of VirtualClusters that set no spec.controlPlane.service.type: NodePort (the default), LoadBalancer (where the host has a LoadBalancer implementation: the kubeconfig then names an address that survives a host node) or ClusterIP", func(s string) error {
		switch t := corev1.ServiceType(s); t {
		case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeClusterIP:
			cp.DefaultServiceType = t
			return nil
		}
		return fmt.Errorf("%q: want NodePort, LoadBalancer or ClusterIP", s)
	})
	var hostVerifiesPullCredentials bool
	flag.BoolVar(&hostVerifiesPullCredentials, "host-verifies-pull-credentials", true, "the host's kubelets check that a pod may use an image another pod pulled with credentials (KubeletEnsureSecretPulledImages, on by default since Kubernetes 1.35); false makes every tenant container pull its image (imagePullPolicy Always), as the AlwaysPullImages admission plugin does")
	flag.StringVar(&cp.NetworkFence, "pod-network-fence", hostAPIService(), "HOST:PORT that the tenant isolation NetworkPolicies refuse (default: the host API server's Service, from this pod's environment): every tenant pod's first init container waits until it is refused, so nothing of a tenant's runs before its pod is isolated; empty turns the fence off, for a host whose network plugin does not enforce NetworkPolicy (tenant pods are then not isolated at all)")
	flag.BoolVar(&cp.NodeNetwork, "node-network-agent", true, "the node network agent (the nest-node-network DaemonSet) runs on the host nodes: hostNetwork tenant pods get the virtual node's address and host ports; false leaves them on the pod network only")
	flag.StringVar(&agentCASecret, "agent-ca-secret", nodepromotion.DefaultAgentCASecret, "Secret in --manager-namespace holding the nest-agent CA (tls.crt, tls.key), from which the manager issues its own agent client certificate; empty turns node promotion off")
	flag.StringVar(&hostAPIServer, "host-api-server", "", "the host API server's URL as host nodes reach it, such as https://192.0.2.10:6443; a released node joins the host there (default: discovered at start from kube-public/cluster-info, else the default/kubernetes EndpointSlice; node promotion is off when neither has one)")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")
	if len(cp.HostNetwork.PodCIDRs) == 0 || len(cp.HostNetwork.NodeCIDRs) == 0 {
		log.Info("Host pod or node CIDRs not given: tenant pods are kept only from the private address ranges, and tenant API servers take no probes from other nodes; set --host-pod-cidrs, --host-service-cidrs and --host-node-cidrs",
			"podCIDRs", cp.HostNetwork.PodCIDRs, "nodeCIDRs", cp.HostNetwork.NodeCIDRs)
	}
	cp.AlwaysPullImages = !hostVerifiesPullCredentials
	cp.KubeImageRepository, cp.SyncerImage, cp.CoreDNSImage, cp.ImagePullPolicy = kubeRepository, syncerImage, corednsImage, corev1.PullPolicy(pullPolicy)

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
	health := virtualcluster.NewHealth()
	r := &virtualcluster.Reconciler{
		Client:            mgr.GetClient(),
		APIReader:         mgr.GetAPIReader(),
		Scheme:            scheme,
		Recorder:          mgr.GetEventRecorder("nest-manager"),
		ControlPlane:      cp,
		HostClusterDomain: hostDomain,
		Health:            health,
		Workers:           workers,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up controller", "controller", "virtualcluster")
		os.Exit(1)
	}
	prober := &virtualcluster.HealthProber{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Tenants: virtualcluster.APITenants{}, Health: health, Workers: probeWorkers, ProbeTimeout: probeTimeout}
	if err := prober.SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up controller", "controller", "virtualcluster-health")
		os.Exit(1)
	}
	if err := (&globalnode.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up controller", "controller", "globalnode")
		os.Exit(1)
	}
	if err := (&nodeassignment.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up controller", "controller", "nodeassignment")
		os.Exit(1)
	}
	// Member kubeconfig Secrets are read only in the manager's namespace.
	if err := (&membercluster.Reconciler{Client: mgr.GetClient(), ManagerNamespace: cp.ManagerNamespace}).SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up controller", "controller", "membercluster")
		os.Exit(1)
	}
	// Member grants: each VirtualCluster's namespace, quota and syncer
	// token in its members, set up with the members' admin kubeconfigs.
	if err := (&membergrant.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), ManagerNamespace: cp.ManagerNamespace, Workers: workers,
	}).SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up controller", "controller", "membergrant")
		os.Exit(1)
	}
	// Member usage (billing): each grant's member pods, listed with the
	// grant's own token, recorded on the host and summed into the status
	// and the metrics.
	if err := (&memberusage.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up controller", "controller", "memberusage")
		os.Exit(1)
	}
	// Scheduled snapshots (spec.snapshots), staged in /tmp (an emptyDir)
	// and pushed to the schedule's OCI repository.
	if err := (&snapshotschedule.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("nest-manager"), NestVersion: version.Nest,
	}).SetupWithManager(mgr); err != nil {
		log.Error(err, "Unable to set up controller", "controller", "snapshotschedule")
		os.Exit(1)
	}
	if agentCASecret == "" {
		log.Info("Node promotion is off: --agent-ca-secret is empty")
	} else if err := setupNodePromotion(mgr, client.ObjectKey{Namespace: cp.ManagerNamespace, Name: agentCASecret}, hostAPIServer, pullProxyDeny(cp)); err != nil {
		log.Error(err, "Unable to set up controller", "controller", "nodepromotion")
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

// pullProxyDeny is what the agent of a node in a tenant denies its pull
// proxy (nodepromotion.Reconciler.PullProxyDeny): nil, no proxy, when the
// host runs no node network agent, whose proxy the nodes' containerd would
// name.
func pullProxyDeny(cp controlplane.Options) []string {
	if !cp.NodeNetwork {
		return nil
	}
	return controlplane.PullProxyDeny(cp)
}

// setupNodePromotion registers the node promotion controller, which reaches
// agents with a certificate from the agent CA in caSecret, and asks the
// agents of nodes in tenants to serve a pull proxy denying pullDeny.
func setupNodePromotion(mgr ctrl.Manager, caSecret client.ObjectKey, hostAPIServer string, pullDeny []string) error {
	cfg := mgr.GetConfig()
	hostCA := cfg.CAData
	if len(hostCA) == 0 && cfg.CAFile != "" {
		data, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return fmt.Errorf("the host API server's CA: %w", err)
		}
		hostCA = data
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	log := ctrl.Log.WithName("setup")
	if hostAPIServer == "" {
		// Once, at start: a released node counts as home only while it
		// joins the same URL.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if hostAPIServer, err = nodepromotion.DiscoverHostServer(ctx, cs); err != nil {
			log.Info("Node promotion is off: no host API server address for released nodes to join", "reason", err.Error())
			return nil
		}
		log.Info("Released nodes join the host at the discovered API server", "server", hostAPIServer)
	}
	return (&nodepromotion.Reconciler{
		Client:        mgr.GetClient(),
		HostClient:    cs,
		Agents:        &nodepromotion.SecretAgents{Client: mgr.GetAPIReader(), Secret: caSecret},
		Tenants:       nodepromotion.APITenants{Client: mgr.GetClient()},
		Host:          nodepromotion.HostJoin{Server: hostAPIServer, CACertPEM: hostCA},
		PullProxyDeny: pullDeny,
	}).SetupWithManager(mgr)
}

func must(err error) {
	if err != nil {
		ctrl.Log.Error(err, "Setup failed")
		os.Exit(1)
	}
}

// hostAPIService is the host API server's Service as pods reach it, from
// the environment the kubelet gives every pod; "" outside a pod.
func hostAPIService() string {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return ""
	}
	return net.JoinHostPort(host, port)
}
