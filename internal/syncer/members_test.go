package syncer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
)

func gpuPlacement() contract.MemberPlacement {
	return contract.MemberPlacement{
		Name: "gpu", Namespace: "nest-alpha-0123456789", Server: "https://127.0.0.1:1", Token: "t1",
		APIServerAddress: "198.51.100.10:31443", DNSAddress: "198.51.100.10", Nodes: 1,
		Allocatable: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("2")},
	}
}

func TestParseMemberPlacementsNamesTheFaultyEntry(t *testing.T) {
	good := gpuPlacement()
	for name, tc := range map[string]struct {
		edit func(*contract.MemberPlacement)
		want string
	}{
		"no name":      {func(m *contract.MemberPlacement) { m.Name = "" }, "members[0].name is empty"},
		"no namespace": {func(m *contract.MemberPlacement) { m.Namespace = "" }, "members[0] (gpu): namespace is empty"},
		"no server":    {func(m *contract.MemberPlacement) { m.Server = "" }, "members[0] (gpu): server is empty"},
		"no token":     {func(m *contract.MemberPlacement) { m.Token = "" }, "members[0] (gpu): token is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			m := good
			tc.edit(&m)
			data, err := contract.MemberPlacements{Members: []contract.MemberPlacement{m}}.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := contract.ParseMemberPlacements(data); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseMemberPlacements = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	twice, _ := contract.MemberPlacements{Members: []contract.MemberPlacement{good, good}}.Marshal()
	if _, err := contract.ParseMemberPlacements(twice); err == nil || !strings.Contains(err.Error(), `"gpu" appears twice`) {
		t.Fatalf("a name twice: %v", err)
	}
}

func TestMemberPlacementsRoundTripSorted(t *testing.T) {
	a, b := gpuPlacement(), gpuPlacement()
	a.Name, b.Name = "zeta", "alpha"
	one, _ := contract.MemberPlacements{Members: []contract.MemberPlacement{a, b}}.Marshal()
	other, _ := contract.MemberPlacements{Members: []contract.MemberPlacement{b, a}}.Marshal()
	if string(one) != string(other) {
		t.Fatalf("the same set marshals differently:\n%s\n%s", one, other)
	}
	p, err := contract.ParseMemberPlacements(one)
	if err != nil || len(p.Members) != 2 || p.Members[0].Name != "alpha" {
		t.Fatalf("ParseMemberPlacements = %+v, %v", p, err)
	}
	if p, err := contract.ParseMemberPlacements(nil); err != nil || len(p.Members) != 0 {
		t.Fatalf("no data = %+v, %v; want no placements", p, err)
	}
}

func TestOnlyAChangedMemberRestartsAMemberSyncer(t *testing.T) {
	was := gpuPlacement()
	changed := was
	changed.Token, changed.TokenExpiry, changed.Nodes = "t2", time.Now(), 0
	changed.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}
	changed.InjectorCert, changed.InjectorKey = []byte("renewed cert"), []byte("renewed key")
	if restartNeeded(was, changed) {
		t.Error("a renewed token or injector certificate, a new node count or a new size restarts the member syncer")
	}
	moved := was
	moved.Namespace = "elsewhere"
	elsewhere := was
	elsewhere.Server = "https://127.0.0.1:2"
	exposed := was
	exposed.NodePortAddress = "10.0.0.11"
	for name, p := range map[string]contract.MemberPlacement{"namespace": moved, "server": elsewhere, "node-port address": exposed} {
		if !restartNeeded(was, p) {
			t.Errorf("a new %s does not restart the member syncer", name)
		}
	}
}

func TestMemberOptionsPointPodsAtTheMember(t *testing.T) {
	host := withTranslator(tr)
	host.Host = &rest.Config{QPS: 5, Burst: 10}
	host.DefaultLimits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	o, err := memberOptions(host, gpuPlacement(), 10251, &memberToken{})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case o.HostNamespace != "nest-alpha-0123456789", o.NodeName != "nest-member-gpu", o.Member != "gpu", o.KubeletPort != 10251:
		t.Errorf("namespace, node, member, port = %s, %s, %s, %d", o.HostNamespace, o.NodeName, o.Member, o.KubeletPort)
	case o.APIServerHost != "198.51.100.10" || o.APIServerPort != 31443 || o.DNSServer != "198.51.100.10":
		t.Errorf("API server %s:%d, DNS %s; want the member's load balancer", o.APIServerHost, o.APIServerPort, o.DNSServer)
	case o.PriorityClassName != "" || o.DefaultLimits != nil || o.HostServiceCIDRs != nil:
		t.Errorf("host-only settings reach the member: %q %v %v", o.PriorityClassName, o.DefaultLimits, o.HostServiceCIDRs)
	case o.Host.Host != "https://127.0.0.1:1" || o.Host.BearerToken != "" || o.Host.WrapTransport == nil:
		t.Errorf("member client %+v: want the member's server and a token source, no fixed token", o.Host)
	}
	if host.HostNamespace != tr.HostNamespace || host.DefaultLimits == nil {
		t.Error("memberOptions changed the host syncer's options")
	}
	bad := gpuPlacement()
	bad.DNSAddress = "198.51.100.10:5353"
	if _, err := memberOptions(host, bad, 10251, &memberToken{}); err == nil || !strings.Contains(err.Error(), "dnsAddress") {
		t.Errorf("a DNS port other than 53: %v", err)
	}
	bad = gpuPlacement()
	bad.APIServerAddress = "198.51.100.10"
	if _, err := memberOptions(host, bad, 10251, &memberToken{}); err == nil || !strings.Contains(err.Error(), "apiServerAddress") {
		t.Errorf("an API server address without a port: %v", err)
	}
}

