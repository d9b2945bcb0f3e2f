package controlplane

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// LimitOvercommit is how far the limits of a tenant's pods may together
// exceed its share: the tenant ResourceQuota holds limits.cpu and
// limits.memory to LimitOvercommit times the share's cpu and memory, while
// requests, what the host reserves, are held to the share itself. With the
// default container limits (DefaultContainerLimits) a tenant of the default
// share (2 cpu, 4Gi) runs 16 containers that state no limits; containers with
// smaller explicit limits fit more.
const LimitOvercommit = 4

// Default container resources of a tenant's host namespace, before they are
// capped by the share: a container that states no limit is limited to 500m
// cpu, 512Mi memory and 1Gi of ephemeral storage, and one that states no
// request asks for 10m cpu, 32Mi memory and 64Mi of ephemeral storage.
// nest-syncer states a zero cpu and memory request wherever a tenant
// container has none (the tenant scheduler counted zero), so on tenant pods
// only the default limits and the ephemeral-storage request apply: host pods
// are never BestEffort.
var (
	defaultContainerLimits = corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("500m"),
		corev1.ResourceMemory:           resource.MustParse("512Mi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Gi"),
	}
	defaultContainerRequests = corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("10m"),
		corev1.ResourceMemory:           resource.MustParse("32Mi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("64Mi"),
	}
)

// DefaultContainerLimits returns the limits the namespace's LimitRange gives
// a container that states none: cpu, memory and ephemeral-storage, each the
// smaller of the fixed default and the share; ephemeral-storage alone when
// the VirtualCluster's containerLimits is None.
func DefaultContainerLimits(vc *nestv1.VirtualCluster) corev1.ResourceList {
	limits := capped(defaultContainerLimits, Share(vc))
	if !limitsDefaulted(vc) {
		delete(limits, corev1.ResourceCPU)
		delete(limits, corev1.ResourceMemory)
	}
	return limits
}

// limitsDefaulted reports whether tenant containers without cpu or memory
// limits get default ones (containerLimits Default, or unset).
func limitsDefaulted(vc *nestv1.VirtualCluster) bool {
	return vc.Spec.VirtualNode.ContainerLimits != nestv1.ContainerLimitsNone
}

// LimitRangeFor returns the LimitRange of the tenant's host namespace. It
// applies to every container there, the control plane's included:
//   - default: DefaultContainerLimits;
//   - defaultRequest: the fixed default requests, each at most the default limit;
//   - max: the share's cpu and memory (and ephemeral-storage when the share
//     names it), raised to the largest limit of a control-plane container so
//     the control-plane pod, which states all its limits, is always admitted.
//     A maximum makes a limit compulsory, so there is one only for what has
//     a default limit.
func LimitRangeFor(vc *nestv1.VirtualCluster) *corev1.LimitRange {
	n := NamesOf(vc)
	limits := DefaultContainerLimits(vc)
	share := Share(vc)
	maxima := corev1.ResourceList{}
	for name := range limits {
		if q, ok := share[name]; ok {
			maxima[name] = q
		}
	}
	for _, r := range controlPlaneResources(vc) {
		for name, q := range r.Limits {
			if m, ok := maxima[name]; ok && q.Cmp(m) > 0 {
				maxima[name] = q.DeepCopy()
			}
		}
	}
	return &corev1.LimitRange{
		ObjectMeta: metav1.ObjectMeta{Name: n.LimitRange(), Namespace: n.Namespace, Labels: n.Labels()},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{
			Type:           corev1.LimitTypeContainer,
			Default:        limits,
			DefaultRequest: capped(defaultContainerRequests, limits),
			Max:            maxima,
		}}},
	}
}

// capped returns each quantity of l, lowered to the one of the same name in
// bound where bound has it.
func capped(l, bound corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range l {
		if b, ok := bound[name]; ok && b.Cmp(q) < 0 {
			q = b
		}
		out[name] = q.DeepCopy()
	}
	return out
}

// TenantQuotaFor returns the host ResourceQuota that enforces the share on
// the host, over the pods in the tenant priority class: the pod count;
// requests of cpu, memory, ephemeral-storage and extended resources up to
// the share; and, unless containerLimits is None, limits of cpu and memory
// up to LimitOvercommit times the share (a quota on limits makes them
// compulsory).
func TenantQuotaFor(vc *nestv1.VirtualCluster) *corev1.ResourceQuota {
	n := NamesOf(vc)
	hard := corev1.ResourceList{}
	for name, q := range Share(vc) {
		switch name {
		case corev1.ResourcePods:
			hard[name] = q
		case corev1.ResourceCPU, corev1.ResourceMemory:
			hard["requests."+name] = q
			if limitsDefaulted(vc) {
				hard["limits."+name] = *resource.NewMilliQuantity(q.MilliValue()*LimitOvercommit, q.Format)
			}
		case corev1.ResourceEphemeralStorage:
			hard["requests."+name] = q
		default:
			hard[corev1.ResourceName(corev1.DefaultResourceRequestsPrefix)+name] = q
		}
	}
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: n.TenantQuota(), Namespace: n.Namespace, Labels: n.Labels()},
		Spec: corev1.ResourceQuotaSpec{
			Hard: hard,
			ScopeSelector: &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
				ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{TenantPriorityClass},
			}}},
		},
	}
}

