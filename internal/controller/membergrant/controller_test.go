package membergrant

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// res builds a ResourceList from name, quantity pairs.
func res(pairs ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return l
}

// mlSelector selects VirtualClusters labelled team=ml.
var mlSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ml"}}

// createHostNamespace creates a host namespace for a test's VirtualClusters,
// or keeps the one a previous run (-count) made.
func createHostNamespace(t *testing.T, name string) {
	t.Helper()
	if err := host.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// createMember registers the suite's member as MemberCluster name, with
// selector, and writes the status its probe would: Reachable, offering
// allocatable.
func createMember(t *testing.T, name string, selector *metav1.LabelSelector, allocatable corev1.ResourceList) {
	t.Helper()
	createMemberWithSecret(t, name, kubeconfigSecret, selector, allocatable)
}

// createMemberWithSecret is createMember with the kubeconfig in Secret
// secret of the manager namespace.
func createMemberWithSecret(t *testing.T, name, secret string, selector *metav1.LabelSelector, allocatable corev1.ResourceList) {
	t.Helper()
	ctx := context.Background()
	mc := &nestv1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nestv1.MemberClusterSpec{
		KubeconfigSecretRef:    nestv1.SecretKeyRef{Namespace: managerNamespace, Name: secret},
		Network:                nestv1.MemberNetwork{APIServerAddress: "10.20.0.5:6443", DNSAddress: "10.20.0.10"},
		VirtualClusterSelector: selector,
	}}
	if err := host.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Delete(context.Background(), mc) })
	mc.Status = nestv1.MemberClusterStatus{Allocatable: allocatable, Nodes: 2, Conditions: []metav1.Condition{{
		Type: nestv1.ConditionReachable, Status: metav1.ConditionTrue, Reason: "Reachable", Message: "test", LastTransitionTime: metav1.Now(),
	}}}
	if err := host.Status().Update(ctx, mc); err != nil {
		t.Fatal(err)
	}
}

// setMemberNetwork sets MemberCluster name's spec.network to network.
func setMemberNetwork(t *testing.T, name string, network nestv1.MemberNetwork) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		mc := &nestv1.MemberCluster{}
		if err := host.Get(context.Background(), client.ObjectKey{Name: name}, mc); err != nil {
			return err
		}
		mc.Spec.Network = network
		return host.Update(context.Background(), mc)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// newVC is VirtualCluster ns/name with labels and grants.
func newVC(ns, name string, labels map[string]string, grants ...nestv1.MemberGrant) *nestv1.VirtualCluster {
	return &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: nestv1.VirtualClusterSpec{Members: grants}}
}

// createVC creates vc. Cleanup deletes it and finalizes its member
// namespaces (the member has no namespace controller) until it is gone.
func createVC(t *testing.T, vc *nestv1.VirtualCluster) *nestv1.VirtualCluster {
	t.Helper()
	if err := host.Create(context.Background(), vc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteVC(t, vc) })
	return vc
}

