package framework

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/nodenet"
	"github.com/nestdev/nest/internal/pullproxy"
	"github.com/nestdev/nest/internal/testutil"
)

// NodeHTTPClient is an HTTP client that dials from node's network
// namespace, as the node's own processes (its containerd) do, so that its
// 127.0.0.1 is the node's loopback. Requests time out after 20 s; the
// namespace handle is closed when the test ends.
func NodeHTTPClient(t testing.TB, node devcluster.Node) *http.Client {
	t.Helper()
	ns, err := netns.GetFromPath(node.NetnsPath())
	if err != nil {
		t.Fatalf("the network namespace of node %s: %v", node.Name, err)
	}
	t.Cleanup(func() { _ = ns.Close() })
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = nodenet.InNetNS(ns, func() error {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
}

// PullManifestFromNode asks node's pull proxy (pullproxy.DefaultAddress in
// its network namespace) for a manifest of registry (host:port), as the
// node's containerd asks it, and returns the answer's status and the start
// of its body. A refused connection (the proxy not listening yet) is tried
// again for up to two minutes; any other failure fails the test at once.
func PullManifestFromNode(t testing.TB, node devcluster.Node, registry string) (int, string) {
	t.Helper()
	client := NodeHTTPClient(t, node)
	url := "http://" + pullproxy.DefaultAddress + "/v2/pods/manifests/latest?ns=" + registry
	var resp *http.Response
	testutil.Eventually(t, 2*time.Minute, "node "+node.Name+"'s pull proxy answering", func() error {
		var err error
		resp, err = client.Get(url)
		if err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("GET %s on node %s: %v", url, node.Name, err)
		}
		return err
	})
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body)
}