// Defaults of spec.virtualNode.objectBudget.
const (
	DefaultBudgetConfigMaps = 500
	DefaultBudgetSecrets    = 500
	DefaultBudgetServices   = 200
	// DefaultBudgetDataBytes is 64Mi.
	DefaultBudgetDataBytes = 64 << 20
)

// Budget is a VirtualCluster's object budget with its defaults filled in:
// how many host copies of tenant ConfigMaps, Secrets and Services it may
// have, and how many bytes of ConfigMap and Secret data together.
type Budget struct {
	ConfigMaps, Secrets, Services, DataBytes int64
}

// BudgetOf returns spec.virtualNode.objectBudget with defaults.
func BudgetOf(vc *nestv1.VirtualCluster) Budget {
	b := vc.Spec.VirtualNode.ObjectBudget
	or := func(v *int32, def int64) int64 {
		if v != nil {
			return int64(*v)
		}
		return def
	}
	out := Budget{
		ConfigMaps: or(b.ConfigMaps, DefaultBudgetConfigMaps), Secrets: or(b.Secrets, DefaultBudgetSecrets),
		Services: or(b.Services, DefaultBudgetServices), DataBytes: DefaultBudgetDataBytes,
	}
	if b.DataBytes != nil {
		out.DataBytes = b.DataBytes.Value()
	}
	return out
}

// ObjectQuotaFor returns the host ResourceQuota that bounds the objects of
// the namespace: the tenant's budget plus what Nest keeps there itself, which
// is its own Secrets, ConfigMaps and Services (Names), the host's
// kube-root-ca.crt ConfigMap, and one token Secret per tenant pod up to the
// share's pod count:
//
//	count/configmaps = budget.configMaps + len(Names.ConfigMaps) + len(Names.MemberConfigMaps) + 1
//	count/secrets    = budget.secrets + len(Names.Secrets) + len(Names.MemberSecrets) + share pods
//	services         = budget.services + len(Names.Services) + one per member grant (contract.MemberHostService)
//
// Claims are bounded in number and size: each replica's etcd claim, one
// disk per virtual node with spec.virtualNode.nodeDisk, and the tenant's
// own claims within spec.virtualNode.storage (StorageBudget).
//
//	persistentvolumeclaims = 1 + virtual nodes
//	requests.storage       = datastore size + virtual nodes × nodeDisk.size
func ObjectQuotaFor(vc *nestv1.VirtualCluster) *corev1.ResourceQuota {
	n := NamesOf(vc)
	b := BudgetOf(vc)
	pods := Share(vc)[corev1.ResourcePods]
	count := func(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.DecimalSI) }
	hard := corev1.ResourceList{
		"count/configmaps":      count(b.ConfigMaps + int64(len(n.ConfigMaps())+len(n.MemberConfigMaps())) + 1),
		"count/secrets":         count(b.Secrets + int64(len(n.Secrets())+len(n.MemberSecrets())) + pods.Value()),
		corev1.ResourceServices: count(b.Services + int64(len(n.Services())+len(vc.Spec.Members))),
	}
	// Claims: the etcd claim of each replica, the virtual nodes' disks and
	// the tenant's own claims, each bounded in number and size.
	replicas := int64(ptr.Deref(vc.Spec.ControlPlane.Replicas, 1))
	storage, claims := resource.Quantity{}, replicas
	for range replicas {
		storage.Add(StorageSize(vc))
	}
	if d := vc.Spec.VirtualNode.NodeDisk; d != nil {
		nodes := int64(ptr.Deref(vc.Spec.VirtualNode.Count, 1))
		for range nodes {
			storage.Add(d.Size)
		}
		claims += nodes
	}
	tenantRequests, tenantClaims := StorageBudget(vc)
	storage.Add(tenantRequests)
	hard[corev1.ResourcePersistentVolumeClaims] = count(claims + tenantClaims)
	hard[corev1.ResourceRequestsStorage] = storage
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: n.ObjectQuota(), Namespace: n.Namespace, Labels: n.Labels()},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard},
	}
}

// Control-plane container names.
const (
	etcdName              = "etcd"
	etcdMemberName        = "etcd-member"
	apiServerName         = "kube-apiserver"
	controllerManagerName = "kube-controller-manager"
	schedulerName         = "kube-scheduler"
	syncerName            = "nest-syncer"
	coreDNSName           = "coredns"
)

// EtcdMemberContainer is the etcd-member helper's container: pods without
// it are an older Nest's.
const EtcdMemberContainer = etcdMemberName