// updateVC applies change to the current vc, retrying on conflicts with
// the controller's writes.
func updateVC(t *testing.T, vc *nestv1.VirtualCluster, status bool, change func(*nestv1.VirtualCluster)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &nestv1.VirtualCluster{}
		if err := host.Get(context.Background(), client.ObjectKeyFromObject(vc), cur); err != nil {
			return err
		}
		change(cur)
		if status {
			return host.Status().Update(context.Background(), cur)
		}
		return host.Update(context.Background(), cur)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// deleteVC deletes vc and finalizes its member namespaces until it is gone.
func deleteVC(t *testing.T, vc *nestv1.VirtualCluster) {
	t.Helper()
	ctx := context.Background()
	if err := host.Delete(ctx, vc); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	eventually(t, "VirtualCluster "+vc.Name+" gone", func() error {
		finalizeMemberNamespaces(t, vc)
		err := host.Get(ctx, client.ObjectKeyFromObject(vc), &nestv1.VirtualCluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// finalizeMemberNamespaces finishes the deletion of vc's member namespaces
// that are being deleted, as the member's namespace controller would.
func finalizeMemberNamespaces(t *testing.T, vc *nestv1.VirtualCluster) {
	t.Helper()
	list := &corev1.NamespaceList{}
	if err := member.List(context.Background(), list, client.MatchingLabels(MemberLabels(vc))); err != nil {
		t.Fatal(err)
	}
	for _, ns := range list.Items {
		if !ns.DeletionTimestamp.IsZero() {
			finalizeNamespace(t, ns.Name)
		}
	}
}

// finalizeNamespace removes the kubernetes finalizer of a namespace being
// deleted, so the member's API server deletes it.
func finalizeNamespace(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	ns, err := memberCS.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if _, err := memberCS.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
		t.Fatal(err)
	}
}

// setGrants replaces the grants of vc.
func setGrants(t *testing.T, vc *nestv1.VirtualCluster, grants ...nestv1.MemberGrant) {
	t.Helper()
	updateVC(t, vc, false, func(cur *nestv1.VirtualCluster) { cur.Spec.Members = grants })
}

// waitGrant waits until vc's status entry for member is ready (or not,
// with reason) and its message holds every one of words, and returns it.
func waitGrant(t *testing.T, vc *nestv1.VirtualCluster, memberName string, ready bool, reason string, words ...string) nestv1.MemberGrantStatus {
	t.Helper()
	var got nestv1.MemberGrantStatus
	eventually(t, fmt.Sprintf("grant %s of %s ready=%v reason=%q", memberName, vc.Name, ready, reason), func() error {
		cur := &nestv1.VirtualCluster{}
		if err := host.Get(context.Background(), client.ObjectKeyFromObject(vc), cur); err != nil {
			return err
		}
		i := slices.IndexFunc(cur.Status.Members, func(st nestv1.MemberGrantStatus) bool { return st.Name == memberName })
		if i < 0 {
			return fmt.Errorf("no status entry in %+v", cur.Status.Members)
		}
		got = cur.Status.Members[i]
		if got.Ready != ready || got.Reason != reason {
			return fmt.Errorf("status entry is %+v", got)
		}
		for _, w := range words {
			if !strings.Contains(got.Message, w) {
				return fmt.Errorf("message %q does not say %q", got.Message, w)
			}
		}
		return nil
	})
	return got
}

// placements reads the members Secret of vc; nil when it does not exist.
func placements(t *testing.T, vc *nestv1.VirtualCluster) map[string]contract.MemberPlacement {
	t.Helper()
	secret := &corev1.Secret{}
	err := host.Get(context.Background(), client.ObjectKey{Namespace: vc.Namespace, Name: contract.MembersSecret(vc.Name)}, secret)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	p, err := contract.ParseMemberPlacements(secret.Data[contract.MembersKey])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]contract.MemberPlacement{}
	for _, m := range p.Members {
		out[m.Name] = m
	}
	return out
}

// waitPlacement waits until the members Secret of vc holds member, with a
// token other than notToken, and returns it.
func waitPlacement(t *testing.T, vc *nestv1.VirtualCluster, memberName, notToken string) contract.MemberPlacement {
	t.Helper()
	var got contract.MemberPlacement
	eventually(t, "placement "+memberName+" in the members Secret of "+vc.Name, func() error {
		p, ok := placements(t, vc)[memberName]
		if !ok {
			return errors.New("not there")
		}
		if p.Token == notToken {
			return errors.New("token not renewed")
		}
		got = p
		return nil
	})
	return got
}

// tokenClient reaches the member as the placement's token.
func tokenClient(t *testing.T, p contract.MemberPlacement) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: p.Server, BearerToken: p.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.CAData, ServerName: p.TLSServerName}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func getVC(t *testing.T, vc *nestv1.VirtualCluster) *nestv1.VirtualCluster {
	t.Helper()
	cur := &nestv1.VirtualCluster{}
	if err := host.Get(context.Background(), client.ObjectKeyFromObject(vc), cur); err != nil {
		t.Fatal(err)
	}
	return cur
}

func TestGrantIsSetUp(t *testing.T) {
	ctx := context.Background()
	createHostNamespace(t, "vc-setup")
	createMember(t, "gpu-pool", mlSelector, res("cpu", "3", "memory", "8Gi", "nvidia.com/gpu", "1"))
	vc := newVC("vc-setup", "ml", map[string]string{"team": "ml"},
		nestv1.MemberGrant{Name: "gpu-pool", Resources: res("cpu", "2", "memory", "16Gi", "nvidia.com/gpu", "2", "pods", "10")})
	vc.Spec.VirtualNode.PodSecurityLevel = nestv1.PodSecurityRestricted
	createVC(t, vc)
	// A field of the VirtualCluster controller's, which must survive.
	updateVC(t, vc, true, func(cur *nestv1.VirtualCluster) { cur.Status.Phase = nestv1.PhaseCompleted })
	vc = getVC(t, vc)
	ns := NamespaceName(vc, "gpu-pool")
	wantAlloc := res("cpu", "2", "memory", "8Gi", "nvidia.com/gpu", "1", "pods", "0")

	st := waitGrant(t, vc, "gpu-pool", true, "", ns)
	if st.Namespace != ns || !equality.Semantic.DeepEqual(st.Allocatable, wantAlloc) {
		t.Errorf("status entry %+v: want namespace %s, allocatable %v", st, ns, wantAlloc)
	}
	cur := getVC(t, vc)
	if cur.Status.Phase != nestv1.PhaseCompleted {
		t.Errorf("status.phase is %q: the members patch overwrote it", cur.Status.Phase)
	}
	if !slices.Contains(cur.Finalizers, Finalizer) {
		t.Errorf("finalizers %v lack %s", cur.Finalizers, Finalizer)
	}

	// The namespace: Nest's labels and Pod Security at the VirtualCluster's level.
	eventually(t, "namespace labelled restricted", func() error {
		got := &corev1.Namespace{}
		if err := member.Get(ctx, client.ObjectKey{Name: ns}, got); err != nil {
			return err
		}
		for k, v := range map[string]string{
			LabelManagedBy: "nest-manager", LabelVirtualCluster: "ml", LabelHostNamespace: "vc-setup",
			"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
		} {
			if got.Labels[k] != v {
				return fmt.Errorf("label %s is %q, want %q", k, got.Labels[k], v)
			}
		}
		return nil
	})
	// The service account, its Role (namespaced, exactly SyncerRules) and binding.
	if err := member.Get(ctx, client.ObjectKey{Namespace: ns, Name: SyncerServiceAccount}, &corev1.ServiceAccount{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{}
	if err := member.Get(ctx, client.ObjectKey{Namespace: ns, Name: SyncerServiceAccount}, role); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(role.Rules, SyncerRules()) {
		t.Errorf("Role rules %+v, want %+v", role.Rules, SyncerRules())
	}
	rb := &rbacv1.RoleBinding{}
	if err := member.Get(ctx, client.ObjectKey{Namespace: ns, Name: SyncerServiceAccount}, rb); err != nil {
		t.Fatal(err)
	}
	if rb.RoleRef.Kind != "Role" || len(rb.Subjects) != 1 || rb.Subjects[0].Namespace != ns {
		t.Errorf("RoleBinding %+v does not bind the Role to %s/%s", rb, ns, SyncerServiceAccount)
	}
	for _, list := range []client.ObjectList{&rbacv1.ClusterRoleList{}, &rbacv1.ClusterRoleBindingList{}} {
		if err := member.List(ctx, list, client.MatchingLabels{LabelManagedBy: ManagedByValue}); err != nil {
			t.Fatal(err)
		}
		if n := meta.LenList(list); n > 0 {
			t.Errorf("%d cluster-scoped RBAC objects of Nest's", n)
		}
	}
	// The quota holds the grant as requests; the LimitRange gives defaults.
	quota := &corev1.ResourceQuota{}
	if err := member.Get(ctx, client.ObjectKey{Namespace: ns, Name: QuotaName}, quota); err != nil {
		t.Fatal(err)
	}
	wantHard := res("requests.cpu", "2", "requests.memory", "16Gi", "requests.nvidia.com/gpu", "2", "pods", "10")
	if !equality.Semantic.DeepEqual(quota.Spec.Hard, wantHard) {
		t.Errorf("quota hard %v, want %v", quota.Spec.Hard, wantHard)
	}
	lr := &corev1.LimitRange{}
	if err := member.Get(ctx, client.ObjectKey{Namespace: ns, Name: LimitRangeName}, lr); err != nil {
		t.Fatal(err)
	}
	if len(lr.Spec.Limits) != 1 || !equality.Semantic.DeepEqual(lr.Spec.Limits[0].DefaultRequest, res("cpu", "100m", "memory", "128Mi")) {
		t.Errorf("LimitRange %+v: want default requests cpu 100m, memory 128Mi", lr.Spec.Limits)
	}

	// The members Secret: Opaque, owned by the VirtualCluster, parsed by nest-syncer's contract.
	secret := &corev1.Secret{}
	if err := host.Get(ctx, client.ObjectKey{Namespace: "vc-setup", Name: contract.MembersSecret("ml")}, secret); err != nil {
		t.Fatal(err)
	}
	if secret.Type != corev1.SecretTypeOpaque || secret.Labels[LabelManagedBy] != ManagedByValue ||
		len(secret.OwnerReferences) != 1 || secret.OwnerReferences[0].UID != vc.UID {
		t.Errorf("members Secret type %s, labels %v, owners %+v", secret.Type, secret.Labels, secret.OwnerReferences)
	}
	p := waitPlacement(t, vc, "gpu-pool", "")
	if p.Namespace != ns || strings.TrimSuffix(p.Server, "/") != strings.TrimSuffix(memberConfig.Host, "/") || len(p.CAData) == 0 ||
		p.APIServerAddress != "10.20.0.5:6443" || p.DNSAddress != "10.20.0.10" || p.Nodes != 2 ||
		!equality.Semantic.DeepEqual(p.Allocatable, wantAlloc) || time.Until(p.TokenExpiry) < 50*time.Minute {
		t.Errorf("placement: namespace %s, server %s (member %s), %d bytes of CA, apiServerAddress %s, dnsAddress %s, nodes %d, allocatable %v, token expiry %s",
			p.Namespace, p.Server, memberConfig.Host, len(p.CAData), p.APIServerAddress, p.DNSAddress, p.Nodes, p.Allocatable, p.TokenExpiry)
	}

	// The token acts in its namespace and nowhere else.
	cs := tokenClient(t, p)
	if _, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list pods in %s with the token: %v", ns, err)
	}
	for what, call := range map[string]func() error{
		"list pods in default": func() error {
			_, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			return err
		},
		"list Secrets in kube-system": func() error {
			_, err := cs.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"list Nodes": func() error {
			_, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err
		},
		"create a namespace": func() error {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "escape"}}, metav1.CreateOptions{})
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s with the token: want Forbidden, got %v", what, err)
		}
	}

	// What the member offers flows to the status and the Secret; the
	// token, still fresh, is kept.
	setAllocatable(t, "gpu-pool", res("cpu", "1", "memory", "8Gi", "nvidia.com/gpu", "1"))
	waitGrant(t, vc, "gpu-pool", true, "", "cpu 1,")
	eventually(t, "allocatable cpu 1 in the members Secret", func() error {
		q := placements(t, vc)["gpu-pool"].Allocatable[corev1.ResourceCPU]
		if q.Cmp(resource.MustParse("1")) != 0 {
			return fmt.Errorf("cpu is %s", q.String())
		}
		return nil
	})
	if got := placements(t, vc)["gpu-pool"].Token; got != p.Token {
		t.Error("the token was replaced while fresh")
	}
}

// setAllocatable writes what MemberCluster name offers, as its probe would.
func setAllocatable(t *testing.T, name string, allocatable corev1.ResourceList) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		mc := &nestv1.MemberCluster{}
		if err := host.Get(context.Background(), client.ObjectKey{Name: name}, mc); err != nil {
			return err
		}
		mc.Status.Allocatable = allocatable
		return host.Status().Update(context.Background(), mc)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestGrantNotReady(t *testing.T) {
	createHostNamespace(t, "vc-notready")
	createMember(t, "closed", nil, res("cpu", "8"))
	createMember(t, "ml-only", mlSelector, res("cpu", "8"))
	vc := createVC(t, newVC("vc-notready", "web", map[string]string{"team": "web"},
		nestv1.MemberGrant{Name: "closed", Resources: res("cpu", "1")},
		nestv1.MemberGrant{Name: "missing", Resources: res("cpu", "1")},
		nestv1.MemberGrant{Name: "ml-only", Resources: res("cpu", "1")}))

	waitGrant(t, vc, "missing", false, ReasonMemberNotFound, "MemberCluster missing does not exist")
	waitGrant(t, vc, "closed", false, ReasonNotSelected, "has no spec.virtualClusterSelector")
	st := waitGrant(t, vc, "ml-only", false, ReasonNotSelected, "team=ml", "does not match the labels of VirtualCluster vc-notready/web")
	if cpu := st.Allocatable[corev1.ResourceCPU]; cpu.Cmp(resource.MustParse("1")) != 0 {
		t.Errorf("allocatable of a grant not selected: cpu %s, want 1 (what it would offer)", cpu.String())
	}
	if p := placements(t, vc); len(p) != 0 {
		t.Errorf("members Secret holds grants that are not Ready: %v", p)
	}
	for _, m := range []string{"closed", "missing", "ml-only"} {
		err := member.Get(context.Background(), client.ObjectKey{Name: NamespaceName(vc, m)}, &corev1.Namespace{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("namespace for the grant on %s: want none, got %v", m, err)
		}
	}

	// Labelled to match, the VirtualCluster is selected at once.
	updateVC(t, vc, false, func(cur *nestv1.VirtualCluster) { cur.Labels["team"] = "ml" })
	waitGrant(t, vc, "ml-only", true, "")
	waitPlacement(t, vc, "ml-only", "")
}

func TestForeignNamespaceIsNotAdopted(t *testing.T) {
	ctx := context.Background()
	createHostNamespace(t, "vc-foreign")
	createMember(t, "shared", mlSelector, res("cpu", "8"))
	vc := createVC(t, newVC("vc-foreign", "ml", map[string]string{"team": "ml"}))
	vc = getVC(t, vc) // its UID names the namespace
	name := NamespaceName(vc, "shared")
	foreign := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"owner": "someone-else"}}}
	if err := member.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = member.Delete(context.Background(), foreign)
		finalizeNamespace(t, name)
	})

	setGrants(t, vc, nestv1.MemberGrant{Name: "shared", Resources: res("cpu", "1")})
	waitGrant(t, vc, "shared", false, ReasonSetupFailed, "namespace "+name+" exists", "without Nest's labels", "does not take over")
	got := &corev1.Namespace{}
	if err := member.Get(ctx, client.ObjectKey{Name: name}, got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Labels[LabelManagedBy]; ok || got.Labels["owner"] != "someone-else" {
		t.Errorf("the foreign namespace's labels changed: %v", got.Labels)
	}
	if err := member.Get(ctx, client.ObjectKey{Namespace: name, Name: SyncerServiceAccount}, &corev1.ServiceAccount{}); !apierrors.IsNotFound(err) {
		t.Errorf("service account in the foreign namespace: want none, got %v", err)
	}

	// Removing the grant leaves the foreign namespace alone and releases the
	// VirtualCluster: the status entry, the Secret and the finalizer go.
	setGrants(t, vc)
	eventually(t, "grant and finalizer gone", func() error {
		cur := getVC(t, vc)
		if len(cur.Status.Members) > 0 || slices.Contains(cur.Finalizers, Finalizer) {
			return fmt.Errorf("status.members %+v, finalizers %v", cur.Status.Members, cur.Finalizers)
		}
		if p := placements(t, vc); p != nil {
			return fmt.Errorf("members Secret still there: %v", p)
		}
		return nil
	})
	if err := member.Get(ctx, client.ObjectKey{Name: name}, got); err != nil || !got.DeletionTimestamp.IsZero() {
		t.Errorf("the foreign namespace was deleted (%v, deletionTimestamp %v)", err, got.DeletionTimestamp)
	}
}

