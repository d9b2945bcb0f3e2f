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
	// Changed counts the files that grew or shrank while Pack read them.
	Changed int `json:"changed,omitempty"`
}

// Pack writes the tree under dir to w as a tar stream (PAX format), names
// relative to dir, dir itself as ".". It reads through an os.Root of dir,
// so a symbolic link inside it is stored as a link and never followed.
//
// The tree may be in use: an entry that goes while it is walked is left
// out, and a regular file is opened before its header is written and
// stored at the size it had then, so one that grows is cut there and one
// that shrinks is padded with zeros (both counted in Stats.Changed), as a
// crash at that moment would leave it. A file is opened without blocking
// and stored only if it is still a regular file once open, so a file
// swapped for a pipe never holds the copy up.
func Pack(dir string, w io.Writer) (Stats, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Stats{}, err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	var st Stats
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		info, err := root.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := root.Readlink(name)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			st.Links++
			return writeHeader(tw, name, info, link)
		case info.IsDir():
			st.Dirs++
			return writeHeader(tw, name, info, "")
		case info.Mode().IsRegular():
			return packFile(root, tw, name, &st)
		default:
			st.Omitted++
			return nil
		}
	})
	if err != nil {
		return st, fmt.Errorf("pack %s: %w", dir, err)
	}
	return st, tw.Close()
}

// packFile stores the regular file name as Pack says: opened first, and
// stored at the size the open file had.
func packFile(root *os.Root, tw *tar.Writer, name string, st *Stats) error {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		st.Omitted++
		return nil
	}
	if err := writeHeader(tw, name, info, ""); err != nil {
		return err
	}
	n, err := io.CopyN(tw, f, info.Size())
	if err != nil && err != io.EOF {
		return err
	}
	if n < info.Size() {
		// It shrank: the header said more, so zeros make up the rest.
		if _, err := io.CopyN(tw, zeros{}, info.Size()-n); err != nil {
			return err
		}
		st.Changed++
	} else if more, _ := f.Read(make([]byte, 1)); more > 0 {
		st.Changed++
	}
	st.Files++
	st.Bytes += info.Size()
	return nil
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// writeHeader writes the tar header of name, described by info.
func writeHeader(tw *tar.Writer, name string, info fs.FileInfo, link string) error {
	h, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	h.Name, h.Format = name, tar.FormatPAX
	if info.IsDir() {
		h.Name += "/"
	}
	// Owners by number only: the names of this container's users mean
	// nothing where it is unpacked.
	h.Uname, h.Gname = "", ""
	return tw.WriteHeader(h)
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
	// The tar header's Unix mode bits as Go's: setuid, setgid and sticky
	// are high bits of fs.FileMode, not 0o7000.
	mode := h.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
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
		// is, and os.Root never follows it out of the directory. Its own
		// owner comes back; its time does not (os.Root sets none on a
		// link).
		_ = root.Remove(name)
		if err := root.Symlink(h.Linkname, name); err != nil {
			return err
		}
		return lchown(root, name, h)
	default:
		return fmt.Errorf("entry type %q is not unpacked: only directories, regular files and symbolic links are", h.Typeflag)
	}
	// Owner first: a change of owner clears setuid and setgid, which the
	// mode then sets again.
	if err := lchown(root, name, h); err != nil {
		return err
	}
	if err := root.Chmod(name, mode); err != nil {
		return err
	}
	return root.Chtimes(name, h.ModTime, h.ModTime)
}

// lchown gives name the owner h says, where this process may set it (as
// root); elsewhere the files are its own, which is what unprivileged
// unpacking gives.
func lchown(root *os.Root, name string, h *tar.Header) error {
	if err := root.Lchown(name, h.Uid, h.Gid); err != nil && !errors.Is(err, syscall.EPERM) {
		return err
	}
	return nil
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
