package conformance

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/version"
	"github.com/nestdev/nest/test/e2e/framework"
)

// run is what one conformance run selects and where it writes.
type run struct {
	// focus and skip are ginkgo regular expressions over spec names.
	focus, skip string
	// want is the number of specs the run must execute; 0 for any number
	// above zero.
	want int
	// procs is the number of parallel ginkgo processes ([Serial] specs run
	// alone at the end whatever it is).
	procs int
	// reportDir receives junit.xml, summary.txt and the suite's log.
	reportDir string
	// version is the tenant's Kubernetes version when the suite runs;
	// upgradeFrom, when set, the version it is made with and upgraded
	// from in place first.
	version, upgradeFrom string
}

// runFromEnv reads the run from NEST_CONFORMANCE_FOCUS and _SKIP (the whole
// suite when FOCUS is "full"), _PROCS, _REPORT_DIR, _VERSION (the tenant's
// Kubernetes version, default the newest supported) and _UPGRADE_FROM (a
// version the tenant is made with and upgraded from to _VERSION before the
// suite runs; "none" for no upgrade). Without a focus it runs the smoke
// subset in smoke.txt, and every spec there must run; the smoke run's
// tenant is upgraded from the oldest supported version unless
// _UPGRADE_FROM says otherwise, so make test checks an upgraded tenant.
func runFromEnv(t *testing.T) run {
	r := run{focus: os.Getenv("NEST_CONFORMANCE_FOCUS"), skip: os.Getenv("NEST_CONFORMANCE_SKIP"), procs: 4,
		reportDir: os.Getenv("NEST_CONFORMANCE_REPORT_DIR"),
		version:   cmp.Or(os.Getenv("NEST_CONFORMANCE_VERSION"), version.Newest()), upgradeFrom: os.Getenv("NEST_CONFORMANCE_UPGRADE_FROM")}
	switch r.focus {
	case "":
		names, err := smokeSpecs("smoke.txt")
		if err != nil {
			t.Fatal(err)
		}
		r.focus, r.want = focusOf(names), len(names)
		r.upgradeFrom = cmp.Or(r.upgradeFrom, version.Supported[0])
	case "full":
		r.focus = `\[Conformance\]`
	}
	if r.upgradeFrom == "none" || r.upgradeFrom == r.version {
		r.upgradeFrom = ""
	}
	if err := version.CheckSupported(r.version); err != nil {
		t.Fatalf("NEST_CONFORMANCE_VERSION: %v", err)
	}
	if r.upgradeFrom != "" {
		if err := version.CheckSupported(r.upgradeFrom); err != nil {
			t.Fatalf("NEST_CONFORMANCE_UPGRADE_FROM: %v", err)
		}
		if err := version.CheckUpgrade(r.upgradeFrom, r.version); err != nil {
			t.Fatalf("NEST_CONFORMANCE_UPGRADE_FROM=%s to NEST_CONFORMANCE_VERSION=%s: %v", r.upgradeFrom, r.version, err)
		}
	}
	if r.skip == "" {
		r.skip = `\[Disruptive\]`
	}
	if p := os.Getenv("NEST_CONFORMANCE_PROCS"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			t.Fatalf("NEST_CONFORMANCE_PROCS=%q: want a positive number of ginkgo processes", p)
		}
		r.procs = n
	}
	if r.reportDir == "" {
		r.reportDir = filepath.Join(framework.BinDir(), "..", "conformance")
	}
	return r
}

// smokeSpecs reads spec names, one per line; # starts a comment.
func smokeSpecs(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			names = append(names, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s names no spec", path)
	}
	return names, nil
}

// focusOf is a ginkgo focus matching exactly the named specs. Ginkgo
// matches it against texts in which the name may follow other words, so the
// start is a word boundary rather than ^.
func focusOf(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return "(^| )(" + strings.Join(quoted, "|") + ")$"
}

