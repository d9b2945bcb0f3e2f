package membercluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
)

// res builds a ResourceList from name, quantity pairs.
func res(pairs ...string) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		l[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return l
}

var memberNodesOnce sync.Once

// memberNodes registers the member's Nodes once for every test: one Ready
// and schedulable, one Ready but cordoned, one NotReady. Only the first is
// summed.
func memberNodes(t *testing.T) {
	t.Helper()
	memberNodesOnce.Do(func() {
		createMemberNode(t, "gpu-1", false, true, res("cpu", "4", "memory", "8Gi", "nvidia.com/gpu", "2", "pods", "110"),
			res("cpu", "3800m", "memory", "7Gi", "nvidia.com/gpu", "2", "pods", "110"))
		createMemberNode(t, "gpu-cordoned", true, true, res("cpu", "16", "memory", "64Gi", "nvidia.com/gpu", "8"), res("cpu", "16", "memory", "64Gi", "nvidia.com/gpu", "8"))
		createMemberNode(t, "gpu-notready", false, false, res("cpu", "32", "memory", "128Gi"), res("cpu", "32", "memory", "128Gi"))
	})
}

// createMemberNode registers a Node in the member as its kubelet would: the
// Node, then its status.
func createMemberNode(t *testing.T, name string, cordoned, isReady bool, capacity, allocatable corev1.ResourceList) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: cordoned}}
	if err := member.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionTrue
	if !isReady {
		status = corev1.ConditionFalse
	}
	node.Status = corev1.NodeStatus{Capacity: capacity, Allocatable: allocatable,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
	if err := member.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
}

// putSecret creates or replaces the kubeconfig Secret name in the manager
// namespace, under key.
func putSecret(t *testing.T, name, key string, kubeconfig []byte) {
	t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: managerNamespace, Name: name}, Data: map[string][]byte{key: kubeconfig}}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		old := &corev1.Secret{}
		switch err := host.Get(ctx, client.ObjectKeyFromObject(s), old); {
		case apierrors.IsNotFound(err):
			return host.Create(ctx, s)
		case err != nil:
			return err
		}
		old.Data = s.Data
		return host.Update(ctx, old)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Delete(context.Background(), s) })
}

// createMember creates a MemberCluster whose kubeconfig is in the Secret
// secret of the manager namespace.
func createMember(t *testing.T, name, namespace, secret string, resources corev1.ResourceList) {
	t.Helper()
	mc := &nestv1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: nestv1.MemberClusterSpec{
		KubeconfigSecretRef: nestv1.SecretKeyRef{Namespace: namespace, Name: secret},
		Network:             nestv1.MemberNetwork{APIServerAddress: "10.20.0.5:6443", DNSAddress: "10.20.0.10"},
		Resources:           resources,
	}}
	if err := host.Create(context.Background(), mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Delete(context.Background(), mc) })
}

// waitReachable waits until the MemberCluster's Reachable condition has
// status and reason and its message holds every one of words, and returns it.
func waitReachable(t *testing.T, name string, status metav1.ConditionStatus, reason string, words ...string) *nestv1.MemberCluster {
	t.Helper()
	mc := &nestv1.MemberCluster{}
	eventually(t, fmt.Sprintf("MemberCluster %s Reachable %s (%s)", name, status, reason), func() error {
		if err := host.Get(context.Background(), client.ObjectKey{Name: name}, mc); err != nil {
			return err
		}
		c := meta.FindStatusCondition(mc.Status.Conditions, nestv1.ConditionReachable)
		if c == nil || c.Status != status || c.Reason != reason {
			return fmt.Errorf("Reachable is %+v", c)
		}
		for _, w := range words {
			if !strings.Contains(c.Message, w) {
				return fmt.Errorf("Reachable message %q does not say %q", c.Message, w)
			}
		}
		return nil
	})
	return mc
}

// checkResources fails unless got has exactly want's resources and amounts.
func checkResources(t *testing.T, what string, got, want corev1.ResourceList) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s = %v, want %v", what, got, want)
		return
	}
	for name, q := range want {
		if g, ok := got[name]; !ok || g.Cmp(q) != 0 {
			t.Errorf("%s[%s] = %v, want %v (all: %v)", what, name, got[name], q.String(), got)
		}
	}
}

