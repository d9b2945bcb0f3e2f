package kindsync

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestTerminalErrorsAreNotRetried(t *testing.T) {
	var calls atomic.Int32
	k := New("terminal-test", 1, func(context.Context, string) (time.Duration, error) {
		calls.Add(1)
		return 0, fmt.Errorf("copy of shop/x: %w", Terminal(errors.New("name taken")))
	}, nil)
	k.Add("shop/x")
	if !k.processNext(context.Background()) {
		t.Fatal("queue shut down")
	}
	if k.Queue.Len() != 0 || k.Queue.NumRequeues("shop/x") != 0 {
		t.Errorf("terminal error requeued: len %d, requeues %d", k.Queue.Len(), k.Queue.NumRequeues("shop/x"))
	}
	if calls.Load() != 1 {
		t.Errorf("%d syncs, want 1", calls.Load())
	}
}

func TestFailedKeysAreRetriedUntilTheySucceed(t *testing.T) {
	var calls atomic.Int32
	k := New("retry-test", 1, func(context.Context, string) (time.Duration, error) {
		if calls.Add(1) < 3 {
			return 0, errors.New("host API server unavailable")
		}
		return 0, nil
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	k.Add("shop/x")
	poll(t, "three syncs", func() bool { return calls.Load() == 3 })
	poll(t, "key forgotten", func() bool { return k.Queue.NumRequeues("shop/x") == 0 && k.Queue.Len() == 0 })
	if IsTerminal(errors.New("host API server unavailable")) {
		t.Error("a plain error reads as terminal")
	}
}

func TestRequeueAfterBringsTheKeyBack(t *testing.T) {
	var calls atomic.Int32
	k := New("requeue-test", 1, func(context.Context, string) (time.Duration, error) {
		if calls.Add(1) == 1 {
			return time.Millisecond, nil
		}
		return 0, nil
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	k.Add("shop/token")
	poll(t, "the key synced again", func() bool { return calls.Load() == 2 })
}

func TestResyncPutsEveryKnownKeyBack(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	k := New("resync-test", 2, func(_ context.Context, key string) (time.Duration, error) {
		mu.Lock()
		defer mu.Unlock()
		seen[key]++
		return 0, nil
	}, func() []string { return []string{"a/one", "a/two"} })
	k.Resync = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go k.Run(ctx)
	poll(t, "both keys synced twice without an event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return seen["a/one"] >= 2 && seen["a/two"] >= 2
	})
}

func TestRunShutsTheQueueDownWhenItsContextEnds(t *testing.T) {
	k := New("shutdown-test", 1, func(context.Context, string) (time.Duration, error) { return 0, nil }, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.Run(ctx); close(done) }()
	cancel()
	poll(t, "Run returned", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	if !k.Queue.ShuttingDown() {
		t.Error("the queue is still open after Run returned")
	}
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
