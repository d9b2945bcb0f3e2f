package dashboard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// ServeOptions configure Serve.
type ServeOptions struct {
	// Address to listen on, host:port; port 0 picks a free one.
	Address string
	// Clients gives each request its user's client.
	Clients ClientSource
	// AllowRemote lets a dashboard that acts as the kubeconfig's user listen
	// on a non-loopback address. Without it Serve refuses: anyone who reaches
	// the port would act with the user's credentials.
	AllowRemote bool
	// TLSCertFile and TLSKeyFile, when both set, serve HTTPS.
	TLSCertFile, TLSKeyFile string
	// Out receives the URL once the server listens.
	Out io.Writer
}

// IsLoopback reports whether host (a name or IP, no port) only reaches this
// machine. An empty host listens on every address and is not loopback.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve listens on o.Address and serves the dashboard until ctx ends.
func Serve(ctx context.Context, o ServeOptions) error {
	host, _, err := net.SplitHostPort(o.Address)
	if err != nil {
		return fmt.Errorf("--address %q: want host:port, such as 127.0.0.1:8080: %w", o.Address, err)
	}
	loopback := IsLoopback(host)
	if !loopback && !o.Clients.SignIn() && !o.AllowRemote {
		return fmt.Errorf("--address %q is reachable from other machines, and this dashboard acts with your kubeconfig's credentials: "+
			"listen on 127.0.0.1, or pass --allow-remote if that is what you want, or run it with --auth token so each user signs in", o.Address)
	}
	tls := o.TLSCertFile != "" && o.TLSKeyFile != ""
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return errors.New("--tls-cert-file and --tls-key-file go together: give both or neither")
	}
	if !loopback && o.Clients.SignIn() && !tls {
		return fmt.Errorf("--address %q is reachable from other machines and users send bearer tokens: give --tls-cert-file and --tls-key-file, or listen on 127.0.0.1 and reach it through kubectl port-forward", o.Address)
	}
	opts := Options{Clients: o.Clients, Context: ctx}
	if loopback {
		opts.AllowedHosts = LoopbackHosts(host)
	}
	srv, err := New(opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Address)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.Address, err)
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	if o.Out != nil {
		fmt.Fprintf(o.Out, "Nest dashboard on %s://%s/ (%s)\n", scheme, ln.Addr(), o.Clients.Identity(&http.Request{}))
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// Request contexts end with ctx, so live streams close on shutdown.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() {
		if tls {
			errc <- hs.ServeTLS(ln, o.TLSCertFile, o.TLSKeyFile)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	klog.InfoS("Dashboard stopping")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
