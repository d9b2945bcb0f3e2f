package virtualcluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// Events of a CA rotation.
const (
	ReasonCARotationStarted = "CARotationStarted"
	ReasonCARotationPhase   = "CARotationPhase"
	ReasonCARotationDone    = "CARotationDone"
	ReasonInvalidCARotation = "InvalidCARotation"
	ReasonCARotationWaiting = "CARotationWaiting"
	ReasonCARotationNodes   = "CARotationNodes"
)

// serveCARotation starts the CA rotation nestv1.AnnotationRotateCA asks
// for, when its request was never started (status.certificates.
// lastCARequest) and no other runs: a status patch of its own records it
// in phase Trust before anything is issued for it, so a restart of
// nest-manager resumes it rather than starting it again. A bad request is
// refused with a Warning event; one that arrives while another rotation
// runs waits, with a Warning event, and starts once that one ended.
func (r *Reconciler) serveCARotation(ctx context.Context, s *reconcileState, now time.Time) error {
	raw := s.vc.Annotations[nestv1.AnnotationRotateCA]
	if raw == "" {
		return nil
	}
	rot, err := controlplane.ParseCARotationRequest(raw, now)
	st := s.vc.Status.Certificates
	switch {
	case err != nil:
		r.Recorder.Eventf(s.vc, nil, corev1.EventTypeWarning, ReasonInvalidCARotation, "Reconcile", "%v: nest certs rotate-ca writes it", err)
		return nil
	case st != nil && st.LastCARequest == rot.Request:
		return nil
	case st != nil && st.CARotation != nil:
		r.Recorder.Eventf(s.vc, nil, corev1.EventTypeWarning, ReasonCARotationWaiting, "Reconcile",
			"CA rotation %s waits until rotation %s, in phase %s, ends (nest certs rotate-ca %s --finish ends its grace)", rot.Request, st.CARotation.Request, st.CARotation.Phase, s.vc.Name)
		return nil
	}
	return r.startCARotation(ctx, s, rot, true)
}

// startCARotation records rot as the rotation under way, and, when
// requested (an AnnotationRotateCA request), as the last request started.
func (r *Reconciler) startCARotation(ctx context.Context, s *reconcileState, rot *nestv1.CARotation, requested bool) error {
	if err := r.patchCertificates(ctx, s, func(st *nestv1.CertificatesStatus) {
		st.CARotation = rot.DeepCopy()
		if requested {
			st.LastCARequest = rot.Request
		}
	}); err != nil {
		return fmt.Errorf("record the CA rotation %q: %w", rot.Request, err)
	}
	ctrl.LoggerFrom(ctx).Info("CA rotation started", "virtualCluster", klog.KObj(s.vc), "request", rot.Request, "authorities", rot.Authorities)
	r.Recorder.Eventf(s.vc, nil, corev1.EventTypeNormal, ReasonCARotationStarted, "Reconcile",
		"CA rotation %s of %s: phase Trust, the new CAs join every trust bundle", rot.Request, controlplane.CANameList(rot.Authorities))
	return nil
}

// startDueCARotation starts a rotation of the CAs of pkiData with a third
// of their life or less left, when none runs: each with a grace of a tenth
// of the tenant's CA lifetime.
func (r *Reconciler) startDueCARotation(ctx context.Context, s *reconcileState, pkiData map[string][]byte, now time.Time) error {
	if st := s.vc.Status.Certificates; st != nil && st.CARotation != nil {
		return nil
	}
	due := controlplane.CARotationDue(pkiData, now)
	if len(due) == 0 {
		return nil
	}
	lifetime := cmp.Or(controlplane.RenewalOf(s.vc, now).CALifetime, pki.CAValidity)
	rot := &nestv1.CARotation{Request: fmt.Sprintf("expiring-%d", now.Unix()), Authorities: due,
		Phase: nestv1.CAPhaseTrust, PhaseTime: metav1.NewTime(now.Truncate(time.Second)), Grace: metav1.Duration{Duration: lifetime / 10}}
	return r.startCARotation(ctx, s, rot, false)
}

