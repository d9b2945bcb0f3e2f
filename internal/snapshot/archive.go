// Package snapshot writes and reads a tenant's snapshot: one tar archive
// that holds a manifest, the VirtualCluster, the tenant's etcd snapshot and
// its PKI (every CA, certificate and key, the service-account key among
// them), etcd's snapshot and the PKI encrypted with age (filippo.io/age) to
// the recipients the user names: etcd holds the tenant's Secrets as its API
// server stored them. With volumes included, the files of each tenant
// PersistentVolumeClaim follow, one part a claim (volumearchive's tar
// stream), encrypted the same way. The manifest, the archive's first entry,
// gives Nest's and Kubernetes' versions, the tenant's claims, and every
// part's size and SHA-256, so a reader
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

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// Format is the version of the archive's layout this Nest writes and the
// newest it reads. Format 2 added Manifest.Volumes and the volume parts;
// Format 1 snapshots are read as snapshots of a tenant with no claim.
const Format = 2

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
	// Address is where the tenant's API server was reached: its Service's
	// LoadBalancer address and node port, which a restore under the same
	// name asks for again (nestv1.AnnotationRequestedAddress).
	Address *nestv1.RequestedAddress `json:"address,omitempty"`
	// Volumes are the tenant's PersistentVolumeClaims that had a host
	// claim, with their data where the snapshot includes it.
	Volumes []Volume `json:"volumes,omitempty"`
	// Parts are the archive's other entries, in order: the layout's three,
	// then the Volumes' parts in the Volumes' order.
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
	// VolumePaths are, for each of the manifest's Volumes, a file holding
	// its data as volumearchive.Pack writes it, or "" for a claim whose data
	// the snapshot does not hold.
	VolumePaths []string
}

// Write writes the archive of c and m to w: the manifest, then the
// VirtualCluster, etcd's snapshot, the PKI and each volume's data,
// encrypted to recipients. With no recipient they are stored as they are,
// which only plaintextKeys allows. m.Volumes must have one entry per
// c.VolumePaths; Write names their parts. It fills in m's Format and Parts
// and returns it.
func Write(w io.Writer, m Manifest, c Contents, recipients []age.Recipient, plaintextKeys bool) (Manifest, error) {
	if len(c.VolumePaths) != len(m.Volumes) {
		return m, fmt.Errorf("%d volume files for %d volumes", len(c.VolumePaths), len(m.Volumes))
	}
	if err := CheckKeys(recipients, plaintextKeys); err != nil {
		return m, err
	}
	pkiJSON, err := json.Marshal(c.PKI)
	if err != nil {
		return m, err
	}
	sealed := len(recipients) > 0
	names, pki := layouts[1], pkiJSON
	if sealed {
		names = layouts[0]
		if pki, err = encrypt(pkiJSON, recipients); err != nil {
			return m, err
		}
	}
	entries := []entry{
		{part: bytesPart(names[0], c.VirtualCluster), data: c.VirtualCluster},
		{part: Part{Name: names[1]}, path: c.EtcdPath},
		{part: bytesPart(names[2], pki), data: pki},
	}
	m.Volumes = slices.Clone(m.Volumes)
	for i, path := range c.VolumePaths {
		m.Volumes[i].Part = ""
		if path != "" {
			m.Volumes[i].Part = volumePart(i, sealed)
			entries = append(entries, entry{part: Part{Name: m.Volumes[i].Part}, path: path})
		}
	}
	// Files are sealed into temporary files beside them, and hashed.
	for i := range entries {
		e := &entries[i]
		if e.path == "" {
			continue
		}
		if sealed {
			if e.path, err = encryptFile(e.path, recipients); err != nil {
				return m, err
			}
			defer os.Remove(e.path)
		}
		if e.part.Size, e.part.SHA256, err = hashFile(e.path); err != nil {
			return m, fmt.Errorf("read %s: %w", e.part.Name, err)
		}
	}
	m.Format = Format
	m.Parts = nil
	for _, e := range entries {
		m.Parts = append(m.Parts, e.part)
	}
	manifest, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	tw := tar.NewWriter(w)
	if err := writeEntry(tw, ManifestEntry, m.Created, int64(len(manifest)), bytes.NewReader(manifest)); err != nil {
		return m, err
	}
	for _, e := range entries {
		if err := e.writeTo(tw, m.Created); err != nil {
			return m, err
		}
	}
	return m, tw.Close()
}

// entry is one part Write writes: data in memory, or the file at path.
type entry struct {
	part Part
	data []byte
	path string
}

func (e entry) writeTo(tw *tar.Writer, modTime time.Time) error {
	if e.path == "" {
		return writeEntry(tw, e.part.Name, modTime, e.part.Size, bytes.NewReader(e.data))
	}
	f, err := os.Open(e.path)
	if err != nil {
		return err
	}
	defer f.Close()
	return writeEntry(tw, e.part.Name, modTime, e.part.Size, f)
}

func writeEntry(tw *tar.Writer, name string, modTime time.Time, size int64, r io.Reader) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: size, ModTime: modTime, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if n, err := io.Copy(tw, r); err != nil || n != size {
		return fmt.Errorf("write %s: %d of %d bytes: %v", name, n, size, err)
	}
	return nil
}

