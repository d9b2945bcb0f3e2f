package isolation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/kinds/networkpolicy"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// Network policies: a tenant's own NetworkPolicies work as a user expects
// among its pods, and none of them opens what Nest's isolation closes.
func (e *env) networkPolicies() []testCase {
	return []testCase{
		{"tenant-default-deny-blocks-and-an-allow-policy-opens-again", e.defaultDenyThenAllow},
		{"tenant-policy-cannot-widen-egress-to-the-host-or-another-tenant", e.policyCannotWidenEgress},
		{"tenant-policy-cannot-widen-ingress-from-another-tenant", e.policyCannotWidenIngress},
		{"tenant-policy-from-every-address-admits-the-tenants-own-pods", e.fromAnywhereAdmitsOwnPods},
		{"tenant-policy-from-anyone-admits-the-tenants-own-pods", e.fromAnyoneAdmitsOwnPods},
		{"tenant-policy-cuts-a-connection-it-forbids-opened-before-it", e.policyCutsOpenConnection},
		{"tenant-policy-from-one-pods-address-admits-that-pod-only", e.fromOnePodsAddress},
	}
}

// namespaceWithPods makes a namespace in the tenant, waits for its default
// service account, and starts testapp server pods of the given names
// (label app=<name>); it returns their pod IPs.
func (e *env) namespaceWithPods(t *testing.T, tn *framework.Tenant, ns string, names ...string) map[string]string {
	t.Helper()
	return e.namespaceWithPodsLike(t, tn, ns, func(*corev1.Pod) {}, names...)
}

// withoutToken makes a pod mount no service account token, so its
// namespace takes no host copy of kube-root-ca.crt from alpha's small
// ConfigMap budget, which the other cases' namespaces share.
func withoutToken(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = ptr.To(false) }

// namespaceWithPodsLike is namespaceWithPods with mutate applied to each
// pod before it is created.
func (e *env) namespaceWithPodsLike(t *testing.T, tn *framework.Tenant, ns string, mutate func(*corev1.Pod), names ...string) map[string]string {
	t.Helper()
	cs := tn.Clientset(t)
	if _, err := cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The tenant API server refuses pods until the namespace's default
	// service account exists.
	testutil.Eventually(t, time.Minute, "the default service account of "+ns, func() error {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(e.ctx, "default", metav1.GetOptions{})
		return err
	})
	ips := map[string]string{}
	for _, name := range names {
		p := testPod(name, mutate)
		p.Namespace = ns
		e.create(t, tn, p)
	}
	for _, name := range names {
		ips[name] = e.waitRunning(t, tn, ns, name).Status.PodIP
	}
	return ips
}

func (e *env) applyPolicy(t *testing.T, tn *framework.Tenant, p *networkingv1.NetworkPolicy) {
	t.Helper()
	if _, err := tn.Clientset(t).NetworkingV1().NetworkPolicies(p.Namespace).Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// admitToServer is the policy name in namespace ns that isolates the pods
// labelled app=server for ingress and admits only what rule allows.
func admitToServer(name, ns string, rule networkingv1.NetworkPolicyIngressRule) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{rule},
		},
	}
}

// fromApp is an ingress rule admitting the pods labelled app=<app> of the
// policy's namespace.
func fromApp(app string) networkingv1.NetworkPolicyIngressRule {
	return networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{
		{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}}
}

// dialFrom opens a TCP connection from a tenant pod, returning the error.
func (e *env) dialFrom(tn *framework.Tenant, ns, pod, addr string) error {
	_, err := tn.KubectlErr(e.ctx, "exec", "-n", ns, pod, "--", "/testapp", "dial", addr)
	return err
}

// blockedFrom asserts a tenant pod cannot open a TCP connection to addr,
// and that the failure is the network's.
func (e *env) blockedFrom(t *testing.T, tn *framework.Tenant, ns, pod, addr string) {
	t.Helper()
	err := e.dialFrom(tn, ns, pod, addr)
	if err == nil {
		t.Errorf("%s/%s connected to %s", ns, pod, addr)
		return
	}
	if !strings.Contains(err.Error(), "timeout") && !strings.Contains(err.Error(), "refused") && !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("dial %s from %s/%s failed, but not in the network: %v", addr, ns, pod, err)
	}
}