func TestRemovedGrantDeletesItsNamespace(t *testing.T) {
	ctx := context.Background()
	createHostNamespace(t, "vc-remove")
	createMember(t, "pool-a", mlSelector, res("cpu", "8"))
	createMember(t, "pool-b", mlSelector, res("cpu", "8"))
	grantA := nestv1.MemberGrant{Name: "pool-a", Resources: res("cpu", "1")}
	vc := createVC(t, newVC("vc-remove", "ml", map[string]string{"team": "ml"},
		grantA, nestv1.MemberGrant{Name: "pool-b", Resources: res("cpu", "2")}))
	waitGrant(t, vc, "pool-a", true, "")
	waitGrant(t, vc, "pool-b", true, "")
	vc = getVC(t, vc)
	nsA, nsB := NamespaceName(vc, "pool-a"), NamespaceName(vc, "pool-b")
	if nsA == nsB {
		t.Fatalf("grants on two MemberClusters share namespace %s", nsA)
	}
	eventually(t, "both placements", func() error {
		if n := len(placements(t, vc)); n != 2 {
			return fmt.Errorf("%d placements", n)
		}
		return nil
	})

	setGrants(t, vc, grantA)
	eventually(t, "namespace of pool-b deleted and dropped from the Secret", func() error {
		ns := &corev1.Namespace{}
		if err := member.Get(ctx, client.ObjectKey{Name: nsB}, ns); err != nil {
			return err
		}
		if ns.DeletionTimestamp.IsZero() {
			return errors.New("namespace not being deleted")
		}
		if p := placements(t, vc); len(p) != 1 || p["pool-a"].Token == "" {
			return fmt.Errorf("placements %v: want pool-a only", p)
		}
		return nil
	})
	// Until the namespace is gone, the status says so and the finalizer stays.
	waitGrant(t, vc, "pool-b", false, ReasonRemoving, nsB, "being deleted")
	finalizeNamespace(t, nsB)
	eventually(t, "pool-b gone from the status", func() error {
		cur := getVC(t, vc)
		if len(cur.Status.Members) != 1 || cur.Status.Members[0].Name != "pool-a" {
			return fmt.Errorf("status.members %+v", cur.Status.Members)
		}
		return nil
	})
	ns := &corev1.Namespace{}
	if err := member.Get(ctx, client.ObjectKey{Name: nsA}, ns); err != nil || !ns.DeletionTimestamp.IsZero() {
		t.Errorf("namespace of the kept grant: %v, deletionTimestamp %v", err, ns.DeletionTimestamp)
	}
}