// TestConformance runs the selected conformance specs against a tenant of a
// fresh local host cluster and fails unless every one of them passed.
func TestConformance(t *testing.T) {
	framework.RequireRoot(t)
	r := runFromEnv(t)
	// The default cluster: conformance specs call Services at the
	// spec.clusterIP they read, which the host routes only where the
	// tenant's Service range is the host's (see docs/dedicated-nodes.md,
	// "A host whose Service range is not the tenant's").
	cluster := framework.LeaseDefaultCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Hour)
	defer cancel()
	e2e := filepath.Join(framework.BinDir(), "e2e.test")
	checkImageNames(t, ctx, e2e)
	stateDir := framework.StartHostCluster(t, ctx, cluster, "--with-nest")
	if err := os.MkdirAll(r.reportDir, 0o755); err != nil {
		t.Fatal(err)
	}
	importImages(t, ctx, stateDir, r.reportDir)
	_, _, nest := framework.NestOn(t, ctx, stateDir)
	tenant := &framework.Tenant{Name: "conformance", Dir: t.TempDir()}
	// Containers keep the limits they state (none for most specs): the
	// resize specs read unlimited cgroups, and default limits on hundreds of
	// parallel pods would fill a quota on limits. Two virtual nodes, as the
	// suite asks for at least two schedulable nodes. 3 CPUs: each virtual
	// node's 1.5 must fit a host node (2 CPUs, some taken), or a pod the
	// tenant's scheduler places by it waits on the host for ever, as the
	// filler pods of SchedulerPredicates' resource-limits spec (70% of a
	// node each) did with 8. A disk on each virtual node, for the specs
	// that keep state in hostPath volumes; their Job pods also ask for
	// privileged (for SELinux hosts), which the virtual node confines.
	if out, err := nest("create", "conformance", "--kubernetes-version", cmp.Or(r.upgradeFrom, r.version), "--cpu", "3", "--memory", "16Gi", "--pods", "250", "--virtual-nodes", "2",
		"--container-limits", "none", "--node-disk", "1Gi", "--privileged-containers", "confine",
		// Storage specs claim 10Gi at a time (the local host cluster's
		// provisioner allocates none of it).
		"--storage", "500Gi", "--storage-claims", "100", "--wait"); err != nil {
		t.Fatalf("create the tenant: %v\n%s", err, out)
	}
	tenant.Load(t, nest)
	tenant.WaitDefaultServiceAccount(t, ctx)
	if r.upgradeFrom != "" {
		start := time.Now()
		if out, err := nest("upgrade", "conformance", "--version", r.version, "--wait", "--timeout", "10m"); err != nil {
			t.Fatalf("upgrade the tenant from %s to %s: %v\n%s", r.upgradeFrom, r.version, err, out)
		}
		t.Logf("tenant upgraded in place from %s to %s in %s", r.upgradeFrom, r.version, time.Since(start).Round(100*time.Millisecond))
	}
	start := time.Now()
	runErr := runSuite(ctx, r, e2e, tenant.Kubeconfig)
	s, err := summarize(filepath.Join(r.reportDir, "junit.xml"), time.Since(start), r.procs)
	if err != nil {
		t.Fatalf("read the report (suite: %v): %v", runErr, err)
	}
	// The suite is built from the k8s/ module, the host's version.
	report := fmt.Sprintf("conformance suite %s against tenant %s at Kubernetes %s%s\n%s", version.Kubernetes, tenant.Name, r.version, upgradedNote(r), s)
	if err := os.WriteFile(filepath.Join(r.reportDir, "summary.txt"), []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(report)
	if s.ran() == 0 || (r.want > 0 && s.ran() != r.want) {
		t.Errorf("ran %d specs, want %d: a spec named in smoke.txt is missing from the suite", s.ran(), r.want)
	}
	if len(s.Failed) > 0 || runErr != nil {
		t.Errorf("%d of %d specs failed (suite: %v); report in %s", len(s.Failed), s.ran(), runErr, r.reportDir)
	}
}

// upgradedNote says, for a report, where the tenant was upgraded from.
func upgradedNote(r run) string {
	if r.upgradeFrom == "" {
		return ""
	}
	return " (made at " + r.upgradeFrom + ", upgraded in place)"
}

