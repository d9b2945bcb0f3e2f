package peers

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/google/go-containerregistry/pkg/name"
	"helm.sh/helm/v4/pkg/action"
	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/vcops"
)

// Nest makes tenants as `nest create NAME` does: a VirtualCluster in
// namespace vc-NAME, with the defaults but for its share (Resources);
// `nest delete` removes them.
type Nest struct {
	// Host is a client of the host cluster with Nest's scheme.
	Host client.Client
	// HostCS is the same host as a clientset.
	HostCS kubernetes.Interface
	// Resources is each tenant's share of the host
	// (spec.promoteResources.resources, `nest create --cpu --memory
	// --pods`); nil keeps the default.
	Resources corev1.ResourceList
}

var _ System = (*Nest)(nil)

// Name is "Nest".
func (n *Nest) Name() string { return "Nest" }

func (n *Nest) key(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: vcops.DefaultNamespace(name), Name: name}
}

// Create makes the namespace and the VirtualCluster (vcops.Create).
func (n *Nest) Create(ctx context.Context, name string) error {
	key := n.key(name)
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	vc.Spec.PromoteResources.Resources = n.Resources
	_, err := vcops.Create(ctx, n.Host, vc, vcops.CreatedByCLI)
	return err
}

// Config is the tenant's external admin kubeconfig (spec.kubeconfig), as
// `nest kubeconfig` gives it.
func (n *Nest) Config(ctx context.Context, name string) (*rest.Config, error) {
	data, err := vcops.ReadKubeconfig(ctx, n.Host, n.key(name), false)
	if err != nil {
		return nil, err
	}
	return clientcmd.RESTConfigFromKubeConfig(data)
}

// HostNamespace is vc-NAME.
func (n *Nest) HostNamespace(name string) string { return vcops.DefaultNamespace(name) }