// reconcileCARotation moves the rotation under way to its next phase: from
// Trust, Reissue and Retire once the control plane rolled out with the
// PKI Secret of that phase (s.obs.pkiRolledOut), from Grace at its
// retireAfter or when AnnotationFinishCARotation names it. Reissue's end
// marks every pod's token Secret due, so each pod gets a token the new
// service-account key signed long before the old one is retired. A
// rotation of the cluster CA records the bundle that rolled out
// (rolledOutCAHash) from Reissue on (nodesRejoin), which dedicated nodes
// then rejoin with, and no phase ends before every one of them has
// (nodesBehind).
func (r *Reconciler) reconcileCARotation(ctx context.Context, s *reconcileState) (bool, error) {
	st := s.vc.Status.Certificates
	if st == nil || st.CARotation == nil {
		return true, nil
	}
	rot, now := st.CARotation, time.Now()
	// The PKI Secret holds the shape of rot's phase only once reconcilePKI
	// applied it; a rotation recorded after it (startDueCARotation) waits
	// for the next reconcile.
	if applied := s.renewal.CARotation; applied == nil || applied.Request != rot.Request || applied.Phase != rot.Phase {
		return true, nil
	}
	if s.obs.pkiRolledOut && nodesRejoin(rot) {
		waiting, err := r.waitForNodes(ctx, s, rot)
		if waiting || err != nil {
			return true, err
		}
		rot = s.vc.Status.Certificates.CARotation
	}
	next := nextCAPhase(rot, s.obs.pkiRolledOut, s.vc.Annotations[nestv1.AnnotationFinishCARotation] == rot.Request, now)
	if next == "" {
		return true, nil
	}
	if next == nestv1.CAPhaseGrace && slices.Contains(rot.Authorities, nestv1.CAServiceAccount) {
		if err := r.refreshTokens(ctx, s.vc, now); err != nil {
			return false, err
		}
	}
	if err := r.patchCertificates(ctx, s, func(st *nestv1.CertificatesStatus) {
		st.CARotation, st.LastCARotation = advance(rot, next, now, st.LastCARotation)
	}); apierrors.IsConflict(err) {
		// Read stale, or changed since: the next reconcile reads it anew.
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("move the CA rotation %q to phase %s: %w", rot.Request, next, err)
	}
	ctrl.LoggerFrom(ctx).Info("CA rotation phase", "virtualCluster", klog.KObj(s.vc), "request", rot.Request, "phase", next)
	reason := ReasonCARotationPhase
	if next == nestv1.CAPhaseDone {
		reason = ReasonCARotationDone
	}
	r.Recorder.Eventf(s.vc, nil, corev1.EventTypeNormal, reason, "Reconcile", "CA rotation %s of %s: phase %s, %s",
		rot.Request, controlplane.CANameList(rot.Authorities), next, phaseMeaning[next])
	return true, nil
}

// nodesRejoin reports whether dedicated nodes rejoin with the cluster CA
// bundle of rot's phase: from Reissue on, when rot replaces the cluster
// CA. In Trust the old CA still signs every certificate, so a kubelet
// that trusts it alone is fine, and Reissue's API server certificate
// reaches it through the cross-signed CA: a rotation restarts each kubelet
// twice, in Reissue (for a client certificate of the new CA) and in
// Retire (to trust the new CA alone).
func nodesRejoin(rot *nestv1.CARotation) bool {
	return rot.Phase != nestv1.CAPhaseTrust && slices.Contains(rot.Authorities, nestv1.CACluster)
}

// waitForNodes records the cluster CA bundle every control-plane replica
// runs with in rot's phase as rolledOutCAHash, and reports whether a
// dedicated node of the tenant has yet to rejoin with it (the rotation
// then waits, with an event naming them; their GlobalNodes' changes bring
// the next reconcile).
func (r *Reconciler) waitForNodes(ctx context.Context, s *reconcileState, rot *nestv1.CARotation) (bool, error) {
	hash := pki.BundleHash(s.pki[controlplane.CACert])
	if rot.RolledOutCAHash != hash {
		err := r.patchCertificates(ctx, s, func(st *nestv1.CertificatesStatus) { st.CARotation.RolledOutCAHash = hash })
		if apierrors.IsConflict(err) {
			return true, nil
		}
		if err != nil {
			return true, fmt.Errorf("record the cluster CA bundle of CA rotation %q, phase %s: %w", rot.Request, rot.Phase, err)
		}
	}
	nodes, err := r.globalNodes(ctx)
	if err != nil {
		return true, err
	}
	behind := nodesBehind(nodes, holderKey(s.vc), hash)
	if len(behind) == 0 {
		return false, nil
	}
	r.Recorder.Eventf(s.vc, nil, corev1.EventTypeNormal, ReasonCARotationNodes, "Reconcile",
		"CA rotation %s, phase %s, waits for dedicated nodes to rejoin with its cluster CA bundle: %s (their GlobalNodes' Moving condition says how it goes; a node released from the tenant is no longer waited for)",
		rot.Request, rot.Phase, strings.Join(behind, ", "))
	return true, nil
}

// nodesBehind are the GlobalNodes of holder, among nodes, that are
// joining the tenant, or in it without the cluster CA bundle of hash. A
// joining node is waited for even on its first join: its kubelet may have
// bootstrapped from the signer the rotation replaces before it began. A
// node on its way in (Draining, Leaving) joins with the bundle of the
// phase it reaches, and one on its way out is not the tenant's concern.
func nodesBehind(nodes []nestv1.GlobalNode, holder, hash string) []string {
	var out []string
	for _, gn := range nodes {
		if gn.Status.VirtualCluster != holder {
			continue
		}
		switch {
		case gn.Status.Phase == nestv1.NodePhaseJoining,
			gn.Status.Phase == nestv1.NodePhaseTenant && gn.Status.CABundleHash != hash:
			out = append(out, gn.Name)
		}
	}
	return out
}

