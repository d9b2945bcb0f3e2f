package membergrant

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controller/membercluster"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// fieldManager owns, in server-side apply, the fields Nest sets in members.
const fieldManager = "nest-manager"

// memberConn is one member as the admin kubeconfig reaches it. The admin
// credential is used only here, to set grants up and tear them down; it is
// never handed to nest-syncer.
type memberConn struct {
	cs     kubernetes.Interface
	config *rest.Config
}

// connect reads mc's kubeconfig Secret, only in the manager's namespace as
// the membercluster controller does, and builds a client of the member.
// A failure is the grant's (MemberUnreachable); an error is the host's.
func (r *Reconciler) connect(ctx context.Context, mc *nestv1.MemberCluster) (*memberConn, *grantFailure, error) {
	ref := mc.Spec.KubeconfigSecretRef
	if ref.Namespace != r.ManagerNamespace {
		return nil, &grantFailure{ReasonMemberUnreachable, fmt.Sprintf(
			"MemberCluster %s: spec.kubeconfigSecretRef.namespace is %s, but nest-manager reads kubeconfig Secrets only in its own namespace %s: the platform team must move the Secret there",
			mc.Name, ref.Namespace, r.ManagerNamespace)}, nil
	}
	secret := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); {
	case apierrors.IsNotFound(err):
		return nil, &grantFailure{ReasonMemberUnreachable, fmt.Sprintf(
			"MemberCluster %s: kubeconfig Secret %s/%s does not exist: the platform team must create it (nest member add does)", mc.Name, ref.Namespace, ref.Name)}, nil
	case err != nil:
		return nil, nil, fmt.Errorf("MemberCluster %s: get kubeconfig Secret %s/%s: %w", mc.Name, ref.Namespace, ref.Name, err)
	}
	key := ref.Key
	if key == "" {
		key = nestv1.DefaultKubeconfigKey
	}
	cfg, err := membercluster.RESTConfig(secret.Data[key], r.requestTimeout())
	if err != nil {
		return nil, &grantFailure{ReasonMemberUnreachable, fmt.Sprintf(
			"MemberCluster %s: Secret %s/%s key %s: %v", mc.Name, ref.Namespace, ref.Name, key, err)}, nil
	}
	cfg.UserAgent = "nest-manager/membergrant"
	// Setting one grant up takes about ten requests.
	cfg.QPS, cfg.Burst = 20, 40
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, &grantFailure{ReasonMemberUnreachable, fmt.Sprintf("MemberCluster %s: client of %s: %v", mc.Name, cfg.Host, err)}, nil
	}
	return &memberConn{cs: cs, config: cfg}, nil, nil
}

// memberFailure classifies an error of a request to the member: an answer
// the member gave (forbidden, invalid, conflict) means the set-up failed; no
// answer means the member is unreachable.
func memberFailure(host, what string, err error) *grantFailure {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return &grantFailure{ReasonSetupFailed, fmt.Sprintf("%s in the member at %s: %v", what, host, err)}
	}
	return &grantFailure{ReasonMemberUnreachable, fmt.Sprintf("%s in the member at %s: %v", what, host, err)}
}

// setUp makes the grant's objects in the member: the namespace, nest-syncer's
// service account, Role and RoleBinding, the quota and the LimitRange. Each
// is server-side applied, so a second run changes nothing and a field Nest
// stops setting (a resource dropped from the grant) is removed. It returns
// the service account's UID, which a kept token must name.
func (r *Reconciler) setUp(ctx context.Context, m *memberConn, vc *nestv1.VirtualCluster, grant nestv1.MemberGrant) (*corev1.ServiceAccount, *grantFailure) {
	ns := NamespaceName(vc, grant.Name)
	if f := ensureNamespace(ctx, m, vc, ns); f != nil {
		return nil, f
	}
	apply := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
	own := MemberLabels(vc)
	sa, err := m.cs.CoreV1().ServiceAccounts(ns).Apply(ctx,
		corev1ac.ServiceAccount(SyncerServiceAccount, ns).WithLabels(own), apply)
	if err != nil {
		return nil, memberFailure(m.config.Host, "apply ServiceAccount "+ns+"/"+SyncerServiceAccount, err)
	}
	if _, err := m.cs.RbacV1().Roles(ns).Apply(ctx,
		rbacv1ac.Role(SyncerServiceAccount, ns).WithLabels(own).WithRules(ruleConfigs(SyncerRules())...), apply); err != nil {
		return nil, memberFailure(m.config.Host, "apply Role "+ns+"/"+SyncerServiceAccount, err)
	}
	if _, err := m.cs.RbacV1().RoleBindings(ns).Apply(ctx,
		rbacv1ac.RoleBinding(SyncerServiceAccount, ns).WithLabels(own).
			WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(SyncerServiceAccount)).
			WithSubjects(rbacv1ac.Subject().WithKind(rbacv1.ServiceAccountKind).WithName(SyncerServiceAccount).WithNamespace(ns)), apply); err != nil {
		return nil, memberFailure(m.config.Host, "apply RoleBinding "+ns+"/"+SyncerServiceAccount, err)
	}
	if _, err := m.cs.CoreV1().ResourceQuotas(ns).Apply(ctx,
		corev1ac.ResourceQuota(QuotaName, ns).WithLabels(own).WithSpec(corev1ac.ResourceQuotaSpec().WithHard(QuotaHard(grant.Resources))), apply); err != nil {
		return nil, memberFailure(m.config.Host, "apply ResourceQuota "+ns+"/"+QuotaName, err)
	}
	if defaults := DefaultRequests(grant.Resources); defaults != nil {
		if _, err := m.cs.CoreV1().LimitRanges(ns).Apply(ctx,
			corev1ac.LimitRange(LimitRangeName, ns).WithLabels(own).WithSpec(corev1ac.LimitRangeSpec().WithLimits(
				corev1ac.LimitRangeItem().WithType(corev1.LimitTypeContainer).WithDefaultRequest(defaults))), apply); err != nil {
			return nil, memberFailure(m.config.Host, "apply LimitRange "+ns+"/"+LimitRangeName, err)
		}
	} else if err := m.cs.CoreV1().LimitRanges(ns).Delete(ctx, LimitRangeName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return nil, memberFailure(m.config.Host, "delete LimitRange "+ns+"/"+LimitRangeName+", which a grant without cpu or memory does not need,", err)
	}
	return sa, nil
}

