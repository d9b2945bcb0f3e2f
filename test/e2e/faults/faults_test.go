package faults

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/internal/vcops"
	"github.com/nestdev/nest/test/e2e/framework"
)

// env is what every case shares: the local host cluster with Nest.
type env struct {
	ctx     context.Context
	host    client.Client
	hostCfg *rest.Config
	nest    framework.Nest
	// hostKubeconfig is the host's admin kubeconfig file, for nestCtx.
	hostKubeconfig string
	stateDir       string
	layout         devcluster.Layout
	dir            string
}

// fault is one case: inject makes the fault happen while the workload
// churns, and returns once it is over (the killed part restarted, the
// refusal lifted).
type fault struct {
	name   string
	inject func(t *testing.T, e *env, tn *framework.Tenant, w *workload)
	// create are further `nest create` flags of the case's tenant.
	create []string
}

// TestHostFaults stops, one after another, parts of the host that every
// tenant shares (nest-manager, the host API server, a node), each against a
// virtual cluster of its own on a host cluster of this test's own.
func TestHostFaults(t *testing.T) {
	framework.RequireRoot(t)
	t.Parallel()
	e := startEnv(t)
	// Each case's tenant is created only after the case before it ended: a
	// creation under way would live through, and share, the host fault.
	e.runAll(t, "host", false, []fault{
		{name: "kill nest-manager", inject: killManager},
		{name: "stop the host kube-apiserver for 20s", inject: stopHostAPIServer},
		// Against three replicas reached through their LoadBalancer
		// address, as a platform runs a tenant that must survive a node.
		{name: "restart a host node's kubelet and containerd", inject: restartNode, create: []string{"--replicas", "3", "--service-type", "LoadBalancer"}},
	})
}

// TestTenantFaults injects faults that touch one tenant only, each against
// a virtual cluster of its own, one after another on a host cluster of this
// test's own (side by side with TestHostFaults). Several at once on one
// host were tried: each starts 20 pods and churns 200 objects, and on two
// cores they starved each other's pod starts and churn past their
// deadlines. What does overlap is the next case's tenant creation, mostly
// a wait for its control-plane pod, with the current case's fault: these
// faults touch their own tenant only.
func TestTenantFaults(t *testing.T) {
	framework.RequireRoot(t)
	t.Parallel()
	e := startEnv(t)
	e.runAll(t, "fault", true, []fault{
		{name: "kill nest-syncer", inject: killControlPlaneContainer(syncerContainer)},
		{name: "kill the tenant kube-apiserver", inject: killControlPlaneContainer("kube-apiserver")},
		{name: "kill the tenant etcd", inject: killControlPlaneContainer("etcd")},
		{name: "delete the control-plane pod", inject: deleteControlPlanePod},
		{name: "the host refuses the syncer's writes for 30s", inject: refuseSyncerWrites},
		{name: "fill the tenant's quota and free it", inject: fillQuota},
		{name: "delete the host copies from outside", inject: deleteHostCopies},
	})
}

