package controlplane

import (
	"cmp"
	"net/netip"
	"path"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/version"
)

// SyncerClusterRole is the ClusterRole installed with Nest that holds
// nest-syncer's host permissions; each tenant's RoleBinding grants it in the
// tenant's host namespace only.
const SyncerClusterRole = "nest-syncer"

// TenantPriorityClass is the host PriorityClass of every tenant pod, installed
// with Nest. The tenant's host ResourceQuota selects pods by it, so the
// control-plane pod does not count against the tenant's share.
const TenantPriorityClass = "nest-tenant-workload"

// VirtualNodeName is the virtual node's name in every tenant cluster.
const VirtualNodeName = "nest-virtual-node"

// dnsDir is the emptyDir the syncer writes CoreDNS' hosts file to;
// corefileDir holds the Corefile from the DNS ConfigMap.
const (
	dnsDir       = "/var/run/nest-dns"
	corefileDir  = "/etc/coredns"
	corefileName = "Corefile"
	// zoneFileName holds the reverse zones' SOA (contract.ZoneFile).
	zoneFileName = "reverse-zone"
)

// hostTokenDir is where client-go's in-cluster configuration looks for the
// syncer's host credentials.
const hostTokenDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// defaultShare is the virtual node's capacity for names the VirtualCluster
// leaves out.
var defaultShare = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("2"),
	corev1.ResourceMemory: resource.MustParse("4Gi"),
	corev1.ResourcePods:   resource.MustParse("110"),
}

// Share returns the tenant's share of host capacity: spec.promoteResources.resources
// with defaults for cpu, memory and pods.
func Share(vc *nestv1.VirtualCluster) corev1.ResourceList {
	out := defaultShare.DeepCopy()
	for name, q := range vc.Spec.PromoteResources.Resources {
		out[name] = q.DeepCopy()
	}
	return out
}

// DNSConfigMapFor returns the ConfigMap with the tenant CoreDNS' Corefile. It
// comes from the controller, not the syncer, so CoreDNS starts with the
// control plane whatever the syncer is doing.
func DNSConfigMapFor(vc *nestv1.VirtualCluster) *corev1.ConfigMap {
	n := NamesOf(vc)
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: n.DNSConfigMap(), Namespace: n.Namespace, Labels: n.Labels()},
		Data: map[string]string{
			corefileName: contract.Corefile(contract.DefaultDNSPort, path.Join(dnsDir, contract.HostsFileName), path.Join(dnsDir, contract.ZoneFileName),
				path.Join(corefileDir, zoneFileName), ClusterDomain(vc), contract.DefaultDNSHealthPort),
			zoneFileName: contract.ZoneFile(ClusterDomain(vc)),
		},
	}
}

// KubernetesServicePort is the port of the tenant's "kubernetes" Service,
// which the in-cluster Service (DNSServiceFor) repeats for host pods.
const KubernetesServicePort = 443

// DNSServiceFor returns the in-cluster Service: what tenant pods on the host
// reach the control-plane pod at, the tenant CoreDNS on port 53 and the API
// server on KubernetesServicePort, as the tenant's kube-dns and kubernetes
// Services promise. With the port the tenant sees, the KUBERNETES_PORT_443_TCP
// variables the host kubelet sets describe the tenant API server once the
// syncer sets them (see contract.Translation).
func DNSServiceFor(vc *nestv1.VirtualCluster) *corev1.Service {
	n := NamesOf(vc)
	target := intstr.FromInt32(contract.DefaultDNSPort)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: n.DNSService(), Namespace: n.Namespace, Labels: n.Labels()},
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			Selector:                 n.Labels(),
			PublishNotReadyAddresses: publishNotReady(vc),
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, TargetPort: target, Protocol: corev1.ProtocolUDP},
				{Name: "dns-tcp", Port: 53, TargetPort: target, Protocol: corev1.ProtocolTCP},
				{Name: "https", Port: KubernetesServicePort, TargetPort: intstr.FromInt32(Port), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// SyncerServiceAccountFor is nest-syncer's host identity.
func SyncerServiceAccountFor(vc *nestv1.VirtualCluster) *corev1.ServiceAccount {
	n := NamesOf(vc)
	return &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: n.SyncerServiceAccount(), Namespace: n.Namespace, Labels: n.Labels()},
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// SyncerRoleBindingFor grants the nest-syncer ClusterRole to the syncer in
// the tenant's host namespace, and nowhere else.
func SyncerRoleBindingFor(vc *nestv1.VirtualCluster) *rbacv1.RoleBinding {
	n := NamesOf(vc)
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: n.SyncerServiceAccount(), Namespace: n.Namespace, Labels: n.Labels()},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: SyncerClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: n.SyncerServiceAccount(), Namespace: n.Namespace}},
	}
}

