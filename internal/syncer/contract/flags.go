package contract

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/version"
)

// Flag names of nest-syncer. The VirtualCluster controller writes them with
// Args and the binary reads them with BindFlags, so both agree by construction.
const (
	flagVirtualCluster    = "virtual-cluster"
	flagVirtualClusterUID = "virtual-cluster-uid"
	flagHostNamespace     = "host-namespace"
	flagNodeName          = "node-name"
	flagVirtualNodes      = "virtual-nodes"
	flagClusterDomain     = "cluster-domain"
	flagAPIServerHost     = "api-server-host"
	flagAPIServerPort     = "api-server-port"
	flagDNSServer         = "dns-server"
	flagPriorityClass     = "priority-class"
	flagCapacity          = "capacity"
	flagDefaultLimits     = "default-limits"
	flagPodSecurity       = "pod-security-level"
	flagTokenMaxAge       = "token-max-age"
	flagTenantKubeconfig  = "tenant-kubeconfig"
	flagServingCert       = "kubelet-serving-cert"
	flagServingKey        = "kubelet-serving-key"
	flagClientCA          = "kubelet-client-ca"
	flagDNSDir            = "dns-dir"
	flagHostLabels        = "host-labels"
	flagHostAnnotations   = "host-annotations"
	flagDataBudget        = "data-budget-bytes"
	flagHostServiceCIDRs  = "host-service-cidrs"
	flagNodeIP            = "node-ip"
	flagHelperImage       = "helper-image"
	flagHelperPull        = "helper-image-pull-policy"
	flagNodeDiskSize      = "node-disk-size"
	flagNodeDiskClass     = "node-disk-storage-class"
	flagPrivileged        = "privileged-containers"
	flagNodeNetwork       = "node-network"
	flagNetworkFence      = "network-fence"
	flagLeaderElect       = "leader-elect"
	flagIdentity          = "identity"
	flagMaxGracePeriod    = "max-termination-grace-period"
	flagImageRegistries   = "image-registries"
	flagImageDenylist     = "image-registry-denylist"
	flagAlwaysPullImages  = "always-pull-images"
	flagEgressBlocks      = "egress-blocks"
	flagHostPodCIDRs      = "host-pod-cidrs"
	flagStorageClasses    = "storage-classes"
	flagEgressProxy       = "egress-proxy-socket"
	flagKubernetesVersion = "kubernetes-version"
)

// Values of --privileged-containers, the VirtualCluster's
// spec.virtualNode.privilegedContainers policies.
const (
	privilegedRefuse  = "Refuse"
	privilegedConfine = "Confine"
)

// Defaults of the flags that the controller leaves alone.
const (
	DefaultKubeletAddr = "127.0.0.1:10250"
	// DefaultHealthPort serves /healthz and /readyz on loopback only
	// (DefaultHealthAddr): the exec probes run in the pod, and nothing
	// unauthenticated listens on the pod IP.
	DefaultHealthPort  = 10248
	DefaultTokenMaxAge = 24 * time.Hour
	// KubeletClientName is the tenant API server's kubelet client certificate name.
	KubeletClientName = components.KubeletClientUser
)

// DefaultHealthAddr is DefaultHealthPort on loopback.
var DefaultHealthAddr = fmt.Sprintf("127.0.0.1:%d", DefaultHealthPort)

