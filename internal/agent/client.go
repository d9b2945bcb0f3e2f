package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Client calls the agent of one node. It verifies that the agent's
// certificate chains to the agent CA and names the node, so an agent (or
// whoever stole its key) of one node cannot answer for another.
type Client struct {
	base string
	http *http.Client
}

// APIError is an answer other than 200 from the agent.
type APIError struct {
	StatusCode int
	Message    string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("agent answered %d: %s", e.StatusCode, e.Message)
}

// IsConflict reports whether err is the agent's refusal of an operation the
// node's state does not allow (409).
func IsConflict(err error) bool {
	var api *APIError
	return errors.As(err, &api) && api.StatusCode == http.StatusConflict
}

// clientTimeout bounds one call; Start waits up to DefaultBootstrapTimeout.
const clientTimeout = DefaultBootstrapTimeout + 30*time.Second

// NewClient returns a client for the agent of nodeName at host (the node's
// address; the port is DefaultPort unless port is set). caPEM is the agent
// CA; cert is the client's certificate of that CA.
func NewClient(nodeName, host string, port int, caPEM []byte, cert tls.Certificate) (*Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("agent CA: no PEM certificate")
	}
	if port == 0 {
		port = DefaultPort
	}
	transport := &http.Transport{
		TLSClientConfig: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			RootCAs:      pool,
			Certificates: []tls.Certificate{cert},
			// The address is an IP; the certificate must name the node.
			ServerName: nodeName,
		},
		ForceAttemptHTTP2: true,
	}
	return &Client{
		base: "https://" + net.JoinHostPort(host, strconv.Itoa(port)),
		http: &http.Client{Transport: transport, Timeout: clientTimeout},
	}, nil
}

// Status returns the node's state.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.do(ctx, http.MethodGet, PathStatus, nil, &st)
	return st, err
}

// Stop stops kube-proxy and the kubelet.
func (c *Client) Stop(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, PathStop, nil, nil)
}

// Reset takes the node out of its cluster; see Node.Reset.
func (c *Client) Reset(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, PathReset, nil, nil)
}

// Join prepares the node to join the cluster req names; see Node.Join.
func (c *Client) Join(ctx context.Context, req JoinRequest) error {
	return c.do(ctx, http.MethodPost, PathJoin, req, nil)
}

// Start starts the kubelet and kube-proxy; see Node.Start.
func (c *Client) Start(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, PathStart, nil, nil)
}

func (c *Client) do(ctx context.Context, method, path string, body, into any) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxRequestBytes))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e ErrorResponse
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = string(data)
		}
		return &APIError{StatusCode: resp.StatusCode, Message: e.Error}
	}
	if into == nil {
		return nil
	}
	return json.Unmarshal(data, into)
}
