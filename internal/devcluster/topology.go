package devcluster

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
)

// The default local cluster's addressing, kept as constants for the packages
// that only ever talk to the default cluster (tests, the isolation suite).
// DefaultAddressing holds the same values; a named cluster has its own
// (AddressingFor).
const (
	// NodeSubnet holds the bridge address (.1) and the node IPs (.10 upward).
	NodeSubnet = "198.51.100.0/24"
	// ClusterCIDR is split into one /24 pod CIDR per node.
	ClusterCIDR = "10.244.0.0/16"
	// ServiceCIDR holds ClusterIPs; .1 is the kubernetes Service, .10 is DNS.
	ServiceCIDR = "10.96.0.0/16"
	// ClusterDomain is the DNS suffix of Services.
	ClusterDomain = "cluster.local"
	// APIServerPort is the kube-apiserver's secure port on the first node.
	APIServerPort = 6443
	// MaxNodes bounds --nodes: node IPs and pod CIDRs are derived from the index.
	MaxNodes = 50
	// MaxSlot bounds --slot: slot S takes 198.18.S.0/24, 10.(244+S).0.0/16
	// and 10.(96+S).0.0/16, and 10.(244+S) must stay a valid octet with room
	// to spare.
	MaxSlot = 9

	firstNodeHost = 10
)

// namedNodeRange holds the node subnets of every named cluster: 198.18.0.0/15
// is RFC 2544's benchmarking range, which nothing routes on a real network,
// and a /20 of it covers every slot.
var namedNodeRange = netip.MustParsePrefix("198.18.0.0/20")

// Addressing is what tells one local cluster from another on the same
// machine: its address ranges and the names of everything it makes in the
// root network namespace and the cgroup hierarchies. Everything of a cluster
// derives from it, so two clusters with different Addressing never touch
// each other's links, namespaces, rules or cgroups.
type Addressing struct {
	// Cluster is the cluster's name, "" for the default cluster.
	Cluster string
	// Slot picks the address ranges: 0 for the default cluster, 1 to
	// MaxSlot for a named one.
	Slot int
	// NodeSubnet holds the bridge address (.1) and the node IPs (.10 upward).
	NodeSubnet netip.Prefix
	// ClusterCIDR is split into one /24 pod CIDR per node.
	ClusterCIDR netip.Prefix
	// ServiceCIDR holds ClusterIPs; .1 is the kubernetes Service, .10 is DNS.
	ServiceCIDR netip.Prefix
	// Bridge is the root-namespace bridge the nodes' veths are plugged into.
	Bridge string
	// NetnsPrefix starts the name of every node's network namespace.
	NetnsPrefix string
	// HostVethPrefix starts the name of every node's root-namespace veth end.
	HostVethPrefix string
	// CgroupParent is the top cgroup of the cluster's kubelets and daemons.
	CgroupParent string
	// ForwardTable is the nftables table (family inet) in the root namespace
	// that lets node traffic pass between this cluster's bridge and another
	// local cluster's, and nowhere else.
	ForwardTable string
}

// clusterNameRE is what --cluster accepts: short enough that "nest" + name
// + "-v49" fits a 15-character interface name.
var clusterNameRE = regexp.MustCompile(`^[a-z0-9]{1,6}$`)

// DefaultAddressing is the default cluster's addressing: the one `nest dev`
// uses without --cluster.
func DefaultAddressing() Addressing {
	a, err := AddressingFor("", 0)
	if err != nil {
		panic(err)
	}
	return a
}

