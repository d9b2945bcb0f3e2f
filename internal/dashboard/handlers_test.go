package dashboard

import (
	"bufio"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fieldpath "k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/vcops"
	"github.com/nestdev/nest/internal/version"
)

// fixedClients is a ClientSource with one client, for handler tests.
type fixedClients struct{ c client.WithWatch }

func (f fixedClients) ClientFor(*http.Request) (client.WithWatch, error) { return f.c, nil }
func (f fixedClients) SignIn() bool                                      { return false }
func (f fixedClients) Identity(*http.Request) string                     { return "test user" }

var testNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func vcFixture(ns, name string, phase nestv1.Phase, ready metav1.ConditionStatus) *nestv1.VirtualCluster {
	vc := &nestv1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: metav1.NewTime(testNow.Add(-5 * time.Minute))},
		Spec: nestv1.VirtualClusterSpec{KubernetesVersion: "v1.36.3", PromoteResources: nestv1.PromoteResources{Resources: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("4"),
		}}},
		Status: nestv1.VirtualClusterStatus{Phase: phase, Endpoint: "https://198.51.100.11:31443"},
	}
	if ready != "" {
		vc.Status.Conditions = []metav1.Condition{{Type: nestv1.ConditionReady, Status: ready, Reason: "Test", Message: "from the test",
			LastTransitionTime: metav1.NewTime(testNow.Add(-time.Minute))}}
	}
	return vc
}

func quotaFixture(vc *nestv1.VirtualCluster, usedCPU string, pods string) *corev1.ResourceQuota {
	q := controlplane.TenantQuotaFor(vc)
	q.Status.Hard = q.Spec.Hard
	q.Status.Used = corev1.ResourceList{"requests.cpu": resource.MustParse(usedCPU), corev1.ResourcePods: resource.MustParse(pods)}
	return q
}

func newFake(objs ...client.Object) *fake.ClientBuilder {
	return fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(objs...).WithStatusSubresource(&nestv1.VirtualCluster{}).
		WithIndex(&corev1.Event{}, "involvedObject.name", func(o client.Object) []string { return []string{o.(*corev1.Event).InvolvedObject.Name} })
}

func testServer(t testing.TB, c client.WithWatch) http.Handler {
	t.Helper()
	s, err := New(Options{Clients: fixedClients{c}, Now: func() time.Time { return testNow }})
	if err != nil {
		t.Fatal(err)
	}
	return s.Handler()
}

func do(t testing.TB, h http.Handler, method, target string, form url.Values) *httptest.ResponseRecorder {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// elementText returns the text of the element with id in page, or fails.
func elementText(t *testing.T, page, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + regexp.QuoteMeta(id) + `"[^>]*>([^<]*)<`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no element with id %q in the page:\n%s", id, page)
	}
	return m[1]
}

func TestClustersListsEveryClusterWithItsUsage(t *testing.T) {
	a := vcFixture("vc-a", "a", nestv1.PhaseCompleted, metav1.ConditionTrue)
	b := vcFixture("vc-b", "b", nestv1.PhasePreparing, "")
	h := testServer(t, newFake(a, b, quotaFixture(a, "1", "3")).Build())

	w := do(t, h, "GET", "/", nil)
	if w.Code != http.StatusOK {
		t.Fatalf("GET / = %d\n%s", w.Code, w.Body)
	}
	page := w.Body.String()
	for _, want := range []string{`data-cluster="vc-a/a"`, `data-cluster="vc-b/b"`, ">Completed<", ">Preparing<", "1 / 4", "https://198.51.100.11:31443", ">5m<"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if !strings.Contains(page, `aria-label="cpu: 1 of 4 used"`) {
		t.Error("the cpu usage bar is missing or unlabelled")
	}

	w = do(t, h, "GET", "/?namespace=vc-b", nil)
	if page := w.Body.String(); strings.Contains(page, `data-cluster="vc-a/a"`) || !strings.Contains(page, `data-cluster="vc-b/b"`) {
		t.Errorf("filtered to vc-b, the page shows:\n%s", page)
	}
}

// A user the host API server refuses sees its message and status, no data.
func TestForbiddenUserSeesAnErrorNotData(t *testing.T) {
	forbid := interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: "nest.dev", Resource: "virtualclusters"}, "", errForbiddenTest)
	}, Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: "nest.dev", Resource: "virtualclusters"}, key.Name, errForbiddenTest)
	}}
	vc := vcFixture("vc-a", "secret-project", nestv1.PhaseCompleted, metav1.ConditionTrue)
	vc.Spec.Kubeconfig = base64.StdEncoding.EncodeToString([]byte("admin-credentials"))
	h := testServer(t, newFake(vc).WithInterceptorFuncs(forbid).Build())
	for _, target := range []string{"/", "/clusters/vc-a/secret-project", "/clusters/vc-a/secret-project/kubeconfig"} {
		w := do(t, h, "GET", target, nil)
		if w.Code != http.StatusForbidden {
			t.Errorf("GET %s = %d, want 403", target, w.Code)
		}
		body := w.Body.String()
		if !strings.Contains(body, "forbidden") || strings.Contains(body, "admin-credentials") || strings.Contains(body, "198.51.100.11") {
			t.Errorf("GET %s: want the refusal and no data, got:\n%s", target, body)
		}
	}
}