func TestDeletedVirtualClusterWaitsForItsNamespaces(t *testing.T) {
	ctx := context.Background()
	createHostNamespace(t, "vc-delete")
	createMember(t, "pool-d", mlSelector, res("cpu", "8"))
	vc := createVC(t, newVC("vc-delete", "ml", map[string]string{"team": "ml"},
		nestv1.MemberGrant{Name: "pool-d", Resources: res("cpu", "1")}))
	waitGrant(t, vc, "pool-d", true, "")
	vc = getVC(t, vc)
	ns := NamespaceName(vc, "pool-d")

	if err := host.Delete(ctx, vc); err != nil {
		t.Fatal(err)
	}
	waitGrant(t, vc, "pool-d", false, ReasonRemoving, ns)
	cur := getVC(t, vc)
	if !slices.Contains(cur.Finalizers, Finalizer) {
		t.Fatalf("finalizer released while namespace %s is being deleted", ns)
	}
	finalizeNamespace(t, ns)
	waitVCGone(t, vc)
}

func TestDeletedMemberClusterDoesNotHoldTheVirtualCluster(t *testing.T) {
	ctx := context.Background()
	createHostNamespace(t, "vc-gone")
	createMember(t, "pool-gone", mlSelector, res("cpu", "8"))
	vc := createVC(t, newVC("vc-gone", "ml", map[string]string{"team": "ml"},
		nestv1.MemberGrant{Name: "pool-gone", Resources: res("cpu", "1")}))
	waitGrant(t, vc, "pool-gone", true, "")
	vc = getVC(t, vc)
	ns := NamespaceName(vc, "pool-gone")
	t.Cleanup(func() {
		_ = member.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		finalizeNamespace(t, ns)
	})

	if err := host.Delete(ctx, &nestv1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "pool-gone"}}); err != nil {
		t.Fatal(err)
	}
	waitGrant(t, vc, "pool-gone", false, ReasonMemberNotFound)
	if err := host.Delete(ctx, vc); err != nil {
		t.Fatal(err)
	}
	waitVCGone(t, vc)
}