// runAll runs the cases one after another, each against a tenant of its
// own named prefix and its index. With ahead, the next case's tenant is
// created in the background while the current case injects its fault;
// otherwise once the current case has ended. A case deletes its tenant
// without waiting, and runAll checks at the end that every one is gone.
func (e *env) runAll(t *testing.T, prefix string, ahead bool, faults []fault) {
	names := make([]string, len(faults))
	for i := range faults {
		names[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	t.Cleanup(func() { e.waitTenantsGone(t, names) })
	next := e.startCreate(t, names[0], faults[0].create...)
	for i, f := range faults {
		current := next
		prepareNext := func() {
			if i+1 < len(faults) && next == current {
				next = e.startCreate(t, names[i+1], faults[i+1].create...)
			}
		}
		beforeFault := func() {}
		if ahead {
			beforeFault = prepareNext
		}
		t.Run(f.name, func(t *testing.T) { e.run(t, current, f, beforeFault) })
		// A case that failed before its fault has not started the next
		// creation.
		prepareNext()
	}
}

// startEnv starts a local host cluster with Nest for one test; it and its
// tenants are gone when the test ends.
func startEnv(t *testing.T) *env {
	t.Helper()
	cluster := framework.LeaseCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	t.Cleanup(cancel)
	stateDir := framework.StartHostCluster(t, ctx, cluster, "--with-nest")
	host, hostKubeconfig, nest := framework.NestOn(t, ctx, stateDir)
	cfg, err := clientcmd.BuildConfigFromFlags("", hostKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return &env{ctx: ctx, host: host, hostCfg: cfg, nest: nest, hostKubeconfig: hostKubeconfig, stateDir: stateDir, layout: devcluster.Layout{Root: stateDir}, dir: t.TempDir()}
}

// nestCtx runs the nest CLI against the host, as e.nest does, until ctx
// ends.
func (e *env) nestCtx(ctx context.Context, t *testing.T, args ...string) (string, error) {
	return framework.Run(ctx, t, "nest", append(args, "--kubeconfig", e.hostKubeconfig)...)
}

// syncerContainer is the nest-syncer container of the control-plane pod.
const syncerContainer = "nest-syncer"

// run runs one case against the tenant creation c; beforeFault is called
// once the churn is under way, just before the fault.
func (e *env) run(t *testing.T, c *creation, f fault, beforeFault func()) {
	phases := framework.NewPhases()
	tn := c.tenant(t, e)
	phases.Done("tenant ready")
	w := newWorkload(t, tn)
	w.create(t, e.ctx)
	e.waitAgree(t, w, "before the fault")
	phases.Done("workload created and synced")

	churnCtx, stop := context.WithCancel(e.ctx)
	done := w.churn(churnCtx)
	defer func() { stop(); <-done }()
	e.waitSucceeded(t, w, 100, "the churn under way")
	beforeFault()
	phases.Done("churn under way")
	f.inject(t, e, tn, w)
	phases.Done("fault injected and over")
	// The churn goes on until the tenant takes writes again, so changes
	// made just after the fault are in the comparison too.
	e.waitSucceeded(t, w, 100, "the tenant taking writes after the fault")
	stop()
	<-done
	phases.Done("tenant taking writes again")
	w.complete(t, e.ctx)
	converged, tenantCount, hostCount := e.waitAgree(t, w, "after the fault")
	if want := podSlots + 3*perKind; tenantCount != want {
		t.Errorf("the tenant holds %d workload objects, want %d", tenantCount, want)
	}
	w.survived(t, e.ctx)
	phases.Done("host and tenant agree")
	t.Logf("FAULT %q: host and tenant agree %.1fs after the churn stopped; %d tenant objects, %d host objects; churn made %d calls, %d failed (%s); %s",
		f.name, converged.Seconds(), tenantCount, hostCount, w.ops.Load(), w.failures.Load(), w.failedCalls(), phases)
}

// creation is one case's `nest create --wait`, run in the background so
// it can overlap the case before.
type creation struct {
	name string
	done chan struct{}
	out  string
	err  error
}

// startCreate starts creating the virtual cluster name. The test waits for
// the creation before it ends, cutting it short then.
func (e *env) startCreate(t *testing.T, name string, flags ...string) *creation {
	ctx, cancel := context.WithCancel(e.ctx)
	c := &creation{name: name, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.out, c.err = e.nestCtx(ctx, t, append([]string{"create", name, "--cpu", "2", "--memory", "4Gi", "--pods", "30", "--wait"}, flags...)...)
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

// tenant waits for the creation, failing the case with its error, and
// returns the tenant with its kubeconfig loaded. The case deletes it
// without waiting when it ends; runAll checks that it is gone.
func (c *creation) tenant(t *testing.T, e *env) *framework.Tenant {
	t.Helper()
	select {
	case <-c.done:
	case <-e.ctx.Done():
		t.Fatalf("create %s: %v", c.name, e.ctx.Err())
	}
	if c.err != nil {
		t.Fatalf("create %s: %v\n%s", c.name, c.err, c.out)
	}
	t.Cleanup(func() {
		if out, err := e.nest("delete", c.name); err != nil {
			t.Errorf("delete %s: %v\n%s", c.name, err, out)
		}
	})
	tn := &framework.Tenant{Name: c.name, Dir: e.dir}
	tn.Load(t, e.nest)
	tn.WaitDefaultServiceAccount(t, e.ctx)
	return tn
}

// waitTenantsGone checks that the virtual clusters names, deleted by their
// cases, are gone (their host objects with them: the VirtualCluster's
// finalizer waits for those), and then deletes their namespaces as `nest
// delete --wait` would.
func (e *env) waitTenantsGone(t *testing.T, names []string) {
	t.Helper()
	testutil.Eventually(t, 5*time.Minute, "every case's virtual cluster gone", func() error {
		for _, name := range names {
			err := e.host.Get(e.ctx, types.NamespacedName{Namespace: "vc-" + name, Name: name}, &nestv1.VirtualCluster{})
			if err == nil {
				return fmt.Errorf("%s is still there", name)
			}
			if !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	})
	for _, name := range names {
		if err := vcops.DeleteOwnNamespace(e.ctx, e.host, "vc-"+name); err != nil {
			t.Errorf("delete namespace vc-%s: %v", name, err)
		}
	}
}

// waitAgree polls until the host and the tenant agree, and fails the test
// with the last difference after four minutes. It returns how long that
// took and the object counts of the agreeing comparison.
func (e *env) waitAgree(t *testing.T, w *workload, when string) (took time.Duration, tenantCount, hostCount int) {
	t.Helper()
	var last error
	start, logged := time.Now(), time.Now()
	err := wait.PollUntilContextTimeout(e.ctx, 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		tenantCount, hostCount, last = w.agreement(ctx, e.host)
		if last != nil && time.Since(logged) > 5*time.Second {
			first, _, _ := strings.Cut(last.Error(), "\n")
			t.Logf("%s, at %.0fs: still differ, first: %s", when, time.Since(start).Seconds(), first)
			logged = time.Now()
		}
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s the host and the tenant do not agree: %v", when, last)
	}
	return time.Since(start), tenantCount, hostCount
}

// waitSucceeded waits until n more churn calls succeeded.
func (e *env) waitSucceeded(t *testing.T, w *workload, n int64, what string) {
	t.Helper()
	from := w.ops.Load() - w.failures.Load()
	testutil.Eventually(t, 3*time.Minute, what, func() error {
		if done := w.ops.Load() - w.failures.Load() - from; done < n {
			return fmt.Errorf("%d of %d calls succeeded", done, n)
		}
		return nil
	})
}

func namesOf(tn *framework.Tenant) controlplane.Names {
	return controlplane.NamesOf(&nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: tn.Name, Namespace: tn.Namespace}})
}

// killControlPlaneContainer kills one container of the tenant's
// control-plane pod through its node's CRI and waits until the kubelet has
// restarted it and it is ready.
func killControlPlaneContainer(container string) func(*testing.T, *env, *framework.Tenant, *workload) {
	return func(t *testing.T, e *env, tn *framework.Tenant, _ *workload) {
		framework.KillContainer(t, e.ctx, e.host, e.stateDir, types.NamespacedName{Namespace: tn.Namespace, Name: namesOf(tn).ControlPlanePod()}, container)
	}
}

func killManager(t *testing.T, e *env, _ *framework.Tenant, _ *workload) {
	framework.KillContainer(t, e.ctx, e.host, e.stateDir, framework.ManagerPod(t, e.ctx, e.host), "manager")
}

// stopHostAPIServer kills the host kube-apiserver, keeps it down for 20 s,
// and starts it again with `nest dev up`.
func stopHostAPIServer(t *testing.T, e *env, _ *framework.Tenant, _ *workload) {
	e.killRecorded(t, "kube-apiserver")
	select {
	case <-time.After(20 * time.Second):
	case <-e.ctx.Done():
		t.Fatal(e.ctx.Err())
	}
	e.up(t)
}

// restartNode kills the kubelet and containerd of the node that announces
// the tenant's LoadBalancer address and runs one of its replicas and
// workload pods too (placed there by cordoning the other nodes for a moment
// when the host scheduler put none there); and starts those two again and
// nothing else (devcluster.RestartNodeRuntime), as a node's runtime restarting
// does. Containers outlive containerd: their shims keep them.
func restartNode(t *testing.T, e *env, tn *framework.Tenant, _ *workload) {
	node := tn.AnnouncingNode(t, e.ctx, e.host)
	runsWorkload := func() error {
		if !slices.ContainsFunc(tn.HostPods(t, e.ctx, e.host), func(p corev1.Pod) bool {
			return p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning
		}) {
			return fmt.Errorf("%s runs no workload pod of %s", node, tn.Name)
		}
		return nil
	}
	if runsWorkload() != nil {
		// The host scheduler may place every workload pod on the other
		// node. The churn replaces one a second, so with that node
		// cordoned the next ones land here.
		uncordon := framework.CordonOthers(t, e.ctx, e.hostKubeconfig, e.host, node)
		testutil.Eventually(t, time.Minute, node+" running a workload pod", runsWorkload)
		uncordon()
	}
	e.killRecorded(t, node+".kubelet", node+".containerd")
	if err := devcluster.RestartNodeRuntime(e.ctx, e.stateDir, node); err != nil {
		t.Fatal(err)
	}
}

func (e *env) killRecorded(t *testing.T, names ...string) {
	t.Helper()
	framework.KillRecorded(t, e.stateDir, names...)
}

func (e *env) up(t *testing.T) {
	t.Helper()
	framework.StartAgain(t, e.ctx, e.stateDir, 2)
}

// deleteControlPlanePod deletes the control-plane pod and waits until its
// StatefulSet's new pod is ready.
func deleteControlPlanePod(t *testing.T, e *env, tn *framework.Tenant, _ *workload) {
	key := types.NamespacedName{Namespace: tn.Namespace, Name: namesOf(tn).ControlPlanePod()}
	old := &corev1.Pod{}
	if err := e.host.Get(e.ctx, key, old); err != nil {
		t.Fatal(err)
	}
	if err := e.host.Delete(e.ctx, old); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 3*time.Minute, "a new control-plane pod ready", func() error {
		pod := &corev1.Pod{}
		if err := e.host.Get(e.ctx, key, pod); err != nil {
			return err
		}
		if pod.UID == old.UID {
			return fmt.Errorf("the old pod is still there")
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("not ready")
	})
}

// refuseSyncerWrites makes the host API server refuse every write of the
// tenant's nest-syncer to pods, Services, ConfigMaps and Secrets for 30 s,
// with a ValidatingAdmissionPolicy. It checks, as the syncer's
// ServiceAccount, that the refusal is in force and then lifted.
func refuseSyncerWrites(t *testing.T, e *env, tn *framework.Tenant, _ *workload) {
	sa := namesOf(tn).SyncerServiceAccount()
	user := fmt.Sprintf("system:serviceaccount:%s:%s", tn.Namespace, sa)
	name := "nest-fault-refuse-" + tn.Name
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: tn.Namespace}},
				ResourceRules: []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods", "services", "configmaps", "secrets"}},
				}}},
			},
			MatchConditions: []admissionv1.MatchCondition{{Name: "nest-syncer", Expression: fmt.Sprintf("request.userInfo.username == %q", user)}},
			Validations:     []admissionv1.Validation{{Expression: "false", Message: "fault injected: the host refuses nest-syncer's writes"}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	lift := func() {
		for _, o := range []client.Object{binding, policy} {
			if err := e.host.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("lift the refusal: delete %s: %v", o.GetName(), err)
			}
		}
	}
	t.Cleanup(lift)
	for _, o := range []client.Object{policy, binding} {
		if err := e.host.Create(e.ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	asSyncer := e.impersonate(t, user)
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nest-fault-probe", Namespace: tn.Namespace}}
	testutil.Eventually(t, time.Minute, "the syncer's writes refused", func() error {
		err := asSyncer.Create(e.ctx, probe.DeepCopy(), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), "fault injected") {
			return fmt.Errorf("a dry-run create as %s answered %v", user, err)
		}
		return nil
	})
	select {
	case <-time.After(30 * time.Second):
	case <-e.ctx.Done():
		t.Fatal(e.ctx.Err())
	}
	lift()
	testutil.Eventually(t, time.Minute, "the syncer's writes accepted again", func() error {
		return asSyncer.Create(e.ctx, probe.DeepCopy(), client.DryRunAll)
	})
}

