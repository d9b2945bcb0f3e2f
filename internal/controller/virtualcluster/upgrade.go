package virtualcluster

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/version"
)

// Upgrading condition reasons besides the steps' (controlplane.UpgradeEtcd, ...).
const (
	// ReasonUpToDate: the control plane runs spec.kubernetesVersion.
	ReasonUpToDate = "UpToDate"
	// ReasonUpgradePending: the upgrade waits for its pre-flight checks.
	ReasonUpgradePending = "UpgradePending"
	// ReasonUpgradeBlocked: a pre-flight check holds the upgrade.
	ReasonUpgradeBlocked = "UpgradeBlocked"
	// ReasonUpgradeRefused: the running version may not move to the one
	// asked for (version.CheckUpgrade), which the CRD's rules let by only
	// for an object they never checked.
	ReasonUpgradeRefused = "UpgradeRefused"
)

// upgradeState is what the upgrade phase found: the component versions
// the StatefulSet is to run, the version the control plane runs, and the
// Upgrading condition.
type upgradeState struct {
	versions controlplane.ComponentVersions
	// running is status.version: set once every component runs it.
	running string
	// upgrading, reason and message are the Upgrading condition.
	upgrading       bool
	reason, message string
}

// reconcileUpgrade decides the versions the control plane's components run
// (the StatefulSet's template), moving it from status.version to
// spec.kubernetesVersion through controlplane.UpgradePlan's steps: a step
// starts once the one before rolled out (every replica runs it, Ready).
// The step reached is read from the StatefulSet's template, not kept
// elsewhere, so a restarted nest-manager goes on where it was. The first
// step waits for the pre-flight checks (preflightBlockers).
func (r *Reconciler) reconcileUpgrade(ctx context.Context, s *reconcileState) (bool, error) {
	to := controlplane.KubernetesVersion(s.vc)
	sts := &appsv1.StatefulSet{}
	n := controlplane.NamesOf(s.vc)
	if err := r.Get(ctx, client.ObjectKey{Namespace: n.Namespace, Name: n.StatefulSet()}, sts); err != nil {
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("read StatefulSet of %s: %w", klog.KObj(s.vc), err)
		}
		// No control plane runs yet: it starts at the version asked for.
		s.upgrade = upToDate(to, "the control plane runs "+to)
		return true, nil
	}
	from := runningVersion(s.vc, sts)
	if from == to {
		s.upgrade = upToDate(to, "the control plane runs "+to)
		return true, nil
	}
	s.upgrade = upgradeState{versions: controlplane.AllAt(from), running: from}
	if err := version.CheckUpgrade(from, to); err != nil {
		s.upgrade.reason, s.upgrade.message = ReasonUpgradeRefused, err.Error()
		return true, nil
	}
	plan := controlplane.UpgradePlan(from, to, controlplane.Replicas(s.vc))
	at := stepReached(plan, sts)
	if written := stepWritten(plan, s.vc); written > at {
		// A lagging cache shows a template older than the step last
		// written: keep that step. Never go back, nor hold an upgrade
		// that started: the old versions would be written back over
		// replicas already moved.
		s.upgrade.setStep(plan, written, from, to, "rolling out")
		return true, nil
	}
	if at >= 0 && !rolledOut(sts) {
		s.upgrade.setStep(plan, at, from, to, "rolling out")
		return true, nil
	}
	if at == len(plan)-1 {
		s.upgrade = upToDate(to, fmt.Sprintf("upgraded from %s: the control plane runs %s", from, to))
		klog.FromContext(ctx).Info("Upgrade complete", "virtualCluster", klog.KObj(s.vc), "from", from, "to", to)
		return true, nil
	}
	if at < 0 {
		if held, ok := preflightHold(r.preflightBlockers(s.vc, to)); ok {
			s.upgrade.reason, s.upgrade.message = held.reason, fmt.Sprintf("the upgrade from %s to %s waits%s", from, to, held.message)
			return true, nil
		}
	}
	s.upgrade.setStep(plan, at+1, from, to, "starting")
	klog.FromContext(ctx).Info("Upgrade step", "virtualCluster", klog.KObj(s.vc), "step", plan[at+1].Reason, "versions", plan[at+1].Versions)
	return true, nil
}

// preflightHold says whether the pre-flight's answer holds the upgrade,
// and the reason and the end of the message that say why.
func preflightHold(blockers string, checked bool) (upgradeState, bool) {
	switch {
	case !checked:
		return upgradeState{reason: ReasonUpgradePending, message: " for its pre-flight checks"}, true
	case blockers != "":
		return upgradeState{reason: ReasonUpgradeBlocked, message: ": " + blockers}, true
	}
	return upgradeState{}, false
}

// upToDate is the state of a control plane that runs v.
func upToDate(v, message string) upgradeState {
	return upgradeState{versions: controlplane.AllAt(v), running: v, reason: ReasonUpToDate, message: message}
}

// runningVersion is the version the control plane runs: status.version,
// or, before this controller first wrote it (a Nest without upgrades made
// the StatefulSet), the one its template runs every component at; the
// spec's when neither says.
func runningVersion(vc *nestv1.VirtualCluster, sts *appsv1.StatefulSet) string {
	if vc.Status.Version != "" {
		return vc.Status.Version
	}
	if v, ok := controlplane.VersionsOf(sts); ok && v == controlplane.AllAt(v.APIServer) {
		return v.APIServer
	}
	return controlplane.KubernetesVersion(vc)
}

// setStep records that the upgrade from from to to is at plan[i].
func (u *upgradeState) setStep(plan []controlplane.UpgradeStep, i int, from, to, what string) {
	u.versions, u.upgrading, u.reason = plan[i].Versions, true, plan[i].Reason
	u.message = fmt.Sprintf("upgrading from %s to %s: step %d of %d, %s, %s", from, to, i+1, len(plan), plan[i].Reason, what)
}

// stepReached is the index in plan of the last step whose versions the
// StatefulSet's template holds, or -1 when it holds none (the upgrade has
// not started).
func stepReached(plan []controlplane.UpgradeStep, sts *appsv1.StatefulSet) int {
	current, ok := controlplane.VersionsOf(sts)
	if !ok {
		return -1
	}
	for i := len(plan) - 1; i >= 0; i-- {
		if plan[i].Versions == current {
			return i
		}
	}
	return -1
}

// stepWritten is the index in plan of the step the Upgrading condition
// says was written last, -1 when it names none of plan's.
func stepWritten(plan []controlplane.UpgradeStep, vc *nestv1.VirtualCluster) int {
	c := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionUpgrading)
	if c == nil || c.Status != metav1.ConditionTrue {
		return -1
	}
	return slices.IndexFunc(plan, func(st controlplane.UpgradeStep) bool { return st.Reason == c.Reason })
}

// preflightBlockers says what holds an upgrade to to, from the prober's
// last look at the tenant (HealthProber.preflight); "" when nothing does.
// checked is false until the prober has looked for this version.
func (r *Reconciler) preflightBlockers(vc *nestv1.VirtualCluster, to string) (blockers string, checked bool) {
	th, ok := r.Health.Get(client.ObjectKeyFromObject(vc))
	if !ok || th.PreflightFor != to {
		return "", false
	}
	return th.PreflightBlockers, true
}

// upgradingCondition is the Upgrading condition an upgrade state gives.
func upgradingCondition(u upgradeState, generation int64) metav1.Condition {
	c := metav1.Condition{Type: nestv1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: u.reason, Message: u.message, ObservedGeneration: generation}
	if u.upgrading {
		c.Status = metav1.ConditionTrue
	}
	return c
}
