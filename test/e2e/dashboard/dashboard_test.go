// Package dashboard drives the Nest dashboard in headless Chromium (Debian's
// chromium package, through chromedp) against a real local host cluster with
// Nest installed: create, watch, download, resize and delete virtual clusters
// as a platform team would. Screenshots land in _output/artifacts/dashboard.
package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/snapshot"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// chromiumPath is Debian's chromium, installed by `make deps`.
const chromiumPath = "/usr/bin/chromium"

// env is what every case shares: the host cluster, the dashboard's URL and
// the browser allocator. Each case starts its own browser (a background tab
// of a shared one stalls: headless Chromium does not render it) and makes
// its own virtual cluster.
type env struct {
	ctx            context.Context
	host           client.Client
	hostKubeconfig string
	nest           framework.Nest
	url            string
	dashboardPID   int
	allocator      context.Context
	artifacts      string
}

func TestDashboard(t *testing.T) {
	framework.RequireRoot(t)
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s: %v: install Debian's chromium with `make deps`", chromiumPath, err)
	}
	cluster := framework.LeaseCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	host, hostKubeconfig, nest := framework.StartNest(t, ctx, cluster)
	e := &env{ctx: ctx, host: host, hostKubeconfig: hostKubeconfig, nest: nest, artifacts: artifactsDir(t)}
	e.url, e.dashboardPID = startDashboard(t, ctx, hostKubeconfig)
	e.allocator = browserAllocator(t, ctx)

	// The cases run in parallel, each with its own browser and cluster.
	t.Run("cases", func(t *testing.T) {
		for _, c := range []struct {
			name string
			run  func(*testing.T)
		}{
			{"creates-a-cluster-from-the-form-sees-it-ready-without-reloading-and-uses-its-kubeconfig", e.createFromTheForm},
			{"shows-bad-input-next-to-the-field-from-the-page-and-from-the-api-server", e.badInput},
			{"changes-the-share-and-the-virtual-node-follows", e.changeShare},
			{"deletes-after-typed-confirmation-and-the-row-disappears", e.deleteCluster},
			{"takes-a-snapshot-now-and-lists-it-from-the-registry", e.snapshotNow},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.run(t)
			})
		}
	})
	t.Logf("dashboard server memory after the cases: VmRSS %s, VmHWM %s", procStatus(t, e.dashboardPID, "VmRSS"), procStatus(t, e.dashboardPID, "VmHWM"))
}