// withServer is kubeconfig with its cluster's server replaced.
func withServer(t *testing.T, kubeconfig []byte, server string) []byte {
	t.Helper()
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range raw.Clusters {
		c.Server = server
	}
	out, err := clientcmd.Write(*raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReachableSumsReadySchedulableNodesCappedBySpec(t *testing.T) {
	memberNodes(t)
	putSecret(t, "member-gpu", nestv1.DefaultKubeconfigKey, memberKubeconfig)
	// cpu is capped below what the member has, nvidia.com/gpu above it,
	// memory not at all; example.com/fpga is offered but the member has none.
	createMember(t, "gpu-pool", managerNamespace, "member-gpu", res("cpu", "2", "nvidia.com/gpu", "8", "example.com/fpga", "1"))

	mc := waitReachable(t, "gpu-pool", metav1.ConditionTrue, ReasonReachable, "listed 3 Nodes", "1 Ready and schedulable")
	checkResources(t, "capacity", mc.Status.Capacity, res("cpu", "4", "memory", "8Gi", "nvidia.com/gpu", "2", "pods", "110"))
	checkResources(t, "allocatable", mc.Status.Allocatable, res("cpu", "2", "memory", "7Gi", "nvidia.com/gpu", "2", "pods", "110", "example.com/fpga", "0"))
	if mc.Status.Nodes != 1 {
		t.Errorf("status.nodes = %d, want 1 (the cordoned and the NotReady node are not counted)", mc.Status.Nodes)
	}
	if mc.Status.ObservedGeneration != mc.Generation || mc.Status.LastProbeTime == nil {
		t.Errorf("observedGeneration %d (generation %d), lastProbeTime %v", mc.Status.ObservedGeneration, mc.Generation, mc.Status.LastProbeTime)
	}
	inj := meta.FindStatusCondition(mc.Status.Conditions, nestv1.ConditionInjectorReady)
	if inj == nil || inj.Status != metav1.ConditionFalse || inj.Reason != ReasonNoGrants {
		t.Errorf("InjectorReady = %+v, want False NoGrants", inj)
	}

	// A spec change is probed at once: lifting the cpu cap.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := host.Get(context.Background(), client.ObjectKey{Name: "gpu-pool"}, mc); err != nil {
			return err
		}
		delete(mc.Spec.Resources, corev1.ResourceCPU)
		return host.Update(context.Background(), mc)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "allocatable cpu uncapped after the spec change", func() error {
		if err := host.Get(context.Background(), client.ObjectKey{Name: "gpu-pool"}, mc); err != nil {
			return err
		}
		if q := mc.Status.Allocatable[corev1.ResourceCPU]; q.Cmp(resource.MustParse("3800m")) != 0 || mc.Status.ObservedGeneration != mc.Generation {
			return fmt.Errorf("allocatable cpu %v, observedGeneration %d of %d", q.String(), mc.Status.ObservedGeneration, mc.Generation)
		}
		return nil
	})
}

// Each broken Secret is reported with its reason, and fixing it makes the
// member Reachable again: every step is a Secret change alone, which the
// controller watches.
func TestSecretFailuresAndRecovery(t *testing.T) {
	memberNodes(t)
	createMember(t, "flaky", managerNamespace, "member-flaky", nil)
	waitReachable(t, "flaky", metav1.ConditionFalse, ReasonSecretNotFound, "Secret nest-system/member-flaky does not exist")

	putSecret(t, "member-flaky", nestv1.DefaultKubeconfigKey, memberKubeconfig)
	mc := waitReachable(t, "flaky", metav1.ConditionTrue, ReasonReachable)
	checkResources(t, "allocatable without caps", mc.Status.Allocatable, res("cpu", "3800m", "memory", "7Gi", "nvidia.com/gpu", "2", "pods", "110"))

	putSecret(t, "member-flaky", nestv1.DefaultKubeconfigKey, []byte("this is not: [a kubeconfig"))
	mc = waitReachable(t, "flaky", metav1.ConditionFalse, ReasonKubeconfigInvalid, "Secret nest-system/member-flaky key kubeconfig", "not a kubeconfig")
	if mc.Status.Allocatable != nil || mc.Status.Capacity != nil || mc.Status.Nodes != 0 {
		t.Errorf("an unreachable member still offers capacity %v, allocatable %v, %d nodes", mc.Status.Capacity, mc.Status.Allocatable, mc.Status.Nodes)
	}

	// Loopback with nothing listening.
	putSecret(t, "member-flaky", nestv1.DefaultKubeconfigKey, withServer(t, memberKubeconfig, "https://127.0.0.1:1"))
	waitReachable(t, "flaky", metav1.ConditionFalse, ReasonUnreachable, "https://127.0.0.1:1", "connection refused")

	putSecret(t, "member-flaky", nestv1.DefaultKubeconfigKey, memberKubeconfig)
	waitReachable(t, "flaky", metav1.ConditionTrue, ReasonReachable)
}

