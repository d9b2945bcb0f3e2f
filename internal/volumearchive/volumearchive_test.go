package volumearchive

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A tree packed and unpacked elsewhere comes back: contents, modes,
// modification times, directories and symbolic links as links.
func TestPackUnpackRoundTrip(t *testing.T) {
	src := t.TempDir()
	mtime := time.Unix(1700000000, 0)
	must(t, os.MkdirAll(filepath.Join(src, "data", "deep"), 0o755))
	must(t, os.WriteFile(filepath.Join(src, "data", "deep", "blob"), bytes.Repeat([]byte{0, 1, 2, 255}, 4096), 0o640))
	must(t, os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Symlink("data/deep/blob", filepath.Join(src, "latest")))
	must(t, os.Chtimes(filepath.Join(src, "run.sh"), mtime, mtime))
	for _, d := range []string{"data/deep", "data", "."} {
		must(t, os.Chtimes(filepath.Join(src, d), mtime, mtime))
	}
	var stream bytes.Buffer
	packed, err := Pack(src, &stream)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	unpacked, err := Unpack(dst, &stream, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if packed.Files != 2 || packed.Links != 1 || unpacked.Files != 2 || unpacked.Links != 1 || unpacked.Bytes != packed.Bytes {
		t.Errorf("packed %+v, unpacked %+v", packed, unpacked)
	}
	for _, name := range []string{"data/deep/blob", "run.sh"} {
		want, _ := os.ReadFile(filepath.Join(src, name))
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs after the round trip (%v)", name, err)
		}
	}
	if info, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || info.Mode().Perm() != 0o755 || !info.ModTime().Equal(mtime) {
		t.Errorf("run.sh: %v, %v", info, err)
	}
	// Directories keep their times although their entries were written
	// after them.
	for _, d := range []string{"data/deep", "data", "."} {
		if info, err := os.Stat(filepath.Join(dst, d)); err != nil || !info.ModTime().Equal(mtime) {
			t.Errorf("directory %s: modified %v (%v), want %v", d, info.ModTime(), err, mtime)
		}
	}
	if target, err := os.Readlink(filepath.Join(dst, "latest")); err != nil || target != "data/deep/blob" {
		t.Errorf("latest links to %q (%v), want data/deep/blob", target, err)
	}
}

// A hostile stream writes nothing outside the directory: names that climb
// or are absolute are refused, and a link it made is not followed out.
func TestUnpackRefusesEscapes(t *testing.T) {
	outside := t.TempDir()
	for _, tc := range []struct {
		name    string
		entries []*tar.Header
	}{
		{"a name that climbs", []*tar.Header{{Name: "../escaped", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}}},
		{"an absolute name", []*tar.Header{{Name: filepath.Join(outside, "escaped"), Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}}},
		{"a file through a link out", []*tar.Header{
			{Name: "out", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "out/escaped", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644},
		}},
		{"a hard link", []*tar.Header{{Name: "escaped", Typeflag: tar.TypeLink, Linkname: filepath.Join(outside, "x")}}},
		{"a device", []*tar.Header{{Name: "escaped", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}},
	} {
		_, err := Unpack(t.TempDir(), bytes.NewReader(stream(t, tc.entries)), 1<<20)
		if err == nil {
			t.Errorf("%s: unpacked", tc.name)
		}
		if _, err := os.Stat(filepath.Join(outside, "escaped")); !os.IsNotExist(err) {
			t.Fatalf("%s: wrote outside the directory", tc.name)
		}
	}
}

// Contents past the limit are refused with ErrTooLarge.
func TestUnpackStopsAtItsLimit(t *testing.T) {
	data := stream(t, []*tar.Header{{Name: "a", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}, {Name: "b", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}})
	if _, err := Unpack(t.TempDir(), bytes.NewReader(data), 1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("2 bytes into a limit of 1: %v, want ErrTooLarge", err)
	}
	if _, err := Unpack(t.TempDir(), bytes.NewReader(data), 2); err != nil {
		t.Errorf("2 bytes into a limit of 2: %v", err)
	}
}

// Pack leaves out what it cannot keep (a named pipe) and counts it.
func TestPackLeavesOutPipes(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644))
	must(t, syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600))
	var out bytes.Buffer
	st, err := Pack(dir, &out)
	if err != nil || st.Omitted != 1 || st.Files != 1 {
		t.Errorf("Pack = %+v, %v; want one file and one skipped", st, err)
	}
	if strings.Contains(out.String(), "pipe") {
		t.Error("the pipe is in the stream")
	}
}

func stream(t *testing.T, entries []*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		must(t, tw.WriteHeader(h))
		if h.Size > 0 {
			_, err := tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			must(t, err)
		}
	}
	must(t, tw.Close())
	return b.Bytes()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Setuid, setgid and sticky bits, and owners, come back: the owner is set
// before the mode, whose change would otherwise clear them.
func TestSpecialModesAndOwnersComeBack(t *testing.T) {
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "tool"), []byte("#!/bin/sh\n"), 0o755))
	must(t, os.Mkdir(filepath.Join(src, "shared"), 0o755))
	must(t, os.Chmod(filepath.Join(src, "tool"), 0o755|os.ModeSetuid|os.ModeSetgid))
	must(t, os.Chmod(filepath.Join(src, "shared"), 0o777|os.ModeSticky))
	asRoot := os.Geteuid() == 0
	if asRoot {
		must(t, os.Lchown(filepath.Join(src, "tool"), 1000, 1000))
		must(t, os.Chmod(filepath.Join(src, "tool"), 0o755|os.ModeSetuid|os.ModeSetgid))
	}
	var stream bytes.Buffer
	if _, err := Pack(src, &stream); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if _, err := Unpack(dst, &stream, 1<<20); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"tool": 0o755 | os.ModeSetuid | os.ModeSetgid, "shared": 0o777 | os.ModeSticky | os.ModeDir} {
		info, err := os.Lstat(filepath.Join(dst, name))
		if err != nil || info.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", name, info.Mode(), err, want)
		}
	}
	if asRoot {
		info, _ := os.Lstat(filepath.Join(dst, "tool"))
		if st := info.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("tool owned by %d:%d, want 1000:1000", st.Uid, st.Gid)
		}
	}
}
