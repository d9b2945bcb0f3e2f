package syncer

import (
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// memberTranslator is the translator of a member syncer: the member
// namespace, the tenant API server's address for members, the member's
// nest-dns Service.
func memberTranslator() Translator {
	m := tr
	m.HostNamespace, m.APIServerHost, m.APIServerPort, m.DNSServer = "nest-alpha-0123456789", "198.51.100.10", 31234, "10.97.0.53"
	return m
}

func reviewOf(t *testing.T, pod *corev1.Pod) *admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{UID: "u1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespace: pod.Namespace,
		Object: runtime.RawExtension{Raw: raw}}
}

func tenantLabelledPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "made-by-hand", Namespace: "nest-alpha-0123456789", Labels: map[string]string{contract.LabelTenantOf: "alpha", contract.LabelTenantNamespace: "shop"}},
		Spec: corev1.PodSpec{DNSPolicy: corev1.DNSClusterFirst,
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox"}},
			Containers: []corev1.Container{{Name: "app", Image: "app", Env: []corev1.EnvVar{
				{Name: "KUBERNETES_SERVICE_HOST", Value: "10.97.0.1"}, {Name: "MINE", Value: "kept"}}}}},
	}
}

func TestInjectorPointsAPodAtTheTenant(t *testing.T) {
	pod := tenantLabelledPod()
	resp := memberTranslator().review(reviewOf(t, pod))
	if !resp.Allowed || resp.UID != "u1" || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("response %+v; want allowed with a JSON patch", resp)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(pod)
	patched, err := patch.Apply(raw)
	if err != nil {
		t.Fatalf("the patch does not apply to the pod: %v", err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(patched, &got); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range got.Spec.Containers[0].Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s set twice", e.Name)
		}
		env[e.Name] = e.Value
	}
	if env["KUBERNETES_SERVICE_HOST"] != "198.51.100.10" || env["KUBERNETES_SERVICE_PORT"] != "31234" || env["MINE"] != "kept" {
		t.Errorf("container env %v; want the tenant API server's address for members, and the pod's own variables kept", env)
	}
	if len(got.Spec.InitContainers[0].Env) == 0 {
		t.Error("the init container got no variables")
	}
	dns := got.Spec.DNSConfig
	if got.Spec.DNSPolicy != corev1.DNSNone || dns == nil || dns.Nameservers[0] != "10.97.0.53" || dns.Searches[0] != "shop.svc."+tr.ClusterDomain {
		t.Errorf("DNS %s %+v; want None with the member's nest-dns and the tenant namespace's search path", got.Spec.DNSPolicy, dns)
	}
}

func TestInjectorLeavesAPodThatChoseItsDNS(t *testing.T) {
	pod := tenantLabelledPod()
	pod.Spec.DNSPolicy = corev1.DNSDefault
	got, err := memberTranslator().InjectedPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.DNSPolicy != corev1.DNSDefault || got.Spec.DNSConfig != nil {
		t.Errorf("DNS %s %+v; want the pod's Default kept", got.Spec.DNSPolicy, got.Spec.DNSConfig)
	}
}

func TestInjectorRefusesAPodWithoutTheTenantsLabels(t *testing.T) {
	for name, labels := range map[string]map[string]string{
		"no labels":           nil,
		"another tenant":      {contract.LabelTenantOf: "beta", contract.LabelTenantNamespace: "shop"},
		"no tenant namespace": {contract.LabelTenantOf: "alpha"},
	} {
		pod := tenantLabelledPod()
		pod.Labels = labels
		resp := memberTranslator().review(reviewOf(t, pod))
		if resp.Allowed || resp.Result == nil || resp.Result.Code != 403 || !strings.Contains(resp.Result.Message, "label nest.dev/tenant") {
			t.Errorf("%s: response %+v; want a refusal naming the label", name, resp)
		}
	}
}

func TestInjectorRefusesWhatIsNotAPod(t *testing.T) {
	req := reviewOf(t, tenantLabelledPod())
	req.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	if resp := memberTranslator().review(req); resp.Allowed {
		t.Error("a Deployment was admitted")
	}
}