// BindFlags registers every option on fs.
func (o *Flags) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.VirtualCluster, flagVirtualCluster, "", "name of the VirtualCluster (required)")
	fs.Func(flagVirtualClusterUID, "UID of the VirtualCluster: the controller of host pods whose tenant pods have a controller, so kubectl drain evicts them (default: host pods have no owner)", func(s string) error {
		o.VirtualClusterUID = types.UID(s)
		return nil
	})
	fs.StringVar(&o.HostNamespace, flagHostNamespace, "", "host namespace of the VirtualCluster (required)")
	fs.StringVar(&o.NodeName, flagNodeName, "nest-virtual-node", "name of the (first) virtual node in the tenant cluster")
	fs.IntVar(&o.VirtualNodes, flagVirtualNodes, 1, fmt.Sprintf("how many virtual nodes split the capacity, 1 to %d: the first is --%s, the others --%s-1, -2, ...", MaxVirtualNodes, flagNodeName, flagNodeName))
	fs.StringVar(&o.ClusterDomain, flagClusterDomain, "cluster.local", "tenant DNS suffix")
	fs.StringVar(&o.APIServerHost, flagAPIServerHost, "", "host ClusterIP of the tenant API server's Service (required)")
	fs.Func(flagAPIServerPort, "port of the tenant API server's Service (default 6443)", func(s string) error {
		p, err := strconv.ParseInt(s, 10, 32)
		o.APIServerPort = int32(p)
		return err
	})
	fs.StringVar(&o.DNSServer, flagDNSServer, "", "host ClusterIP of the tenant's CoreDNS (required)")
	fs.StringVar(&o.PriorityClassName, flagPriorityClass, "", "host PriorityClass of tenant pods, selected by the tenant's host ResourceQuota")
	fs.Func(flagCapacity, "virtual node capacity, such as cpu=4,memory=8Gi,pods=110,nvidia.com/gpu=1", func(s string) error {
		l, err := ParseResourceList(s)
		o.Capacity = l
		return err
	})
	fs.Func(flagDefaultLimits, "limits the host namespace's LimitRange gives a container that states none, such as cpu=500m,memory=512Mi: a container that requests more and states no limit is limited to its request instead", func(s string) error {
		l, err := ParseResourceList(s)
		o.DefaultLimits = l
		return err
	})
	fs.StringVar(&o.KubernetesVersion, flagKubernetesVersion, version.Kubernetes, "Kubernetes version of the tenant control plane: the virtual nodes report it as their kubelet's")
	fs.StringVar(&o.PodSecurityLevel, flagPodSecurity, "baseline", "Pod Security Standard level of tenant pods: baseline or restricted")
	fs.DurationVar(&o.TokenMaxAge, flagTokenMaxAge, DefaultTokenMaxAge, "longest a service-account token is used before it is refreshed")
	fs.StringVar(&o.TenantKubeconfig, flagTenantKubeconfig, "", "kubeconfig for the tenant API server (required)")
	fs.StringVar(&o.ServingCert, flagServingCert, "", "kubelet API serving certificate (PEM)")
	fs.StringVar(&o.ServingKey, flagServingKey, "", "kubelet API serving key (PEM)")
	fs.StringVar(&o.ClientCA, flagClientCA, "", "CA of the tenant API server's kubelet client certificate (PEM)")
	fs.StringVar(&o.DNSDir, flagDNSDir, "/var/run/nest-dns", "directory for the tenant CoreDNS' hosts file")
	o.HostMetadata = MetadataAllowList{Labels: slices.Clone(DefaultHostLabels), Annotations: slices.Clone(DefaultHostAnnotations)}
	fs.Func(flagHostLabels, "comma-separated tenant label keys copied to host pods: whole keys, or beginnings ending in * that match up to a / (\"*\": every key without a prefix, \"example.com/*\": every key under example.com); empty copies none (default "+strings.Join(DefaultHostLabels, ",")+")",
		allowListFlag(&o.HostMetadata.Labels))
	fs.Func(flagHostAnnotations, "comma-separated tenant annotation keys copied to host pods, as for --"+flagHostLabels+" (default none)",
		allowListFlag(&o.HostMetadata.Annotations))
	fs.StringVar(&o.NodeIP, flagNodeIP, "", "the virtual node's InternalIP, the control-plane pod's IP: the kubelet API and the tenant's node ports listen there (default: kubelet API on loopback, no node ports)")
	fs.Func(flagHostServiceCIDRs, "comma-separated Service ClusterIP ranges of the host cluster; a tenant Service's host copy takes the tenant's ClusterIP when it lies in one", func(s string) error {
		l, err := components.ParseCIDRs(flagHostServiceCIDRs, s)
		o.HostServiceCIDRs = l
		return err
	})
	fs.StringVar(&o.HelperImage, flagHelperImage, "", "image holding nest-syncer, run as a helper init container of host pods that need one (a pod with a subdomain: its /etc/hosts); empty: none")
	fs.Func(flagHelperPull, "image pull policy of --"+flagHelperImage+": Always, IfNotPresent or Never", func(s string) error {
		switch p := corev1.PullPolicy(s); p {
		case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
			o.HelperImagePullPolicy = p
			return nil
		}
		return fmt.Errorf("%q: use Always, IfNotPresent or Never", s)
	})
	fs.Func(flagNodeDiskSize, "size of each virtual node's disk, a host claim where tenant hostPath volumes live, such as 1Gi (default: none, hostPath volumes are refused)", func(s string) error {
		q, err := resource.ParseQuantity(s)
		if err != nil || q.Sign() <= 0 {
			return fmt.Errorf("%q: want a size above zero, such as 1Gi", s)
		}
		if o.NodeDisk == nil {
			o.NodeDisk = &NodeDisk{}
		}
		o.NodeDisk.Size = q
		return nil
	})
	fs.Func(flagNodeDiskClass, "StorageClass of the virtual nodes' disks (default: the host's default StorageClass)", func(s string) error {
		if o.NodeDisk == nil {
			o.NodeDisk = &NodeDisk{}
		}
		o.NodeDisk.StorageClassName = s
		return nil
	})
	fs.Func(flagPrivileged, "what the virtual node does with a container that asks for privileged: "+privilegedRefuse+" the pod, or "+privilegedConfine+" it (run it without host privileges) (default "+privilegedRefuse+")", func(s string) error {
		switch s {
		case privilegedRefuse, privilegedConfine:
			o.ConfinePrivileged = s == privilegedConfine
			return nil
		}
		return fmt.Errorf("%q: use %s or %s", s, privilegedRefuse, privilegedConfine)
	})
	fs.StringVar(&o.NetworkFence, flagNetworkFence, "", "HOST:PORT the isolation NetworkPolicy refuses tenant pods (the host API server's Service): each host pod's first init container waits until it is refused, so no tenant container runs before its pod is isolated (needs --"+flagHelperImage+"); empty: no fence")
	fs.BoolVar(&o.NodeNetwork, flagNodeNetwork, false, "give hostNetwork pods the virtual node's address and host ports through the node network agent on host nodes (needs --"+flagHelperImage+" and --"+flagNodeIP+")")
	fs.BoolVar(&o.LeaderElect, flagLeaderElect, false, "elect, through the host Lease <virtual-cluster>-syncer, the one syncer of the control plane's replicas that runs the virtual node; the others keep their CoreDNS' records current")
	fs.StringVar(&o.Identity, flagIdentity, "", "this syncer's name in the election (default: the host name)")
	fs.Int64Var(&o.MaxGracePeriodSeconds, flagMaxGracePeriod, DefaultMaxGracePeriodSeconds, "most seconds a tenant pod's host pod gets to stop, at deletion and in terminationGracePeriodSeconds; the tenant gets a Warning event when its pod asks for more")
	fs.Func(flagImageRegistries, "comma-separated registries tenant images may come from: host, host:port or *.domain, docker.io for Docker Hub (default: any registry not denied)", registryListFlag(&o.Images.Allowed))
	fs.Func(flagImageDenylist, "comma-separated registries tenant images may not come from, as for --"+flagImageRegistries+", or CIDRs an IP-address registry may not lie in; loopback, link-local and the localhost names are always denied", registryListFlag(&o.Images.Denied))
	fs.BoolVar(&o.AlwaysPullImages, flagAlwaysPullImages, false, "set imagePullPolicy Always on every tenant container, for host kubelets that do not check the credentials of pods using an image another pod pulled (KubeletEnsureSecretPulledImages)")
	fs.Func(flagEgressBlocks, "comma-separated blocks of addresses outside the host cluster that tenant pods may reach, each a CIDR followed by its exceptions after !, such as 0.0.0.0/0!10.0.0.0/8: the ipBlocks of tenant NetworkPolicies are cut to them (default none: every ipBlock is cut)", func(s string) error {
		b, err := ParseIPBlocks(s)
		o.EgressBlocks = b
		return err
	})
	fs.Func(flagHostPodCIDRs, "comma-separated pod CIDRs of the host cluster, nest-manager's --host-pod-cidrs: a tenant NetworkPolicy ipBlock that covers them also matches the tenant's own pods (default none: only 0.0.0.0/0 and ::/0 without exceptions do)", func(s string) error {
		l, err := components.ParseCIDRs(flagHostPodCIDRs, s)
		o.HostPodCIDRs = l
		return err
	})
	fs.Func(flagStorageClasses, "comma-separated host StorageClasses the tenant sees, each name=hostName:reclaimPolicy:bindingMode:expand:default (default none: tenant claims get no volume)", func(s string) error {
		c, err := ParseClasses(s)
		o.StorageClasses = c
		return err
	})
	fs.StringVar(&o.EgressProxySocket, flagEgressProxy, "", "Unix socket where every replica serves the egress proxy of the tenant API server in its pod (its --egress-selector-config-file names it): CONNECT only to what this syncer published from the host (control-plane pods' kubelet ports, tenant host pods, dedicated nodes' kubelets and pod CIDRs); empty: no proxy")
	fs.Int64Var(&o.DataBudgetBytes, flagDataBudget, 0, "most bytes of data all host copies of tenant ConfigMaps and Secrets may hold together; 0 is no bound")
	o.KubeletAddr, o.HealthAddr = DefaultKubeletAddr, DefaultHealthAddr
	o.KubeletClientName = KubeletClientName
	o.APIServerPort = 6443
}

