package virtualcluster

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
)

// Tenant health is probed by its own small controller, so the reconciler
// that creates and heals host objects never waits on a tenant API server: a
// slow or dead tenant occupies one prober worker for at most ProbeTimeout
// per check, and never delays another tenant's create.

// TenantHealth is what the last probe of one tenant found.
type TenantHealth struct {
	// Available: the tenant API server answered /readyz.
	Available bool
	// AvailableMessage says why it is not available.
	AvailableMessage string
	// NodesReady: the virtual node is Ready in the tenant cluster.
	NodesReady bool
	// NodesMessage says why it is not.
	NodesMessage string
	// PreflightFor is the version an upgrade pending at the probe was
	// checked for (spec.kubernetesVersion), "" when none was pending.
	PreflightFor string
	// PreflightBlockers says what holds that upgrade, "" when nothing.
	PreflightBlockers string
}

// Health holds the last probe result of every tenant, and tells the
// VirtualCluster reconciler when one changes.
type Health struct {
	mu      sync.RWMutex
	byKey   map[types.NamespacedName]TenantHealth
	changed chan event.GenericEvent
}

// NewHealth returns an empty Health.
func NewHealth() *Health {
	return &Health{byKey: map[types.NamespacedName]TenantHealth{}, changed: make(chan event.GenericEvent, 1024)}
}

// Get returns the last probe result of the tenant, and false before the
// first probe.
func (h *Health) Get(key types.NamespacedName) (TenantHealth, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	th, ok := h.byKey[key]
	return th, ok
}

// set records a probe result and reports whether it differs from the last.
func (h *Health) set(key types.NamespacedName, th TenantHealth) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev, ok := h.byKey[key]
	h.byKey[key] = th
	return !ok || prev != th
}

func (h *Health) forget(key types.NamespacedName) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byKey, key)
}

// Changes is the stream of VirtualClusters whose health changed.
func (h *Health) Changes() <-chan event.GenericEvent { return h.changed }

// DefaultProbeTimeout bounds one probe of a tenant API server.
const DefaultProbeTimeout = 5 * time.Second

// HealthProber is the controller that probes tenant API servers and their
// virtual nodes, each tenant on its own schedule: every startingRequeue until
// Ready (every stuckRequeue once that takes long: notReadyRequeue), then
// every healthyRequeue.
type HealthProber struct {
	client.Client
	// APIReader lists a tenant's control-plane pods, whose API servers the
	// upgrade pre-flight asks one by one; the manager caches no pods.
	APIReader client.Reader
	Tenants   TenantChecker
	Health    *Health
	// Workers bounds how many tenants are probed at once.
	Workers int
	// ProbeTimeout bounds one probe; DefaultProbeTimeout when zero.
	ProbeTimeout time.Duration
}

// Reconcile probes one tenant and records the result.
func (p *HealthProber) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vc := &nestv1.VirtualCluster{}
	if err := p.Get(ctx, req.NamespacedName, vc); err != nil {
		if apierrors.IsNotFound(err) {
			p.Health.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !vc.DeletionTimestamp.IsZero() {
		p.Health.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	th := p.probe(ctx, vc)
	if p.Health.set(req.NamespacedName, th) {
		ctrl.LoggerFrom(ctx).V(1).Info("Tenant health changed", "virtualCluster", klog.KObj(vc), "available", th.Available, "nodesReady", th.NodesReady)
		select {
		case p.Health.changed <- event.GenericEvent{Object: vc}:
		case <-ctx.Done():
			return ctrl.Result{}, ctx.Err()
		}
	}
	if th.Available && th.NodesReady {
		return ctrl.Result{RequeueAfter: healthyRequeue}, nil
	}
	return ctrl.Result{RequeueAfter: notReadyRequeue(vc, time.Now())}, nil
}

// probe asks the tenant API server for /readyz, then for its virtual node,
// then whether the administrators are cluster-admin yet: nest-manager asks
// as itself (system:masters), so its own success no longer says that the
// admin kubeconfig a Ready VirtualCluster hands out works. Once /readyz
// answers, it runs an upgrade's pre-flight too, whatever the nodes say.
func (p *HealthProber) probe(ctx context.Context, vc *nestv1.VirtualCluster) TenantHealth {
	kubeconfig, err := controlplane.ManagerKubeconfig(ctx, p, vc)
	if err != nil {
		return TenantHealth{AvailableMessage: err.Error()}
	}
	timeout := p.ProbeTimeout
	if timeout == 0 {
		timeout = DefaultProbeTimeout
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := p.Tenants.Ready(pctx, kubeconfig); err != nil {
		return TenantHealth{AvailableMessage: "tenant /readyz: " + err.Error()}
	}
	th := TenantHealth{Available: true}
	th.NodesReady, th.NodesMessage = p.nodesReady(pctx, kubeconfig)
	if to, pending := upgradePending(vc); pending {
		// Its own time: it reads every replica's metrics and the nodes.
		fctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		th.PreflightFor = to
		th.PreflightBlockers = p.preflight(fctx, vc, kubeconfig, to)
	}
	return th
}

// nodesReady asks for the virtual node, then whether the administrators
// are cluster-admin yet; its message says what is missing.
func (p *HealthProber) nodesReady(ctx context.Context, kubeconfig []byte) (bool, string) {
	if err := p.Tenants.VirtualNodeReady(ctx, kubeconfig); err != nil {
		return false, err.Error()
	}
	if err := p.Tenants.AdministratorsAuthorized(ctx, kubeconfig); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// upgradePending reports whether vc asks for a version its control plane
// does not run and its upgrade has not started, and which version.
func upgradePending(vc *nestv1.VirtualCluster) (string, bool) {
	to := controlplane.KubernetesVersion(vc)
	if controlplane.RunningVersion(vc) == to || meta.IsStatusConditionTrue(vc.Status.Conditions, nestv1.ConditionUpgrading) {
		return "", false
	}
	return to, true
}

// preflight asks the tenant what holds its upgrade to to
// (TenantChecker.Preflight), asking each control-plane replica's API
// server. A check that cannot run holds the upgrade too.
func (p *HealthProber) preflight(ctx context.Context, vc *nestv1.VirtualCluster, kubeconfig []byte, to string) string {
	pods, err := controlPlanePods(ctx, p.APIReader, vc)
	if err != nil {
		return "the pre-flight checks could not run: " + err.Error()
	}
	var apiServers []string
	for _, pod := range pods {
		if pod.Status.PodIP != "" && pod.DeletionTimestamp.IsZero() {
			apiServers = append(apiServers, "https://"+net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(controlplane.Port)))
		}
	}
	ignore := vc.Annotations[nestv1.AnnotationIgnoreRemovedAPIs] == "true"
	blockers, err := p.Tenants.Preflight(ctx, kubeconfig, apiServers, to, ignore)
	if err != nil {
		return "the pre-flight checks could not run: " + err.Error()
	}
	return blockers
}

// SetupWithManager registers the prober with Workers workers.
func (p *HealthProber) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&nestv1.VirtualCluster{}).
		Named("virtualcluster-health").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(p.Workers, 1)}).
		Complete(p)
}
