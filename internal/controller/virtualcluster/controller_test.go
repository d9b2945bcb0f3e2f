package virtualcluster

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/pki"
)

const nodeIP = "198.51.100.10"

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vc-"}}
	if err := k8sClient.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// ensureNode creates a host node with an InternalIP, which NodePort endpoints use.
func ensureNode(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "host-node", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}}}
	if err := k8sClient.Create(ctx, node); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return
		}
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}}
	if err := k8sClient.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
}

// newCluster creates a host node (for NodePort endpoints), a namespace and the
// VirtualCluster name in it, and returns the names of its host objects.
func newCluster(t *testing.T, name string) controlplane.Names {
	t.Helper()
	ensureNode(t)
	ns := newNamespace(t)
	createVC(t, ns, name)
	return controlplane.Names{VirtualCluster: name, Namespace: ns}
}

func createVC(t *testing.T, ns, name string) *nestv1.VirtualCluster {
	t.Helper()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if err := k8sClient.Create(context.Background(), vc); err != nil {
		t.Fatal(err)
	}
	return vc
}

func getVC(t *testing.T, ns, name string) *nestv1.VirtualCluster {
	t.Helper()
	vc := &nestv1.VirtualCluster{}
	if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, vc); err != nil {
		t.Fatal(err)
	}
	return vc
}