func TestRefusedSecretsAndCredentials(t *testing.T) {
	ctx := context.Background()
	// A Secret outside the manager namespace is not read, even if it exists.
	// Objects outside t.Cleanup's reach are created only once, so -count=N runs.
	if err := host.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vc-tenant"}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	if err := host.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-tenant", Name: "kubeconfig"},
		Data: map[string][]byte{nestv1.DefaultKubeconfigKey: memberKubeconfig}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	createMember(t, "elsewhere", "vc-tenant", "kubeconfig", nil)
	waitReachable(t, "elsewhere", metav1.ConditionFalse, ReasonSecretNotAllowed, "spec.kubeconfigSecretRef.namespace", "only in its own namespace nest-system")

	putSecret(t, "member-wrong-key", "config", memberKubeconfig)
	createMember(t, "wrong-key", managerNamespace, "member-wrong-key", nil)
	waitReachable(t, "wrong-key", metav1.ConditionFalse, ReasonKubeconfigInvalid, "spec.kubeconfigSecretRef.key", "has no key kubeconfig")

	putSecret(t, "member-exec", nestv1.DefaultKubeconfigKey, []byte(`apiVersion: v1
kind: Config
current-context: c
contexts: [{name: c, context: {cluster: m, user: u}}]
clusters: [{name: m, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true}}}]
`))
	createMember(t, "exec", managerNamespace, "member-exec", nil)
	waitReachable(t, "exec", metav1.ConditionFalse, ReasonKubeconfigInvalid, "users[u].exec runs a command")

	putSecret(t, "member-denied", nestv1.DefaultKubeconfigKey, deniedKubeconfig)
	createMember(t, "denied", managerNamespace, "member-denied", nil)
	waitReachable(t, "denied", metav1.ConditionFalse, ReasonAccessDenied, "refused to list Nodes", "get and list on nodes")

	// A failed probe is retried on schedule: once the member grants the
	// user its Nodes, the member is Reachable with nothing changed in the host.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "list-nodes"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "nobody-lists-nodes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "list-nodes"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "nobody"}}}
	for _, obj := range []client.Object{role, binding} {
		if err := member.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = member.Delete(context.Background(), obj) })
	}
	waitReachable(t, "denied", metav1.ConditionTrue, ReasonReachable)
}

// The member is probed again on schedule, with nothing in the host changed.
func TestPeriodicProbeSeesMemberChanges(t *testing.T) {
	memberNodes(t)
	putSecret(t, "member-periodic", nestv1.DefaultKubeconfigKey, memberKubeconfig)
	createMember(t, "periodic", managerNamespace, "member-periodic", nil)
	waitReachable(t, "periodic", metav1.ConditionTrue, ReasonReachable, "1 Ready and schedulable")

	createMemberNode(t, "cpu-late", false, true, res("cpu", "8", "memory", "16Gi"), res("cpu", "8", "memory", "16Gi"))
	t.Cleanup(func() {
		_ = member.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cpu-late"}})
	})
	mc := waitReachable(t, "periodic", metav1.ConditionTrue, ReasonReachable, "2 Ready and schedulable")
	checkResources(t, "allocatable", mc.Status.Allocatable, res("cpu", "11800m", "memory", "23Gi", "nvidia.com/gpu", "2", "pods", "110"))
	if mc.Status.Nodes != 2 {
		t.Errorf("status.nodes = %d, want 2", mc.Status.Nodes)
	}
}

