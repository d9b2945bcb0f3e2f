package syncer

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// injected are keys host add-ons and Nest act on: a tenant that could set
// them on a host pod would join host networks, get host secrets injected, or
// be selected as Nest's own control plane.
var injected = []string{
	"k8s.v1.cni.cncf.io/networks",
	"cni.projectcalico.org/ipAddrs",
	"vault.hashicorp.com/role",
	"io.kubernetes.cri-o.Devices",
	"sidecar.istio.io/inject",
	"app.kubernetes.io/managed-by",
	"app.kubernetes.io/component",
	"traffic.sidecar.istio.io/excludeOutboundIPRanges",
	"config.linkerd.io/skip-outbound-ports",
	"linkerd.io/inject",
	"karpenter.sh/do-not-disrupt",
	"cluster-autoscaler.kubernetes.io/safe-to-evict",
	"container.apparmor.security.beta.kubernetes.io/app",
	"seccomp.security.alpha.kubernetes.io/pod",
	"pod-security.kubernetes.io/enforce",
	"node-role.kubernetes.io/control-plane",
	"kubernetes.io/hostname",
	"k8s.io/x",
	"nest.dev/virtualcluster",
}

func TestInjectedKeysNeverReachTheHostPod(t *testing.T) {
	everything := append([]string{"*", "io.*"}, injected...)
	for _, prefix := range injected {
		if domain, _, ok := strings.Cut(prefix, "/"); ok {
			everything = append(everything, domain+"/*")
		}
	}
	for name, allow := range map[string][]string{
		"the defaults":               contract.DefaultHostLabels,
		`"*"`:                        {"*"},
		"every key, named or prefix": everything,
	} {
		t.Run(name, func(t *testing.T) {
			pod := tenantPod()
			pod.Labels, pod.Annotations = map[string]string{}, map[string]string{}
			for _, k := range injected {
				if !strings.HasPrefix(k, contract.ReservedPrefix) {
					pod.Labels[k], pod.Annotations[k] = "x", "runtime/default"
				}
			}
			pt, err := tr.TranslatePod(pod, contract.MetadataAllowList{Labels: allow, Annotations: allow}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range injected {
				_, inLabels := pt.Pod.Labels[k]
				_, inAnnotations := pt.Pod.Annotations[k]
				if inLabels || inAnnotations {
					t.Errorf("%s reached the host pod", k)
				}
			}
		})
	}
}

func TestCopyAllowed(t *testing.T) {
	tenant := map[string]string{
		"app": "web", "tier": "front", "app.kubernetes.io/name": "shop", "app.kubernetes.io/part-of": "store",
		"app.kubernetes.io/managed-by": "helm", "example.com/team": "a", "example.com/sub/x": "b", "other.org/y": "c",
		"sidecar.istio.io/inject": "true", "io.kubernetes.cri-o.Devices": "/dev/kvm",
	}
	tests := []struct {
		name  string
		allow []string
		want  []string
	}{
		{name: "defaults: unprefixed keys and the descriptive app.kubernetes.io labels", allow: contract.DefaultHostLabels,
			want: []string{"app", "app.kubernetes.io/name", "app.kubernetes.io/part-of", "tier"}},
		{name: "empty: nothing", allow: []string{}, want: nil},
		{name: `"*" does not span a prefix`, allow: []string{"*"}, want: []string{"app", "tier"}},
		{name: "a whole key", allow: []string{"tier"}, want: []string{"tier"}},
		{name: "a prefix", allow: []string{"example.com/*"}, want: []string{"example.com/team"}},
		{name: "an unprefixed beginning", allow: []string{"ti*"}, want: []string{"tier"}},
		{name: "app.kubernetes.io/* lets only the descriptive keys through", allow: []string{"app.kubernetes.io/*"},
			want: []string{"app.kubernetes.io/name", "app.kubernetes.io/part-of"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slices.Sorted(maps.Keys(copyAllowed(tenant, tt.allow)))
			if !slices.Equal(got, tt.want) {
				t.Errorf("copied %v, want %v", got, tt.want)
			}
		})
	}
}

// Keys that are not copied stay on the tenant pod, and changing them still
// updates the host pod's spec hash, so UpdatePod runs.
func TestUncopiedMetadataStillChangesTheSpecHash(t *testing.T) {
	pod := tenantPod()
	before, err := tr.TranslatePod(pod, contract.MetadataAllowList{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{"example.com/rev": "2"}
	after, err := tr.TranslatePod(pod, contract.MetadataAllowList{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if before.Pod.Annotations[contract.AnnotationSpecHash] == after.Pod.Annotations[contract.AnnotationSpecHash] {
		t.Error("an annotation change left the spec hash alone")
	}
	if _, ok := after.Pod.Labels["app"]; ok || after.Pod.Labels[contract.LabelTenantOf] != "alpha" || after.Pod.Annotations[contract.AnnotationTenantName] != "web-1" {
		t.Errorf("with an empty allow-list the host pod must carry only Nest's metadata: labels %v, annotations %v", after.Pod.Labels, after.Pod.Annotations)
	}
}
