package egress

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/apis/apiserver/install"
)

// decodeConfig decodes data as kube-apiserver reads
// --egress-selector-config-file (egressselector.ReadEgressSelectorConfiguration):
// strictly, through the apiserver.k8s.io scheme, so an unknown or misspelt
// field fails, into the internal type.
func decodeConfig(t *testing.T, data []byte) *apiserver.EgressSelectorConfiguration {
	t.Helper()
	scheme := runtime.NewScheme()
	install.Install(scheme)
	obj, gvk, err := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("kube-apiserver cannot read\n%s: %v", data, err)
	}
	cfg, ok := obj.(*apiserver.EgressSelectorConfiguration)
	if !ok {
		t.Fatalf("decoded a %v, not an EgressSelectorConfiguration", gvk)
	}
	return cfg
}

// TestEgressSelectorConfiguration decodes the file as kube-apiserver does
// and checks its selections; TestUpstreamConfig
// also runs kube-apiserver's own reader and validation on it.
func TestEgressSelectorConfiguration(t *testing.T) {
	sock := "/var/run/nest/egress.sock"
	data, err := EgressSelectorConfiguration(sock)
	if err != nil {
		t.Fatal(err)
	}
	checkConfig(t, sock, data, decodeConfig(t, data))
}

// checkConfig checks cfg, decoded from data: cluster and controlplane
// through HTTPConnect over the Unix socket sock, no etcd.
func checkConfig(t *testing.T, sock string, data []byte, cfg *apiserver.EgressSelectorConfiguration) {
	t.Helper()
	got := map[string]apiserver.Connection{}
	for _, s := range cfg.EgressSelections {
		got[s.Name] = s.Connection
	}
	if len(got) != 2 || len(cfg.EgressSelections) != 2 {
		t.Errorf("selections %v, want cluster and controlplane", cfg.EgressSelections)
	}
	for _, name := range []string{"cluster", "controlplane"} {
		c, ok := got[name]
		switch {
		case !ok:
			t.Errorf("no %s selection", name)
		case c.ProxyProtocol != apiserver.ProtocolHTTPConnect:
			t.Errorf("%s: proxyProtocol %q, want HTTPConnect", name, c.ProxyProtocol)
		case c.Transport == nil || c.Transport.TCP != nil || c.Transport.UDS == nil || c.Transport.UDS.UDSName != sock:
			t.Errorf("%s: transport %+v, want uds %s only", name, c.Transport, sock)
		}
	}
	if _, ok := got["etcd"]; ok {
		t.Error("an etcd selection: etcd must stay direct, on loopback")
	}
	if !strings.Contains(string(data), "apiVersion: apiserver.k8s.io/v1beta1\n") {
		t.Errorf("not apiserver.k8s.io/v1beta1:\n%s", data)
	}
}

func TestEgressSelectorConfigurationBadPath(t *testing.T) {
	for _, path := range []string{"", "egress.sock", "/run/nest/../egress.sock", "/run/nest/", "/" + strings.Repeat("x", 107)} {
		if data, err := EgressSelectorConfiguration(path); err == nil {
			t.Errorf("EgressSelectorConfiguration(%q) = %s, want an error", path, data)
		}
	}
	if _, err := EgressSelectorConfiguration("/" + strings.Repeat("x", 106)); err != nil {
		t.Errorf("a 107-byte path: %v", err)
	}
}
