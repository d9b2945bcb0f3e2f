// Package snapshot writes and reads a tenant's snapshot: one tar archive
// that holds a manifest, the VirtualCluster, the tenant's etcd snapshot and
// its PKI (every CA, certificate and key, the service-account key among
// them), etcd's snapshot and the PKI encrypted with age (filippo.io/age) to
// the recipients the user names: etcd holds the tenant's Secrets as its API
// server stored them. The manifest, the archive's first entry, gives Nest's and
// Kubernetes' versions and every part's size and SHA-256, so a reader
// refuses a truncated, tampered, undecryptable or newer snapshot before it
// changes anything (Read).
//
// Take makes one from a running tenant: etcd's snapshot comes from a Ready
// member through etcd's maintenance API, reached through the host API
// server's port forwarding, with no pause and no restart.
package snapshot

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"filippo.io/age"
)

// Format is the version of the archive's layout this Nest writes and the
// newest it reads.
const Format = 1

// Names of the archive's entries, in the order Write writes them.
const (
	ManifestEntry       = "manifest.json"
	VirtualClusterEntry = "virtualcluster.json"
	// EtcdEntry and PKIEntry are etcd's snapshot and the PKI encrypted
	// with age; PlaintextEtcdEntry and PlaintextPKIEntry the same as they
	// are, in a snapshot made with no recipient.
	EtcdEntry          = "etcd.db.age"
	PKIEntry           = "pki.json.age"
	PlaintextEtcdEntry = "etcd.db"
	PlaintextPKIEntry  = "pki.json"
)

// layouts are the parts a manifest may name, in order: sealed or plain.
var layouts = [][]string{
	{VirtualClusterEntry, EtcdEntry, PKIEntry},
	{VirtualClusterEntry, PlaintextEtcdEntry, PlaintextPKIEntry},
}

// MaxEtcdBytes bounds the etcd part a reader accepts: etcd's own largest
// quota (8 GiB).
const MaxEtcdBytes = 8 << 30

// maxSmallPart bounds every other part and the manifest: a VirtualCluster
// and a PKI are kilobytes.
const maxSmallPart = 16 << 20

// Manifest describes a snapshot.
type Manifest struct {
	// Format is the layout's version (Format when written).
	Format int `json:"format"`
	// NestVersion and KubernetesVersion are Nest's version that wrote it
	// and the version the tenant's control plane ran.
	NestVersion       string `json:"nestVersion"`
	KubernetesVersion string `json:"kubernetesVersion"`
	// Namespace and VirtualCluster name the tenant it was taken from.
	Namespace      string `json:"namespace"`
	VirtualCluster string `json:"virtualCluster"`
	// Created is when etcd's snapshot was taken (UTC).
	Created time.Time `json:"created"`
	// EtcdRevision is etcd's revision just before the snapshot was taken:
	// it holds every write up to it, at least.
	EtcdRevision int64 `json:"etcdRevision"`
	// Member is the etcd member it was taken from.
	Member string `json:"member"`
	// Parts are the archive's other entries, in order.
	Parts []Part `json:"parts"`
}

// Part is one entry of the archive after the manifest.
type Part struct {
	Name string `json:"name"`
	// Size in bytes, and SHA256 in hex, of the entry as stored (encrypted
	// where it is).
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Contents is what a snapshot holds.
type Contents struct {
	// VirtualCluster is the VirtualCluster, as JSON.
	VirtualCluster []byte
	// PKI is the PKI Secret's data: file name to content.
	PKI map[string][]byte
	// EtcdPath is a file holding etcd's snapshot, as etcd's maintenance API
	// streams it (its SHA-256 trailer included).
	EtcdPath string
}

// Write writes the archive of c and m to w: the manifest, then the
// VirtualCluster, etcd's snapshot and the PKI, encrypted to recipients. With
// no recipient the PKI is stored as it is, which only plaintextKeys allows.
// It fills in m's Format and Parts and returns it.
func Write(w io.Writer, m Manifest, c Contents, recipients []age.Recipient, plaintextKeys bool) (Manifest, error) {
	pkiJSON, err := json.Marshal(c.PKI)
	if err != nil {
		return m, err
	}
	names, pki, etcdPath := layouts[1], pkiJSON, c.EtcdPath
	switch {
	case len(recipients) > 0:
		if pki, err = encrypt(pkiJSON, recipients); err != nil {
			return m, err
		}
		sealed, err := encryptFile(c.EtcdPath, recipients)
		if err != nil {
			return m, err
		}
		defer os.Remove(sealed)
		names, etcdPath = layouts[0], sealed
	default:
		if err := CheckKeys(recipients, plaintextKeys); err != nil {
			return m, err
		}
	}
	etcd, err := os.Open(etcdPath)
	if err != nil {
		return m, err
	}
	defer etcd.Close()
	etcdSize, etcdSum, err := hashReader(etcd)
	if err != nil {
		return m, fmt.Errorf("read etcd's snapshot: %w", err)
	}
	if _, err := etcd.Seek(0, io.SeekStart); err != nil {
		return m, err
	}
	m.Format = Format
	m.Parts = []Part{
		bytesPart(names[0], c.VirtualCluster),
		{Name: names[1], Size: etcdSize, SHA256: etcdSum},
		bytesPart(names[2], pki),
	}
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	tw := tar.NewWriter(w)
	for _, e := range []struct {
		name string
		size int64
		r    io.Reader
	}{
		{ManifestEntry, int64(len(manifest)), bytes.NewReader(manifest)},
		{names[0], int64(len(c.VirtualCluster)), bytes.NewReader(c.VirtualCluster)},
		{names[1], etcdSize, etcd},
		{names[2], int64(len(pki)), bytes.NewReader(pki)},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o600, Size: e.size, ModTime: m.Created, Typeflag: tar.TypeReg}); err != nil {
			return m, err
		}
		if n, err := io.Copy(tw, e.r); err != nil || n != e.size {
			return m, fmt.Errorf("write %s: %d of %d bytes: %v", e.name, n, e.size, err)
		}
	}
	return m, tw.Close()
}

