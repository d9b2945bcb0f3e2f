package virtualcluster

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// asked for (version.CheckUpgrade): a spec the CRD's rules did not
	// check, or a version since dropped from the supported list.
	ReasonUpgradeRefused = "UpgradeRefused"
	// ReasonRuntimeConfigNotServed: a warning event, spec.controlPlane.runtimeConfig
	// names a group version the API server's version serves nothing of
	// (controlplane.RuntimeConfigNotServed), left out of its --runtime-config.
	ReasonRuntimeConfigNotServed = "RuntimeConfigNotServed"
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
	sts, err := readStatefulSet(ctx, r.Client, s.vc)
	if err != nil || sts == nil {
		s.upgrade = startAt(s.vc, to)
		return err == nil, err
	}
	from := runningVersion(s.vc, sts)
	if from == to {
		s.upgrade = upToDate(to)
		return true, nil
	}
	// While it moves, the StatefulSet is read from the API server: a cache
	// that lags would show an older step than the one written last.
	if sts, err = readStatefulSet(ctx, r.APIReader, s.vc); err != nil || sts == nil {
		s.upgrade = startAt(s.vc, to)
		return err == nil, err
	}
	// Held or refused, the template stays as it is: never back over
	// replicas already moved.
	s.upgrade = upgradeState{versions: controlplane.AllAt(from), running: from}
	if current, ok := controlplane.VersionsOf(sts); ok {
		s.upgrade.versions = current
	}
	if err := version.CheckUpgrade(from, to); err != nil {
		s.upgrade.reason, s.upgrade.message = ReasonUpgradeRefused, err.Error()
		return true, nil
	}
	plan := controlplane.UpgradePlan(from, to, controlplane.Replicas(s.vc))
	at := stepReached(plan, sts)
	if at >= 0 && !rolledOut(sts) {
		s.upgrade.setStep(plan, at, from, to, "rolling out")
		return true, nil
	}
	if at == len(plan)-1 {
		s.upgrade = upToDate(to)
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

// readStatefulSet reads the control-plane StatefulSet of vc through c;
// nil when there is none.
func readStatefulSet(ctx context.Context, c client.Reader, vc *nestv1.VirtualCluster) (*appsv1.StatefulSet, error) {
	n := controlplane.NamesOf(vc)
	sts := &appsv1.StatefulSet{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: n.Namespace, Name: n.StatefulSet()}, sts); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read StatefulSet of %s: %w", klog.KObj(vc), err)
	}
	return sts, nil
}

// startAt is the state of a control plane whose StatefulSet is missing: a
// new one starts at to, but one that ran (status.version) is made again
// at the version it ran, and its upgrade goes on from there.
func startAt(vc *nestv1.VirtualCluster, to string) upgradeState {
	from := vc.Status.Version
	if from == "" || from == to {
		return upToDate(to)
	}
	return upgradeState{versions: controlplane.AllAt(from), running: from, reason: ReasonUpgradePending,
		message: fmt.Sprintf("the upgrade from %s to %s waits for the control plane's StatefulSet, made again at %s", from, to, from)}
}

// upToDate is the state of a control plane that runs v. Its message is
// the same however it got there, so the condition stays put once set.
func upToDate(v string) upgradeState {
	return upgradeState{versions: controlplane.AllAt(v), running: v, reason: ReasonUpToDate, message: "the control plane runs " + v}
}

// runningVersion is controlplane.RunningVersion, but before this
// controller first wrote status.version (a Nest without upgrades made the
// StatefulSet) it trusts the template, when it runs every component at one
// version, over the spec.
func runningVersion(vc *nestv1.VirtualCluster, sts *appsv1.StatefulSet) string {
	if v, ok := controlplane.VersionsOf(sts); ok && vc.Status.Version == "" && v == controlplane.AllAt(v.APIServer) {
		return v.APIServer
	}
	return controlplane.RunningVersion(vc)
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
