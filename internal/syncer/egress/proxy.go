package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// Defaults of Proxy's zero fields.
const (
	// DefaultDialTimeout bounds resolving and dialling one destination.
	DefaultDialTimeout = 10 * time.Second
	// DefaultMaxTunnels bounds the CONNECT requests handled at once, open
	// tunnels included.
	DefaultMaxTunnels = 1024
	// DefaultReadHeaderTimeout bounds reading one CONNECT request.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultMaxHeaderBytes bounds one CONNECT request's header, in bytes
	// (net/http allows 4096 bytes more). kube-apiserver sends about 60.
	DefaultMaxHeaderBytes = 4096
)

// Resolver looks up the addresses of a host name. *net.Resolver is one;
// tests put in their own.
type Resolver interface {
	// LookupNetIP returns the addresses of host for network "ip", as
	// net.Resolver.LookupNetIP does.
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Proxy is an HTTP CONNECT proxy for kube-apiserver's egress selector
// (proxyProtocol HTTPConnect). The API server's dialer sends
// `CONNECT host:port HTTP/1.1` on a new connection for each dial, expects
// an `HTTP/1.1 200` response with no body, and then speaks to the
// destination on the same connection (it is TLS in practice, so the API
// server speaks first).
//
// For each CONNECT, Proxy takes host as an IP address, or resolves it with
// Resolver, and asks Allowed about each address in turn (IPv4-mapped IPv6
// as the IPv4 address). It dials the first allowed one, the very address
// Allowed was asked about, with DialTimeout, answers 200 and copies bytes both
// ways until both sides are done: when one side ends its stream, the other
// gets a half-close (CloseWrite) where its connection supports one, and
// everything is closed where it does not or on an error. A destination
// with no allowed address is never dialled and gets 403 Forbidden with a
// one-line body naming it. Other answers: 400 for a request that names no
// host:port, 405 for any method but CONNECT, 431 for a header over
// MaxHeaderBytes, 502 when resolving or dialling fails, 504 when it times
// out, and 503 when MaxTunnels requests are already being handled. Every
// answer but 200 closes the connection, as does a client that sends no
// complete request within ReadHeaderTimeout.
//
// Refusals are logged at klog's default level, allowed tunnels and
// failures at V(2); Stats counts them. The zero fields take the Default
// values; a nil Allowed refuses everything. Fields must not change once
// Serve is called.
type Proxy struct {
	// Allowed decides whether a resolved destination may be dialled:
	// Published.Allowed in nest-syncer. Nil refuses everything.
	Allowed func(netip.AddrPort) bool
	// Resolver resolves host names; nil is net.DefaultResolver.
	Resolver Resolver
	// DialTimeout bounds resolving and dialling one destination; 0 is
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// MaxTunnels bounds the CONNECT requests handled at once, from the
	// request to the end of its tunnel; 0 is DefaultMaxTunnels.
	MaxTunnels int
	// ReadHeaderTimeout bounds reading a request; 0 is
	// DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// MaxHeaderBytes bounds a request's header, in bytes; 0 is
	// DefaultMaxHeaderBytes.
	MaxHeaderBytes int

	allowed, refused, failed, busy, invalid atomic.Uint64
	active                                  atomic.Int64

	mu      sync.Mutex
	closed  bool
	tunnels map[*tunnel]struct{}
	handles sync.WaitGroup
}

// Stats are Proxy's counts since it was made. Each request counts once.
type Stats struct {
	// Allowed is the tunnels opened (200).
	Allowed uint64
	// Refused is the destinations refused by policy (403).
	Refused uint64
	// Failed is the allowed destinations that failed to resolve or dial
	// (502, 504).
	Failed uint64
	// Busy is the requests turned away at MaxTunnels (503).
	Busy uint64
	// Invalid is the requests that were not CONNECT host:port (400, 405).
	Invalid uint64
	// Active is the CONNECT requests being handled now, open tunnels
	// included.
	Active int64
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	return Stats{
		Allowed: p.allowed.Load(), Refused: p.refused.Load(), Failed: p.failed.Load(),
		Busy: p.busy.Load(), Invalid: p.invalid.Load(), Active: p.active.Load(),
	}
}

// Serve accepts connections on l and serves them until ctx is done, then
// closes l, every connection and every open tunnel, waits for their
// handlers to end and returns nil. If l fails first, Serve does the same
// and returns l's error. Serve may be called once per Proxy.
func (p *Proxy) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           http.HandlerFunc(p.handle),
		ReadHeaderTimeout: orDefault(p.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		MaxHeaderBytes:    orDefault(p.MaxHeaderBytes, DefaultMaxHeaderBytes),
		// Handlers see ctx, so its end cancels resolving and dialling.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    klog.NewStandardLogger("WARNING"),
	}
	// One request per connection, as kube-apiserver sends: a refusal or
	// error answer ends the connection.
	srv.SetKeepAlivesEnabled(false)

	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		p.shutdown()
		// Closes l and the connections not yet hijacked into tunnels.
		_ = srv.Close()
	}()
	err := srv.Serve(l)
	close(stopped)
	p.shutdown()
	_ = srv.Close()
	p.handles.Wait()
	if errors.Is(err, http.ErrServerClosed) || ctx.Err() != nil {
		return nil
	}
	return err
}