func artifactsDir(t *testing.T) string {
	dir := os.Getenv("NEST_ARTIFACTS_DIR")
	if dir == "" {
		dir = filepath.Join(framework.BinDir(), "..", "artifacts")
	}
	dir = filepath.Join(dir, "dashboard")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startDashboard runs `nest dashboard` on a free loopback port as the host
// admin and returns its URL and PID; it is stopped when the test ends.
func startDashboard(t *testing.T, ctx context.Context, kubeconfig string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(framework.BinDir(), "nest"), "dashboard", "--address", "127.0.0.1:0", "--kubeconfig", kubeconfig)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(artifactsDir(t), "dashboard.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("nest dashboard did not stop within 10s of SIGTERM")
		}
		logFile.Close()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-lines:
		m := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`).FindString(line)
		if m == "" {
			t.Fatalf("nest dashboard printed %q, want its URL", line)
		}
		return strings.TrimSuffix(m, "/"), cmd.Process.Pid
	case <-time.After(30 * time.Second):
		t.Fatal("nest dashboard printed no URL within 30s")
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	return "", 0
}

// browserAllocator runs headless Chromium with the flags that keep it off
// the network: it talks only to the dashboard on loopback.
func browserAllocator(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.WindowSize(1366, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	actx, cancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancel)
	return actx
}

// tab starts a browser of its own for one case and returns its one tab.
// chromedp gives each browser a fresh temporary profile.
func (e *env) tab(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(e.allocator)
	t.Cleanup(cancel)
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// run runs browser actions and fails the case, with a screenshot, on error.
func (e *env) run(t *testing.T, tab context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 4*time.Minute)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		e.screenshot(t, tab, "failed-"+sanitize(t.Name()))
		t.Fatalf("%s: %v", what, err)
	}
}

func (e *env) screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	var png []byte
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(e.artifacts, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
	}
}

func sanitize(s string) string {
	return regexp.MustCompile(`[^a-zA-Z0-9-]+`).ReplaceAllString(s, "_")
}

// markDocument tags the current document; stillSameDocument checks the tag,
// so a step shows it happened without the page reloading.
func markDocument() chromedp.Action {
	return chromedp.Evaluate(`window.nestNoReload = true`, nil)
}

// waitForNewDocument waits until the document markDocument tagged has been
// replaced and the new one has loaded. chromedp.Poll cannot be used: it
// fails when the page navigates under it.
func waitForNewDocument(timeout time.Duration) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var loaded bool
			// An evaluation error means the page is between documents.
			err := chromedp.Evaluate(`window.nestNoReload !== true && document.readyState === "complete"`, &loaded).Do(ctx)
			return err == nil && loaded, nil
		})
	})
}

// liveText reads the text of the element sel names in one evaluation in the
// page. chromedp.Text cannot read elements the live stream replaces: it
// finds the node, then reads it in a second call, and when htmx swaps the
// fragment in between, it reads the detached node, whose text it reports as
// "" (or it fails: the node id is gone). One evaluation runs between two of
// the page's tasks, so it sees the fragment before a swap or after it.
func liveText(sel string, text *string) chromedp.Action {
	quoted, _ := json.Marshal(sel) // a string always marshals
	return chromedp.Evaluate(fmt.Sprintf(`(() => {
		const el = document.querySelector(%[1]s);
		if (!el) throw new Error("no element " + %[1]s);
		return el.innerText;
	})()`, quoted), text)
}

func (e *env) stillSameDocument(t *testing.T, tab context.Context) {
	t.Helper()
	var same bool
	e.run(t, tab, "read the document tag", chromedp.Evaluate(`window.nestNoReload === true`, &same))
	if !same {
		t.Error("the page reloaded: the change should have arrived live")
	}
}

func (e *env) createFromTheForm(t *testing.T) {
	tab := e.tab(t)
	e.run(t, tab, "fill the create form",
		chromedp.Navigate(e.url+"/new"),
		chromedp.WaitVisible("#create-form", chromedp.ByQuery),
		chromedp.SendKeys("#name", "formed", chromedp.ByQuery),
		chromedp.SendKeys("#cpu", "2", chromedp.ByQuery),
		chromedp.SendKeys("#memory", "3Gi", chromedp.ByQuery),
		chromedp.SendKeys("#pods", "30", chromedp.ByQuery),
	)
	e.screenshot(t, tab, "create-form")
	submitted := time.Now()
	e.run(t, tab, "submit the form",
		chromedp.Click(`#create-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#phase", chromedp.ByQuery),
		markDocument(),
	)
	var location, firstPhase string
	e.run(t, tab, "read the new page", chromedp.Location(&location), liveText("#phase", &firstPhase))
	if !strings.HasSuffix(location, "/clusters/vc-formed/formed") {
		t.Fatalf("after submit the browser is at %s, want the cluster's page", location)
	}
	if firstPhase == string(nestv1.PhaseCompleted) {
		t.Errorf("the page showed Completed at once, so it never showed progress")
	}
	e.screenshot(t, tab, "cluster-progress")
	e.run(t, tab, "wait for Ready on the page", chromedp.WaitVisible("#ready.ready-true", chromedp.ByQuery))
	t.Logf("figure: submit to Ready shown on the page: %.1fs (first phase shown: %s)", time.Since(submitted).Seconds(), firstPhase)
	e.stillSameDocument(t, tab)
	e.screenshot(t, tab, "cluster-ready")

	kubeconfig := e.download(t, tab, "#download-kubeconfig")
	out, err := framework.Kubectl(e.ctx, kubeconfig, "get", "nodes", "-o", "name")
	if err != nil || !strings.Contains(out, "node/") {
		t.Fatalf("kubectl with the downloaded kubeconfig: %q %v", out, err)
	}
	if out, err := framework.Kubectl(e.ctx, kubeconfig, "auth", "can-i", "create", "pods"); err != nil || strings.TrimSpace(out) != "yes" {
		t.Errorf("the downloaded kubeconfig is not the tenant admin's: can-i create pods = %q %v", out, err)
	}
	e.pageWeight(t, tab)
}

// download clicks a link that downloads a file and returns the file's path.
func (e *env) download(t *testing.T, tab context.Context, link string) string {
	t.Helper()
	dir := t.TempDir()
	done := make(chan string, 1)
	chromedp.ListenTarget(tab, func(ev any) {
		if p, ok := ev.(*browser.EventDownloadProgress); ok && p.State == browser.DownloadProgressStateCompleted {
			select {
			case done <- p.GUID:
			default:
			}
		}
	})
	e.run(t, tab, "download",
		browser.SetDownloadBehavior(browser.SetDownloadBehaviorBehaviorAllowAndName).WithDownloadPath(dir).WithEventsEnabled(true),
		chromedp.Click(link, chromedp.ByQuery),
	)
	select {
	case guid := <-done:
		return filepath.Join(dir, guid)
	case <-time.After(30 * time.Second):
		t.Fatal("the download did not complete within 30s")
	}
	return ""
}

