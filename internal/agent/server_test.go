package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nestdev/nest/internal/atomicfile"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/testutil"
)

// agentServer is the agent of node-a at 127.0.0.1, serving a testEnv's
// node over mutual TLS with certificates of its own agent CA.
type agentServer struct {
	env     *testEnv
	ca      *pki.CA
	serving pki.KeyPair
	port    int
}

func newAgentServer(t *testing.T) *agentServer {
	t.Helper()
	env := newSavedEnv(t)
	ca, serving, files := writeAgentTLS(t, t.TempDir())
	tlsConfig, err := ServerTLSConfig(files)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(Handler(env.node, []string{ManagerIdentity}))
	srv.TLS = tlsConfig
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &agentServer{env: env, ca: ca, serving: serving, port: srv.Listener.Addr().(*net.TCPAddr).Port}
}

// keyPair is pair as a tls.Certificate.
func keyPair(t *testing.T, pair pki.KeyPair) tls.Certificate {
	t.Helper()
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// clientCert is a client certificate for name from ca.
func clientCert(t *testing.T, ca *pki.CA, name string) tls.Certificate {
	t.Helper()
	pair, err := ca.Issue(ClientCertSpec(name, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return keyPair(t, pair)
}

// client is a Client of the agent that expects nodeName and presents cert.
func (s *agentServer) client(t *testing.T, nodeName string, cert tls.Certificate) *Client {
	t.Helper()
	c, err := NewClient(nodeName, "127.0.0.1", s.port, s.ca.CertPEM, cert)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// manager is the Client nest-manager would be.
func (s *agentServer) manager(t *testing.T) *Client {
	t.Helper()
	return s.client(t, "node-a", clientCert(t, s.ca, ManagerIdentity))
}

// rawManager is a plain HTTP client with the manager's TLS configuration,
// for requests Client never sends.
func (s *agentServer) rawManager(t *testing.T) (*http.Client, string) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.ca.CertPEM)
	transport := &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion:   tls.VersionTLS13,
		RootCAs:      pool,
		Certificates: []tls.Certificate{clientCert(t, s.ca, ManagerIdentity)},
		ServerName:   "node-a",
	}}
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport, Timeout: time.Minute}, "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// everyOperation calls each operation of the API through c.
func everyOperation(t *testing.T) map[string]func(ctx context.Context, c *Client) error {
	req := validJoinRequest(t)
	return map[string]func(ctx context.Context, c *Client) error{
		"status": func(ctx context.Context, c *Client) error { _, err := c.Status(ctx); return err },
		"stop":   func(ctx context.Context, c *Client) error { return c.Stop(ctx) },
		"reset":  func(ctx context.Context, c *Client) error { return c.Reset(ctx) },
		"join":   func(ctx context.Context, c *Client) error { return c.Join(ctx, req) },
		"start":  func(ctx context.Context, c *Client) error { return c.Start(ctx) },
	}
}

// assertUntouched checks that the node saw no call and no file changed.
func assertUntouched(t *testing.T, env *testEnv, before map[string]string) {
	t.Helper()
	if calls := env.rec.all(); len(calls) != 0 {
		t.Errorf("the node was called: %q", calls)
	}
	after := env.snapshot(t)
	if len(after) != len(before) {
		t.Errorf("files: %d, then %d", len(before), len(after))
	}
	for path, data := range before {
		if after[path] != data {
			t.Errorf("%s changed", path)
		}
	}
}

func TestAPIStatusOverMutualTLS(t *testing.T) {
	s := newAgentServer(t)
	s.env.services.set(ServiceKubeProxy, true)
	s.env.runtime.sandboxes = 7
	got, err := s.manager(t).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := Status{
		NodeName:     "node-a",
		KubeProxy:    ServiceStatus{Running: true},
		Server:       homeServer,
		Bootstrapped: true,
		PodCIDR:      ownPodCIDR,
		Sandboxes:    7,
	}
	if got != want {
		t.Errorf("Status() = %+v, want %+v", got, want)
	}
}

func TestAPIRefusesClientOfAnotherName(t *testing.T) {
	s := newAgentServer(t)
	before := s.env.snapshot(t)
	c := s.client(t, "node-a", clientCert(t, s.ca, "someone"))
	for name, op := range everyOperation(t) {
		t.Run(name, func(t *testing.T) {
			err := op(context.Background(), c)
			var api *APIError
			if !errors.As(err, &api) || api.StatusCode != http.StatusForbidden {
				t.Fatalf("%s = %v, want a 403 APIError", name, err)
			}
			if !strings.Contains(api.Message, `"someone"`) {
				t.Errorf("message %q does not name the client", api.Message)
			}
		})
	}
	assertUntouched(t, s.env, before)
}

