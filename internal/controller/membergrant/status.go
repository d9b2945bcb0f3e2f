package membergrant

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
)

// Reasons of a grant that is not Ready (status.members[].reason).
const (
	// ReasonMemberNotFound: no MemberCluster has the grant's name.
	ReasonMemberNotFound = "MemberNotFound"
	// ReasonNotSelected: the MemberCluster's virtualClusterSelector is
	// unset or does not match the VirtualCluster's labels.
	ReasonNotSelected = "NotSelected"
	// ReasonMemberUnreachable: the member's kubeconfig Secret could not be
	// used, or the member did not answer.
	ReasonMemberUnreachable = "MemberUnreachable"
	// ReasonSetupFailed: the member answered but refused part of the set-up,
	// or a namespace of that name exists and is not Nest's.
	ReasonSetupFailed = "SetupFailed"
	// ReasonRemoving: the grant left the spec (or the VirtualCluster is
	// being deleted) and its member namespace is still being deleted. The
	// entry stays until the namespace is gone.
	ReasonRemoving = "Removing"
)

// grantFailure is why a grant is not Ready.
type grantFailure struct {
	reason, message string
}

func (f *grantFailure) Error() string { return f.reason + ": " + f.message }

func memberNotFound(name string) *grantFailure {
	return &grantFailure{ReasonMemberNotFound, fmt.Sprintf(
		"spec.members[%s]: MemberCluster %s does not exist: ask the platform team to register it (nest member add), or remove the grant", name, name)}
}

// selected decides whether mc admits vc, and why not.
func selected(mc *nestv1.MemberCluster, vc *nestv1.VirtualCluster) *grantFailure {
	if mc.Spec.VirtualClusterSelector == nil {
		return &grantFailure{ReasonNotSelected, fmt.Sprintf(
			"MemberCluster %s has no spec.virtualClusterSelector, so it admits no VirtualCluster: the platform team must set one that matches this VirtualCluster's labels", mc.Name)}
	}
	sel, err := metav1.LabelSelectorAsSelector(mc.Spec.VirtualClusterSelector)
	if err != nil {
		return &grantFailure{ReasonNotSelected, fmt.Sprintf(
			"MemberCluster %s: spec.virtualClusterSelector is not a valid selector: %v", mc.Name, err)}
	}
	if !sel.Matches(labels.Set(vc.Labels)) {
		return &grantFailure{ReasonNotSelected, fmt.Sprintf(
			"spec.virtualClusterSelector of MemberCluster %s (%s) does not match the labels of VirtualCluster %s/%s: label the VirtualCluster to match, or ask the platform team to widen the selector",
			mc.Name, sel.String(), vc.Namespace, vc.Name)}
	}
	return nil
}

// grantStatus is the status entry of a grant: Ready when f is nil.
func grantStatus(name, namespace string, allocatable corev1.ResourceList, f *grantFailure) nestv1.MemberGrantStatus {
	st := nestv1.MemberGrantStatus{Name: name, Namespace: namespace, Allocatable: allocatable}
	if f != nil {
		st.Reason, st.Message = f.reason, f.message
		return st
	}
	st.Ready = true
	st.Message = fmt.Sprintf("set up in namespace %s of the member; the member node offers %s", namespace, kube.FormatResourceList(allocatable, kube.ResourceListText))
	return st
}

// sortedStatuses returns the entries of m sorted by name, or nil when
// there are none, so that an empty list removes the field.
func sortedStatuses(m map[string]nestv1.MemberGrantStatus) []nestv1.MemberGrantStatus {
	if len(m) == 0 {
		return nil
	}
	out := make([]nestv1.MemberGrantStatus, 0, len(m))
	for _, st := range m {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b nestv1.MemberGrantStatus) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
