// Package volumearchive packs the files of a directory into a tar stream
// and unpacks such a stream into a directory: the data of a tenant's
// persistent volume as a snapshot holds it. It keeps regular files, their
// modes, owners and modification times, directories and symbolic links
// (as links, never followed); hard links are stored as separate files;
// sockets, pipes and devices are left out and counted.
//
// The data is the tenant's, and a tenant is hostile: Unpack works through
// an os.Root, so no entry's name, and no symbolic link the stream made
// before it, writes outside the directory; it refuses names that are
// absolute or climb with "..", entry types it does not make, and a stream
// past its byte limit.
package volumearchive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Stats is what Pack or Unpack went through.
type Stats struct {
	Files int `json:"files"`
	Dirs  int `json:"dirs"`
	Links int `json:"links"`
	// Bytes is the size of the regular files' contents.
	Bytes int64 `json:"bytes"`
	// Omitted counts what Pack left out: sockets, pipes, devices.
	Omitted int `json:"omitted,omitempty"`
}

// Pack writes the tree under dir to w as a tar stream (PAX format), names
// relative to dir, dir itself as ".". It reads through an os.Root of dir,
// so a symbolic link inside it is stored as a link and never followed.
func Pack(dir string, w io.Writer) (Stats, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Stats{}, err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	var st Stats
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := root.Lstat(name)
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = root.Readlink(name); err != nil {
				return err
			}
			st.Links++
		case info.IsDir():
			st.Dirs++
		case info.Mode().IsRegular():
			st.Files++
			st.Bytes += info.Size()
		default:
			st.Omitted++
			return nil
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name, h.Format = name, tar.FormatPAX
		if info.IsDir() {
			h.Name += "/"
		}
		// Owners by number only: the names of this container's users
		// mean nothing where it is unpacked.
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := root.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		if n, err := io.Copy(tw, f); err != nil {
			return err
		} else if n != info.Size() {
			return fmt.Errorf("%s changed size while it was packed (%d bytes, then %d)", name, info.Size(), n)
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("pack %s: %w", dir, err)
	}
	return st, tw.Close()
}

// ErrTooLarge is Unpack's refusal of a stream past its limit.
var ErrTooLarge = errors.New("the volume's data is larger than its limit")

// Unpack writes the tar stream r into dir, which must exist: directories,
// regular files (their modes, owners when the process may set them, and
// modification times) and symbolic links. It refuses, without writing
// the entry, a name that is absolute or leaves dir, an entry type other
// than those, and contents past limit bytes in all (ErrTooLarge). Every
// write goes through an os.Root of dir: a symbolic link the stream made
// is never followed out of it.
func Unpack(dir string, r io.Reader, limit int64) (Stats, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Stats{}, err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var st Stats
	// A directory's time is set once its entries are in: writing them
	// changes it.
	type dirTime struct {
		name string
		t    time.Time
	}
	var dirs []dirTime
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return st, fmt.Errorf("unpack into %s: %w", dir, err)
		}
		name, err := cleanName(h.Name)
		if err != nil {
			return st, err
		}
		if err := unpackEntry(root, tr, h, name, limit, &st); err != nil {
			return st, fmt.Errorf("unpack %q into %s: %w", h.Name, dir, err)
		}
		if h.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirTime{name, h.ModTime})
		}
	}
	for _, d := range slices.Backward(dirs) {
		if err := root.Chtimes(d.name, d.t, d.t); err != nil {
			return st, fmt.Errorf("unpack into %s: %w", dir, err)
		}
	}
	return st, nil
}

func unpackEntry(root *os.Root, tr *tar.Reader, h *tar.Header, name string, limit int64, st *Stats) error {
	mode := fs.FileMode(h.Mode).Perm() | fs.FileMode(h.Mode)&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
	switch h.Typeflag {
	case tar.TypeDir:
		st.Dirs++
		if name != "." {
			if err := root.MkdirAll(name, 0o700); err != nil {
				return err
			}
		}
	case tar.TypeReg:
		st.Files++
		if st.Bytes+h.Size > limit {
			return fmt.Errorf("%w (%d bytes)", ErrTooLarge, limit)
		}
		if err := root.MkdirAll(path.Dir(name), 0o700); err != nil {
			return err
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		n, err := io.Copy(f, io.LimitReader(tr, h.Size))
		st.Bytes += n
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		st.Links++
		if err := root.MkdirAll(path.Dir(name), 0o700); err != nil {
			return err
		}
		// The link's target is the tenant's to choose: it is stored as it
		// is, and os.Root never follows it out of the directory.
		_ = root.Remove(name)
		return root.Symlink(h.Linkname, name)
	default:
		return fmt.Errorf("entry type %q is not unpacked: only directories, regular files and symbolic links are", h.Typeflag)
	}
	if err := root.Chmod(name, mode); err != nil {
		return err
	}
	// Owners as they were, where this process may set them (as root);
	// elsewhere the files are its own, which is what unprivileged
	// unpacking gives.
	if err := root.Lchown(name, h.Uid, h.Gid); err != nil && !errors.Is(err, syscall.EPERM) {
		return err
	}
	return root.Chtimes(name, h.ModTime, h.ModTime)
}

// cleanName is a tar entry's name relative to the directory unpacked
// into, or an error for one that is absolute or climbs out of it.
func cleanName(name string) (string, error) {
	clean := path.Clean(strings.TrimSuffix(name, "/"))
	if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("entry %q is outside the volume: refused", name)
	}
	return clean, nil
}