// componentResources are the requests and limits of the control-plane
// containers but kube-apiserver's (apiServerResources). Memory limits leave
// room well above each component's idle RSS, measured with an empty tenant on
// v1.36.3: etcd 112 MiB, kube-controller-manager 133 MiB, kube-scheduler 105
// MiB, nest-syncer 41 MiB (it caches the tenant's ConfigMaps and Secrets, so
// more room), CoreDNS 33 MiB. A tenant that pushes one past it restarts its
// own container, not the host. CPU limits are set because the namespace's
// LimitRange would otherwise give each container the tenant default; they are
// high enough not to throttle ordinary work.
var componentResources = map[string]corev1.ResourceRequirements{
	etcdName: resources("50m", "64Mi", "1", "512Mi"),
	// The etcd-member helper idles at about 15 MiB between its checks.
	etcdMemberName:        resources("10m", "16Mi", "200m", "64Mi"),
	controllerManagerName: resources("50m", "64Mi", "1", "512Mi"),
	schedulerName:         resources("25m", "32Mi", "1", "256Mi"),
	syncerName:            resources("50m", "64Mi", "2", "512Mi"),
	coreDNSName:           resources("25m", "32Mi", "500m", "128Mi"),
}

// Defaults of kube-apiserver's resources, for what spec.controlPlane.resources
// leaves out. Its idle RSS is 281 MiB; the memory limit also sizes its
// in-flight request limits (APIServerInflight).
var (
	apiServerRequests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	apiServerLimits   = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}
)

func resources(cpu, memory, cpuLimit, memoryLimit string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuLimit), corev1.ResourceMemory: resource.MustParse(memoryLimit)},
	}
}

// apiServerResources are spec.controlPlane.resources with defaults: requests
// 100m cpu and 256Mi memory when it states no requests, or the limit it
// states if that is smaller (a default request above the limit would be
// refused); a cpu and memory limit, when it states none, of 2 cpu and 1Gi,
// or the request if that is larger.
func apiServerResources(vc *nestv1.VirtualCluster) corev1.ResourceRequirements {
	r := *vc.Spec.ControlPlane.Resources.DeepCopy()
	if len(r.Requests) == 0 {
		r.Requests = apiServerRequests.DeepCopy()
		for name, limit := range r.Limits {
			if req, ok := r.Requests[name]; ok && req.Cmp(limit) > 0 {
				r.Requests[name] = limit.DeepCopy()
			}
		}
	}
	if r.Limits == nil {
		r.Limits = corev1.ResourceList{}
	}
	for name, def := range apiServerLimits {
		if _, ok := r.Limits[name]; ok {
			continue
		}
		if req, ok := r.Requests[name]; ok && req.Cmp(def) > 0 {
			def = req
		}
		r.Limits[name] = def.DeepCopy()
	}
	return r
}

// controlPlaneResources returns the resources of every control-plane container by name.
func controlPlaneResources(vc *nestv1.VirtualCluster) map[string]corev1.ResourceRequirements {
	out := map[string]corev1.ResourceRequirements{apiServerName: apiServerResources(vc)}
	for name, r := range componentResources {
		out[name] = *r.DeepCopy()
	}
	return out
}

// Bounds of APIServerInflight.
const (
	inflightBaseline   = 256 << 20 // bytes the idle API server takes
	inflightPerRequest = 4 << 20   // bytes one request in flight may hold
	inflightMin        = 30
	inflightMax        = 600
)

// APIServerInflight sizes kube-apiserver's --max-requests-inflight (readOnly)
// and --max-mutating-requests-inflight (mutating) from its memory limit, so
// concurrent large LISTs meet 429s before the limit: one request in flight per
// 4 MiB of the limit above a 256 MiB baseline, at least 30 and at most 600 in
// all, a third of them mutating:
//
//	total    = clamp((limit - 256Mi) / 4Mi, 30, 600)
//	mutating = total / 3
//	readOnly = total - mutating
//
// The default 1Gi limit gives 128 and 64; from 2656Mi up it is the upstream
// defaults, 400 and 200. With API Priority and Fairness the two sum to the
// server's concurrency limit.
func APIServerInflight(memoryLimit resource.Quantity) (readOnly, mutating int) {
	total := int((memoryLimit.Value() - inflightBaseline) / inflightPerRequest)
	total = max(inflightMin, min(inflightMax, total))
	mutating = total / 3
	return total - mutating, mutating
}

// ControlPlaneGOGC is the GOGC of every control-plane container: the heap
// may grow to 1.5 times the live heap between collections instead of Go's
// default of 2. An idle control plane is mostly kube-apiserver heap (about
// 200 MiB of its 320 MiB working set at GOGC 100), so the garbage
// collector's target moves memory per tenant more than any flag; the price
// is more frequent collections, which an idle tenant hardly notices. See
// docs/virtualclusters.md.
const ControlPlaneGOGC = 50

// goRuntimeEnv tunes a Go component's garbage collector: ControlPlaneGOGC,
// and GOMEMLIMIT at 90% of its container's memory limit so it works harder
// as it nears the limit instead of being OOM-killed.
func goRuntimeEnv(r corev1.ResourceRequirements) []corev1.EnvVar {
	env := []corev1.EnvVar{{Name: "GOGC", Value: strconv.Itoa(ControlPlaneGOGC)}}
	if limit, ok := r.Limits[corev1.ResourceMemory]; ok {
		env = append(env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: strconv.FormatInt(limit.Value()/10*9, 10)})
	}
	return env
}
