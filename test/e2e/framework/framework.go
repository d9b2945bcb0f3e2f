// Package framework holds the helpers Nest's end-to-end tests share: finding and
// running the nest and kubectl binaries, requiring root, starting a local host
// cluster with Nest, and reaching virtual clusters as their tenants do.
package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// BinDir is where `make build` put the binaries: $NEST_BIN_DIR, else _output/bin
// at the repository root.
func BinDir() string {
	if d := os.Getenv("NEST_BIN_DIR"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "_output", "bin")
}

// RequireRoot fails the test when not run as root: the local host cluster
// creates network namespaces, cgroups and mounts. It fails rather than skips, so
// a run without root never looks like a pass.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("end-to-end tests need root (they start a real local host cluster); run `sudo make e2e`")
	}
}

// Run runs a binary from BinDir with args and returns its combined output.
func Run(ctx context.Context, t testing.TB, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(BinDir(), name), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Kubectl runs our kubectl build with kubeconfig and returns stdout; stderr is
// part of the error.
func Kubectl(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	bin := filepath.Join(BinDir(), "kube")
	cmd := exec.CommandContext(ctx, bin, append([]string{"kubectl", "--kubeconfig", kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// LastLines is the last n lines of s, for an error that quotes a log.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
