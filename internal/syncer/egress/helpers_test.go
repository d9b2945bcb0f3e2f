package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"testing"
	"time"
)

// testTimeout bounds every wait in these tests; nothing sleeps.
const testTimeout = 10 * time.Second

// startProxy serves p on a Unix socket in a fresh t.TempDir and returns
// the socket's path. Cleanup stops it and checks that Serve returned nil.
func startProxy(t *testing.T, p *Proxy) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "egress.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		requireServeReturned(t, served)
	})
	return sock
}

// target is a TCP server on loopback that echoes what it reads until the
// client half-closes, then half-closes too. accepted gets the remote
// address of each connection it accepts, in order.
type target struct {
	l        net.Listener
	accepted chan string
}

func newTarget(t *testing.T, addr string) *target {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{l: l, accepted: make(chan string, 64)}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tg.accepted <- c.RemoteAddr().String()
			go func() {
				defer c.Close()
				if _, err := io.Copy(c, c); err == nil {
					_ = c.(*net.TCPConn).CloseWrite()
				}
				// Wait for the client's close, so the echo's end is a
				// half-close the client sees as EOF, not a reset.
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return tg
}

func (tg *target) addrPort() netip.AddrPort {
	return tg.l.Addr().(*net.TCPAddr).AddrPort()
}

// assertNoDial fails the test if anything but its own probe connected to
// tg. A dial the proxy made would have completed before the proxy
// answered, so it would be in tg's accept queue ahead of the probe.
func (tg *target) assertNoDial(t *testing.T) {
	t.Helper()
	probe, err := net.Dial("tcp", tg.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	select {
	case got := <-tg.accepted:
		if got != probe.LocalAddr().String() {
			t.Errorf("the target accepted a connection from %s before the probe from %s: the proxy dialled it", got, probe.LocalAddr())
		}
	case <-time.After(testTimeout):
		t.Fatal("the target never accepted the probe")
	}
}

// connect sends CONNECT dest the way kube-apiserver's HTTPConnect dialer
// does and returns the response and the connection, with its reader.
func connect(t *testing.T, sock, dest string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	return rawRequest(t, sock, fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", dest))
}

func rawRequest(t *testing.T, sock, request string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(testTimeout))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", request, err)
	}
	return res, c, br
}

// body reads res's body whole.
func body(t *testing.T, res *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// echoRoundTrip sends msg through a tunnel, half-closes, and checks that
// the echo comes back whole and then the end of the stream.
func echoRoundTrip(t *testing.T, c net.Conn, r io.Reader, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading the echo: %v", err)
	}
	if string(got) != msg {
		t.Errorf("echo = %q, want %q", got, msg)
	}
}

// fakeResolver answers from a map; a missing name is not found.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	if network != "ip" {
		return nil, fmt.Errorf("network %q, want ip", network)
	}
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// only allows exactly the given destinations: loopback test servers,
// which Published always refuses.
func only(allowed ...netip.AddrPort) func(netip.AddrPort) bool {
	return func(ap netip.AddrPort) bool {
		for _, a := range allowed {
			if ap == a {
				return true
			}
		}
		return false
	}
}

// eventually polls cond every millisecond until it holds, and fails the
// test if it still does not after testTimeout.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		<-tick.C
	}
}

// requireServeReturned checks that Serve, whose result served carries,
// returns nil within testTimeout of its context's end.
func requireServeReturned(t *testing.T, served <-chan error) {
	t.Helper()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	case <-time.After(testTimeout):
		t.Error("Serve did not return after its context ended")
	}
}
