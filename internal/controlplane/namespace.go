package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	psapi "k8s.io/pod-security-admission/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// NamespaceLabelsFor returns the labels the tenant's host namespace carries:
// Pod Security admission enforces spec.virtualNode.podSecurityLevel, at the
// latest version of the standard, on every pod there. nest-syncer checks
// tenant pods against the same level first, so this is the host's own guard
// behind it; the control-plane pod meets the restricted level.
func NamespaceLabelsFor(vc *nestv1.VirtualCluster) map[string]string {
	return map[string]string{
		psapi.EnforceLevelLabel:   PodSecurityLevel(vc),
		psapi.EnforceVersionLabel: psapi.VersionLatest,
	}
}

// AnnotationNamespaceHolder is on a host namespace that a VirtualCluster
// holds, and names it. nest-manager writes it with an optimistic lock
// before it creates anything for the VirtualCluster (ClaimNamespace), so
// of two VirtualClusters created at once in one namespace exactly one ever
// gets host objects.
const AnnotationNamespaceHolder = "nest.dev/virtualcluster-holder"

// NamespaceHolder returns the name of the VirtualCluster that holds a host
// namespace, given the namespace's AnnotationNamespaceHolder (claimed, "" if
// none) and every VirtualCluster in it: the claimed one while it exists,
// else the oldest by creation time, then the first by name. "" when vcs is
// empty. A namespace holds one virtual cluster: its NetworkPolicies,
// LimitRange and Pod Security labels cover the whole namespace, and its
// syncer may read every Secret in it.
func NamespaceHolder(claimed string, vcs []nestv1.VirtualCluster) string {
	if len(vcs) == 0 {
		return ""
	}
	if claimed != "" && slices.ContainsFunc(vcs, func(vc nestv1.VirtualCluster) bool { return vc.Name == claimed }) {
		return claimed
	}
	holder := slices.MinFunc(vcs, func(a, b nestv1.VirtualCluster) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return holder.Name
}

// NamespaceHolderOf reads namespace and every VirtualCluster in it from c
// and returns the one that holds it (NamespaceHolder). Every controller
// asks this one question, so a VirtualCluster refused the namespace gets
// nothing from any of them. c should read from the API server, not a
// cache: a cache that has not seen the claim or the other VirtualCluster
// yet would give another answer.
func NamespaceHolderOf(ctx context.Context, c client.Reader, namespace string) (string, error) {
	_, holder, err := namespaceHolder(ctx, c, namespace)
	return holder, err
}

func namespaceHolder(ctx context.Context, c client.Reader, namespace string) (*corev1.Namespace, string, error) {
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return nil, "", fmt.Errorf("get namespace %s: %w", namespace, err)
	}
	var list nestv1.VirtualClusterList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, "", fmt.Errorf("list VirtualClusters in namespace %s: %w", namespace, err)
	}
	return ns, NamespaceHolder(ns.Annotations[AnnotationNamespaceHolder], list.Items), nil
}

// ClaimNamespace returns the VirtualCluster that holds vc's namespace, as
// NamespaceHolderOf, and when that is vc records the claim on the
// namespace (AnnotationNamespaceHolder) if it is not there yet. The patch
// carries the namespace's resourceVersion: a concurrent claim makes it
// fail with a conflict, and the caller retries and reads the winner. r
// reads from the API server; w writes.
func ClaimNamespace(ctx context.Context, r client.Reader, w client.Writer, vc *nestv1.VirtualCluster) (string, error) {
	ns, holder, err := namespaceHolder(ctx, r, vc.Namespace)
	if err != nil || holder != vc.Name || ns.Annotations[AnnotationNamespaceHolder] == vc.Name {
		return holder, err
	}
	patch := client.MergeFromWithOptions(ns.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if ns.Annotations == nil {
		ns.Annotations = map[string]string{}
	}
	ns.Annotations[AnnotationNamespaceHolder] = vc.Name
	if err := w.Patch(ctx, ns, patch); err != nil {
		return "", fmt.Errorf("claim namespace %s for VirtualCluster %s: %w", vc.Namespace, vc.Name, err)
	}
	return holder, nil
}

// ReleaseNamespace removes vc's claim from its namespace, if the claim is
// vc's, so a VirtualCluster that waited for the namespace takes it by the
// usual order rather than one later created under vc's name. A namespace
// that is gone holds nothing already.
func ReleaseNamespace(ctx context.Context, r client.Reader, w client.Writer, vc *nestv1.VirtualCluster) error {
	ns := &corev1.Namespace{}
	if err := r.Get(ctx, client.ObjectKey{Name: vc.Namespace}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if ns.Annotations[AnnotationNamespaceHolder] != vc.Name {
		return nil
	}
	patch := client.MergeFromWithOptions(ns.DeepCopy(), client.MergeFromWithOptimisticLock{})
	delete(ns.Annotations, AnnotationNamespaceHolder)
	if err := w.Patch(ctx, ns, patch); err != nil {
		return fmt.Errorf("release namespace %s of VirtualCluster %s: %w", vc.Namespace, vc.Name, err)
	}
	return nil
}

// NamespaceInUseMessage says that VirtualCluster name cannot use namespace,
// which VirtualCluster holder holds, and what to do instead.
func NamespaceInUseMessage(namespace, holder, name string) string {
	return fmt.Sprintf("host namespace %s already holds VirtualCluster %s, and a namespace holds one virtual cluster: "+
		"delete VirtualCluster %s and create it in a namespace of its own (`nest create %s` makes one by default)",
		namespace, holder, name, name)
}