// ensureNamespace creates the tenant's member namespace, or checks that the
// one of that name is Nest's for vc, and applies its labels. A namespace
// without Nest's labels belongs to someone else and is never taken over.
func ensureNamespace(ctx context.Context, m *memberConn, vc *nestv1.VirtualCluster, name string) *grantFailure {
	nsLabels := NamespaceLabels(vc)
	existing, err := m.cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Create, not apply: apply would take over a namespace created
		// in between. AlreadyExists sends us back to the check.
		_, err = m.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: nsLabels}}, metav1.CreateOptions{FieldManager: fieldManager})
		if err == nil {
			return nil
		}
		if apierrors.IsAlreadyExists(err) {
			existing, err = m.cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return memberFailure(m.config.Host, "namespace "+name, err)
	}
	if !IsOurs(existing.Labels, vc) {
		return &grantFailure{ReasonSetupFailed, fmt.Sprintf(
			"namespace %s exists in the member at %s without Nest's labels (%s=%s, %s=%s, %s=%s): Nest does not take over a namespace it did not make; delete it in the member, or remove the grant",
			name, m.config.Host, LabelManagedBy, ManagedByValue, LabelVirtualCluster, vc.Name, LabelHostNamespace, vc.Namespace)}
	}
	if !existing.DeletionTimestamp.IsZero() {
		return &grantFailure{ReasonSetupFailed, fmt.Sprintf(
			"namespace %s in the member at %s is being deleted (the grant was removed before): it is set up again once it is gone", name, m.config.Host)}
	}
	if maps.Equal(existing.Labels, mergeLabels(existing.Labels, nsLabels)) {
		return nil
	}
	if _, err := m.cs.CoreV1().Namespaces().Apply(ctx, corev1ac.Namespace(name).WithLabels(nsLabels),
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		return memberFailure(m.config.Host, "apply namespace "+name, err)
	}
	return nil
}

// mergeLabels returns have with want's labels set over it.
func mergeLabels(have, want map[string]string) map[string]string {
	out := maps.Clone(have)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, want)
	return out
}

// ruleConfigs converts RBAC rules into their apply configurations.
func ruleConfigs(rules []rbacv1.PolicyRule) []*rbacv1ac.PolicyRuleApplyConfiguration {
	out := make([]*rbacv1ac.PolicyRuleApplyConfiguration, 0, len(rules))
	for _, r := range rules {
		out = append(out, rbacv1ac.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...))
	}
	return out
}

// token returns a token of nest-syncer's service account sa for the
// placement: the one in old while it has more than a fifth of its life
// left, a new one from the TokenRequest API otherwise. It also returns when
// to renew it.
func (r *Reconciler) token(ctx context.Context, m *memberConn, sa *corev1.ServiceAccount, old *contract.MemberPlacement) (string, time.Time, time.Time, *grantFailure) {
	if renewAt, ok := reusableToken(old, sa.Namespace, m.config.Host, sa.UID, r.now()); ok {
		return old.Token, old.TokenExpiry, renewAt, nil
	}
	tr, err := m.cs.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(r.tokenLifetime() / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, time.Time{}, memberFailure(m.config.Host, "request a token of ServiceAccount "+sa.Namespace+"/"+sa.Name, err)
	}
	expiry := tr.Status.ExpirationTimestamp.Time
	issued := r.now()
	if c, err := parseClaims(tr.Status.Token); err == nil {
		issued = time.Unix(c.IssuedAt, 0)
	}
	ctrl.LoggerFrom(ctx).V(1).Info("Issued member token", "serviceAccount", klog.KObj(sa), "server", m.config.Host, "expiry", expiry)
	return tr.Status.Token, expiry, renewTime(issued, expiry), nil
}

// removeNamespace deletes the tenant's namespace ns in the member, if it is
// Nest's for vc, and reports whether it is gone. A namespace of that name
// without Nest's labels is not Nest's to delete: it counts as gone.
func removeNamespace(ctx context.Context, m *memberConn, vc *nestv1.VirtualCluster, ns string) (gone bool, f *grantFailure) {
	existing, err := m.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, memberFailure(m.config.Host, "get namespace "+ns+" to delete it", err)
	}
	if !IsOurs(existing.Labels, vc) {
		ctrl.LoggerFrom(ctx).Info("Member namespace is not Nest's: left alone", "namespace", ns, "server", m.config.Host)
		return true, nil
	}
	if existing.DeletionTimestamp.IsZero() {
		err := m.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &existing.UID}})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, memberFailure(m.config.Host, "delete namespace "+ns, err)
		}
		ctrl.LoggerFrom(ctx).Info("Deleting member namespace", "namespace", ns, "server", m.config.Host)
	}
	return false, &grantFailure{ReasonRemoving, fmt.Sprintf("namespace %s in the member at %s is being deleted", ns, m.config.Host)}
}