// shutdown refuses new requests and closes every open tunnel.
func (p *Proxy) shutdown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for t := range p.tunnels {
		t.close()
	}
}

// begin takes a slot for one CONNECT request: false when the proxy is
// shutting down or MaxTunnels requests are being handled. end gives it back.
func (p *Proxy) begin() (ok, shuttingDown bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false, true
	}
	if p.active.Load() >= int64(orDefault(p.MaxTunnels, DefaultMaxTunnels)) {
		return false, false
	}
	p.active.Add(1)
	// Under mu, so Serve's Wait never races an Add after closed is set.
	p.handles.Add(1)
	return true, false
}

func (p *Proxy) end() {
	p.active.Add(-1)
	p.handles.Done()
}

func (p *Proxy) handle(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		p.invalid.Add(1)
		w.Header().Set("Allow", http.MethodConnect)
		http.Error(w, "this proxy serves CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	// For CONNECT host:port, net/http puts the authority in URL.Host; the
	// Host header kube-apiserver sends is a constant 127.0.0.1.
	host, port, ok := splitHostPort(r.URL.Host)
	if !ok {
		p.invalid.Add(1)
		http.Error(w, fmt.Sprintf("CONNECT needs host:port, not %q", r.RequestURI), http.StatusBadRequest)
		return
	}
	ok, shuttingDown := p.begin()
	if !ok {
		if shuttingDown {
			http.Error(w, "egress proxy is shutting down", http.StatusServiceUnavailable)
			return
		}
		p.busy.Add(1)
		klog.InfoS("Egress refused: too many tunnels", "destination", r.URL.Host, "maxTunnels", orDefault(p.MaxTunnels, DefaultMaxTunnels))
		http.Error(w, "egress proxy has too many open tunnels", http.StatusServiceUnavailable)
		return
	}
	defer p.end()

	timeout := orDefault(p.DialTimeout, DefaultDialTimeout)
	dialCtx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	addrs, err := p.resolve(dialCtx, host)
	if err != nil {
		p.failed.Add(1)
		klog.V(2).InfoS("Egress failed: cannot resolve", "destination", r.URL.Host, "err", err)
		http.Error(w, fmt.Sprintf("cannot resolve %s", host), statusFor(err))
		return
	}
	dest, ok := p.pick(addrs, port)
	if !ok {
		p.refused.Add(1)
		klog.InfoS("Egress refused: destination not published", "destination", r.URL.Host, "addresses", addrs)
		http.Error(w, fmt.Sprintf("destination %s is not one nest-syncer published", r.URL.Host), http.StatusForbidden)
		return
	}
	d := net.Dialer{}
	target, err := d.DialContext(dialCtx, "tcp", dest.String())
	if err != nil {
		p.failed.Add(1)
		klog.V(2).InfoS("Egress failed: cannot dial", "destination", r.URL.Host, "address", dest, "err", err)
		http.Error(w, fmt.Sprintf("cannot dial %s", r.URL.Host), statusFor(err))
		return
	}
	client, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		target.Close()
		p.failed.Add(1)
		klog.ErrorS(err, "Egress failed: cannot take over the connection", "destination", r.URL.Host)
		return
	}
	p.allowed.Add(1)
	klog.V(2).InfoS("Egress allowed", "destination", r.URL.Host, "address", dest)
	// net/http may have set a deadline while reading the request; the
	// tunnel lives as long as its two ends.
	_ = client.SetDeadline(time.Time{})
	t := &tunnel{client: client, target: target}
	if !p.track(t) {
		t.close()
		return
	}
	defer p.untrack(t)
	// The status line alone: kube-apiserver's client refuses bytes
	// buffered after the response, and the destination has sent none yet.
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		t.close()
		return
	}
	// Bytes the client sent after its request, before the answer.
	if n := buf.Reader.Buffered(); n > 0 {
		b, _ := buf.Reader.Peek(n)
		if _, err := target.Write(b); err != nil {
			t.close()
			return
		}
	}
	t.pipe()
}

