package main

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Fence timings. An attempt that gets no answer within fenceAttempt counts
// as refused: a host API server a pod may reach answers a SYN in well under
// a millisecond on the node's own network, and a NetworkPolicy enforcer
// drops what it refuses, so a refusal is mostly this timeout.
// fenceRefusals refusals in a row are required, so one slow answer under
// load does not open the fence early.
const (
	fenceAttempt   = 150 * time.Millisecond
	fenceInterval  = 50 * time.Millisecond
	fenceRefusals  = 2
	defaultFenceBy = 2 * time.Minute
)

// dialFunc dials a TCP address; tests replace it.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// fence returns once addr, an address the pod's isolation NetworkPolicy
// refuses (the host API server), has refused fenceRefusals attempts in a
// row from this pod's network: the policy is then in force for the pod.
// Every connection that succeeds is closed at once and resets the count.
// It fails when ctx ends first, with an error that names no address, for
// the tenant's event.
//
// It runs as the first init container of a tenant pod, so no container of
// the tenant's runs before its pod is isolated: a network plugin applies a
// pod's policies only once it has seen the pod, which can be a second after
// the pod's network is up, and a connection opened in that second outlives
// the policy.
func fence(ctx context.Context, addr string, dial dialFunc) error {
	refusals, attempts := 0, 0
	tick := time.NewTicker(fenceInterval)
	defer tick.Stop()
	for {
		attempt, cancel := context.WithTimeout(ctx, fenceAttempt)
		conn, err := dial(attempt, "tcp", addr)
		cancel()
		attempts++
		if err == nil {
			_ = conn.Close()
			refusals = 0
		} else if ctx.Err() == nil {
			if refusals++; refusals >= fenceRefusals {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the pod's network still reached the host after %d attempts: its isolation NetworkPolicy is not in force; "+
				"the host's network plugin must enforce NetworkPolicy (ask the platform team)", attempts)
		case <-tick.C:
		}
	}
}

// runFence is `nest-probe -fence ADDR [-timeout 2m]`.
func runFence(addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return fence(ctx, addr, (&net.Dialer{}).DialContext)
}