func TestCreateMakesHostObjectsAndKubeconfig(t *testing.T) {
	n := newCluster(t, "alpha")
	ns := n.Namespace
	ctx := context.Background()

	eventually(t, "phase Initialized with certificates issued", func() error {
		vc := getVC(t, ns, "alpha")
		if vc.Status.Phase != nestv1.PhaseInitialized || !meta.IsStatusConditionTrue(vc.Status.Conditions, nestv1.ConditionCertificatesReady) {
			return fmt.Errorf("phase %q conditions %v", vc.Status.Phase, vc.Status.Conditions)
		}
		return nil
	})
	vc := getVC(t, ns, "alpha")
	if !strings.Contains(strings.Join(vc.Finalizers, ","), Finalizer) {
		t.Errorf("finalizers = %v", vc.Finalizers)
	}
	if meta.IsStatusConditionTrue(vc.Status.Conditions, nestv1.ConditionReady) {
		t.Error("Ready is True although no control plane runs")
	}

	var pkiSecret corev1.Secret
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: n.PKISecret()}, &pkiSecret); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{controlplane.CACert, controlplane.CAKey, controlplane.EtcdCACert, controlplane.FrontProxyCACert, controlplane.ServiceAccountKey,
		controlplane.APIServerCert, controlplane.KubeletClientCert, controlplane.EtcdServerCert, controlplane.EtcdPeerCert, controlplane.EtcdClientCert} {
		if len(pkiSecret.Data[key]) == 0 {
			t.Errorf("PKI Secret lacks %s", key)
		}
	}
	if !metav1.IsControlledBy(&pkiSecret, vc) {
		t.Error("PKI Secret is not owned by the VirtualCluster")
	}

	var svc corev1.Service
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: n.Service()}, &svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("service = %s port %+v", svc.Spec.Type, svc.Spec.Ports)
	}
	wantServer := fmt.Sprintf("https://%s:%d", nodeIP, svc.Spec.Ports[0].NodePort)
	if vc.Status.Endpoint != wantServer {
		t.Errorf("endpoint = %q, want %q", vc.Status.Endpoint, wantServer)
	}
	cert, err := pki.ParseCertificate(pkiSecret.Data[controlplane.APIServerCert])
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.VerifyHostname(nodeIP); err != nil {
		t.Errorf("serving certificate does not name the node IP: %v", err)
	}
	if err := cert.VerifyHostname(svc.Spec.ClusterIP); err != nil {
		t.Errorf("serving certificate does not name the Service IP: %v", err)
	}

	raw, err := base64.StdEncoding.DecodeString(vc.Spec.Kubeconfig)
	if err != nil {
		t.Fatalf("spec.kubeconfig is not base64: %v", err)
	}
	restCfg, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil || restCfg.Host != wantServer {
		t.Fatalf("spec.kubeconfig server = %v, %v; want %s", restCfg, err, wantServer)
	}
	var kc corev1.Secret
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: n.KubeconfigSecret()}, &kc); err != nil {
		t.Fatal(err)
	}
	internal, err := clientcmd.RESTConfigFromKubeConfig(kc.Data[controlplane.KubeconfigInternalKey])
	if err != nil || internal.Host != n.InternalServer() {
		t.Fatalf("internal kubeconfig server = %v, %v", internal, err)
	}
	if vc.Status.KubeconfigSecretRef == nil || vc.Status.KubeconfigSecretRef.Name != n.KubeconfigSecret() {
		t.Errorf("kubeconfigSecretRef = %v", vc.Status.KubeconfigSecretRef)
	}
	// nest-manager's own credential is in a Secret of its own, never in the
	// one users are handed.
	if user := clientUser(t, kc.Data[controlplane.KubeconfigInternalKey]); user != controlplane.AdminUser {
		t.Errorf("the admin kubeconfig Secret holds %q's certificate, want %q's", user, controlplane.AdminUser)
	}
	var manager corev1.Secret
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: n.ManagerKubeconfigSecret()}, &manager); err != nil {
		t.Fatal(err)
	}
	if user := clientUser(t, manager.Data[controlplane.KubeconfigKey]); user != controlplane.ManagerUser || !metav1.IsControlledBy(&manager, vc) {
		t.Errorf("nest-manager's kubeconfig Secret holds %q's certificate (owned by the VirtualCluster: %v), want %q's", user, metav1.IsControlledBy(&manager, vc), controlplane.ManagerUser)
	}

	var sts appsv1.StatefulSet
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: n.StatefulSet()}, &sts); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range append(sts.Spec.Template.Spec.InitContainers, sts.Spec.Template.Spec.Containers...) {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "etcd-member,etcd,kube-apiserver,kube-controller-manager,kube-scheduler,nest-syncer,coredns" {
		t.Errorf("containers = %v", names)
	}
	// The virtual node's host objects: CoreDNS' Service, the syncer's
	// identity bound to the nest-syncer ClusterRole, and the tenant's quota.
	for _, o := range []struct {
		obj  client.Object
		name string
	}{
		{&corev1.Service{}, n.DNSService()}, {&corev1.ConfigMap{}, n.DNSConfigMap()}, {&corev1.ServiceAccount{}, n.SyncerServiceAccount()},
		{&rbacv1.RoleBinding{}, n.SyncerServiceAccount()}, {&corev1.ResourceQuota{}, n.TenantQuota()},
	} {
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: o.name}, o.obj); err != nil {
			t.Errorf("%T %s: %v", o.obj, o.name, err)
		}
	}
	if got := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]; got.String() != "1Gi" {
		t.Errorf("etcd volume size = %s", got.String())
	}
}

func TestBecomesReadyWhenControlPlaneAnswers(t *testing.T) {
	ns := newCluster(t, "ready").Namespace
	ctx := context.Background()
	var sts appsv1.StatefulSet
	eventually(t, "StatefulSet created", func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "ready"}, &sts)
	})
	// Stand in for the StatefulSet controller and kubelet, absent from envtest.
	sts.Status.Replicas, sts.Status.ReadyReplicas, sts.Status.AvailableReplicas = 1, 1, 1
	if err := k8sClient.Status().Update(ctx, &sts); err != nil {
		t.Fatal(err)
	}
	tenants.ready.Store(true)
	defer tenants.ready.Store(false)
	eventually(t, "phase Completed and Ready", func() error {
		vc := getVC(t, ns, "ready")
		if vc.Status.Phase != nestv1.PhaseCompleted || !meta.IsStatusConditionTrue(vc.Status.Conditions, nestv1.ConditionReady) {
			return fmt.Errorf("phase %q", vc.Status.Phase)
		}
		if vc.Status.ObservedGeneration != vc.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", vc.Status.ObservedGeneration, vc.Generation)
		}
		return nil
	})
	eventually(t, "events for the phases", func() error {
		var list corev1.EventList
		if err := k8sClient.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, e := range list.Items {
			seen[e.Reason] = true
		}
		if !seen[string(nestv1.PhaseCompleted)] || !seen[string(nestv1.PhaseInitialized)] {
			return fmt.Errorf("event reasons %v", seen)
		}
		return nil
	})
}