// AddressingFor returns the addressing of the cluster named cluster in slot
// slot. The default cluster ("") takes slot 0; a named cluster takes a slot
// from 1 to MaxSlot, so its ranges never overlap the default cluster's or
// another slot's.
func AddressingFor(cluster string, slot int) (Addressing, error) {
	if cluster == "" {
		if slot != 0 {
			return Addressing{}, fmt.Errorf("--slot %d needs --cluster: the default cluster always uses slot 0", slot)
		}
		return Addressing{
			NodeSubnet:     netip.MustParsePrefix("198.51.100.0/24"),
			ClusterCIDR:    netip.MustParsePrefix("10.244.0.0/16"),
			ServiceCIDR:    netip.MustParsePrefix("10.96.0.0/16"),
			Bridge:         "nestdev0",
			NetnsPrefix:    "nestdev-",
			HostVethPrefix: "nestdev-v",
			CgroupParent:   "nest-dev",
			ForwardTable:   "nest-dev",
		}, nil
	}
	if !clusterNameRE.MatchString(cluster) {
		return Addressing{}, fmt.Errorf("--cluster %q: a cluster name is 1 to 6 lowercase letters or digits", cluster)
	}
	// "nest" + "dev" would be the default cluster's link and namespace names.
	if cluster == "dev" {
		return Addressing{}, fmt.Errorf("--cluster %q: the name is reserved for the default cluster's links", cluster)
	}
	if slot < 1 || slot > MaxSlot {
		return Addressing{}, fmt.Errorf("--slot must be between 1 and %d for a named cluster, got %d", MaxSlot, slot)
	}
	return Addressing{
		Cluster:        cluster,
		Slot:           slot,
		NodeSubnet:     netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(slot), 0}), 24),
		ClusterCIDR:    netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(244 + slot), 0, 0}), 16),
		ServiceCIDR:    netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(96 + slot), 0, 0}), 16),
		Bridge:         "nest" + cluster + "0",
		NetnsPrefix:    "nest" + cluster + "-",
		HostVethPrefix: "nest" + cluster + "-v",
		CgroupParent:   "nest-dev-" + cluster,
		ForwardTable:   "nest-dev-" + cluster,
	}, nil
}

// BridgeIP is the root namespace's address on the node network.
func (a Addressing) BridgeIP() netip.Addr { return nthAddr(a.NodeSubnet.Addr(), 1) }

// DNSIP is the ClusterIP of the cluster DNS Service.
func (a Addressing) DNSIP() netip.Addr { return nthAddr(a.ServiceCIDR.Addr(), 10) }

// KubernetesServiceIP is the ClusterIP of the cluster's kubernetes Service
// (the API server), the first address of ServiceCIDR as upstream allocates it.
func (a Addressing) KubernetesServiceIP() netip.Addr { return nthAddr(a.ServiceCIDR.Addr(), 1) }

// DefaultStateDir is where the cluster keeps its state unless told otherwise.
func (a Addressing) DefaultStateDir() string {
	if a.Cluster == "" {
		return DefaultStateDir
	}
	return DefaultStateDir + "-" + a.Cluster
}

// peerNodeRanges are the node ranges of the other local clusters that may run
// beside this one: its nodes route them through the root namespace.
func (a Addressing) peerNodeRanges() []netip.Prefix {
	var out []netip.Prefix
	for _, r := range []netip.Prefix{DefaultAddressing().NodeSubnet, namedNodeRange} {
		if r != a.NodeSubnet {
			out = append(out, r)
		}
	}
	return out
}

// ownerFiles record which state directory holds the machine-wide names of
// the cluster: its name (links, namespaces, cgroups) and its slot (address
// ranges). Two clusters may share neither.
func (a Addressing) ownerFiles() []string {
	if a.Cluster == "" {
		return []string{ownerFile}
	}
	return []string{ownerFile + "-" + a.Cluster, fmt.Sprintf("%s-slot%d", ownerFile, a.Slot)}
}

// Default locations and the environment variables that stand in for the
// flags of `nest dev`, so a script (hack/demo.sh) can be pointed at another
// cluster without editing it. The state directory can be changed with
// --state-dir or StateDirEnv; the cluster with --cluster or ClusterEnv, its
// slot with --slot or SlotEnv.
const (
	DefaultStateDir = "/var/lib/nest/dev"
	StateDirEnv     = "NEST_DEV_DIR"
	ClusterEnv      = "NEST_DEV_CLUSTER"
	SlotEnv         = "NEST_DEV_SLOT"
)

// Node is one node of the local host cluster and everything derived from its
// index: names, addresses and the directories it owns.
type Node struct {
	// Net is the addressing of the node's cluster.
	Net     Addressing
	Index   int
	Name    string
	IP      netip.Addr
	PodCIDR netip.Prefix
	// Netns is the name of the node's network namespace under /run/netns.
	Netns string
	// HostVeth is the root-namespace end of the node's veth pair.
	HostVeth string
	// Dir holds the node's containerd, kubelet and CNI state.
	Dir string
}

// IPAMDir is where the node's CNI IPAM (host-local) records the pod IPs it
// gave out: a file named after each IP, under a directory per network.
func (n Node) IPAMDir() string { return filepath.Join(n.Dir, "cni", "ipam") }

// ControlPlane reports whether the node runs the control plane.
func (n Node) ControlPlane() bool { return n.Index == 0 }

// NetnsPath is the bind-mount path of the node's network namespace.
func (n Node) NetnsPath() string { return filepath.Join("/run/netns", n.Netns) }

