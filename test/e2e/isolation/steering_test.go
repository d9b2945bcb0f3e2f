package isolation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/controller/virtualcluster"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/testutil"
)

// Steering: what a tenant writes never points the host, or its own
// control plane, at the host.
func (e *env) steering() []testCase {
	return []testCase{
		{"virtual-node-address-patch-is-refused-and-the-node-proxy-reaches-the-syncer", e.nodeAddressPatch},
		{"node-created-with-a-host-kubelet-address-is-refused", e.forgedNode},
		{"webhook-aimed-at-a-host-kubelet-is-refused-by-the-egress-proxy", e.webhookAtHostKubelet},
		{"refused-virtual-cluster-creates-nothing-and-reads-no-secret", e.refusedVirtualCluster},
	}
}

// nodeAddressPatch: alpha's admin points its virtual node at a host
// kubelet, as the probe that found the hole did; the API server refuses it,
// and the node proxy still reaches nest-syncer's kubelet API.
func (e *env) nodeAddressPatch(t *testing.T) {
	node := controlplane.VirtualNodeName
	patch := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q}],"daemonEndpoints":{"kubeletEndpoint":{"Port":10250}}}}`, e.nodeIPs[0])
	out, err := e.alpha.KubectlErr(e.ctx, "patch", "node", node, "--subresource=status", "--type=merge", "-p", patch)
	if err == nil || !strings.Contains(out+err.Error(), addons.NodeEndpointsName) {
		t.Errorf("patch of the virtual node's addresses to host kubelet %s: %v\n%s\nwant refused by %s", e.nodeIPs[0], err, out, addons.NodeEndpointsName)
	}
	// The tenant cannot remove the policy: it is no API object.
	out, err = e.alpha.KubectlErr(e.ctx, "delete", "validatingadmissionpolicybinding", addons.NodeEndpointsName)
	if err == nil || !strings.Contains(out+err.Error(), "NotFound") {
		t.Errorf("delete of the static binding: %v\n%s\nwant NotFound", err, out)
	}
	var n corev1.Node
	if err := json.Unmarshal([]byte(e.alpha.Kubectl(t, e.ctx, "get", "node", node, "-o", "json")), &n); err != nil {
		t.Fatal(err)
	}
	for _, a := range n.Status.Addresses {
		for _, host := range e.nodeIPs {
			if a.Address == host {
				t.Errorf("the virtual node's %s is host node address %s", a.Type, host)
			}
		}
	}
	// The node proxy answers with the syncer's pod list, not a host
	// kubelet's refusal.
	testutil.Eventually(t, 30*time.Second, "the node proxy reaches nest-syncer", func() error {
		body, err := e.alpha.KubectlErr(e.ctx, "get", "--raw", "/api/v1/nodes/"+node+"/proxy/pods")
		if err != nil {
			return err
		}
		if !strings.Contains(body, `"PodList"`) {
			return fmt.Errorf("node proxy answered %.200s", body)
		}
		return nil
	})
}

// forgedNode: alpha's admin creates a Node of its own that names a host
// kubelet, to proxy through it; the API server refuses it.
func (e *env) forgedNode(t *testing.T) {
	manifest := fmt.Sprintf(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"forged"},`+
		`"status":{"addresses":[{"type":"InternalIP","address":%q}],"daemonEndpoints":{"kubeletEndpoint":{"Port":10250}}}}`, e.nodeIPs[1])
	out, err := e.alpha.KubectlErr(e.ctx, "create", "-f", writeFile(t, "forged-node.json", manifest))
	if err == nil {
		_, _ = e.alpha.KubectlErr(e.ctx, "delete", "node", "forged")
	}
	if err == nil || !strings.Contains(out+err.Error(), addons.NodeEndpointsName) {
		t.Errorf("create of a Node at host kubelet %s: %v\n%s\nwant refused by %s", e.nodeIPs[1], err, out, addons.NodeEndpointsName)
	}
}

