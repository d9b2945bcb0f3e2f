package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/nestdev/nest/internal/snapshot"
)

// nest snapshot refuses what it cannot do before it reaches any cluster:
// no recipient, a URL that is neither file:// nor oci://REPOSITORY:TAG,
// a recipient that is not one.
func TestSnapshotCreateRefusesBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"snapshot", "create", "alpha", "--to", "file:///tmp/x"}, "--insecure-plaintext-keys"},
		{[]string{"snapshot", "create", "alpha", "--to", "oci://registry.local/alpha"}, "with a tag"},
		{[]string{"snapshot", "create", "alpha", "--to", "s3://bucket/x"}, "want file://PATH or oci://"},
		{[]string{"snapshot", "create", "alpha"}, "--to: name the snapshot"},
		{[]string{"snapshot", "create", "alpha", "--to", "file:///tmp/x", "--recipient", "not-a-key"}, `--recipient "not-a-key"`},
	} {
		// --kubeconfig names no file: a command that reached for the host
		// would fail on it instead.
		_, err := runNest(t, append(tc.args, "--kubeconfig", "/nonexistent/kubeconfig")...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("nest %s: %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// nest snapshot verify checks a snapshot file, decrypts its keys with the
// identity, and refuses a changed one and a wrong identity by name.
func TestSnapshotVerify(t *testing.T) {
	dir := t.TempDir()
	id, _ := age.GenerateX25519Identity()
	other, _ := age.GenerateX25519Identity()
	idFile, otherFile := filepath.Join(dir, "id.txt"), filepath.Join(dir, "other.txt")
	_ = os.WriteFile(idFile, []byte(id.String()+"\n"), 0o600)
	_ = os.WriteFile(otherFile, []byte(other.String()+"\n"), 0o600)
	etcd := filepath.Join(dir, "etcd.db")
	_ = os.WriteFile(etcd, []byte("etcd"), 0o600)
	var archive bytes.Buffer
	if _, err := snapshot.Write(&archive, snapshot.Manifest{VirtualCluster: "alpha", Namespace: "vc-alpha", Created: time.Now()},
		snapshot.Contents{VirtualCluster: []byte("{}"), PKI: map[string][]byte{"ca.key": []byte("k")}, EtcdPath: etcd}, []age.Recipient{id.Recipient()}, false); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "alpha.snapshot")
	_ = os.WriteFile(path, archive.Bytes(), 0o600)

	out, err := runNest(t, "snapshot", "verify", "--from", "file://"+path, "--identity", idFile)
	if err != nil || !strings.Contains(out, "virtual cluster vc-alpha/alpha") || !strings.Contains(out, "keys: decrypted") {
		t.Errorf("verify: %v\n%s", err, out)
	}
	if _, err := runNest(t, "snapshot", "verify", "--from", "file://"+path, "--identity", otherFile); err == nil || !strings.Contains(err.Error(), "do not decrypt") {
		t.Errorf("verify with another identity: %v, want refused", err)
	}
	changed := bytes.Clone(archive.Bytes())
	at := bytes.LastIndex(changed, []byte(snapshot.EtcdEntry)) + 512 + 40
	changed[at] ^= 1
	_ = os.WriteFile(path, changed, 0o600)
	if _, err := runNest(t, "snapshot", "verify", "--from", "file://"+path); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("verify a changed snapshot: %v, want refused", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "etcd-*"))
	if len(left) != 0 {
		t.Errorf("verify left %v behind", left)
	}
}
