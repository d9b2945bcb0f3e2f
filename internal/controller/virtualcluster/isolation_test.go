package virtualcluster

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// updateVC changes the VirtualCluster, retrying on conflicts with the controller.
func updateVC(t *testing.T, ns, name string, mutate func(*nestv1.VirtualCluster)) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vc := getVC(t, ns, name)
		mutate(vc)
		return k8sClient.Update(context.Background(), vc)
	}); err != nil {
		t.Fatal(err)
	}
}

// matches returns nil once the host object exists, is owned by the
// VirtualCluster and its spec is the builder's.
func matches(ctx context.Context, vc *nestv1.VirtualCluster, obj client.Object, spec func(client.Object) any, want any) error {
	if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return err
	}
	if !metav1.IsControlledBy(obj, vc) {
		return fmt.Errorf("%T %s is not owned by the VirtualCluster", obj, obj.GetName())
	}
	if got := spec(obj); !equality.Semantic.DeepEqual(got, want) {
		return fmt.Errorf("%T %s spec\n %+v\nwant\n %+v", obj, obj.GetName(), got, want)
	}
	return nil
}

func TestIsolationObjectsFollowTheSpec(t *testing.T) {
	n := newCluster(t, "iso")
	ctx := context.Background()
	check := func(what string) {
		t.Helper()
		eventually(t, what, func() error {
			vc := getVC(t, n.Namespace, "iso")
			policies, err := controlplane.NetworkPoliciesFor(vc, testOptions)
			if err != nil {
				return err
			}
			for _, want := range policies {
				if err := matches(ctx, vc, &networkingv1.NetworkPolicy{ObjectMeta: want.ObjectMeta},
					func(o client.Object) any { return o.(*networkingv1.NetworkPolicy).Spec }, want.Spec); err != nil {
					return err
				}
			}
			lr := controlplane.LimitRangeFor(vc)
			if err := matches(ctx, vc, &corev1.LimitRange{ObjectMeta: lr.ObjectMeta},
				func(o client.Object) any { return o.(*corev1.LimitRange).Spec }, lr.Spec); err != nil {
				return err
			}
			for _, want := range []*corev1.ResourceQuota{controlplane.TenantQuotaFor(vc), controlplane.ObjectQuotaFor(vc)} {
				if err := matches(ctx, vc, &corev1.ResourceQuota{ObjectMeta: want.ObjectMeta},
					func(o client.Object) any { return o.(*corev1.ResourceQuota).Spec }, want.Spec); err != nil {
					return err
				}
			}
			var ns corev1.Namespace
			if err := k8sClient.Get(ctx, types.NamespacedName{Name: n.Namespace}, &ns); err != nil {
				return err
			}
			for k, v := range controlplane.NamespaceLabelsFor(vc) {
				if ns.Labels[k] != v {
					return fmt.Errorf("namespace label %s=%q, want %q", k, ns.Labels[k], v)
				}
			}
			return nil
		})
	}
	check("NetworkPolicies, LimitRange, quotas and Pod Security labels made")
	var ns corev1.Namespace
	if err := k8sClient.Get(ctx, types.NamespacedName{Name: n.Namespace}, &ns); err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "baseline" {
		t.Fatalf("namespace labels %v (%v): want enforce=baseline by default", ns.Labels, err)
	}

	updateVC(t, n.Namespace, "iso", func(vc *nestv1.VirtualCluster) {
		vc.Spec.VirtualNode.PodSecurityLevel = nestv1.PodSecurityRestricted
		vc.Spec.Network.EgressCIDRs = []string{"203.0.113.0/24", "198.51.0.0/16"}
		vc.Spec.PromoteResources.Resources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourcePods: resource.MustParse("7")}
		vc.Spec.VirtualNode.ObjectBudget.Secrets = ptr.To[int32](9)
		vc.Spec.VirtualNode.ObjectBudget.DataBytes = ptr.To(resource.MustParse("1Mi"))
		vc.Spec.ControlPlane.Service.Type = "ClusterIP"
	})
	check("isolation objects follow a changed spec")
	var policy networkingv1.NetworkPolicy
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.TenantEgressNetworkPolicy()}, &policy); err != nil {
		t.Fatal(err)
	}
	last := policy.Spec.Egress[len(policy.Spec.Egress)-1]
	if len(last.To) != 2 || last.To[0].IPBlock.CIDR != "198.51.0.0/16" || strings.Join(last.To[0].IPBlock.Except, ",") != "198.51.100.0/24" {
		t.Errorf("egress to the outside %+v: want the egress CIDRs minus the host nodes", last.To)
	}
	var quota corev1.ResourceQuota
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.ObjectQuota()}, &quota); err != nil {
		t.Fatal(err)
	}
	if got := quota.Spec.Hard["count/secrets"]; got.Value() != 9+5+7 {
		t.Errorf("count/secrets = %s, want 21 (budget 9, 4 Nest Secrets and the members Secret, 7 pods' tokens)", got.String())
	}

	eventually(t, "nest-syncer gets the data budget", func() error {
		var sts appsv1.StatefulSet
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.StatefulSet()}, &sts); err != nil {
			return err
		}
		for _, c := range sts.Spec.Template.Spec.Containers {
			if c.Name == "nest-syncer" && strings.Contains(strings.Join(c.Args, " "), "--data-budget-bytes=1048576") {
				return nil
			}
		}
		return fmt.Errorf("no --data-budget-bytes=1048576 in the syncer's arguments")
	})

	// Deleted or edited policies are put back.
	if err := k8sClient.Delete(ctx, &policy); err != nil {
		t.Fatal(err)
	}
	var cp networkingv1.NetworkPolicy
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: n.ControlPlaneNetworkPolicy()}, &cp); err != nil {
		t.Fatal(err)
	}
	cp.Spec.Ingress = append(cp.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
	if err := k8sClient.Update(ctx, &cp); err != nil {
		t.Fatal(err)
	}
	check("a deleted and an edited NetworkPolicy are restored")
}

