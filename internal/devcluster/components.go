package devcluster

import (
	"fmt"
	"path/filepath"
	"sort"
)

// Files of the cluster PKI, relative to Layout.PKIDir.
const (
	caCert                = "ca.crt"
	caKey                 = "ca.key"
	apiserverCert         = "apiserver.crt"
	apiserverKey          = "apiserver.key"
	apiserverKubeletCert  = "apiserver-kubelet-client.crt"
	apiserverKubeletKey   = "apiserver-kubelet-client.key"
	frontProxyCACert      = "front-proxy-ca.crt"
	frontProxyCAKey       = "front-proxy-ca.key"
	frontProxyClientCert  = "front-proxy-client.crt"
	frontProxyClientKey   = "front-proxy-client.key"
	serviceAccountKey     = "sa.key"
	serviceAccountPubKey  = "sa.pub"
	frontProxyClientName  = "front-proxy-client"
	etcdClientURL         = "http://127.0.0.1:2379"
	etcdPeerURL           = "http://127.0.0.1:2380"
	serviceAccountIssuer  = "https://kubernetes.default.svc." + ClusterDomain
	controlPlaneNodeLabel = "node-role.kubernetes.io/control-plane"
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

// EtcdArgs is the etcd command line: one member, listening only on the
// control-plane namespace's loopback, which nothing outside that namespace reaches.
func EtcdArgs(l Layout, cp Node) Args {
	return Args{
		"name":                        cp.Name,
		"data-dir":                    l.EtcdDir(),
		"listen-client-urls":          etcdClientURL,
		"advertise-client-urls":       etcdClientURL,
		"listen-peer-urls":            etcdPeerURL,
		"initial-advertise-peer-urls": etcdPeerURL,
		"initial-cluster":             cp.Name + "=" + etcdPeerURL,
		"listen-metrics-urls":         "http://127.0.0.1:2381",
		"log-level":                   "warn",
	}
}

// APIServerArgs is the kube-apiserver command line.
func APIServerArgs(l Layout, cp Node) Args {
	pki := func(f string) string { return filepath.Join(l.PKIDir(), f) }
	return Args{
		"advertise-address":                  cp.IP.String(),
		"bind-address":                       "0.0.0.0",
		"secure-port":                        fmt.Sprint(APIServerPort),
		"etcd-servers":                       etcdClientURL,
		"service-cluster-ip-range":           ServiceCIDR,
		"client-ca-file":                     pki(caCert),
		"tls-cert-file":                      pki(apiserverCert),
		"tls-private-key-file":               pki(apiserverKey),
		"kubelet-client-certificate":         pki(apiserverKubeletCert),
		"kubelet-client-key":                 pki(apiserverKubeletKey),
		"kubelet-certificate-authority":      pki(caCert),
		"kubelet-preferred-address-types":    "InternalIP,Hostname",
		"service-account-issuer":             serviceAccountIssuer,
		"service-account-key-file":           pki(serviceAccountPubKey),
		"service-account-signing-key-file":   pki(serviceAccountKey),
		"authorization-mode":                 "Node,RBAC",
		"enable-admission-plugins":           "NodeRestriction",
		"allow-privileged":                   "true",
		"enable-bootstrap-token-auth":        "true",
		"requestheader-client-ca-file":       pki(frontProxyCACert),
		"requestheader-allowed-names":        frontProxyClientName,
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-username-headers":     "X-Remote-User",
		"proxy-client-cert-file":             pki(frontProxyClientCert),
		"proxy-client-key-file":              pki(frontProxyClientKey),
		"profiling":                          "false",
	}
}

// ControllerManagerArgs is the kube-controller-manager command line. Node pod
// CIDRs are fixed by the topology, so the controller-manager does not allocate them.
func ControllerManagerArgs(l Layout) Args {
	kc := l.Kubeconfig("controller-manager")
	return Args{
		"kubeconfig":                       kc,
		"authentication-kubeconfig":        kc,
		"authorization-kubeconfig":         kc,
		"bind-address":                     "127.0.0.1",
		"root-ca-file":                     filepath.Join(l.PKIDir(), caCert),
		"service-account-private-key-file": filepath.Join(l.PKIDir(), serviceAccountKey),
		"cluster-signing-cert-file":        filepath.Join(l.PKIDir(), caCert),
		"cluster-signing-key-file":         filepath.Join(l.PKIDir(), caKey),
		"use-service-account-credentials":  "true",
		"controllers":                      "*,bootstrapsigner,tokencleaner",
		"allocate-node-cidrs":              "false",
		"cluster-name":                     "nest",
		"leader-elect":                     "false",
		"profiling":                        "false",
	}
}

// SchedulerArgs is the kube-scheduler command line.
func SchedulerArgs(l Layout) Args {
	kc := l.Kubeconfig("scheduler")
	return Args{
		"kubeconfig":                kc,
		"authentication-kubeconfig": kc,
		"authorization-kubeconfig":  kc,
		"bind-address":              "127.0.0.1",
		"leader-elect":              "false",
		"profiling":                 "false",
	}
}

// KubeletArgs is node n's kubelet command line; the rest is in its config file.
func KubeletArgs(l Layout, n Node) Args {
	return Args{
		"config":            filepath.Join(n.Dir, "kubelet", "config.yaml"),
		"kubeconfig":        l.Kubeconfig("kubelet-" + n.Name),
		"hostname-override": n.Name,
		"node-ip":           n.IP.String(),
		"root-dir":          filepath.Join(n.Dir, "kubelet", "root"),
		"cert-dir":          filepath.Join(n.Dir, "kubelet", "pki"),
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