var errForbiddenTest = errorString("user \"mallory\" cannot list resource \"virtualclusters\"")

type errorString string

func (e errorString) Error() string { return string(e) }

func TestCreateShowsPageValidationErrorsNextToTheField(t *testing.T) {
	c := newFake().Build()
	h := testServer(t, c)
	w := do(t, h, "POST", "/new", url.Values{"name": {"team-a"}, "cpu": {"four"}, "podSecurity": {"baseline"}, "serviceType": {"NodePort"}})
	if w.Code != http.StatusUnprocessableEntity {
		t.Fatalf("POST /new = %d, want 422", w.Code)
	}
	if msg := elementText(t, w.Body.String(), "cpu-error"); !strings.Contains(msg, "positive quantity") {
		t.Errorf("cpu-error = %q", msg)
	}
	bad := do(t, h, "POST", "/new", url.Values{"name": {"team-a"}, "storage": {"lots"}, "podSecurity": {"baseline"}, "serviceType": {"NodePort"}})
	if msg := elementText(t, bad.Body.String(), "storage-error"); bad.Code != http.StatusUnprocessableEntity || !strings.Contains(msg, "such as 10Gi") {
		t.Errorf("storage lots: %d, storage-error = %q", bad.Code, msg)
	}
	if got := elementText(t, w.Body.String(), "name-error"); got != "" {
		t.Errorf("name-error = %q, want none", got)
	}
	var list nestv1.VirtualClusterList
	if err := c.List(context.Background(), &list); err != nil || len(list.Items) != 0 {
		t.Errorf("something was created: %v %v", list.Items, err)
	}
}

// The API server's own refusal comes back next to the field its cause names.
func TestCreateShowsAPIServerErrorsNextToTheField(t *testing.T) {
	invalid := interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*nestv1.VirtualCluster); ok {
			return apierrors.NewInvalid(schema.GroupKind{Group: "nest.dev", Kind: "VirtualCluster"}, obj.GetName(), fieldpath.ErrorList{
				fieldpath.Invalid(fieldpath.NewPath("spec", "externalIPs").Index(0), "300.1.2.3", "each externalIPs entry must be an IPv4 or IPv6 address"),
			})
		}
		return c.Create(ctx, obj, opts...)
	}}
	c := newFake().WithInterceptorFuncs(invalid).Build()
	w := do(t, testServer(t, c), "POST", "/new", url.Values{"name": {"team-a"}, "externalIPs": {"300.1.2.3"}, "podSecurity": {"baseline"}, "serviceType": {"NodePort"}})
	if w.Code != http.StatusUnprocessableEntity {
		t.Fatalf("POST /new = %d, want 422", w.Code)
	}
	page := w.Body.String()
	if msg := elementText(t, page, "externalIPs-error"); !strings.Contains(msg, "IPv4 or IPv6") {
		t.Errorf("externalIPs-error = %q", msg)
	}
	if !strings.Contains(page, `value="300.1.2.3"`) {
		t.Error("the form lost what the user typed")
	}
	if err := c.Get(context.Background(), types.NamespacedName{Name: "vc-team-a"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace made for the refused cluster is still there (%v)", err)
	}
}