func TestAPIRefusesServingCertificateAsClient(t *testing.T) {
	s := newAgentServer(t)
	before := s.env.snapshot(t)
	c := s.client(t, "node-a", keyPair(t, s.serving))
	for name, op := range everyOperation(t) {
		t.Run(name, func(t *testing.T) {
			err := op(context.Background(), c)
			if err == nil {
				t.Fatalf("%s with the agent's serving certificate succeeded", name)
			}
			var api *APIError
			if errors.As(err, &api) && api.StatusCode != http.StatusForbidden {
				t.Errorf("%s = %v, want a refused handshake or 403", name, err)
			}
		})
	}
	assertUntouched(t, s.env, before)
}

func TestAPIRefusesClientOfAnotherCA(t *testing.T) {
	s := newAgentServer(t)
	before := s.env.snapshot(t)
	other, err := pki.NewCA(CACommonName) // same name, other key
	if err != nil {
		t.Fatal(err)
	}
	c := s.client(t, "node-a", clientCert(t, other, ManagerIdentity))
	for name, op := range everyOperation(t) {
		t.Run(name, func(t *testing.T) {
			err := op(context.Background(), c)
			var api *APIError
			if err == nil || errors.As(err, &api) {
				t.Errorf("%s = %v, want a TLS handshake error", name, err)
			}
		})
	}
	assertUntouched(t, s.env, before)
}

func TestAPIRefusesClientWithoutCertificate(t *testing.T) {
	s := newAgentServer(t)
	before := s.env.snapshot(t)
	c := s.client(t, "node-a", tls.Certificate{})
	for name, op := range everyOperation(t) {
		t.Run(name, func(t *testing.T) {
			err := op(context.Background(), c)
			var api *APIError
			if err == nil || errors.As(err, &api) {
				t.Errorf("%s = %v, want a TLS handshake error", name, err)
			}
		})
	}
	assertUntouched(t, s.env, before)
}

func TestClientRefusesAgentOfAnotherNode(t *testing.T) {
	s := newAgentServer(t)
	before := s.env.snapshot(t)
	c := s.client(t, "node-b", clientCert(t, s.ca, ManagerIdentity))
	_, err := c.Status(context.Background())
	var hostname x509.HostnameError
	if !errors.As(err, &hostname) {
		t.Fatalf("Status() from node-a's agent as node-b = %v, want a certificate hostname error", err)
	}
	assertUntouched(t, s.env, before)
}

func TestClientRefusesAgentOfAnotherCA(t *testing.T) {
	s := newAgentServer(t)
	other, err := pki.NewCA(CACommonName)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient("node-a", "127.0.0.1", s.port, other.CertPEM, clientCert(t, s.ca, ManagerIdentity))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Status(context.Background())
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("Status() trusting another CA = %v, want an unknown authority error", err)
	}
	if calls := s.env.rec.all(); len(calls) != 0 {
		t.Errorf("the node was called: %q", calls)
	}
}

func TestAPIResetWhileRunningIsConflict(t *testing.T) {
	s := newAgentServer(t)
	s.env.services.set(ServiceKubelet, true)
	err := s.manager(t).Reset(context.Background())
	var api *APIError
	if !errors.As(err, &api) || api.StatusCode != http.StatusConflict {
		t.Fatalf("Reset() = %v, want a 409 APIError", err)
	}
	if !IsConflict(err) {
		t.Error("IsConflict() = false")
	}
	if !strings.Contains(api.Message, PathStop) {
		t.Errorf("message %q does not say to stop first", api.Message)
	}
	if got := s.env.rec.changes(); len(got) != 0 {
		t.Errorf("calls = %q, want none", got)
	}
}

