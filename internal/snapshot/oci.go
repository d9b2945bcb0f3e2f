package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	k8stypes "k8s.io/apimachinery/pkg/types"
)

// A snapshot in a registry is an OCI artifact (OCI image-spec 1.1's
// artifact guidance): an image manifest of artifactType ArtifactType whose
// config is the snapshot's Manifest as JSON (ConfigMediaType), so a list
// reads what each holds without fetching it, and whose one layer is the
// archive Write wrote, byte for byte (LayerMediaType). go-containerregistry
// pushes and pulls it, with the credentials of the Docker config
// (authn.DefaultKeychain: $DOCKER_CONFIG, ~/.docker/config.json), over
// plain HTTP only to a loopback or private address, as it decides.
const (
	ArtifactType    = "application/vnd.nest.snapshot.v1"
	ConfigMediaType = "application/vnd.nest.snapshot.manifest.v1+json"
	LayerMediaType  = "application/vnd.nest.snapshot.archive.v1.tar"
)

// push uploads the archive at path, whose manifest is m, as the artifact
// tag: its layer and config first, the manifest last, so the tag names
// nothing until every blob is in.
func push(ctx context.Context, tag name.Tag, path string, m Manifest) error {
	size, sum, err := hashFile(path)
	if err != nil {
		return err
	}
	config, err := json.Marshal(m)
	if err != nil {
		return err
	}
	layer := &fileLayer{path: path, size: size, digest: v1.Hash{Algorithm: "sha256", Hex: sum}}
	configDigest, configSize, err := v1.SHA256(bytes.NewReader(config))
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: ArtifactType,
		Config: v1.Descriptor{MediaType: ConfigMediaType, Size: configSize, Digest: configDigest},
		Layers: []v1.Descriptor{{MediaType: LayerMediaType, Size: size, Digest: layer.digest,
			Annotations: map[string]string{"org.opencontainers.image.title": tag.TagStr() + ".snapshot"}}},
		Annotations: map[string]string{
			"org.opencontainers.image.created": m.Created.Format("2006-01-02T15:04:05Z"),
			"dev.nest.virtualcluster":          m.Namespace + "/" + m.VirtualCluster,
		},
	})
	if err != nil {
		return err
	}
	img, err := partial.CompressedToImage(&artifact{manifest: manifest, config: config, layer: layer})
	if err != nil {
		return err
	}
	if err := remote.Write(tag, img, options(ctx)...); err != nil {
		return fmt.Errorf("push the snapshot to %s: %w", tag, err)
	}
	return nil
}

// pull opens the archive of the artifact tag, after checking that it is a
// Nest snapshot. Reading it to its end checks the layer's digest.
func pull(ctx context.Context, tag name.Tag) (io.ReadCloser, error) {
	m, _, err := artifactManifest(ctx, tag)
	if err != nil {
		return nil, err
	}
	layer, err := remote.Layer(tag.Context().Digest(m.Layers[0].Digest.String()), options(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("the snapshot %s: %w", tag, err)
	}
	rc, err := layer.Compressed()
	if err != nil {
		return nil, fmt.Errorf("the snapshot %s: %w", tag, err)
	}
	return rc, nil
}

// errNotSnapshot is artifactManifest's refusal of another artifact.
var errNotSnapshot = errors.New("is not a Nest snapshot")

// artifactManifest fetches the image manifest ref names and checks that it
// is a Nest snapshot's: its config and one layer of Nest's media types. It
// returns the manifest and its digest.
func artifactManifest(ctx context.Context, ref name.Reference) (*v1.Manifest, string, error) {
	desc, err := remote.Get(ref, options(ctx)...)
	if err != nil {
		return nil, "", fmt.Errorf("the snapshot %s: %w", ref, err)
	}
	m, err := v1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return nil, "", fmt.Errorf("the snapshot %s: %w", ref, err)
	}
	if m.Config.MediaType != ConfigMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != LayerMediaType {
		return nil, "", fmt.Errorf("%s %w: its config is %q and it has %d layers, want config %s and one layer %s",
			ref, errNotSnapshot, m.Config.MediaType, len(m.Layers), ConfigMediaType, LayerMediaType)
	}
	return m, desc.Digest.String(), nil
}

// Listed is one snapshot of a repository: its tag, digest, the size of its
// archive, and the manifest its config holds.
type Listed struct {
	Tag      string
	Digest   string
	Size     int64
	Manifest Manifest
}

