package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nestdev/nest/internal/atomicfile"
	"github.com/nestdev/nest/internal/testutil"
)

// The fixes of the first review of the agent, each shown by what it refuses.

func TestJoinRequestStringNeverShowsAMalformedToken(t *testing.T) {
	r := JoinRequest{Server: "https://198.51.100.10:6443", BootstrapToken: "abcdef0123456789abcdef"}
	if s := r.String(); strings.Contains(s, "0123456789") || !strings.Contains(s, "<invalid>") {
		t.Errorf("String() = %q shows a malformed token", s)
	}
}

func TestJoinRequestValidateRefusesLooseServerURLs(t *testing.T) {
	for _, server := range []string{"https://:6443", "https://h:6443?x=y", "https://u:p@h:6443", "https://h:6443#frag"} {
		r := validJoinRequest(t)
		r.Server = server
		if err := r.Validate(); err == nil || !strings.HasPrefix(err.Error(), "server:") {
			t.Errorf("server %q: Validate() = %v, want an error naming server", server, err)
		}
	}
	r := validJoinRequest(t)
	r.ClusterDomain = "cluster..local"
	if err := r.Validate(); err == nil || !strings.HasPrefix(err.Error(), "clusterDomain:") {
		t.Errorf("clusterDomain cluster..local: Validate() = %v", err)
	}
}

func TestConfigValidateRefusesKeptFilesInsideWipedDirectories(t *testing.T) {
	c := fullConfig()
	c.SavedDir = c.Kubelet.RootDir + "/nest-saved"
	c.TLS.KeyFile = c.Kubelet.CertDir + "/agent.key"
	err := c.Validate()
	for _, field := range []string{"savedDir: must not be inside kubelet.rootDir", "tls.keyFile: must not be inside kubelet.certDir"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate() = %v, want %q", err, field)
		}
	}
	c = fullConfig()
	c.Listen = "198.51.100.11:abc"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "listen: the port") {
		t.Errorf("listen with a named port: Validate() = %v", err)
	}
}

func TestJoinWithACNIPluginThatIsNotAnObjectDoesNotPanic(t *testing.T) {
	env := newTestEnv(t)
	testutil.WriteFile(t, env.cfg.CNIConfigFile, `{"cniVersion":"1.0.0","name":"n","plugins":[null,{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24"}]]}}]}`)
	if err := env.node.SaveOwnConfig(); err != nil {
		t.Fatal(err)
	}
	env.services.set(ServiceKubelet, false)
	env.services.set(ServiceKubeProxy, false)
	req := validJoinRequest(t)
	req.PodCIDR = "10.120.3.0/24"
	if err := env.node.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := env.node.Join(context.Background(), req); err != nil {
		t.Fatalf("Join() = %v", err)
	}
	if got := testutil.ReadFile(t, env.cfg.CNIConfigFile); !strings.Contains(got, "10.120.3.0/24") {
		t.Errorf("CNI config %s lacks the pod CIDR", got)
	}
}

func TestResetWithoutSavedConfigRemovesNothing(t *testing.T) {
	env := newTestEnv(t) // SaveOwnConfig never ran
	env.services.set(ServiceKubelet, false)
	env.services.set(ServiceKubeProxy, false)
	before := env.snapshot(t)
	if err := env.node.Reset(context.Background()); err == nil {
		t.Fatal("Reset() without saved configuration succeeded")
	}
	if !reflect.DeepEqual(env.snapshot(t), before) {
		t.Error("a Reset that cannot put the node back removed files")
	}
	for _, c := range env.rec.all() {
		if strings.HasPrefix(c, "remove") || strings.HasPrefix(c, "unmount") {
			t.Errorf("Reset() called %q before finding it cannot put the node back", c)
		}
	}
}

func TestDecodeStrictRefusesTrailingData(t *testing.T) {
	var req JoinRequest
	err := decodeStrict(httptest.NewRequest(http.MethodPost, PathJoin, strings.NewReader(`{"server":"https://h:6443"} {"x":1}`)), &req)
	if err == nil || !strings.Contains(err.Error(), "nothing after it") {
		t.Errorf("decodeStrict = %v, want trailing data refused", err)
	}
}

// A kubelet that rotates its certificates writes its kubeconfig, pointing
// at kubelet-client-current.pem, before the certificate is signed: Start
// waits for the certificate, not the kubeconfig.
func TestStartWaitsForTheClientCertificateNotTheKubeconfig(t *testing.T) {
	env := newResetEnv(t)
	certFile := filepath.Join(env.cfg.Kubelet.CertDir, kubeletClientCert)
	if err := os.RemoveAll(env.cfg.Kubelet.CertDir); err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: targetServer}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: certFile}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	kubeconfig, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	signed := make(chan error, 1)
	env.services.setOnStart(func(s Service) {
		if s != ServiceKubelet {
			return
		}
		if err := atomicfile.Write(env.cfg.Kubelet.Kubeconfig, kubeconfig, 0o600); err != nil {
			signed <- err
			return
		}
		time.AfterFunc(300*time.Millisecond, func() {
			env.rec.add("certificate signed") // before the file, which releases Start
			signed <- atomicfile.Write(certFile, []byte("certificate and key"), 0o600)
		})
	})
	if err := env.node.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-signed; err != nil {
		t.Fatal(err)
	}
	want := []string{"start kubelet", "certificate signed", "start kube-proxy"}
	if got := env.rec.changes(); !reflect.DeepEqual(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
}
