// These tests drive the proxy with kube-apiserver's own egress selector
// package, so they fail when the proxy and the API server's client
// disagree.

package egress

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiserverconfig "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/server/egressselector"
)

// upstreamSelector is kube-apiserver's egress selector built, as at its
// startup, from the file EgressSelectorConfiguration writes for sock.
func upstreamSelector(t *testing.T, sock string) *egressselector.EgressSelector {
	t.Helper()
	cfg, _ := readUpstream(t, sock)
	sel, err := egressselector.NewEgressSelector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// readUpstream writes EgressSelectorConfiguration(sock) to a file and reads
// it back with kube-apiserver's own reader, as at its startup.
func readUpstream(t *testing.T, sock string) (*apiserverconfig.EgressSelectorConfiguration, []byte) {
	t.Helper()
	data, err := EgressSelectorConfiguration(sock)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "egress-selector.yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := egressselector.ReadEgressSelectorConfiguration(file)
	if err != nil {
		t.Fatalf("kube-apiserver cannot read\n%s: %v", data, err)
	}
	return cfg, data
}

// TestUpstreamConfig reads the file with kube-apiserver's own reader and
// runs the validation kube-apiserver runs at startup
// (EgressSelectorOptions.ApplyTo), then builds its dialers from it.
func TestUpstreamConfig(t *testing.T) {
	sock := "/var/run/nest/egress.sock"
	cfg, data := readUpstream(t, sock)
	if errs := egressselector.ValidateEgressSelectorConfiguration(cfg); len(errs) > 0 {
		t.Fatalf("kube-apiserver refuses\n%s: %v", data, errs.ToAggregate())
	}
	if _, err := egressselector.NewEgressSelector(cfg); err != nil {
		t.Fatalf("kube-apiserver cannot build dialers from\n%s: %v", data, err)
	}
	checkConfig(t, sock, data, cfg)
}

// TestUpstreamClient dials through the proxy with kube-apiserver's own
// HTTPConnect dialer, so the proxy speaks what the real client expects.
func TestUpstreamClient(t *testing.T) {
	echo := newTarget(t, "127.0.0.1:0")
	refused := newTarget(t, "127.0.0.1:0")
	p := &Proxy{Allowed: only(echo.addrPort())}
	sock := startProxy(t, p)
	sel := upstreamSelector(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	for _, et := range []egressselector.EgressType{egressselector.Cluster, egressselector.ControlPlane} {
		t.Run(et.String(), func(t *testing.T) {
			dial, err := sel.Lookup(et.AsNetworkContext())
			if err != nil || dial == nil {
				t.Fatalf("Lookup(%s) = %v, %v", et, dial, err)
			}
			c, err := dial(ctx, "tcp", echo.l.Addr().String())
			if err != nil {
				t.Fatalf("dialling the echo through the proxy: %v", err)
			}
			defer c.Close()
			_ = c.SetDeadline(deadline(ctx))
			echoRoundTrip(t, c, c, "through kube-apiserver's dialer: "+et.String())

			_, err = dial(ctx, "tcp", refused.l.Addr().String())
			// What kube-apiserver puts into the error the tenant sees.
			want := fmt.Sprintf("proxy error from %s while dialing %s, code %d: 403 Forbidden", sock, refused.l.Addr(), http.StatusForbidden)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("dialling a refused destination: %v, want %q", err, want)
			}
			refused.assertNoDial(t)
		})
	}
	// etcd has no selection: kube-apiserver dials it directly.
	if dial, err := sel.Lookup(egressselector.Etcd.AsNetworkContext()); err != nil || dial != nil {
		t.Errorf("Lookup(etcd) = %v, %v; want no dialer", dial, err)
	}
}

// TestUpstreamClientNoSocket is kube-apiserver with the socket not there
// yet: each dial fails on its own, and succeeds once the proxy listens.
func TestUpstreamClientNoSocket(t *testing.T) {
	echo := newTarget(t, "127.0.0.1:0")
	sock := filepath.Join(t.TempDir(), "egress.sock")
	sel := upstreamSelector(t, sock)
	dial, err := sel.Lookup(egressselector.Cluster.AsNetworkContext())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if c, err := dial(ctx, "tcp", echo.l.Addr().String()); err == nil {
		c.Close()
		t.Fatal("dialled without a proxy")
	} else {
		t.Logf("without the socket, kube-apiserver's dial fails with: %v", err)
	}

	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	srvCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- (&Proxy{Allowed: only(echo.addrPort())}).Serve(srvCtx, l) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve = %v", err)
		}
	}()
	c, err := dial(ctx, "tcp", echo.l.Addr().String())
	if err != nil {
		t.Fatalf("dialling once the proxy listens: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline(ctx))
	echoRoundTrip(t, c, c, "late")
}

// deadline is ctx's deadline, for the connections the test reads.
func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
