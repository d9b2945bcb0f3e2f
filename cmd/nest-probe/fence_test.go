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

// The fence holds while the address answers and opens once it refuses.
func TestFenceWaitsUntilTheAddressRefuses(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
			// The policy applies after three connections got through.
			if accepted.Add(1) == 3 {
				_ = l.Close()
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := fence(ctx, l.Addr().String(), (&net.Dialer{}).DialContext); err != nil {
		t.Fatal(err)
	}
	if n := accepted.Load(); n != 3 {
		t.Errorf("the fence opened after %d connections got through, want 3: it must hold while the address answers", n)
	}
}

// One refusal between answers is not enough: the count starts again.
func TestFenceNeedsRefusalsInARow(t *testing.T) {
	answers := []bool{true, false, true, false, true, false, false, true}
	attempts := 0
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		ok := answers[attempts]
		attempts++
		if ok {
			c, s := net.Pipe()
			_ = s.Close()
			return c, nil
		}
		return nil, errors.New("i/o timeout")
	}
	if err := fence(context.Background(), "192.0.2.1:443", dial); err != nil {
		t.Fatal(err)
	}
	if attempts != 7 {
		t.Errorf("the fence opened after %d attempts, want 7 (the first two refusals in a row)", attempts)
	}
}

// An address that keeps answering fails the fence with a message for the
// tenant that names no address.
func TestFenceFailsWhenThePolicyNeverApplies(t *testing.T) {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, s := net.Pipe()
		_ = s.Close()
		return c, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := fence(ctx, "198.51.100.7:443", dial)
	if err == nil || !strings.Contains(err.Error(), "isolation NetworkPolicy is not in force") {
		t.Fatalf("fence = %v, want the policy named as not in force", err)
	}
	if strings.Contains(err.Error(), "198.51.100.7") {
		t.Errorf("the tenant's message names the host address: %v", err)
	}
}

func TestFenceUsage(t *testing.T) {
	var stderr strings.Builder
	if code := run([]string{"-fence", "127.0.0.1:1", "http://127.0.0.1/"}, &stderr); code != 2 {
		t.Errorf("-fence with a URL: exit %d, want 2", code)
	}
}