func TestAPIValidation(t *testing.T) {
	ctx := context.Background()
	valid := func() nestv1.MemberClusterSpec {
		return nestv1.MemberClusterSpec{
			KubeconfigSecretRef: nestv1.SecretKeyRef{Namespace: "nest-system", Name: "nest-member-gpu"},
			Network:             nestv1.MemberNetwork{APIServerAddress: "10.20.0.5:6443", DNSAddress: "10.20.0.10"},
		}
	}
	dryRun := func(spec nestv1.MemberClusterSpec) (*nestv1.MemberCluster, error) {
		mc := &nestv1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "validation"}, Spec: spec}
		return mc, host.Create(ctx, mc, client.DryRunAll)
	}
	mc, err := dryRun(valid())
	if err != nil {
		t.Fatalf("a valid MemberCluster: %v", err)
	}
	if mc.Spec.KubeconfigSecretRef.Key != nestv1.DefaultKubeconfigKey {
		t.Errorf("kubeconfigSecretRef.key defaults to %q, want kubeconfig", mc.Spec.KubeconfigSecretRef.Key)
	}
	for _, good := range []func(*nestv1.MemberClusterSpec){
		func(s *nestv1.MemberClusterSpec) { s.Network.APIServerAddress = "[2001:db8::5]:443" },
		func(s *nestv1.MemberClusterSpec) { s.Network.APIServerAddress = "lb.gpu.example:65535" },
		func(s *nestv1.MemberClusterSpec) { s.Network.DNSAddress = "10.20.0.10:53" },
		func(s *nestv1.MemberClusterSpec) { s.Network.DNSAddress = "2001:db8::a" },
		func(s *nestv1.MemberClusterSpec) { s.Network.DNSAddress = "dns.gpu.example:5353" },
		func(s *nestv1.MemberClusterSpec) { s.VirtualClusterSelector = &metav1.LabelSelector{} },
		func(s *nestv1.MemberClusterSpec) {
			s.VirtualClusterSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpExists}}}
		},
		func(s *nestv1.MemberClusterSpec) {
			s.Resources = res("cpu", "0", "nvidia.com/gpu", "8", "memory", "1Ti")
		},
		// No address: tenants are reached through their host LoadBalancers.
		func(s *nestv1.MemberClusterSpec) { s.Network = nestv1.MemberNetwork{} },
		func(s *nestv1.MemberClusterSpec) { s.Network.DNSAddress = "" },
	} {
		spec := valid()
		good(&spec)
		if _, err := dryRun(spec); err != nil {
			t.Errorf("spec %+v: %v", spec, err)
		}
	}
	for _, tt := range []struct {
		edit func(*nestv1.MemberClusterSpec)
		want string
	}{
		{func(s *nestv1.MemberClusterSpec) { s.KubeconfigSecretRef.Namespace = "" }, "spec.kubeconfigSecretRef.namespace"},
		{func(s *nestv1.MemberClusterSpec) { s.KubeconfigSecretRef.Namespace = "Nest_System" }, "kubeconfigSecretRef.namespace must be a namespace name"},
		{func(s *nestv1.MemberClusterSpec) { s.KubeconfigSecretRef.Name = "" }, "spec.kubeconfigSecretRef.name"},
		{func(s *nestv1.MemberClusterSpec) { s.KubeconfigSecretRef.Name = "-member" }, "kubeconfigSecretRef.name must be a Secret name"},
		{func(s *nestv1.MemberClusterSpec) { s.KubeconfigSecretRef.Key = "a/b" }, "kubeconfigSecretRef.key must be a Secret data key"},
		{func(s *nestv1.MemberClusterSpec) { s.Network.APIServerAddress = "10.20.0.5" }, "network.apiServerAddress must be host:port"},
		{func(s *nestv1.MemberClusterSpec) { s.Network.APIServerAddress = "https://10.20.0.5:6443" }, "network.apiServerAddress must be host:port"},
		{func(s *nestv1.MemberClusterSpec) { s.Network.APIServerAddress = "10.20.0.5:0" }, "network.apiServerAddress: the port must be 1 to 65535"},
		{func(s *nestv1.MemberClusterSpec) { s.Network.APIServerAddress = "10.20.0.5:70000" }, "network.apiServerAddress: the port must be 1 to 65535"},
		{func(s *nestv1.MemberClusterSpec) { s.Network.APIServerAddress = "[2001:db8::zz]:6443" }, "network.apiServerAddress must be host:port"},
		{func(s *nestv1.MemberClusterSpec) { s.Network.APIServerAddress = "[10.20.0.5:6443]:6443" }, "network.apiServerAddress: an IPv6 host"},
		{func(s *nestv1.MemberClusterSpec) { s.Network.DNSAddress = "dns.gpu.example" }, "network.dnsAddress must be an IP address or host:port"},
		{func(s *nestv1.MemberClusterSpec) { s.Network.DNSAddress = "10.20.0.10:99999" }, "network.dnsAddress: the port must be 1 to 65535"},
		{func(s *nestv1.MemberClusterSpec) { s.Network.NodePortAddress = "lb.host.example" }, "network.nodePortAddress must be an IP address"},
		{func(s *nestv1.MemberClusterSpec) { s.Resources = res("cpu", "-1") }, "resources: every quantity must be zero or more"},
		{func(s *nestv1.MemberClusterSpec) { s.Resources = res("nvidia.com/gpu", "8", "memory", "-1Gi") }, "resources: every quantity must be zero or more"},
		{func(s *nestv1.MemberClusterSpec) {
			s.VirtualClusterSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Matches"}}}
		}, "virtualClusterSelector.matchExpressions[].operator must be In, NotIn, Exists or DoesNotExist"},
		{func(s *nestv1.MemberClusterSpec) {
			s.VirtualClusterSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpIn}}}
		}, "virtualClusterSelector.matchExpressions[].values must not be empty for In and NotIn"},
		{func(s *nestv1.MemberClusterSpec) {
			s.VirtualClusterSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpExists, Values: []string{"a"}}}}
		}, "virtualClusterSelector.matchExpressions[].values must be empty for Exists and DoesNotExist"},
	} {
		spec := valid()
		tt.edit(&spec)
		if _, err := dryRun(spec); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("spec %+v: error %v, want Invalid saying %q", spec, err, tt.want)
		}
	}
}
