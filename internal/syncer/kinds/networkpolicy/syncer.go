package networkpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/tenantmsg"
)

// Reasons of the Warning events a tenant policy gets.
const (
	// ReasonCut: part of the policy cannot be enforced as written and was
	// left out of the host copy (the message says what and why).
	ReasonCut = "NetworkPolicyCut"
	// ReasonNotEnforced: the host copy could not be written. The pods the
	// policy selects are isolated all the same, so they take less traffic,
	// never more, than the policy allows.
	ReasonNotEnforced = "NetworkPolicyNotEnforced"
)

// MaxHostPolicyBytes bounds the size of one host copy, so a tenant cannot
// fill the host's etcd through policies; the host's object quota bounds
// their number.
const MaxHostPolicyBytes = 64 << 10

// Syncer keeps one host NetworkPolicy per tenant NetworkPolicy, and the
// policy labels of host pods, in step with the tenant's policies. Its keys
// are tenant policies' "namespace/name" (Sync) and tenant pods'
// "namespace/name" (SyncPodLabels).
type Syncer struct {
	Translator
	Host     kubernetes.Interface
	Recorder record.EventRecorder
	// Tenant listers of policies, namespaces and the pods on virtual nodes.
	TenantPolicies   networkinglisters.NetworkPolicyLister
	TenantNamespaces corelisters.NamespaceLister
	TenantPods       corelisters.PodLister
	// Host listers of the copies and host pods, in the host namespace.
	HostPolicies networkinglisters.NetworkPolicyNamespaceLister
	HostPods     corelisters.PodNamespaceLister
}

// View is the View of the tenant's policies now.
func (s *Syncer) View() *View {
	policies, _ := s.TenantPolicies.List(labels.Everything())
	return NewView(policies)
}

// Keys are the tenant policies and the tenant keys of the host copies, for
// the periodic resync: a copy whose tenant policy is gone is deleted.
func (s *Syncer) Keys() []string {
	var keys []string
	policies, _ := s.TenantPolicies.List(labels.Everything())
	for _, p := range policies {
		keys = append(keys, p.Namespace+"/"+p.Name)
	}
	copies, _ := s.HostPolicies.List(labels.Everything())
	for _, c := range copies {
		if ns, name, ok := contract.TenantKey(c.Annotations); ok {
			keys = append(keys, ns+"/"+name)
		}
	}
	return keys
}

// PodKeys are the tenant pods on the virtual nodes.
func (s *Syncer) PodKeys() []string {
	pods, _ := s.TenantPods.List(labels.Everything())
	keys := make([]string, len(pods))
	for i, p := range pods {
		keys[i] = p.Namespace + "/" + p.Name
	}
	return keys
}

