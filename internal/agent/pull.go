package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/atomicfile"
	"github.com/nestdev/nest/internal/pullproxy"
)

// savedPullProxy is the file in Config.SavedDir that holds the pull proxy
// setting of the last Join, so that an agent restarted while the node is in
// a tenant cluster serves the proxy again: the manager does not join a
// kubelet that already runs joined there.
const savedPullProxy = "pull-proxy.json"

// pullServer is the agent's running pull proxy.
type pullServer struct {
	setting PullProxy
	proxy   *pullproxy.Proxy
	cancel  context.CancelFunc
	// done is closed once pullproxy.Serve returned and the listener is closed.
	done chan struct{}
}

// stopped reports whether Serve has returned.
func (s *pullServer) stopped() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (n *Node) pullProxyFile() string { return filepath.Join(n.cfg.SavedDir, savedPullProxy) }

// setPullProxy serves the node's pull proxy as p says, or stops it when p is
// nil, and saves the setting (or removes it) for restartPullProxy. A
// running proxy takes a new deny list in place; one whose plain HTTP
// registries change is started again. It fails when the proxy cannot
// listen, such as when something else serves the address.
func (n *Node) setPullProxy(ctx context.Context, p *PullProxy) error {
	if p == nil {
		n.stopPullProxy()
		if err := os.Remove(n.pullProxyFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("pull proxy: %w", err)
		}
		return nil
	}
	if err := n.servePullProxy(ctx, *p); err != nil {
		return err
	}
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return atomicfile.Write(n.pullProxyFile(), data, 0o600)
}

// servePullProxy starts the proxy, or updates the running one, for p.
func (n *Node) servePullProxy(ctx context.Context, p PullProxy) error {
	deny, err := p.denyPrefixes()
	if err != nil {
		return &BadRequestError{Err: err}
	}
	if n.pull != nil && n.pull.stopped() {
		// Serve ended on its own (its error is logged): start it again.
		n.stopPullProxy()
	}
	if n.pull != nil && slices.Equal(n.pull.setting.PlainHTTP, p.PlainHTTP) {
		n.pull.proxy.SetDeny(deny)
		n.pull.setting = p
		return nil
	}
	n.stopPullProxy()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", n.pullAddress)
	if err != nil {
		return fmt.Errorf("pull proxy: %w: the node's pull proxy address must be free while the node is out of the host (is the host's node network agent still running here?)", err)
	}
	log := klog.Background().WithName("pull-proxy")
	proxy := pullproxy.New(pullproxy.Config{Deny: deny, PlainHTTP: p.PlainHTTP, Log: log})
	// The proxy outlives the request that started it.
	serveCtx, cancel := context.WithCancel(context.Background())
	s := &pullServer{setting: p, proxy: proxy, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := pullproxy.Serve(serveCtx, ln, proxy); err != nil {
			log.Error(err, "The pull proxy stopped serving")
		}
	}()
	log.Info("Serving", "address", ln.Addr().String(), "deny", p.Deny)
	n.pull = s
	return nil
}

// stopPullProxy stops the running proxy, if any, and returns once its
// listener is closed, so the address is free for the host's proxy.
func (n *Node) stopPullProxy() {
	if n.pull == nil {
		return
	}
	n.pull.cancel()
	<-n.pull.done
	n.pull = nil
}

// restartPullProxy serves the proxy the last Join asked for, as saved in
// Config.SavedDir; without a saved setting it does nothing.
func (n *Node) restartPullProxy(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	data, err := os.ReadFile(n.pullProxyFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pull proxy: %w", err)
	}
	var p PullProxy
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("pull proxy: %s: %w (remove it and have the manager join the node again)", n.pullProxyFile(), err)
	}
	return n.servePullProxy(ctx, p)
}

// Close stops the pull proxy, keeping its saved setting for the agent's
// next start.
func (n *Node) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopPullProxy()
}
