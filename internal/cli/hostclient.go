package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/kube"
)

// hostFlags locate the host cluster.
type hostFlags struct {
	kubeconfig string
}

// hostKubeconfig picks the host kubeconfig: --kubeconfig, then $KUBECONFIG,
// then the local host cluster's when one was started on this machine.
func (f hostFlags) hostKubeconfig() (string, error) {
	if f.kubeconfig != "" {
		return f.kubeconfig, nil
	}
	if env := os.Getenv("KUBECONFIG"); env != "" {
		return env, nil
	}
	dev := devcluster.Layout{Root: devcluster.StateDir("")}.AdminKubeconfig()
	if _, err := os.Stat(dev); err == nil {
		return dev, nil
	}
	home, _ := os.UserHomeDir()
	if def := filepath.Join(home, ".kube", "config"); home != "" {
		if _, err := os.Stat(def); err == nil {
			return def, nil
		}
	}
	return "", errors.New("no host cluster: pass --kubeconfig, set KUBECONFIG, or start a local host cluster with `nest dev up --with-nest`")
}

func (f hostFlags) loader() (clientcmd.ClientConfig, string, error) {
	path, err := f.hostKubeconfig()
	if err != nil {
		return nil, "", err
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, &clientcmd.ConfigOverrides{}), path, nil
}

func (f hostFlags) restConfig() (*rest.Config, error) {
	loader, path, err := f.loader()
	if err != nil {
		return nil, err
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load host kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

func (f hostFlags) client() (client.Client, error) {
	cfg, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: kube.NewScheme()})
}

// contextName is the host kubeconfig's current context, or "" when unknown.
func (f hostFlags) contextName() string {
	loader, _, err := f.loader()
	if err != nil {
		return ""
	}
	raw, err := loader.RawConfig()
	if err != nil {
		return ""
	}
	return raw.CurrentContext
}