// phaseMeaning says what each phase does, for events and nest certs check.
var phaseMeaning = map[nestv1.CARotationPhase]string{
	nestv1.CAPhaseTrust:   "the new CAs join every trust bundle",
	nestv1.CAPhaseReissue: "every leaf is issued from the new CAs",
	nestv1.CAPhaseGrace:   "the old CAs are still trusted until the grace ends",
	nestv1.CAPhaseRetire:  "the old CAs leave every trust bundle",
	nestv1.CAPhaseDone:    "the old CAs are no longer trusted",
}

// nextCAPhase is the phase rot moves to now, or "" while it stays:
// rolledOut says whether every control-plane replica runs with the PKI
// Secret of rot's phase, finish whether AnnotationFinishCARotation names
// rot.
func nextCAPhase(rot *nestv1.CARotation, rolledOut, finish bool, now time.Time) nestv1.CARotationPhase {
	switch rot.Phase {
	case nestv1.CAPhaseTrust:
		if rolledOut {
			return nestv1.CAPhaseReissue
		}
	case nestv1.CAPhaseReissue:
		if rolledOut {
			return nestv1.CAPhaseGrace
		}
	case nestv1.CAPhaseGrace:
		if finish || rot.RetireAfter != nil && !now.Before(rot.RetireAfter.Time) {
			return nestv1.CAPhaseRetire
		}
	case nestv1.CAPhaseRetire:
		if rolledOut {
			return nestv1.CAPhaseDone
		}
	}
	return ""
}

// advance is the status of rot moved to phase next at now: the rotation
// under way and the last that ended.
func advance(rot *nestv1.CARotation, next nestv1.CARotationPhase, now time.Time, last *nestv1.CARotation) (current, lastDone *nestv1.CARotation) {
	moved := rot.DeepCopy()
	moved.Phase, moved.PhaseTime = next, metav1.NewTime(now.Truncate(time.Second))
	if next != nestv1.CAPhaseGrace {
		// Grace keeps Reissue's bundle; the other phases roll out anew.
		moved.RolledOutCAHash = ""
	}
	if next == nestv1.CAPhaseGrace {
		moved.RetireAfter = &metav1.Time{Time: now.Add(rot.Grace.Duration).Truncate(time.Second)}
	}
	if next == nestv1.CAPhaseDone {
		return nil, moved
	}
	return moved, last
}

// refreshTokens marks every token Secret of vc's pods due now, so
// nest-syncer asks the tenant for tokens the new service-account key
// signs. It reads them from the API server: the cache holds only the
// Secrets nest-manager makes (CacheOptions).
func (r *Reconciler) refreshTokens(ctx context.Context, vc *nestv1.VirtualCluster, now time.Time) error {
	var list corev1.SecretList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(controlplane.NamesOf(vc).Namespace),
		client.MatchingLabels{contract.LabelTokenSecret: "true", contract.LabelTenantOf: vc.Name}); err != nil {
		return fmt.Errorf("list the token Secrets of %s: %w", klog.KObj(vc), err)
	}
	at := now.UTC().Format(time.RFC3339)
	for i := range list.Items {
		sec := &list.Items[i]
		patch := client.MergeFrom(sec.DeepCopy())
		if sec.Annotations == nil {
			sec.Annotations = map[string]string{}
		}
		sec.Annotations[contract.AnnotationTokenRefreshAt] = at
		if err := r.Patch(ctx, sec, patch); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("mark the tokens of Secret %s due: %w", klog.KObj(sec), err)
		}
	}
	return nil
}

// patchCertificates changes status.certificates with mutate in a status
// patch of its own, which fails on a concurrent change (a stale read must
// not move a rotation back), and applies the same to s's copies.
func (r *Reconciler) patchCertificates(ctx context.Context, s *reconcileState, mutate func(*nestv1.CertificatesStatus)) error {
	live := s.vc.DeepCopy()
	base := live.DeepCopy()
	if live.Status.Certificates == nil {
		live.Status.Certificates = &nestv1.CertificatesStatus{}
	}
	mutate(live.Status.Certificates)
	if err := r.Status().Patch(ctx, live, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	for _, o := range []*nestv1.VirtualCluster{s.vc, s.before} {
		if o.Status.Certificates == nil {
			o.Status.Certificates = &nestv1.CertificatesStatus{}
		}
		mutate(o.Status.Certificates)
		o.ResourceVersion = live.ResourceVersion
	}
	return nil
}