// defaultDenyThenAllow: two pods of alpha talk; a default-deny ingress
// policy in their namespace stops it; a policy that admits the client by
// its label opens it again; the client is still refused by a third pod the
// allow policy does not cover. Real connections throughout.
func (e *env) defaultDenyThenAllow(t *testing.T) {
	const ns = "np-deny"
	ips := e.namespaceWithPods(t, e.alpha, ns, "server", "client", "bystander")
	server, bystander := hostPort(ips["server"], 8080), hostPort(ips["bystander"], 8080)
	start := time.Now()
	e.denyIngress(t, ns, server)
	t.Logf("default deny enforced %v after the policy was created", time.Since(start).Round(time.Millisecond))
	e.blockedFrom(t, e.alpha, ns, "client", bystander)

	start = time.Now()
	e.applyPolicy(t, e.alpha, admitToServer("allow-client", ns, fromApp("client")))
	testutil.Eventually(t, time.Minute, "the allow policy enforced", func() error {
		return e.dialFrom(e.alpha, ns, "client", server)
	})
	t.Logf("allow policy enforced %v after it was created", time.Since(start).Round(time.Millisecond))
	e.blockedFrom(t, e.alpha, ns, "client", bystander)
	e.blockedFrom(t, e.alpha, ns, "bystander", server)
}

// policyCannotWidenEgress: an alpha pod whose own policy allows egress to
// everywhere, every namespace and every pod still cannot reach the host API
// server, a host kubelet or beta's pods, and the tenant is told what was
// cut from its policy.
func (e *env) policyCannotWidenEgress(t *testing.T) {
	const ns = "np-egress"
	e.namespaceWithPods(t, e.alpha, ns, "wide")
	e.applyPolicy(t, e.alpha, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "allow-everything", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}},
				{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}},
				{},
			},
		},
	})
	testutil.Eventually(t, time.Minute, "a NetworkPolicyCut event", func() error {
		if ev := e.tenantEvents(t, e.alpha, ns, "allow-everything"); !strings.Contains(ev, networkpolicy.ReasonCut+": spec.egress[0].to[0].ipBlock 0.0.0.0/0") {
			return fmt.Errorf("events: %s", ev)
		}
		return nil
	})
	// The policy is in force: the pod still reaches its own API server,
	// which the base policy always allows, and the copy exists. Polled: the
	// node agent cuts the pod's tracked connections 2 s and 10 s after the
	// policy (docs/isolation.md), and a call through the Service caught by
	// a cut loses its reply's address translation and times out.
	testutil.Eventually(t, time.Minute, "the pod reaches its own API server", func() error {
		out, err := e.alpha.KubectlErr(e.ctx, "exec", "-n", ns, "wide", "--", "/testapp", "kube", "/version")
		if err != nil || !strings.Contains(out, "gitVersion") {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	for _, addr := range []string{e.hostAPIServer, hostPort(e.nodeIPs[0], 6443), hostPort(e.nodeIPs[0], 10250), hostPort(e.betaTargets.webPod, 8080), hostPort(e.betaTargets.webService, 8080), hostPort(e.betaTargets.controlPlanePod, 2379)} {
		e.blockedFrom(t, e.alpha, ns, "wide", addr)
	}
}

// policyCannotWidenIngress: alpha admits every address, namespace and pod
// to its pod; beta's pod still cannot reach it.
func (e *env) policyCannotWidenIngress(t *testing.T) {
	const ns = "np-ingress"
	ips := e.namespaceWithPods(t, e.alpha, ns, "open")
	e.applyPolicy(t, e.alpha, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "admit-everyone", Namespace: ns},
		Spec: networkingv1.NetworkPolicySpec{
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}, {NamespaceSelector: &metav1.LabelSelector{}}}},
				{},
			},
		},
	})
	testutil.Eventually(t, time.Minute, "the policy's host copy", func() error {
		if ev := e.tenantEvents(t, e.alpha, ns, "admit-everyone"); !strings.Contains(ev, networkpolicy.ReasonCut) {
			return fmt.Errorf("events: %s", ev)
		}
		return nil
	})
	// The control: alpha's own prober, in another namespace, gets in.
	testutil.Eventually(t, time.Minute, "alpha's prober reaches the open pod", func() error {
		_, err := exec(e.ctx, e.alpha, "prober", "dial", hostPort(ips["open"], 8080))
		return err
	})
	_, err := e.beta.KubectlErr(e.ctx, "exec", "web", "--", "/testapp", "dial", hostPort(ips["open"], 8080))
	if err == nil {
		t.Errorf("beta's pod reached alpha's pod through alpha's policy")
	}
}

