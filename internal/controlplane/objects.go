package controlplane

import (
	"fmt"
	"path"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/syncer"
)

// Options are the operator-wide settings the builders need.
type Options struct {
	// KubeImage is the Kubernetes multi-call image (etcd and every control-plane binary).
	KubeImage string
	// SyncerImage runs nest-syncer; CoreDNSImage the tenant's CoreDNS.
	SyncerImage, CoreDNSImage string
	// ImagePullPolicy of the control-plane containers.
	ImagePullPolicy corev1.PullPolicy
	// HostNetwork holds the host cluster's address ranges, which tenant
	// pods may not reach.
	HostNetwork HostNetwork
	// ManagerNamespace is nest-manager's namespace; its pods may reach
	// tenant API servers.
	ManagerNamespace string
	// HostMetadata is the allow-list of tenant label and annotation keys
	// copied to host pods when a VirtualCluster names none
	// (spec.virtualNode.hostMetadata unset).
	HostMetadata syncer.MetadataAllowList
	// NodeNetwork says the node network agent runs on the host nodes:
	// hostNetwork tenant pods then get the virtual node's address and host
	// ports (syncer.Translator.NodeNetwork).
	NodeNetwork bool
}

// controlPlaneNodeLabel marks host nodes meant for control planes; tenant
// control planes prefer them, as in kubenest, so promoted worker nodes never
// carry one.
const controlPlaneNodeLabel = "node-role.kubernetes.io/control-plane"

const etcdDataDir = "/var/lib/etcd"

// controlPlaneUID is the user and group the control-plane containers run as.
const controlPlaneUID int64 = 65532

// ServiceFor returns the Service in front of the tenant API server.
func ServiceFor(vc *nestv1.VirtualCluster) *corev1.Service {
	n := NamesOf(vc)
	typ := corev1.ServiceType(vc.Spec.ControlPlane.Service.Type)
	if typ == "" {
		typ = corev1.ServiceTypeNodePort
	}
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: n.Service(), Namespace: n.Namespace, Labels: n.Labels()},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: n.Labels(),
			Ports: []corev1.ServicePort{{
				Name: "https", Port: Port, TargetPort: intstr.FromInt32(Port), Protocol: corev1.ProtocolTCP,
			}},
		},
	}
}

// StatefulSetFor returns the StatefulSet that runs the tenant control plane:
// one pod with etcd (data on a PersistentVolumeClaim), kube-apiserver,
// nest-syncer, kube-controller-manager, kube-scheduler and CoreDNS. ips are
// the host ClusterIPs of the API server's and CoreDNS' Services.
func StatefulSetFor(vc *nestv1.VirtualCluster, o Options, ips ServiceIPs) *appsv1.StatefulSet {
	n := NamesOf(vc)
	pod := corev1.PodSpec{
		// etcd and kube-apiserver are sidecars: the kubelet starts them in
		// order and starts the rest only once the API server's startup probe
		// (/readyz) passes, so nothing crash-loops on an API server that is
		// not up yet.
		InitContainers: []corev1.Container{sidecar(etcdContainer(n, o)), sidecar(apiServerContainer(vc, o))},
		Containers:     []corev1.Container{controllerManagerContainer(o), schedulerContainer(o), syncerContainer(vc, o, ips), coreDNSContainer(o)},
		Volumes: append([]corev1.Volume{
			secretVolume("pki", n.PKISecret()),
			secretVolume("kubeconfig", n.ComponentKubeconfigSecret()),
		}, virtualNodeVolumes(n)...),
		ServiceAccountName: n.SyncerServiceAccount(),
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight:     100,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: controlPlaneNodeLabel, Operator: corev1.NodeSelectorOpExists}}},
			}},
		}},
		Tolerations:                  []corev1.Toleration{{Key: controlPlaneNodeLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		AutomountServiceAccountToken: ptr.To(false),
		// The control plane needs no privilege: it runs as a fixed non-root
		// user that owns its secrets and etcd volume through fsGroup.
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To(controlPlaneUID),
			RunAsGroup:     ptr.To(controlPlaneUID),
			FSGroup:        ptr.To(controlPlaneUID),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		EnableServiceLinks: ptr.To(false),
		// kube-apiserver drains watches for a long time on SIGTERM.
		TerminationGracePeriodSeconds: ptr.To[int64](10),
	}
	claim := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: EtcdVolumeClaimTemplate, Labels: n.Labels()},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: vc.Spec.Datastore.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: storageSize(vc)}},
		},
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: n.StatefulSet(), Namespace: n.Namespace, Labels: n.Labels()},
		Spec: appsv1.StatefulSetSpec{
			Replicas:             ptr.To[int32](1),
			ServiceName:          n.Service(),
			Selector:             &metav1.LabelSelector{MatchLabels: n.Labels()},
			Template:             corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: n.Labels()}, Spec: pod},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{claim},
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				// Tenant data is deleted only with the VirtualCluster; the
				// finalizer deletes the claim explicitly.
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
		},
	}
}

