package syncer

import (
	"flag"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/syncer/kinds/persistentvolumeclaim"
)

// Flag names of nest-syncer. The VirtualCluster controller writes them with
// Args and the binary reads them with BindFlags, so both agree by construction.
const (
	flagVirtualCluster   = "virtual-cluster"
	flagHostNamespace    = "host-namespace"
	flagNodeName         = "node-name"
	flagVirtualNodes     = "virtual-nodes"
	flagClusterDomain    = "cluster-domain"
	flagAPIServerHost    = "api-server-host"
	flagAPIServerPort    = "api-server-port"
	flagDNSServer        = "dns-server"
	flagPriorityClass    = "priority-class"
	flagCapacity         = "capacity"
	flagDefaultLimits    = "default-limits"
	flagPodSecurity      = "pod-security-level"
	flagTokenMaxAge      = "token-max-age"
	flagTenantKubeconfig = "tenant-kubeconfig"
	flagServingCert      = "kubelet-serving-cert"
	flagServingKey       = "kubelet-serving-key"
	flagClientCA         = "kubelet-client-ca"
	flagDNSDir           = "dns-dir"
	flagHostLabels       = "host-labels"
	flagHostAnnotations  = "host-annotations"
	flagDataBudget       = "data-budget-bytes"
	flagHostServiceCIDRs = "host-service-cidrs"
	flagNodeIP           = "node-ip"
	flagHelperImage      = "helper-image"
	flagHelperPull       = "helper-image-pull-policy"
	flagNodeDiskSize     = "node-disk-size"
	flagNodeDiskClass    = "node-disk-storage-class"
	flagPrivileged       = "privileged-containers"
	flagNodeNetwork      = "node-network"
	flagLeaderElect      = "leader-elect"
	flagIdentity         = "identity"
	flagMaxGracePeriod   = "max-termination-grace-period"
	flagImageRegistries  = "image-registries"
	flagImageDenylist    = "image-registry-denylist"
	flagAlwaysPullImages = "always-pull-images"
	flagEgressBlocks     = "egress-blocks"
	flagStorageClasses   = "storage-classes"
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
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.VirtualCluster, flagVirtualCluster, "", "name of the VirtualCluster (required)")
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
	fs.Func(flagStorageClasses, "comma-separated host StorageClasses the tenant sees, each name=hostName:reclaimPolicy:bindingMode:expand:default (default none: tenant claims get no volume)", func(s string) error {
		c, err := persistentvolumeclaim.ParseClasses(s)
		o.StorageClasses = c
		return err
	})
	fs.Int64Var(&o.DataBudgetBytes, flagDataBudget, 0, "most bytes of data all host copies of tenant ConfigMaps and Secrets may hold together; 0 is no bound")
	o.KubeletAddr, o.HealthAddr = DefaultKubeletAddr, DefaultHealthAddr
	o.KubeletClientName = KubeletClientName
	o.APIServerPort = 6443
}

// Args renders o as nest-syncer flags.
func (o Options) Args() []string {
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
		args = append(args, "--"+flagStorageClasses+"="+persistentvolumeclaim.FormatClasses(o.StorageClasses))
	}
	if len(o.EgressBlocks) > 0 {
		args = append(args, "--"+flagEgressBlocks+"="+FormatIPBlocks(o.EgressBlocks))
	}
	if o.ConfinePrivileged {
		args = append(args, "--"+flagPrivileged+"="+privilegedConfine)
	}
	if o.NodeNetwork {
		args = append(args, "--"+flagNodeNetwork)
	}
	if o.LeaderElect {
		args = append(args, "--"+flagLeaderElect)
	}
	if o.Identity != "" {
		args = append(args, "--"+flagIdentity+"="+o.Identity)
	}
	if len(o.HostServiceCIDRs) > 0 {
		cidrs := make([]string, len(o.HostServiceCIDRs))
		for i, c := range o.HostServiceCIDRs {
			cidrs[i] = c.String()
		}
		args = append(args, "--"+flagHostServiceCIDRs+"="+strings.Join(cidrs, ","))
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
func (o Options) Validate() error {
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
	if o.NodeNetwork && (o.HelperImage == "" || o.NodeIP == "") {
		return fmt.Errorf("--%s needs --%s (the helper that waits for the agent runs from it) and --%s (the address it forwards)", flagNodeNetwork, flagHelperImage, flagNodeIP)
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

// FormatResourceList renders l for ParseResourceList, sorted by name.
func FormatResourceList(l corev1.ResourceList) string {
	var parts []string
	for name, q := range l {
		parts = append(parts, string(name)+"="+q.String())
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
