package membergrant

import (
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/syncer/contract"
)

func vcOf(ns, name, uid string) *nestv1.VirtualCluster {
	return &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
}

var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func TestNamespaceName(t *testing.T) {
	base := NamespaceName(vcOf("vc-a", "ml", "uid-1"), "gpu")
	if !strings.HasPrefix(base, "nest-ml-") || len(base) != len("nest-ml-")+hashLen {
		t.Errorf("NamespaceName = %q, want nest-ml-<%d hex digits>", base, hashLen)
	}
	if again := NamespaceName(vcOf("vc-a", "ml", "uid-1"), "gpu"); again != base {
		t.Errorf("not stable: %q then %q", base, again)
	}
	for what, other := range map[string]string{
		"another host namespace": NamespaceName(vcOf("vc-b", "ml", "uid-1"), "gpu"),
		"another UID":            NamespaceName(vcOf("vc-a", "ml", "uid-2"), "gpu"),
		"another member":         NamespaceName(vcOf("vc-a", "ml", "uid-1"), "cpu"),
	} {
		if other == base {
			t.Errorf("%s gives the same namespace %q", what, base)
		}
	}
	long := NamespaceName(vcOf("vc-a", strings.Repeat("a", 46)+"-"+strings.Repeat("b", 20), "u"), "gpu")
	if len(long) > 63 || !dns1123Label.MatchString(long) {
		t.Errorf("NamespaceName of a long name = %q (%d characters): want a DNS label of at most 63", long, len(long))
	}
	if strings.Contains(long, "--") {
		t.Errorf("cut name left a dangling '-': %q", long)
	}
}

func TestNamespaceLabels(t *testing.T) {
	vc := vcOf("vc-a", "ml", "u")
	if got := NamespaceLabels(vc)["pod-security.kubernetes.io/enforce"]; got != "baseline" {
		t.Errorf("default enforce level %q, want baseline", got)
	}
	vc.Spec.VirtualNode.PodSecurityLevel = nestv1.PodSecurityRestricted
	l := NamespaceLabels(vc)
	if l["pod-security.kubernetes.io/enforce"] != "restricted" || l["pod-security.kubernetes.io/enforce-version"] != "latest" {
		t.Errorf("labels %v: want enforce restricted, version latest", l)
	}
	if !IsOurs(l, vc) {
		t.Errorf("IsOurs(%v) = false", l)
	}
	if IsOurs(l, vcOf("vc-b", "ml", "u")) {
		t.Error("IsOurs accepts the labels of the same name in another host namespace")
	}
	if IsOurs(map[string]string{LabelVirtualCluster: "ml", LabelHostNamespace: "vc-a"}, vc) {
		t.Error("IsOurs accepts labels without managed-by")
	}
}

func TestQuotaHard(t *testing.T) {
	for _, tt := range []struct {
		name        string
		grant, want corev1.ResourceList
	}{
		{"compute as requests", res("cpu", "2", "memory", "4Gi", "ephemeral-storage", "10Gi"),
			res("requests.cpu", "2", "requests.memory", "4Gi", "requests.ephemeral-storage", "10Gi")},
		{"extended resource as requests", res("nvidia.com/gpu", "2"), res("requests.nvidia.com/gpu", "2")},
		{"hugepages as requests", res("hugepages-2Mi", "1Gi"), res("requests.hugepages-2Mi", "1Gi")},
		{"pods as pods", res("pods", "10"), res("pods", "10")},
		{"quota names kept", res("requests.cpu", "1", "limits.memory", "2Gi", "count/configmaps", "5", "services", "3"),
			res("requests.cpu", "1", "limits.memory", "2Gi", "count/configmaps", "5", "services", "3")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := QuotaHard(tt.grant); !equality.Semantic.DeepEqual(got, tt.want) {
				t.Errorf("QuotaHard(%v) = %v, want %v", tt.grant, got, tt.want)
			}
		})
	}
}

