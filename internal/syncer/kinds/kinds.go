// Package kinds is what nest-syncer's synced kinds share: the modes a kind
// runs in, the Context a kind is wired from and the Registration it hands
// back. Each kind lives in its own folder below this one and is one row of
// the runtime's table (internal/syncer/register.go), in the manner of
// vcluster's register.go: adding a kind is one folder and one row.
package kinds

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// Mode is a set of the kinds of syncer a kind runs in.
type Mode uint8

const (
	// VirtualNode is the host syncer: its pods run on the host's virtual
	// nodes, and it alone keeps what the tenant has once (Services, DNS,
	// NetworkPolicies, storage, member placements).
	VirtualNode Mode = 1 << iota
	// Member is a member syncer: its pods run in one member cluster, which
	// gets copies of what those pods use (ConfigMaps, Secrets, tokens).
	Member
)

// String names the modes of m, such as "virtual-node|member".
func (m Mode) String() string {
	switch m {
	case VirtualNode:
		return "virtual-node"
	case Member:
		return "member"
	case VirtualNode | Member:
		return "virtual-node|member"
	}
	return "none"
}

// Context is what a kind is wired from. Informer factories are started by
// the runtime after every kind registered, so a kind asks for the informers
// it needs and adds its event handlers while it registers.
type Context struct {
	// VirtualCluster and HostNamespace are the tenant's name and its host
	// namespace, where every host copy lives.
	VirtualCluster, HostNamespace string
	// Mode is the mode of this syncer: VirtualNode or Member.
	Mode Mode
	// Member names the member cluster of a member syncer ("" otherwise).
	Member string
	// Tenant and Host are the clients of the tenant API server and of the
	// host (or member) API server this syncer writes copies to.
	Tenant, Host kubernetes.Interface
	// TenantInformers watch every tenant object of the kinds asked for.
	TenantInformers informers.SharedInformerFactory
	// HostInformers watch the host copies: the host namespace, only objects
	// labelled as this VirtualCluster's (contract.LabelTenantOf).
	HostInformers informers.SharedInformerFactory
	// TenantPods is the informer of the tenant pods bound to this syncer's
	// nodes.
	TenantPods cache.SharedIndexInformer
	// Recorder records events on tenant objects.
	Recorder record.EventRecorder
}

// QueueName names a kind's work queue in metrics and logs. A member
// syncer's carry the member's name, so they do not share the host syncer's
// series.
func (c *Context) QueueName(kind string) string {
	if c.Member != "" {
		return "member-" + c.Member + "-" + kind
	}
	return kind
}

// NewQueue makes a kind's work queue, named by QueueName(kind), with
// workers workers calling sync for one key at a time and keys listing every
// key for the periodic resync (kindsync.New).
func (c *Context) NewQueue(kind string, workers int, sync func(context.Context, string) (time.Duration, error), keys func() []string) *kindsync.Syncer {
	return kindsync.New(c.QueueName(kind), workers, sync, keys)
}

// Registration is what one kind runs once the informers have synced.
type Registration struct {
	// Queues are the kind's work queues; the runtime runs each until the
	// syncer stops.
	Queues []*kindsync.Syncer
	// Runners run beside the queues until their context ends, such as a
	// provisioner or a listener to close.
	Runners []func(context.Context)
}

// Add appends the queues and runners of r to reg.
func (reg *Registration) Add(r Registration) {
	reg.Queues = append(reg.Queues, r.Queues...)
	reg.Runners = append(reg.Runners, r.Runners...)
}

// OnEvery calls f with the object of every add, update and delete event of
// an informer, tombstones unwrapped.
func OnEvery[T any](f func(T)) cache.ResourceEventHandlerFuncs {
	call := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if o, ok := obj.(T); ok {
			f(o)
		}
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: call, UpdateFunc: func(_, obj any) { call(obj) }, DeleteFunc: call}
}

// AddTenantKey queues on q the "namespace/name" of the tenant object the
// host copy obj stands for (contract.TenantKey), so a copy changed or
// deleted from outside is put right. Objects that are no copy are ignored.
func AddTenantKey(q *kindsync.Syncer, obj metav1.Object) {
	if ns, name, ok := contract.TenantKey(obj.GetAnnotations()); ok {
		q.Add(ns + "/" + name)
	}
}
