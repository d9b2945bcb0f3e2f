package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"k8s.io/klog/v2"
)

// maxRequestBytes bounds a request body: a JoinRequest is two certificates
// and a few short strings.
const maxRequestBytes = 64 << 10

// Handler serves the agent API for node. Every request must come over TLS
// with a verified client certificate whose common name is in allowed; any
// other gets 403 and touches nothing.
func Handler(node *Node, allowed []string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathStatus, func(w http.ResponseWriter, r *http.Request) {
		st, err := node.Status(r.Context())
		reply(w, r, st, err)
	})
	for path, op := range map[string]func(context.Context) error{
		PathStop:  node.Stop,
		PathReset: node.Reset,
		PathStart: node.Start,
	} {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
			reply(w, r, struct{}{}, op(r.Context()))
		})
	}
	mux.HandleFunc("POST "+PathJoin, func(w http.ResponseWriter, r *http.Request) {
		var req JoinRequest
		if err := decodeStrict(r, &req); err != nil {
			reply(w, r, nil, &BadRequestError{Err: err})
			return
		}
		if err := req.Validate(); err != nil {
			reply(w, r, nil, &BadRequestError{Err: err})
			return
		}
		klog.InfoS("Join", "client", clientName(r), "request", req.String())
		reply(w, r, struct{}{}, node.Join(r.Context(), req))
	})
	return authorize(mux, allowed)
}

// authorize passes on only requests whose verified client certificate's
// common name is in allowed. The TLS handshake already refused certificates
// of other CAs; this refuses other holders of the agent CA's certificates.
func authorize(next http.Handler, allowed []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := clientName(r)
		if name == "" || !slices.Contains(allowed, name) {
			klog.InfoS("Refused a client", "client", name, "remote", r.RemoteAddr, "path", r.URL.Path)
			writeJSON(w, http.StatusForbidden, ErrorResponse{Error: fmt.Sprintf("client %q may not use this agent: it serves only %v", name, allowed)})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// clientName is the common name of the request's verified client
// certificate; empty without one.
func clientName(r *http.Request) string {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return ""
	}
	return r.TLS.VerifiedChains[0][0].Subject.CommonName
}

func decodeStrict(r *http.Request, into any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxRequestBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("the body must be one JSON object of the API's fields (at most %d bytes): %w", maxRequestBytes, err)
	}
	if dec.More() {
		return errors.New("the body must be one JSON object, with nothing after it")
	}
	return nil
}

// reply writes result, or err with the status its type stands for.
func reply(w http.ResponseWriter, r *http.Request, result any, err error) {
	if err == nil {
		writeJSON(w, http.StatusOK, result)
		return
	}
	status := http.StatusInternalServerError
	var conflict *ConflictError
	var bad *BadRequestError
	switch {
	case errors.As(err, &bad):
		status = http.StatusBadRequest
	case errors.As(err, &conflict):
		status = http.StatusConflict
	}
	klog.InfoS("Request failed", "client", clientName(r), "path", r.URL.Path, "status", status, "err", err)
	writeJSON(w, status, ErrorResponse{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ServerTLSConfig is the agent's TLS configuration: TLS 1.3, its serving
// certificate, and a client certificate that chains to the agent CA required.
func ServerTLSConfig(files TLSFiles) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls.certFile, tls.keyFile: %w", err)
	}
	caPEM, err := os.ReadFile(files.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("tls.clientCAFile: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("tls.clientCAFile: %s holds no PEM certificate", files.ClientCAFile)
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, nil
}

// Run serves the agent for cfg until ctx ends. It first saves the node's own
// configuration (SaveOwnConfig), refuses a kubelet.clientCAFile that the
// node's own kubelet reads (checkKubeletClientCA), and serves the pull proxy
// again if the last Join asked for one (restartPullProxy; a failure is
// logged, and the API served all the same); it stops the proxy when it
// returns. Both `nest agent` (real hosts, RunSystemd) and the
// local host cluster's agents come here.
func Run(ctx context.Context, cfg Config, services Services) error {
	node := NewNode(cfg, services)
	if err := node.SaveOwnConfig(); err != nil {
		return err
	}
	if err := node.checkKubeletClientCA(); err != nil {
		return err
	}
	// The API serves even when the saved proxy cannot: without it the
	// manager could not reset or release the node (the node's pulls
	// through the proxy's address fail meanwhile, closed).
	if err := node.restartPullProxy(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "The node's pull proxy is not served; pulls of registries without a hosts.toml of their own fail until a join serves it again")
	}
	defer node.Close()
	tlsConfig, err := ServerTLSConfig(cfg.TLS)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{
		Handler:           Handler(node, cfg.AllowedClients),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	klog.InfoS("nest-agent serving", "node", cfg.NodeName, "address", ln.Addr().String(), "clients", cfg.AllowedClients)
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