// CheckKeys refuses a snapshot with no recipient unless plaintextKeys
// says to store its keys and etcd's data unencrypted.
func CheckKeys(recipients []age.Recipient, plaintextKeys bool) error {
	if len(recipients) == 0 && !plaintextKeys {
		return errors.New("no recipient for the snapshot's keys: name an age recipient (--recipient), or store the CA and service-account keys, and etcd's data with the tenant's Secrets, unencrypted with --insecure-plaintext-keys")
	}
	return nil
}

func encrypt(plain []byte, recipients []age.Recipient) ([]byte, error) {
	var out bytes.Buffer
	w, err := age.Encrypt(&out, recipients...)
	if err != nil {
		return nil, fmt.Errorf("encrypt the keys: %w", err)
	}
	if _, err := w.Write(plain); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// encryptFile encrypts the file at path to recipients into a new file
// beside it and returns its path.
func encryptFile(path string, recipients []age.Recipient) (string, error) {
	in, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+"-*.age")
	if err != nil {
		return "", err
	}
	w, err := age.Encrypt(out, recipients...)
	if err == nil {
		if _, err = io.Copy(w, in); err == nil {
			err = w.Close()
		}
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out.Name())
		return "", fmt.Errorf("encrypt etcd's snapshot: %w", err)
	}
	return out.Name(), nil
}

