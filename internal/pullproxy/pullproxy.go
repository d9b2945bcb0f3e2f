// Package pullproxy is the registry mirror a host node's containerd pulls
// every image through, so that the address a registry name resolves to is
// checked where the connection is made.
//
// nest-syncer refuses a tenant image whose registry is written as a denied
// address or name, but it cannot know what a name resolves to on the node,
// nor where a registry's redirect or token realm leads. The node's
// containerd dials those itself. With containerd's hosts configuration for
// every registry (certs.d/_default/hosts.toml) naming this proxy as the
// server, containerd sends each registry request here with the registry's
// name in the "ns" query parameter (containerd's mirror protocol), and the
// proxy makes the upstream request: it resolves the name, refuses any
// address in its deny list at dial time, follows redirects itself (each
// dial checked the same way; one it does not follow is never passed on),
// points the token realm of an authentication challenge back at itself,
// and refuses manifests with foreign layer URLs (which containerd fetches
// itself), so no connection containerd's pull leads to escapes the check.
// The proxy answers a refusal with the registry API's DENIED error (HTTP
// 403) and a log line naming the registry; it serves pulls only (GET and
// HEAD, and POST to its token path).
package pullproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// DefaultAddress is where the pull proxy listens on every host node, in
// the node's network namespace: the address the node's containerd names as
// the server of every registry (certs.d/_default/hosts.toml). The host's
// node network agent serves it while the node is in the host, and a
// promoted node's nest-agent while it is in a tenant cluster.
const DefaultAddress = "127.0.0.1:5015"

// TokenPath is where the proxy serves the token realms it rewrites: a
// challenge's realm R becomes http://<proxy>/TokenPath?realm=R, and the
// proxy forwards the token request to R.
const TokenPath = "/nest-token"

// AlwaysDenied are the destinations every Proxy refuses besides its
// Config.Deny: the node itself (loopback and unspecified addresses), its
// link (link-local, where cloud metadata services answer) and multicast.
// nest-syncer refuses images written as these addresses (its alwaysDenied;
// a test there fails when the two lists drift).
var AlwaysDenied = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("224.0.0.0/4"), netip.MustParsePrefix("ff00::/8"),
}

// Config is what a Proxy checks and how it reaches registries.
type Config struct {
	// Deny are the destinations no upstream connection may reach besides
	// AlwaysDenied: the addresses a registry name, a redirect or a token
	// realm may not resolve to. An address matches when a prefix contains it
	// (IPv4-mapped IPv6 addresses are compared as IPv4). SetDeny replaces
	// them on a running Proxy.
	Deny []netip.Prefix
	// PlainHTTP are registries (host or host:port, as image references write
	// them) reached over HTTP; every other registry is reached over HTTPS,
	// as containerd does by default.
	PlainHTTP []string
	// Log receives a line per refused connection and per failed upstream
	// request.
	Log logr.Logger
	// DialTimeout bounds each upstream connection attempt; zero means 30 s.
	DialTimeout time.Duration
}

// Proxy is an http.Handler serving containerd's mirror protocol for every
// registry. Make it with New.
type Proxy struct {
	cfg Config
	// always is AlwaysDenied; tests that stand registries on loopback
	// clear it.
	always []netip.Prefix
	deny   atomic.Pointer[[]netip.Prefix]
	client *http.Client
}

// New returns a Proxy for cfg. Its upstream client uses no environment
// proxy (HTTP_PROXY would carry requests past the check), follows up to 10
// redirects as Go's client does (a token POST's body too, which the proxy
// holds in memory), and drops Authorization on a redirect to another host
// (upstream net/http behaviour, as registry clients expect).
func New(cfg Config) *Proxy {
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 30 * time.Second
	}
	p := &Proxy{cfg: cfg, always: AlwaysDenied}
	p.SetDeny(cfg.Deny)
	dialer := &net.Dialer{Timeout: cfg.DialTimeout, Control: p.control}
	transport := &http.Transport{
		Proxy:       nil,
		DialContext: dialer.DialContext,
		// Bodies pass as the registry sent them, with their length and
		// digest-checked bytes.
		DisableCompression:    true,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: time.Minute,
	}
	p.client = &http.Client{Transport: transport}
	return p
}

// DeniedError is the error of a connection the proxy refused: Addr is the
// address it would have dialled.
type DeniedError struct{ Addr netip.Addr }

func (e *DeniedError) Error() string {
	return fmt.Sprintf("%s is a denied destination", e.Addr)
}

// control runs after the name is resolved and before each connect, so a
// DNS answer cannot swap the checked address for another.
func (p *Proxy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("pull proxy: unexpected dial address %q: %w", address, err)
	}
	if p.Denied(ap.Addr()) {
		return &DeniedError{Addr: ap.Addr()}
	}
	return nil
}

// SetDeny makes deny (besides AlwaysDenied) the destinations p refuses from
// its next connection on; connections already made are not checked again.
func (p *Proxy) SetDeny(deny []netip.Prefix) {
	all := slices.Concat(p.always, deny)
	p.deny.Store(&all)
}

