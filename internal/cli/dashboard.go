package cli

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/nestdev/nest/internal/dashboard"
)

// In-cluster defaults: the host API server's address comes from the
// environment the kubelet sets, its CA from a mounted file.
const (
	defaultCAFile  = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
	authKubeconfig = "kubeconfig"
	authToken      = "token"
)

type dashboardFlags struct {
	address, auth, caFile, certFile, keyFile string
	allowRemote                              bool
}

func newDashboardCommand(host *hostFlags) *cobra.Command {
	f := &dashboardFlags{}
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard of virtual clusters, acting with your own host credentials",
		Long: `Serves the Nest dashboard: every virtual cluster you may list, its health,
control plane, share and host pods, and forms to create, resize and delete.

With --auth kubeconfig (the default) it acts as your kubeconfig's user, like
kubectl proxy, and listens on 127.0.0.1 only unless --allow-remote is given.
With --auth token each user signs in with a bearer token and every call is made
with that token, so host RBAC decides what each user sees; this is how it runs
in the host cluster (the chart's dashboard.enabled).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			clients, err := f.clients(host)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return dashboard.Serve(ctx, dashboard.ServeOptions{
				Address: f.address, Clients: clients, AllowRemote: f.allowRemote,
				TLSCertFile: f.certFile, TLSKeyFile: f.keyFile, Out: cmd.OutOrStdout(),
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.address, "address", "127.0.0.1:8080", "address to listen on, host:port (port 0 picks a free one)")
	fl.StringVar(&f.auth, "auth", authKubeconfig, "whose rights the dashboard uses: kubeconfig (yours) or token (each user signs in with a bearer token)")
	fl.BoolVar(&f.allowRemote, "allow-remote", false, "with --auth kubeconfig, allow a non-loopback --address: anyone who reaches it acts as you")
	fl.StringVar(&f.caFile, "api-server-ca-file", defaultCAFile, "with --auth token inside a cluster, the host API server's CA bundle")
	fl.StringVar(&f.certFile, "tls-cert-file", "", "serve HTTPS with this certificate (PEM)")
	fl.StringVar(&f.keyFile, "tls-key-file", "", "serve HTTPS with this key (PEM)")
	return cmd
}

func (f *dashboardFlags) clients(host *hostFlags) (dashboard.ClientSource, error) {
	switch f.auth {
	case authKubeconfig:
		cfg, err := host.restConfig()
		if err != nil {
			return nil, err
		}
		return dashboard.NewKubeconfigClients(cfg, host.contextName())
	case authToken:
		base, err := f.tokenBase(host)
		if err != nil {
			return nil, err
		}
		return dashboard.NewTokenClients(base)
	}
	return nil, fmt.Errorf("--auth %q: want kubeconfig or token", f.auth)
}

// tokenBase is where the host API server is: inside a pod, from the
// environment and --api-server-ca-file; elsewhere, from the kubeconfig,
// whose credentials are then dropped.
func (f *dashboardFlags) tokenBase(host *hostFlags) (*rest.Config, error) {
	h, p := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host.kubeconfig != "" || h == "" || p == "" {
		return host.restConfig()
	}
	if _, err := os.Stat(f.caFile); err != nil {
		return nil, fmt.Errorf("--api-server-ca-file %s: %w (mount the kube-root-ca.crt ConfigMap there)", f.caFile, err)
	}
	return &rest.Config{Host: "https://" + net.JoinHostPort(h, p), TLSClientConfig: rest.TLSClientConfig{CAFile: f.caFile}}, nil
}
