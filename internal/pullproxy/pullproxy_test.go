package pullproxy

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// listenOn serves h on addr (a loopback host, port 0) and returns host:port.
// Linux routes all of 127.0.0.0/8 to loopback, so 127.0.0.2 stands for a
// second, denied host.
func listenOn(t *testing.T, host string, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().String()
}

// counting is a handler that counts its requests and answers 200 "forbidden fruit".
func counting(n *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		_, _ = io.WriteString(w, "forbidden fruit")
	})
}

// redirecting serves, on 127.0.0.1, a 307 redirect to target for every
// request (307 keeps a POST's method and body), and returns host:port.
func redirecting(t *testing.T, target string) string {
	t.Helper()
	return listenOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	}))
}

// newProxy serves a Proxy that denies deny, and not AlwaysDenied (the
// registries here stand on loopback), and reaches plain over HTTP.
func newProxy(t *testing.T, deny []string, plain ...string) string {
	t.Helper()
	cfg := Config{PlainHTTP: plain, Log: testr.New(t)}
	for _, d := range deny {
		cfg.Deny = append(cfg.Deny, netip.MustParsePrefix(d))
	}
	p := New(cfg)
	p.always = nil
	p.SetDeny(cfg.Deny)
	return listenOn(t, "127.0.0.1", p)
}

func get(t *testing.T, method, rawURL string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// errorCode is the first code of a registry error body.
func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Errors []struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || len(e.Errors) == 0 {
		t.Fatalf("not a registry error body: %q", body)
	}
	return e.Errors[0].Code
}

