package agent

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/nestdev/nest/internal/atomicfile"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/testutil"
)

// --- SaveOwnConfig

func TestSaveOwnConfigCopiesTheThreeFiles(t *testing.T) {
	env := newTestEnv(t)
	if err := env.node.SaveOwnConfig(); err != nil {
		t.Fatal(err)
	}
	for saved, want := range map[string]string{
		savedKubeletConfig:   ownKubeletConfig,
		savedKubeProxyConfig: ownKubeProxyConfig,
		savedCNIConfig:       ownCNIConfig,
	} {
		if got := testutil.ReadFile(t, filepath.Join(env.cfg.SavedDir, saved)); got != want {
			t.Errorf("%s =\n%s\nwant\n%s", saved, got, want)
		}
	}
	entries, err := os.ReadDir(env.cfg.SavedDir)
	if err != nil || len(entries) != 3 {
		t.Errorf("savedDir holds %d entries (%v), want the 3 copies", len(entries), err)
	}
}

func TestSaveOwnConfigKeepsTheFirstCopies(t *testing.T) {
	env := newSavedEnv(t)
	for _, live := range []string{env.cfg.Kubelet.Config, env.cfg.KubeProxy.Config, env.cfg.CNIConfigFile} {
		testutil.WriteFile(t, live, "changed by a join elsewhere")
	}
	if err := env.node.SaveOwnConfig(); err != nil {
		t.Fatal(err)
	}
	for saved, want := range map[string]string{
		savedKubeletConfig:   ownKubeletConfig,
		savedKubeProxyConfig: ownKubeProxyConfig,
		savedCNIConfig:       ownCNIConfig,
	} {
		if got := testutil.ReadFile(t, filepath.Join(env.cfg.SavedDir, saved)); got != want {
			t.Errorf("%s was replaced by %q", saved, got)
		}
	}
}

func TestSaveOwnConfigNamesTheMissingFile(t *testing.T) {
	tests := []struct {
		field string
		live  func(c Config) string
	}{
		{"kubelet.config", func(c Config) string { return c.Kubelet.Config }},
		{"kubeProxy.config", func(c Config) string { return c.KubeProxy.Config }},
		{"cniConfigFile", func(c Config) string { return c.CNIConfigFile }},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			env := newTestEnv(t)
			if err := os.Remove(tt.live(env.cfg)); err != nil {
				t.Fatal(err)
			}
			err := env.node.SaveOwnConfig()
			if err == nil || !strings.HasPrefix(err.Error(), tt.field+":") || !errors.Is(err, os.ErrNotExist) {
				t.Errorf("SaveOwnConfig() = %v, want a not-exist error naming %s", err, tt.field)
			}
		})
	}
}

// --- Status

func TestStatusReportsTheNode(t *testing.T) {
	env := newSavedEnv(t)
	env.services.set(ServiceKubelet, true)
	env.runtime.sandboxes = 3
	got, err := env.node.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := Status{
		NodeName:     "node-a",
		Kubelet:      ServiceStatus{Running: true},
		KubeProxy:    ServiceStatus{Running: false},
		Server:       homeServer,
		Bootstrapped: true,
		PodCIDR:      ownPodCIDR,
		Sandboxes:    3,
	}
	if got != want {
		t.Errorf("Status() = %+v, want %+v", got, want)
	}
}

func TestStatusServerFromBootstrapKubeconfigWithoutKubeconfig(t *testing.T) {
	env := newResetEnv(t)
	writeKubeconfig(t, env.cfg.Kubelet.BootstrapKubeconfig, targetServer)
	got, err := env.node.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.Server != targetServer || got.Bootstrapped {
		t.Errorf("Server = %q, Bootstrapped = %v; want the bootstrap kubeconfig's %q, not bootstrapped yet", got.Server, got.Bootstrapped, targetServer)
	}
}

func TestStatusPrefersKubeconfigOverBootstrapKubeconfig(t *testing.T) {
	env := newSavedEnv(t)
	writeKubeconfig(t, env.cfg.Kubelet.BootstrapKubeconfig, targetServer)
	got, err := env.node.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.Server != homeServer {
		t.Errorf("Server = %q, want the kubeconfig's %q", got.Server, homeServer)
	}
}