// fromAnywhereAdmitsOwnPods: a policy admitting ipBlock 0.0.0.0/0 to a pod
// admits the tenant's own pods too, as users and every enforcer read
// "anywhere", though their addresses lie in the host's pod range, which
// the ipBlock itself is cut from; the tenant is told so.
func (e *env) fromAnywhereAdmitsOwnPods(t *testing.T) {
	const ns = "np-anywhere"
	e.ownPodsAdmittedBy(t, ns, networkingv1.NetworkPolicyIngressRule{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}}})
	testutil.Eventually(t, time.Minute, "a NetworkPolicyCut event naming the tenant's pods", func() error {
		if ev := e.tenantEvents(t, e.alpha, ns, "allow-server"); !strings.Contains(ev, networkpolicy.ReasonCut+": spec.ingress[0].from[0].ipBlock 0.0.0.0/0: matches all the tenant's own pods") {
			return fmt.Errorf("events: %s", ev)
		}
		return nil
	})
}

// fromAnyoneAdmitsOwnPods: a rule without peers (ingress: [{}]) admits
// the tenant's own pods, in its namespace and in others.
func (e *env) fromAnyoneAdmitsOwnPods(t *testing.T) {
	e.ownPodsAdmittedBy(t, "np-anyone", networkingv1.NetworkPolicyIngressRule{})
}

// ownPodsAdmittedBy starts a server and a client pod of alpha in a new
// namespace ns, isolates the server with a default-deny ingress policy,
// then admits with the policy allow-server, whose only rule is allow, and
// checks that the client and alpha's prober in namespace default reach the
// server again, and beta's pod still does not. The default deny comes
// first so that a connection after allow-server proves allow-server: until
// the enforcer applies it the server is open, and a dial then would pass
// whatever the rule means.
func (e *env) ownPodsAdmittedBy(t *testing.T, ns string, allow networkingv1.NetworkPolicyIngressRule) {
	t.Helper()
	ips := e.namespaceWithPodsLike(t, e.alpha, ns, withoutToken, "server", "client")
	server := hostPort(ips["server"], 8080)
	e.denyIngress(t, ns, server)
	e.applyPolicy(t, e.alpha, admitToServer("allow-server", ns, allow))
	testutil.Eventually(t, time.Minute, "the client in the server's namespace admitted", func() error {
		return e.dialFrom(e.alpha, ns, "client", server)
	})
	testutil.Eventually(t, time.Minute, "alpha's prober in namespace default admitted", func() error {
		_, err := exec(e.ctx, e.alpha, "prober", "dial", server)
		return err
	})
	if _, err := e.beta.KubectlErr(e.ctx, "exec", "web", "--", "/testapp", "dial", server); err == nil {
		t.Errorf("beta's pod reached alpha's pod through alpha's policy")
	}
}

// denyIngress checks that alpha's client pod in ns reaches server, applies a
// default-deny ingress policy in ns and waits until the client no longer
// does.
func (e *env) denyIngress(t *testing.T, ns, server string) {
	t.Helper()
	if err := e.dialFrom(e.alpha, ns, "client", server); err != nil {
		t.Fatalf("before any policy the client cannot reach the server: %v", err)
	}
	e.applyPolicy(t, e.alpha, &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "default-deny", Namespace: ns},
		Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
	})
	testutil.Eventually(t, time.Minute, "default deny enforced", func() error {
		if err := e.dialFrom(e.alpha, ns, "client", server); err == nil {
			return fmt.Errorf("the client still connects")
		}
		return nil
	})
}