func TestUnreachableMemberHoldsTheRemoval(t *testing.T) {
	ctx := context.Background()
	createHostNamespace(t, "vc-unreachable")
	kubeconfig := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: "nest-member-u"},
		Data: map[string][]byte{"kubeconfig": memberKubeconfig}}
	if err := host.Create(ctx, kubeconfig); err != nil {
		t.Fatal(err)
	}
	createMemberWithSecret(t, "pool-u", kubeconfig.Name, mlSelector, res("cpu", "8"))
	vc := createVC(t, newVC("vc-unreachable", "ml", map[string]string{"team": "ml"},
		nestv1.MemberGrant{Name: "pool-u", Resources: res("cpu", "1")}))
	waitGrant(t, vc, "pool-u", true, "")
	vc = getVC(t, vc)
	ns := NamespaceName(vc, "pool-u")

	// Without its kubeconfig the member cannot be reached: the removed
	// grant stays in the status, saying why, and its namespace stays.
	if err := host.Delete(ctx, kubeconfig); err != nil {
		t.Fatal(err)
	}
	setGrants(t, vc)
	waitGrant(t, vc, "pool-u", false, ReasonMemberUnreachable, "cannot be deleted yet", "Secret nest-system/nest-member-u does not exist")
	if cur := getVC(t, vc); !slices.Contains(cur.Finalizers, Finalizer) {
		t.Error("finalizer released while the member namespace cannot be deleted")
	}
	got := &corev1.Namespace{}
	if err := member.Get(ctx, client.ObjectKey{Name: ns}, got); err != nil || !got.DeletionTimestamp.IsZero() {
		t.Fatalf("namespace %s: %v, deletionTimestamp %v", ns, err, got.DeletionTimestamp)
	}

	// The kubeconfig back, the removal goes on.
	kubeconfig.ResourceVersion = ""
	if err := host.Create(ctx, kubeconfig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Delete(context.Background(), kubeconfig) })
	waitGrant(t, vc, "pool-u", false, ReasonRemoving, ns)
	finalizeNamespace(t, ns)
	eventually(t, "grant and finalizer gone", func() error {
		cur := getVC(t, vc)
		if len(cur.Status.Members) > 0 || slices.Contains(cur.Finalizers, Finalizer) {
			return fmt.Errorf("status.members %+v, finalizers %v", cur.Status.Members, cur.Finalizers)
		}
		return nil
	})
}