// formatCIDRs writes prefixes separated by commas, as components.ParseCIDRs
// reads them.
func formatCIDRs(prefixes []netip.Prefix) string {
	out := make([]string, len(prefixes))
	for i, p := range prefixes {
		out[i] = p.String()
	}
	return strings.Join(out, ",")
}

// Args renders o as nest-syncer flags.
func (o Flags) Args() []string {
	args := []string{
		"--" + flagVirtualCluster + "=" + o.VirtualCluster,
		"--" + flagHostNamespace + "=" + o.HostNamespace,
		"--" + flagNodeName + "=" + o.NodeName,
		"--" + flagVirtualNodes + "=" + strconv.Itoa(max(o.VirtualNodes, 1)),
		"--" + flagClusterDomain + "=" + o.ClusterDomain,
		"--" + flagAPIServerHost + "=" + o.APIServerHost,
		"--" + flagAPIServerPort + "=" + strconv.Itoa(int(o.APIServerPort)),
		"--" + flagDNSServer + "=" + o.DNSServer,
		"--" + flagPriorityClass + "=" + o.PriorityClassName,
		"--" + flagCapacity + "=" + FormatResourceList(o.Capacity),
		"--" + flagPodSecurity + "=" + o.PodSecurityLevel,
		"--" + flagKubernetesVersion + "=" + cmp.Or(o.KubernetesVersion, version.Kubernetes),
		"--" + flagTenantKubeconfig + "=" + o.TenantKubeconfig,
		"--" + flagServingCert + "=" + o.ServingCert,
		"--" + flagServingKey + "=" + o.ServingKey,
		"--" + flagClientCA + "=" + o.ClientCA,
		"--" + flagDNSDir + "=" + o.DNSDir,
		// Always rendered: an empty list copies nothing, while a missing flag
		// would mean the defaults.
		"--" + flagHostLabels + "=" + strings.Join(o.HostMetadata.Labels, ","),
		"--" + flagHostAnnotations + "=" + strings.Join(o.HostMetadata.Annotations, ","),
		"--" + flagDataBudget + "=" + strconv.FormatInt(o.DataBudgetBytes, 10),
	}
	if o.VirtualClusterUID != "" {
		args = append(args, "--"+flagVirtualClusterUID+"="+string(o.VirtualClusterUID))
	}
	if o.NodeIP != "" {
		args = append(args, "--"+flagNodeIP+"="+o.NodeIP)
	}
	if o.MaxGracePeriodSeconds > 0 {
		args = append(args, "--"+flagMaxGracePeriod+"="+strconv.FormatInt(o.MaxGracePeriodSeconds, 10))
	}
	if len(o.Images.Allowed) > 0 {
		args = append(args, "--"+flagImageRegistries+"="+strings.Join(o.Images.Allowed, ","))
	}
	if len(o.Images.Denied) > 0 {
		args = append(args, "--"+flagImageDenylist+"="+strings.Join(o.Images.Denied, ","))
	}
	if o.AlwaysPullImages {
		args = append(args, "--"+flagAlwaysPullImages)
	}
	if len(o.StorageClasses) > 0 {
		args = append(args, "--"+flagStorageClasses+"="+FormatClasses(o.StorageClasses))
	}
	if len(o.EgressBlocks) > 0 {
		args = append(args, "--"+flagEgressBlocks+"="+FormatIPBlocks(o.EgressBlocks))
	}
	if len(o.HostPodCIDRs) > 0 {
		args = append(args, "--"+flagHostPodCIDRs+"="+formatCIDRs(o.HostPodCIDRs))
	}
	if o.ConfinePrivileged {
		args = append(args, "--"+flagPrivileged+"="+privilegedConfine)
	}
	if o.NodeNetwork {
		args = append(args, "--"+flagNodeNetwork)
	}
	if o.NetworkFence != "" {
		args = append(args, "--"+flagNetworkFence+"="+o.NetworkFence)
	}
	if o.LeaderElect {
		args = append(args, "--"+flagLeaderElect)
	}
	if o.Identity != "" {
		args = append(args, "--"+flagIdentity+"="+o.Identity)
	}
	if o.EgressProxySocket != "" {
		args = append(args, "--"+flagEgressProxy+"="+o.EgressProxySocket)
	}
	if len(o.HostServiceCIDRs) > 0 {
		args = append(args, "--"+flagHostServiceCIDRs+"="+formatCIDRs(o.HostServiceCIDRs))
	}
	if len(o.DefaultLimits) > 0 {
		args = append(args, "--"+flagDefaultLimits+"="+FormatResourceList(o.DefaultLimits))
	}
	if o.TokenMaxAge > 0 {
		args = append(args, "--"+flagTokenMaxAge+"="+o.TokenMaxAge.String())
	}
	if o.HelperImage != "" {
		args = append(args, "--"+flagHelperImage+"="+o.HelperImage)
	}
	if o.HelperImagePullPolicy != "" {
		args = append(args, "--"+flagHelperPull+"="+string(o.HelperImagePullPolicy))
	}
	if d := o.NodeDisk; d != nil {
		args = append(args, "--"+flagNodeDiskSize+"="+d.Size.String())
		if d.StorageClassName != "" {
			args = append(args, "--"+flagNodeDiskClass+"="+d.StorageClassName)
		}
	}
	return args
}

