package devcluster

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/nestdev/nest/internal/components"
)

const (
	// caCert is the cluster CA, which the kubelets also trust for clients.
	caCert                = components.CACert
	controlPlaneNodeLabel = "node-role.kubernetes.io/control-plane"

	controllerManagerKubeconfig = "controller-manager"
	schedulerKubeconfig         = "scheduler"
)

// KubeletServingCert names node n's kubelet serving certificate and key files.
func KubeletServingCert(n Node) (cert, key string) {
	return "kubelet-" + n.Name + ".crt", "kubelet-" + n.Name + ".key"
}

// APIServerURL is the URL at which nodes and the root namespace reach the API server.
func APIServerURL(cp Node) string { return fmt.Sprintf("https://%s:%d", cp.IP, APIServerPort) }

// loopbackAPIServerURL is the URL components inside the control-plane node's
// network namespace use.
func loopbackAPIServerURL() string { return fmt.Sprintf("https://127.0.0.1:%d", APIServerPort) }

func pkiDir(l Layout) components.PKIDir { return components.PKIDir(l.PKIDir()) }

// etcd is the cluster's etcd member. Unlike a tenant's it speaks plain HTTP:
// it listens only on the control-plane namespace's loopback, which nothing
// outside that namespace reaches.
func etcd(l Layout, cp Node) components.Etcd {
	return components.Etcd{Name: cp.Name, DataDir: l.EtcdDir()}
}

// EtcdArgs is the etcd command line.
func EtcdArgs(l Layout, cp Node) Args { return argsOf(etcd(l, cp).Flags()) }

// APIServerArgs is the kube-apiserver command line.
func APIServerArgs(l Layout, cp Node) Args {
	a := argsOf(components.APIServer{
		AdvertiseAddress: cp.IP.String(),
		Port:             APIServerPort,
		PKI:              pkiDir(l),
		Etcd:             etcd(l, cp),
		ServiceCIDR:      cp.Net.ServiceCIDR.String(),
		ClusterDomain:    ClusterDomain,
	}.Flags())
	// Host only: its kubelets serve certificates the cluster CA signed for
	// their node's name and IP (ensurePKI), so the API server verifies them.
	// A tenant's API server has one kubelet, nest-syncer, on its own pod's
	// loopback.
	a["kubelet-certificate-authority"] = pkiDir(l).Path(components.CACert)
	return a
}

// ControllerManagerArgs is the kube-controller-manager command line.
func ControllerManagerArgs(l Layout) Args {
	a := argsOf(components.ControllerManagerFlags(clientComponent(l, controllerManagerKubeconfig), pkiDir(l), components.CACert))
	// Host only. Node pod CIDRs are fixed by the topology, so the
	// controller-manager does not allocate them (false is also upstream's
	// default); the cluster name reaches only cloud providers, which neither
	// cluster has.
	a["allocate-node-cidrs"] = "false"
	a["cluster-name"] = "nest"
	return a
}

// SchedulerArgs is the kube-scheduler command line.
func SchedulerArgs(l Layout) Args {
	return argsOf(components.SchedulerFlags(clientComponent(l, schedulerKubeconfig)))
}

// clientComponent is the controller-manager or scheduler with the kubeconfig
// named kubeconfig. Its HTTPS endpoint stays on loopback, unlike a tenant's:
// nothing outside the control-plane node's namespace probes it.
func clientComponent(l Layout, kubeconfig string) components.ClientComponent {
	return components.ClientComponent{Kubeconfig: l.Kubeconfig(kubeconfig), BindAddress: "127.0.0.1"}
}

// argsOf keys flags by name; Args.Render sorts them again.
func argsOf(f components.Flags) Args { return Args(f.Map()) }

// KubeletArgs is node n's kubelet command line; the rest is in its config
// file. Its kubeconfig starts as a copy of the node's host credential
// (writeNodeFiles); nest-agent replaces it when the node joins another
// cluster, through the bootstrap kubeconfig.
func KubeletArgs(n Node) Args {
	return Args{
		"config":               filepath.Join(n.Dir, "kubelet", "config.yaml"),
		"kubeconfig":           filepath.Join(n.Dir, "kubelet", "kubelet.conf"),
		"bootstrap-kubeconfig": filepath.Join(n.Dir, "kubelet", "bootstrap-kubelet.conf"),
		"hostname-override":    n.Name,
		"node-ip":              n.IP.String(),
		"root-dir":             filepath.Join(n.Dir, "kubelet", "root"),
		"cert-dir":             filepath.Join(n.Dir, "kubelet", "pki"),
	}
}

// KubeProxyArgs is node n's kube-proxy command line.
func KubeProxyArgs(n Node) Args {
	return Args{"config": filepath.Join(n.Dir, "kube-proxy.yaml")}
}

// ContainerdArgs is node n's containerd command line.
func ContainerdArgs(n Node) Args {
	return Args{"config": filepath.Join(n.Dir, "containerd", "config.toml")}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