// pageWeight logs what the clusters page transferred on a cold load.
func (e *env) pageWeight(t *testing.T, tab context.Context) {
	var bytes float64
	e.run(t, tab, "measure the clusters page",
		chromedp.Navigate(e.url+"/"),
		chromedp.WaitVisible("#cluster-rows", chromedp.ByQuery),
		chromedp.Evaluate(`performance.getEntriesByType("navigation").concat(performance.getEntriesByType("resource"))
			.filter(e => !e.name.includes("/live/")).reduce((n, e) => n + e.decodedBodySize, 0)`, &bytes),
	)
	e.screenshot(t, tab, "clusters")
	t.Logf("figure: clusters page weight (HTML, CSS, scripts; decoded): %.0f bytes", bytes)
}

func (e *env) badInput(t *testing.T) {
	tab := e.tab(t)
	var invalid bool
	e.run(t, tab, "submit a name the page refuses",
		chromedp.Navigate(e.url+"/new"),
		chromedp.WaitVisible("#create-form", chromedp.ByQuery),
		chromedp.SendKeys("#name", "Bad_Name", chromedp.ByQuery),
		chromedp.Click(`#create-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#name").validity.patternMismatch`, &invalid),
	)
	if !invalid {
		t.Error("the page let Bad_Name through its own validation")
	}
	var errText string
	e.run(t, tab, "submit an address only the API server refuses",
		chromedp.SetValue("#name", "badip", chromedp.ByQuery),
		chromedp.SendKeys("#externalIPs", "300.1.2.3", chromedp.ByQuery),
		chromedp.Click(`#create-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#externalIPs-error", chromedp.ByQuery),
		chromedp.Text("#externalIPs-error", &errText, chromedp.ByQuery),
	)
	e.screenshot(t, tab, "create-refused")
	if !strings.Contains(errText, "IPv4 or IPv6") {
		t.Errorf("next to External IPs the page says %q, want the API server's message", errText)
	}
	vc := &nestv1.VirtualCluster{}
	if err := e.host.Get(e.ctx, types.NamespacedName{Namespace: "vc-badip", Name: "badip"}, vc); !apierrors.IsNotFound(err) {
		t.Errorf("the refused cluster exists (%v)", err)
	}
	// Namespace deletion finishes asynchronously.
	testutil.Eventually(t, time.Minute, "the namespace made for the refused cluster is removed", func() error {
		if err := e.host.Get(e.ctx, types.NamespacedName{Name: "vc-badip"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace vc-badip is still there (%v)", err)
		}
		return nil
	})
}

// createWithCLI makes a Ready cluster for a case that starts from one.
func (e *env) createWithCLI(t *testing.T, name string, args ...string) *framework.Tenant {
	t.Helper()
	if out, err := e.nest(append([]string{"create", name, "--wait", "--timeout", "4m"}, args...)...); err != nil {
		t.Fatalf("nest create %s: %v\n%s", name, err, out)
	}
	tn := &framework.Tenant{Name: name, Dir: t.TempDir()}
	tn.Load(t, e.nest)
	return tn
}

func (e *env) changeShare(t *testing.T) {
	tn := e.createWithCLI(t, "resized", "--cpu", "2")
	tab := e.tab(t)
	e.run(t, tab, "change the share",
		chromedp.Navigate(e.url+"/clusters/vc-resized/resized"),
		chromedp.WaitVisible("#share-form", chromedp.ByQuery),
		chromedp.SetValue("#cpu", "3", chromedp.ByQuery),
		// The form posts and the server answers with a new page; the old
		// page also has #capacity, so wait for the old document to go.
		markDocument(),
		chromedp.Click(`#share-form button[type="submit"]`, chromedp.ByQuery),
		waitForNewDocument(30*time.Second),
		chromedp.WaitVisible("#capacity", chromedp.ByQuery),
		markDocument(),
	)
	var capacity string
	e.run(t, tab, "read the capacity", liveText("#capacity", &capacity))
	if !strings.Contains(capacity, "cpu 3") {
		t.Errorf("the page shows capacity %q, want cpu 3", capacity)
	}
	testutil.Eventually(t, 4*time.Minute, "the tenant's virtual node has cpu 3", func() error {
		out, err := tn.KubectlErr(e.ctx, "get", "nodes", "-o", "jsonpath={.items[*].status.capacity.cpu}")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "3" {
			return fmt.Errorf("capacity cpu %q", out)
		}
		return nil
	})
	e.run(t, tab, "wait for the page to show the new quota", chromedp.WaitVisible(`svg[aria-label^="cpu: "][aria-label$=" of 3 used"]`, chromedp.ByQuery))
	e.stillSameDocument(t, tab)
	e.screenshot(t, tab, "share-changed")
}

func (e *env) snapshotNow(t *testing.T) {
	e.createWithCLI(t, "backedup")
	reg, err := devcluster.RegistryAddressIn(e.ctx, e.host)
	if err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "vc-backedup", Name: "backedup"}
	vc := &nestv1.VirtualCluster{}
	if err := e.host.Get(e.ctx, key, vc); err != nil {
		t.Fatal(err)
	}
	before := vc.DeepCopy()
	// Once a year: only the request takes a snapshot here.
	vc.Spec.Snapshots = &nestv1.SnapshotSchedule{Schedule: "0 0 1 1 *", To: "oci://" + reg + "/dashboard/backedup", InsecurePlaintextKeys: true, PlainHTTP: true}
	if err := e.host.Patch(e.ctx, vc, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	// The page shows a registry it cannot reach as an error, and the test
	// waits for the list: wait for the registry first (on a loaded
	// machine its address can take a moment to answer from the host).
	repo, err := snapshot.ParseRepository(vc.Spec.Snapshots.To, true)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "the registry answering the dashboard's list", func() error {
		_, err := snapshot.List(e.ctx, repo)
		return err
	})
	tab := e.tab(t)
	e.run(t, tab, "ask for a snapshot now",
		chromedp.Navigate(e.url+"/clusters/vc-backedup/backedup"),
		chromedp.WaitVisible("#snapshot-list-empty", chromedp.ByQuery),
		markDocument(),
		chromedp.Click(`#snapshot-form button[type="submit"]`, chromedp.ByQuery),
		waitForNewDocument(30*time.Second),
		chromedp.WaitVisible("#snapshot-form", chromedp.ByQuery),
	)
	testutil.Eventually(t, 2*time.Minute, "the requested snapshot pushed", func() error {
		if err := e.host.Get(e.ctx, key, vc); err != nil {
			return err
		}
		if st := vc.Status.Snapshots; st == nil || st.LastRequest == "" || st.LastRequest != vc.Annotations[nestv1.AnnotationSnapshotRequested] {
			return fmt.Errorf("status.snapshots %+v, request %q", vc.Status.Snapshots, vc.Annotations[nestv1.AnnotationSnapshotRequested])
		}
		return nil
	})
	var list string
	e.run(t, tab, "see it listed",
		chromedp.Navigate(e.url+"/clusters/vc-backedup/backedup"),
		chromedp.WaitVisible("#snapshot-list", chromedp.ByQuery),
		chromedp.Text("#snapshot-list", &list, chromedp.ByQuery),
	)
	tag := strings.TrimPrefix(vc.Status.Snapshots.LastSnapshot.URL, "oci://"+reg+"/dashboard/backedup:")
	if !strings.Contains(list, tag) {
		t.Errorf("the snapshots card lists %q, want the snapshot %s", list, tag)
	}
	e.screenshot(t, tab, "snapshot-listed")
}