func TestCreateMakesTheClusterAndShowsIt(t *testing.T) {
	c := newFake().Build()
	w := do(t, testServer(t, c), "POST", "/new", url.Values{"name": {"team-a"}, "cpu": {"3"}, "memory": {"6Gi"}, "pods": {"20"}, "storage": {"50Gi"},
		"podSecurity": {"restricted"}, "serviceType": {"ClusterIP"}, "externalIPs": {"198.51.100.7, 198.51.100.8"}})
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/clusters/vc-team-a/team-a" {
		t.Fatalf("POST /new = %d to %q, want 303 to the cluster's page\n%s", w.Code, w.Header().Get("Location"), w.Body)
	}
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "vc-team-a", Name: "team-a"}, vc); err != nil {
		t.Fatal(err)
	}
	r := vc.Spec.PromoteResources.Resources
	if r.Cpu().String() != "3" || r.Memory().String() != "6Gi" || r.Pods().Value() != 20 || vc.Spec.VirtualNode.PodSecurityLevel != "restricted" ||
		vc.Spec.ControlPlane.Service.Type != "ClusterIP" || strings.Join(vc.Spec.ExternalIPs, ",") != "198.51.100.7,198.51.100.8" ||
		vc.Spec.VirtualNode.Storage.Requests == nil || vc.Spec.VirtualNode.Storage.Requests.String() != "50Gi" {
		t.Errorf("spec = %+v", vc.Spec)
	}
	ns := &corev1.Namespace{}
	if err := c.Get(context.Background(), types.NamespacedName{Name: "vc-team-a"}, ns); err != nil || ns.Labels[vcops.CreatedByLabel] != vcops.CreatedByDashboard {
		t.Errorf("namespace: %v %v", ns.Labels, err)
	}
}

func TestKubeconfigDownload(t *testing.T) {
	ready := vcFixture("vc-a", "a", nestv1.PhaseCompleted, metav1.ConditionTrue)
	ready.Spec.Kubeconfig = base64.StdEncoding.EncodeToString([]byte("apiVersion: v1\nkind: Config\n"))
	pending := vcFixture("vc-b", "b", nestv1.PhasePreparing, "")
	h := testServer(t, newFake(ready, pending).Build())

	w := do(t, h, "GET", "/clusters/vc-a/a/kubeconfig", nil)
	if w.Code != http.StatusOK || w.Body.String() != "apiVersion: v1\nkind: Config\n" {
		t.Fatalf("download = %d %q", w.Code, w.Body)
	}
	if cd := w.Header().Get("Content-Disposition"); cd != `attachment; filename="a.kubeconfig"` {
		t.Errorf("Content-Disposition = %q", cd)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q: credentials must not be cached", cc)
	}
	if w := do(t, h, "GET", "/clusters/vc-b/b/kubeconfig", nil); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "no kubeconfig yet") {
		t.Errorf("pending cluster: %d\n%s", w.Code, w.Body)
	}
}