func bytesPart(name string, b []byte) Part {
	sum := sha256.Sum256(b)
	return Part{Name: name, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

func hashReader(r io.Reader) (int64, string, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return n, hex.EncodeToString(h.Sum(nil)), err
}

// hashFile is the size of the file at path and its SHA-256, in hex.
func hashFile(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	return hashReader(f)
}

// Snapshot is a snapshot Read checked: its manifest and contents.
type Snapshot struct {
	Manifest Manifest
	Contents
	// Encrypted says the PKI was stored encrypted.
	Encrypted bool
}

// Read reads and checks the archive from r, writing etcd's snapshot to a
// file in dir (Contents.EtcdPath), decrypted. It refuses, with an error that says
// which and why: an archive that is not one, or is cut short; a manifest
// of a newer Format; a part missing, extra, out of order, or whose size or
// SHA-256 is not the manifest's; parts that none of identities decrypts
// (with no identity, encrypted parts are checked but left sealed: PKI is
// nil and the file holds etcd's snapshot encrypted). On an error the file
// it wrote is removed.
func Read(r io.Reader, dir string, identities []age.Identity) (s *Snapshot, err error) {
	tr := tar.NewReader(r)
	manifest, err := nextEntry(tr, ManifestEntry, maxSmallPart)
	if err != nil {
		return nil, err
	}
	s = &Snapshot{}
	if err := json.Unmarshal(manifest, &s.Manifest); err != nil {
		return nil, fmt.Errorf("the snapshot's manifest: %w", err)
	}
	m := s.Manifest
	if m.Format < 1 || m.Format > Format {
		return nil, fmt.Errorf("the snapshot's format is %d, made by Nest %s; this Nest reads formats 1 to %d: use a Nest at least as new", m.Format, m.NestVersion, Format)
	}
	names := make([]string, len(m.Parts))
	for i, p := range m.Parts {
		names[i] = p.Name
	}
	if !slices.Equal(names, layouts[0]) && !slices.Equal(names, layouts[1]) {
		return nil, fmt.Errorf("the snapshot's manifest names the parts %v, want %v", names, layouts[0])
	}
	s.Encrypted = slices.Equal(names, layouts[0])
	etcd, err := os.CreateTemp(dir, "etcd-*.db")
	if err != nil {
		return nil, err
	}
	s.EtcdPath = etcd.Name()
	path := etcd.Name()
	defer func() {
		etcd.Close()
		if err != nil {
			os.Remove(path)
			s = nil
		}
	}()
	var pki []byte
	for _, p := range m.Parts {
		if p.Name == names[1] {
			err = copyEntry(tr, p, etcd)
		} else {
			var b []byte
			if b, err = nextEntry(tr, p.Name, maxSmallPart); err == nil {
				err = check(p, b)
			}
			if p.Name == VirtualClusterEntry {
				s.VirtualCluster = b
			} else {
				pki = b
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if h, err := tr.Next(); err != io.EOF {
		if err != nil {
			return nil, fmt.Errorf("the snapshot after its last part: %w", err)
		}
		return nil, fmt.Errorf("the snapshot has an entry its manifest does not name: %s", h.Name)
	}
	if s.Encrypted && len(identities) == 0 {
		return s, nil
	}
	if s.Encrypted {
		if pki, err = decrypt(pki, identities); err != nil {
			return nil, err
		}
		if err = decryptFile(etcd, identities); err != nil {
			return nil, err
		}
	}
	if err := json.Unmarshal(pki, &s.PKI); err != nil {
		return nil, fmt.Errorf("the snapshot's keys: %w", err)
	}
	return s, nil
}

// nextEntry reads the archive's next entry, which must be name, at most
// limit bytes.
func nextEntry(tr *tar.Reader, name string, limit int64) ([]byte, error) {
	h, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("the snapshot ends before %s (is it cut short, or not a snapshot?): %w", name, err)
	}
	if h.Name != name {
		return nil, fmt.Errorf("the snapshot has %s where %s should be", h.Name, name)
	}
	if h.Size > limit {
		return nil, fmt.Errorf("the snapshot's %s is %d bytes, more than the %d it may be", name, h.Size, limit)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		return nil, fmt.Errorf("the snapshot's %s is cut short: %w", name, err)
	}
	return b, nil
}

// copyEntry copies the archive's next entry, which must be p, to w and
// checks its size and SHA-256.
func copyEntry(tr *tar.Reader, p Part, w io.Writer) error {
	h, err := tr.Next()
	if err != nil {
		return fmt.Errorf("the snapshot ends before %s (is it cut short?): %w", p.Name, err)
	}
	if h.Name != p.Name {
		return fmt.Errorf("the snapshot has %s where %s should be", h.Name, p.Name)
	}
	if h.Size > MaxEtcdBytes {
		return fmt.Errorf("the snapshot's %s is %d bytes, more than etcd's largest quota", p.Name, h.Size)
	}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, sum), tr)
	if err != nil {
		return fmt.Errorf("the snapshot's %s is cut short after %d bytes: %w", p.Name, n, err)
	}
	return checkSum(p, n, hex.EncodeToString(sum.Sum(nil)))
}

func check(p Part, b []byte) error {
	sum := sha256.Sum256(b)
	return checkSum(p, int64(len(b)), hex.EncodeToString(sum[:]))
}

func checkSum(p Part, size int64, sum string) error {
	if size != p.Size {
		return fmt.Errorf("the snapshot's %s is %d bytes, its manifest says %d: it was cut short or changed", p.Name, size, p.Size)
	}
	if sum != p.SHA256 {
		return fmt.Errorf("the snapshot's %s does not match its manifest's SHA-256: it was changed after it was written", p.Name)
	}
	return nil
}

// decryptFile decrypts f, read from its start, in place of itself.
func decryptFile(f *os.File, identities []age.Identity) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	plain, err := os.CreateTemp(filepath.Dir(f.Name()), "etcd-*.db")
	if err != nil {
		return err
	}
	r, err := age.Decrypt(f, identities...)
	if err == nil {
		_, err = io.Copy(plain, r)
	}
	if cerr := plain.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(plain.Name(), f.Name())
	}
	if err != nil {
		os.Remove(plain.Name())
		return fmt.Errorf("etcd's snapshot does not decrypt with the identity given (--identity): %w", err)
	}
	return nil
}

func decrypt(b []byte, identities []age.Identity) ([]byte, error) {
	r, err := age.Decrypt(bytes.NewReader(b), identities...)
	if err != nil {
		return nil, fmt.Errorf("the snapshot's keys do not decrypt with the identity given (--identity): %w", err)
	}
	return io.ReadAll(r)
}