// List returns the Nest snapshots in repo, oldest first (by
// Manifest.Created, then tag); none for a repository the registry does
// not know yet. Tags of other artifacts are left out; any other failure
// to read one fails the list, which is never partial.
func List(ctx context.Context, repo name.Repository) ([]Listed, error) {
	tags, err := remote.List(repo, options(ctx)...)
	var terr *transport.Error
	if errors.As(err, &terr) && (terr.StatusCode == http.StatusNotFound || hasCode(terr, transport.NameUnknownErrorCode)) {
		// A repository nothing was pushed to yet holds no snapshot.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the tags of %s: %w", repo, err)
	}
	var out []Listed
	for _, t := range tags {
		tag := repo.Tag(t)
		m, digest, err := artifactManifest(ctx, tag)
		if errors.Is(err, errNotSnapshot) {
			continue
		}
		if err != nil {
			return nil, err
		}
		blob, err := remote.Layer(repo.Digest(m.Config.Digest.String()), options(ctx)...)
		if err != nil {
			return nil, err
		}
		var manifest Manifest
		if err := readJSON(blob, &manifest); err != nil {
			return nil, fmt.Errorf("the snapshot %s's manifest: %w", tag, err)
		}
		out = append(out, Listed{Tag: t, Digest: digest, Size: m.Layers[0].Size, Manifest: manifest})
	}
	slices.SortFunc(out, func(a, b Listed) int {
		if c := a.Manifest.Created.Compare(b.Manifest.Created); c != 0 {
			return c
		}
		return strings.Compare(a.Tag, b.Tag)
	})
	return out, nil
}

// OfVirtualCluster is the snapshots among listed that were taken of the
// VirtualCluster key (their manifests name it), in listed's order.
func OfVirtualCluster(listed []Listed, key k8stypes.NamespacedName) []Listed {
	var out []Listed
	for _, l := range listed {
		if l.Manifest.Namespace == key.Namespace && l.Manifest.VirtualCluster == key.Name {
			out = append(out, l)
		}
	}
	return out
}

// Delete removes the tag from its registry (OCI distribution-spec 1.1's
// tag deletion), leaving the manifest to the registry's garbage
// collection, so another tag on the same snapshot keeps it. A registry
// that cannot delete a tag alone gets the manifest deleted by its digest,
// which removes its tags with it, only when no other tag of the
// repository names it; otherwise the tag stays and Delete says so.
func Delete(ctx context.Context, tag name.Tag) error {
	if err := remote.Delete(tag, options(ctx)...); err == nil {
		return nil
	}
	digest, err := digestOf(ctx, tag)
	if err != nil {
		return err
	}
	tags, err := remote.List(tag.Context(), options(ctx)...)
	if err != nil {
		return fmt.Errorf("delete the snapshot %s: %w", tag, err)
	}
	for _, t := range tags {
		if t == tag.TagStr() {
			continue
		}
		if d, err := digestOf(ctx, tag.Context().Tag(t)); err != nil || d == digest {
			return fmt.Errorf("delete the snapshot %s: the registry deletes no tag alone, and tag %s names the same snapshot (or could not be read: %v): left in place", tag, t, err)
		}
	}
	err = remote.Delete(tag.Context().Digest(digest), options(ctx)...)
	var terr *transport.Error
	if err != nil && !(errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound) {
		return fmt.Errorf("delete the snapshot %s (%s): %w", tag, digest, err)
	}
	return nil
}

func hasCode(err *transport.Error, code transport.ErrorCode) bool {
	for _, d := range err.Errors {
		if d.Code == code {
			return true
		}
	}
	return false
}

// digestOf is the digest of the manifest tag names, from a HEAD request.
func digestOf(ctx context.Context, tag name.Tag) (string, error) {
	d, err := remote.Head(tag, options(ctx)...)
	if err != nil {
		return "", fmt.Errorf("the snapshot %s: %w", tag, err)
	}
	return d.Digest.String(), nil
}

// readJSON decodes a blob of at most maxSmallPart bytes into v.
func readJSON(blob v1.Layer, v any) error {
	rc, err := blob.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	return json.NewDecoder(io.LimitReader(rc, maxSmallPart)).Decode(v)
}

func options(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}
}

// artifact is a snapshot's OCI artifact as go-containerregistry pushes it
// (partial.CompressedImageCore): the manifest and config made by push, and
// the archive as its one layer.
type artifact struct {
	manifest, config []byte
	layer            *fileLayer
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return a.config, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h != a.layer.digest {
		return nil, fmt.Errorf("the snapshot artifact has no layer %s", h)
	}
	return a.layer, nil
}

// fileLayer is a file pushed as it is (partial.CompressedLayer).
type fileLayer struct {
	path   string
	size   int64
	digest v1.Hash
}

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return LayerMediaType, nil }