func TestStatusEmptyServerAndPodCIDRWithoutFiles(t *testing.T) {
	env := newResetEnv(t)
	if err := os.Remove(env.cfg.CNIConfigFile); err != nil {
		t.Fatal(err)
	}
	got, err := env.node.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.Server != "" || got.PodCIDR != "" {
		t.Errorf("Status() = %+v, want no server and no pod CIDR", got)
	}
}

func TestStatusFailsOnUnreadableCNIConfig(t *testing.T) {
	env := newSavedEnv(t)
	testutil.WriteFile(t, env.cfg.CNIConfigFile, "{not json")
	if _, err := env.node.Status(context.Background()); err == nil || !strings.Contains(err.Error(), env.cfg.CNIConfigFile) {
		t.Errorf("Status() = %v, want an error naming the CNI configuration", err)
	}
}

// --- Stop

func TestStopStopsKubeProxyBeforeKubelet(t *testing.T) {
	env := newSavedEnv(t)
	env.services.set(ServiceKubelet, true)
	env.services.set(ServiceKubeProxy, true)
	if err := env.node.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := env.rec.changes(), []string{"stop kube-proxy", "stop kubelet"}; !reflect.DeepEqual(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
	if env.services.isRunning(ServiceKubelet) || env.services.isRunning(ServiceKubeProxy) {
		t.Error("a service still runs after Stop")
	}
}

func TestStopKeepsKubeletWhenKubeProxyDoesNotStop(t *testing.T) {
	env := newSavedEnv(t)
	env.services.set(ServiceKubelet, true)
	env.services.set(ServiceKubeProxy, true)
	env.services.stopErr[ServiceKubeProxy] = errors.New("refused")
	err := env.node.Stop(context.Background())
	if err == nil || !strings.Contains(err.Error(), "kube-proxy") {
		t.Errorf("Stop() = %v, want an error naming kube-proxy", err)
	}
	if got, want := env.rec.changes(), []string{"stop kube-proxy"}; !reflect.DeepEqual(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
}

// --- Reset

func TestResetRefusedWhileAServiceRuns(t *testing.T) {
	for _, s := range []Service{ServiceKubelet, ServiceKubeProxy} {
		t.Run(string(s), func(t *testing.T) {
			env := newSavedEnv(t)
			env.services.set(s, true)
			before := env.snapshot(t)
			err := env.node.Reset(context.Background())
			var conflict *ConflictError
			if !errors.As(err, &conflict) {
				t.Fatalf("Reset() = %v, want a *ConflictError", err)
			}
			if !strings.Contains(err.Error(), string(s)) {
				t.Errorf("Reset() = %q, want it to name %s", err, s)
			}
			if got := env.rec.changes(); len(got) != 0 {
				t.Errorf("calls = %q, want none", got)
			}
			if after := env.snapshot(t); !reflect.DeepEqual(after, before) {
				t.Error("Reset changed files while refusing")
			}
		})
	}
}

func TestResetAfterStopAndJoinRemovesStateAndPutsBackOwnConfig(t *testing.T) {
	env := newSavedEnv(t)
	env.services.set(ServiceKubelet, true)
	env.services.set(ServiceKubeProxy, true)
	env.runtime.sandboxes = 4
	ctx := context.Background()
	if err := env.node.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(env.cfg.Kubelet.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	if err := env.node.Join(ctx, validJoinRequest(t)); err != nil {
		t.Fatal(err)
	}
	// What the kubelet writes once it has joined.
	writeKubeconfig(t, env.cfg.Kubelet.Kubeconfig, targetServer)
	for _, live := range []string{env.cfg.Kubelet.Config, env.cfg.KubeProxy.Config, env.cfg.CNIConfigFile} {
		if testutil.ReadFile(t, live) == "" {
			t.Fatalf("%s is empty after Join", live)
		}
	}

	// The fake unmount checks that the kubelet's root dir is still there.
	var rootExisted bool
	env.node.unmount = func(root string) error {
		env.rec.add("unmount " + root)
		_, err := os.Stat(root)
		rootExisted = err == nil
		return nil
	}
	if err := env.node.Reset(ctx); err != nil {
		t.Fatal(err)
	}

	wantCalls := []string{"stop kube-proxy", "stop kubelet", "remove sandboxes", "unmount " + env.cfg.Kubelet.RootDir}
	if got := env.rec.changes(); !reflect.DeepEqual(got, wantCalls) {
		t.Errorf("calls = %q, want %q", got, wantCalls)
	}
	if !rootExisted {
		t.Error("unmount ran after the kubelet's root dir was removed")
	}
	for _, path := range []string{
		env.cfg.Kubelet.RootDir, env.cfg.Kubelet.CertDir, env.cfg.Kubelet.Kubeconfig,
		env.cfg.Kubelet.BootstrapKubeconfig, env.cfg.Kubelet.ClientCAFile, env.cfg.KubeProxy.Kubeconfig,
	} {
		assertAbsent(t, path)
	}
	for live, want := range map[string]string{
		env.cfg.Kubelet.Config:   ownKubeletConfig,
		env.cfg.KubeProxy.Config: ownKubeProxyConfig,
		env.cfg.CNIConfigFile:    ownCNIConfig,
	} {
		if got := testutil.ReadFile(t, live); got != want {
			t.Errorf("%s =\n%s\nwant the node's own, byte for byte:\n%s", live, got, want)
		}
	}
	assertExists(t, filepath.Join(env.cfg.SavedDir, savedKubeletConfig))
	st, err := env.node.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Server != "" || st.Sandboxes != 0 || st.PodCIDR != ownPodCIDR {
		t.Errorf("Status() after Reset = %+v, want no server, no sandboxes, pod CIDR %s", st, ownPodCIDR)
	}
}

func TestResetTwiceSucceeds(t *testing.T) {
	env := newSavedEnv(t)
	ctx := context.Background()
	for i := range 2 {
		if err := env.node.Reset(ctx); err != nil {
			t.Fatalf("Reset #%d: %v", i+1, err)
		}
	}
	if got := testutil.ReadFile(t, env.cfg.Kubelet.Config); got != ownKubeletConfig {
		t.Errorf("kubelet config = %q after two resets", got)
	}
}

func TestResetStopsAtFailedUnmount(t *testing.T) {
	env := newSavedEnv(t)
	env.node.unmount = func(string) error { return errors.New("device busy") }
	err := env.node.Reset(context.Background())
	if err == nil || !strings.Contains(err.Error(), "device busy") {
		t.Fatalf("Reset() = %v, want the unmount error", err)
	}
	// Nothing under a mount point may be removed while it is still mounted.
	assertExists(t, filepath.Join(env.cfg.Kubelet.RootDir, "pods", "uid", "volumes", "data"))
}

func TestResetWithoutSavedConfigNamesTheField(t *testing.T) {
	env := newTestEnv(t) // SaveOwnConfig never ran
	err := env.node.Reset(context.Background())
	if err == nil || !strings.Contains(err.Error(), "put back kubelet.config") {
		t.Errorf("Reset() = %v, want an error about putting back kubelet.config", err)
	}
}

// --- Join

func TestJoinRefusesInvalidRequest(t *testing.T) {
	env := newResetEnv(t)
	req := validJoinRequest(t)
	req.PodCIDR = "10.120.3.0"
	before := env.snapshot(t)
	err := env.node.Join(context.Background(), req)
	var bad *BadRequestError
	if !errors.As(err, &bad) || !strings.HasPrefix(err.Error(), "podCIDR:") {
		t.Fatalf("Join() = %v, want a *BadRequestError naming podCIDR", err)
	}
	if calls := env.rec.all(); len(calls) != 0 {
		t.Errorf("calls = %q, want none", calls)
	}
	if !reflect.DeepEqual(env.snapshot(t), before) {
		t.Error("Join changed files while refusing")
	}
}

func TestJoinRefusedWhileAServiceRuns(t *testing.T) {
	for _, s := range []Service{ServiceKubelet, ServiceKubeProxy} {
		t.Run(string(s), func(t *testing.T) {
			env := newResetEnv(t)
			env.services.set(s, true)
			before := env.snapshot(t)
			err := env.node.Join(context.Background(), validJoinRequest(t))
			var conflict *ConflictError
			if !errors.As(err, &conflict) {
				t.Fatalf("Join() = %v, want a *ConflictError", err)
			}
			if !reflect.DeepEqual(env.snapshot(t), before) {
				t.Error("Join changed files while refusing")
			}
		})
	}
}

func TestJoinRefusedWhileJoinedToAnotherServer(t *testing.T) {
	env := newSavedEnv(t) // the kubelet kubeconfig names homeServer
	before := env.snapshot(t)
	err := env.node.Join(context.Background(), validJoinRequest(t))
	var conflict *ConflictError
	if !errors.As(err, &conflict) {
		t.Fatalf("Join() = %v, want a *ConflictError", err)
	}
	for _, want := range []string{"reset", homeServer, targetServer} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Join() = %q, want it to mention %q", err, want)
		}
	}
	if !reflect.DeepEqual(env.snapshot(t), before) {
		t.Error("Join changed files while refusing")
	}
}

func TestJoinAllowedWhenJoinedToTheSameServer(t *testing.T) {
	env := newSavedEnv(t)
	writeKubeconfig(t, env.cfg.Kubelet.Kubeconfig, targetServer)
	if err := env.node.Join(context.Background(), validJoinRequest(t)); err != nil {
		t.Fatalf("Join() = %v, want a rejoin of the same server to be allowed", err)
	}
}

// kubeletJoinedWith writes the kubelet's kubeconfig of req's server
// trusting caPEM, as its TLS bootstrap does, and a certificate in its
// certificate directory; it returns that certificate's path.
func kubeletJoinedWith(t *testing.T, env *testEnv, req JoinRequest, caPEM []byte) string {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfigBytes(t, req.Server))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Clusters["home"].CertificateAuthorityData = caPEM
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, env.cfg.Kubelet.Kubeconfig, string(data))
	cert := filepath.Join(env.cfg.Kubelet.CertDir, kubeletClientCert)
	testutil.WriteFile(t, cert, "a client certificate the old CA signed")
	return cert
}

