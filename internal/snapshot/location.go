package snapshot

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Location is where a snapshot is kept, as a URL names it: file://PATH, a
// file on this machine, or oci://REGISTRY/REPOSITORY:TAG, an OCI artifact
// in a registry (oci.go).
type Location struct {
	// URL is the location as given.
	URL string
	// Path is the file of a file:// URL; "" for oci://.
	Path string
	// Tag is the artifact of an oci:// URL.
	Tag name.Tag
}

// ParseLocation reads a snapshot URL: file://PATH (a relative PATH is
// taken from the working directory) or oci://REGISTRY/REPOSITORY:TAG. An
// oci:// URL must name its tag: a snapshot is never written to, or read
// from, a "latest" it did not ask for. The registry is reached over HTTPS,
// or plain HTTP where go-containerregistry allows it (a loopback or
// RFC 1918 address, localhost, *.local) or plainHTTP says so (after HTTPS
// fails, as oras' and crane's flags do). Its error says what a good URL
// looks like.
func ParseLocation(url string, plainHTTP bool) (Location, error) {
	switch {
	case url == "":
		return Location{}, fmt.Errorf("name the snapshot, such as file:///var/backups/team-a.snapshot or oci://registry.example:5000/backups/team-a:2026-11-29")
	case strings.HasPrefix(url, "file://") && len(url) > len("file://"):
		if plainHTTP {
			return Location{}, fmt.Errorf("%s: plain HTTP is for oci:// registries, not files: leave --plain-http out", url)
		}
		return Location{URL: url, Path: filepath.Clean(strings.TrimPrefix(url, "file://"))}, nil
	case strings.HasPrefix(url, "oci://"):
		tag, err := name.NewTag(strings.TrimPrefix(url, "oci://"), nameOptions(plainHTTP)...)
		if err != nil {
			return Location{}, fmt.Errorf("%s: want oci://REGISTRY/REPOSITORY:TAG, with a tag: %w", url, err)
		}
		return Location{URL: url, Tag: tag}, nil
	}
	return Location{}, fmt.Errorf("%s: want file://PATH or oci://REGISTRY/REPOSITORY:TAG", url)
}

// ParseRepository reads oci://REGISTRY/REPOSITORY, a repository without a
// tag (spec.snapshots.to, nest snapshot list --in), reached as
// ParseLocation says (plainHTTP).
func ParseRepository(url string, plainHTTP bool) (name.Repository, error) {
	ref, ok := strings.CutPrefix(url, "oci://")
	if !ok {
		return name.Repository{}, fmt.Errorf("%s: want oci://REGISTRY/REPOSITORY", url)
	}
	repo, err := name.NewRepository(strings.TrimSuffix(ref, "/"), nameOptions(plainHTTP)...)
	if err != nil {
		return name.Repository{}, fmt.Errorf("%s: want oci://REGISTRY/REPOSITORY, without a tag: %w", url, err)
	}
	return repo, nil
}

// nameOptions are go-containerregistry's name options for a snapshot
// reference: strict (no "latest" or index.docker.io filled in), and plain
// HTTP allowed when asked for.
func nameOptions(plainHTTP bool) []name.Option {
	if plainHTTP {
		return []name.Option{name.StrictValidation, name.Insecure}
	}
	return []name.Option{name.StrictValidation}
}

// IsOCI says the location is an OCI artifact.
func (l Location) IsOCI() bool { return l.Path == "" }

// Save writes the snapshot that write produces to the location. A file is
// written beside its final name (mode 0600) and renamed into place only
// when whole; an artifact is staged in tempDir ("" is the system's) and
// pushed once whole. Either way a failed snapshot leaves nothing under
// the location's name.
func (l Location) Save(ctx context.Context, tempDir string, write func(io.Writer) (Manifest, error)) (Manifest, error) {
	if !l.IsOCI() {
		return writeFile(l.Path, filepath.Dir(l.Path), write)
	}
	dir, err := os.MkdirTemp(tempDir, "nest-snapshot-*")
	if err != nil {
		return Manifest{}, err
	}
	defer os.RemoveAll(dir)
	staged := filepath.Join(dir, "snapshot")
	m, err := writeFile(staged, dir, write)
	if err != nil {
		return m, err
	}
	return m, push(ctx, l.Tag, staged, m)
}

// Open opens the snapshot at the location for reading (Read checks it).
func (l Location) Open(ctx context.Context) (io.ReadCloser, error) {
	if l.IsOCI() {
		return pull(ctx, l.Tag)
	}
	return os.Open(l.Path)
}

// writeFile writes what write produces to path through a temporary file
// in dir (mode 0600), renamed into place only when whole and synced.
func writeFile(path, dir string, write func(io.Writer) (Manifest, error)) (Manifest, error) {
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return Manifest{}, err
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	m, err := write(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return m, err
	}
	return m, os.Rename(tmp.Name(), path)
}