// resolve returns host's addresses: host itself if it is an IP address.
func (p *Proxy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	var r Resolver = net.DefaultResolver
	if p.Resolver != nil {
		r = p.Resolver
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err == nil && len(addrs) == 0 {
		err = fmt.Errorf("%s has no addresses", host)
	}
	return addrs, err
}

// pick is the first of addrs on port that Allowed allows. An IPv4-mapped
// address is taken as the IPv4 address it maps, so the address dialled is
// exactly the one Allowed was asked about.
func (p *Proxy) pick(addrs []netip.Addr, port uint16) (netip.AddrPort, bool) {
	if p.Allowed == nil {
		return netip.AddrPort{}, false
	}
	for _, a := range addrs {
		if ap := netip.AddrPortFrom(a.Unmap(), port); p.Allowed(ap) {
			return ap, true
		}
	}
	return netip.AddrPort{}, false
}

func (p *Proxy) track(t *tunnel) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	if p.tunnels == nil {
		p.tunnels = map[*tunnel]struct{}{}
	}
	p.tunnels[t] = struct{}{}
	return true
}

func (p *Proxy) untrack(t *tunnel) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.tunnels, t)
}

// tunnel is one CONNECT's two connections.
type tunnel struct {
	client, target net.Conn
	once           sync.Once
}

func (t *tunnel) close() {
	t.once.Do(func() {
		_ = t.client.Close()
		_ = t.target.Close()
	})
}

// pipe copies bytes both ways and returns when both directions are done,
// with both connections closed.
func (t *tunnel) pipe() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.copy(t.target, t.client)
	}()
	t.copy(t.client, t.target)
	<-done
	t.close()
}

// copy copies src to dst until src ends, then half-closes dst, so the
// peer on dst sees the end of the stream while the other direction goes
// on. Where dst cannot half-close, or on an error, it closes the tunnel:
// the other direction then ends too.
func (t *tunnel) copy(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	t.close()
}

// splitHostPort splits a CONNECT authority, host:port or [v6]:port, with
// a numeric port other than 0.
func splitHostPort(hostport string) (string, uint16, bool) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || host == "" {
		return "", 0, false
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", 0, false
	}
	return host, uint16(n), true
}

// statusFor is the answer to a failed resolve or dial: 504 on a timeout,
// 502 otherwise.
func statusFor(err error) int {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