func TestMemberTokenIsReplacedInPlace(t *testing.T) {
	var tok memberToken
	if _, err := tok.Token(); err == nil {
		t.Fatal("an empty token source gives a token")
	}
	tok.set("one")
	tok.set("two")
	if got, err := tok.Token(); err != nil || got.AccessToken != "two" {
		t.Fatalf("Token = %v, %v; want the latest", got, err)
	}
}

func TestMemberReadiness(t *testing.T) {
	p := gpuPlacement()
	if ready, _, _ := memberReadiness(memberFailures-1, p, nil); !ready {
		t.Error("fewer failures than the threshold make the node NotReady")
	}
	if ready, reason, _ := memberReadiness(memberFailures, p, context.DeadlineExceeded); ready || reason != "MemberUnreachable" {
		t.Errorf("an unreachable member: ready=%v reason=%s", ready, reason)
	}
	none := p
	none.Nodes = 0
	if ready, reason, _ := memberReadiness(0, none, nil); ready || reason != "MemberHasNoNodes" {
		t.Errorf("a member without nodes: ready=%v reason=%s", ready, reason)
	}
	reclaimed := p
	reclaimed.Allocatable = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("0"), corev1.ResourceCPU: resource.MustParse("2")}
	if ready, reason, msg := memberReadiness(0, reclaimed, nil); ready || reason != "MemberLostNodes" || !strings.Contains(msg, "nvidia.com/gpu") {
		t.Errorf("a member whose GPU nodes are gone: ready=%v reason=%s message=%q", ready, reason, msg)
	}
}

func TestMemberNodeIsTaintedAndLabelled(t *testing.T) {
	n := MemberNode("gpu", "10.244.1.5", "v1.37.2", 10252, corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")})
	if n.Name != "nest-member-gpu" || n.Labels[contract.MemberTaintKey] != "gpu" || n.Status.DaemonEndpoints.KubeletEndpoint.Port != 10252 {
		t.Errorf("node %s labels %v port %d", n.Name, n.Labels, n.Status.DaemonEndpoints.KubeletEndpoint.Port)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0] != (corev1.Taint{Key: contract.MemberTaintKey, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}) {
		t.Errorf("taints %v", n.Spec.Taints)
	}
	if got := n.Status.Allocatable["nvidia.com/gpu"]; got.Value() != 1 {
		t.Errorf("allocatable %v", n.Status.Allocatable)
	}
}

// gpuPod is a tenant pod bound to the member node asking for gpus GPUs.
func gpuPod(name string, gpus int64) *corev1.Pod {
	p := simplePod(name, "100m")
	p.Spec.NodeName = contract.MemberNodeName("gpu")
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}
	p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = *resource.NewQuantity(gpus, resource.DecimalSI)
	return p
}

