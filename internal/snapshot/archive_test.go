package snapshot

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
)

func contents(t *testing.T) Contents {
	t.Helper()
	etcd := filepath.Join(t.TempDir(), "etcd.db")
	if err := os.WriteFile(etcd, bytes.Repeat([]byte("etcd data "), 5000), 0o600); err != nil {
		t.Fatal(err)
	}
	return Contents{
		VirtualCluster: []byte(`{"kind":"VirtualCluster","metadata":{"name":"alpha"}}`),
		PKI:            map[string][]byte{"ca.crt": []byte("CERT"), "ca.key": []byte("SECRET KEY")},
		EtcdPath:       etcd,
	}
}

func write(t *testing.T, c Contents, recipients []age.Recipient) []byte {
	t.Helper()
	var out bytes.Buffer
	m := Manifest{NestVersion: "v0.test", KubernetesVersion: "v1.36.3", Namespace: "vc-alpha", VirtualCluster: "alpha", Created: time.Unix(1700000000, 0).UTC(), EtcdRevision: 42}
	if _, err := Write(&out, m, c, recipients, len(recipients) == 0); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func identity(t *testing.T) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A snapshot read back with its identity holds what was written; the keys
// are not in the archive in the clear.
func TestSnapshotRoundTrip(t *testing.T) {
	c, id := contents(t), identity(t)
	archive := write(t, c, []age.Recipient{id.Recipient()})
	if bytes.Contains(archive, []byte("SECRET KEY")) || bytes.Contains(archive, []byte("etcd data")) {
		t.Fatal("the archive holds the CA key or etcd's data in the clear")
	}
	s, err := Read(bytes.NewReader(archive), t.TempDir(), []age.Identity{id})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Encrypted || string(s.PKI["ca.key"]) != "SECRET KEY" || string(s.VirtualCluster) != string(c.VirtualCluster) {
		t.Errorf("read back %+v", s)
	}
	want, _ := os.ReadFile(c.EtcdPath)
	if got, _ := os.ReadFile(s.EtcdPath); !bytes.Equal(got, want) {
		t.Errorf("etcd's snapshot: %d bytes back, want the %d written", len(got), len(want))
	}
	if s.Manifest.EtcdRevision != 42 || s.Manifest.Format != Format || len(s.Manifest.Parts) != 3 {
		t.Errorf("manifest %+v", s.Manifest)
	}
	// Without an identity the archive is checked and the keys stay sealed.
	s, err = Read(bytes.NewReader(archive), t.TempDir(), nil)
	if err != nil || s.PKI != nil || !s.Encrypted {
		t.Fatalf("read without identity: %+v, %v; want checked, keys unread", s, err)
	}
	if got, _ := os.ReadFile(s.EtcdPath); bytes.Contains(got, []byte("etcd data")) {
		t.Error("read without identity: etcd's snapshot decrypted")
	}
}

// A snapshot without a recipient is refused unless plaintext keys are
// asked for, and then says so.
func TestSnapshotWithoutRecipientNeedsPlaintextKeys(t *testing.T) {
	_, err := Write(&bytes.Buffer{}, Manifest{}, contents(t), nil, false)
	if err == nil || !strings.Contains(err.Error(), "--recipient") || !strings.Contains(err.Error(), "--insecure-plaintext-keys") {
		t.Fatalf("err %v, want the two flags named", err)
	}
	s, err := Read(bytes.NewReader(write(t, contents(t), nil)), t.TempDir(), nil)
	if err != nil || s.Encrypted || string(s.PKI["ca.key"]) != "SECRET KEY" {
		t.Errorf("plaintext snapshot: %+v, %v", s, err)
	}
}

// Every damaged snapshot is refused with its reason, and leaves no file.
func TestDamagedSnapshotsAreRefused(t *testing.T) {
	id := identity(t)
	good := write(t, contents(t), []age.Recipient{id.Recipient()})
	// The etcd part's data starts one 512-byte tar header after its
	// name, whose last mention is that header (the manifest names it too).
	etcdAt := bytes.LastIndex(good, []byte(EtcdEntry)) + 512
	tampered := bytes.Clone(good)
	tampered[etcdAt+3] ^= 0xff
	newer := rewriteManifest(t, good, func(m *Manifest) { m.Format = Format + 1; m.NestVersion = "v9.0.0" })
	var extra bytes.Buffer
	extra.Write(good[:len(good)-1024]) // drop the end-of-archive blocks
	tw := tar.NewWriter(&extra)
	_ = tw.WriteHeader(&tar.Header{Name: "run-me.sh", Size: 2, Mode: 0o755})
	_, _ = tw.Write([]byte("hi"))
	_ = tw.Close()
	for _, tc := range []struct {
		name    string
		archive []byte
		ids     []age.Identity
		want    string
	}{
		{"truncated", good[:etcdAt+1000], []age.Identity{id}, "cut short"},
		{"tampered", tampered, []age.Identity{id}, "SHA-256"},
		{"wrong key", good, []age.Identity{identity(t)}, "do not decrypt"},
		{"newer format", newer, []age.Identity{id}, "use a Nest at least as new"},
		{"not a snapshot", []byte("hello"), nil, "not a snapshot"},
		{"extra entry", extra.Bytes(), []age.Identity{id}, "run-me.sh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Read(bytes.NewReader(tc.archive), dir, tc.ids)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("left %d files behind", len(left))
			}
		})
	}
}

// rewriteManifest returns archive with its manifest changed by edit.
func rewriteManifest(t *testing.T, archive []byte, edit func(*Manifest)) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(archive))
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(tr)
		data := b.Bytes()
		if h.Name == ManifestEntry {
			var m Manifest
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			edit(&m)
			data, _ = json.Marshal(m)
			h.Size = int64(len(data))
		}
		_ = tw.WriteHeader(h)
		_, _ = tw.Write(data)
	}
	_ = tw.Close()
	return out.Bytes()
}
