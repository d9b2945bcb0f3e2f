package main

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Fence timings. A forbidden attempt that gets no answer within
// fenceAttempt counts as refused: a host API server a pod may reach
// answers a SYN in well under a millisecond on the node's own network, and
// a NetworkPolicy enforcer drops what it refuses, so a refusal is mostly
// this timeout. The allowed address gets longer, as a slow answer only
// delays the fence. fenceRounds rounds in a row must pass, so one slow
// answer under load does not open the fence early.
const (
	fenceAttempt        = 150 * time.Millisecond
	fenceAllowedAttempt = time.Second
	fenceInterval       = 50 * time.Millisecond
	fenceRounds         = 2
	defaultFenceBy      = 2 * time.Minute
)

// dialFunc dials a TCP address; tests replace it.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// fence returns once fenceRounds rounds in a row found this pod's network
// isolated: allowed, an address the pod's policies allow (its own API
// server), connects, and forbidden, one they refuse (the host API server),
// does not. Both halves matter: a network that is not up yet refuses
// everything, which alone would look like isolation, and a network plugin
// that has not seen the pod yet lets everything through. Every connection
// is closed at once. It fails when ctx ends first, with an error that names
// no address, for the tenant's event.
//
// It runs as the first init container of a tenant pod, so no container of
// the tenant's runs before its pod is isolated: a network plugin applies a
// pod's policies only once it has seen the pod, which can be a second after
// the pod's network is up, and a connection opened in that second outlives
// the policy.
func fence(ctx context.Context, forbidden, allowed string, dial dialFunc) error {
	passed, rounds := 0, 0
	var reached, isolated bool
	tick := time.NewTicker(fenceInterval)
	defer tick.Stop()
	for {
		rounds++
		reached = try(ctx, dial, allowed, fenceAllowedAttempt)
		isolated = !try(ctx, dial, forbidden, fenceAttempt) && ctx.Err() == nil
		if reached && isolated {
			if passed++; passed >= fenceRounds {
				return nil
			}
			continue
		}
		passed = 0
		select {
		case <-ctx.Done():
			why := "its isolation NetworkPolicy is not in force"
			if !reached {
				why = "it did not reach its own API server"
			}
			return fmt.Errorf("the pod's network is not ready after %d tries: %s; the host's network plugin must enforce NetworkPolicy (ask the platform team)", rounds, why)
		case <-tick.C:
		}
	}
}

// try reports whether addr accepted a connection within timeout; the
// connection is closed at once.
func try(ctx context.Context, dial dialFunc, addr string, timeout time.Duration) bool {
	attempt, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dial(attempt, "tcp", addr)
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// runFence is `nest-probe -fence FORBIDDEN -allowed ALLOWED [-timeout 2m]`.
func runFence(forbidden, allowed string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return fence(ctx, forbidden, allowed, (&net.Dialer{}).DialContext)
}
