package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProxyConnect(t *testing.T) {
	echo := newTarget(t, "127.0.0.1:0")
	refused := newTarget(t, "127.0.0.1:0")
	port := echo.addrPort().Port()
	// A refused server on the echo's port, on another loopback address,
	// for a name whose first address is refused and second allowed.
	refusedSamePort := newTarget(t, fmt.Sprintf("127.0.0.2:%d", port))

	p := &Proxy{
		Allowed: only(echo.addrPort()),
		Resolver: fakeResolver{
			"echo.example":   {netip.MustParseAddr("127.0.0.1")},
			"mapped.example": {netip.MustParseAddr("::ffff:127.0.0.1")},
			"mixed.example":  {netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.3")},
			"host.example":   {netip.MustParseAddr("127.0.0.2")},
			"empty.example":  {},
		},
	}
	sock := startProxy(t, p)

	tests := []struct {
		name     string
		dest     string
		want     int
		bodyHas  string
		notDialt []*target
	}{
		{name: "allowed address", dest: echo.l.Addr().String(), want: http.StatusOK},
		{name: "allowed name", dest: fmt.Sprintf("echo.example:%d", port), want: http.StatusOK},
		{name: "allowed name, v4-mapped", dest: fmt.Sprintf("mapped.example:%d", port), want: http.StatusOK},
		{name: "allowed address, v4-mapped", dest: fmt.Sprintf("[::ffff:127.0.0.1]:%d", port), want: http.StatusOK},
		{name: "name first refused then allowed", dest: fmt.Sprintf("mixed.example:%d", port), want: http.StatusOK, notDialt: []*target{refusedSamePort}},
		{name: "refused address", dest: refused.l.Addr().String(), want: http.StatusForbidden,
			bodyHas: refused.l.Addr().String(), notDialt: []*target{refused}},
		{name: "name to refused address", dest: fmt.Sprintf("host.example:%d", port), want: http.StatusForbidden,
			bodyHas: fmt.Sprintf("host.example:%d", port), notDialt: []*target{refusedSamePort}},
		{name: "allowed address on a refused port", dest: fmt.Sprintf("echo.example:%d", refused.addrPort().Port()), want: http.StatusForbidden,
			notDialt: []*target{refused}},
		{name: "unknown name", dest: fmt.Sprintf("nowhere.example:%d", port), want: http.StatusBadGateway},
		{name: "name without addresses", dest: fmt.Sprintf("empty.example:%d", port), want: http.StatusBadGateway},
		{name: "no port", dest: "127.0.0.1", want: http.StatusBadRequest},
		{name: "port 0", dest: "127.0.0.1:0", want: http.StatusBadRequest},
		// net/http answers this one itself: not counted.
		{name: "named port", dest: "127.0.0.1:https", want: http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, c, r := connect(t, sock, tt.dest)
			if res.StatusCode != tt.want {
				t.Fatalf("CONNECT %s: %s, want %d", tt.dest, res.Status, tt.want)
			}
			if tt.want == http.StatusOK {
				echoRoundTrip(t, c, r, "ping "+tt.name)
			} else {
				if b := body(t, res); !strings.Contains(b, tt.bodyHas) {
					t.Errorf("body %q does not name %q", b, tt.bodyHas)
				}
				// Every refusal ends the connection.
				if n, err := r.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
					t.Errorf("after the answer: read %d bytes, %v; want EOF", n, err)
				}
			}
			for _, tg := range tt.notDialt {
				tg.assertNoDial(t)
			}
		})
	}
	// Polled: the last tunnel's handler may still be returning.
	eventually(t, "stats", func() error {
		want := Stats{Allowed: 5, Refused: 3, Failed: 2, Invalid: 2}
		if got := p.Stats(); got != want {
			return fmt.Errorf("Stats = %+v, want %+v", got, want)
		}
		return nil
	})
}

func TestProxyOtherRequests(t *testing.T) {
	p := &Proxy{Allowed: func(netip.AddrPort) bool { return true }, MaxHeaderBytes: 1024}
	sock := startProxy(t, p)
	tests := []struct {
		name, request string
		want          int
	}{
		{"GET", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusMethodNotAllowed},
		{"POST", "POST http://10.0.0.1/ HTTP/1.1\r\nHost: 10.0.0.1\r\nContent-Length: 0\r\n\r\n", http.StatusMethodNotAllowed},
		{"CONNECT to a path", "CONNECT /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", http.StatusBadRequest},
		{"header too large", "CONNECT 10.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + strings.Repeat("x", 8<<10) + "\r\n\r\n",
			http.StatusRequestHeaderFieldsTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _, _ := rawRequest(t, sock, tt.request)
			if res.StatusCode != tt.want {
				t.Errorf("%s", res.Status)
			}
			if tt.want == http.StatusMethodNotAllowed && res.Header.Get("Allow") != http.MethodConnect {
				t.Errorf("Allow = %q, want CONNECT", res.Header.Get("Allow"))
			}
		})
	}
}

