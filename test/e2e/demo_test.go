package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nestdev/nest/test/e2e/framework"
)

// TestDemo runs the README's main job, hack/demo.sh, against a cluster of its
// own and checks what it printed: web reached by DNS name from another pod,
// and kubectl logs and exec answering.
func TestDemo(t *testing.T) {
	framework.RequireRoot(t)
	t.Parallel()
	// Leased before the cleanup below is registered, so it is released
	// after the cluster is down.
	cluster := framework.LeaseCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	stateDir := filepath.Join(os.TempDir(), "nest-e2e-demo-"+strings.ReplaceAll(t.Name(), "/", "-"))
	t.Cleanup(func() {
		if out, err := framework.Run(context.Background(), t, "nest", append([]string{"dev", "down", "--state-dir", stateDir}, framework.ClusterFlags(cluster)...)...); err != nil {
			t.Errorf("nest dev down: %v\n%s", err, out)
		}
	})
	cmd := exec.CommandContext(ctx, mustAbs(t, "../../hack/demo.sh"))
	cmd.Env = append(append(os.Environ(), framework.ClusterEnv(cluster, stateDir)...), "BIN="+framework.BinDir(), "OUT="+t.TempDir(), "NODES=2", "KUBECONFIG=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/demo.sh: %v\n%s", err, out)
	}
	for _, want := range []string{
		`GET http://web\.default\.svc\.cluster\.local/hostname -> web-[a-z0-9]+-[a-z0-9]+`,
		`GET http://web/hostname -> web-`,
		`serving addr=:8080`,
		`exec hostname in (web-\S+) -> web-`,
		`nest-virtual-node\s+Ready\s+4\s+8Gi`,
		`snapshot oci://[0-9.]+:5000/demo/demo:latest-demo: virtual cluster vc-demo/demo`,
		`latest-demo\s+\d{4}-\d\d-\d\dT\S+Z\s+\d+\s+\d+\s+sha256:`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// TestDemoDedicated runs hack/demo-dedicated.sh (make demo-dedicated)
// against a cluster of its own and checks what it printed: the worker
// occupied by the virtual cluster, then free again, and pods on the
// dedicated node and on the virtual node reaching each other by Service
// name.
func TestDemoDedicated(t *testing.T) {
	framework.RequireRoot(t)
	t.Parallel()
	// Leased before the cleanup below is registered, so it is released
	// after the cluster is down. The default cluster: a dedicated node
	// reaches tenant Services only where the tenant's Service range is the
	// host's (see docs/dedicated-nodes.md).
	cluster := framework.LeaseDefaultCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	stateDir := filepath.Join(os.TempDir(), "nest-e2e-demo-"+strings.ReplaceAll(t.Name(), "/", "-"))
	t.Cleanup(func() {
		if out, err := framework.Run(context.Background(), t, "nest", append([]string{"dev", "down", "--state-dir", stateDir}, framework.ClusterFlags(cluster)...)...); err != nil {
			t.Errorf("nest dev down: %v\n%s", err, out)
		}
	})
	cmd := exec.CommandContext(ctx, mustAbs(t, "../../hack/demo-dedicated.sh"))
	cmd.Env = append(append(os.Environ(), framework.ClusterEnv(cluster, stateDir)...), "BIN="+framework.BinDir(), "OUT="+t.TempDir(), "KUBECONFIG=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/demo-dedicated.sh: %v\n%s", err, out)
	}
	for _, want := range []string{
		`from tools \(dedicated node\): GET http://web/hostname -> web\b`,
		`from web \(virtual node\): GET http://tools/hostname -> tools\b`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
	occupied := regexp.MustCompile(`(nest-worker2?)\s+occupied\s+vc-dedi/dedi\s+\S+\s+Tenant`).FindSubmatch(out)
	if occupied == nil {
		t.Fatalf("nest nodes never showed a worker occupied by vc-dedi/dedi:\n%s", out)
	}
	_, released, ok := strings.Cut(string(out), "release the node")
	if !ok || !regexp.MustCompile(string(occupied[1])+`\s+free\s+<none>\s+\S+\s+Host`).MatchString(released) {
		t.Errorf("after the release, nest nodes does not show %s free in the host:\n%s", occupied[1], released)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
