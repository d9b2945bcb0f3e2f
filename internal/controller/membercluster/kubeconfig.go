package membercluster

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// RESTConfig builds the client configuration of a member from its
// kubeconfig, with every request bounded by timeout. It uses the current
// context only, and refuses a kubeconfig that would run a command (exec,
// auth-provider) or read a file: nest-manager builds it inside its own
// pod, where a file path could name the manager's own service-account
// token and send it to the member. The error says which field to change.
// The CLI checks a kubeconfig with it before storing it.
func RESTConfig(data []byte, timeout time.Duration) (*rest.Config, error) {
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}
	if err := checkSelfContained(raw); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.Timeout = timeout
	cfg.UserAgent = "nest-manager/membercluster"
	// A probe makes one request; a member is probed every 30 seconds.
	cfg.QPS, cfg.Burst = 5, 10
	return cfg, nil
}

// checkSelfContained refuses a kubeconfig whose current context needs
// anything outside the kubeconfig itself.
func checkSelfContained(raw *clientcmdapi.Config) error {
	if raw.CurrentContext == "" {
		return errors.New("current-context is empty: set it to the context that reaches the member")
	}
	ctx, ok := raw.Contexts[raw.CurrentContext]
	if !ok {
		return fmt.Errorf("current-context %q names no context: add it to contexts", raw.CurrentContext)
	}
	cluster, ok := raw.Clusters[ctx.Cluster]
	if !ok {
		return fmt.Errorf("context %q names cluster %q, which is not in clusters: add it", raw.CurrentContext, ctx.Cluster)
	}
	if cluster.Server == "" {
		return fmt.Errorf("clusters[%s].server is empty: set it to the member API server's URL, such as https://10.20.0.5:6443", ctx.Cluster)
	}
	if cluster.CertificateAuthority != "" {
		return fmt.Errorf("clusters[%s].certificate-authority names a file, which nest-manager cannot read: use certificate-authority-data", ctx.Cluster)
	}
	user, ok := raw.AuthInfos[ctx.AuthInfo]
	if !ok {
		if ctx.AuthInfo == "" {
			return nil
		}
		return fmt.Errorf("context %q names user %q, which is not in users: add it", raw.CurrentContext, ctx.AuthInfo)
	}
	for _, f := range []struct{ field, path, fix string }{
		{"client-certificate", user.ClientCertificate, "client-certificate-data"},
		{"client-key", user.ClientKey, "client-key-data"},
		{"tokenFile", user.TokenFile, "token"},
	} {
		if f.path != "" {
			return fmt.Errorf("users[%s].%s names a file, which nest-manager cannot read: use %s", ctx.AuthInfo, f.field, f.fix)
		}
	}
	if user.Exec != nil {
		return fmt.Errorf("users[%s].exec runs a command, which nest-manager does not: use a token or client-certificate-data", ctx.AuthInfo)
	}
	if user.AuthProvider != nil {
		return fmt.Errorf("users[%s].auth-provider runs a plugin, which nest-manager does not: use a token or client-certificate-data", ctx.AuthInfo)
	}
	return nil
}