// ServiceIPs are the host ClusterIPs of the control plane's two Services.
type ServiceIPs struct {
	// APIServer is the Service clients outside the tenant use (kubeconfigs).
	APIServer string
	// DNS is the in-cluster Service (DNSServiceFor): host pods reach the
	// tenant's DNS and API server there.
	DNS string
}

func syncerOptions(vc *nestv1.VirtualCluster, opts Options, ips ServiceIPs) contract.Flags {
	o := contract.Flags{
		Translation: contract.Translation{
			VirtualCluster: vc.Name, VirtualClusterUID: vc.UID, HostNamespace: vc.Namespace, ClusterDomain: ClusterDomain(vc),
			APIServerHost: ips.DNS, APIServerPort: KubernetesServicePort, DNSServer: ips.DNS,
			NodeName: VirtualNodeName, PriorityClassName: TenantPriorityClass,
			DefaultLimits:    DefaultContainerLimits(vc),
			HostServiceCIDRs: opts.HostNetwork.ServiceCIDRs,
			// nest-syncer's own image, pulled as the control plane's are.
			HelperImage: opts.SyncerImage, HelperImagePullPolicy: opts.ImagePullPolicy,
			ConfinePrivileged:     vc.Spec.VirtualNode.PrivilegedContainers == nestv1.PrivilegedContainersConfine,
			NodeNetwork:           opts.NodeNetwork,
			MaxGracePeriodSeconds: ptr.Deref(vc.Spec.VirtualNode.MaxTerminationGracePeriodSeconds, contract.DefaultMaxGracePeriodSeconds),
			Images:                contract.ImagePolicy{Allowed: slices.Clone(vc.Spec.VirtualNode.ImageRegistries), Denied: imageDenylist(opts)},
			AlwaysPullImages:      opts.AlwaysPullImages,
			NetworkFence:          opts.NetworkFence,
		},
		// The kubelet substitutes the pod IP: the virtual node's address.
		NodeIP:           "$(POD_IP)",
		LeaderElect:      leaderElect(vc),
		TenantKubeconfig: path.Join(KubeconfigDir, SyncerKubeconfig),
		Capacity:         Share(vc),
		VirtualNodes:     int(ptr.Deref(vc.Spec.VirtualNode.Count, 1)),
		PodSecurityLevel: PodSecurityLevel(vc), KubernetesVersion: versionsOf(vc, opts).Controllers,
		// Only the kubelet-client CA: the tenant's CSR API signs with the
		// cluster CA, so a certificate a tenant mints is refused.
		ServingCert: pkiFile(SyncerServingCert), ServingKey: pkiFile(SyncerServingKey), ClientCA: pkiFile(KubeletClientCACert),
		DNSDir:          dnsDir,
		HostMetadata:    hostMetadata(vc, opts),
		DataBudgetBytes: BudgetOf(vc).DataBytes,
		// The socket the API server's egress selector configuration names.
		EgressProxySocket: EgressProxySocket,
	}
	// spec.network.egressCIDRs is checked by the CRD; a value that is no
	// CIDR leaves no block, so every tenant ipBlock is cut.
	o.EgressBlocks, _ = EgressBlocks(vc, opts)
	// The ranges the base policies keep out of EgressBlocks: a tenant
	// ipBlock that covers them also means the tenant's own pods.
	o.HostPodCIDRs = slices.Clone(opts.HostNetwork.PodCIDRs)
	o.StorageClasses, _ = StorageClassesFor(vc, opts.HostStorageClasses)
	if o.LeaderElect {
		o.Identity = "$(POD_NAME)"
	}
	if d := vc.Spec.VirtualNode.NodeDisk; d != nil {
		o.NodeDisk = &contract.NodeDisk{Size: d.Size, StorageClassName: ptr.Deref(d.StorageClassName, "")}
	}
	if d := vc.Spec.VirtualNode.TokenMaxAge; d != nil {
		o.TokenMaxAge = d.Duration
	} else {
		o.TokenMaxAge = contract.DefaultTokenMaxAge
	}
	return o
}

// imageDenylist is the platform's image registry deny list and the host's
// own ranges, or, while the host's pod and node ranges are not known, every
// private range, as for tenant egress (egressBlocks).
func imageDenylist(o Options) []string {
	ranges := o.HostNetwork.all()
	if len(o.HostNetwork.PodCIDRs) == 0 || len(o.HostNetwork.NodeCIDRs) == 0 {
		ranges = append(ranges, privateRanges...)
	}
	out := slices.Clone(o.ImageRegistryDenylist)
	for _, r := range ranges {
		out = append(out, r.String())
	}
	return out
}