func TestShareChangeUpdatesTheSpec(t *testing.T) {
	vc := vcFixture("vc-a", "a", nestv1.PhaseCompleted, metav1.ConditionTrue)
	c := newFake(vc).Build()
	h := testServer(t, c)
	if w := do(t, h, "POST", "/clusters/vc-a/a/share", url.Values{"cpu": {"3"}, "memory": {"2Gi"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("share = %d\n%s", w.Code, w.Body)
	}
	got := &nestv1.VirtualCluster{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(vc), got); err != nil {
		t.Fatal(err)
	}
	if r := got.Spec.PromoteResources.Resources; r.Cpu().String() != "3" || r.Memory().String() != "2Gi" {
		t.Errorf("resources = %v", r)
	}
	w := do(t, h, "POST", "/clusters/vc-a/a/share", url.Values{"cpu": {"-1"}})
	if w.Code != http.StatusUnprocessableEntity || !strings.Contains(elementText(t, w.Body.String(), "cpu-error"), "positive quantity") {
		t.Errorf("bad share = %d\n%s", w.Code, w.Body)
	}
}

func TestDeleteNeedsTheTypedName(t *testing.T) {
	vc := vcFixture("vc-a", "a", nestv1.PhaseCompleted, metav1.ConditionTrue)
	c := newFake(vc).Build()
	h := testServer(t, c)
	w := do(t, h, "POST", "/clusters/vc-a/a/delete", url.Values{"confirm": {"b"}})
	if w.Code != http.StatusUnprocessableEntity || !strings.Contains(elementText(t, w.Body.String(), "confirm-error"), "type the cluster") {
		t.Fatalf("wrong confirmation = %d\n%s", w.Code, w.Body)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(vc), &nestv1.VirtualCluster{}); err != nil {
		t.Fatalf("deleted without confirmation: %v", err)
	}
	if w := do(t, h, "POST", "/clusters/vc-a/a/delete", url.Values{"confirm": {"a"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("delete = %d\n%s", w.Code, w.Body)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(vc), &nestv1.VirtualCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("still there after a confirmed delete: %v", err)
	}
}

// A form another site's page posts is refused before it reaches a handler.
func TestCrossSiteFormPostIsRefused(t *testing.T) {
	c := newFake().Build()
	r := httptest.NewRequest("POST", "/new", strings.NewReader("name=evil&podSecurity=baseline&serviceType=NodePort"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	w := httptest.NewRecorder()
	testServer(t, c).ServeHTTP(w, r)
	if w.Code != http.StatusForbidden {
		t.Errorf("cross-site POST = %d, want 403", w.Code)
	}
	var list nestv1.VirtualClusterList
	if err := c.List(context.Background(), &list); err != nil || len(list.Items) != 0 {
		t.Errorf("cross-site POST created %v (%v)", list.Items, err)
	}
}

// On loopback the dashboard answers only to loopback names: a page that
// rebinds its own DNS name to 127.0.0.1 gets nothing.
func TestLoopbackDashboardRefusesOtherHostNames(t *testing.T) {
	s, err := New(Options{Clients: fixedClients{newFake().Build()}, AllowedHosts: LoopbackHosts("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]int{"127.0.0.1:8080": 200, "localhost:8080": 200, "[::1]:8080": 200, "rebind.example:8080": 421} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = host
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("Host %s = %d, want %d", host, w.Code, want)
		}
	}
}

func TestPagesCarrySecurityHeaders(t *testing.T) {
	w := do(t, testServer(t, newFake().Build()), "GET", "/new", nil)
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	if w.Header().Get("X-Frame-Options") != "DENY" {
		t.Error("no X-Frame-Options")
	}
}

func TestTokenModeSendsUsersToSignIn(t *testing.T) {
	tc, err := NewTokenClients(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Clients: tc})
	if err != nil {
		t.Fatal(err)
	}
	w := do(t, s.Handler(), "GET", "/clusters/vc-a/a", nil)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login?next=%2Fclusters%2Fvc-a%2Fa" {
		t.Errorf("without a token: %d to %q, want 303 to /login", w.Code, w.Header().Get("Location"))
	}
	if w := do(t, s.Handler(), "GET", "/login", nil); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `name="token"`) {
		t.Errorf("GET /login = %d", w.Code)
	}
}

func TestSafeNextStaysOnThisSite(t *testing.T) {
	for in, want := range map[string]string{"/clusters/a/b": "/clusters/a/b", "/?namespace=a": "/?namespace=a", "//evil.example/": "/", "https://evil.example/": "/",
		"/\\evil": "/", "": "/", "/\t/evil.example": "/", "/%09/evil.example": "/%09/evil.example", "/\r\n/evil": "/", "javascript:alert(1)": "/"} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// The clusters stream pushes the table again when a cluster appears.
func TestLiveClustersPushesChanges(t *testing.T) {
	c := newFake(vcFixture("vc-a", "a", nestv1.PhaseCompleted, metav1.ConditionTrue)).Build()
	srv := httptest.NewServer(testServer(t, c))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/live/clusters", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	events := readEvents(resp.Body)
	first := <-events
	if first.name != "clusters" || !strings.Contains(first.data, `data-cluster="vc-a/a"`) {
		t.Fatalf("first event = %+v", first)
	}
	if err := c.Create(ctx, vcFixture("vc-b", "b", nestv1.PhasePreparing, "")); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("stream ended before it showed vc-b/b")
			}
			if strings.Contains(ev.data, `data-cluster="vc-b/b"`) {
				return
			}
		case <-ctx.Done():
			t.Fatal("no event showed the new cluster vc-b/b")
		}
	}
}

type sseEvent struct{ name, data string }

// readEvents parses a server-sent event stream.
func readEvents(r io.Reader) <-chan sseEvent {
	out := make(chan sseEvent)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev sseEvent
		var data []string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			case line == "" && ev.name != "":
				ev.data = strings.Join(data, "\n")
				out <- ev
				ev, data = sseEvent{}, nil
			}
		}
	}()
	return out
}

