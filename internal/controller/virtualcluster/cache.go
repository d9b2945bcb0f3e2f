package virtualcluster

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/controlplane"
)

// CacheOptions limits the manager's informers for Secrets, Services,
// StatefulSets, PersistentVolumeClaims, ServiceAccounts, ResourceQuotas,
// ConfigMaps, RoleBindings, NetworkPolicies and LimitRanges to the objects Nest made (those
// labelled with the VirtualCluster's name), so a large host cluster's other
// Secrets are never held in the manager's memory.
func CacheOptions() cache.Options {
	req, err := labels.NewRequirement(controlplane.LabelVirtualCluster, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant key: cannot fail
	}
	own := cache.ByObject{Label: labels.NewSelector().Add(*req)}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}:                own,
		&corev1.Service{}:               own,
		&corev1.PersistentVolumeClaim{}: own,
		&appsv1.StatefulSet{}:           own,
		&corev1.ServiceAccount{}:        own,
		&corev1.ResourceQuota{}:         own,
		&corev1.ConfigMap{}:             own,
		&rbacv1.RoleBinding{}:           own,
		&networkingv1.NetworkPolicy{}:   own,
		&corev1.LimitRange{}:            own,
	}}
}