func TestDeletedHostObjectsAreRecreated(t *testing.T) {
	n := newCluster(t, "heal")
	ns := n.Namespace
	ctx := context.Background()
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n.PKISecret(), Namespace: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n.KubeconfigSecret(), Namespace: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n.ManagerKubeconfigSecret(), Namespace: ns}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: n.Service(), Namespace: ns}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: n.StatefulSet(), Namespace: ns}},
	}
	for _, obj := range objs {
		eventually(t, "created", func() error { return k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj) })
	}
	for _, obj := range objs {
		t.Run(fmt.Sprintf("%T %s", obj, obj.GetName()), func(t *testing.T) {
			oldUID := obj.GetUID()
			if err := k8sClient.Delete(ctx, obj); err != nil {
				t.Fatal(err)
			}
			eventually(t, "recreated", func() error {
				fresh := obj.DeepCopyObject().(client.Object)
				if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), fresh); err != nil {
					return err
				}
				if fresh.GetUID() == oldUID {
					return fmt.Errorf("still the deleted object")
				}
				return nil
			})
		})
	}
}

func TestDeleteRemovesHostObjectsAndData(t *testing.T) {
	n := newCluster(t, "gone")
	ns := n.Namespace
	ctx := context.Background()
	eventually(t, "StatefulSet created", func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: n.StatefulSet()}, &appsv1.StatefulSet{})
	})
	// The StatefulSet controller would create the etcd claim; envtest has none.
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: n.EtcdClaim(), Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := k8sClient.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	// Not Nest's: deleting the VirtualCluster leaves it alone.
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "stays", Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := k8sClient.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Delete(ctx, getVC(t, ns, "gone")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "claim marked for deletion", func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return client.IgnoreNotFound(err)
		}
		if claim.DeletionTimestamp.IsZero() {
			return fmt.Errorf("claim not deleted yet")
		}
		return nil
	})
	// Stand in for the controller-manager's PVC protection controller.
	claim.Finalizers = nil
	if err := k8sClient.Update(ctx, claim); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	eventually(t, "VirtualCluster gone", func() error {
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gone"}, &nestv1.VirtualCluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	var all []client.Object
	for _, h := range controlplane.HostObjects {
		all = append(all, h.Objects(n)...)
	}
	if !slices.ContainsFunc(all, func(obj client.Object) bool { return obj.GetName() == claim.Name }) {
		t.Error("controlplane.HostObjects lacks the etcd claim")
	}
	for _, obj := range all {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s remains after delete (err %v)", obj, obj.GetName(), err)
		}
	}
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(other), &corev1.Service{}); err != nil {
		t.Errorf("a Service Nest did not make was deleted: %v", err)
	}
}