func TestProxyReadHeaderTimeout(t *testing.T) {
	sock := startProxy(t, &Proxy{ReadHeaderTimeout: 50 * time.Millisecond})
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(testTimeout))
	// Half a request line, then nothing: the proxy hangs up.
	if _, err := io.WriteString(c, "CONNECT 10.0."); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the proxy kept a silent client past its header timeout (read %q)", b)
	}
}

func TestProxyMaxTunnels(t *testing.T) {
	echo := newTarget(t, "127.0.0.1:0")
	p := &Proxy{Allowed: only(echo.addrPort()), MaxTunnels: 1}
	sock := startProxy(t, p)
	dest := echo.l.Addr().String()

	res, first, _ := connect(t, sock, dest)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("first CONNECT: %s", res.Status)
	}
	res, _, _ = connect(t, sock, dest)
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("CONNECT beyond MaxTunnels: %s, want 503", res.Status)
	}
	if got := p.Stats(); got.Busy != 1 || got.Active != 1 {
		t.Errorf("Stats = %+v, want Busy 1, Active 1", got)
	}
	// Closing the first tunnel frees its slot.
	first.Close()
	eventually(t, "a tunnel after the first closed", func() error {
		res, c, r := connect(t, sock, dest)
		if res.StatusCode != http.StatusOK {
			c.Close()
			return errors.New(res.Status)
		}
		echoRoundTrip(t, c, r, "again")
		return nil
	})
}

func TestProxyDialFailure(t *testing.T) {
	// A port nothing listens on: listened on, then closed.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().(*net.TCPAddr).AddrPort()
	l.Close()
	p := &Proxy{Allowed: only(closed)}
	sock := startProxy(t, p)
	res, _, _ := connect(t, sock, closed.String())
	if res.StatusCode != http.StatusBadGateway {
		t.Errorf("CONNECT to a closed port: %s, want 502", res.Status)
	}
	if got := p.Stats(); got.Failed != 1 {
		t.Errorf("Stats = %+v, want Failed 1", got)
	}
}

func TestProxyTunnelBothWays(t *testing.T) {
	// A target that speaks first and keeps talking after the client has
	// half-closed: bytes flow both ways, each end sees the other's EOF.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fromClient := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.WriteString(c, "hello ")
		b, _ := io.ReadAll(c)
		fromClient <- string(b)
		_, _ = io.WriteString(c, "bye")
	}()
	dest := l.Addr().(*net.TCPAddr).AddrPort()
	sock := startProxy(t, &Proxy{Allowed: only(dest)})
	res, c, r := connect(t, sock, dest.String())
	if res.StatusCode != http.StatusOK {
		t.Fatal(res.Status)
	}
	big := strings.Repeat("0123456789abcdef", 64<<10) // 1 MiB
	if _, err := io.WriteString(c, big); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello bye" {
		t.Errorf("client read %q, want %q", got, "hello bye")
	}
	if b := <-fromClient; b != big {
		t.Errorf("target read %d bytes, want %d", len(b), len(big))
	}
}

func TestProxyShutdown(t *testing.T) {
	echo := newTarget(t, "127.0.0.1:0")
	sock := filepath.Join(t.TempDir(), "egress.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Allowed: only(echo.addrPort())}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, l) }()

	res, tun, r := connect(t, sock, echo.l.Addr().String())
	if res.StatusCode != http.StatusOK {
		t.Fatal(res.Status)
	}
	// A connection that has not sent its request yet.
	idle, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_ = idle.SetDeadline(time.Now().Add(testTimeout))

	cancel()
	requireServeReturned(t, served)
	if t.Failed() {
		t.FailNow()
	}
	// The open tunnel and the idle connection are closed, not left open.
	_ = tun.SetDeadline(time.Now().Add(testTimeout))
	if _, err := io.ReadAll(r); isTimeout(err) {
		t.Error("the tunnel stayed open after shutdown")
	}
	if _, err := io.ReadAll(idle); isTimeout(err) {
		t.Error("an idle connection stayed open after shutdown")
	}
	if got := p.Stats().Active; got != 0 {
		t.Errorf("Active = %d after shutdown, want 0", got)
	}
	// The listener is closed: its socket file is gone and nothing answers.
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		t.Error("the socket still accepts connections after shutdown")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
