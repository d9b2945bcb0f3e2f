package snapshot

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// serveRegistry is an OCI registry on loopback for the test's life.
func serveRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// saveAt saves a snapshot taken at created to url and returns its
// location.
func saveAt(t *testing.T, ctx context.Context, url string, created time.Time, c Contents, recipients []age.Recipient) Location {
	t.Helper()
	l, err := ParseLocation(url, false)
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest{NestVersion: "v0.test", KubernetesVersion: "v1.36.3", Namespace: "vc-alpha", VirtualCluster: "alpha", Created: created, EtcdRevision: 42}
	if _, err := l.Save(ctx, t.TempDir(), func(w io.Writer) (Manifest, error) { return Write(w, m, c, recipients, false) }); err != nil {
		t.Fatal(err)
	}
	return l
}

// A snapshot pushed to oci:// comes back whole: Read checks and decrypts
// what was pulled, and the artifact is of Nest's types.
func TestSnapshotThroughARegistryComesBackWhole(t *testing.T) {
	ctx := context.Background()
	reg := serveRegistry(t)
	c, id := contents(t), identity(t)
	l := saveAt(t, ctx, "oci://"+reg+"/backups/alpha:one", time.Unix(1700000000, 0).UTC(), c, []age.Recipient{id.Recipient()})
	rc, err := l.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	s, err := Read(rc, t.TempDir(), []age.Identity{id})
	if err != nil {
		t.Fatal(err)
	}
	if string(s.PKI["ca.key"]) != "SECRET KEY" || s.Manifest.VirtualCluster != "alpha" {
		t.Errorf("pulled %+v with PKI %q", s.Manifest, s.PKI)
	}
	got, err := os.ReadFile(s.EtcdPath)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(c.EtcdPath)
	if string(got) != string(want) {
		t.Error("etcd's snapshot pulled differs from the one pushed")
	}
	m, _, err := artifactManifest(ctx, l.Tag)
	if err != nil {
		t.Fatal(err)
	}
	if m.ArtifactType != ArtifactType {
		t.Errorf("artifactType %q, want %q", m.ArtifactType, ArtifactType)
	}
}