func sidecar(c corev1.Container) corev1.Container {
	c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	return c
}

func storageSize(vc *nestv1.VirtualCluster) resource.Quantity {
	if vc.Spec.Datastore.StorageSize != nil {
		return *vc.Spec.Datastore.StorageSize
	}
	return resource.MustParse("1Gi")
}

func secretVolume(name, secret string) corev1.Volume {
	// Group-readable: the files belong to root and to the pod's fsGroup.
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr.To[int32](0o440)}}}
}

func pkiFile(f string) string { return tenantPKI.Path(f) }

func mounts(withEtcd bool) []corev1.VolumeMount {
	m := []corev1.VolumeMount{{Name: "pki", MountPath: PKIDir, ReadOnly: true}, {Name: "kubeconfig", MountPath: KubeconfigDir, ReadOnly: true}}
	if withEtcd {
		m = append(m, corev1.VolumeMount{Name: EtcdVolumeClaimTemplate, MountPath: etcdDataDir})
	}
	return m
}

// container returns a control-plane container with the resources r and its
// Go runtime tuned for them (goRuntimeEnv).
func container(name string, o Options, r corev1.ResourceRequirements, args []string) corev1.Container {
	return corev1.Container{
		Name: name, Image: o.KubeImage, ImagePullPolicy: o.ImagePullPolicy,
		Command: []string{"/usr/local/bin/" + name}, Args: args,
		Resources: r,
		Env:       goRuntimeEnv(r),
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
}

// tenantEtcd is the tenant's etcd member. Unlike the host's it requires TLS
// client certificates: every container of the control-plane pod shares its
// loopback, and only the API server holds an etcd client certificate.
func tenantEtcd(n Names) components.Etcd {
	return components.Etcd{
		Name: n.VirtualCluster, DataDir: etcdDataDir + "/data", TLS: true, PKI: tenantPKI,
		// Tenant only: etcd runs under a memory limit here, and the raft log
		// it keeps in memory grows with the commits between snapshots. 10000
		// is also etcd 3.6's default; stating it keeps it should that move.
		SnapshotCount: 10000,
	}
}

func etcdContainer(n Names, o Options) corev1.Container {
	c := container(etcdName, o, componentResources[etcdName], tenantEtcd(n).Flags().Args())
	c.VolumeMounts = mounts(true)
	c.LivenessProbe = loopbackProbe(components.EtcdMetricsPort, "/health?serializable=true", 10, 8)
	c.StartupProbe = loopbackProbe(components.EtcdMetricsPort, "/health?serializable=false", 1, 60)
	return c
}

func apiServerContainer(vc *nestv1.VirtualCluster, o Options) corev1.Container {
	r := apiServerResources(vc)
	readOnly, mutating := APIServerInflight(r.Limits[corev1.ResourceMemory])
	args := components.APIServer{
		// The pod IP, which the kubelet substitutes from POD_IP.
		AdvertiseAddress: "$(POD_IP)",
		Port:             Port,
		PKI:              tenantPKI,
		Etcd:             tenantEtcd(NamesOf(vc)),
		ServiceCIDR:      serviceCIDR(vc),
		ClusterDomain:    ClusterDomain(vc),
	}.Flags()
	// Tenant only: the container's memory limit bounds the requests the API
	// server may serve at once (APIServerInflight).
	args = append(args,
		components.Flag{Name: "max-requests-inflight", Value: fmt.Sprint(readOnly)},
		components.Flag{Name: "max-mutating-requests-inflight", Value: fmt.Sprint(mutating)},
		// Tenant only: admission webhooks and aggregated API servers run in
		// tenant pods behind tenant Services. The API server dials their
		// endpoints, host pod IPs the control-plane pod reaches, rather than
		// the Service's tenant ClusterIP, which the host need not route.
		components.Flag{Name: "enable-aggregator-routing", Value: "true"},
	)
	c := container(apiServerName, o, r, args.Args())
	c.Env = append(c.Env, podIPEnv())
	c.VolumeMounts = mounts(false)
	c.Ports = []corev1.ContainerPort{{Name: "https", ContainerPort: Port}}
	c.StartupProbe = httpProbe("/readyz", Port, corev1.URISchemeHTTPS, 1, 120)
	c.ReadinessProbe = httpProbe("/readyz", Port, corev1.URISchemeHTTPS, 2, 3)
	c.LivenessProbe = httpProbe("/livez", Port, corev1.URISchemeHTTPS, 10, 8)
	return c
}

// podIPEnv is POD_IP, the pod's IP, for $(POD_IP) in arguments.
func podIPEnv() corev1.EnvVar {
	return corev1.EnvVar{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}
}

// clientComponent is the controller-manager or scheduler with the kubeconfig
// kubeconfigFile. Unlike the host's, its HTTPS endpoint listens on the pod IP,
// where the kubelet probes it.
func clientComponent(kubeconfigFile string) components.ClientComponent {
	return components.ClientComponent{Kubeconfig: path.Join(KubeconfigDir, kubeconfigFile), BindAddress: "0.0.0.0"}
}

func controllerManagerContainer(o Options) corev1.Container {
	args := components.ControllerManagerFlags(clientComponent(ControllerManagerKubeconfig), tenantPKI)
	c := container(controllerManagerName, o, componentResources[controllerManagerName], args.Args())
	c.VolumeMounts = mounts(false)
	c.LivenessProbe = httpProbe("/healthz", controllerManagerPort, corev1.URISchemeHTTPS, 10, 8)
	return c
}

func schedulerContainer(o Options) corev1.Container {
	args := append(components.SchedulerFlags(clientComponent(SchedulerKubeconfig)),
		// Tenant only: the default client limit (50 requests/s) would cap
		// how fast a burst of tenant pods is bound to the virtual node.
		components.Flag{Name: "kube-api-qps", Value: "200"}, components.Flag{Name: "kube-api-burst", Value: "400"},
	)
	c := container(schedulerName, o, componentResources[schedulerName], args.Args())
	c.VolumeMounts = mounts(false)
	c.LivenessProbe = httpProbe("/healthz", schedulerPort, corev1.URISchemeHTTPS, 10, 8)
	return c
}

func httpProbe(p string, port int32, scheme corev1.URIScheme, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: p, Port: intstr.FromInt32(port), Scheme: scheme}},
		PeriodSeconds:    period,
		FailureThreshold: failures,
		TimeoutSeconds:   5,
	}
}