func TestTokenIsRenewed(t *testing.T) {
	ctx := context.Background()
	createHostNamespace(t, "vc-token")
	createMember(t, "pool-t", mlSelector, res("cpu", "8"))
	vc := createVC(t, newVC("vc-token", "ml", map[string]string{"team": "ml"},
		nestv1.MemberGrant{Name: "pool-t", Resources: res("cpu", "1")}))
	first := waitPlacement(t, vc, "pool-t", "")

	// 50 minutes on, the hour-long token is past 80% of its life.
	testClock.SetTime(time.Now().Add(50 * time.Minute))
	t.Cleanup(func() { testClock.SetTime(time.Now()) })
	second := waitPlacement(t, vc, "pool-t", first.Token)
	testClock.SetTime(time.Now())
	// The member API server dates both tokens by its own clock, in whole
	// seconds: a renewal within the first's second expires with it.
	if second.TokenExpiry.Before(first.TokenExpiry) {
		t.Errorf("renewed token expires %s, before the first's %s", second.TokenExpiry, first.TokenExpiry)
	}
	if _, err := tokenClient(t, second).CoreV1().Pods(second.Namespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list pods with the renewed token: %v", err)
	}
}

func TestNegativeGrantIsRefused(t *testing.T) {
	createHostNamespace(t, "vc-invalid")
	vc := newVC("vc-invalid", "ml", nil, nestv1.MemberGrant{Name: "pool", Resources: res("cpu", "-1")})
	err := host.Create(context.Background(), vc)
	if err == nil {
		_ = host.Delete(context.Background(), vc)
		t.Fatal("a negative grant was accepted")
	}
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "every quantity must be zero or more") {
		t.Fatalf("error %v does not name the fix", err)
	}
}

