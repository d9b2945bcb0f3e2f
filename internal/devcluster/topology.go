package devcluster

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
)

// Fixed addressing of the local host cluster. One cluster runs per machine.
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

	bridgeName    = "nestdev0"
	netnsPrefix   = "nestdev-"
	hostVethPfx   = "nestdev-v"
	cgroupParent  = "nest-dev"
	firstNodeHost = 10
)

// Default locations. The state directory can be changed with --state-dir or
// the environment variable named by StateDirEnv.
const (
	DefaultStateDir = "/var/lib/nest/dev"
	StateDirEnv     = "NEST_DEV_DIR"
)

// Node is one node of the local host cluster and everything derived from its
// index: names, addresses and the directories it owns.
type Node struct {
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
func (n Node) CgroupRoot() string { return "/" + cgroupParent + "/" + n.Name }

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

// Topology returns the nodes of a cluster with count nodes whose state lives
// under stateDir.
func Topology(stateDir string, count int) ([]Node, error) {
	if count < 1 || count > MaxNodes {
		return nil, fmt.Errorf("--nodes must be between 1 and %d, got %d", MaxNodes, count)
	}
	subnet := netip.MustParsePrefix(NodeSubnet)
	cluster := netip.MustParsePrefix(ClusterCIDR)
	nodes := make([]Node, count)
	for i := range nodes {
		name := NodeName(i)
		nodes[i] = Node{
			Index:    i,
			Name:     name,
			IP:       nthAddr(subnet.Addr(), firstNodeHost+i),
			PodCIDR:  netip.PrefixFrom(nthAddr(cluster.Addr(), i*256), 24),
			Netns:    fmt.Sprintf("%s%d", netnsPrefix, i),
			HostVeth: fmt.Sprintf("%s%d", hostVethPfx, i),
			Dir:      filepath.Join(stateDir, "nodes", name),
		}
	}
	return nodes, nil
}

// BridgeIP is the root namespace's address on the node network.
func BridgeIP() netip.Addr { return nthAddr(netip.MustParsePrefix(NodeSubnet).Addr(), 1) }

// DNSIP is the ClusterIP of the cluster DNS Service.
func DNSIP() netip.Addr { return nthAddr(netip.MustParsePrefix(ServiceCIDR).Addr(), 10) }

// nthAddr returns the IPv4 address n places after base.
func nthAddr(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// StateDir resolves the state directory: the flag value when set, else the
// environment variable StateDirEnv, else DefaultStateDir.
func StateDir(flag string) string {
	if flag != "" {
		return flag
	}
	if env := os.Getenv(StateDirEnv); env != "" {
		return env
	}
	return DefaultStateDir
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