// Denied reports whether addr is in the deny list or AlwaysDenied. A zone
// is dropped first (a prefix contains no zoned address), an IPv4-mapped
// address is compared as IPv4, and an address of the NAT64 well-known
// prefix 64:ff9b::/96 (RFC 6052), which a NAT64 gateway turns into the
// IPv4 address in its last 32 bits, is denied when either form is.
func (p *Proxy) Denied(addr netip.Addr) bool {
	addr = addr.WithZone("").Unmap()
	forms := []netip.Addr{addr}
	if nat64.Contains(addr) {
		b := addr.As16()
		forms = append(forms, netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
	}
	for _, prefix := range *p.deny.Load() {
		for _, a := range forms {
			if prefix.Contains(a) {
				return true
			}
		}
	}
	return false
}

// nat64 is the NAT64 well-known prefix.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// ServeHTTP serves /v2/... for the registry its ns parameter names, and
// TokenPath for the realms it rewrote.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !(r.Method == http.MethodPost && r.URL.Path == TokenPath) {
		writeError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "the node's pull proxy serves pulls only")
		return
	}
	switch {
	case r.URL.Path == TokenPath:
		p.serveToken(w, r)
	case r.URL.Path == "/v2" || strings.HasPrefix(r.URL.Path, "/v2/"):
		p.serveRegistry(w, r)
	default:
		writeError(w, http.StatusNotFound, "NOT_FOUND", "not a registry API path")
	}
}

func (p *Proxy) serveRegistry(w http.ResponseWriter, r *http.Request) {
	registry := r.URL.Query().Get("ns")
	if registry == "" {
		writeError(w, http.StatusBadRequest, "UNSUPPORTED", "no ns parameter: name the pull proxy as the server of containerd's _default hosts.toml")
		return
	}
	up, err := p.upstreamURL(registry, r.URL)
	if err != nil {
		writeError(w, http.StatusBadRequest, "NAME_INVALID", err.Error())
		return
	}
	resp, ok := p.forward(w, r, up, registry)
	if !ok {
		return
	}
	defer resp.Body.Close()
	if r.Method == http.MethodGet && resp.StatusCode == http.StatusOK && strings.Contains(r.URL.Path, "/manifests/") {
		p.serveManifest(w, resp, registry)
		return
	}
	if resp.StatusCode == http.StatusUnauthorized {
		for i, c := range resp.Header.Values("Www-Authenticate") {
			if i == 0 {
				resp.Header.Del("Www-Authenticate")
			}
			resp.Header.Add("Www-Authenticate", rewriteRealm(c, "http://"+r.Host+TokenPath))
		}
	}
	copyResponse(w, resp)
}

// maxManifest bounds the manifests the proxy reads: containerd itself
// refuses manifests over 4 MiB.
const maxManifest = 4 << 20

// serveManifest passes on a manifest or index unless a descriptor in it
// names URLs (a foreign layer): containerd fetches those itself, with no
// mirror, before it checks their digest.
func (p *Proxy) serveManifest(w http.ResponseWriter, resp *http.Response, registry string) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxManifest+1))
	if err != nil || len(body) > maxManifest {
		writeError(w, http.StatusBadGateway, "MANIFEST_INVALID", fmt.Sprintf("the node's pull proxy could not read a manifest of %s under %d bytes", registry, maxManifest))
		return
	}
	if foreignURLs(body) {
		p.cfg.Log.Info("refused a manifest with foreign layer URLs", "registry", registry)
		writeError(w, http.StatusForbidden, "DENIED", fmt.Sprintf("the node's pull proxy refuses a manifest of %s that names layers at other URLs, which the node would fetch past it", registry))
		return
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	copyResponse(w, resp)
}

// foreignURLs reports whether a manifest or index (OCI or Docker) has a
// descriptor with urls: its config, a layer, a manifest or its subject.
func foreignURLs(manifest []byte) bool {
	type descriptor struct {
		URLs []string `json:"urls"`
	}
	var m struct {
		Config    *descriptor  `json:"config"`
		Subject   *descriptor  `json:"subject"`
		Layers    []descriptor `json:"layers"`
		Manifests []descriptor `json:"manifests"`
	}
	if json.Unmarshal(manifest, &m) != nil {
		return false
	}
	all := slices.Concat(m.Layers, m.Manifests)
	for _, d := range []*descriptor{m.Config, m.Subject} {
		if d != nil {
			all = append(all, *d)
		}
	}
	return slices.ContainsFunc(all, func(d descriptor) bool { return len(d.URLs) > 0 })
}