// Sync makes the host copy of the tenant policy key what Translate gives,
// or deletes it when the tenant policy is gone. Only the syncer's own copy
// is ever written or deleted.
func (s *Syncer) Sync(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, ok := strings.Cut(key, "/")
	if !ok {
		return 0, kindsync.Terminal(fmt.Errorf("network policy key %q is not namespace/name", key))
	}
	hostName := contract.HostName(s.VirtualCluster, namespace, name)
	existing, err := s.HostPolicies.Get(hostName)
	if err != nil && !apierrors.IsNotFound(err) {
		return 0, err
	}
	if existing != nil && !contract.IsCopyOf(existing, s.VirtualCluster, namespace, name) {
		return 0, contract.NotOurCopy("NetworkPolicy", existing, key)
	}
	tenant, err := s.TenantPolicies.NetworkPolicies(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, s.deleteCopy(ctx, existing)
	}
	if err != nil {
		return 0, err
	}
	namespaces, err := s.TenantNamespaces.List(labels.Everything())
	if err != nil {
		return 0, err
	}
	want, cuts, err := s.Translate(tenant, namespaces)
	if err == nil {
		err = checkSize(want)
	}
	if err != nil {
		// An earlier copy would go on allowing what the policy allowed
		// then: the pods stay isolated by their labels, with no rule.
		s.Recorder.Eventf(tenant, corev1.EventTypeWarning, ReasonNotEnforced, "The selected pods are isolated, but the policy's rules are not applied: %v", err)
		return 0, errors.Join(kindsync.Terminal(err), s.deleteCopy(ctx, existing))
	}
	if existing != nil && apiequality.Semantic.DeepEqual(existing.Spec, want.Spec) && maps.Equal(existing.Annotations, want.Annotations) {
		return 0, nil
	}
	for _, c := range cuts {
		s.Recorder.Event(tenant, corev1.EventTypeWarning, ReasonCut, string(c))
	}
	policies := s.Host.NetworkingV1().NetworkPolicies(s.HostNamespace)
	if existing == nil {
		_, err = policies.Create(ctx, want, metav1.CreateOptions{})
	} else {
		upd := existing.DeepCopy()
		upd.Labels, upd.Annotations, upd.Spec = want.Labels, want.Annotations, want.Spec
		_, err = policies.Update(ctx, upd, metav1.UpdateOptions{})
	}
	if apierrors.IsForbidden(err) || apierrors.IsInvalid(err) {
		// The host's words name the copy and the host namespace; the
		// tenant reads the reason (tenantmsg), the log the rest.
		told := tenantmsg.Scope{VirtualCluster: s.VirtualCluster, HostNamespace: s.HostNamespace}.In(namespace).Error(err)
		s.Recorder.Eventf(tenant, corev1.EventTypeWarning, ReasonNotEnforced, "The selected pods are isolated, but the host refused the policy's rules: %s", told)
		err = errors.Join(err, s.deleteCopy(ctx, existing))
	}
	if err != nil {
		return 0, fmt.Errorf("write host NetworkPolicy %s: %w", hostName, err)
	}
	klog.FromContext(ctx).V(2).Info("Wrote host NetworkPolicy", "policy", key, "hostPolicy", hostName)
	return 0, nil
}

func (s *Syncer) deleteCopy(ctx context.Context, existing *networkingv1.NetworkPolicy) error {
	if existing == nil {
		return nil
	}
	err := s.Host.NetworkingV1().NetworkPolicies(s.HostNamespace).Delete(ctx, existing.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &existing.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// checkSize refuses a host copy above MaxHostPolicyBytes.
func checkSize(p *networkingv1.NetworkPolicy) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if len(data) > MaxHostPolicyBytes {
		return fmt.Errorf("its host copy would take %d bytes, above the virtual node's limit of %d: split it into smaller policies", len(data), MaxHostPolicyBytes)
	}
	return nil
}

// SyncPodLabels gives the host pod of the tenant pod key the policy labels
// the tenant's policies call for now (View.PodLabels). The pod translation
// sets them when the host pod is made; this follows later changes of the
// policies and of the pod's labels.
func (s *Syncer) SyncPodLabels(ctx context.Context, key string) (time.Duration, error) {
	namespace, name, ok := strings.Cut(key, "/")
	if !ok {
		return 0, kindsync.Terminal(fmt.Errorf("pod key %q is not namespace/name", key))
	}
	tenant, err := s.TenantPods.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	host, ok, err := contract.GetCopy(s.HostPods.Get, s.VirtualCluster, namespace, name, string(tenant.UID))
	if err != nil || !ok {
		return 0, err
	}
	view, ips := s.View(), kube.PodAddrs(host)
	if past := view.BlocksPast(ips...); past > 0 {
		s.Recorder.Eventf(tenant, corev1.EventTypeWarning, ReasonNotEnforced, "The pod's address lies in more than %d ipBlocks of the namespace's policies: %d of them do not match it; select the pod with a podSelector instead", MaxBlockLabels, past)
	}
	want := WithPodLabels(host.Labels, view.PodLabels(tenant, ips...))
	if maps.Equal(want, host.Labels) {
		return 0, nil
	}
	upd := host.DeepCopy()
	upd.Labels = want
	if _, err := s.Host.CoreV1().Pods(s.HostNamespace).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		return 0, fmt.Errorf("update the policy labels of host pod %s: %w", host.Name, err)
	}
	return 0, nil
}
