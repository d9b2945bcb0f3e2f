package cli

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/pki"
)

// runNest runs the nest command with args and returns what it printed.
func runNest(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func TestAgentCommandIsRegisteredAndPublic(t *testing.T) {
	for _, path := range [][]string{{"agent"}, {"agent", "certs"}} {
		cmd, _, err := NewRootCommand().Find(path)
		if err != nil || cmd.Name() != path[len(path)-1] || cmd.Hidden {
			t.Errorf("nest %s: %v, found %q (hidden %v)", strings.Join(path, " "), err, cmd.Name(), cmd.Hidden)
		}
	}
}

func TestAgentCommandFlagErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(bad, []byte("nodeName: Worker_1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"no config", []string{"agent"}, []string{"--config: name the agent's configuration file, such as /etc/nest/agent.yaml"}},
		{"missing config", []string{"agent", "--config", filepath.Join(t.TempDir(), "absent.yaml")}, []string{"--config: ", "no such file"}},
		{"invalid config", []string{"agent", "--config", bad}, []string{"--config: " + bad + ": ", "nodeName: ", "listen: "}},
		{"an argument", []string{"agent", "worker-1"}, []string{`unknown command "worker-1"`}},
		{"unknown flag", []string{"agent", "--node", "worker-1"}, []string{"unknown flag: --node"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runNest(t, tt.args...)
			for _, want := range tt.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("nest %s = %v, want an error with %q", strings.Join(tt.args, " "), err, want)
				}
			}
		})
	}
}

// writeCA writes an agent CA's certificate and key into dir.
func writeCA(t *testing.T, dir string) (certFile, keyFile string, ca *pki.CA) {
	t.Helper()
	ca, err := pki.NewCA(agent.CACommonName)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := os.WriteFile(certFile, ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, ca.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, ca
}

func TestAgentCertsFlagErrors(t *testing.T) {
	dir := t.TempDir()
	caCert, caKey, _ := writeCA(t, dir)
	out := filepath.Join(dir, "out")
	ok := map[string]string{"--ca-cert": caCert, "--ca-key": caKey, "--node": "worker-1", "--ip": "198.51.100.11", "--out": out}
	args := func(change map[string]string) []string {
		a := []string{"agent", "certs"}
		for _, flag := range []string{"--ca-cert", "--ca-key", "--node", "--ip", "--out"} {
			v, changed := change[flag]
			if !changed {
				v = ok[flag]
			}
			if v != "" {
				a = append(a, flag, v)
			}
		}
		return a
	}
	for _, tt := range []struct {
		name   string
		change map[string]string
		want   string
	}{
		{"no CA certificate", map[string]string{"--ca-cert": ""}, "--ca-cert: required: the agent CA's certificate"},
		{"no CA key", map[string]string{"--ca-key": ""}, "--ca-key: required: the agent CA's private key"},
		{"no node", map[string]string{"--node": ""}, "--node: required"},
		{"no IP", map[string]string{"--ip": ""}, "--ip: required"},
		{"no directory", map[string]string{"--out": ""}, "--out: required"},
		{"bad node", map[string]string{"--node": "Worker_1"}, "--node: must be the node's name, a DNS-1123 subdomain"},
		{"bad IP", map[string]string{"--ip": "worker-1.example"}, `--ip: must be an IPv4 or IPv6 address (the node's GlobalNode spec.nodeIP), got "worker-1.example"`},
		{"missing CA certificate", map[string]string{"--ca-cert": filepath.Join(dir, "absent.crt")}, "--ca-cert: "},
		{"missing CA key", map[string]string{"--ca-key": filepath.Join(dir, "absent.key")}, "--ca-key: "},
		{"a key for a certificate", map[string]string{"--ca-key": caCert}, "--ca-cert, --ca-key: must be the agent CA's certificate and its key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := runNest(t, args(tt.change)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("nest %s = %v, want an error with %q", strings.Join(args(tt.change), " "), err, tt.want)
			}
			if _, statErr := os.Stat(out); !os.IsNotExist(statErr) {
				t.Errorf("a refused command wrote %s", out)
			}
		})
	}

	// Every missing flag is named at once.
	_, err := runNest(t, "agent", "certs")
	for _, flag := range []string{"--ca-cert", "--ca-key", "--node", "--ip", "--out"} {
		if err == nil || !strings.Contains(err.Error(), flag+": required") {
			t.Errorf("nest agent certs = %v, want %s named", err, flag)
		}
	}
}

func TestAgentCertsIssuesTheServingCertificate(t *testing.T) {
	dir := t.TempDir()
	caCert, caKey, ca := writeCA(t, dir)
	out := filepath.Join(dir, "pki")
	printed, err := runNest(t, "agent", "certs", "--ca-cert", caCert, "--ca-key", caKey, "--node", "worker-1", "--ip", "2001:db8::11", "--out", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(printed, "for node worker-1 at 2001:db8::11") {
		t.Errorf("printed %q", printed)
	}
	if _, err := agent.ServerTLSConfig(agent.TLSFiles{
		CertFile:     filepath.Join(out, agent.ServingCertFile),
		KeyFile:      filepath.Join(out, agent.ServingKeyFile),
		ClientCAFile: filepath.Join(out, agent.CACertFile),
	}); err != nil {
		t.Fatalf("the agent cannot load what nest agent certs wrote: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(out, agent.ServingCertFile))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.ParseCertificate(data)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "worker-1", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the certificate is not worker-1's of the agent CA: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "ca.key")); !os.IsNotExist(err) {
		t.Error("the CA's key was copied")
	}
}
