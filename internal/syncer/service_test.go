package syncer

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/service"
)

// Tenant pods get the variables the kubelet would give them in the tenant
// cluster, with the addresses host pods reach: the API server's for
// KUBERNETES_* (overriding the host kubelet's, which name the same port), and
// each Service of the namespace unless service links are off.
func TestServiceVariablesFollowTheKubelet(t *testing.T) {
	tr := Translator{Translation: contract.Translation{VirtualCluster: "alpha", HostNamespace: "vc-alpha", APIServerHost: "10.96.0.6", APIServerPort: 443, DNSServer: "10.96.0.6", ClusterDomain: "cluster.local"}}
	services := []service.Address{
		service.AddressOf(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "foo-service"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.7.7",
			Ports: []corev1.ServicePort{{Name: "http", Port: 8765, Protocol: corev1.ProtocolTCP}, {Port: 53, Protocol: corev1.ProtocolUDP}}}}, "10.96.9.9"),
		service.AddressOf(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "headless"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 80}}}}, ""),
	}
	pod := simplePod("web", "100m")
	pod.Namespace = "shop"
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "FOO_SERVICE_PORT", Value: "mine"}}
	pt, err := tr.TranslatePod(pod, defaultMetadata, services)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range pt.Pod.Spec.Containers[0].Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("variable %s set twice", e.Name)
		}
		env[e.Name] = e.Value
	}
	for name, want := range map[string]string{
		"KUBERNETES_SERVICE_HOST": "10.96.0.6", "KUBERNETES_SERVICE_PORT": "443", "KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT": "tcp://10.96.0.6:443", "KUBERNETES_PORT_443_TCP": "tcp://10.96.0.6:443", "KUBERNETES_PORT_443_TCP_ADDR": "10.96.0.6",
		// The host copy's ClusterIP, which host pods reach.
		"FOO_SERVICE_SERVICE_HOST": "10.96.9.9", "FOO_SERVICE_SERVICE_PORT": "8765", "FOO_SERVICE_SERVICE_PORT_HTTP": "8765",
		"FOO_SERVICE_PORT_8765_TCP": "tcp://10.96.9.9:8765", "FOO_SERVICE_PORT_53_UDP": "udp://10.96.9.9:53", "FOO_SERVICE_PORT_53_UDP_PROTO": "udp",
		"FOO_SERVICE_PORT_8765_TCP_PORT": "8765",
		// The container sets this one itself, and it wins.
		"FOO_SERVICE_PORT": "mine",
	} {
		if env[name] != want {
			t.Errorf("%s=%q, want %q", name, env[name], want)
		}
	}
	if _, ok := env["HEADLESS_SERVICE_HOST"]; ok {
		t.Error("a headless Service got variables")
	}
	if pt.Pod.Spec.Containers[0].Env[len(pt.Pod.Spec.Containers[0].Env)-1].Name != "FOO_SERVICE_PORT" {
		t.Error("the container's own variables must come after the service variables they may refer to")
	}

	pod.Spec.EnableServiceLinks = ptr.To(false)
	pt, err = tr.TranslatePod(pod, defaultMetadata, services)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pt.Pod.Spec.Containers[0].Env {
		if e.Name == "FOO_SERVICE_SERVICE_HOST" {
			t.Error("service links off, yet the namespace's Services have variables")
		}
	}
	if ptr.Deref(pt.Pod.Spec.EnableServiceLinks, true) {
		t.Error("the host kubelet must not add host Services' variables")
	}
}

// A variable from one of the tenant pod's labels or annotations (an indexed
// Job's completion index, for one) reads a host pod annotation under Nest's
// prefix that holds the tenant's value: the host kubelet resolves it at each
// container start, and the tenant's own key never reaches the host pod.
func TestLabelAndAnnotationVariablesAreTheTenants(t *testing.T) {
	pod := simplePod("job-1", "100m")
	pod.Annotations = map[string]string{"batch.kubernetes.io/job-completion-index": "3"}
	pod.Labels = map[string]string{"team": "blue"}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	pod.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "JOB_COMPLETION_INDEX", ValueFrom: field("metadata.annotations['batch.kubernetes.io/job-completion-index']")},
		{Name: "TEAM", ValueFrom: field("metadata.labels['team']")},
		{Name: "MISSING", ValueFrom: field("metadata.labels['absent']")},
	}
	pt, err := tr.TranslatePod(pod, contract.MetadataAllowList{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, copied := pt.Pod.Annotations["batch.kubernetes.io/job-completion-index"]; copied {
		t.Fatal("the tenant's annotation reached the host pod")
	}
	got := map[string]corev1.EnvVar{}
	for _, e := range pt.Pod.Spec.Containers[0].Env {
		got[e.Name] = e
	}
	for name, want := range map[string]string{"JOB_COMPLETION_INDEX": "3", "TEAM": "blue", "MISSING": ""} {
		e := got[name]
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			t.Errorf("%s: %+v, want a field reference", name, e)
			continue
		}
		key, ok := subscript(e.ValueFrom.FieldRef.FieldPath, "metadata.annotations")
		if !ok || !strings.HasPrefix(key, "nest.dev/") {
			t.Errorf("%s reads %s, want an annotation under nest.dev/", name, e.ValueFrom.FieldRef.FieldPath)
			continue
		}
		if v, ok := pt.Pod.Annotations[key]; !ok || v != want {
			t.Errorf("%s: host annotation %s = %q (present %v), want %q", name, key, v, ok, want)
		}
	}
}
