// Package dashboard is Nest's web frontend for platform teams: the virtual
// clusters they may see, each one's health, control plane, share and host
// pods, and forms to create, resize and delete them. It is a thin view over
// the host cluster's Kubernetes API and acts with the user's own credentials
// (ClientSource), so host RBAC decides what each user sees and does.
//
// Pages are rendered on the server with html/template and work without
// JavaScript; htmx and its server-sent-events extension, vendored and
// embedded, keep them live: the server watches the API and pushes fresh
// fragments to the page.
package dashboard

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure a Server.
type Options struct {
	// Clients gives each request a client acting as its user.
	Clients ClientSource
	// AllowedHosts, when set, are the only Host header values (host part,
	// without the port) the server answers. `nest dashboard` on loopback sets
	// them to loopback names, so a web page elsewhere cannot reach the
	// user's credentials through DNS rebinding.
	AllowedHosts []string
	// Now is the clock for ages; time.Now when nil.
	Now func() time.Time
	// MaxStreams bounds the open live streams; DefaultMaxStreams when 0.
	MaxStreams int
	// Context ends the server's background work (namespace clean-up after
	// a delete); context.Background when nil.
	Context context.Context
}

// Server serves the dashboard.
type Server struct {
	o     Options
	pages map[string]*template.Template
	// streams holds one token per open live stream.
	streams chan struct{}
	// cleanups holds the clusters whose namespace clean-up is running.
	cleanups sync.Map
}

// pageNames are the templates that render whole pages; each is parsed with
// the layout. Fragments live in the page templates that use them.
var pageNames = []string{"clusters", "cluster", "create", "login", "error"}

// New parses the templates and returns a Server.
func New(o Options) (*Server, error) {
	if o.Clients == nil {
		return nil, fmt.Errorf("dashboard: Options.Clients is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxStreams == 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.Context == nil {
		o.Context = context.Background()
	}
	s := &Server{o: o, pages: map[string]*template.Template{}, streams: make(chan struct{}, o.MaxStreams)}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(templateFuncs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: parse template %s: %w", name, err)
		}
		s.pages[name] = t
	}
	return s, nil
}

var templateFuncs = template.FuncMap{
	"lower":       strings.ToLower,
	"namePattern": func() string { return namePattern },
	"field":       field,
	"textField":   textField,
	"selectField": selectField,
}

// namePattern is a DNS-1123 label as an HTML pattern attribute. Browsers
// compile pattern with the RegExp v flag, where a '-' in a class must be
// escaped; an invalid pattern is silently ignored.
const namePattern = `[a-z0-9]([a-z0-9\-]*[a-z0-9])?`

// fieldView is one form input as the partials render it.
type fieldView struct {
	ID, Label, Value, Placeholder, Error string
	// Pattern, MaxLength, Required and Title are the browser's own checks.
	Pattern   string
	MaxLength int
	Required  bool
	Title     string
	Help      string
	// Options of a select.
	Options []string
}

func field(id, label, value, placeholder string, errs map[string]string) fieldView {
	return fieldView{ID: id, Label: label, Value: value, Placeholder: placeholder, Error: errs[id]}
}

func textField(id, label, value, placeholder string, errs map[string]string, pattern string, maxLength int, required bool, help string) fieldView {
	f := field(id, label, value, placeholder, errs)
	f.Pattern, f.MaxLength, f.Required, f.Help = pattern, maxLength, required, help
	return f
}

func selectField(id, label, value string, options []string, errs map[string]string) fieldView {
	f := field(id, label, value, "", errs)
	f.Options = options
	return f
}

// Handler returns the dashboard's routes behind its protections: security
// headers, the Host check and Go's cross-origin protection, which refuses
// form posts and other unsafe requests that another site's page sends.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", cacheFor(time.Hour, http.FileServerFS(static))))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /{$}", s.withClient(s.clusters))
	mux.HandleFunc("GET /live/clusters", s.liveClusters)
	mux.HandleFunc("GET /new", s.createForm)
	mux.HandleFunc("POST /new", s.withClient(s.create))
	mux.HandleFunc("GET /clusters/{namespace}/{name}", s.withClient(s.cluster))
	mux.HandleFunc("GET /live/clusters/{namespace}/{name}", s.liveCluster)
	mux.HandleFunc("GET /clusters/{namespace}/{name}/kubeconfig", s.withClient(s.kubeconfig))
	mux.HandleFunc("POST /clusters/{namespace}/{name}/share", s.withClient(s.share))
	mux.HandleFunc("POST /clusters/{namespace}/{name}/upgrade", s.withClient(s.upgrade))
	mux.HandleFunc("POST /clusters/{namespace}/{name}/snapshot", s.withClient(s.snapshotNow))
	mux.HandleFunc("POST /clusters/{namespace}/{name}/delete", s.withClient(s.delete))
	mux.HandleFunc("GET /login", s.loginForm)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	return securityHeaders(s.checkHost(http.NewCrossOriginProtection().Handler(mux)))
}

// contentSecurityPolicy allows only the dashboard's own scripts, styles and
// connections: no inline script, no other origin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

// checkHost refuses requests whose Host is not an allowed name.
func (s *Server) checkHost(next http.Handler) http.Handler {
	if len(s.o.AllowedHosts) == 0 {
		return next
	}
	allowed := map[string]bool{}
	for _, h := range s.o.AllowedHosts {
		allowed[strings.ToLower(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !allowed[strings.ToLower(strings.Trim(host, "[]"))] {
			http.Error(w, "this dashboard answers only to "+strings.Join(s.o.AllowedHosts, ", "), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func cacheFor(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", fmt.Sprintf("public, max-age=%d", int(d.Seconds())))
		next.ServeHTTP(w, r)
	})
}

// LoopbackHosts are the Host names of a dashboard that listens on loopback.
func LoopbackHosts(listenHost string) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if listenHost != "" {
		hosts = append(hosts, listenHost)
	}
	return hosts
}
