package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nestdev/nest/test/e2e/framework"
)

var nodesReadyLine = regexp.MustCompile(`wait for nodes Ready\s+done at\s+([0-9.]+)s`)

// BenchmarkDevClusterUpDown starts and stops a two-node local host cluster
// b.N times and reports: seconds until the nodes are Ready, seconds until `up`
// returns (DNS answering), seconds for `down`, and the resident memory of each
// component while the cluster idles. Run it with `make bench`.
func BenchmarkDevClusterUpDown(b *testing.B) {
	framework.RequireRoot(b)
	ctx := context.Background()
	stateDir := filepath.Join(os.TempDir(), fmt.Sprintf("nest-bench-%d", os.Getpid()))
	var nodesReady, upTotal, downTotal time.Duration
	rss := map[string]float64{}
	for i := 0; i < b.N; i++ {
		start := time.Now()
		out, err := framework.Run(ctx, b, "nest", "dev", "up", "--nodes", "2", "--state-dir", stateDir)
		if err != nil {
			b.Fatalf("up: %v\n%s", err, out)
		}
		upTotal += time.Since(start)
		m := nodesReadyLine.FindStringSubmatch(out)
		if m == nil {
			b.Fatalf("no nodes-Ready line in:\n%s", out)
		}
		secs, _ := strconv.ParseFloat(m[1], 64)
		nodesReady += time.Duration(secs * float64(time.Second))
		for name, mb := range componentRSS(b, stateDir) {
			rss[name] += mb
		}
		start = time.Now()
		if out, err := framework.Run(ctx, b, "nest", "dev", "down", "--state-dir", stateDir); err != nil {
			b.Fatalf("down: %v\n%s", err, out)
		}
		downTotal += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(nodesReady.Seconds()/n, "s-to-nodes-ready")
	b.ReportMetric(upTotal.Seconds()/n, "s-up")
	b.ReportMetric(downTotal.Seconds()/n, "s-down")
	for name, mb := range rss {
		b.ReportMetric(mb/n, "MB-rss-"+name)
	}
}

// componentRSS reads VmRSS of every recorded process, in MB, keyed by component
// (node-specific processes are named by component only, e.g. "kubelet@nest-worker").
func componentRSS(b *testing.B, stateDir string) map[string]float64 {
	out := map[string]float64{}
	for name, p := range recordedPIDs(b, stateDir) {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.PID))
		if err != nil {
			b.Fatalf("read status of %s: %v", name, err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if kb, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), 64)
				if node, comp, found := strings.Cut(name, "."); found {
					name = comp + "@" + node
				}
				out[name] = v / 1024
			}
		}
	}
	return out
}
