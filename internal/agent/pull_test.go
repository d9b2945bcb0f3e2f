package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeAddress is a loopback host:port nothing listens on.
func freeAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// withPullProxy points env's node's pull proxy at a free loopback address,
// and stops the proxy when the test ends.
func withPullProxy(t *testing.T, env *testEnv) string {
	t.Helper()
	env.node.pullAddress = freeAddress(t)
	t.Cleanup(env.node.Close)
	return env.node.pullAddress
}

// pullManifest asks the proxy at addr for a manifest of the registry
// reg, as containerd does, and returns the status and body.
func pullManifest(t *testing.T, addr, reg string) (int, string, error) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + "/v2/pods/manifests/latest?ns=" + reg)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// assertDenies checks that the proxy at addr answers DENIED for reg, a
// registry at an address its deny list holds.
func assertDenies(t *testing.T, addr, reg string) {
	t.Helper()
	status, body, err := pullManifest(t, addr, reg)
	if err != nil {
		t.Fatalf("GET a manifest of %s from the pull proxy at %s: %v", reg, addr, err)
	}
	if status != http.StatusForbidden || !strings.Contains(body, "DENIED") {
		t.Fatalf("GET a manifest of %s = %d %q, want 403 DENIED", reg, status, body)
	}
}

// assertNotServing checks that nothing listens at addr.
func assertNotServing(t *testing.T, addr string) {
	t.Helper()
	_, _, err := pullManifest(t, addr, "192.0.2.1:1")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("GET from %s: %v, want connection refused: the pull proxy still serves", addr, err)
	}
}

func joinWithPullProxy(t *testing.T, deny ...string) JoinRequest {
	t.Helper()
	req := validJoinRequest(t)
	req.PullProxy = &PullProxy{Deny: deny}
	return req
}

// joinDenying joins env's node with a pull proxy denying cidr and checks
// that the proxy at addr refuses registry, an address in it.
func joinDenying(t *testing.T, env *testEnv, addr, cidr, registry string) {
	t.Helper()
	if err := env.node.Join(context.Background(), joinWithPullProxy(t, cidr)); err != nil {
		t.Fatal(err)
	}
	assertDenies(t, addr, registry)
}

func TestJoinWithPullProxyServesItUntilAJoinWithout(t *testing.T) {
	env := newResetEnv(t)
	addr := withPullProxy(t, env)
	ctx := context.Background()
	assertNotServing(t, addr)

	joinDenying(t, env, addr, "192.0.2.0/24", "192.0.2.1:1")
	assertExists(t, env.node.pullProxyFile())

	// A new deny list applies to the running proxy.
	joinDenying(t, env, addr, "198.51.100.0/24", "198.51.100.1:1")

	if err := env.node.Join(ctx, validJoinRequest(t)); err != nil {
		t.Fatal(err)
	}
	assertNotServing(t, addr)
	assertAbsent(t, env.node.pullProxyFile())
}

func TestResetStopsThePullProxy(t *testing.T) {
	env := newResetEnv(t)
	addr := withPullProxy(t, env)
	ctx := context.Background()
	joinDenying(t, env, addr, "192.0.2.0/24", "192.0.2.1:1")
	if err := env.node.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	assertNotServing(t, addr)
	assertAbsent(t, env.node.pullProxyFile())
}

func TestRestartedAgentServesTheSavedPullProxy(t *testing.T) {
	env := newResetEnv(t)
	addr := withPullProxy(t, env)
	if err := env.node.Join(context.Background(), joinWithPullProxy(t, "192.0.2.0/24")); err != nil {
		t.Fatal(err)
	}
	// The agent's process ends; a new one starts on the same node.
	env.node.Close()
	assertNotServing(t, addr)

	restarted := NewNode(env.cfg, env.services)
	restarted.pullAddress = addr
	t.Cleanup(restarted.Close)
	if err := restarted.restartPullProxy(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertDenies(t, addr, "192.0.2.1:1")
}

func TestRestartedAgentServesNoPullProxyAfterAJoinWithout(t *testing.T) {
	env := newResetEnv(t)
	addr := withPullProxy(t, env)
	ctx := context.Background()
	if err := env.node.Join(ctx, joinWithPullProxy(t, "192.0.2.0/24")); err != nil {
		t.Fatal(err)
	}
	if err := env.node.Join(ctx, validJoinRequest(t)); err != nil {
		t.Fatal(err)
	}
	restarted := NewNode(env.cfg, env.services)
	restarted.pullAddress = addr
	t.Cleanup(restarted.Close)
	if err := restarted.restartPullProxy(ctx); err != nil {
		t.Fatal(err)
	}
	assertNotServing(t, addr)
}

func TestJoinFailsAndWritesNothingWhenThePullProxyCannotListen(t *testing.T) {
	env := newResetEnv(t)
	addr := withPullProxy(t, env)
	// The host's proxy still serves the address.
	taken, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	before := env.snapshot(t)
	err = env.node.Join(context.Background(), joinWithPullProxy(t, "192.0.2.0/24"))
	var bad *BadRequestError
	if err == nil || errors.As(err, &bad) || !strings.HasPrefix(err.Error(), "pull proxy: ") {
		t.Fatalf("Join() = %v, want a server error naming the pull proxy", err)
	}
	if !reflect.DeepEqual(env.snapshot(t), before) {
		t.Error("Join wrote files though the pull proxy could not listen")
	}
}

func TestJoinRefusesABadPullProxyCIDR(t *testing.T) {
	env := newResetEnv(t)
	addr := withPullProxy(t, env)
	err := env.node.Join(context.Background(), joinWithPullProxy(t, "10.0.0.0/8", "10.1.2.3"))
	var bad *BadRequestError
	if !errors.As(err, &bad) || !strings.HasPrefix(err.Error(), "pullProxy.deny[1]:") {
		t.Fatalf("Join() = %v, want a *BadRequestError naming pullProxy.deny[1]", err)
	}
	assertNotServing(t, addr)
}