func TestAPIJoinUnknownFieldIsBadRequest(t *testing.T) {
	s := newAgentServer(t)
	before := s.env.snapshot(t)
	client, base := s.rawManager(t)
	body, err := json.Marshal(validJoinRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	body = bytes.Replace(body, []byte(`{`), []byte(`{"command":"rm -rf /",`), 1)
	resp, err := client.Post(base+PathJoin, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e ErrorResponse
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(e.Error, `unknown field "command"`) {
		t.Errorf("%d %q, want 400 naming the unknown field", resp.StatusCode, e.Error)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	assertUntouched(t, s.env, before)
}

func TestAPIJoinBodyNotJSONIsBadRequest(t *testing.T) {
	s := newAgentServer(t)
	client, base := s.rawManager(t)
	for name, body := range map[string]string{"empty": "", "text": "join please", "array": "[]"} {
		t.Run(name, func(t *testing.T) {
			resp, err := client.Post(base+PathJoin, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("status %d, want 400", resp.StatusCode)
			}
		})
	}
	if calls := s.env.rec.all(); len(calls) != 0 {
		t.Errorf("the node was called: %q", calls)
	}
}

func TestAPIJoinInvalidRequestNamesTheField(t *testing.T) {
	s := newAgentServer(t)
	before := s.env.snapshot(t)
	req := validJoinRequest(t)
	req.ClusterDNS = []string{"10.112.0.10", "kube-dns"}
	err := s.manager(t).Join(context.Background(), req)
	var api *APIError
	if !errors.As(err, &api) || api.StatusCode != http.StatusBadRequest {
		t.Fatalf("Join() = %v, want a 400 APIError", err)
	}
	if !strings.HasPrefix(api.Message, "clusterDNS[1]:") {
		t.Errorf("message %q, want it to start with clusterDNS[1]:", api.Message)
	}
	assertUntouched(t, s.env, before)
}

func TestAPIGetOnPostPathIsMethodNotAllowed(t *testing.T) {
	s := newAgentServer(t)
	client, base := s.rawManager(t)
	for _, path := range []string{PathStop, PathReset, PathJoin, PathStart} {
		t.Run(path, func(t *testing.T) {
			resp, err := client.Get(base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("GET %s: status %d, want 405", path, resp.StatusCode)
			}
		})
	}
	resp, err := client.Post(base+PathStatus, "application/json", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST %s: status %d, want 405", PathStatus, resp.StatusCode)
	}
	if calls := s.env.rec.all(); len(calls) != 0 {
		t.Errorf("the node was called: %q", calls)
	}
}

func TestAPIStartFailureIsInternalError(t *testing.T) {
	s := newAgentServer(t)
	s.env.services.setOnStart(func(svc Service) {
		if svc == ServiceKubelet {
			s.env.services.set(ServiceKubelet, false)
		}
	})
	if err := os.Remove(s.env.cfg.Kubelet.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	err := s.manager(t).Start(context.Background())
	var api *APIError
	if !errors.As(err, &api) || api.StatusCode != http.StatusInternalServerError || !strings.Contains(api.Message, "exited") {
		t.Fatalf("Start() = %v, want a 500 saying the kubelet exited", err)
	}
	if IsConflict(err) {
		t.Error("IsConflict() = true for a 500")
	}
}

func TestAPIStopResetJoinStart(t *testing.T) {
	s := newAgentServer(t)
	env := s.env
	env.services.set(ServiceKubelet, true)
	env.services.set(ServiceKubeProxy, true)
	env.runtime.sandboxes = 2
	// The kubelet bootstraps at once: its kubeconfig is there when it starts.
	kubeconfig := kubeconfigBytes(t, targetServer)
	env.services.setOnStart(func(svc Service) {
		if svc == ServiceKubelet {
			if err := atomicfile.Write(env.cfg.Kubelet.Kubeconfig, kubeconfig, 0o600); err != nil {
				t.Error(err)
			}
		}
	})
	c := s.manager(t)
	ctx := context.Background()
	status := func() Status {
		t.Helper()
		st, err := c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := status(); st.Server != homeServer || !st.Kubelet.Running || st.Sandboxes != 2 {
		t.Fatalf("Status() before = %+v", st)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if st := status(); st.Server != "" || st.Kubelet.Running || st.KubeProxy.Running || st.Sandboxes != 0 {
		t.Fatalf("Status() after Reset = %+v", st)
	}
	req := validJoinRequest(t)
	if err := c.Join(ctx, req); err != nil {
		t.Fatal(err)
	}
	if st := status(); st.Server != targetServer || st.PodCIDR != req.PodCIDR {
		t.Fatalf("Status() after Join = %+v", st)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	want := Status{
		NodeName:     "node-a",
		Kubelet:      ServiceStatus{Running: true},
		KubeProxy:    ServiceStatus{Running: true},
		Server:       targetServer,
		Bootstrapped: true,
		PodCIDR:      req.PodCIDR,
	}
	if st := status(); st != want {
		t.Errorf("Status() after Start = %+v, want %+v", st, want)
	}
	wantCalls := []string{"stop kube-proxy", "stop kubelet", "remove sandboxes", "unmount " + env.cfg.Kubelet.RootDir, "start kubelet", "start kube-proxy"}
	if got := env.rec.changes(); strings.Join(got, ",") != strings.Join(wantCalls, ",") {
		t.Errorf("calls = %q, want %q", got, wantCalls)
	}
}

func TestServerTLSConfigNamesTheBadFile(t *testing.T) {
	dir := t.TempDir()
	_, _, good := writeAgentTLS(t, dir)
	testutil.WriteFile(t, filepath.Join(dir, "empty.crt"), "no certificate here")

	cfg, err := ServerTLSConfig(good)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS13 || cfg.ClientAuth != tls.RequireAndVerifyClientCert || len(cfg.Certificates) != 1 {
		t.Errorf("ServerTLSConfig() = min %x, client auth %v, %d certificates", cfg.MinVersion, cfg.ClientAuth, len(cfg.Certificates))
	}

	tests := []struct {
		name   string
		prefix string
		mutate func(f *TLSFiles)
	}{
		{"missing certificate", "tls.certFile, tls.keyFile:", func(f *TLSFiles) { f.CertFile = filepath.Join(dir, "absent.crt") }},
		{"key of another certificate", "tls.certFile, tls.keyFile:", func(f *TLSFiles) { f.KeyFile = f.ClientCAFile }},
		{"missing client CA", "tls.clientCAFile:", func(f *TLSFiles) { f.ClientCAFile = filepath.Join(dir, "absent.crt") }},
		{"client CA without PEM", "tls.clientCAFile:", func(f *TLSFiles) { f.ClientCAFile = filepath.Join(dir, "empty.crt") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := good
			tt.mutate(&files)
			if _, err := ServerTLSConfig(files); err == nil || !strings.HasPrefix(err.Error(), tt.prefix) {
				t.Errorf("ServerTLSConfig() = %v, want an error starting with %q", err, tt.prefix)
			}
		})
	}
}

func TestNewClientRefusesCAWithoutPEM(t *testing.T) {
	if _, err := NewClient("node-a", "127.0.0.1", 0, []byte("not PEM"), tls.Certificate{}); err == nil {
		t.Error("NewClient() with no CA certificate = nil error")
	}
}

func TestNewClientAddress(t *testing.T) {
	caPEM := newCACertPEM(t, CACommonName)
	tests := []struct {
		host string
		port int
		want string
	}{
		{"198.51.100.11", 0, "https://198.51.100.11:10260"},
		{"198.51.100.11", 8443, "https://198.51.100.11:8443"},
		{"2001:db8::11", 0, "https://[2001:db8::11]:10260"},
	}
	for _, tt := range tests {
		c, err := NewClient("node-a", tt.host, tt.port, caPEM, tls.Certificate{})
		if err != nil {
			t.Fatal(err)
		}
		if c.base != tt.want {
			t.Errorf("NewClient(%q, %d) calls %q, want %q", tt.host, tt.port, c.base, tt.want)
		}
	}
}

func TestIsConflict(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{&APIError{StatusCode: http.StatusConflict}, true},
		{errors.Join(errors.New("reset"), &APIError{StatusCode: http.StatusConflict}), true},
		{&APIError{StatusCode: http.StatusBadRequest}, false},
		{&ConflictError{Reason: "kubelet runs"}, false}, // the node's error, not the agent's answer
		{errors.New("409"), false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := IsConflict(tt.err); got != tt.want {
			t.Errorf("IsConflict(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// writeAgentTLS makes an agent CA and node-a's serving certificate (for
// 127.0.0.1) and writes them as an agent's TLS files in dir.
func writeAgentTLS(t *testing.T, dir string) (*pki.CA, pki.KeyPair, TLSFiles) {
	t.Helper()
	ca, err := pki.NewCA(CACommonName)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Issue(ServingCertSpec("node-a", net.ParseIP("127.0.0.1")))
	if err != nil {
		t.Fatal(err)
	}
	files := TLSFiles{
		CertFile:     filepath.Join(dir, "nest-agent.crt"),
		KeyFile:      filepath.Join(dir, "nest-agent.key"),
		ClientCAFile: filepath.Join(dir, "nest-agent-ca.crt"),
	}
	testutil.WriteFile(t, files.CertFile, string(serving.CertPEM))
	testutil.WriteFile(t, files.KeyFile, string(serving.KeyPEM))
	testutil.WriteFile(t, files.ClientCAFile, string(ca.CertPEM))
	return ca, serving, files
}