// Delete deletes the VirtualCluster, waits until it is gone, and deletes
// the namespace nest made for it, as `nest delete --wait` does.
func (n *Nest) Delete(ctx context.Context, name string) error {
	key := n.key(name)
	if err := vcops.Delete(ctx, n.Host, key); err != nil {
		return err
	}
	for {
		err := n.Host.Get(ctx, key, &nestv1.VirtualCluster{})
		if apierrors.IsNotFound(err) {
			return vcops.DeleteOwnNamespace(ctx, n.Host, key.Namespace)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("virtual cluster %s not deleted: %w", key, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// HostObjects lists the namespace and the PersistentVolumes its claims
// bound, while they exist.
func (n *Nest) HostObjects(ctx context.Context, name string) ([]string, error) {
	return namespaceLeft(ctx, n.HostCS, n.HostNamespace(name))
}

// namespaceLeft lists ns and the PersistentVolumes bound to its claims,
// while they exist.
func namespaceLeft(ctx context.Context, host kubernetes.Interface, ns string) ([]string, error) {
	var left []string
	switch _, err := host.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); {
	case err == nil:
		left = append(left, "Namespace "+ns)
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	pvs, err := host.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, pv := range pvs.Items {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == ns {
			left = append(left, "PersistentVolume "+pv.Name)
		}
	}
	return left, nil
}

// VCluster makes tenants with vcluster's own chart through the Helm SDK:
// release NAME in namespace vcluster-NAME, with the chart's defaults and
// Values on top, as `vcluster create` installs them.
type VCluster struct {
	// ChartDir is vcluster's chart directory (chart/ of its module).
	ChartDir string
	// Values are the values given over the chart's defaults (VClusterValues).
	Values map[string]any
	// HostKubeconfig is the host's admin kubeconfig file, which Helm uses.
	HostKubeconfig string
	// HostCS is the host as a clientset.
	HostCS kubernetes.Interface
	// NodeAddress is a host node's address where NodePorts are reached.
	NodeAddress string

	once  sync.Once
	chart any
	err   error
}

var _ System = (*VCluster)(nil)

// Name is "vcluster".
func (v *VCluster) Name() string { return "vcluster" }

// HostNamespace is vcluster-NAME, as `vcluster create` names it.
func (v *VCluster) HostNamespace(name string) string { return "vcluster-" + name }

// helm is a Helm configuration on the host for namespace ns.
func (v *VCluster) helm(ns string) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &v.HostKubeconfig
	flags.Namespace = &ns
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler))
	if err := cfg.Init(flags, ns, "secret"); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return cfg, nil
}

// Create installs the chart as release name, creating its namespace, and
// returns once Helm applied it (no wait).
func (v *VCluster) Create(ctx context.Context, name string) error {
	v.once.Do(func() { v.chart, v.err = chartloader.Load(v.ChartDir) })
	if v.err != nil {
		return fmt.Errorf("load vcluster's chart from %s: %w", v.ChartDir, v.err)
	}
	ns := v.HostNamespace(name)
	cfg, err := v.helm(ns)
	if err != nil {
		return err
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.CreateNamespace = name, ns, true
	install.WaitStrategy = kube.HookOnlyStrategy
	install.Timeout = 5 * time.Minute
	if _, err := install.RunWithContext(ctx, v.chart, v.Values); err != nil {
		return fmt.Errorf("helm install %s: %w", name, err)
	}
	return nil
}

// Config is the admin kubeconfig vcluster writes to Secret vc-NAME, with
// its server replaced by the NodePort of Service NAME on NodeAddress
// (VClusterValues names that address in the serving certificate).
func (v *VCluster) Config(ctx context.Context, name string) (*rest.Config, error) {
	ns := v.HostNamespace(name)
	sec, err := v.HostCS.CoreV1().Secrets(ns).Get(ctx, "vc-"+name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	svc, err := v.HostCS.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var port int32
	for _, p := range svc.Spec.Ports {
		if p.Name == "https" && p.NodePort != 0 {
			port = p.NodePort
		}
	}
	if port == 0 {
		return nil, fmt.Errorf("Service %s/%s has no https NodePort", ns, name)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(sec.Data["config"])
	if err != nil {
		return nil, err
	}
	cfg.Host = fmt.Sprintf("https://%s:%d", v.NodeAddress, port)
	return cfg, nil
}

// Delete uninstalls the release and deletes its namespace, as `vcluster
// delete` does for a namespace it made.
func (v *VCluster) Delete(ctx context.Context, name string) error {
	ns := v.HostNamespace(name)
	cfg, err := v.helm(ns)
	if err != nil {
		return err
	}
	uninstall := action.NewUninstall(cfg)
	uninstall.WaitStrategy = kube.HookOnlyStrategy
	uninstall.Timeout = 5 * time.Minute
	if _, err := uninstall.Run(name); err != nil {
		return fmt.Errorf("helm uninstall %s: %w", name, err)
	}
	err = v.HostCS.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// HostObjects lists the namespace and the PersistentVolumes its claims
// bound, while they exist.
func (v *VCluster) HostObjects(ctx context.Context, name string) ([]string, error) {
	return namespaceLeft(ctx, v.HostCS, v.HostNamespace(name))
}

// VClusterImages are the images the vcluster chart runs, built locally
// (see docs/performance.md).
type VClusterImages struct {
	// Syncer is vcluster's OSS syncer image, such as
	// nest.local/peers/vcluster-oss:0.36.1.
	Syncer string
	// Kubernetes holds the component binaries and kine under /kubernetes,
	// and cp.
	Kubernetes string
	// CoreDNS runs the tenant's DNS; Shell has sh and sed, for the
	// init container that rewrites /etc/hosts of pods with a subdomain.
	CoreDNS, Shell string
}

// VClusterValues are the values given over the chart's defaults: the
// local images, never pulled (no registry is reachable); a NodePort
// Service whose address the serving certificate names, where the test
// process reaches the tenant as it reaches Nest's; and no telemetry.
// Everything else is the chart's default.
func VClusterValues(img VClusterImages, nodeAddress string) map[string]any {
	repo := func(ref string) map[string]any {
		// Registry left empty: the chart joins a non-empty one with a
		// slash, and the name already holds it.
		tag, err := name.NewTag(ref)
		if err != nil {
			panic(fmt.Sprintf("VClusterImages: %v", err))
		}
		return map[string]any{"registry": "", "repository": tag.Context().Name(), "tag": tag.TagStr()}
	}
	return map[string]any{
		"controlPlane": map[string]any{
			"distro": map[string]any{"k8s": map[string]any{
				"enabled": true, "image": repo(img.Kubernetes), "imagePullPolicy": "Never",
			}},
			"statefulSet": map[string]any{"image": repo(img.Syncer), "imagePullPolicy": "Never"},
			"coredns":     map[string]any{"deployment": map[string]any{"image": img.CoreDNS}},
			"service":     map[string]any{"spec": map[string]any{"type": string(corev1.ServiceTypeNodePort)}},
			"proxy":       map[string]any{"extraSANs": []any{nodeAddress}},
		},
		"sync": map[string]any{"toHost": map[string]any{"pods": map[string]any{"rewriteHosts": map[string]any{
			"initContainer": map[string]any{"image": repo(img.Shell)},
		}}}},
		"telemetry": map[string]any{"enabled": false},
	}
}

// ChartDir is vcluster's chart directory in the module cache, for the
// module version k8s/vcluster pins: dir/chart of `go list -m`.
func ChartDir(moduleDir string) (string, error) {
	dir := filepath.Join(moduleDir, "chart")
	if _, err := os.Stat(filepath.Join(dir, "Chart.yaml")); err != nil {
		return "", fmt.Errorf("vcluster's chart: %w", err)
	}
	return dir, nil
}