func TestInvalidSpecsAreRejected(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	tests := []struct {
		name   string
		mutate func(*nestv1.VirtualCluster)
		want   string
	}{
		{"unknown version", func(vc *nestv1.VirtualCluster) { vc.Spec.KubernetesVersion = "v1.99.0" }, "spec.kubernetesVersion"},
		{"bad service type", func(vc *nestv1.VirtualCluster) { vc.Spec.ControlPlane.Service.Type = "Ingress" }, "spec.controlPlane.service.type"},
		{"external IP not an IP", func(vc *nestv1.VirtualCluster) { vc.Spec.ExternalIPs = []string{"not-an-ip"} }, "spec.externalIPs[0]"},
		{"two replicas", func(vc *nestv1.VirtualCluster) { vc.Spec.ControlPlane.Replicas = ptr.To[int32](2) }, "spec.controlPlane.replicas"},
		{"bad service CIDR", func(vc *nestv1.VirtualCluster) { vc.Spec.ServiceCIDR = "10.96.0.0/33" }, "spec.serviceCIDR"},
		{"bad cluster domain", func(vc *nestv1.VirtualCluster) { vc.Spec.ClusterDomain = "Not_A_Domain" }, "spec.clusterDomain"},
		{"negative node count", func(vc *nestv1.VirtualCluster) {
			vc.Spec.PromotePolicies = []nestv1.PromotePolicy{{NodeCount: -1}}
		}, "spec.promotePolicies[0].nodeCount"},
		{"name too long", func(vc *nestv1.VirtualCluster) { vc.Name = strings.Repeat("a", 41) }, "metadata.name"},
		{"name not a DNS label", func(vc *nestv1.VirtualCluster) { vc.Name = "web.prod" }, "metadata.name must be a DNS label"},
		{"negative share", func(vc *nestv1.VirtualCluster) {
			vc.Spec.PromoteResources.Resources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}
		}, "spec.promoteResources.resources"},
		{"empty etcd volume", func(vc *nestv1.VirtualCluster) {
			vc.Spec.Datastore.StorageSize = ptr.To(resource.MustParse("0"))
		}, "datastore.storageSize must be above zero"},
		{"egress CIDR not a CIDR", func(vc *nestv1.VirtualCluster) { vc.Spec.Network.EgressCIDRs = []string{"203.0.113.7"} }, "spec.network.egressCIDRs[0]"},
		{"negative data budget", func(vc *nestv1.VirtualCluster) {
			vc.Spec.VirtualNode.ObjectBudget.DataBytes = ptr.To(resource.MustParse("-1Mi"))
		}, "spec.virtualNode.objectBudget.dataBytes"},
		{"registry with a path", func(vc *nestv1.VirtualCluster) {
			vc.Spec.VirtualNode.ImageRegistries = []string{"registry.example.com", "registry.example.com/team"}
		}, "spec.virtualNode.imageRegistries[1]"},
		{"grace period bound of zero", func(vc *nestv1.VirtualCluster) {
			vc.Spec.VirtualNode.MaxTerminationGracePeriodSeconds = ptr.To[int64](0)
		}, "spec.virtualNode.maxTerminationGracePeriodSeconds"},
		{"runtime config of an API on by default", func(vc *nestv1.VirtualCluster) {
			vc.Spec.ControlPlane.RuntimeConfig = map[string]string{"apps/v1": "true"}
		}, "spec.controlPlane.runtimeConfig: each key must be a group version off by default"},
		{"runtime config turning an API off", func(vc *nestv1.VirtualCluster) {
			vc.Spec.ControlPlane.RuntimeConfig = map[string]string{"networking.k8s.io/v1beta1": "false"}
		}, `spec.controlPlane.runtimeConfig: every value must be "true"`},
		{"allow-list entry with an inner *", func(vc *nestv1.VirtualCluster) {
			vc.Spec.VirtualNode.HostMetadata = &nestv1.HostMetadataSpec{Labels: []string{"app", "example.*/name"}}
		}, "spec.virtualNode.hostMetadata.labels[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "invalid", Namespace: ns}}
			tt.mutate(vc)
			err := k8sClient.Create(ctx, vc)
			if err == nil {
				_ = k8sClient.Delete(ctx, vc)
				t.Fatal("accepted")
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v does not name %s", err, tt.want)
			}
		})
	}
}

