package syncer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
)

// The gatekeeper stands between a tenant and its grant in a member cluster.
// A member syncer admits each pod against the grant before anything is
// made in the member, as the host syncer does against the host share; but
// a pod over the grant is not failed as a kubelet would: it is held,
// Pending with reason QuotaExceeded, and admitted once the grant has room
// (a member pod ends, nest-manager raises the grant). A GPU pool is
// usually full: failing the pod would only have its controller make
// another. The tenant cannot widen the grant by editing the member node:
// a member syncer counts the grant alone, never what the node advertises.

// ReasonQuotaExceeded is the tenant pod's status reason while the gatekeeper
// holds it.
const ReasonQuotaExceeded = "QuotaExceeded"

// heldRetry is how often a held pod is tried again without an event.
const heldRetry = 15 * time.Second

// gatekeeper keeps the keys ("namespace/name") of the pods it holds.
type gatekeeper struct {
	mu   sync.Mutex
	held map[string]bool
}

// hold reports whether the pod was newly held.
func (g *gatekeeper) hold(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[key] {
		return false
	}
	g.held[key] = true
	return true
}

func (g *gatekeeper) release(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.held, key)
}

func (g *gatekeeper) isHeld(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held[key]
}

func (g *gatekeeper) keys() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]string, 0, len(g.held))
	for k := range g.held {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// registerGatekeeper makes a member syncer hold pods over the grant, count
// the grant alone, and try held pods again when one of its pods ends.
func (s *syncer) registerGatekeeper(c *kinds.Context) (kinds.Registration, error) {
	g := &gatekeeper{held: map[string]bool{}}
	s.provider.gate = g
	s.provider.capacity.nodes = nil
	s.held = c.NewQueue("held", 1, s.syncHeld, g.keys)
	s.provider.retryHeld = func(key string) { s.held.Queue.AddAfter(key, heldRetry) }
	retryAll := func() {
		for _, k := range g.keys() {
			s.held.Add(k)
		}
	}
	_, _ = c.TenantPods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) {
			if !isTerminalPod(old.(*corev1.Pod)) && isTerminalPod(obj.(*corev1.Pod)) {
				retryAll()
			}
		},
		DeleteFunc: func(any) { retryAll() },
	})
	return kinds.Registration{Queues: []*kindsync.Syncer{s.held}}, nil
}

func isTerminalPod(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// ReasonInjectorUnavailable is the tenant pod's status reason while the
// member's network injector does not answer (its path through the host is
// still being made, or the host is unreachable from the member): the
// member refuses every pod of the namespace then, and the pod waits.
const ReasonInjectorUnavailable = "InjectorUnavailable"

// holdPod marks a pod Pending, with reason ReasonInjectorUnavailable when
// r says so and else ReasonQuotaExceeded (the grant has no room for it),
// and records a warning event the first time.
func (p *podProvider) holdPod(pod *corev1.Pod, r *Rejection, retry func(string)) {
	reason, why := ReasonQuotaExceeded, "the member cluster grant has no room for the pod: "
	if r.Reason == ReasonInjectorUnavailable {
		reason, why = ReasonInjectorUnavailable, "the member cluster's network injector does not answer yet: "
	}
	key := pod.Namespace + "/" + pod.Name
	if p.gate.hold(key) {
		p.recorder.Event(pod, corev1.EventTypeWarning, reason, r.Message)
	}
	retry(key)
	if notify := p.callback(); notify != nil {
		view := pod.DeepCopy()
		view.Status = corev1.PodStatus{
			Phase: corev1.PodPending, Reason: reason,
			Message:  why + r.Message,
			QOSClass: pod.Status.QOSClass, Conditions: pod.Status.Conditions,
		}
		notify(view)
	}
}

// syncHeld tries a held pod again: it is admitted and created in the
// member, held again, or dropped when it is gone, ended or already placed.
func (s *syncer) syncHeld(ctx context.Context, key string) (time.Duration, error) {
	g := s.provider.gate
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		g.release(key)
		return 0, nil
	}
	pod, err := s.pods.Lister().Pods(ns).Get(name)
	if apierrors.IsNotFound(err) || (err == nil && (pod.DeletionTimestamp != nil || isTerminalPod(pod))) {
		g.release(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if _, err := s.provider.hostPods.Get(contract.HostName(s.o.VirtualCluster, ns, name)); err == nil {
		g.release(key)
		return 0, nil
	}
	if err := s.provider.CreatePod(ctx, pod); err != nil {
		return 0, fmt.Errorf("place held pod %s: %w", key, err)
	}
	if g.isHeld(key) {
		return heldRetry, nil
	}
	return 0, nil
}
