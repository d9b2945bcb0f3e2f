package membergrant

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// Labels on every object Nest makes in a member, and on the host Secret.
// They are how Nest recognises its own namespace in a member: a namespace
// of the right name without them belongs to someone else and is never
// adopted or deleted.
const (
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	ManagedByValue      = "nest-manager"
	LabelVirtualCluster = "nest.dev/virtual-cluster"
	LabelHostNamespace  = "nest.dev/host-namespace"
)

// Names of the objects in the tenant's member namespace.
const (
	// SyncerServiceAccount is the identity nest-syncer acts as in the
	// member; its Role and RoleBinding carry the same name.
	SyncerServiceAccount = "nest-syncer"
	// QuotaName is the ResourceQuota holding the grant.
	QuotaName = "nest-grant"
	// LimitRangeName gives containers default requests when the quota
	// counts cpu or memory.
	LimitRangeName = "nest-grant-defaults"
)

// Default container requests of the LimitRange. A ResourceQuota that counts
// requests.cpu or requests.memory refuses a pod whose containers do not
// state them; these defaults let such pods in, and are small so that a pod
// that states nothing takes little of the grant.
var (
	DefaultCPURequest    = resource.MustParse("100m")
	DefaultMemoryRequest = resource.MustParse("128Mi")
)

// hashLen is how many hex digits of the VirtualCluster's identity hash end
// its member namespace's name: 40 bits, so two VirtualClusters collide by
// chance about once in a trillion pairs.
const hashLen = 10

// NamespaceName is the tenant's namespace in the member cluster member:
// nest-<vc>-<hash>, where hash is taken from the VirtualCluster's host
// identity (its host namespace, name and UID) and the member's name. Two
// VirtualClusters of the same name (in two host namespaces, or two hosts
// sharing a member) never share a namespace, one deleted and created
// again gets a fresh one, and two MemberClusters that are the same cluster
// under two names do not fight over one quota. It is at most 63
// characters: the name part is cut when it must be.
func NamespaceName(vc *nestv1.VirtualCluster, member string) string {
	sum := sha256.Sum256([]byte(vc.Namespace + "/" + vc.Name + "/" + string(vc.UID) + "/" + member))
	hash := hex.EncodeToString(sum[:])[:hashLen]
	name := vc.Name
	if room := 63 - len("nest-") - len("-") - hashLen; len(name) > room {
		name = strings.TrimRight(name[:room], "-")
	}
	return "nest-" + name + "-" + hash
}

// MemberLabels are the labels of every object Nest makes in a member for vc.
// The host namespace is the VirtualCluster's own namespace, where its
// control plane runs (controlplane.Names.Namespace).
func MemberLabels(vc *nestv1.VirtualCluster) map[string]string {
	return map[string]string{
		LabelManagedBy:      ManagedByValue,
		LabelVirtualCluster: vc.Name,
		LabelHostNamespace:  vc.Namespace,
	}
}