func TestDefaultRequests(t *testing.T) {
	for _, tt := range []struct {
		name        string
		grant, want corev1.ResourceList
	}{
		{"cpu and memory", res("cpu", "2", "memory", "4Gi", "pods", "5"), res("cpu", "100m", "memory", "128Mi")},
		{"cpu only", res("cpu", "2"), res("cpu", "100m")},
		{"neither", res("nvidia.com/gpu", "1", "pods", "5"), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := DefaultRequests(tt.grant); !equality.Semantic.DeepEqual(got, tt.want) {
				t.Errorf("DefaultRequests(%v) = %v, want %v", tt.grant, got, tt.want)
			}
		})
	}
}

func TestAllocatable(t *testing.T) {
	for _, tt := range []struct {
		name                string
		grant, member, want corev1.ResourceList
	}{
		{"grant below the member", res("cpu", "2", "nvidia.com/gpu", "1"), res("cpu", "64", "nvidia.com/gpu", "8"), res("cpu", "2", "nvidia.com/gpu", "1")},
		{"member below the grant", res("cpu", "2", "memory", "16Gi"), res("cpu", "1500m", "memory", "8Gi"), res("cpu", "1500m", "memory", "8Gi")},
		{"not offered is zero", res("nvidia.com/gpu", "2", "pods", "10"), res("cpu", "64"), res("nvidia.com/gpu", "0", "pods", "0", "cpu", "64")},
		{"unreachable member offers nothing", res("cpu", "2"), nil, res("cpu", "0")},
		{"a node's own resources the grant leaves out are the member's", res("nvidia.com/gpu", "1"), res("cpu", "4", "memory", "8Gi", "pods", "110", "nvidia.com/gpu", "8"),
			res("nvidia.com/gpu", "1", "cpu", "4", "memory", "8Gi", "pods", "110")},
		{"an extended resource the grant leaves out is not offered", res("cpu", "2"), res("cpu", "4", "example.com/fpga", "2"), res("cpu", "2")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Allocatable(tt.grant, tt.member); !equality.Semantic.DeepEqual(got, tt.want) {
				t.Errorf("Allocatable(%v, %v) = %v, want %v", tt.grant, tt.member, got, tt.want)
			}
		})
	}
}

func TestSyncerRulesAreNamespacedAndNarrow(t *testing.T) {
	for _, r := range SyncerRules() {
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
			t.Errorf("rule %+v names URLs or resource names", r)
		}
		for _, res := range r.Resources {
			switch res {
			case "nodes", "namespaces", "persistentvolumes", "clusterroles", "clusterrolebindings", "roles", "rolebindings", "serviceaccounts", "serviceaccounts/token", "*":
				t.Errorf("rule %+v grants %s", r, res)
			}
		}
		for _, v := range r.Verbs {
			if v == "*" || v == "escalate" || v == "bind" || v == "impersonate" {
				t.Errorf("rule %+v grants verb %s", r, v)
			}
		}
	}
}

func TestKeptWhileUnreachable(t *testing.T) {
	last := contract.MemberPlacement{Name: "gpu", Namespace: "nest-a-1", Token: "t", Nodes: 3}
	kept, ok := keptWhileUnreachable(nestv1.MemberGrantStatus{Name: "gpu", Reason: ReasonMemberUnreachable}, last)
	if !ok || kept.Nodes != 0 || kept.Namespace != last.Namespace || kept.Token != "t" {
		t.Errorf("an unreachable member: kept %+v, %v; want the last placement with no Ready node", kept, ok)
	}
	if _, ok := keptWhileUnreachable(nestv1.MemberGrantStatus{Name: "gpu", Reason: ReasonNotSelected}, last); ok {
		t.Error("a member that no longer selects the VirtualCluster keeps its placement")
	}
	if _, ok := keptWhileUnreachable(nestv1.MemberGrantStatus{Name: "gpu", Reason: ReasonMemberUnreachable}, contract.MemberPlacement{}); ok {
		t.Error("a placement is kept that was never made")
	}
}
