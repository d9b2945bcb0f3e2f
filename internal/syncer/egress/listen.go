package egress

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
)

// ListenUnix listens on the Unix socket path for Proxy. A socket file
// already at path, left by an earlier run, is removed first; any other
// file there is an error, never removed. The socket gets mode 0600:
// kube-apiserver and nest-syncer run as the same user in the control-plane
// pod, and no one else may open tunnels. Until the chmod the socket has
// the mode the umask gives, so path should be in a directory only that
// user can enter. Closing the listener removes the socket file.
func ListenUnix(path string) (net.Listener, error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() != fs.ModeSocket:
		return nil, fmt.Errorf("egress socket %s: a %s is there, not a socket", path, fi.Mode().Type())
	case err == nil:
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("egress socket %s: removing the stale socket: %w", path, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("egress socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("egress socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("egress socket %s: %w", path, err)
	}
	return l, nil
}