// Replicas go up, never down: etcd members are not removed from a live
// tenant, and the refusal names the field.
func TestReplicasCannotBeLowered(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "shrink", Namespace: ns}}
	vc.Spec.ControlPlane.Replicas = ptr.To[int32](3)
	if err := k8sClient.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(ctx, vc) })
	for _, tt := range []struct {
		name   string
		mutate func(*nestv1.VirtualCluster)
		want   string
	}{
		{"lowering 3 -> 1", func(vc *nestv1.VirtualCluster) { vc.Spec.ControlPlane.Replicas = ptr.To[int32](1) }, "spec.controlPlane.replicas cannot be lowered"},
		// Removing the field would default it to 1: refused too.
		{"removing spec.controlPlane", func(vc *nestv1.VirtualCluster) { vc.Spec.ControlPlane = nestv1.ControlPlaneSpec{} }, "spec.controlPlane.replicas cannot be lowered or removed"},
	} {
		eventually(t, tt.name+" refused", func() error {
			got := getVC(t, ns, "shrink")
			tt.mutate(got)
			err := k8sClient.Update(ctx, got)
			if apierrors.IsConflict(err) {
				return err
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%s: %v, want a refusal naming spec.controlPlane.replicas", tt.name, err)
			}
			return nil
		})
	}
}

// A VirtualCluster written without a datastore (YAML, kubectl) gets the
// default one, so one added later is a change the immutability rule refuses,
// not a setting the controller would silently ignore.
func TestDatastoreCannotBeAddedLater(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": nestv1.GroupVersion.String(), "kind": "VirtualCluster",
		"metadata": map[string]any{"name": "no-datastore", "namespace": ns},
	}}
	if err := k8sClient.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	vc := getVC(t, ns, "no-datastore")
	if vc.Spec.Datastore.StorageSize == nil || vc.Spec.Datastore.StorageSize.String() != "1Gi" {
		t.Fatalf("datastore %+v, want the default 1Gi", vc.Spec.Datastore)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vc := getVC(t, ns, "no-datastore")
		vc.Spec.Datastore.StorageClassName = ptr.To("fast")
		return k8sClient.Update(ctx, vc)
	})
	if err == nil || !strings.Contains(err.Error(), "datastore is immutable") {
		t.Fatalf("update error %v, want datastore is immutable", err)
	}
}

func TestImmutableFieldsCannotChange(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	createVC(t, ns, "fixed")
	tests := []struct {
		name   string
		mutate func(*nestv1.VirtualCluster)
		want   string
	}{
		{"cluster domain", func(vc *nestv1.VirtualCluster) { vc.Spec.ClusterDomain = "other.local" }, "clusterDomain is immutable"},
		{"service CIDR", func(vc *nestv1.VirtualCluster) { vc.Spec.ServiceCIDR = "10.100.0.0/16" }, "serviceCIDR is immutable"},
		{"datastore", func(vc *nestv1.VirtualCluster) { vc.Spec.Datastore.StorageSize = ptr.To(resource.MustParse("5Gi")) }, "datastore is immutable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The controller writes the object too: retry on a conflict.
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				vc := getVC(t, ns, "fixed")
				tt.mutate(vc)
				return k8sClient.Update(ctx, vc)
			})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("update error %v, want %q", err, tt.want)
			}
		})
	}
}

// The reconcile that writes spec.kubeconfig writes the status too: its
// optimistic lock starts from the VirtualCluster as that spec patch left
// it, not as the reconcile first read it. (A conflict from a cache that
// lags is expected and retried; one on a version the reconciler itself
// patched away is the defect.)
func TestWritingTheKubeconfigLeavesTheStatusPatchUnrefused(t *testing.T) {
	n := newCluster(t, "kc")
	eventually(t, "spec.kubeconfig and status.kubeconfigSecretRef written", func() error {
		vc := getVC(t, n.Namespace, "kc")
		if vc.Spec.Kubeconfig == "" || vc.Status.KubeconfigSecretRef == nil {
			return fmt.Errorf("spec.kubeconfig %d bytes, status.kubeconfigSecretRef %v", len(vc.Spec.Kubeconfig), vc.Status.KubeconfigSecretRef)
		}
		return nil
	})
	if c := staleLocksIn(n.Namespace); c != 0 {
		t.Errorf("%d status patches locked on a version the reconciler had patched away, want none", c)
	}
}