// waitVCGone waits until the VirtualCluster is deleted, finalizers and all.
func waitVCGone(t *testing.T, vc *nestv1.VirtualCluster) {
	t.Helper()
	eventually(t, "VirtualCluster gone", func() error {
		err := host.Get(context.Background(), client.ObjectKeyFromObject(vc), &nestv1.VirtualCluster{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

func TestInjectorIsRegisteredForAMemberWithANodePortAddress(t *testing.T) {
	ctx := context.Background()
	createHostNamespace(t, "vc-inject")
	createMember(t, "pool-inj", mlSelector, res("cpu", "8"))
	setMemberNetwork(t, "pool-inj", nestv1.MemberNetwork{APIServerAddress: "10.20.0.5:6443", DNSAddress: "10.20.0.10", NodePortAddress: "10.0.0.11"})
	vc := createVC(t, newVC("vc-inject", "ml", map[string]string{"team": "ml"}, nestv1.MemberGrant{Name: "pool-inj", Resources: res("cpu", "1")}))
	// Nothing serves the injector here (no nest-syncer): the dry run fails
	// and the status says so.
	st := waitGrant(t, vc, "pool-inj", true, "", "injector does not answer")
	if st.InjectorReady {
		t.Fatal("injectorReady is true with nothing serving the injector")
	}
	vc = getVC(t, vc)
	ns := NamespaceName(vc, "pool-inj")
	p := waitPlacement(t, vc, "pool-inj", "")
	cfg, err := memberCS.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, InjectorConfigName(ns), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the injector's webhook configuration in the member: %v", err)
	}
	hook := cfg.Webhooks[0]
	svc := hook.ClientConfig.Service
	if svc == nil || svc.Namespace != ns || svc.Name != contract.MemberInjectorService || ptr.Deref(svc.Path, "") != contract.InjectorPath ||
		hook.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != ns || *hook.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("webhook %+v; want the member Service %s/%s, this namespace alone, failing closed", hook, ns, contract.MemberInjectorService)
	}
	// Only the bundle's CAs: the leaf itself in the pool would verify
	// against itself.
	roots := x509.NewCertPool()
	for rest := hook.ClientConfig.CABundle; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil && c.IsCA {
			roots.AddCert(c)
		}
	}
	block, _ := pem.Decode(p.InjectorCert)
	if block == nil || len(p.InjectorKey) == 0 {
		t.Fatal("the placement has no injector certificate and key")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: contract.MemberInjectorService + "." + ns + ".svc"}); err != nil {
		t.Errorf("the injector's certificate does not verify against the webhook's caBundle for its Service: %v", err)
	}

	setGrants(t, vc)
	eventually(t, "the webhook configuration removed with the grant", func() error {
		_, err := memberCS.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, InjectorConfigName(ns), metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %v", err)
		}
		return nil
	})
	finalizeNamespace(t, ns)
}