func TestJoinWithAnotherCABundleOfTheSameServerRebootstraps(t *testing.T) {
	env := newSavedEnv(t)
	req := validJoinRequest(t)
	cert := kubeletJoinedWith(t, env, req, newCACertPEM(t, "the old cluster CA"))
	pods := filepath.Join(env.cfg.Kubelet.RootDir, "pods", "a-pod")
	testutil.WriteFile(t, filepath.Join(pods, "state"), "kept")
	if err := env.node.Join(context.Background(), req); err != nil {
		t.Fatalf("Join() = %v, want the new CA bundle of the same server taken", err)
	}
	assertAbsent(t, env.cfg.Kubelet.Kubeconfig)
	assertAbsent(t, cert)
	assertExists(t, pods)
	cluster, _ := loadKubeconfig(t, env.cfg.Kubelet.BootstrapKubeconfig)
	if string(cluster.CertificateAuthorityData) != string(req.CACertPEM) {
		t.Error("the bootstrap kubeconfig does not trust the request's CA bundle")
	}
	st, err := env.node.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.CAHash != "" || st.Bootstrapped {
		t.Errorf("Status: caHash %q, bootstrapped %v; want neither until the kubelet bootstraps again", st.CAHash, st.Bootstrapped)
	}
}

func TestJoinWithTheSameCABundleKeepsTheKubeletsCredentials(t *testing.T) {
	env := newSavedEnv(t)
	req := validJoinRequest(t)
	cert := kubeletJoinedWith(t, env, req, req.CACertPEM)
	if err := env.node.Join(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	assertExists(t, env.cfg.Kubelet.Kubeconfig)
	assertExists(t, cert)
	st, err := env.node.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := pki.BundleHash(req.CACertPEM); want == "" || st.CAHash != want {
		t.Errorf("Status().CAHash = %q, want the request's bundle's %q", st.CAHash, want)
	}
}

// joined is a reset node after a Join of req.
func joined(t *testing.T, req JoinRequest) *testEnv {
	t.Helper()
	env := newResetEnv(t)
	if err := env.node.Join(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return env
}

// loadKubeconfig reads the kubeconfig at path and returns its current
// context's cluster and user.
func loadKubeconfig(t *testing.T, path string) (*clientcmdapi.Cluster, *clientcmdapi.AuthInfo) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		t.Fatalf("%s has no current context %q", path, cfg.CurrentContext)
	}
	cluster, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if cluster == nil || user == nil {
		t.Fatalf("%s: context %q lacks its cluster or user", path, cfg.CurrentContext)
	}
	return cluster, user
}

func assertMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != want {
		t.Errorf("%s has mode %v, want %v", path, st.Mode().Perm(), want)
	}
}

func TestJoinWritesBootstrapKubeconfig(t *testing.T) {
	req := validJoinRequest(t)
	env := joined(t, req)
	cluster, user := loadKubeconfig(t, env.cfg.Kubelet.BootstrapKubeconfig)
	if cluster.Server != req.Server || string(cluster.CertificateAuthorityData) != string(req.CACertPEM) {
		t.Errorf("cluster = %s with CA %q, want %s with the request's CA", cluster.Server, cluster.CertificateAuthorityData, req.Server)
	}
	if user.Token != testToken || user.ClientCertificate != "" || len(user.ClientCertificateData) != 0 {
		t.Errorf("user = %+v, want only the bootstrap token", user)
	}
	assertMode(t, env.cfg.Kubelet.BootstrapKubeconfig, 0o600)
}

func TestJoinWritesKubeletClientCA(t *testing.T) {
	req := validJoinRequest(t)
	env := joined(t, req)
	if got := testutil.ReadFile(t, env.cfg.Kubelet.ClientCAFile); got != string(req.KubeletClientCAPEM) {
		t.Errorf("kubelet client CA file = %q, want the request's", got)
	}
}

func readKubeletConfig(t *testing.T, path string) kubeletv1beta1.KubeletConfiguration {
	t.Helper()
	var cfg kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict([]byte(testutil.ReadFile(t, path)), &cfg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cfg
}

func TestJoinWritesKubeletConfig(t *testing.T) {
	tests := []struct {
		serverTLSBootstrap bool
		wantTLSCertFile    string
		wantTLSKeyFile     string
	}{
		{true, "", ""},
		{false, "/etc/kubernetes/pki/kubelet.crt", "/etc/kubernetes/pki/kubelet.key"},
	}
	for _, tt := range tests {
		name := "own serving certificate"
		if tt.serverTLSBootstrap {
			name = "server TLS bootstrap"
		}
		t.Run(name, func(t *testing.T) {
			req := validJoinRequest(t)
			req.ServerTLSBootstrap = tt.serverTLSBootstrap
			env := joined(t, req)
			got := readKubeletConfig(t, env.cfg.Kubelet.Config)
			if got.Kind != "KubeletConfiguration" || got.APIVersion != kubeletv1beta1.SchemeGroupVersion.String() {
				t.Errorf("kind %q apiVersion %q, want the node's own", got.Kind, got.APIVersion)
			}
			if !reflect.DeepEqual(got.ClusterDNS, req.ClusterDNS) || got.ClusterDomain != req.ClusterDomain {
				t.Errorf("clusterDNS %v clusterDomain %q, want %v %q", got.ClusterDNS, got.ClusterDomain, req.ClusterDNS, req.ClusterDomain)
			}
			if got.Authentication.X509.ClientCAFile != env.cfg.Kubelet.ClientCAFile {
				t.Errorf("clientCAFile = %q, want %q", got.Authentication.X509.ClientCAFile, env.cfg.Kubelet.ClientCAFile)
			}
			if !got.RotateCertificates {
				t.Error("rotateCertificates is false")
			}
			if got.ServerTLSBootstrap != tt.serverTLSBootstrap {
				t.Errorf("serverTLSBootstrap = %v, want %v", got.ServerTLSBootstrap, tt.serverTLSBootstrap)
			}
			if got.TLSCertFile != tt.wantTLSCertFile || got.TLSPrivateKeyFile != tt.wantTLSKeyFile {
				t.Errorf("tlsCertFile %q tlsPrivateKeyFile %q, want %q %q", got.TLSCertFile, got.TLSPrivateKeyFile, tt.wantTLSCertFile, tt.wantTLSKeyFile)
			}
			assertMode(t, env.cfg.Kubelet.Config, 0o644)
		})
	}
}

func TestJoinWithoutOptionalFieldsKeepsOwnSettings(t *testing.T) {
	full := validJoinRequest(t)
	req := JoinRequest{Server: full.Server, CACertPEM: full.CACertPEM, BootstrapToken: full.BootstrapToken}
	env := joined(t, req)
	kubelet := readKubeletConfig(t, env.cfg.Kubelet.Config)
	if !reflect.DeepEqual(kubelet.ClusterDNS, []string{"10.96.0.10"}) || kubelet.ClusterDomain != "cluster.local" {
		t.Errorf("clusterDNS %v clusterDomain %q, want the node's own", kubelet.ClusterDNS, kubelet.ClusterDomain)
	}
	if kubelet.Authentication.X509.ClientCAFile != "/etc/kubernetes/pki/ca.crt" {
		t.Errorf("clientCAFile = %q, want the node's own", kubelet.Authentication.X509.ClientCAFile)
	}
	if kubelet.TLSCertFile != "/etc/kubernetes/pki/kubelet.crt" || kubelet.ServerTLSBootstrap {
		t.Errorf("tlsCertFile %q serverTLSBootstrap %v, want the node's own certificate", kubelet.TLSCertFile, kubelet.ServerTLSBootstrap)
	}
	assertAbsent(t, env.cfg.Kubelet.ClientCAFile)
	if got := readKubeProxyConfig(t, env.cfg.KubeProxy.Config); got.ClusterCIDR != "10.244.0.0/16" {
		t.Errorf("kube-proxy clusterCIDR = %q, want the node's own", got.ClusterCIDR)
	}
	if got := testutil.ReadFile(t, env.cfg.CNIConfigFile); got != ownCNIConfig {
		t.Errorf("CNI configuration changed without a podCIDR:\n%s", got)
	}
}

func TestJoinBuildsOnTheSavedNotTheLiveConfig(t *testing.T) {
	first := validJoinRequest(t)
	env := joined(t, first)
	second := JoinRequest{Server: first.Server, CACertPEM: first.CACertPEM, BootstrapToken: first.BootstrapToken}
	if err := env.node.Join(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	kubelet := readKubeletConfig(t, env.cfg.Kubelet.Config)
	if !reflect.DeepEqual(kubelet.ClusterDNS, []string{"10.96.0.10"}) || kubelet.ServerTLSBootstrap {
		t.Errorf("clusterDNS %v serverTLSBootstrap %v, want the node's own after a join without them", kubelet.ClusterDNS, kubelet.ServerTLSBootstrap)
	}
}

func TestJoinWritesKubeProxyKubeconfig(t *testing.T) {
	req := validJoinRequest(t)
	env := joined(t, req)
	cluster, user := loadKubeconfig(t, env.cfg.KubeProxy.Kubeconfig)
	if cluster.Server != req.Server || string(cluster.CertificateAuthorityData) != string(req.CACertPEM) {
		t.Errorf("cluster = %s, want %s with the request's CA", cluster.Server, req.Server)
	}
	clientCert := filepath.Join(env.cfg.Kubelet.CertDir, "kubelet-client-current.pem")
	if user.ClientCertificate != clientCert || user.ClientKey != clientCert {
		t.Errorf("client-certificate %q client-key %q, want both %q", user.ClientCertificate, user.ClientKey, clientCert)
	}
	if user.Token != "" {
		t.Error("kube-proxy's kubeconfig holds the bootstrap token")
	}
	assertMode(t, env.cfg.KubeProxy.Kubeconfig, 0o600)
}

func readKubeProxyConfig(t *testing.T, path string) kubeproxyv1alpha1.KubeProxyConfiguration {
	t.Helper()
	var cfg kubeproxyv1alpha1.KubeProxyConfiguration
	if err := yaml.UnmarshalStrict([]byte(testutil.ReadFile(t, path)), &cfg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cfg
}

func TestJoinWritesKubeProxyConfig(t *testing.T) {
	req := validJoinRequest(t)
	env := joined(t, req)
	got := readKubeProxyConfig(t, env.cfg.KubeProxy.Config)
	if got.Kind != "KubeProxyConfiguration" || got.APIVersion != kubeproxyv1alpha1.SchemeGroupVersion.String() {
		t.Errorf("kind %q apiVersion %q, want the node's own", got.Kind, got.APIVersion)
	}
	if got.ClientConnection.Kubeconfig != env.cfg.KubeProxy.Kubeconfig {
		t.Errorf("clientConnection.kubeconfig = %q, want %q", got.ClientConnection.Kubeconfig, env.cfg.KubeProxy.Kubeconfig)
	}
	if got.ClusterCIDR != req.ClusterCIDR {
		t.Errorf("clusterCIDR = %q, want %q", got.ClusterCIDR, req.ClusterCIDR)
	}
	if got.Mode != "iptables" {
		t.Errorf("mode = %q, want the node's own iptables", got.Mode)
	}
}

func TestJoinWritesCNIConfigForPodCIDR(t *testing.T) {
	req := validJoinRequest(t)
	env := joined(t, req)
	var list struct {
		Name    string           `json:"name"`
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(testutil.ReadFile(t, env.cfg.CNIConfigFile)), &list); err != nil {
		t.Fatal(err)
	}
	if list.Name != "nest" || len(list.Plugins) != 2 {
		t.Fatalf("CNI list %q with %d plugins, want the node's own two", list.Name, len(list.Plugins))
	}
	ipam, _ := list.Plugins[0]["ipam"].(map[string]any)
	wantRanges := []any{[]any{map[string]any{"subnet": req.PodCIDR}}}
	if !reflect.DeepEqual(ipam["ranges"], wantRanges) {
		t.Errorf("ranges = %v, want %v", ipam["ranges"], wantRanges)
	}
	if ipam["type"] != "host-local" || ipam["routes"] == nil || list.Plugins[0]["bridge"] != "cni0" {
		t.Errorf("bridge plugin lost its other settings: %v", list.Plugins[0])
	}
	if list.Plugins[1]["type"] != "portmap" {
		t.Errorf("second plugin = %v, want portmap kept", list.Plugins[1])
	}
	st, err := env.node.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.PodCIDR != req.PodCIDR {
		t.Errorf("Status().PodCIDR = %q, want %q", st.PodCIDR, req.PodCIDR)
	}
}

func TestJoinWithoutPodCIDRKeepsCNIConfig(t *testing.T) {
	req := validJoinRequest(t)
	req.PodCIDR = ""
	env := joined(t, req)
	if got := testutil.ReadFile(t, env.cfg.CNIConfigFile); got != ownCNIConfig {
		t.Errorf("CNI configuration changed without a podCIDR:\n%s", got)
	}
}

func TestJoinTwiceWritesTheSameFiles(t *testing.T) {
	req := validJoinRequest(t)
	env := joined(t, req)
	first := env.snapshot(t)
	if err := env.node.Join(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	second := env.snapshot(t)
	if !reflect.DeepEqual(first, second) {
		for path, data := range second {
			if first[path] != data {
				t.Errorf("%s changed on the second Join", path)
			}
		}
		t.Errorf("files after the second Join differ (%d files, then %d)", len(first), len(second))
	}
}

func TestJoinPodCIDRWithoutIPAMRangesIsBadRequest(t *testing.T) {
	env := newTestEnv(t)
	testutil.WriteFile(t, env.cfg.CNIConfigFile, `{"cniVersion":"1.0.0","name":"nest","plugins":[{"type":"bridge","ipam":{"type":"dhcp"}},{"type":"portmap"}]}`)
	if err := env.node.SaveOwnConfig(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(env.cfg.Kubelet.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	before := env.snapshot(t)
	err := env.node.Join(context.Background(), validJoinRequest(t))
	var bad *BadRequestError
	if !errors.As(err, &bad) || !strings.HasPrefix(err.Error(), "podCIDR:") {
		t.Fatalf("Join() = %v, want a *BadRequestError naming podCIDR", err)
	}
	if !reflect.DeepEqual(env.snapshot(t), before) {
		t.Error("Join wrote files before it found the CNI configuration unusable")
	}
}

func TestJoinWithoutSavedConfigFails(t *testing.T) {
	env := newTestEnv(t)
	if err := os.Remove(env.cfg.Kubelet.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	err := env.node.Join(context.Background(), validJoinRequest(t))
	if err == nil || !strings.Contains(err.Error(), "not saved") {
		t.Errorf("Join() = %v, want an error saying the node's configuration is not saved", err)
	}
	assertAbsent(t, env.cfg.Kubelet.BootstrapKubeconfig)
}

// --- Start

func TestStartWithKubeconfigStartsBothAtOnce(t *testing.T) {
	env := newSavedEnv(t)
	if err := env.node.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The kubeconfig is found on the first look: the kubelet is never polled.
	if got, want := env.rec.all(), []string{"start kubelet", "start kube-proxy"}; !reflect.DeepEqual(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
}

func TestStartWaitsForTLSBootstrap(t *testing.T) {
	env := newResetEnv(t)
	kubeconfig := kubeconfigBytes(t, targetServer)
	bootstrapped := make(chan error, 1)
	env.services.setOnStart(func(s Service) {
		if s != ServiceKubelet {
			return
		}
		// The kubelet writes its kubeconfig once its certificate is signed.
		time.AfterFunc(100*time.Millisecond, func() {
			env.rec.add("kubelet bootstrapped") // before the file, which releases Start
			bootstrapped <- atomicfile.Write(env.cfg.Kubelet.Kubeconfig, kubeconfig, 0o600)
		})
	})
	if err := env.node.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-bootstrapped; err != nil {
		t.Fatal(err)
	}
	want := []string{"start kubelet", "kubelet bootstrapped", "start kube-proxy"}
	if got := env.rec.changes(); !reflect.DeepEqual(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
}

func TestStartFailsWhenKubeletExits(t *testing.T) {
	env := newResetEnv(t)
	env.services.setOnStart(func(s Service) {
		if s == ServiceKubelet {
			env.services.set(ServiceKubelet, false)
		}
	})
	err := env.node.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("Start() = %v, want an error saying the kubelet exited", err)
	}
	if got, want := env.rec.changes(), []string{"start kubelet"}; !reflect.DeepEqual(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
	if env.services.isRunning(ServiceKubeProxy) {
		t.Error("kube-proxy was started")
	}
}

func TestStartTimesOutWithoutKubeconfig(t *testing.T) {
	env := newResetEnv(t)
	env.node.bootstrapTimeout = 300 * time.Millisecond
	err := env.node.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no kubeconfig after 300ms") {
		t.Fatalf("Start() = %v, want a timeout error", err)
	}
	if strings.Contains(err.Error(), "exited") {
		t.Errorf("Start() = %q, says the kubelet exited though it runs", err)
	}
	if got, want := env.rec.changes(), []string{"start kubelet"}; !reflect.DeepEqual(got, want) {
		t.Errorf("calls = %q, want %q", got, want)
	}
	if env.services.isRunning(ServiceKubeProxy) {
		t.Error("kube-proxy was started")
	}
}

// --- checkKubeletClientCA

func TestCheckKubeletClientCAAcceptsAFileOfItsOwn(t *testing.T) {
	if err := newSavedEnv(t).node.checkKubeletClientCA(); err != nil {
		t.Errorf("checkKubeletClientCA() = %v", err)
	}
}

func TestCheckKubeletClientCARefusesTheNodesOwn(t *testing.T) {
	env := newSavedEnv(t)
	// ownKubeletConfig trusts kubeadm's CA for the kubelet's clients.
	env.node.cfg.Kubelet.ClientCAFile = "/etc/kubernetes/pki/ca.crt"
	err := env.node.checkKubeletClientCA()
	if err == nil || !strings.HasPrefix(err.Error(), "kubelet.clientCAFile: /etc/kubernetes/pki/ca.crt is the client CA of the node's own kubelet") {
		t.Errorf("checkKubeletClientCA() = %v, want an error naming kubelet.clientCAFile", err)
	}
}

func TestCheckKubeletClientCAReadsARelativePathFromTheConfigsDirectory(t *testing.T) {
	env := newTestEnv(t)
	testutil.WriteFile(t, env.cfg.Kubelet.Config, strings.Replace(ownKubeletConfig, "clientCAFile: /etc/kubernetes/pki/ca.crt", "clientCAFile: pki/ca.crt", 1))
	env.node.cfg.Kubelet.ClientCAFile = filepath.Join(filepath.Dir(env.cfg.Kubelet.Config), "pki", "ca.crt")
	if err := env.node.SaveOwnConfig(); err != nil {
		t.Fatal(err)
	}
	if err := env.node.checkKubeletClientCA(); err == nil || !strings.HasPrefix(err.Error(), "kubelet.clientCAFile: ") {
		t.Errorf("checkKubeletClientCA() = %v, want an error naming kubelet.clientCAFile", err)
	}
}

func TestRunRefusesTheNodesOwnKubeletClientCA(t *testing.T) {
	env := newTestEnv(t)
	cfg := env.cfg
	cfg.Kubelet.ClientCAFile = "/etc/kubernetes/pki/ca.crt"
	err := Run(context.Background(), cfg, env.services)
	if err == nil || !strings.HasPrefix(err.Error(), "kubelet.clientCAFile: ") {
		t.Errorf("Run() = %v, want it to refuse kubelet.clientCAFile before serving", err)
	}
}
