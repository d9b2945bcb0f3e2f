package egress

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRealClient runs the tests in upstream_test.go (build tag
// egressupstream), which drive Proxy with kube-apiserver's own egress
// selector: its config reader and validation, and the HTTPConnect dialer
// it builds. That package imports modules go.mod does not list (go.sum
// has their hashes), and this package must not change go.mod, so the
// tests run in a child `go test` with a copy of go.mod (-modfile) that
// go may complete (-mod=mod). Under -race the child runs with -race too.
func TestRealClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kube-apiserver's egress selector in a child go test")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build kube-apiserver's egress selector: %v", err)
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		t.Fatalf("finding go.mod: %q, %v", out, err)
	}
	dir := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(gomod), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"test", "-count=1", "-tags=egressupstream", "-mod=mod", "-modfile=" + filepath.Join(dir, "go.mod"),
		"-run=^TestUpstream", "-v"}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(t.Context(), goBin, append(args, ".")...)
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	// The child's own results, for -v.
	t.Logf("go %s:\n%s", strings.Join(args, " "), out)
	if !strings.Contains(string(out), "--- PASS: TestUpstreamClient ") {
		t.Errorf("the child ran no TestUpstreamClient:\n%s", out)
	}
}
