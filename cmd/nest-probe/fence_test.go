package main

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// listen is a loopback listener that closes what it accepts and counts it.
func listen(t *testing.T) (net.Listener, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
			accepted.Add(1)
		}
	}()
	return l, &accepted
}

// The fence holds while the forbidden address answers and opens once it
// refuses, the allowed one answering.
func TestFenceWaitsUntilTheForbiddenAddressRefuses(t *testing.T) {
	allowed, _ := listen(t)
	forbidden, accepted := listen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		// The policy applies after three connections got through.
		if addr == forbidden.Addr().String() && accepted.Load() >= 3 {
			_ = forbidden.Close()
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	if err := fence(ctx, forbidden.Addr().String(), allowed.Addr().String(), dial); err != nil {
		t.Fatal(err)
	}
	if n := accepted.Load(); n != 3 {
		t.Errorf("the fence opened after %d connections to the forbidden address, want 3: it must hold while that answers", n)
	}
}

// answer is a dial that connects or fails as told.
func answer(ok bool) (net.Conn, error) {
	if !ok {
		return nil, errors.New("i/o timeout")
	}
	c, s := net.Pipe()
	_ = s.Close()
	return c, nil
}

// A round passes only with the allowed address reached and the forbidden
// one refused; the rounds that pass must follow each other.
func TestFenceNeedsIsolatedRoundsInARow(t *testing.T) {
	// Per round: does the allowed address answer, does the forbidden one.
	rounds := [][2]bool{
		{false, false}, // the network is not up: everything fails
		{true, true},   // up, not isolated yet
		{true, false},  // isolated
		{false, false}, // a blip: starts the count again
		{true, false},
		{true, false},
		{true, true}, // never reached
	}
	tries := map[bool]int{}
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) {
		allowed := addr == "allowed:1"
		r := rounds[tries[allowed]]
		tries[allowed]++
		if allowed {
			return answer(r[0])
		}
		return answer(r[1])
	}
	if err := fence(context.Background(), "forbidden:1", "allowed:1", dial); err != nil {
		t.Fatal(err)
	}
	if tries[true] != 6 || tries[false] != 6 {
		t.Errorf("the fence opened after %d rounds, want 6 (the first two isolated rounds in a row)", tries[true])
	}
}

// A fence that never sees isolation fails with a message for the tenant
// that names no address and says which half was missing.
func TestFenceFailsWhenThePodIsNeverIsolated(t *testing.T) {
	for _, tc := range []struct {
		name             string
		allowed, forbids bool
		want             string
	}{
		{"the policy never applies", true, false, "isolation NetworkPolicy is not in force"},
		{"the network never comes up", false, true, "did not reach its own API server"},
	} {
		dial := func(ctx context.Context, _, addr string) (net.Conn, error) {
			if addr == "10.100.0.10:443" {
				return answer(tc.allowed)
			}
			return answer(!tc.forbids)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := fence(ctx, "198.51.100.7:443", "10.100.0.10:443", dial)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: fence = %v, want %q", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "198.51.100.7") || strings.Contains(err.Error(), "10.100.0.10") {
			t.Errorf("%s: the tenant's message names an address: %v", tc.name, err)
		}
	}
}

func TestFenceUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-fence", "127.0.0.1:1", "-allowed", "127.0.0.1:2", "http://127.0.0.1/"},
		{"-fence", "127.0.0.1:1"},
	} {
		var stderr strings.Builder
		if code := run(args, &stderr); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}