func (e *env) impersonate(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(e.hostCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: kube.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fillQuota creates pods past the tenant's pod share, waits until the
// tenant scheduler leaves one Pending for want of room, and deletes them.
func fillQuota(t *testing.T, e *env, tn *framework.Tenant, w *workload) {
	pods := w.cs.CoreV1().Pods(tenantNS)
	const fillers = 15
	for i := range fillers {
		p := pod(0, 0)
		p.Name, p.Labels = fmt.Sprintf("filler-%02d", i), map[string]string{"filler": "true"}
		p.Spec.Containers[0].EnvFrom = nil
		if _, err := pods.Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create filler %d: %v", i, err)
		}
	}
	testutil.Eventually(t, 2*time.Minute, "a filler Pending with the virtual node full", func() error {
		list, err := pods.List(e.ctx, metav1.ListOptions{LabelSelector: "filler=true"})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					return nil
				}
			}
		}
		return fmt.Errorf("every filler was scheduled")
	})
	if err := pods.DeleteCollection(e.ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{LabelSelector: "filler=true"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 2*time.Minute, "fillers gone", func() error {
		list, err := pods.List(e.ctx, metav1.ListOptions{LabelSelector: "filler=true"})
		if err != nil {
			return err
		}
		if n := len(list.Items); n > 0 {
			return fmt.Errorf("%d fillers left", n)
		}
		return nil
	})
}