// allowListFlag parses a flag value into an allow-list, replacing the default.
func allowListFlag(list *[]string) func(string) error {
	return func(s string) error {
		l, err := ParseAllowList(s)
		*list = l
		return err
	}
}

// FormatIPBlocks renders blocks for ParseIPBlocks: "CIDR!EXCEPT!EXCEPT",
// comma-separated.
func FormatIPBlocks(blocks []networkingv1.IPBlock) string {
	parts := make([]string, len(blocks))
	for i, b := range blocks {
		parts[i] = strings.Join(append([]string{b.CIDR}, b.Except...), "!")
	}
	return strings.Join(parts, ",")
}

// ParseIPBlocks parses FormatIPBlocks' form; the error names the first
// part that is no CIDR.
func ParseIPBlocks(s string) ([]networkingv1.IPBlock, error) {
	var out []networkingv1.IPBlock
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		cidrs := strings.Split(part, "!")
		for _, c := range cidrs {
			if _, err := netip.ParsePrefix(c); err != nil {
				return nil, fmt.Errorf("%q in %q is not a CIDR: write blocks such as 0.0.0.0/0!10.0.0.0/8", c, part)
			}
		}
		b := networkingv1.IPBlock{CIDR: cidrs[0]}
		if len(cidrs) > 1 {
			b.Except = cidrs[1:]
		}
		out = append(out, b)
	}
	return out, nil
}