func (e *env) deleteCluster(t *testing.T) {
	e.createWithCLI(t, "doomed")
	tab := e.tab(t)
	var mismatch bool
	var location string
	e.run(t, tab, "try to delete with the wrong name",
		chromedp.Navigate(e.url+"/clusters/vc-doomed/doomed"),
		chromedp.WaitVisible("#delete-form", chromedp.ByQuery),
		chromedp.SendKeys("#confirm", "doome", chromedp.ByQuery),
		chromedp.Click(`#delete-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector("#confirm").validity.patternMismatch`, &mismatch),
		chromedp.Location(&location),
	)
	if !mismatch || !strings.HasSuffix(location, "/clusters/vc-doomed/doomed") {
		t.Fatalf("a wrong confirmation went through (mismatch=%v, at %s)", mismatch, location)
	}
	if err := e.host.Get(e.ctx, types.NamespacedName{Namespace: "vc-doomed", Name: "doomed"}, &nestv1.VirtualCluster{}); err != nil {
		t.Fatalf("the cluster is gone after a refused confirmation: %v", err)
	}
	e.run(t, tab, "delete with the typed name",
		chromedp.SetValue("#confirm", "doomed", chromedp.ByQuery),
		chromedp.Click(`#delete-form button[type="submit"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#cluster-rows", chromedp.ByQuery),
		markDocument(),
	)
	e.screenshot(t, tab, "deleting")
	e.run(t, tab, "wait for the row to disappear", chromedp.WaitNotPresent(`tr[data-cluster="vc-doomed/doomed"]`, chromedp.ByQuery))
	e.stillSameDocument(t, tab)
	err := e.host.Get(e.ctx, types.NamespacedName{Namespace: "vc-doomed", Name: "doomed"}, &nestv1.VirtualCluster{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the row is gone but the VirtualCluster is not: %v", err)
	}
}

// procStatus reads one field of /proc/PID/status, such as VmRSS.
func procStatus(t *testing.T, pid int, field string) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Errorf("read the dashboard's memory: %v", err)
		return "?"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Errorf("/proc/%d/status has no %s", pid, field)
	return "?"
}