func TestPullsAnImageFromAnAllowedRegistry(t *testing.T) {
	reg := listenOn(t, "127.0.0.1", registry.New())
	img, err := random.Image(256, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(reg+"/team/app:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	proxy := newProxy(t, []string{"127.0.0.2/32"}, reg)
	want, _ := img.RawManifest()
	resp, body := get(t, http.MethodGet, "http://"+proxy+"/v2/team/app/manifests/1?ns="+url.QueryEscape(reg),
		http.Header{"Accept": {"application/vnd.docker.distribution.manifest.v2+json"}})
	if resp.StatusCode != http.StatusOK || body != string(want) {
		t.Fatalf("manifest through the proxy: %s %q, want 200 and the pushed manifest", resp.Status, body)
	}
	layers, _ := img.Layers()
	digest, _ := layers[0].Digest()
	resp, _ = get(t, http.MethodHead, "http://"+proxy+"/v2/team/app/blobs/"+digest.String()+"?ns="+url.QueryEscape(reg), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("blob HEAD through the proxy: %s", resp.Status)
	}
}

func TestRefusesANameThatResolvesToADeniedAddress(t *testing.T) {
	var hits atomic.Int32
	target := listenOn(t, "127.0.0.1", counting(&hits))
	_, port, _ := net.SplitHostPort(target)
	proxy := newProxy(t, []string{"127.0.0.0/8", "::1/128"}, "localhost:"+port)
	resp, body := get(t, http.MethodGet, "http://"+proxy+"/v2/x/manifests/1?ns=localhost:"+port, nil)
	if resp.StatusCode != http.StatusForbidden || errorCode(t, body) != "DENIED" {
		t.Fatalf("got %s %q, want 403 DENIED", resp.Status, body)
	}
	if strings.Contains(body, "127.0.0.1") {
		t.Errorf("the refusal names the address: %q", body)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the denied address got %d requests", n)
	}
}

func TestFollowsNoRedirectIntoADeniedAddress(t *testing.T) {
	var hits atomic.Int32
	denied := listenOn(t, "127.0.0.2", counting(&hits))
	reg := redirecting(t, "http://"+denied+"/blob")
	proxy := newProxy(t, []string{"127.0.0.2/32"}, reg)
	resp, body := get(t, http.MethodGet, "http://"+proxy+"/v2/x/blobs/sha256:00?ns="+reg, nil)
	if resp.StatusCode != http.StatusForbidden || errorCode(t, body) != "DENIED" {
		t.Fatalf("got %s %q, want 403 DENIED", resp.Status, body)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the redirect's denied target got %d requests", n)
	}
}

func TestFollowsAnAllowedRedirectItself(t *testing.T) {
	var hits atomic.Int32
	storage := listenOn(t, "127.0.0.3", counting(&hits))
	reg := redirecting(t, "http://"+storage+"/blob")
	proxy := newProxy(t, []string{"127.0.0.2/32"}, reg)
	resp, body := get(t, http.MethodGet, "http://"+proxy+"/v2/x/blobs/sha256:00?ns="+reg, nil)
	if resp.StatusCode != http.StatusOK || body != "forbidden fruit" || hits.Load() != 1 {
		t.Fatalf("got %s %q after %d storage hits, want the storage's answer through the proxy", resp.Status, body, hits.Load())
	}
}

func TestTokenRealmsLeadBackThroughTheProxy(t *testing.T) {
	var gotQuery url.Values
	var gotAuth string
	auth := listenOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotQuery, gotAuth = r.URL.Query(), r.Header.Get("Authorization")
		_, _ = io.WriteString(w, `{"token":"t0k"}`)
	}))
	reg := listenOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Www-Authenticate", `Bearer realm="http://`+auth+`/token?a=1",service="reg"`)
		w.WriteHeader(http.StatusUnauthorized)
	}))
	proxy := newProxy(t, []string{"127.0.0.2/32"}, reg)
	resp, _ := get(t, http.MethodGet, "http://"+proxy+"/v2/?ns="+reg, nil)
	challenge := resp.Header.Get("Www-Authenticate")
	wantRealm := `realm="http://` + proxy + TokenPath + "?realm=" + url.QueryEscape("http://"+auth+"/token?a=1") + `"`
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(challenge, wantRealm) || !strings.Contains(challenge, `service="reg"`) {
		t.Fatalf("challenge %s %q, want 401 with %s", resp.Status, challenge, wantRealm)
	}
	realm := strings.TrimSuffix(strings.TrimPrefix(wantRealm, `realm="`), `"`)
	resp, body := get(t, http.MethodGet, realm+"&scope=repository:x:pull&service=reg", http.Header{"Authorization": {"Basic dTpw"}})
	if resp.StatusCode != http.StatusOK || body != `{"token":"t0k"}` {
		t.Fatalf("token through the proxy: %s %q", resp.Status, body)
	}
	if gotQuery.Get("a") != "1" || gotQuery.Get("scope") != "repository:x:pull" || gotQuery.Get("service") != "reg" || gotAuth != "Basic dTpw" {
		t.Errorf("the realm got query %v and Authorization %q, want the realm's own parameters, containerd's and its credentials", gotQuery, gotAuth)
	}
}

func TestRefusesATokenRealmAtADeniedAddress(t *testing.T) {
	var hits atomic.Int32
	denied := listenOn(t, "127.0.0.2", counting(&hits))
	proxy := newProxy(t, []string{"127.0.0.2/32"})
	resp, body := get(t, http.MethodGet, "http://"+proxy+TokenPath+"?realm="+url.QueryEscape("http://"+denied+"/token"), nil)
	if resp.StatusCode != http.StatusForbidden || errorCode(t, body) != "DENIED" || hits.Load() != 0 {
		t.Fatalf("got %s %q and %d hits at the realm, want 403 DENIED and none", resp.Status, body, hits.Load())
	}
}

func TestRefusesWhatIsNotAPull(t *testing.T) {
	proxy := newProxy(t, nil)
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{http.MethodPut, "/v2/x/manifests/1?ns=example.com", http.StatusMethodNotAllowed},
		{http.MethodPost, "/v2/x/blobs/uploads/?ns=example.com", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v2/x/manifests/1", http.StatusBadRequest},
		{http.MethodGet, "/v2/x/manifests/1?ns=" + url.QueryEscape("evil.com/@x"), http.StatusBadRequest},
		{http.MethodGet, "/metrics", http.StatusNotFound},
		{http.MethodGet, TokenPath + "?realm=file:///etc/passwd", http.StatusBadRequest},
	} {
		if resp, body := get(t, c.method, "http://"+proxy+c.path, nil); resp.StatusCode != c.status {
			t.Errorf("%s %s: %s %q, want %d", c.method, c.path, resp.Status, body, c.status)
		}
	}
}