// A lone CR in API text cannot add an event-stream field or end the event.
func TestWriteEventNeutralisesCarriageReturns(t *testing.T) {
	var b strings.Builder
	if err := writeEvent(&b, "cluster", "<p>a\rid: 7\r\revent: evil\r\nb</p>"); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n\n"), "\n") {
		if !strings.HasPrefix(line, "data: ") && line != "event: cluster" {
			t.Errorf("line %q is not a data field", line)
		}
	}
	if strings.Contains(b.String(), "\r") {
		t.Error("a CR reached the stream")
	}
}

func TestLiveStreamsAreCapped(t *testing.T) {
	s, err := New(Options{Clients: fixedClients{newFake().Build()}, MaxStreams: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.streams <- struct{}{} // one stream already open
	if w := do(t, s.Handler(), "GET", "/live/clusters", nil); w.Code != http.StatusServiceUnavailable {
		t.Errorf("a stream past the cap = %d, want 503", w.Code)
	}
}

// The form offers the host's default Service type first, and choosing it
// leaves the spec's type unset for nest-manager's --default-service-type.
func TestCreateWithTheHostDefaultServiceTypeLeavesItUnset(t *testing.T) {
	c := newFake().Build()
	h := testServer(t, c)
	if page := do(t, h, "GET", "/new", nil).Body.String(); !strings.Contains(page, `<option value="host default" selected>`) {
		t.Errorf("the form does not preselect the host default:\n%s", page)
	}
	w := do(t, h, "POST", "/new", url.Values{"name": {"team-a"}, "podSecurity": {"baseline"}, "serviceType": {"host default"}})
	if w.Code != http.StatusSeeOther {
		t.Fatalf("POST /new = %d\n%s", w.Code, w.Body)
	}
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "vc-team-a", Name: "team-a"}, vc); err != nil {
		t.Fatal(err)
	}
	if vc.Spec.ControlPlane.Service.Type != "" {
		t.Errorf("service type %q, want it unset", vc.Spec.ControlPlane.Service.Type)
	}
}

// The upgrade card offers the versions the running one may move to, moves
// the spec, and shows the refusal vcops.Upgrade gives for another.
func TestUpgradeFormMovesTheVersionOrSaysWhyNot(t *testing.T) {
	vc := vcFixture("vc-a", "a", nestv1.PhaseCompleted, metav1.ConditionTrue)
	vc.Spec.KubernetesVersion, vc.Status.Version = version.Kubernetes, version.Kubernetes
	c := newFake(vc).Build()
	h := testServer(t, c)
	page := do(t, h, "GET", "/clusters/vc-a/a", nil).Body.String()
	option := func(v string) string { return `<option value="` + v + `"` }
	if !strings.Contains(page, option(version.Newest())) || strings.Contains(page, option(version.Kubernetes)) {
		t.Errorf("the upgrade card does not offer %s alone (the running %s is no choice):\n%s", version.Newest(), version.Kubernetes, page)
	}
	w := do(t, h, "POST", "/clusters/vc-a/a/upgrade", url.Values{"kubernetesVersion": {"v1.20.0"}})
	if w.Code != http.StatusUnprocessableEntity || !strings.Contains(elementText(t, w.Body.String(), "kubernetesVersion-error"), "unsupported Kubernetes version") {
		t.Errorf("upgrade to v1.20.0 = %d\n%s", w.Code, w.Body)
	}
	if w := do(t, h, "POST", "/clusters/vc-a/a/upgrade", url.Values{"kubernetesVersion": {version.Newest()}}); w.Code != http.StatusSeeOther {
		t.Fatalf("upgrade = %d\n%s", w.Code, w.Body)
	}
	got := &nestv1.VirtualCluster{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(vc), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.KubernetesVersion != version.Newest() {
		t.Errorf("spec.kubernetesVersion %s after the upgrade form, want %s", got.Spec.KubernetesVersion, version.Newest())
	}
}