// deleteHostCopies deletes, from outside, every host pod, Service,
// ConfigMap and Secret the syncer made for the tenant.
func deleteHostCopies(t *testing.T, e *env, tn *framework.Tenant, _ *workload) {
	mine := []client.ListOption{client.InNamespace(tn.Namespace), client.MatchingLabels{contract.LabelTenantOf: tn.Name}}
	var copies []client.Object
	for _, list := range []client.ObjectList{&corev1.PodList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{}, &corev1.SecretList{}} {
		if err := e.host.List(e.ctx, list, mine...); err != nil {
			t.Fatal(err)
		}
		items, err := apimeta.ExtractList(list)
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range items {
			copies = append(copies, item.(client.Object))
		}
	}
	// Several deletions at once, as `kubectl delete --all` in a few
	// shells: one after another, 200 of them took a minute under load,
	// all of it churn and syncer catch-up, not the fault.
	var g errgroup.Group
	g.SetLimit(8)
	for _, o := range copies {
		g.Go(func() error {
			if err := e.host.Delete(e.ctx, o, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete %T %s: %w", o, o.GetName(), err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	deleted := len(copies)
	if deleted < podSlots+3*perKind {
		t.Fatalf("deleted %d host copies, want at least %d", deleted, podSlots+3*perKind)
	}
}