// ContainerdSocket is the node's containerd gRPC socket.
func (n Node) ContainerdSocket() string { return filepath.Join(n.Dir, "containerd", "containerd.sock") }

// CgroupRoot is the cgroup path the node's kubelet puts pods under.
func (n Node) CgroupRoot() string { return "/" + n.Net.CgroupParent + "/" + n.Name }

// NodeName returns the name of node i, following kind: the first node is the
// control plane, the others are workers.
func NodeName(i int) string {
	switch i {
	case 0:
		return "nest-control-plane"
	case 1:
		return "nest-worker"
	default:
		return fmt.Sprintf("nest-worker%d", i)
	}
}

// Topology returns the nodes of the default cluster with count nodes whose
// state lives under stateDir.
func Topology(stateDir string, count int) ([]Node, error) {
	return DefaultAddressing().Topology(stateDir, count)
}

// Topology returns the nodes of a cluster with addressing a and count nodes
// whose state lives under stateDir.
func (a Addressing) Topology(stateDir string, count int) ([]Node, error) {
	if count < 1 || count > MaxNodes {
		return nil, fmt.Errorf("--nodes must be between 1 and %d, got %d", MaxNodes, count)
	}
	nodes := make([]Node, count)
	for i := range nodes {
		name := NodeName(i)
		nodes[i] = Node{
			Net:      a,
			Index:    i,
			Name:     name,
			IP:       nthAddr(a.NodeSubnet.Addr(), firstNodeHost+i),
			PodCIDR:  netip.PrefixFrom(nthAddr(a.ClusterCIDR.Addr(), i*256), 24),
			Netns:    fmt.Sprintf("%s%d", a.NetnsPrefix, i),
			HostVeth: fmt.Sprintf("%s%d", a.HostVethPrefix, i),
			Dir:      filepath.Join(stateDir, "nodes", name),
		}
	}
	return nodes, nil
}

// BridgeIP is the default cluster's root-namespace address on its node network.
func BridgeIP() netip.Addr { return DefaultAddressing().BridgeIP() }

// DNSIP is the ClusterIP of the default cluster's DNS Service.
func DNSIP() netip.Addr { return DefaultAddressing().DNSIP() }

// nthAddr returns the IPv4 address n places after base.
func nthAddr(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// StateDir resolves the state directory of the cluster the environment
// names (ClusterEnv; the default cluster when unset): the flag value when
// set, else StateDirEnv, else that cluster's default directory.
func StateDir(flag string) string {
	return Addressing{Cluster: os.Getenv(ClusterEnv)}.StateDir(flag)
}

// StateDir resolves the cluster's state directory: the flag value when set,
// else the environment variable StateDirEnv when it is about this cluster
// (the one ClusterEnv names, the default cluster when that is unset), else
// DefaultStateDir. A cluster named by --cluster alone ignores the variable,
// which names another cluster's directory.
func (a Addressing) StateDir(flag string) string {
	if flag != "" {
		return flag
	}
	if env := os.Getenv(StateDirEnv); env != "" && a.Cluster == os.Getenv(ClusterEnv) {
		return env
	}
	return a.DefaultStateDir()
}

// Layout names the files and directories under a cluster's state directory.
type Layout struct{ Root string }

// PKIDir holds the cluster's certificates and keys.
func (l Layout) PKIDir() string { return filepath.Join(l.Root, "pki") }

// KubeconfigDir holds one kubeconfig per component.
func (l Layout) KubeconfigDir() string { return filepath.Join(l.Root, "kubeconfig") }

// AdminKubeconfig is the cluster-admin kubeconfig printed by `nest dev kubeconfig`.
func (l Layout) AdminKubeconfig() string { return filepath.Join(l.KubeconfigDir(), "admin.conf") }

// Kubeconfig is the kubeconfig of one component or node.
func (l Layout) Kubeconfig(name string) string { return filepath.Join(l.KubeconfigDir(), name+".conf") }

// EtcdDir holds etcd's data.
func (l Layout) EtcdDir() string { return filepath.Join(l.Root, "etcd") }

// LogDir holds one log file per process.
func (l Layout) LogDir() string { return filepath.Join(l.Root, "logs") }

// RunDir holds one PID file per process.
func (l Layout) RunDir() string { return filepath.Join(l.Root, "run") }

// VolumesDir holds the directories behind dynamically provisioned volumes.
func (l Layout) VolumesDir() string { return filepath.Join(l.Root, "volumes") }

// StateFile records the options of the running cluster.
func (l Layout) StateFile() string { return filepath.Join(l.Root, "cluster.json") }