// List gives a repository's snapshots oldest first and leaves out other
// artifacts; Delete removes one by its tag.
func TestListOrdersSnapshotsAndDeleteRemovesOne(t *testing.T) {
	ctx := context.Background()
	reg := serveRegistry(t)
	c := contents(t)
	base := time.Unix(1700000000, 0).UTC()
	for i, tag := range []string{"b", "a", "c"} {
		// Tagged out of time order: List orders by Created.
		saveAt(t, ctx, "oci://"+reg+"/backups/alpha:"+tag, base.Add(time.Duration([]int{2, 1, 3}[i])*time.Minute), c, []age.Recipient{identity(t).Recipient()})
	}
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(reg + "/backups/alpha")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(repo.Tag("not-a-snapshot"), img); err != nil {
		t.Fatal(err)
	}
	listed, err := List(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	if got := tags(listed); got != "a b c" {
		t.Fatalf("listed %q, want a b c", got)
	}
	if listed[0].Size == 0 || !strings.HasPrefix(listed[0].Digest, "sha256:") || listed[0].Manifest.VirtualCluster != "alpha" {
		t.Errorf("listed %+v", listed[0])
	}
	if err := Delete(ctx, repo.Tag("a")); err != nil {
		t.Fatal(err)
	}
	if listed, err = List(ctx, repo); err != nil || tags(listed) != "b c" {
		t.Errorf("after deleting a: %q, %v", tags(listed), err)
	}
}

// An artifact that is not a Nest snapshot is refused by name.
func TestOpenRefusesAnotherArtifact(t *testing.T) {
	reg := serveRegistry(t)
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag(reg + "/backups/alpha:image")
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	l, _ := ParseLocation("oci://"+tag.String(), false)
	if _, err := l.Open(context.Background()); err == nil || !strings.Contains(err.Error(), "is not a Nest snapshot") {
		t.Errorf("Open of an image: %v, want one saying it is not a Nest snapshot", err)
	}
}

// A failed snapshot leaves no file under the location's name, and no tag.
func TestAFailedSaveLeavesNothing(t *testing.T) {
	ctx := context.Background()
	reg := serveRegistry(t)
	path := filepath.Join(t.TempDir(), "alpha.snapshot")
	for _, url := range []string{"file://" + path, "oci://" + reg + "/backups/alpha:failed"} {
		l, err := ParseLocation(url, false)
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Save(ctx, t.TempDir(), func(w io.Writer) (Manifest, error) {
			_, _ = w.Write([]byte("half an archive"))
			return Manifest{}, io.ErrUnexpectedEOF
		})
		if err == nil {
			t.Errorf("%s: a failed write saved", url)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a failed snapshot left %s: %v", path, err)
	}
	repo, _ := name.NewRepository(reg + "/backups/alpha")
	if tags, err := remote.List(repo); err == nil && len(tags) > 0 {
		t.Errorf("a failed snapshot left tags %v", tags)
	}
}

func TestParseLocationNamesTheFix(t *testing.T) {
	for url, want := range map[string]string{
		"":                           "file:///var/backups",
		"s3://bucket/x":              "want file://PATH or oci://",
		"oci://registry.example/x":   "with a tag",
		"oci://Registry Example/x:1": "want oci://REGISTRY/REPOSITORY:TAG",
	} {
		if _, err := ParseLocation(url, false); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLocation(%q) = %v, want an error containing %q", url, err, want)
		}
	}
	l, err := ParseLocation("oci://198.18.1.200:5000/backups/alpha:2026", true)
	if err != nil || !l.IsOCI() || l.Tag.RepositoryStr() != "backups/alpha" || l.Tag.TagStr() != "2026" || l.Tag.Scheme() != "http" {
		t.Errorf("ParseLocation(oci://...) = %+v, %v", l, err)
	}
	if l, err := ParseLocation("file://a/b/../c.snapshot", false); err != nil || l.IsOCI() || l.Path != "a/c.snapshot" {
		t.Errorf("ParseLocation(file://...) = %+v, %v", l, err)
	}
}

func tags(l []Listed) string {
	var out []string
	for _, s := range l {
		out = append(out, s.Tag)
	}
	return strings.Join(out, " ")
}

// A repository nothing was pushed to lists no snapshot, without an error.
func TestListOfAnUnknownRepositoryIsEmpty(t *testing.T) {
	repo, _ := name.NewRepository(serveRegistry(t) + "/backups/none")
	if listed, err := List(context.Background(), repo); err != nil || len(listed) != 0 {
		t.Errorf("List of a new repository: %v, %v", listed, err)
	}
}

// Deleting one tag of a snapshot another tag also names leaves it there
// under the other.
func TestDeleteKeepsASnapshotAnotherTagNames(t *testing.T) {
	ctx := context.Background()
	reg := serveRegistry(t)
	l := saveAt(t, ctx, "oci://"+reg+"/backups/kept:auto-1", time.Unix(1700000000, 0).UTC(), contents(t), []age.Recipient{identity(t).Recipient()})
	desc, err := remote.Get(l.Tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := desc.Image()
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(l.Tag.Context().Tag("keep-forever"), img); err != nil {
		t.Fatal(err)
	}
	if err := Delete(ctx, l.Tag); err != nil {
		t.Fatal(err)
	}
	listed, err := List(ctx, l.Tag.Context())
	if err != nil || tags(listed) != "keep-forever" {
		t.Errorf("after deleting auto-1: %q, %v; want keep-forever alone", tags(listed), err)
	}
}

func TestParseRepositoryRefusesTags(t *testing.T) {
	if r, err := ParseRepository("oci://198.18.1.200:5000/backups/a/", true); err != nil || r.RepositoryStr() != "backups/a" || r.Scheme() != "http" {
		t.Errorf("ParseRepository = %v, %v", r, err)
	}
	for _, bad := range []string{"file:///x", "oci://registry.example/backups:tag", "registry.example/backups"} {
		if _, err := ParseRepository(bad, false); err == nil || !strings.Contains(err.Error(), "oci://REGISTRY/REPOSITORY") {
			t.Errorf("ParseRepository(%q) = %v", bad, err)
		}
	}
	if _, err := ParseLocation("file:///x", true); err == nil || !strings.Contains(err.Error(), "leave --plain-http out") {
		t.Errorf("file:// with plain HTTP: %v", err)
	}
}