// IsOurs reports whether labels mark an object as Nest's for vc.
func IsOurs(labels map[string]string, vc *nestv1.VirtualCluster) bool {
	for k, v := range MemberLabels(vc) {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// PodSecurityLevel is the Pod Security level the tenant's member namespace
// enforces: the VirtualCluster's virtual node level, baseline by default,
// so a pod refused on the host is refused in the member too.
func PodSecurityLevel(vc *nestv1.VirtualCluster) string {
	if l := vc.Spec.VirtualNode.PodSecurityLevel; l != "" {
		return string(l)
	}
	return string(nestv1.PodSecurityBaseline)
}

// NamespaceLabels are the labels of the tenant's member namespace: Nest's
// and the Pod Security enforce labels.
func NamespaceLabels(vc *nestv1.VirtualCluster) map[string]string {
	l := MemberLabels(vc)
	l["pod-security.kubernetes.io/enforce"] = PodSecurityLevel(vc)
	l["pod-security.kubernetes.io/enforce-version"] = "latest"
	return l
}

// QuotaHard turns a grant into the hard limits of the member ResourceQuota.
// A grant names resources as a node does (cpu, memory, nvidia.com/gpu,
// pods), a quota as requests:
//   - cpu, memory, ephemeral-storage and hugepages-<size> become
//     requests.<name>; limits are not counted, so a pod need not state any;
//   - an extended resource (a name with a domain, such as nvidia.com/gpu)
//     becomes requests.<name>, the only form a quota accepts for it;
//   - pods stays pods;
//   - a name that already is a quota name (requests.*, limits.*, count/*,
//     services, ...) is kept as it is.
func QuotaHard(grant corev1.ResourceList) corev1.ResourceList {
	hard := corev1.ResourceList{}
	for name, q := range grant {
		hard[quotaName(name)] = q.DeepCopy()
	}
	return hard
}

func quotaName(name corev1.ResourceName) corev1.ResourceName {
	s := string(name)
	switch {
	case name == corev1.ResourceCPU, name == corev1.ResourceMemory, name == corev1.ResourceEphemeralStorage,
		strings.HasPrefix(s, corev1.ResourceHugePagesPrefix):
		return corev1.ResourceName("requests." + s)
	case strings.HasPrefix(s, "requests."), strings.HasPrefix(s, "limits."), strings.HasPrefix(s, "count/"):
		return name
	case strings.Contains(s, "/"):
		return corev1.ResourceName("requests." + s)
	default:
		return name
	}
}

// DefaultRequests are the default container requests the member LimitRange
// gives, for cpu and memory when the grant names them, or nil when it names
// neither and no LimitRange is needed.
func DefaultRequests(grant corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	if _, ok := grant[corev1.ResourceCPU]; ok {
		out[corev1.ResourceCPU] = DefaultCPURequest.DeepCopy()
	}
	if _, ok := grant[corev1.ResourceMemory]; ok {
		out[corev1.ResourceMemory] = DefaultMemoryRequest.DeepCopy()
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Allocatable is what the tenant's member node offers. For each resource
// the grant names: the smaller of the grant and the member's allocatable,
// zero when the member does not offer it (a member Nest cannot reach offers
// nothing). cpu, memory, ephemeral-storage and pods the grant leaves out
// are the member's, as a node has them all: without pods, the tenant's
// scheduler would fit no pod there. Other resources the grant leaves out
// (another extended resource) are not offered at all.
func Allocatable(grant, member corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, g := range grant {
		m, ok := member[name]
		switch {
		case !ok:
			out[name] = *resource.NewQuantity(0, g.Format)
		case m.Cmp(g) < 0:
			out[name] = m.DeepCopy()
		default:
			out[name] = g.DeepCopy()
		}
	}
	for _, name := range nodeResources {
		if _, granted := grant[name]; !granted {
			if m, ok := member[name]; ok {
				out[name] = m.DeepCopy()
			}
		}
	}
	return out
}

// nodeResources are the resources every node has.
var nodeResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, corev1.ResourcePods}

// SyncerRules are what nest-syncer may do in the tenant's member namespace,
// and nothing else: it runs the tenant's pods there with their ConfigMaps,
// Secrets and Services, keeps the EndpointSlices of the Services that lead
// member pods back to their tenant (memberNetwork in nest-syncer), serves
// logs, exec, attach and port-forward, writes events, and reads endpoints
// and the grant's quota. Nothing cluster-scoped
// is granted: the Role and its binding live in that namespace only.
func SyncerRules() []rbacv1.PolicyRule {
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	read := []string{"get", "list", "watch"}
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: all},
		{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/exec", "pods/attach", "pods/portforward"}, Verbs: []string{"create", "get"}},
		{APIGroups: []string{""}, Resources: []string{"pods/ephemeralcontainers", "pods/resize"}, Verbs: []string{"update", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets", "services"}, Verbs: all},
		{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "list", "watch", "get"}},
		{APIGroups: []string{""}, Resources: []string{"endpoints"}, Verbs: read},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: all},
		{APIGroups: []string{""}, Resources: []string{"resourcequotas"}, Verbs: read},
	}
}
