package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nestdev/nest/test/e2e/framework"
)

// BenchmarkSnapshotVolumes measures, on a local host cluster, a sealed
// `nest snapshot create --include-volumes` of a tenant with
// NEST_BENCH_OBJECTS (default 1,000) ConfigMaps and a StatefulSet that
// holds NEST_BENCH_VOLUME_MIB (default 100) MiB of random bytes in its
// volume, and its `nest restore` after the tenant is deleted, checking the
// objects and the volume come back the same: seconds for each, and the
// snapshot's size. Run it with `make bench-snapshot`.
func BenchmarkSnapshotVolumes(b *testing.B) {
	framework.RequireRoot(b)
	ctx := context.Background()
	mib, objects := benchCount(b, "NEST_BENCH_VOLUME_MIB", 100), benchCount(b, "NEST_BENCH_OBJECTS", 1000)
	stateDir := startBenchCluster(b, ctx, "snapshot")
	_, _, nest := framework.NestOn(b, ctx, stateDir)
	tn := &framework.Tenant{Name: "bench", Dir: b.TempDir()}
	if out, err := nest("create", tn.Name, "--wait", "--timeout", "4m"); err != nil {
		b.Fatalf("create: %v\n%s", err, out)
	}
	tn.Load(b, nest)
	tn.Kubectl(b, ctx, "create", "namespace", "app")
	var manifest strings.Builder
	for i := range objects {
		fmt.Fprintf(&manifest, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%d, namespace: app}\ndata: {i: \"%d\"}\n", i, i)
	}
	tn.Kubectl(b, ctx, "apply", "--server-side", "-f", writeFile(b, tn, "objects.yaml", manifest.String()))
	tn.Kubectl(b, ctx, "apply", "-f", writeFile(b, tn, "db.yaml", statefulSetWithData(mib<<20)))
	tn.Kubectl(b, ctx, "-n", "app", "rollout", "status", "statefulset/db", "--timeout=5m")
	before := volumeListing(b, ctx, tn, mib<<20)
	dir := b.TempDir()
	id := newAgeIdentity(b, dir, "id")
	var snapshotTime, restoreTime time.Duration
	var size int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		path := filepath.Join(dir, "bench-"+strconv.Itoa(i)+".snapshot")
		start := time.Now()
		if out, err := nest("snapshot", "create", tn.Name, "--to", "file://"+path, "--recipient", id.Recipient().String(), "--include-volumes"); err != nil {
			b.Fatalf("snapshot: %v\n%s", err, out)
		}
		snapshotTime += time.Since(start)
		info, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		size = info.Size()
		if out, err := nest("delete", tn.Name, "--wait", "--timeout", "3m"); err != nil {
			b.Fatalf("delete: %v\n%s", err, out)
		}
		start = time.Now()
		out, err := nest("restore", tn.Name, "--from", "file://"+path, "--identity", filepath.Join(dir, "id"))
		if err != nil {
			b.Fatalf("restore: %v\n%s", err, out)
		}
		restoreTime += time.Since(start)
		b.Logf("restore of %d MiB:\n%s", mib, out)
		tn.Load(b, nest)
		tn.Kubectl(b, ctx, "-n", "app", "rollout", "status", "statefulset/db", "--timeout=5m")
		if after := volumeListing(b, ctx, tn, mib<<20); after != before {
			b.Fatalf("the volume differs after the restore:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		if got := strings.Count(tn.Kubectl(b, ctx, "-n", "app", "get", "configmaps", "-o", "name"), "configmap/cm-"); got != objects {
			b.Fatalf("%d ConfigMaps after the restore, want %d", got, objects)
		}
		os.Remove(path)
	}
	b.StopTimer()
	b.ReportMetric(snapshotTime.Seconds()/float64(b.N), "snapshot-s")
	b.ReportMetric(restoreTime.Seconds()/float64(b.N), "restore-s")
	b.ReportMetric(float64(size)/(1<<20), "snapshot-MiB")
	b.ReportMetric(float64(mib), "volume-MiB")
	b.ReportMetric(float64(objects), "objects")
}

// benchCount is the positive number the environment variable name holds,
// or def when it is unset: the size knobs of the benchmarks run by hand.
func benchCount(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s %q: want a positive number", name, v)
	}
	return n
}