// registryListFlag parses a flag value with ParseRegistryList.
func registryListFlag(list *[]string) func(string) error {
	return func(s string) error {
		l, err := ParseRegistryList(s)
		*list = l
		return err
	}
}

// ParseRegistryList parses a comma-separated list of ImagePolicy entries;
// the error names the first entry that is none (ValidateRegistryEntry).
func ParseRegistryList(s string) ([]string, error) {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if err := ValidateRegistryEntry(e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Validate names the first required option that is missing or out of range.
func (o Flags) Validate() error {
	for _, f := range []struct{ name, value string }{
		{flagVirtualCluster, o.VirtualCluster}, {flagHostNamespace, o.HostNamespace}, {flagAPIServerHost, o.APIServerHost},
		{flagDNSServer, o.DNSServer}, {flagTenantKubeconfig, o.TenantKubeconfig},
	} {
		if f.value == "" {
			return fmt.Errorf("--%s is required", f.name)
		}
	}
	if len(o.Capacity) == 0 {
		return fmt.Errorf("--%s is required, such as cpu=4,memory=8Gi,pods=110", flagCapacity)
	}
	if o.VirtualNodes < 0 || o.VirtualNodes > MaxVirtualNodes {
		return fmt.Errorf("--%s=%d: want 1 to %d", flagVirtualNodes, o.VirtualNodes, MaxVirtualNodes)
	}
	if o.MaxGracePeriodSeconds < 1 {
		return fmt.Errorf("--%s=%d: want a number of seconds of at least 1, such as %d", flagMaxGracePeriod, o.MaxGracePeriodSeconds, DefaultMaxGracePeriodSeconds)
	}
	if o.DataBudgetBytes < 0 {
		return fmt.Errorf("--%s=%d: want a number of bytes, or 0 for no bound", flagDataBudget, o.DataBudgetBytes)
	}
	if o.NodeDisk != nil && o.NodeDisk.Size.Sign() <= 0 {
		return fmt.Errorf("--%s is required with --%s", flagNodeDiskSize, flagNodeDiskClass)
	}
	if o.NodeDisk != nil && o.HelperImage == "" {
		return fmt.Errorf("--%s is required with --%s: the disk's helper runs from it", flagHelperImage, flagNodeDiskSize)
	}
	if o.NetworkFence != "" {
		if o.HelperImage == "" {
			return fmt.Errorf("--%s needs --%s: the fence runs from it", flagNetworkFence, flagHelperImage)
		}
		if _, _, err := net.SplitHostPort(o.NetworkFence); err != nil {
			return fmt.Errorf("--%s=%s: want HOST:PORT, the host API server's Service: %w", flagNetworkFence, o.NetworkFence, err)
		}
	}
	if o.NodeNetwork && (o.HelperImage == "" || o.NodeIP == "") {
		return fmt.Errorf("--%s needs --%s (the helper that waits for the agent runs from it) and --%s (the address it forwards)", flagNodeNetwork, flagHelperImage, flagNodeIP)
	}
	if p := o.EgressProxySocket; p != "" && (!filepath.IsAbs(p) || filepath.Clean(p) != p) {
		return fmt.Errorf("--%s=%s: want an absolute, clean path, such as /run/nest-egress/proxy.sock", flagEgressProxy, p)
	}
	return nil
}

// ParseResourceList parses "name=quantity" pairs separated by commas.
func ParseResourceList(s string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for _, pair := range strings.Split(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want name=quantity, such as cpu=4", pair)
		}
		q, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[corev1.ResourceName(name)] = q
	}
	return out, nil
}

// FormatResourceList renders l for ParseResourceList: "cpu=2,memory=4Gi",
// sorted, "" when empty (kube.ResourceListFlag).
func FormatResourceList(l corev1.ResourceList) string {
	return kube.FormatResourceList(l, kube.ResourceListFlag)
}

// Flags are nest-syncer's command line. nest-manager's VirtualCluster
// controller renders them with Args and cmd/nest-syncer reads them with
// BindFlags, so both agree by construction.
type Flags struct {
	Translation
	// TenantKubeconfig is the syncer's kubeconfig for the tenant API server.
	TenantKubeconfig string
	// Capacity is the tenant's share: the capacity and allocatable of the
	// virtual nodes together, which nest-syncer splits evenly among them.
	Capacity corev1.ResourceList
	// VirtualNodes is how many virtual nodes the share is split across, 1
	// to MaxVirtualNodes (0 is 1): NodeName, then NodeName-1, -2, ...
	VirtualNodes int
	// PodSecurityLevel every tenant pod must meet: baseline or restricted.
	PodSecurityLevel string
	// KubernetesVersion is the tenant control plane's version, which the
	// virtual nodes report as their kubelet's (NodeInfo.KubeletVersion), as
	// a kubelet of the API server's version would.
	KubernetesVersion string
	// TokenMaxAge bounds how long a delivered token is used before refresh.
	TokenMaxAge time.Duration
	// NodeIP is the virtual node's InternalIP: the control-plane pod's IP,
	// where the kubelet API and the tenant's node ports listen. Empty keeps
	// the kubelet API on KubeletAddr and serves no node ports.
	NodeIP string
	// KubeletAddr is where the kubelet API listens, with ServingCert/Key and
	// ClientCA (PEM files). Only the tenant API server's kubelet client
	// certificate is accepted.
	KubeletAddr, ServingCert, ServingKey, ClientCA string
	// KubeletClientName is the common name the API server's client certificate has.
	KubeletClientName string
	// HealthAddr serves /healthz (ok while the process serves: the
	// liveness probe) and /readyz (ok once the virtual node is registered).
	HealthAddr string
	// DNSDir receives the hosts file of the tenant's CoreDNS.
	DNSDir string
	// HostMetadata is the allow-list of tenant label and annotation keys
	// copied onto host pods.
	HostMetadata MetadataAllowList
	// DataBudgetBytes bounds the data of all host copies of tenant ConfigMaps
	// and Secrets together; 0 means no bound.
	DataBudgetBytes int64
	// LeaderElect makes the syncers of a control plane's replicas elect,
	// through a host Lease (contract.LeaseName), the one that runs the virtual node
	// and writes to both clusters; the others keep their CoreDNS' records
	// current and wait.
	LeaderElect bool
	// StorageClasses are the host StorageClasses the tenant sees and whose
	// claims the virtual node provisions (kinds/persistentvolumeclaim);
	// none: the tenant's claims get no volume.
	StorageClasses []StorageClass
	// EgressBlocks are the addresses outside the host cluster tenant pods
	// may reach, as the VirtualCluster's base egress policy has them: the
	// ipBlocks of tenant NetworkPolicies are cut to them.
	EgressBlocks []networkingv1.IPBlock
	// HostPodCIDRs are the host's pod ranges, which the base policies keep
	// outside EgressBlocks: a tenant NetworkPolicy ipBlock that covers them
	// also matches the tenant's own pods, whose addresses lie there. nil
	// when the platform did not give them to nest-manager.
	HostPodCIDRs []netip.Prefix
	// Identity is this syncer's name in the election: its pod's name; ""
	// is the host name. A random suffix is added (electionIdentity), so a
	// replacement pod of the same name never takes its predecessor's lease.
	Identity string
	// EgressProxySocket is the absolute path of the Unix socket where
	// nest-syncer serves the egress proxy (package egress) of the tenant
	// API server in its own pod, in every replica, leader or not. The
	// proxy dials only destinations nest-syncer published from the host:
	// the control-plane pods' kubelet API ports, the tenant's host pods,
	// and its dedicated nodes' kubelets and pod CIDRs. Empty: no proxy.
	EgressProxySocket string
}

// Translation is what nest-syncer's pod translation is told about the
// virtual cluster and its host side, from flags nest-manager sets.
type Translation struct {
	// VirtualCluster is the VirtualCluster's name.
	VirtualCluster string
	// VirtualClusterUID is the VirtualCluster's UID. A host pod whose
	// tenant pod has a controller (a ReplicaSet's, a Job's...) names the
	// VirtualCluster as its controller (HostPodController), so kubectl
	// drain evicts it as it evicts a replicated pod, and the tenant
	// controller replaces the tenant pod. Empty: host pods have no owner.
	VirtualClusterUID types.UID
	// HostNamespace is where host objects are made; the VirtualCluster is
	// there too.
	HostNamespace string
	// ClusterDomain is the tenant's DNS suffix, such as cluster.local.
	ClusterDomain string
	// APIServerHost and APIServerPort reach the tenant API server from host
	// pods: the ClusterIP and port of the control plane's host Service.
	APIServerHost string
	APIServerPort int32
	// DNSServer is the host ClusterIP of the tenant's CoreDNS.
	DNSServer string
	// HostServiceCIDRs are the host's Service ClusterIP ranges. A host copy
	// of a tenant Service asks for the tenant's ClusterIP when it lies in one
	// of them, above the range's static band (the band the host's admins
	// assign from).
	HostServiceCIDRs []netip.Prefix
	// NodeName is the virtual node's name in the tenant cluster.
	NodeName string
	// PriorityClassName is put on every host pod; the host ResourceQuota of the
	// tenant's share selects pods by it.
	PriorityClassName string
	// DefaultLimits are the limits the host namespace's LimitRange gives a
	// container that states none (cpu, memory, ephemeral-storage). A
	// container that requests more than one of them and states no limit gets
	// its request as the limit: the LimitRange's default would be below the
	// request, and the host API server would refuse the pod.
	DefaultLimits corev1.ResourceList
	// HelperImage holds nest-syncer, which host pods run as a helper init
	// container where the host kubelet cannot do what the tenant's would
	// (a pod's /etc/hosts), with HelperImagePullPolicy. Empty: no helpers.
	HelperImage           string
	HelperImagePullPolicy corev1.PullPolicy
	// NodeDisk is each virtual node's disk, where tenant hostPath volumes
	// live; nil: hostPath volumes are refused.
	NodeDisk *NodeDisk
	// ConfinePrivileged runs a container that asks for privileged without
	// host privileges; false: Pod Security refuses the pod.
	ConfinePrivileged bool
	// NodeNetwork gives a hostNetwork pod the virtual node's address and
	// host ports through the node network agent; it needs
	// HelperImage. Off: such a pod has its pod network only.
	NodeNetwork bool
	// NetworkFence is HOST:PORT, an address the tenant's isolation
	// NetworkPolicy refuses its pods (the host API server's Service). Each
	// host pod's first init container, nest-probe -fence from HelperImage,
	// dials it until it is refused: a network plugin applies a pod's
	// policies only once it has seen the pod, a second or so after its
	// network is up, and no tenant container may run in that second.
	// Empty: no fence.
	NetworkFence string
	// MaxGracePeriodSeconds bounds how long a host pod may take to stop: its
	// terminationGracePeriodSeconds and the grace period of a deletion
	// 0 stands for DefaultMaxGracePeriodSeconds.
	MaxGracePeriodSeconds int64
	// Images says which registries tenant images may come from.
	Images ImagePolicy
	// AlwaysPullImages sets imagePullPolicy Always on every container and
	// image volume of a host pod, as the AlwaysPullImages admission plugin
	// does, for host kubelets that do not check that a pod may use an image
	// another pod pulled with credentials (KubeletEnsureSecretPulledImages).
	AlwaysPullImages bool
}

// MetadataAllowList names the tenant label and annotation keys that reach
// host pods: whole keys, or beginnings ending in "*" that match up to the next
// "/" ("*" is every key without a prefix, "example.com/*" every key under
// example.com). An empty list copies nothing. Keys Nest or host add-ons act
// on are never copied, whatever the list says (see DefaultHostLabels).
type MetadataAllowList struct {
	Labels, Annotations []string
}

// Allow-list entries (MetadataAllowList, --host-labels, --host-annotations).
// An entry is a whole key ("app", "example.com/team"), or ends in "*" to match
// every key that starts with the rest of the entry, where the "*" never spans
// a "/". So "*" is every key without a prefix ("app", "tier"),
// "example.com/*" every key under example.com, and "app*" the unprefixed keys
// that start with "app". A "*" anywhere else is refused. An empty list copies
// nothing.
const Wildcard = "*"

// DefaultHostLabels are the tenant label keys copied to host pods when
// --host-labels is not given: every unprefixed key, and the descriptive
// app.kubernetes.io labels, which host dashboards and cost tools group by.
// Keys that Nest or host add-ons act on are never copied (nest-syncer's
// deniedOnHost), whatever the list says.
var DefaultHostLabels = append([]string{Wildcard}, DescribingAppLabels...)

// DefaultHostAnnotations are the tenant annotation keys copied to host pods
// when --host-annotations is not given: none, because host add-ons (service
// meshes, CNI plugins, secret injectors, autoscalers) are configured through
// pod annotations, often under prefixes no list could foresee.
var DefaultHostAnnotations = []string{}

// DescribingAppLabels are the app.kubernetes.io keys that only describe a
// workload. The others under app.kubernetes.io (managed-by, component) select
// Nest's own control-plane pods and stay denied.
var DescribingAppLabels = []string{
	"app.kubernetes.io/name",
	"app.kubernetes.io/instance",
	"app.kubernetes.io/version",
	"app.kubernetes.io/part-of",
}

// ParseAllowList parses a comma-separated allow-list of label or annotation
// keys (see MetadataAllowList); an entry with a "*" anywhere but at its end
// is an error. The empty string is the empty list, which copies nothing.
func ParseAllowList(s string) ([]string, error) {
	out := []string{}
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if i := strings.Index(e, Wildcard); i >= 0 && i != len(e)-1 {
			return nil, fmt.Errorf("%q: a \"*\" may only end an entry, such as example.com/*", e)
		}
		out = append(out, e)
	}
	return out, nil
}

