package egress

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestListenUnix(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "egress.sock")

	// A stale socket, as a crashed run leaves it: bound, never unlinked.
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", fi.Mode())
	}
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dialling the new socket: %v", err)
	}
	c.Close()
	l.Close()
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket file after Close: %v, want it gone", err)
	}

	// Anything but a socket is left alone.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := ListenUnix(file); err == nil {
		l.Close()
		t.Error("ListenUnix over a regular file succeeded")
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep" {
		t.Errorf("the regular file was changed: %q, %v", b, err)
	}
	if l, err := ListenUnix(filepath.Join(dir, "missing", "egress.sock")); err == nil {
		l.Close()
		t.Error("ListenUnix in a missing directory succeeded")
	}
}