// A VirtualCluster refused the host namespace (another holds it) gets no
// grants: nothing of it lands in members or beside the holder's objects.
func TestVirtualClusterRefusedTheNamespaceGetsNoGrants(t *testing.T) {
	ctx := context.Background()
	createHostNamespace(t, "vc-shared-ns")
	createMember(t, "refused-pool", mlSelector, res("cpu", "8"))
	// "a-holder" is first by creation time, or by name within one second.
	holder := createVC(t, newVC("vc-shared-ns", "a-holder", nil))
	refused := createVC(t, newVC("vc-shared-ns", "b-refused", map[string]string{"team": "ml"},
		nestv1.MemberGrant{Name: "refused-pool", Resources: res("cpu", "1")}))
	r := &Reconciler{Client: host, APIReader: host, ManagerNamespace: managerNamespace,
		ResyncInterval: 2 * time.Second, RetryInterval: time.Second, RequestTimeout: 5 * time.Second, Clock: testClock}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(refused)}); err != nil {
		t.Fatal(err)
	}
	cur := getVC(t, refused)
	if slices.Contains(cur.Finalizers, Finalizer) || len(cur.Status.Members) > 0 {
		t.Errorf("finalizers %v, status.members %+v: want nothing set up", cur.Finalizers, cur.Status.Members)
	}
	if err := member.Get(ctx, client.ObjectKey{Name: NamespaceName(cur, "refused-pool")}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("member namespace of the refused VirtualCluster: %v, want none", err)
	}
	if p := placements(t, cur); p != nil {
		t.Errorf("members Secret of the refused VirtualCluster: %v", p)
	}
	// Once the holder is gone, the namespace is b-refused's, and so is its
	// grant: nothing but the resync wakes it.
	deleteVC(t, holder)
	waitGrant(t, refused, "refused-pool", true, "")
}

// A member that names no addresses reaches a tenant through the host's
// load balancer: its API server at the tenant's LoadBalancer address, its
// DNS, injector and Services through a LoadBalancer of the grant's own
// (nest-syncer's). A tenant with no LoadBalancer gets no grant, told which
// fields to set.
func TestGrantReachesATenantThroughItsLoadBalancer(t *testing.T) {
	ctx := context.Background()
	createHostNamespace(t, "vc-lb")
	createMember(t, "pool-lb", mlSelector, res("cpu", "8"))
	setMemberNetwork(t, "pool-lb", nestv1.MemberNetwork{})
	vc := createVC(t, newVC("vc-lb", "ml", map[string]string{"team": "ml"}, nestv1.MemberGrant{Name: "pool-lb", Resources: res("cpu", "1")}))

	// No Service in front of the API server yet: nothing stands in for the
	// member's missing apiServerAddress.
	waitGrant(t, vc, "pool-lb", false, ReasonNoPathToTenant, "names no spec.network.apiServerAddress", "spec.controlPlane.service.type must be LoadBalancer")

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "vc-lb", Name: "ml", Labels: controlplane.NamesOf(vc).Labels()},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}
	if err := host.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Delete(context.Background(), svc) })
	waitGrant(t, vc, "pool-lb", false, ReasonNoPathToTenant, "has no IP address yet")

	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.200"}}
	if err := host.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	st := waitGrant(t, vc, "pool-lb", true, "")
	if st.APIServerAddress != "198.51.100.200:443" || st.Network != nestv1.MemberNetworkLoadBalancer {
		t.Errorf("status apiServerAddress %q, network %q; want 198.51.100.200:443 through LoadBalancer", st.APIServerAddress, st.Network)
	}
	vc = getVC(t, vc)
	p := waitPlacement(t, vc, "pool-lb", "")
	if p.APIServerAddress != "198.51.100.200:443" || !p.LoadBalancer || p.NodePortAddress != "" || p.DNSAddress != "" || len(p.InjectorCert) == 0 {
		t.Errorf("placement API server %q, loadBalancer %v, nodePortAddress %q, dnsAddress %q, injector certificate %d bytes; want the tenant's LoadBalancer address, through a LoadBalancer, with an injector",
			p.APIServerAddress, p.LoadBalancer, p.NodePortAddress, p.DNSAddress, len(p.InjectorCert))
	}
	ns := NamespaceName(vc, "pool-lb")
	if _, err := memberCS.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, InjectorConfigName(ns), metav1.GetOptions{}); err != nil {
		t.Errorf("the injector's webhook configuration in the member: %v", err)
	}

	// What the platform names wins: its own API server address and node
	// ports.
	setMemberNetwork(t, "pool-lb", nestv1.MemberNetwork{APIServerAddress: "10.20.0.5:6443", NodePortAddress: "10.0.0.11"})
	eventually(t, "the platform's addresses in the placement", func() error {
		p := placements(t, vc)["pool-lb"]
		if p.APIServerAddress != "10.20.0.5:6443" || p.LoadBalancer || p.NodePortAddress != "10.0.0.11" {
			return fmt.Errorf("placement API server %q, loadBalancer %v, nodePortAddress %q", p.APIServerAddress, p.LoadBalancer, p.NodePortAddress)
		}
		return nil
	})
	setGrants(t, vc)
	finalizeNamespace(t, ns)
}
