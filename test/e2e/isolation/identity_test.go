package isolation

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
)

// Identity: credentials a tenant holds or can mint open nothing beyond its
// own cluster.
func (e *env) identity() []testCase {
	return []testCase{
		{"tenant-minted-kubelet-client-certificate-is-refused-by-the-syncer", e.mintedKubeletClient},
		{"tenant-token-is-refused-by-the-other-tenant-and-the-host", e.borrowedToken},
	}
}

// mintedKubeletClient: alpha signs itself a certificate with the kubelet
// client's name through its own CSR API and presents it to its syncer's
// kubelet API; the API server's real kubelet-client certificate is the
// control.
func (e *env) mintedKubeletClient(t *testing.T) {
	// system:masters is the one group the CSR API will not sign for.
	minted := e.mintClientCertificate(t, contract.KubeletClientName, "tenant-admins")
	real := e.realKubeletClient(t)
	dial := e.syncerKubeletDialer(t)
	if status, err := kubeletGet(e.ctx, dial, real); err != nil || status != http.StatusOK {
		t.Fatalf("control: the API server's own kubelet-client certificate got %d, %v", status, err)
	}
	status, err := kubeletGet(e.ctx, dial, minted)
	if err == nil && status < 400 {
		t.Errorf("the syncer's kubelet API accepted a tenant-minted certificate: HTTP %d", status)
	}
}

// mintClientCertificate has alpha's CSR API sign a client certificate for
// cn in group org, approved by alpha itself.
func (e *env) mintClientCertificate(t *testing.T, cn, org string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{org}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "forged-kubelet-client"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeAPIServerClientSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth, certificatesv1.UsageDigitalSignature},
		},
	}
	cs := e.alpha.Clientset(t)
	if _, err := cs.CertificatesV1().CertificateSigningRequests().Create(e.ctx, csr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.alpha.Kubectl(t, e.ctx, "certificate", "approve", csr.Name)
	var certPEM []byte
	testutil.Eventually(t, time.Minute, "alpha signs the CSR", func() error {
		got, err := cs.CertificatesV1().CertificateSigningRequests().Get(e.ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if certPEM = got.Status.Certificate; len(certPEM) == 0 {
			return errors.New("no certificate yet")
		}
		return nil
	})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// realKubeletClient is alpha's API server kubelet-client certificate, from
// the host Secret of its PKI.
func (e *env) realKubeletClient(t *testing.T) tls.Certificate {
	t.Helper()
	var s corev1.Secret
	if err := e.host.Get(e.ctx, client.ObjectKey{Namespace: e.alpha.Namespace, Name: e.alpha.Name + "-pki"}, &s); err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(s.Data[controlplane.KubeletClientCert], s.Data[controlplane.KubeletClientKey])
	if err != nil {
		t.Fatalf("kubelet-client pair in %s: %v", s.Name, err)
	}
	return pair
}

// syncerKubeletDialer returns a dialer that opens TCP connections to the
// kubelet API alpha's syncer serves on loopback, from inside its pod's
// network namespace (found through the syncer process), where the tenant API
// server dials it.
func (e *env) syncerKubeletDialer(t *testing.T) func(ctx context.Context) (net.Conn, error) {
	t.Helper()
	pid := syncerPID(t, e.alpha.Name)
	return func(ctx context.Context) (net.Conn, error) {
		type result struct {
			conn net.Conn
			err  error
		}
		ch := make(chan result, 1)
		go func() {
			// The thread stays in the pod's namespace and ends with the
			// goroutine, since it is never unlocked.
			runtime.LockOSThread()
			fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				ch <- result{err: err}
				return
			}
			defer unix.Close(fd)
			if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
				ch <- result{err: err}
				return
			}
			// The kubelet API listens on the pod IP, the virtual node's address.
			_, port, _ := net.SplitHostPort(contract.DefaultKubeletAddr)
			c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", net.JoinHostPort(e.own.controlPlanePod, port))
			ch <- result{c, err}
		}()
		r := <-ch
		return r.conn, r.err
	}
}

// syncerPID finds the nest-syncer process of the virtual cluster vc.
func syncerPID(t *testing.T, vc string) int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range dirs {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		if len(args) > 0 && strings.HasSuffix(args[0], "nest-syncer") && strings.Contains(string(data), "--virtual-cluster="+vc+"\x00") {
			var pid int
			if _, err := fmt.Sscanf(f, "/proc/%d/cmdline", &pid); err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no nest-syncer process of %s", vc)
	return 0
}

// kubeletGet asks the kubelet API for /pods with cert and returns the HTTP
// status, or the TLS or transport error.
func kubeletGet(ctx context.Context, dial func(context.Context) (net.Conn, error), cert tls.Certificate) (int, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		// Only the client side is under test; the serving certificate is
		// for the tenant API server to verify.
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true}, //nolint:gosec
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+contract.DefaultKubeletAddr+"/pods", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// borrowedToken: a service-account token of alpha's authenticates to alpha
// (the control) and to nothing else.
func (e *env) borrowedToken(t *testing.T) {
	token := strings.TrimSpace(e.alpha.Kubectl(t, e.ctx, "create", "token", "default"))
	for _, c := range []struct {
		name, kubeconfig string
		want             int
	}{
		{"alpha", e.alpha.Kubeconfig, http.StatusForbidden},
		{"beta", e.beta.Kubeconfig, http.StatusUnauthorized},
		{"the host", e.hostKubeconfig, http.StatusUnauthorized},
	} {
		// alpha's default ServiceAccount is authenticated but may not list
		// namespaces; elsewhere the token does not even authenticate.
		if got := bearerGet(t, c.kubeconfig, token, "/api/v1/namespaces"); got != c.want {
			t.Errorf("alpha's token against %s: HTTP %d, want %d", c.name, got, c.want)
		}
	}
}

// bearerGet sends GET path to the server of kubeconfig with token and
// returns the HTTP status.
func bearerGet(t *testing.T, kubeconfig, token, path string) int {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cluster.CertificateAuthorityData)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequest(http.MethodGet, cluster.Server+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}