// The control-plane pod is admitted where Pod Security enforces restricted
// and the LimitRange applies; a tenant-like pod gets the default limits; a
// pod that may run as root and one over the max are refused, which shows the
// admission plugins do run here.
func TestNamespaceAdmitsControlPlaneAndBoundsOthers(t *testing.T) {
	ensureNode(t)
	ns := newNamespace(t)
	ctx := context.Background()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "strict", Namespace: ns}}
	vc.Spec.VirtualNode.PodSecurityLevel = nestv1.PodSecurityRestricted
	vc.Spec.PromoteResources.Resources = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("768Mi")}
	if err := k8sClient.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	n := controlplane.NamesOf(vc)
	var sts appsv1.StatefulSet
	eventually(t, "StatefulSet, LimitRange and restricted namespace", func() error {
		var nsObj corev1.Namespace
		if err := k8sClient.Get(ctx, types.NamespacedName{Name: ns}, &nsObj); err != nil {
			return err
		}
		if nsObj.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			return fmt.Errorf("namespace labels %v", nsObj.Labels)
		}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: n.LimitRange()}, &corev1.LimitRange{}); err != nil {
			return err
		}
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: n.StatefulSet()}, &sts)
	})

	// Stand in for the StatefulSet controller, which adds the claim's volume.
	cpPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "control-plane", Namespace: ns, Labels: sts.Spec.Template.Labels}, Spec: *sts.Spec.Template.Spec.DeepCopy()}
	cpPod.Spec.Volumes = append(cpPod.Spec.Volumes, corev1.Volume{Name: controlplane.EtcdVolumeClaimTemplate,
		VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: n.EtcdClaim()}}})
	if err := k8sClient.Create(ctx, cpPod); err != nil {
		t.Fatalf("the control-plane pod is refused in its own namespace: %v", err)
	}
	for _, c := range append(cpPod.Spec.InitContainers, cpPod.Spec.Containers...) {
		if _, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]; !ok {
			t.Errorf("%s got no default ephemeral-storage limit: the LimitRange did not apply", c.Name)
		}
	}

	// As nest-syncer makes them: zero cpu and memory requests, no limits.
	restricted := func(name string, r corev1.ResourceRequirements) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{contract.LabelTenantOf: "strict"}},
			Spec: corev1.PodSpec{
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				Containers: []corev1.Container{{
					Name: "app", Image: "nest.local/testapp:dev", Resources: r,
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				}},
			},
		}
	}
	zero := corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.Quantity{}, corev1.ResourceMemory: resource.Quantity{}}}
	tenant := restricted("tenant", zero)
	if err := k8sClient.Create(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	limits := tenant.Spec.Containers[0].Resources.Limits
	if limits.Cpu().String() != "500m" || limits.Memory().String() != "512Mi" {
		t.Errorf("tenant pod limits %v: want the defaults 500m cpu and 512Mi memory", limits)
	}

	over := restricted("over", corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}})
	if err := k8sClient.Create(ctx, over); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "memory") {
		t.Errorf("a container over the max: %v, want forbidden", err)
	}
	// Baseline, but not restricted: it may run as root.
	root := restricted("root", zero)
	root.Spec.SecurityContext.RunAsNonRoot = nil
	if err := k8sClient.Create(ctx, root); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "PodSecurity") {
		t.Errorf("a pod that may run as root: %v, want forbidden by PodSecurity", err)
	}
}