// volumePart is the archive entry of the data of the manifest's volume i:
// numbered, so no name the tenant chose is a path in the archive.
func volumePart(i int, sealed bool) string {
	if sealed {
		return fmt.Sprintf("volumes/%d.tar.age", i)
	}
	return fmt.Sprintf("volumes/%d.tar", i)
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
		return "", fmt.Errorf("encrypt %s: %w", filepath.Base(path), err)
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

// Remove removes the files Read wrote: etcd's snapshot and the volumes'
// data.
func (s *Snapshot) Remove() {
	if s.EtcdPath != "" {
		os.Remove(s.EtcdPath)
	}
	s.removeVolumes()
}

// removeVolumes removes the volumes' data files.
func (s *Snapshot) removeVolumes() {
	for _, p := range s.VolumePaths {
		if p != "" {
			os.Remove(p)
		}
	}
}

// Read reads and checks the archive from r, writing etcd's snapshot and
// each volume's data to files in dir (Contents.EtcdPath and VolumePaths),
// decrypted. It refuses, with an error that says which and why: an archive
// that is not one, or is cut short; a manifest of a newer Format; a part
// missing, extra, out of order, or whose size or SHA-256 is not the
// manifest's; parts that none of identities decrypts (with no identity,
// encrypted parts are checked but left sealed: PKI is nil and the files
// hold their parts encrypted). On an error the files it wrote are removed.
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
	volumeOf, err := checkParts(m)
	if err != nil {
		return nil, err
	}
	s.Encrypted = m.Parts[1].Name == EtcdEntry
	s.VolumePaths = make([]string, len(m.Volumes))
	defer func() {
		if err != nil {
			s.Remove()
			s = nil
		}
	}()
	var pki []byte
	for i, p := range m.Parts {
		switch {
		case i == 1:
			s.EtcdPath, err = readToFile(tr, p, dir, MaxEtcdBytes)
		case i > 2:
			s.VolumePaths[volumeOf[p.Name]], err = readToFile(tr, p, dir, p.Size)
		default:
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
			return s, err
		}
	}
	if h, err := tr.Next(); err != io.EOF {
		if err != nil {
			return s, fmt.Errorf("the snapshot after its last part: %w", err)
		}
		return s, fmt.Errorf("the snapshot has an entry its manifest does not name: %s", h.Name)
	}
	if s.Encrypted && len(identities) == 0 {
		return s, nil
	}
	if s.Encrypted {
		if pki, err = decrypt(pki, identities); err != nil {
			return s, err
		}
		if err = decryptFile(s.EtcdPath, "etcd's snapshot", identities); err != nil {
			return s, err
		}
		for i, path := range s.VolumePaths {
			if path == "" {
				continue
			}
			if err = decryptFile(path, fmt.Sprintf("the data of claim %s/%s", m.Volumes[i].Namespace, m.Volumes[i].Name), identities); err != nil {
				return s, err
			}
		}
	}
	if err := json.Unmarshal(pki, &s.PKI); err != nil {
		return s, fmt.Errorf("the snapshot's keys: %w", err)
	}
	return s, nil
}

// checkParts checks that the manifest names the parts its layout and
// volumes call for, in order, and returns the index among m.Volumes of
// each volume part.
func checkParts(m Manifest) (map[string]int, error) {
	names := make([]string, len(m.Parts))
	for i, p := range m.Parts {
		names[i] = p.Name
	}
	if len(names) < 3 || (!slices.Equal(names[:3], layouts[0]) && !slices.Equal(names[:3], layouts[1])) {
		return nil, fmt.Errorf("the snapshot's manifest names the parts %v, want %v first", names, layouts[0])
	}
	sealed := names[1] == EtcdEntry
	want, volumeOf := slices.Clone(names[:3]), map[string]int{}
	for i, v := range m.Volumes {
		if v.Part == "" {
			continue
		}
		if v.Part != volumePart(i, sealed) {
			return nil, fmt.Errorf("the snapshot's manifest names the data of claim %s/%s %q, want %q", v.Namespace, v.Name, v.Part, volumePart(i, sealed))
		}
		want = append(want, v.Part)
		volumeOf[v.Part] = i
	}
	if !slices.Equal(names, want) {
		return nil, fmt.Errorf("the snapshot's manifest names the parts %v, want %v", names, want)
	}
	return volumeOf, nil
}

// readToFile copies the archive's next entry, which must be p, at most
// limit bytes, into a new file in dir, checks it (copyEntry) and returns
// the file's path. On an error the file is removed.
func readToFile(tr *tar.Reader, p Part, dir string, limit int64) (string, error) {
	f, err := os.CreateTemp(dir, "nest-snapshot-part-*")
	if err != nil {
		return "", err
	}
	err = copyEntry(tr, p, f, limit)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
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

// copyEntry copies the archive's next entry, which must be p and at most
// limit bytes, to w and checks its size and SHA-256.
func copyEntry(tr *tar.Reader, p Part, w io.Writer, limit int64) error {
	h, err := tr.Next()
	if err != nil {
		return fmt.Errorf("the snapshot ends before %s (is it cut short?): %w", p.Name, err)
	}
	if h.Name != p.Name {
		return fmt.Errorf("the snapshot has %s where %s should be", h.Name, p.Name)
	}
	if h.Size > limit {
		return fmt.Errorf("the snapshot's %s is %d bytes, more than the %d it may be", p.Name, h.Size, limit)
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

// decryptFile decrypts the file at path in place of itself; what names
// its contents in an error.
func decryptFile(path, what string, identities []age.Identity) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	plain, err := os.CreateTemp(filepath.Dir(path), "nest-snapshot-part-*")
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
		err = os.Rename(plain.Name(), path)
	}
	if err != nil {
		os.Remove(plain.Name())
		return fmt.Errorf("%s does not decrypt with the identity given (--identity): %w", what, err)
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