// A single replica stays behind its Services while not ready (it has no
// other to hand over to); raising replicas to 3 takes pods that are not
// ready out again.
func TestServicesPublishASingleReplicaNotReady(t *testing.T) {
	n := newCluster(t, "single")
	ctx := context.Background()
	publishes := func(want bool) func() error {
		return func() error {
			for _, name := range []string{n.Service(), n.DNSService()} {
				var svc corev1.Service
				if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: name}, &svc); err != nil {
					return err
				}
				if svc.Spec.PublishNotReadyAddresses != want {
					return fmt.Errorf("Service %s publishNotReadyAddresses = %v, want %v", name, svc.Spec.PublishNotReadyAddresses, want)
				}
			}
			return nil
		}
	}
	eventually(t, "one replica published when not ready", publishes(true))
	// The controller writes the VirtualCluster too: retry on its conflicts.
	updateVC(t, n.Namespace, "single", func(vc *nestv1.VirtualCluster) { vc.Spec.ControlPlane.Replicas = ptr.To[int32](3) })
	eventually(t, "three replicas published only when ready", publishes(false))
}

// clientUser is the user name of kubeconfig's client certificate.
func clientUser(t *testing.T, kubeconfig []byte) string {
	t.Helper()
	user, _, err := controlplane.KubeconfigSubject(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return user
}

// A Service made for a VirtualCluster that asks for an address
// (nestv1.AnnotationRequestedAddress, as nest restore sets it) gets it; one
// asking for a node port another Service holds gets another and an
// AddressTaken event, and still comes up.
func TestARequestedNodePortIsGivenOrDroppedWithAnEvent(t *testing.T) {
	ensureNode(t)
	ctx := context.Background()
	const port = 31777
	request := fmt.Sprintf(`{"nodePort":%d}`, port)
	nodePortOf := func(n controlplane.Names) func() (int32, error) {
		return func() (int32, error) {
			var svc corev1.Service
			if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.Service()}, &svc); err != nil {
				return 0, err
			}
			return svc.Spec.Ports[0].NodePort, nil
		}
	}
	create := func(name string) controlplane.Names {
		ns := newNamespace(t)
		vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Annotations: map[string]string{nestv1.AnnotationRequestedAddress: request}}}
		if err := k8sClient.Create(ctx, vc); err != nil {
			t.Fatal(err)
		}
		return controlplane.Names{VirtualCluster: name, Namespace: ns}
	}
	first := create("asks-port")
	eventually(t, "the first tenant's Service on the node port it asked for", func() error {
		got, err := nodePortOf(first)()
		if err == nil && got != port {
			err = fmt.Errorf("node port %d, want %d", got, port)
		}
		return err
	})
	second := create("asks-taken-port")
	eventually(t, "the second tenant's Service on another node port, with an AddressTaken event", func() error {
		got, err := nodePortOf(second)()
		if err != nil {
			return err
		}
		if got == port || got == 0 {
			return fmt.Errorf("node port %d", got)
		}
		var events eventsv1.EventList
		if err := k8sClient.List(ctx, &events, client.InNamespace(second.Namespace)); err != nil {
			return err
		}
		for _, e := range events.Items {
			if e.Reason == ReasonAddressTaken && strings.Contains(e.Note, fmt.Sprint(port)) {
				return nil
			}
		}
		return fmt.Errorf("no %s event among %d", ReasonAddressTaken, len(events.Items))
	})
}