// checkImageNames fails unless the suite refers to every image Nest builds
// for it under that name: a Kubernetes upgrade that moves a tag must move
// the local build too.
func checkImageNames(t *testing.T, ctx context.Context, e2e string) {
	out, err := exec.CommandContext(ctx, e2e, "--list-images").Output()
	if err != nil {
		t.Fatalf("%s --list-images (run `make conformance-build`): %v", e2e, err)
	}
	listed := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		listed[l] = true
	}
	for _, s := range images.ConformanceSpecs(images.ConformanceOptions{}) {
		if !listed[s.Name] {
			t.Errorf("image %s is not one the suite uses; update internal/images/conformance.go", s.Name)
		}
	}
}

// importImages builds the upstream test images from local files, imports
// them into every node of the local host cluster and serves them from a
// mirror of their registry, for specs that pull with policy Always.
func importImages(t *testing.T, ctx context.Context, stateDir, reportDir string) {
	upstream, err := upstreamSource(ctx)
	if err != nil {
		t.Fatal(err)
	}
	o, err := images.ConformanceInputs(ctx, framework.BinDir(), upstream)
	if err != nil {
		t.Fatal(err)
	}
	var tarballs []string
	byName := map[string]string{}
	for _, s := range images.ConformanceSpecs(o) {
		p, err := images.Build(s, filepath.Join(framework.BinDir(), "..", "images"))
		if err != nil {
			t.Fatal(err)
		}
		tarballs = append(tarballs, p)
		byName[s.Name] = p
	}
	if err := devcluster.ImportImages(ctx, stateDir, tarballs); err != nil {
		t.Fatal(err)
	}
	serveImages(t, ctx, stateDir, reportDir, byName)
}

// serveImages pushes image tarballs, by image name, to a devcluster.Mirror
// of registry.k8s.io that lives as long as the test and logs its requests
// to mirror.log in reportDir.
func serveImages(t *testing.T, ctx context.Context, stateDir, reportDir string, tarballs map[string]string) {
	logFile, err := os.Create(filepath.Join(reportDir, "mirror.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	m, err := devcluster.StartMirror(stateDir, images.UpstreamRegistry, t.TempDir(), logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("stop the registry mirror: %v", err)
		}
	})
	for ref, p := range tarballs {
		img, err := tarball.ImageFromPath(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Push(ctx, ref, img); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("registry mirror of %s at %s serves %d images", m.Registry, m.Addr, len(tarballs))
}

// upstreamSource is the directory of the k8s.io/kubernetes module the k8s/
// module builds from. go test runs in the package's directory, so k8s/ is
// two levels up (runtime.Caller gives no path under -trimpath).
func upstreamSource(ctx context.Context) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	cmd.Dir = filepath.Join("..", "..", "k8s")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("find the k8s.io/kubernetes source (go list -m in k8s/): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// runSuite runs e2e.test under ginkgo against kubeconfig, with a kubectl of
// the same version, writing junit.xml and suite.log into the report dir.
func runSuite(ctx context.Context, r run, e2e, kubeconfig string) error {
	kubectl := filepath.Join(r.reportDir, "kubectl")
	os.Remove(kubectl)
	// The kube binary runs the component its name says.
	if err := os.Symlink(filepath.Join(framework.BinDir(), "kube"), kubectl); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(r.reportDir, "suite.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	args := []string{"--procs=" + strconv.Itoa(r.procs), "--timeout=3h", "--no-color", "--poll-progress-after=5m",
		"--output-dir=" + r.reportDir, "--junit-report=junit.xml", "--focus=" + r.focus, "--skip=" + r.skip,
		e2e, "--", "--kubeconfig=" + kubeconfig, "--provider=skeleton", "--kubectl-path=" + kubectl}
	cmd := exec.CommandContext(ctx, filepath.Join(framework.BinDir(), "ginkgo"), args...)
	cmd.Stdout = io.MultiWriter(log, os.Stdout)
	cmd.Stderr = cmd.Stdout
	return cmd.Run()
}
