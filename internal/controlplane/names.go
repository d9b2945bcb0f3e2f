// Package controlplane turns a VirtualCluster into the host objects that run its
// tenant control plane and isolate its tenant: the PKI and kubeconfig Secrets,
// the Service and the StatefulSet, the NetworkPolicies, LimitRange and
// ResourceQuotas of its host namespace and the namespace's Pod Security
// labels. Everything here is a pure function of its inputs, so the
// controller stays small and the builders are table-tested.
package controlplane

import (
	"fmt"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// Labels put on every host object of a VirtualCluster.
const (
	LabelVirtualCluster = "nest.dev/virtualcluster"
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	LabelComponent      = "app.kubernetes.io/component"
	ManagedByValue      = "nest"
)

// Port is the tenant API server's port, in the pod and on the Service.
const Port = 6443

// Keys of the kubeconfig Secret.
const (
	KubeconfigKey         = "kubeconfig"
	KubeconfigInternalKey = "kubeconfig-internal"
)

// Names of the host objects of one VirtualCluster, all in its namespace.
type Names struct {
	VirtualCluster string
	Namespace      string
}

// NamesOf returns the host object names of vc.
func NamesOf(vc *nestv1.VirtualCluster) Names {
	return Names{VirtualCluster: vc.Name, Namespace: vc.Namespace}
}

// Service fronts the tenant API server; the StatefulSet is named the same.
func (n Names) Service() string { return n.VirtualCluster }

// StatefulSet runs the control-plane pod.
func (n Names) StatefulSet() string { return n.VirtualCluster }

// ControlPlanePod is the StatefulSet's first pod (replica 0), which
// bootstraps the tenant's etcd.
func (n Names) ControlPlanePod() string { return n.ControlPlanePodOf(0) }

// ControlPlanePodOf is the StatefulSet's pod of ordinal i.
func (n Names) ControlPlanePodOf(i int) string { return fmt.Sprintf("%s-%d", n.StatefulSet(), i) }

// PeerService is the headless Service that governs the StatefulSet: it
// gives each control-plane pod the DNS name its etcd peers reach it at
// (MemberHost), ready or not.
func (n Names) PeerService() string { return n.VirtualCluster + "-peers" }

// MemberHost is the DNS name of the control-plane pod of ordinal i, through
// PeerService: its etcd member's host.
func (n Names) MemberHost(i int) string {
	return fmt.Sprintf("%s.%s.%s.svc", n.ControlPlanePodOf(i), n.PeerService(), n.Namespace)
}

// PodDisruptionBudget keeps a quorum of the control-plane pods through
// voluntary disruptions such as drains.
func (n Names) PodDisruptionBudget() string { return n.VirtualCluster }

// PKISecret holds every CA, certificate and key of the tenant.
func (n Names) PKISecret() string { return n.VirtualCluster + "-pki" }

// ComponentKubeconfigSecret holds the controller-manager's and scheduler's kubeconfigs.
func (n Names) ComponentKubeconfigSecret() string { return n.VirtualCluster + "-component-kubeconfigs" }

// KubeconfigSecret holds the tenant admin kubeconfig handed to users.
func (n Names) KubeconfigSecret() string { return n.VirtualCluster + "-kubeconfig" }

// ManagerKubeconfigSecret holds nest-manager's own kubeconfig for the
// tenant (ReconcileManagerKubeconfig), kept apart from the admin kubeconfig
// handed to users.
func (n Names) ManagerKubeconfigSecret() string { return n.VirtualCluster + "-manager-kubeconfig" }

// EtcdVolumeClaimTemplate names the StatefulSet's etcd volume claim template.
const EtcdVolumeClaimTemplate = "etcd-data"

// EtcdClaim is the PersistentVolumeClaim the StatefulSet makes for replica 0.
func (n Names) EtcdClaim() string { return n.EtcdClaimOf(0) }

// EtcdClaimOf is the PersistentVolumeClaim of the replica of ordinal i.
func (n Names) EtcdClaimOf(i int) string {
	return fmt.Sprintf("%s-%s-%d", EtcdVolumeClaimTemplate, n.StatefulSet(), i)
}

// EtcdClaims are the claims of every replica there may be (MaxReplicas).
func (n Names) EtcdClaims() []string {
	out := make([]string, MaxReplicas)
	for i := range out {
		out[i] = n.EtcdClaimOf(i)
	}
	return out
}

// InternalServer is the API server URL inside the host cluster, through the
// Service's DNS name.
func (n Names) InternalServer() string {
	return fmt.Sprintf("https://%s.%s.svc:%d", n.Service(), n.Namespace, Port)
}

// Labels returns the labels of every host object of the VirtualCluster.
func (n Names) Labels() map[string]string {
	return map[string]string{LabelVirtualCluster: n.VirtualCluster, LabelManagedBy: ManagedByValue, LabelComponent: "control-plane"}
}

// DNSConfigMap holds the tenant CoreDNS' Corefile.
func (n Names) DNSConfigMap() string { return n.VirtualCluster + "-dns" }

// DNSService fronts the tenant's CoreDNS for host pods.
func (n Names) DNSService() string { return n.VirtualCluster + "-dns" }

// SyncerServiceAccount is nest-syncer's host identity; a RoleBinding of the
// same name grants it the nest-syncer ClusterRole in this namespace only.
func (n Names) SyncerServiceAccount() string { return n.VirtualCluster + "-syncer" }

// TenantQuota is the host ResourceQuota of the tenant's pods.
func (n Names) TenantQuota() string { return n.VirtualCluster + "-tenant-share" }

// ObjectQuota is the host ResourceQuota that bounds the number of
// ConfigMaps, Secrets and Services in the namespace.
func (n Names) ObjectQuota() string { return n.VirtualCluster + "-object-budget" }

// LimitRange gives containers in the namespace default requests and limits.
func (n Names) LimitRange() string { return n.VirtualCluster + "-container-defaults" }

// TenantNetworkPolicy confines the tenant's host pods to their own virtual cluster.
func (n Names) TenantNetworkPolicy() string { return n.VirtualCluster + "-tenant-pods" }

// ControlPlaneNetworkPolicy admits only the expected clients to the control-plane pod.
func (n Names) ControlPlaneNetworkPolicy() string { return n.VirtualCluster + "-control-plane" }

// TenantIngressNetworkPolicy opens the tenant's host pods that no tenant
// NetworkPolicy isolates for ingress to each other.
func (n Names) TenantIngressNetworkPolicy() string { return n.VirtualCluster + "-tenant-ingress" }

// TenantEgressNetworkPolicy opens the tenant's host pods that no tenant
// NetworkPolicy isolates for egress to each other and the outside.
func (n Names) TenantEgressNetworkPolicy() string { return n.VirtualCluster + "-tenant-egress" }

// DenyIngressNetworkPolicy denies ingress to every pod of the namespace that
// no other policy admits.
func (n Names) DenyIngressNetworkPolicy() string { return n.VirtualCluster + "-deny-ingress" }

// NetworkPolicies are the names of every NetworkPolicy Nest keeps for the
// VirtualCluster.
func (n Names) NetworkPolicies() []string {
	return []string{n.TenantNetworkPolicy(), n.TenantIngressNetworkPolicy(), n.TenantEgressNetworkPolicy(), n.ControlPlaneNetworkPolicy(), n.DenyIngressNetworkPolicy()}
}

// Secrets are the Secrets Nest itself keeps in the namespace; the per-pod
// token Secrets of nest-syncer are not among them.
func (n Names) Secrets() []string {
	return []string{n.PKISecret(), n.ComponentKubeconfigSecret(), n.KubeconfigSecret(), n.ManagerKubeconfigSecret()}
}

// MembersSecret holds what nest-syncer needs to place pods in the
// VirtualCluster's member clusters; nest-manager's membergrant controller
// writes it while the VirtualCluster has grants.
func (n Names) MembersSecret() string { return contract.MembersSecret(n.VirtualCluster) }

// MemberUsageConfigMap holds the usage records of the VirtualCluster's pods
// in member clusters; nest-manager's memberusage controller writes it.
func (n Names) MemberUsageConfigMap() string { return n.VirtualCluster + "-member-usage" }

// MemberSecrets are the Secrets nest-manager's member controllers keep in
// the namespace while the VirtualCluster has grants: not the VirtualCluster
// controller's (HostObjects), but counted in its object quota all the same.
func (n Names) MemberSecrets() []string { return []string{n.MembersSecret()} }

// MemberConfigMaps are the ConfigMaps the member controllers keep there, as
// MemberSecrets.
func (n Names) MemberConfigMaps() []string { return []string{n.MemberUsageConfigMap()} }

// DedicatedNodesConfigMap holds the pod CIDRs and node IPs of the
// VirtualCluster's dedicated nodes, which nest-syncer admits behind host
// Services and through the tenant API server's egress proxy.
func (n Names) DedicatedNodesConfigMap() string {
	return contract.DedicatedNodesConfigMap(n.VirtualCluster)
}

// EtcdBootstrapConfigMap names the member that may start a new etcd
// cluster (EtcdBootstrapConfigMapFor).
func (n Names) EtcdBootstrapConfigMap() string { return n.VirtualCluster + "-etcd-bootstrap" }

// APIServerConfigMap holds the files the tenant API server reads at start:
// its static admission configuration and its egress selector configuration
// (APIServerConfigMapFor).
func (n Names) APIServerConfigMap() string { return n.VirtualCluster + "-apiserver-config" }

// ConfigMaps are the ConfigMaps Nest itself keeps in the namespace.
func (n Names) ConfigMaps() []string {
	return []string{n.DNSConfigMap(), n.DedicatedNodesConfigMap(), n.EtcdBootstrapConfigMap(), n.APIServerConfigMap()}
}

// Services are the Services Nest itself keeps in the namespace.
func (n Names) Services() []string { return []string{n.Service(), n.DNSService(), n.PeerService()} }

// TenantPodLabels select the host pods nest-syncer runs for the virtual cluster.
func (n Names) TenantPodLabels() map[string]string {
	return map[string]string{contract.LabelTenantOf: n.VirtualCluster}
}

// HostRootCAConfigMap is the ConfigMap the host's controller-manager
// publishes in every namespace; nest-syncer's host token volume reads it.
const HostRootCAConfigMap = "kube-root-ca.crt"
