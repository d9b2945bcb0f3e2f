package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"

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

// NamespaceHolder returns the name of the VirtualCluster that holds a host
// namespace, given every VirtualCluster in it: the oldest by creation time,
// then the first by name. "" when vcs is empty. A namespace holds one virtual
// cluster: its NetworkPolicies, LimitRange and Pod Security labels cover the
// whole namespace.
func NamespaceHolder(vcs []nestv1.VirtualCluster) string {
	if len(vcs) == 0 {
		return ""
	}
	holder := slices.MinFunc(vcs, func(a, b nestv1.VirtualCluster) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return holder.Name
}

// NamespaceHolderOf reads every VirtualCluster in namespace from c and
// returns the one that holds it (NamespaceHolder). Every controller asks
// this one question, so a VirtualCluster refused the namespace gets
// nothing from any of them.
func NamespaceHolderOf(ctx context.Context, c client.Reader, namespace string) (string, error) {
	var list nestv1.VirtualClusterList
	if err := c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return "", fmt.Errorf("list VirtualClusters in namespace %s: %w", namespace, err)
	}
	return NamespaceHolder(list.Items), nil
}

// NamespaceInUseMessage says that VirtualCluster name cannot use namespace,
// which VirtualCluster holder holds, and what to do instead.
func NamespaceInUseMessage(namespace, holder, name string) string {
	return fmt.Sprintf("host namespace %s already holds VirtualCluster %s, and a namespace holds one virtual cluster: "+
		"delete VirtualCluster %s and create it in a namespace of its own (`nest create %s` makes one by default)",
		namespace, holder, name, name)
}
