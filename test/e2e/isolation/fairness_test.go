package isolation

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/testutil"
)

// priorityLevelHeader is where the API server names the API Priority and
// Fairness priority level a request was classified into, by UID.
const priorityLevelHeader = "X-Kubernetes-PF-PriorityLevel-UID"

// fairShare: alpha's administrator is held by API Priority and Fairness,
// in global-default, while nest-syncer, nest-manager and probes are exempt, the
// controllers land in workload-high and the tenant's service accounts in
// workload-low; the administrator cannot
// remove the binding that makes it cluster-admin, and nest-syncer puts back
// a change made past the guard.
func (e *env) fairShare(t *testing.T) {
	cs := e.alpha.Clientset(t)
	levels := map[string]string{}
	for _, name := range []string{"global-default", "exempt", "workload-low", "workload-high"} {
		pl, err := cs.FlowcontrolV1().PriorityLevelConfigurations().Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("alpha's priority level %s: %v", name, err)
		}
		levels[string(pl.UID)] = name
	}
	syncer := e.syncerConfig(t)
	serviceAccount := func(namespace, name string) *rest.Config {
		cfg := rest.CopyConfig(e.alpha.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + namespace + ":" + name,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
		return cfg
	}
	for _, c := range []struct {
		who, path, want string
		cfg             *rest.Config
	}{
		{"the administrator", "/api/v1/namespaces/default", "global-default", e.alpha.Config},
		{"the administrator's probe", "/readyz", "exempt", e.alpha.Config},
		{"nest-syncer", "/api/v1/namespaces/default", "exempt", syncer},
		// Its own credential, not the administrator's: it never queues
		// behind the administrator's flood.
		{"nest-manager", "/api/v1/namespaces/default", "exempt", e.managerConfig(t)},
		// /version: any service account may read it.
		{"a tenant service account", "/version", "workload-low", serviceAccount("default", "default")},
		// kube-controller-manager runs each controller as its own service
		// account (--use-service-account-credentials).
		{"the controller-manager's Deployment controller", "/version", "workload-high", serviceAccount("kube-system", "deployment-controller")},
	} {
		uid, err := priorityLevelOf(e.ctx, c.cfg, c.path)
		if err != nil {
			t.Errorf("%s GET %s: %v", c.who, c.path, err)
		} else if levels[uid] != c.want {
			t.Errorf("%s GET %s was classified into priority level %s (%q), want %s", c.who, c.path, uid, levels[uid], c.want)
		}
	}

	out, err := e.alpha.KubectlErr(e.ctx, "delete", "clusterrolebinding", addons.ClusterAdminsName)
	if err == nil || !strings.Contains(out+err.Error(), addons.ClusterAdminsGuardName) {
		t.Errorf("the administrator deletes its own binding %s: %v\n%s\nwant refused by %s", addons.ClusterAdminsName, err, out, addons.ClusterAdminsGuardName)
	}

	// Past the guard, as a cluster-admin impersonating nest-syncer could:
	// nest-syncer puts its binding back. Adding a subject leaves alpha's
	// administrator, which other cases use, its rights throughout.
	syncerCS, err := kubernetes.NewForConfig(syncer)
	if err != nil {
		t.Fatal(err)
	}
	bindings := syncerCS.RbacV1().ClusterRoleBindings()
	b, err := bindings.Get(e.ctx, addons.ClusterAdminsName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("alpha's %s binding: %v", addons.ClusterAdminsName, err)
	}
	b.Subjects = append(b.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "fair-share-intruder"})
	if _, err := bindings.Update(e.ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("nest-syncer's credential changes the binding: %v", err)
	}
	testutil.Eventually(t, time.Minute, "nest-syncer puts the binding back", func() error {
		b, err := bindings.Get(e.ctx, addons.ClusterAdminsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(b.Subjects) != 1 || b.Subjects[0].Name != components.ClusterAdminsGroup || b.RoleRef.Name != addons.ClusterAdminRole {
			return fmt.Errorf("binding to %s of %+v", b.RoleRef.Name, b.Subjects)
		}
		return nil
	})
}

// priorityLevelOf GETs path with cfg's credentials and returns the UID of
// the priority level the API server classified the request into.
func priorityLevelOf(ctx context.Context, cfg *rest.Config, path string) (string, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	uid := resp.Header.Get(priorityLevelHeader)
	if uid == "" {
		return "", fmt.Errorf("no %s header", priorityLevelHeader)
	}
	return uid, nil
}

// syncerConfig is alpha's nest-syncer credential, from its host Secret,
// aimed at the API server the administrator reaches (the kubeconfig in the
// Secret names the pod's loopback).
func (e *env) syncerConfig(t *testing.T) *rest.Config {
	t.Helper()
	n := controlplane.Names{VirtualCluster: e.alpha.Name, Namespace: e.alpha.Namespace}
	return e.hostCredential(t, n.ComponentKubeconfigSecret(), controlplane.SyncerKubeconfig, controlplane.SyncerUser)
}

// managerConfig is nest-manager's credential for alpha, from its host
// Secret, aimed at the API server the administrator reaches (the kubeconfig
// in the Secret names the in-cluster Service).
func (e *env) managerConfig(t *testing.T) *rest.Config {
	t.Helper()
	n := controlplane.Names{VirtualCluster: e.alpha.Name, Namespace: e.alpha.Namespace}
	return e.hostCredential(t, n.ManagerKubeconfigSecret(), controlplane.KubeconfigKey, controlplane.ManagerUser)
}

// hostCredential is the kubeconfig under key of alpha's host Secret secret,
// whose certificate must be user's in system:masters, aimed at the API
// server the administrator reaches.
func (e *env) hostCredential(t *testing.T, secret, key, user string) *rest.Config {
	t.Helper()
	var s corev1.Secret
	if err := e.host.Get(e.ctx, client.ObjectKey{Namespace: e.alpha.Namespace, Name: secret}, &s); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[key])
	if err != nil {
		t.Fatalf("alpha's %s kubeconfig: %v", user, err)
	}
	cert, err := pki.ParseCertificate(cfg.CertData)
	if err != nil || cert.Subject.CommonName != user || !slices.Contains(cert.Subject.Organization, components.MastersGroup) {
		t.Fatalf("alpha's %s credential is %v (%v), want %s in %s", user, cert, err, user, components.MastersGroup)
	}
	cfg.Host = e.alpha.Config.Host
	cfg.TLSClientConfig.ServerName = e.alpha.Config.TLSClientConfig.ServerName
	return cfg
}