// policyCutsOpenConnection: two alpha pods hold one connection each to a
// server, opened before any policy; a policy admitting only one of them
// ends the other's connection (the node network agent's conntrack cut,
// for enforcers that judge a connection's first packet only), while the
// admitted one goes on over the same connection.
func (e *env) policyCutsOpenConnection(t *testing.T) {
	const ns = "np-cut"
	ips := e.namespaceWithPodsLike(t, e.alpha, ns, withoutToken, "server")
	server := hostPort(ips["server"], 8080)
	for _, name := range []string{"held-denied", "held-admitted"} {
		p := testPod(name, withoutToken)
		p.Namespace = ns
		p.Spec.Containers[0].Command = []string{"/testapp", "hold", server}
		e.create(t, e.alpha, p)
	}
	for _, name := range []string{"held-denied", "held-admitted"} {
		e.waitRunning(t, e.alpha, ns, name)
		testutil.Eventually(t, time.Minute, name+" using its connection", func() error {
			if n := e.heldAnswers(t, ns, name); n < 3 {
				return fmt.Errorf("%d answers", n)
			}
			return nil
		})
	}
	start := time.Now()
	e.applyPolicy(t, e.alpha, admitToServer("admit-one", ns, fromApp("held-admitted")))
	testutil.Eventually(t, time.Minute, "held-denied's connection cut", func() error {
		if log := e.alpha.Kubectl(t, e.ctx, "logs", "-n", ns, "held-denied"); !strings.Contains(log, "cut after") {
			return fmt.Errorf("still answered: %d answers", e.heldAnswers(t, ns, "held-denied"))
		}
		return nil
	})
	t.Logf("an open connection the new policy forbids was cut %v after the policy was created", time.Since(start).Round(time.Millisecond))
	// The admitted connection outlives every cut of the series (the last
	// DefaultCutAgain after the first): 12 s of answers after the denied
	// one ended.
	from := e.heldAnswers(t, ns, "held-admitted")
	testutil.Eventually(t, time.Minute, "held-admitted answered 48 more times over its connection", func() error {
		log := e.alpha.Kubectl(t, e.ctx, "logs", "-n", ns, "held-admitted")
		if strings.Contains(log, "cut after") {
			t.Fatalf("the admitted pod's connection was cut too:\n%s", framework.LastLines(log, 5))
		}
		if n := strings.Count(log, "\nok "); n < from+48 {
			return fmt.Errorf("%d answers, want %d", n, from+48)
		}
		return nil
	})
}

// heldAnswers counts the answers a testapp hold pod logged.
func (e *env) heldAnswers(t *testing.T, ns, pod string) int {
	t.Helper()
	out, _ := e.alpha.KubectlErr(e.ctx, "logs", "-n", ns, pod)
	return strings.Count(out, "\nok ")
}

// fromOnePodsAddress: after a default deny, a policy admitting ipBlock
// <client's address>/32 lets the client in and not another pod of the same
// namespace, as enforcers that see pod addresses read it (the syncer marks
// the host pod whose address the block holds).
func (e *env) fromOnePodsAddress(t *testing.T) {
	const ns = "np-by-address"
	ips := e.namespaceWithPodsLike(t, e.alpha, ns, withoutToken, "server", "client", "other")
	server := hostPort(ips["server"], 8080)
	e.denyIngress(t, ns, server)
	e.applyPolicy(t, e.alpha, admitToServer("admit-client-address", ns, networkingv1.NetworkPolicyIngressRule{
		From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: ips["client"] + "/32"}}},
	}))
	testutil.Eventually(t, time.Minute, "the client admitted by its address", func() error {
		return e.dialFrom(e.alpha, ns, "client", server)
	})
	e.blockedFrom(t, e.alpha, ns, "other", server)
}
