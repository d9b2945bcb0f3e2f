package agent

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/testutil"
)

func TestWriteServingCertWritesWhatTheAgentLoads(t *testing.T) {
	ca, err := pki.NewCA(CACommonName)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "pki")
	if err := WriteServingCert(ca, "worker-1", net.ParseIP("198.51.100.11"), dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{CACertFile, ServingCertFile, ServingKeyFile}; !slices.Equal(names, want) {
		t.Errorf("wrote %q, want %q (never the CA's key)", names, want)
	}
	assertMode(t, filepath.Join(dir, ServingKeyFile), 0o600)
	assertMode(t, filepath.Join(dir, ServingCertFile), 0o644)
	if got := testutil.ReadFile(t, filepath.Join(dir, CACertFile)); got != string(ca.CertPEM) {
		t.Errorf("%s is not the CA's certificate", CACertFile)
	}

	files := TLSFiles{
		CertFile:     filepath.Join(dir, ServingCertFile),
		KeyFile:      filepath.Join(dir, ServingKeyFile),
		ClientCAFile: filepath.Join(dir, CACertFile),
	}
	if _, err := ServerTLSConfig(files); err != nil {
		t.Fatalf("the agent cannot load what WriteServingCert wrote: %v", err)
	}
	data, err := os.ReadFile(files.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificate(data)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	// What NewClient checks: the CA, server auth, and the node's name.
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "worker-1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the serving certificate does not verify as worker-1's: %v", err)
	}
	if len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(net.ParseIP("198.51.100.11")) {
		t.Errorf("the serving certificate names %v, want 198.51.100.11", cert.IPAddresses)
	}
}

// A CA certificate with another CA's key never reaches WriteServingCert:
// loading it is refused, naming the pair.
func TestACAWithAKeyOfAnotherCAIsRefused(t *testing.T) {
	ca, err := pki.NewCA(CACommonName)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA(CACommonName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.LoadCA(pki.KeyPair{CertPEM: ca.CertPEM, KeyPEM: other.KeyPEM}); err == nil || !strings.Contains(err.Error(), "are its certificate and key a pair?") {
		t.Errorf("LoadCA of a certificate with another CA's key = %v, want an error that they are not a pair", err)
	}
}
