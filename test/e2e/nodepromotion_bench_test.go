package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/test/e2e/framework"
)

// BenchmarkNodePromotion measures, on a three-node local host cluster with
// Nest, how long node promotion takes to move a worker into a tenant
// cluster (`nest scale --nodes 1` to GlobalNode Tenant and occupied, the
// node Ready in the tenant with a signed serving certificate) and back
// (`--nodes 0` to Host and free, the node Ready in the host). Each
// iteration promotes and releases once. Run it with `make bench`.
func BenchmarkNodePromotion(b *testing.B) {
	framework.RequireRoot(b)
	ctx := context.Background()
	stateDir := startBenchClusterOf(b, ctx, "promotion", 3)
	l := devcluster.Layout{Root: stateDir}
	host := framework.HostClient(b, l.AdminKubeconfig())
	nest := func(args ...string) {
		b.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(framework.BinDir(), "nest"), append(args, "--kubeconfig", l.AdminKubeconfig())...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("nest %v: %v\n%s", args, err, out)
		}
	}
	tn := &framework.Tenant{Name: "bench", Dir: b.TempDir(), Namespace: "vc-bench"}
	nest("create", tn.Name, "--wait", "--timeout", "4m")
	worker := workerWithoutControlPlane(b, ctx, host, stateDir, tn)
	setLabel(b, ctx, host, worker, dedicatedLabel, "dedicated")
	var promote, release []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		nest("scale", tn.Name, "-n", tn.Namespace, "--nodes", "1", "--node-selector", dedicatedLabel+"=dedicated")
		waitGlobalNode(b, ctx, host, worker, 8*time.Minute, phaseIs(nestv1.NodePhaseTenant, nestv1.NodeStateOccupied))
		promote = append(promote, time.Since(start))
		start = time.Now()
		nest("scale", tn.Name, "-n", tn.Namespace, "--nodes", "0")
		waitGlobalNode(b, ctx, host, worker, 8*time.Minute, phaseIs(nestv1.NodePhaseHost, nestv1.NodeStateFree))
		release = append(release, time.Since(start))
	}
	b.ReportMetric(median(promote).Seconds(), "s-median-promote")
	b.ReportMetric(median(release).Seconds(), "s-median-release")
}

// phaseIs checks a GlobalNode's phase and state.
func phaseIs(phase nestv1.NodePhase, state nestv1.NodeState) func(*nestv1.GlobalNode) error {
	return func(gn *nestv1.GlobalNode) error {
		if gn.Status.Phase != phase || gn.Spec.State != state {
			return fmt.Errorf("phase %s state %s", gn.Status.Phase, gn.Spec.State)
		}
		return nil
	}
}