// ImagePolicy says which registries the host node's container runtime may
// pull a tenant image from. The runtime dials the registry an image
// reference names, from the host node, so without it a tenant could make
// the node connect to its own loopback ports, its kubelet, or the host's
// private ranges, and read the answers off pull errors.
type ImagePolicy struct {
	// Allowed, when not empty, are the only registries tenant images may
	// come from: a host ("registry.example.com"), a host and port
	// ("registry.example.com:5000") or a domain suffix ("*.example.com").
	// "docker.io" stands for Docker Hub, as in image references.
	Allowed []string
	// Denied are registries no tenant image may come from: entries as in
	// Allowed, or CIDRs (10.0.0.0/8) that an IP-literal registry must not
	// lie in. Loopback, link-local, unspecified and multicast addresses
	// and the localhost names are always denied (nest-syncer's alwaysDenied).
	Denied []string
}

// ValidateRegistryEntry reports why s cannot be an ImagePolicy entry: a
// registry host, host:port, *.domain suffix or CIDR.
func ValidateRegistryEntry(s string) error {
	if _, err := netip.ParsePrefix(s); err == nil {
		return nil
	}
	host := strings.TrimPrefix(s, "*.")
	if host == "" || strings.ContainsAny(host, "/@*") {
		return fmt.Errorf("%q is not a registry: give a host (registry.example.com), host:port, *.example.com or a CIDR", s)
	}
	if _, err := name.NewRegistry(host, name.StrictValidation); err != nil {
		return fmt.Errorf("%q is not a registry: %v", s, err)
	}
	return nil
}