// memberSyncer is a member syncer for gpuPlacement over fake tenant and
// member API servers, with its informers started.
func memberSyncer(t *testing.T, tenant, member *fake.Clientset) *syncer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	base := withTranslator(tr)
	base.PodSecurityLevel, base.DNSDir, base.TokenMaxAge, base.Host = "baseline", t.TempDir(), time.Hour, &rest.Config{}
	o, err := memberOptions(base,
		gpuPlacement(), contract.FirstMemberKubeletPort, &memberToken{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSyncerFor(ctx, o, tenant, member)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the DNS directory's TempDir, so a sync under way
	// when the test ends finishes writing before the directory goes.
	t.Cleanup(func() { cancel(); s.waitSyncers() })
	if err := s.startSyncers(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGatekeeperHoldsAPodOverTheGrantOutOfTheMember(t *testing.T) {
	over := gpuPod("over", 2)
	within := gpuPod("within", 1)
	tenant, member := fake.NewClientset(over, within), fake.NewClientset()
	s := memberSyncer(t, tenant, member)
	recorder := record.NewFakeRecorder(10)
	s.provider.recorder = recorder
	notified := &notifications{}
	s.provider.notify = notified.add
	// The tenant, admin of its cluster, advertises more GPUs on the member
	// node than it was granted: only the grant counts.
	advertised := MemberNode("gpu", "", "v1.37.2", contract.FirstMemberKubeletPort, corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("8")})
	if _, err := tenant.CoreV1().Nodes().Create(context.Background(), &advertised, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.provider.CreatePod(context.Background(), over); err != nil {
		t.Fatalf("CreatePod = %v; a held pod is not an error", err)
	}
	if pods, _ := member.CoreV1().Pods("nest-alpha-0123456789").List(context.Background(), metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Fatalf("a pod over the grant reached the member: %v", pods.Items[0].Name)
	}
	// The held syncer may try the pod again meanwhile, and hold it again:
	// every status the tenant is told is the same.
	if got := notified.all(); len(got) == 0 || slices.ContainsFunc(got, func(p *corev1.Pod) bool {
		return p.Status.Phase != corev1.PodPending || p.Status.Reason != ReasonQuotaExceeded || !strings.Contains(p.Status.Message, "nvidia.com/gpu")
	}) {
		t.Fatalf("tenant status %+v; want Pending, QuotaExceeded, naming the resource", got)
	}
	if ev := drainEvents(recorder); !strings.Contains(ev, ReasonQuotaExceeded) {
		t.Errorf("events %q; want a QuotaExceeded warning", ev)
	}
	if !s.provider.gate.isHeld("shop/over") {
		t.Error("the pod is not held for a retry")
	}
	if err := s.provider.CreatePod(context.Background(), within); err != nil {
		t.Fatal(err)
	}
	if _, err := member.CoreV1().Pods("nest-alpha-0123456789").Get(context.Background(), contract.HostName("alpha", "shop", "within"), metav1.GetOptions{}); err != nil {
		t.Fatalf("a pod within the grant is not in the member: %v", err)
	}
}

func TestMemberPlacerStartsRenewsAndStopsMemberSyncers(t *testing.T) {
	data, _ := contract.MemberPlacements{Members: []contract.MemberPlacement{gpuPlacement()}}.Marshal()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: contract.MembersSecret("alpha"), Namespace: tr.HostNamespace}, Data: map[string][]byte{contract.MembersKey: data}}
	node := MemberNode("gpu", "", "v1.37.2", contract.FirstMemberKubeletPort, nil)
	tenant := fake.NewClientset(&node)
	current := secret
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exposure := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: contract.MemberHostService("alpha", "gpu"), Namespace: tr.HostNamespace}}
	host := fake.NewClientset(exposure)
	dnsDir := t.TempDir()
	m := &memberPlacer{parent: &syncer{o: hostOptions(dnsDir), tenant: tenant,
		provider: &podProvider{host: host}},
		running: map[string]*runningMember{}, secrets: func() (*corev1.Secret, error) { return current, nil }}
	m.parent.members = kindsync.New("members-test", 1, m.sync, nil)
	if _, err := m.sync(ctx, membersKey); err != nil {
		t.Fatal(err)
	}
	r := m.running["gpu"]
	if r == nil || r.port != contract.FirstMemberKubeletPort {
		t.Fatalf("running %v; want gpu on port %d", m.running, contract.FirstMemberKubeletPort)
	}
	renewed := gpuPlacement()
	renewed.Token = "t2"
	data, _ = contract.MemberPlacements{Members: []contract.MemberPlacement{renewed}}.Marshal()
	current = &corev1.Secret{ObjectMeta: secret.ObjectMeta, Data: map[string][]byte{contract.MembersKey: data}}
	if _, err := m.sync(ctx, membersKey); err != nil {
		t.Fatal(err)
	}
	if m.running["gpu"] != r {
		t.Fatal("a renewed token restarted the member syncer")
	}
	if got := r.syncer.placement.Load(); got.Token != "t2" {
		t.Fatalf("the member syncer's placement has token %q, want the renewed one", got.Token)
	}
	if tok, _ := r.token.Token(); tok.AccessToken != "t2" {
		t.Fatalf("token %q, want the renewed one", tok.AccessToken)
	}
	current = &corev1.Secret{ObjectMeta: secret.ObjectMeta, Data: map[string][]byte{contract.MembersKey: []byte(`{"members":[]}`)}}
	if _, err := m.sync(ctx, membersKey); err != nil {
		t.Fatal(err)
	}
	if len(m.running) != 0 {
		t.Fatalf("running %v after the grant went", m.running)
	}
	if _, err := tenant.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{}); err == nil {
		t.Fatal("the member node is still in the tenant after the grant went")
	}
	if _, err := host.CoreV1().Services(tr.HostNamespace).Get(ctx, exposure.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the host Service exposing the tenant to the member: %v; want it deleted with the grant", err)
	}
	if view, err := os.ReadFile(filepath.Join(dnsDir, contract.MemberHostsFileName(0))); err != nil || strings.Contains(string(view), "svc") {
		t.Fatalf("the member's DNS view %q (%v); want it emptied with the grant", view, err)
	}
	select {
	case <-r.done:
	default:
		t.Fatal("the member syncer still runs")
	}
}

