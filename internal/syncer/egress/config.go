package egress

import (
	"fmt"
	"path/filepath"

	apiserverv1beta1 "k8s.io/apiserver/pkg/apis/apiserver/v1beta1"
	"sigs.k8s.io/yaml"
)

// maxSocketPath is the longest Unix socket path Linux binds, in bytes
// (sun_path is 108 bytes with the terminating NUL).
const maxSocketPath = 107

// EgressSelectorConfiguration returns the file kube-apiserver's
// --egress-selector-config-file reads, as YAML: an
// apiserver.k8s.io/v1beta1 EgressSelectorConfiguration whose `cluster`
// and `controlplane` selections use proxyProtocol HTTPConnect over the
// Unix socket socketPath (transport.uds.udsName), where Proxy serves.
//
// `cluster` carries the API server's traffic to kubelets, pods, Services'
// endpoints, aggregated API servers and webhooks named by Service;
// `controlplane` carries webhooks named by URL and the webhooks, audit
// and tracing back ends its flags name. There is no `etcd` selection: the
// API server keeps dialling etcd directly, on the pod's loopback, which
// the proxy refuses.
//
// It fails if socketPath is not absolute and clean or is longer than a
// Unix socket path may be.
func EgressSelectorConfiguration(socketPath string) ([]byte, error) {
	if !filepath.IsAbs(socketPath) || filepath.Clean(socketPath) != socketPath {
		return nil, fmt.Errorf("egress socket path %q is not absolute and clean", socketPath)
	}
	if len(socketPath) > maxSocketPath {
		return nil, fmt.Errorf("egress socket path %q is longer than %d bytes", socketPath, maxSocketPath)
	}
	proxied := apiserverv1beta1.Connection{
		ProxyProtocol: apiserverv1beta1.ProtocolHTTPConnect,
		Transport:     &apiserverv1beta1.Transport{UDS: &apiserverv1beta1.UDSTransport{UDSName: socketPath}},
	}
	cfg := apiserverv1beta1.EgressSelectorConfiguration{
		EgressSelections: []apiserverv1beta1.EgressSelection{
			{Name: "cluster", Connection: proxied},
			{Name: "controlplane", Connection: proxied},
		},
	}
	// The upstream types, so the field names are the API server's own.
	cfg.APIVersion = apiserverv1beta1.SchemeGroupVersion.String()
	cfg.Kind = "EgressSelectorConfiguration"
	return yaml.Marshal(cfg)
}