func TestSecondVirtualClusterInNamespaceIsRefused(t *testing.T) {
	ensureNode(t)
	ns := newNamespace(t)
	ctx := context.Background()
	// Same second or not, "first" is the holder: older, or first by name.
	createVC(t, ns, "first")
	createVC(t, ns, "second")
	eventually(t, "second refused with NamespaceInUse", func() error {
		vc := getVC(t, ns, "second")
		ready := meta.FindStatusCondition(vc.Status.Conditions, nestv1.ConditionReady)
		if ready == nil || ready.Reason != ReasonNamespaceInUse || ready.Status != metav1.ConditionFalse {
			return fmt.Errorf("Ready = %+v", ready)
		}
		if !strings.Contains(ready.Message, "VirtualCluster first") || !strings.Contains(ready.Message, "namespace of its own") {
			return fmt.Errorf("message %q names neither the holder nor the fix", ready.Message)
		}
		return nil
	})
	second := getVC(t, ns, "second")
	if len(second.Finalizers) != 0 || second.Status.Phase != nestv1.PhasePending {
		t.Errorf("refused VirtualCluster: finalizers %v phase %s", second.Finalizers, second.Status.Phase)
	}
	for _, obj := range []client.Object{
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "second-pki", Namespace: ns}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "second-deny-ingress", Namespace: ns}},
	} {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s exists for the refused VirtualCluster (%v)", obj, obj.GetName(), err)
		}
	}
	eventually(t, "first gets its StatefulSet", func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "first"}, &appsv1.StatefulSet{})
	})

	// Once the holder is gone, the other takes the namespace.
	if err := k8sClient.Delete(ctx, getVC(t, ns, "first")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "second takes over the namespace", func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "second"}, &appsv1.StatefulSet{})
	})
}

// TestNamespaceClaimKeepsALaterVirtualClusterFromCreatingAnything: the
// holder claims the namespace before anything is made for it, and a
// VirtualCluster created after the claim is refused and gets no host
// object, even when it sorts first by name and was created in the same
// second (the creation-time order alone would hand it the namespace).
func TestNamespaceClaimKeepsALaterVirtualClusterFromCreatingAnything(t *testing.T) {
	ensureNode(t)
	ns := newNamespace(t)
	ctx := context.Background()
	createVC(t, ns, "zz")
	eventually(t, "zz claims the namespace", func() error {
		var n corev1.Namespace
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
			return err
		}
		if got := n.Annotations[controlplane.AnnotationNamespaceHolder]; got != "zz" {
			return fmt.Errorf("claim %q", got)
		}
		return nil
	})
	createVC(t, ns, "aa")
	eventually(t, "aa refused with NamespaceInUse", func() error {
		ready := meta.FindStatusCondition(getVC(t, ns, "aa").Status.Conditions, nestv1.ConditionReady)
		if ready == nil || ready.Reason != ReasonNamespaceInUse || !strings.Contains(ready.Message, "VirtualCluster zz") {
			return fmt.Errorf("Ready = %+v", ready)
		}
		return nil
	})
	eventually(t, "zz gets its StatefulSet", func() error {
		return k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "zz"}, &appsv1.StatefulSet{})
	})
	for _, obj := range createdIn(ns) {
		if _, name, _ := strings.Cut(obj, "/"); strings.HasPrefix(name, "aa") {
			t.Errorf("%s was created for the refused VirtualCluster", obj)
		}
	}
	if n := len(createdIn(ns)); n == 0 {
		t.Fatal("the reconciler recorded nothing created in the namespace: the check above would pass for nothing")
	}
}

// TestDeletedHolderReleasesItsClaim: the claim goes with the holder, so the
// namespace holds no claim naming a VirtualCluster that is gone.
func TestDeletedHolderReleasesItsClaim(t *testing.T) {
	ensureNode(t)
	ns := newNamespace(t)
	ctx := context.Background()
	createVC(t, ns, "gone")
	claim := func() string {
		var n corev1.Namespace
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
			t.Fatal(err)
		}
		return n.Annotations[controlplane.AnnotationNamespaceHolder]
	}
	eventually(t, "gone claims the namespace", func() error {
		if c := claim(); c != "gone" {
			return fmt.Errorf("claim %q", c)
		}
		return nil
	})
	if err := k8sClient.Delete(ctx, getVC(t, ns, "gone")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the claim is released", func() error {
		if c := claim(); c != "" {
			return fmt.Errorf("claim %q", c)
		}
		return nil
	})
}
