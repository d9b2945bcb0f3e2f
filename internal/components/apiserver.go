package components

import (
	"slices"
	"strconv"
)

// APIServer is what a control plane's kube-apiserver flags depend on.
type APIServer struct {
	// AdvertiseAddress is --advertise-address, the address the kubernetes
	// Service's endpoints publish.
	AdvertiseAddress string
	// Port is --secure-port.
	Port int
	// PKI holds the files the flags name.
	PKI PKIDir
	// Etcd is the member the API server stores its objects in.
	Etcd Etcd
	// ServiceCIDR is --service-cluster-ip-range.
	ServiceCIDR string
	// ClusterDomain is the cluster's DNS suffix, such as cluster.local.
	ClusterDomain string
}

// Flags is the kube-apiserver command line both control planes share.
func (a APIServer) Flags() Flags {
	return slices.Concat(
		Flags{{"advertise-address", a.AdvertiseAddress}, {"bind-address", "0.0.0.0"}, {"secure-port", strconv.Itoa(a.Port)}},
		a.Etcd.apiServerFlags(a.PKI),
		Flags{{"service-cluster-ip-range", a.ServiceCIDR}},
		Flags{{"client-ca-file", a.PKI.Path(CACert)}, {"tls-cert-file", a.PKI.Path(APIServerCert)}, {"tls-private-key-file", a.PKI.Path(APIServerKey)}},
		a.kubeletClientFlags(),
		a.serviceAccountFlags(),
		Flags{
			{"authorization-mode", "Node,RBAC"},
			// Kubelets may change only their own Node and its pods.
			{"enable-admission-plugins", "NodeRestriction"},
			{"enable-bootstrap-token-auth", "true"},
			{"allow-privileged", "true"},
		},
		a.frontProxyFlags(),
		Flags{{"profiling", "false"}},
	)
}

func (a APIServer) kubeletClientFlags() Flags {
	return Flags{
		{"kubelet-client-certificate", a.PKI.Path(KubeletClientCert)}, {"kubelet-client-key", a.PKI.Path(KubeletClientKey)},
		// InternalIP first (the default tries Hostname first): node names
		// resolve in no DNS the API server uses.
		{"kubelet-preferred-address-types", "InternalIP,Hostname"},
	}
}

// serviceAccountFlags sign and verify service-account tokens. The issuer is
// the API server's URL inside its cluster, the kubernetes Service, so the
// cluster's pods can fetch the issuer's discovery document from it, and the
// keys it names are there too: by default the document would name the
// advertise address, which a tenant's serving certificate does not.
func (a APIServer) serviceAccountFlags() Flags {
	issuer := "https://" + kubernetesServiceFQDN(a.ClusterDomain)
	return Flags{
		{"service-account-issuer", issuer},
		{"service-account-jwks-uri", issuer + "/openid/v1/jwks"},
		{"service-account-key-file", a.PKI.Path(ServiceAccountPub)},
		{"service-account-signing-key-file", a.PKI.Path(ServiceAccountKey)},
	}
}

// frontProxyFlags let aggregated API servers trust the user the API server
// proxies a request for: they accept the headers only from a client
// certificate named FrontProxyClientUser, the front-proxy CA signed.
func (a APIServer) frontProxyFlags() Flags {
	return Flags{
		{"requestheader-client-ca-file", a.PKI.Path(FrontProxyCACert)},
		{"requestheader-allowed-names", FrontProxyClientUser},
		{"requestheader-extra-headers-prefix", "X-Remote-Extra-"},
		{"requestheader-group-headers", "X-Remote-Group"},
		{"requestheader-username-headers", "X-Remote-User"},
		{"proxy-client-cert-file", a.PKI.Path(FrontProxyClientCert)}, {"proxy-client-key-file", a.PKI.Path(FrontProxyClientKey)},
	}
}