// NodeDisk is the disk each virtual node has (spec.virtualNode.nodeDisk).
type NodeDisk struct {
	// Size is each claim's storage request.
	Size resource.Quantity
	// StorageClassName of the claims; empty is the host's default.
	StorageClassName string
}

// NodeDiskClaim is the host claim holding the disk of virtual node node.
func NodeDiskClaim(vc, node string) string { return HostName(vc, "node-disk", node) }

// MaxVirtualNodes bounds how many virtual nodes one syncer runs.
const MaxVirtualNodes = 16

// DefaultMaxGracePeriodSeconds is the longest grace period a host pod gets
// unless the VirtualCluster says otherwise: five minutes, the order of the
// graceful node shutdown periods kubelet operators configure, and ten
// times the API's default of 30 seconds.
const DefaultMaxGracePeriodSeconds int64 = 300

// StorageClass is one host StorageClass as the tenant sees it.
type StorageClass struct {
	// Name is the tenant's name, HostName the host class.
	Name, HostName string
	// ReclaimPolicy, VolumeBindingMode and AllowVolumeExpansion are the
	// host class's.
	ReclaimPolicy        corev1.PersistentVolumeReclaimPolicy
	VolumeBindingMode    storagev1.VolumeBindingMode
	AllowVolumeExpansion bool
	// Default makes it the tenant's default class.
	Default bool
}