// PullProxyDeny is the deny list of the pull proxy a promoted node's
// nest-agent serves (agent.PullProxy.Deny): the CIDRs of the image
// registry deny list nest-syncer gets (the platform's denied CIDRs and the
// host's own ranges, or every private range while those are not known),
// as masked CIDR strings such as "10.244.0.0/16". Registry names in the
// list are left out: the proxy checks the addresses it dials. Never nil.
func PullProxyDeny(o Options) []string {
	out := []string{}
	for _, e := range imageDenylist(o) {
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked().String())
		}
	}
	return out
}

// hostMetadata is spec.virtualNode.hostMetadata, each unset list taking the
// manager's default.
func hostMetadata(vc *nestv1.VirtualCluster, o Options) contract.MetadataAllowList {
	out := contract.MetadataAllowList{Labels: slices.Clone(o.HostMetadata.Labels), Annotations: slices.Clone(o.HostMetadata.Annotations)}
	if m := vc.Spec.VirtualNode.HostMetadata; m != nil {
		if m.Labels != nil {
			out.Labels = slices.Clone(m.Labels)
		}
		if m.Annotations != nil {
			out.Annotations = slices.Clone(m.Annotations)
		}
	}
	return out
}

func syncerContainer(vc *nestv1.VirtualCluster, o Options, ips ServiceIPs) corev1.Container {
	c := container(syncerName, o, componentResources[syncerName], syncerOptions(vc, o, ips).Args())
	c.Image, c.Command = o.SyncerImage, []string{contract.SyncerBinary}
	c.Env = append(c.Env, podIPEnv(), podNameEnv())
	c.VolumeMounts = append(mounts(false),
		corev1.VolumeMount{Name: "dns", MountPath: dnsDir},
		corev1.VolumeMount{Name: "host-token", MountPath: hostTokenDir, ReadOnly: true},
		egressMount(false),
	)
	// Liveness only, no startup or readiness probe: the pod's readiness gates
	// the tenant API server's Service, and the syncer must never cut tenants
	// off their API, even while it waits for it.
	c.LivenessProbe = loopbackProbe(contract.DefaultHealthPort, "/healthz", 10, 6)
	if Replicas(vc) > 1 {
		// nest-syncer serves the API server's egress (logs, exec, port
		// forwarding) and the virtual node's kubelet API. A deleted
		// replica leaves the Service's endpoints a moment after it is
		// deleted, while a client may still reach its API server; the
		// kubelet stops this container before the API server (a
		// sidecar), so it keeps serving for that moment, as the API
		// server's --shutdown-delay-duration does for itself.
		c.Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: int64(shutdownDelay / time.Second)}}}
	}
	return c
}

func coreDNSContainer(o Options) corev1.Container {
	c := container(coreDNSName, o, componentResources[coreDNSName], []string{"-conf", path.Join(corefileDir, corefileName)})
	c.Image, c.Command = o.CoreDNSImage, []string{"/coredns"}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "dns", MountPath: dnsDir, ReadOnly: true}, {Name: "dns-config", MountPath: corefileDir, ReadOnly: true}}
	c.Ports = []corev1.ContainerPort{{Name: "dns", ContainerPort: contract.DefaultDNSPort, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", ContainerPort: contract.DefaultDNSPort}}
	// Liveness only: the pod's readiness gates the tenant API server's
	// Service, and a DNS hiccup must not cut tenants off their API.
	c.LivenessProbe = loopbackProbe(contract.DefaultDNSHealthPort, "/health", 10, 6)
	return c
}

// virtualNodeVolumes are the CoreDNS files, and the syncer's host token:
// projected only into the syncer container, refreshed by the kubelet.
func virtualNodeVolumes(n Names) []corev1.Volume {
	return []corev1.Volume{
		{Name: "dns-config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: n.DNSConfigMap()}}}},
		{Name: "dns", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("16Mi"))}}},
		{Name: "host-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr.To[int32](0o440),
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To(int64(time.Hour / time.Second))}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: HostRootCAConfigMap}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			},
		}}},
	}
}

// PodSecurityLevel is spec.virtualNode.podSecurityLevel, baseline when unset.
func PodSecurityLevel(vc *nestv1.VirtualCluster) string {
	if l := vc.Spec.VirtualNode.PodSecurityLevel; l != "" {
		return string(l)
	}
	return string(nestv1.PodSecurityBaseline)
}

// KubernetesVersion is the version the tenant's control plane runs:
// spec.kubernetesVersion, which the API server defaults and allows only
// from version.Supported, else (an object read before the default was
// applied) version.Newest().
func KubernetesVersion(vc *nestv1.VirtualCluster) string {
	return cmp.Or(vc.Spec.KubernetesVersion, version.Newest())
}

// ClusterDomain is the tenant's DNS domain: spec.clusterDomain, else cluster.local.
func ClusterDomain(vc *nestv1.VirtualCluster) string {
	if vc.Spec.ClusterDomain == "" {
		return "cluster.local"
	}
	return vc.Spec.ClusterDomain
}
