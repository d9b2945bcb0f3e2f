// Package addons builds the objects of the cluster add-ons Nest installs into a
// Kubernetes cluster, the local host cluster and tenant clusters alike: CoreDNS,
// the default StorageClass and the RBAC of a NetworkPolicy enforcer.
// Builders are pure; Apply creates them.
package addons

import (
	"context"
	"fmt"
	"net/netip"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DNSOptions configures CoreDNS.
type DNSOptions struct {
	// Image is the CoreDNS image, present on the nodes (it is never pulled).
	Image string
	// ClusterDomain is the Service DNS suffix, such as cluster.local.
	ClusterDomain string
	// ServiceIP is the ClusterIP of the kube-dns Service; kubelets' clusterDNS.
	ServiceIP netip.Addr
	// Replicas of the Deployment.
	Replicas int32
}

const (
	dnsName      = "coredns"
	dnsNamespace = metav1.NamespaceSystem
	// dnsLabelKey=dnsLabelValue is what kubeadm labels CoreDNS with, so users'
	// NetworkPolicies and tooling written for kubeadm clusters still match.
	dnsLabelKey   = "k8s-app"
	dnsLabelValue = "kube-dns"
)

// Corefile returns CoreDNS' configuration: the kubernetes plugin for the
// cluster domain and reverse zones, and no forward plugin, so a name outside
// the cluster is refused rather than sent to another server.
func Corefile(clusterDomain string) string {
	return fmt.Sprintf(`.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes %s in-addr.arpa ip6.arpa {
        pods insecure
        ttl 30
    }
    cache 30
    loop
    reload
    loadbalance
}
`, clusterDomain)
}

// CoreDNS returns the objects that run CoreDNS: its ServiceAccount and RBAC, the
// Corefile ConfigMap, the Deployment and the kube-dns Service.
func CoreDNS(o DNSOptions) []client.Object {
	labels := map[string]string{dnsLabelKey: dnsLabelValue}
	meta := metav1.ObjectMeta{Name: dnsName, Namespace: dnsNamespace, Labels: labels}
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: meta},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: dnsName, Namespace: dnsNamespace}},
		},
		&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"Corefile": Corefile(o.ClusterDomain)}},
		coreDNSDeployment(o, meta),
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: dnsNamespace, Labels: labels},
			Spec: corev1.ServiceSpec{
				Selector:  labels,
				ClusterIP: o.ServiceIP.String(),
				Ports: []corev1.ServicePort{
					{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
					{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
				},
			},
		},
	}
}

func coreDNSDeployment(o DNSOptions, meta metav1.ObjectMeta) *appsv1.Deployment {
	container := corev1.Container{
		Name:            dnsName,
		Image:           o.Image,
		ImagePullPolicy: corev1.PullNever,
		Args:            []string{"-conf", "/etc/coredns/Corefile"},
		Ports: []corev1.ContainerPort{
			{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
			{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
			{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8181)}},
			PeriodSeconds: 2,
		},
		LivenessProbe: &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt32(8080)}},
			InitialDelaySeconds: 30, PeriodSeconds: 10, FailureThreshold: 5,
		},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities: &corev1.Capabilities{
				Add:  []corev1.Capability{"NET_BIND_SERVICE"},
				Drop: []corev1.Capability{"ALL"},
			},
		},
	}
	return &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(o.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: meta.Labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: meta.Labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: dnsName,
					PriorityClassName:  "system-cluster-critical",
					// CoreDNS must not resolve through itself.
					DNSPolicy:   corev1.DNSDefault,
					Containers:  []corev1.Container{container},
					Tolerations: []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: dnsName},
					}}}},
				},
			},
		},
	}
}

// DefaultStorageClass returns a StorageClass named name, marked as the
// cluster's default, served by provisioner with WaitForFirstConsumer binding,
// whose claims may grow (allowVolumeExpansion).
func DefaultStorageClass(name, provisioner string) *storagev1.StorageClass {
	return &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: name, Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}},
		Provisioner:       provisioner,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		// The local provisioner's Resizer grows its volumes.
		AllowVolumeExpansion: ptr.To(true),
	}
}

// Apply creates each object that does not exist yet. Existing objects are left
// as they are: an add-on a user changed keeps the change. It looks each object
// up first because creating an existing Service with a fixed ClusterIP fails on
// the IP ("already allocated") before the API server reports AlreadyExists.
func Apply(ctx context.Context, c client.Client, objs []client.Object) error {
	for _, obj := range objs {
		key := client.ObjectKeyFromObject(obj)
		existing := obj.DeepCopyObject().(client.Object)
		err := c.Get(ctx, key, existing)
		if err == nil {
			continue
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("get %T %s: %w", obj, key, err)
		}
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s: %w", obj, key, err)
		}
	}
	return nil
}

// CoreDNSSelector selects the CoreDNS pods.
func CoreDNSSelector() client.MatchingLabels {
	return client.MatchingLabels{dnsLabelKey: dnsLabelValue}
}