// serveToken forwards a token request (GET with basic credentials, or an
// OAuth POST) to the realm the proxy rewrote, with containerd's own query
// parameters (service, scope) added to the realm's.
func (p *Proxy) serveToken(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	realm, err := url.Parse(q.Get("realm"))
	if err != nil || (realm.Scheme != "https" && realm.Scheme != "http") || realm.Host == "" {
		writeError(w, http.StatusBadRequest, "UNSUPPORTED", "the realm parameter is not an http(s) URL")
		return
	}
	q.Del("realm")
	rq := realm.Query()
	for k, vs := range q {
		for _, v := range vs {
			rq.Add(k, v)
		}
	}
	realm.RawQuery = rq.Encode()
	resp, ok := p.forward(w, r, realm, realm.Host)
	if !ok {
		return
	}
	defer resp.Body.Close()
	copyResponse(w, resp)
}

// forward makes r's request to up, with r's headers less hop-by-hop ones,
// and answers the client itself when it fails: DENIED when the proxy
// refused a connection, a gateway error otherwise.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, up *url.URL, registry string) (*http.Response, bool) {
	// The body (a token POST's form) is read whole, so the client can send
	// it again after a 307 or 308 redirect it follows itself.
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err != nil || len(body) > maxRequestBody {
		writeError(w, http.StatusBadRequest, "UNSUPPORTED", fmt.Sprintf("the request body is over %d bytes or unreadable", maxRequestBody))
		return nil, false
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, up.String(), bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusBadRequest, "UNSUPPORTED", err.Error())
		return nil, false
	}
	for k, vs := range r.Header {
		if hopByHop[http.CanonicalHeaderKey(k)] {
			continue
		}
		req.Header[k] = vs
	}
	resp, err := p.client.Do(req)
	if err == nil {
		return resp, true
	}
	var denied *DeniedError
	if errors.As(err, &denied) {
		p.cfg.Log.Info("refused a pull connection to a denied destination", "registry", registry, "address", denied.Addr.String(), "path", r.URL.Path)
		writeError(w, http.StatusForbidden, "DENIED", fmt.Sprintf("the node's pull proxy refuses %s: it leads to an address images may not come from", registry))
		return nil, false
	}
	if r.Context().Err() == nil {
		p.cfg.Log.Info("upstream request failed", "registry", registry, "path", r.URL.Path, "err", err.Error())
	}
	writeError(w, http.StatusBadGateway, "UNAVAILABLE", fmt.Sprintf("the node's pull proxy could not reach %s", registry))
	return nil, false
}

// upstreamURL is the registry URL in for registry, less the ns parameter.
// docker.io's API is at registry-1.docker.io, as containerd maps it.
func (p *Proxy) upstreamURL(registry string, in *url.URL) (*url.URL, error) {
	host := strings.ToLower(registry)
	if strings.ContainsAny(host, "/?#@ ") {
		return nil, fmt.Errorf("ns %q is not a registry host[:port]", registry)
	}
	if host == "docker.io" {
		host = "registry-1.docker.io"
	}
	scheme := "https"
	for _, plain := range p.cfg.PlainHTTP {
		if strings.EqualFold(plain, registry) {
			scheme = "http"
		}
	}
	q := in.Query()
	q.Del("ns")
	return &url.URL{Scheme: scheme, Host: host, Path: in.Path, RawQuery: q.Encode()}, nil
}

// realmParam matches the realm parameter of a Bearer challenge.
var realmParam = regexp.MustCompile(`(?i)(realm=)"([^"]*)"`)

// rewriteRealm points a Bearer challenge's realm at tokenURL, carrying the
// original realm as its realm parameter; other challenges are unchanged.
func rewriteRealm(challenge, tokenURL string) string {
	if !strings.HasPrefix(strings.ToLower(strings.TrimSpace(challenge)), "bearer") {
		return challenge
	}
	return realmParam.ReplaceAllStringFunc(challenge, func(m string) string {
		orig := realmParam.FindStringSubmatch(m)[2]
		return fmt.Sprintf(`realm="%s?realm=%s"`, tokenURL, url.QueryEscape(orig))
	})
}

// maxRequestBody bounds what the proxy reads of a request body: token
// requests carry a short form.
const maxRequestBody = 64 << 10

// hopByHop are the headers a proxy does not forward (RFC 9110, 7.6.1).
var hopByHop = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// copyResponse passes resp on to the client, except a redirect: the
// client would follow it itself, past the proxy's check. The client only
// sees one when the proxy did not follow it (too many, or no Location).
func copyResponse(w http.ResponseWriter, resp *http.Response) {
	if resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.StatusCode != http.StatusNotModified {
		writeError(w, http.StatusBadGateway, "UNAVAILABLE", "the registry answered with a redirect the node's pull proxy did not follow")
		return
	}
	for k, vs := range resp.Header {
		if hopByHop[k] {
			continue
		}
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// writeError answers with the registry API's error body (the OCI
// distribution spec's errors list), which containerd shows in its pull
// error.
func writeError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": message}}})
}

// Serve serves p on ln until ctx ends, then shuts the server down.
func Serve(ctx context.Context, ln net.Listener, p *Proxy) error {
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