// probeTimeout bounds one exec probe's HTTP request (nest-probe -timeout);
// the kubelet waits a second longer, so nest-probe's reason reaches the
// probe's event.
const probeTimeout = 5 * time.Second

// loopbackProbe runs nest-probe, from the container's image, against
// http://127.0.0.1:port/path: for servers that listen on loopback only, out
// of reach of the kubelet's HTTP probes and of other pods.
func loopbackProbe(port int, path string, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{
			images.ProbePath, "-timeout=" + probeTimeout.String(), fmt.Sprintf("http://127.0.0.1:%d%s", port, path),
		}}},
		PeriodSeconds:    period,
		FailureThreshold: failures,
		TimeoutSeconds:   int32(probeTimeout/time.Second) + 1,
	}
}

func serviceCIDR(vc *nestv1.VirtualCluster) string {
	if vc.Spec.ServiceCIDR != "" {
		return vc.Spec.ServiceCIDR
	}
	return "10.96.0.0/16"
}

// EndpointsOf gathers what the serving certificate must name, from the
// VirtualCluster, its Service, its in-cluster Service's IP (ips.DNS) and the
// host nodes' IPs.
func EndpointsOf(vc *nestv1.VirtualCluster, svc *corev1.Service, ips ServiceIPs, nodeIPs []string, hostDomain string) Endpoints {
	e := Endpoints{
		ServiceIP:           svc.Spec.ClusterIP,
		InClusterIP:         ips.DNS,
		ExternalIPs:         vc.Spec.ExternalIPs,
		HostClusterDomain:   hostDomain,
		TenantClusterDomain: vc.Spec.ClusterDomain,
		TenantServiceCIDR:   serviceCIDR(vc),
	}
	if svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		e.NodeIPs = nodeIPs
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP != "" {
			e.LoadBalancerIPs = append(e.LoadBalancerIPs, ing.IP)
		}
	}
	return e
}

// ExternalServer returns the URL tenants use, or "" while it is not known yet
// (a LoadBalancer with no address). NodePort uses the first external IP, else
// the first node IP; ClusterIP uses the in-cluster name.
func ExternalServer(vc *nestv1.VirtualCluster, svc *corev1.Service, nodeIPs []string) string {
	n := NamesOf(vc)
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		host := ""
		if len(vc.Spec.ExternalIPs) > 0 {
			host = vc.Spec.ExternalIPs[0]
		} else if len(nodeIPs) > 0 {
			host = nodeIPs[0]
		}
		if host == "" || len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].NodePort == 0 {
			return ""
		}
		return fmt.Sprintf("https://%s:%d", hostPort(host), svc.Spec.Ports[0].NodePort)
	case corev1.ServiceTypeLoadBalancer:
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				return fmt.Sprintf("https://%s:%d", hostPort(ing.IP), Port)
			}
			if ing.Hostname != "" {
				return fmt.Sprintf("https://%s:%d", ing.Hostname, Port)
			}
		}
		return ""
	default:
		return n.InternalServer()
	}
}

// hostPort brackets IPv6 addresses for use in a URL.
func hostPort(ip string) string {
	for _, c := range ip {
		if c == ':' {
			return "[" + ip + "]"
		}
	}
	return ip
}
