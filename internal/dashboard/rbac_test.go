package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
)

// On a real API server with RBAC, a signed-in user sees and does exactly
// what the host allows their token, and nothing more.
func TestHostRBACDecidesWhatEachSignedInUserSees(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run with `make unit`, which points it at our kube-apiserver and etcd builds")
	}
	env := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd")}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	admin, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}},
		&nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "team-a"}},
		&nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "bravo", Namespace: "team-b"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "viewer", Namespace: "default"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody", Namespace: "default"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "vc-viewer", Namespace: "team-a"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"nest.dev"}, Resources: []string{"virtualclusters"}, Verbs: []string{"get", "list", "watch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "vc-viewer", Namespace: "team-a"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "vc-viewer"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "viewer", Namespace: "default"}}},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	token := func(sa string) string {
		tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	tc, err := NewTokenClients(cfg) // the admin credentials in cfg are dropped
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Clients: tc})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()

	signIn := func(tok string) []*http.Cookie {
		w := do(t, h, "POST", "/login", url.Values{"token": {tok}, "next": {"/"}})
		if w.Code != http.StatusSeeOther {
			t.Fatalf("sign in = %d\n%s", w.Code, w.Body)
		}
		return w.Result().Cookies()
	}
	get := func(cookies []*http.Cookie, target string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", target, nil)
		for _, c := range cookies {
			r.AddCookie(c)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	viewer := signIn(token("viewer"))
	if w := get(viewer, "/?namespace=team-a"); w.Code != 200 || !strings.Contains(w.Body.String(), `data-cluster="team-a/alpha"`) ||
		!strings.Contains(w.Body.String(), "signed in as system:serviceaccount:default:viewer") {
		t.Errorf("viewer in team-a = %d\n%s", w.Code, w.Body)
	}
	for _, target := range []string{"/", "/?namespace=team-b", "/clusters/team-b/bravo"} {
		if w := get(viewer, target); w.Code != http.StatusForbidden || strings.Contains(w.Body.String(), "bravo\"") || strings.Contains(w.Body.String(), "data-cluster") {
			t.Errorf("viewer GET %s = %d, want 403 and no cluster\n%s", target, w.Code, w.Body)
		}
	}

	nobody := signIn(token("nobody"))
	if w := get(nobody, "/?namespace=team-a"); w.Code != http.StatusForbidden || strings.Contains(w.Body.String(), "data-cluster") {
		t.Errorf("nobody in team-a = %d, want 403 and no cluster\n%s", w.Code, w.Body)
	}
	if w := get(nobody, "/clusters/team-a/alpha/kubeconfig"); w.Code != http.StatusForbidden {
		t.Errorf("nobody's kubeconfig download = %d, want 403", w.Code)
	}

	w := do(t, h, "POST", "/login", url.Values{"token": {"not-a-token"}})
	if w.Code != http.StatusUnauthorized || !strings.Contains(elementText(t, w.Body.String(), "token-error"), "refused this token") {
		t.Errorf("bad token = %d\n%s", w.Code, w.Body)
	}
	if len(w.Result().Cookies()) != 0 {
		t.Error("a refused token still got a cookie")
	}
}