// A create the member refuses for a reason that passes (its quota is full,
// the injector does not answer yet) holds the pod, as one over the grant:
// a pod with restartPolicy Never would otherwise fail for good.
func TestGatekeeperHoldsAPodTheMemberRefusesForNow(t *testing.T) {
	for _, tt := range []struct {
		name, reason string
		refusal      error
	}{
		{"the member quota", ReasonQuotaExceeded, apierrors.NewForbidden(corev1.Resource("pods"), "x",
			errors.New("exceeded quota: nest-grant, requested: requests.cpu=100m, used: requests.cpu=2, limited: requests.cpu=2"))},
		{"the injector", ReasonInjectorUnavailable, apierrors.NewInternalError(errors.New(
			`failed calling webhook "inject.nest.dev": failed to call webhook: Post "https://nest-injector.nest-alpha-0123456789.svc:443/inject": service "nest-injector" not found`))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := gpuPod("refused", 1)
			pod.Spec.RestartPolicy = corev1.RestartPolicyNever
			tenant, member := fake.NewClientset(pod), fake.NewClientset()
			member.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tt.refusal })
			s := memberSyncer(t, tenant, member)
			var notified []*corev1.Pod
			s.provider.notify = func(p *corev1.Pod) { notified = append(notified, p) }
			if err := s.provider.CreatePod(context.Background(), pod); err != nil {
				t.Fatalf("CreatePod = %v; a pod the member refuses for now is held, not failed", err)
			}
			if len(notified) != 1 || notified[0].Status.Reason != tt.reason || !s.provider.gate.isHeld("shop/refused") {
				t.Fatalf("tenant status %+v, held %v; want Pending %s and held", notified, s.provider.gate.keys(), tt.reason)
			}
			if s.provider.capacity.admitted[pod.UID] {
				t.Error("a pod the member refused still holds room in the grant")
			}
		})
	}
}

func TestResizingAMemberNodeAdmitsAtTheNewSize(t *testing.T) {
	over := gpuPod("over", 2)
	tenant, member := fake.NewClientset(over), fake.NewClientset()
	s := memberSyncer(t, tenant, member)
	s.provider.notify = func(*corev1.Pod) {}
	if err := s.provider.CreatePod(context.Background(), over); err != nil || !s.provider.gate.isHeld("shop/over") {
		t.Fatalf("CreatePod = %v, held %v; want the pod held at the old size", err, s.provider.gate.keys())
	}
	if err := s.setCapacity(context.Background(), corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}); err != nil {
		t.Fatal(err)
	}
	if err := s.provider.CreatePod(context.Background(), over); err != nil {
		t.Fatal(err)
	}
	if _, err := member.CoreV1().Pods("nest-alpha-0123456789").Get(context.Background(), contract.HostName("alpha", "shop", "over"), metav1.GetOptions{}); err != nil {
		t.Fatalf("after the grant grew, the pod is not in the member: %v", err)
	}
	if s.provider.gate.isHeld("shop/over") {
		t.Error("the pod is still held after it was placed")
	}
}

// notifications records the tenant pod statuses a provider reports, from
// any goroutine.
type notifications struct {
	mu   sync.Mutex
	pods []*corev1.Pod
}

func (n *notifications) add(p *corev1.Pod) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pods = append(n.pods, p)
}

func (n *notifications) all() []*corev1.Pod {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.pods)
}