func TestDeniedComparesMappedAddressesAsIPv4AndAlwaysDeniesTheNode(t *testing.T) {
	p := New(Config{Deny: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}})
	for addr, want := range map[string]bool{
		"10.96.0.1": true, "::ffff:10.96.0.1": true, "10.97.0.1": false, "2001:db8::1": false,
		"127.0.0.1": true, "::ffff:127.0.0.1": true, "::1": true, "169.254.169.254": true, "0.0.0.0": true,
		// A zone does not hide an address, nor does NAT64 (RFC 6052).
		"::1%lo": true, "fe80::1%eth0": true, "64:ff9b::a60:1": true, "64:ff9b::7f00:1": true, "64:ff9b::c633:6401": false,
	} {
		if got := p.Denied(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Denied(%s) = %v, want %v", addr, got, want)
		}
	}
}

// A token POST redirected (307, which keeps the body) to a denied address
// is refused, not handed back for containerd to follow with the
// credentials in its body.
func TestARedirectedTokenPostIsFollowedAndChecked(t *testing.T) {
	var hits atomic.Int32
	denied := listenOn(t, "127.0.0.2", counting(&hits))
	realm := redirecting(t, "http://"+denied+"/token")
	proxy := newProxy(t, []string{"127.0.0.2/32"})
	resp, err := http.Post("http://"+proxy+TokenPath+"?realm="+url.QueryEscape("http://"+realm+"/token"), "application/x-www-form-urlencoded",
		strings.NewReader("grant_type=password&username=u&password=secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Location") != "" || hits.Load() != 0 {
		t.Fatalf("got %s (Location %q) %q and %d hits at the denied address, want 403 and none", resp.Status, resp.Header.Get("Location"), body, hits.Load())
	}
}

// A redirect the proxy does not follow never reaches containerd, which
// would follow it past the check.
func TestPassesNoRedirectOn(t *testing.T) {
	reg := listenOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Location", "")
		w.WriteHeader(http.StatusFound)
	}))
	proxy := newProxy(t, []string{"127.0.0.2/32"}, reg)
	resp, body := get(t, http.MethodGet, "http://"+proxy+"/v2/x/blobs/sha256:00?ns="+reg, nil)
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Location") != "" {
		t.Fatalf("got %s %q, want 502 and no Location", resp.Status, body)
	}
}

// A manifest whose layer names other URLs (a foreign layer, which
// containerd fetches itself, past any mirror) is refused; one without is
// passed as it came.
func TestRefusesManifestsWithForeignLayerURLs(t *testing.T) {
	manifests := map[string]string{
		"foreign": `{"schemaVersion":2,"config":{"digest":"sha256:00"},"layers":[{"digest":"sha256:01","urls":["http://169.254.169.254/latest"]}]}`,
		"index":   `{"schemaVersion":2,"manifests":[{"digest":"sha256:02","urls":["http://10.96.0.1/"]}]}`,
		"plain":   `{"schemaVersion":2,"config":{"digest":"sha256:00"},"layers":[{"digest":"sha256:01"}]}`,
	}
	reg := listenOn(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, manifests[strings.TrimPrefix(r.URL.Path, "/v2/x/manifests/")])
	}))
	proxy := newProxy(t, []string{"127.0.0.2/32"}, reg)
	for tag, want := range map[string]int{"foreign": http.StatusForbidden, "index": http.StatusForbidden, "plain": http.StatusOK} {
		resp, body := get(t, http.MethodGet, "http://"+proxy+"/v2/x/manifests/"+tag+"?ns="+reg, nil)
		if resp.StatusCode != want || (want == http.StatusOK && body != manifests[tag]) {
			t.Errorf("%s: %s %q, want %d", tag, resp.Status, body, want)
		}
	}
}