// FormatClasses renders classes for ParseClasses: per class
// "name=hostName:reclaimPolicy:bindingMode:expand:default", comma-separated.
func FormatClasses(classes []StorageClass) string {
	parts := make([]string, len(classes))
	for i, c := range classes {
		parts[i] = fmt.Sprintf("%s=%s:%s:%s:%t:%t", c.Name, c.HostName, c.ReclaimPolicy, c.VolumeBindingMode, c.AllowVolumeExpansion, c.Default)
	}
	return strings.Join(parts, ",")
}

// ParseClasses parses FormatClasses' form; the error names the part that
// is malformed.
func ParseClasses(s string) ([]StorageClass, error) {
	var out []StorageClass
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		name, rest, ok := strings.Cut(part, "=")
		fields := strings.Split(rest, ":")
		if !ok || name == "" || len(fields) != 5 || fields[0] == "" {
			return nil, fmt.Errorf("%q: want name=hostName:reclaimPolicy:bindingMode:expand:default, such as standard=standard:Delete:WaitForFirstConsumer:false:true", part)
		}
		expand, err1 := strconv.ParseBool(fields[3])
		def, err2 := strconv.ParseBool(fields[4])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		out = append(out, StorageClass{Name: name, HostName: fields[0], ReclaimPolicy: corev1.PersistentVolumeReclaimPolicy(fields[1]),
			VolumeBindingMode: storagev1.VolumeBindingMode(fields[2]), AllowVolumeExpansion: expand, Default: def})
	}
	return out, nil
}