// webhookAtHostKubelet: alpha's admin registers a validating webhook whose
// URL is a host kubelet, as a way to make its API server dial the host.
// The API server dials through nest-syncer's egress proxy, which refuses
// the address: the request the webhook guards fails with the proxy's 403,
// never with a TLS or HTTP answer from the kubelet. The node proxy case
// shows that what the syncer published still gets through.
func (e *env) webhookAtHostKubelet(t *testing.T) {
	const ns, name = "steering-webhook", "host-kubelet.steering.nest.dev"
	cs := e.alpha.Clientset(t)
	if _, err := cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	kubelet := net.JoinHostPort(e.nodeIPs[0], "10250")
	webhook := hostKubeletWebhook(name, ns, "https://"+kubelet+"/")
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(e.ctx, webhook, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), webhook.Name, metav1.DeleteOptions{})
	})
	// The API server calls the webhook once its informer has it: until
	// then a create succeeds, and is undone.
	want := "proxy error from " + controlplane.EgressProxySocket + " while dialing " + kubelet + ", code 403"
	testutil.Eventually(t, time.Minute, "a ConfigMap create refused by the egress proxy", func() error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: ns}}
		_, err := cs.CoreV1().ConfigMaps(ns).Create(e.ctx, cm, metav1.CreateOptions{})
		switch {
		case err == nil:
			_ = cs.CoreV1().ConfigMaps(ns).Delete(e.ctx, cm.Name, metav1.DeleteOptions{})
			return errors.New("created: the webhook is not called yet")
		case !strings.Contains(err.Error(), name):
			return fmt.Errorf("refused, but not by the webhook yet: %w", err)
		case !strings.Contains(err.Error(), want):
			t.Fatalf("the webhook at host kubelet %s failed with %q, want the egress proxy's refusal %q: the API server dialled the host", kubelet, err, want)
		}
		return nil
	})
}

// hostKubeletWebhook is a validating webhook configuration that sends
// every ConfigMap create in namespace ns to url, failing closed.
func hostKubeletWebhook(name, ns, url string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "steering-host-kubelet"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
		}},
	}
}

// refusedVirtualCluster: a second VirtualCluster in alpha's host namespace
// is refused, gets no host object of any kind Nest makes, and no identity
// that reads alpha's Secrets.
func (e *env) refusedVirtualCluster(t *testing.T) {
	intruder := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: e.alpha.Namespace, Name: "aaa-intruder"}}
	if err := e.host.Create(e.ctx, intruder); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.host.Delete(e.ctx, intruder) })
	testutil.Eventually(t, time.Minute, "the intruder refused with NamespaceInUse", func() error {
		if err := e.host.Get(e.ctx, client.ObjectKeyFromObject(intruder), intruder); err != nil {
			return err
		}
		ready := meta.FindStatusCondition(intruder.Status.Conditions, nestv1.ConditionReady)
		if ready == nil || ready.Reason != virtualcluster.ReasonNamespaceInUse {
			return fmt.Errorf("Ready = %+v", ready)
		}
		return nil
	})
	n := controlplane.NamesOf(intruder)
	checked := 0
	for _, kind := range controlplane.HostObjects {
		for _, name := range kind.Names(n) {
			obj := kind.New()
			checked++
			if err := e.host.Get(e.ctx, client.ObjectKey{Namespace: n.Namespace, Name: name}, obj); !apierrors.IsNotFound(err) {
				t.Errorf("%T %s exists for the refused VirtualCluster (%v)", obj, name, err)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d host objects: the registry lists too few for the check to mean anything", checked)
	}
	alpha := controlplane.NamesOf(&nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: e.alpha.Namespace, Name: e.alpha.Name}})
	// Control: alpha's own syncer reads the Secrets of its namespace, so a
	// refusal below is the intruder's lack of identity, not the review's.
	if !e.mayGetSecret(t, alpha.SyncerServiceAccount(), alpha.PKISecret()) {
		t.Fatalf("control: alpha's syncer may not read its own Secret %s", alpha.PKISecret())
	}
	if e.mayGetSecret(t, n.SyncerServiceAccount(), alpha.PKISecret()) {
		t.Errorf("the refused VirtualCluster's syncer identity may read Secret %s/%s", n.Namespace, alpha.PKISecret())
	}
}

// mayGetSecret asks the host whether service account sa of alpha's host
// namespace may read alpha's Secret name.
func (e *env) mayGetSecret(t *testing.T, sa, name string) bool {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + e.alpha.Namespace + ":" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + e.alpha.Namespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: e.alpha.Namespace, Verb: "get", Resource: "secrets", Name: name,
		},
	}}
	if err := e.host.Create(e.ctx, review); err != nil {
		t.Fatal(err)
	}
	return review.Status.Allowed
}

// writeFile writes content to name in a directory of the test's and
// returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
