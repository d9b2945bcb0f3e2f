package syncer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
)

// membersKey is the one key of the members syncer: the placements are
// synced whole.
const membersKey = "members"

// memberPlacer runs one member syncer per placement in contract.MembersSecret, in
// the host syncer's process: it starts those that appear, stops those that
// go, restarts one whose member (server, namespace, addresses) changed,
// and hands a running one each renewed token, node count and size.
type memberPlacer struct {
	parent  *syncer
	secrets func() (*corev1.Secret, error)

	mu      sync.Mutex
	running map[string]*runningMember
}

// runningMember is one member syncer and what it was started with.
type runningMember struct {
	placement contract.MemberPlacement
	token     *memberToken
	port      int32
	syncer    *syncer
	cancel    context.CancelFunc
	done      chan struct{}
}

// registerMembers makes the host syncer's members syncer, over a host
// informer that watches contract.MembersSecret alone.
func (s *syncer) registerMembers(c *kinds.Context) (kinds.Registration, error) {
	name := contract.MembersSecret(s.o.VirtualCluster)
	s.membersF = informers.NewSharedInformerFactoryWithOptions(c.Host, 0, informers.WithNamespace(s.o.HostNamespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	lister := s.membersF.Core().V1().Secrets().Lister().Secrets(s.o.HostNamespace)
	s.placer = &memberPlacer{parent: s, running: map[string]*runningMember{},
		secrets: func() (*corev1.Secret, error) { return lister.Get(name) }}
	s.members = kindsync.New("members", 1, s.placer.sync, func() []string { return []string{membersKey} })
	_, _ = s.membersF.Core().V1().Secrets().Informer().AddEventHandler(kinds.OnEvery(func(*corev1.Secret) { s.members.Add(membersKey) }))
	return kinds.Registration{Queues: []*kindsync.Syncer{s.members}}, nil
}

// sync brings the running member syncers in line with contract.MembersSecret. A
// Secret that does not parse stops nothing: the member syncers keep their
// last good placements until nest-manager writes a good one.
func (m *memberPlacer) sync(ctx context.Context, _ string) (time.Duration, error) {
	want, err := m.placements()
	if err != nil {
		return 0, kindsync.Terminal(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	for name, r := range m.running {
		p, ok := want[name]
		if ok && !restartNeeded(r.placement, p) {
			r.token.set(p.Token)
			r.syncer.setPlacement(p)
			if !equality.Semantic.DeepEqual(r.placement.Allocatable, p.Allocatable) {
				if err := r.syncer.setCapacity(ctx, p.Allocatable); err != nil {
					errs = append(errs, fmt.Errorf("member %s: %w", name, err))
				}
			}
			r.placement = p
			continue
		}
		m.stop(ctx, name, r)
		if !ok {
			errs = append(errs, m.deleteNode(ctx, name, r.port))
		}
	}
	errs = append(errs, m.sweep(ctx, want))
	// One bad placement does not keep the others from starting.
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if _, ok := m.running[name]; ok {
			continue
		}
		if err := m.start(ctx, want[name]); err != nil {
			errs = append(errs, fmt.Errorf("member %s: %w", name, err))
		}
	}
	return 0, errors.Join(errs...)
}

// placements reads contract.MembersSecret; no Secret is no placements.
func (m *memberPlacer) placements() (map[string]contract.MemberPlacement, error) {
	secret, err := m.secrets()
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, err := contract.ParseMemberPlacements(secret.Data[contract.MembersKey])
	if err != nil {
		return nil, fmt.Errorf("host Secret %s: %w", secret.Name, err)
	}
	out := make(map[string]contract.MemberPlacement, len(p.Members))
	for _, mp := range p.Members {
		out[mp.Name] = mp
	}
	return out, nil
}

// restartNeeded reports whether a running member syncer must be started
// again for the placement: where or how it reaches the member changed. A
// new token, node count, size or injector certificate is handed to the
// running one.
func restartNeeded(was, is contract.MemberPlacement) bool {
	for _, p := range []*contract.MemberPlacement{&was, &is} {
		p.Token, p.TokenExpiry, p.Nodes, p.Allocatable = "", time.Time{}, 0, nil
		p.InjectorCert, p.InjectorKey = nil, nil
	}
	return !reflect.DeepEqual(was, is)
}

// start runs a member syncer for p until it is stopped.
func (m *memberPlacer) start(ctx context.Context, p contract.MemberPlacement) error {
	port, ok := m.freePort()
	if !ok {
		return fmt.Errorf("no kubelet port left for a member node: at most %d members", contract.MaxMembers)
	}
	token := &memberToken{}
	token.set(p.Token)
	o, err := memberOptions(m.parent.o, p, port, token)
	if err != nil {
		return kindsync.Terminal(err)
	}
	member, err := kubernetes.NewForConfig(o.Host)
	if err != nil {
		return kindsync.Terminal(fmt.Errorf("client for member %s: %w", p.Name, err))
	}
	if p.HasMemberNetwork() {
		dctx, dcancel := context.WithTimeout(ctx, memberProbeInterval)
		o.DNSServer, err = ensureMemberDNSService(dctx, member, p.Namespace, memberNetworkLabels(m.parent.o.VirtualCluster, p.Name))
		dcancel()
		if err != nil {
			return err
		}
	}
	mctx, cancel := context.WithCancel(ctx)
	ms, err := newSyncerFor(mctx, o, m.parent.tenant, member)
	if err != nil {
		cancel()
		return err
	}
	if p.HasMemberNetwork() {
		if err := ms.wireMemberNetwork(m.network(o, p, port, member)); err != nil {
			cancel()
			return err
		}
	}
	r := &runningMember{placement: p, token: token, port: port, syncer: ms, cancel: cancel, done: make(chan struct{})}
	ms.setPlacement(p)
	m.running[p.Name] = r
	log := klog.FromContext(ctx).WithValues("member", p.Name, "namespace", p.Namespace)
	go func() {
		err := ms.runMember(mctx, member)
		failed := err != nil && mctx.Err() == nil
		// Everything the member syncer started ends with its context, and
		// done is closed before the lock is taken: stop, which holds the
		// lock, may be waiting for it.
		cancel()
		close(r.done)
		if !failed {
			return
		}
		log.Error(err, "Member syncer stopped; starting it again")
		m.mu.Lock()
		if m.running[p.Name] == r {
			delete(m.running, p.Name)
		}
		m.mu.Unlock()
		m.parent.members.Queue.AddAfter(membersKey, memberRestartDelay)
	}()
	log.Info("Member syncer started", "node", contract.MemberNodeName(p.Name), "kubeletPort", port)
	return nil
}

// memberRestartDelay is how long a failed member syncer waits before it is
// started again.
const memberRestartDelay = 10 * time.Second

// stop ends a member syncer and waits for it, so that its kubelet port and
// node are free for the next.
func (m *memberPlacer) stop(ctx context.Context, name string, r *runningMember) {
	r.cancel()
	<-r.done
	delete(m.running, name)
	klog.FromContext(ctx).Info("Member syncer stopped", "member", name)
}

// network is the member network syncer of member syncer o, started for p
// on the kubelet port port.
func (m *memberPlacer) network(o Options, p contract.MemberPlacement, port int32, member kubernetes.Interface) *memberNetwork {
	return &memberNetwork{
		tr: o.translator(), member: p.Name, slot: int(port - contract.FirstMemberKubeletPort), nodePortAddress: p.NodePortAddress, loadBalancer: p.LoadBalancer,
		apiHost: o.APIServerHost, apiPort: o.APIServerPort,
		podIP: m.parent.o.NodeIP, hostNamespace: m.parent.o.HostNamespace,
		host: m.parent.provider.host, memberClient: member,
		dnsDir: m.parent.o.DNSDir,
	}
}

// deleteNode removes the tenant node of a member the tenant may no longer
// use, and the host Service that exposed the tenant to it: the tenant's pod
// garbage collector then deletes the pods bound to the node. What fails
// here is found again by sweep.
func (m *memberPlacer) deleteNode(ctx context.Context, member string, port int32) error {
	errs := []error{removeMemberNetwork(ctx, m.parent.provider.host, m.parent.o.HostNamespace, m.parent.o.VirtualCluster, member, m.parent.o.DNSDir,
		int(port-contract.FirstMemberKubeletPort))}
	name := contract.MemberNodeName(member)
	if err := m.parent.tenant.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete member node %s: %w", name, err))
	}
	return errors.Join(errs...)
}

// sweep deletes what revoked members left: tenant member nodes and host
// Services of members the placements no longer name (or name without a
// member network), such as those of a member revoked while nest-syncer
// was down, or whose deletion failed before.
func (m *memberPlacer) sweep(ctx context.Context, want map[string]contract.MemberPlacement) error {
	var errs []error
	nodes, err := m.parent.tenant.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: contract.MemberTaintKey})
	if err != nil {
		errs = append(errs, err)
		nodes = &corev1.NodeList{}
	}
	for _, n := range nodes.Items {
		if _, ok := want[n.Labels[contract.MemberTaintKey]]; ok || n.Name != contract.MemberNodeName(n.Labels[contract.MemberTaintKey]) {
			continue
		}
		if err := m.parent.tenant.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	host := m.parent.provider.host.CoreV1().Services(m.parent.o.HostNamespace)
	services, err := host.List(ctx, metav1.ListOptions{LabelSelector: contract.LabelTenantOf + "=" + m.parent.o.VirtualCluster + "," + contract.LabelMemberNetwork})
	if err != nil {
		errs = append(errs, err)
		services = &corev1.ServiceList{}
	}
	for _, svc := range services.Items {
		if p, ok := want[svc.Labels[contract.LabelMemberNetwork]]; ok && p.HasMemberNetwork() {
			continue
		}
		if err := host.Delete(ctx, svc.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// freePort returns the lowest member kubelet port no running member holds.
func (m *memberPlacer) freePort() (int32, bool) {
	taken := map[int32]bool{}
	for _, r := range m.running {
		taken[r.port] = true
	}
	for p := int32(contract.FirstMemberKubeletPort); p < contract.FirstMemberKubeletPort+contract.MaxMembers; p++ {
		if !taken[p] {
			return p, true
		}
	}
	return 0, false
}

// memberOptions are the options of the member syncer for p, derived from the
// host syncer's: the member's namespace, node, addresses and size, and a
// client that presents the current token.
func memberOptions(host Options, p contract.MemberPlacement, port int32, token oauth2.TokenSource) (Options, error) {
	o := host
	apiHost, apiPort, err := splitHostPort(p.APIServerAddress)
	if err != nil {
		return o, fmt.Errorf("apiServerAddress %q: %w", p.APIServerAddress, err)
	}
	// With a member network, member pods' nameserver is the member
	// Service in front of the tenant's DNS (ensureMemberDNSService).
	dns := ""
	if !p.HasMemberNetwork() {
		if dns, err = dnsServerIP(p.DNSAddress); err != nil {
			return o, err
		}
	}
	o.HostNamespace = p.Namespace
	o.NodeName = contract.MemberNodeName(p.Name)
	o.APIServerHost, o.APIServerPort = apiHost, apiPort
	o.DNSServer = dns
	// The host's Service ranges, priority class and LimitRange mean
	// nothing in the member.
	o.HostServiceCIDRs, o.PriorityClassName, o.DefaultLimits = nil, "", nil
	// The helper image is the host's; a member may not have it. The fence
	// address is the host's API server too: a member's pods are isolated
	// by the member's policies, which the fence does not know.
	o.HelperImage, o.NetworkFence = "", ""
	o.Capacity, o.VirtualNodes = p.Allocatable, 1
	o.Member, o.KubeletPort = p.Name, port
	o.Host = &rest.Config{
		Host:            p.Server,
		TLSClientConfig: rest.TLSClientConfig{CAData: p.CAData, ServerName: p.TLSServerName},
		WrapTransport:   transport.TokenSourceWrapTransport(token),
		// No client timeout: it would cut every watch and followed log
		// stream; requests are bounded by their contexts.
		QPS: host.Host.QPS, Burst: host.Host.Burst,
	}
	return o, nil
}

// splitHostPort splits host:port with a numeric port.
func splitHostPort(addr string) (string, int32, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil || port == 0 {
		return "", 0, fmt.Errorf("port %q is not 1 to 65535", p)
	}
	return h, int32(port), nil
}

// dnsServerIP is the nameserver member pods use: a pod's resolv.conf takes
// an IP address on port 53 only.
func dnsServerIP(addr string) (string, error) {
	if a, err := netip.ParseAddr(addr); err == nil {
		return a.String(), nil
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.Port() != 53 {
		return "", fmt.Errorf("dnsAddress %q: member pods need an IP address on port 53, such as 10.20.0.10", addr)
	}
	return ap.Addr().String(), nil
}

// memberToken is the member syncer's current token, replaced in place when
// nest-manager renews it; every request presents the current one.
type memberToken struct{ v atomic.Pointer[string] }

func (t *memberToken) set(token string) { t.v.Store(&token) }

// Token implements oauth2.TokenSource.
func (t *memberToken) Token() (*oauth2.Token, error) {
	v := t.v.Load()
	if v == nil || *v == "" {
		return nil, errors.New("no token for the member cluster yet")
	}
	return &oauth2.Token{AccessToken: *v, TokenType: "Bearer"}, nil
}

// memberProbeInterval is how often a member syncer checks that its member
// answers; memberFailures failed checks in a row mark the node NotReady.
const (
	memberProbeInterval = 5 * time.Second
	memberFailures      = 3
)

// runMember runs a member syncer: its kind syncers, its kubelet API and its
// node, whose Ready condition follows the member (watchMember).
func (s *syncer) runMember(ctx context.Context, member kubernetes.Interface) error {
	if err := s.startSyncers(ctx); err != nil {
		return err
	}
	if err := s.serveKubeletAPI(ctx); err != nil {
		return err
	}
	// Closed before runMember returns, so that a member syncer started in
	// its place can take the port.
	defer s.closeKubeletAPI()
	go s.watchMember(ctx, member)
	if s.network != nil && s.o.NodeIP != "" {
		srv, err := s.serveInjector(ctx, s.o.NodeIP, contract.FirstMemberInjectorPort+s.kubeletPort()-contract.FirstMemberKubeletPort)
		if err != nil {
			return err
		}
		// Closed before runMember returns, as the kubelet API is.
		defer func() { _ = srv.Close() }()
		// The way back to the tenant (DNS, the injector) before the node
		// is Ready; the network syncer keeps it from then on.
		if _, err := s.network.SyncNow(ctx, memberNetworkKey); err != nil {
			klog.FromContext(ctx).Info("The member's network is not complete yet; pods wait for the injector", "err", err.Error())
		}
	}
	return s.runNode(ctx)
}

// watchMember keeps the member node's Ready condition: False when the
// member's API server has not answered memberFailures probes in a row, or
// when nest-manager found none of its Nodes Ready. The tenant's node
// lifecycle controller then taints the node, and pods that do not
// tolerate it are evicted and replaced elsewhere, as on any NotReady node.
func (s *syncer) watchMember(ctx context.Context, member kubernetes.Interface) {
	failures := 0
	t := time.NewTicker(memberProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, memberProbeInterval)
		err := member.Discovery().RESTClient().Get().AbsPath("/readyz").Do(pctx).Error()
		cancel()
		if err != nil {
			failures++
		} else {
			failures = 0
		}
		ready, reason, message := memberReadiness(failures, *s.placement.Load(), err)
		if err := s.setNodeReady(ctx, ready, reason, message); err != nil {
			klog.FromContext(ctx).V(2).Info("Could not update the member node's Ready condition", "err", err.Error())
		}
	}
}

// memberReadiness is the member node's Ready condition after failures
// failed probes in a row (the last with err), with the placement
// nest-manager last wrote. A member that has lost every node, or every node
// offering a resource the grant is for (its allocatable there is zero: a
// spot GPU pool reclaimed), cannot run the tenant's pods.
func memberReadiness(failures int, p contract.MemberPlacement, err error) (bool, string, string) {
	switch {
	case failures >= memberFailures:
		return false, "MemberUnreachable", fmt.Sprintf("the member cluster's API server has not answered %d probes in a row: %v", failures, err)
	case p.Nodes == 0:
		return false, "MemberHasNoNodes", "the member cluster has no Ready, schedulable node"
	}
	for _, name := range slices.Sorted(maps.Keys(p.Allocatable)) {
		if q := p.Allocatable[name]; q.IsZero() {
			return false, "MemberLostNodes", fmt.Sprintf("no Ready, schedulable node of the member cluster offers %s", name)
		}
	}
	return true, "KubeletReady", "nest-syncer is running the member node"
}

// setPlacement hands a member syncer the placement nest-manager last wrote.
func (s *syncer) setPlacement(p contract.MemberPlacement) { s.placement.Store(&p) }

// setCapacity resizes the member node in place: the gatekeeper admits
// against the new size at once, and the node shows it. Pods already placed
// stay, as on a node whose allocatable shrank.
func (s *syncer) setCapacity(ctx context.Context, capacity corev1.ResourceList) error {
	s.provider.capacity.setCapacity(contract.MemberNodeName(s.o.Member), capacity)
	s.nodeMu.Lock()
	defer s.nodeMu.Unlock()
	if s.nodeSpec == nil {
		return nil
	}
	s.nodeSpec.Status.Capacity, s.nodeSpec.Status.Allocatable = capacity.DeepCopy(), capacity.DeepCopy()
	return s.nodeStatus.UpdateStatus(ctx, s.nodeSpec.DeepCopy())
}

// setNodeReady writes the node's Ready condition when it changes.
func (s *syncer) setNodeReady(ctx context.Context, ready bool, reason, message string) error {
	s.nodeMu.Lock()
	defer s.nodeMu.Unlock()
	if s.nodeSpec == nil {
		return nil
	}
	if !setReadyCondition(s.nodeSpec, ready, reason, message) {
		return nil
	}
	klog.FromContext(ctx).Info("Member node readiness changed", "node", s.nodeSpec.Name, "ready", ready, "reason", reason)
	return s.nodeStatus.UpdateStatus(ctx, s.nodeSpec.DeepCopy())
}

// setReadyCondition sets n's Ready condition and reports whether its
// status or reason changed.
func setReadyCondition(n *corev1.Node, ready bool, reason, message string) bool {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		if c.Type != corev1.NodeReady || (c.Status == status && c.Reason == reason) {
			continue
		}
		now := metav1.Now()
		c.Status, c.Reason, c.Message, c.LastTransitionTime, c.LastHeartbeatTime = status, reason, message, now, now
		return true
	}
	return false
}

// MemberNode is the tenant's view of its grant in a member cluster: a
// virtual node like VirtualNode, named contract.MemberNodeName(member), whose kubelet
// API is on port, labelled and tainted with contract.MemberTaintKey=member so that
// only pods that tolerate it land there.
func MemberNode(member, ip, kubeletVersion string, port int32, capacity corev1.ResourceList) corev1.Node {
	n := VirtualNode(contract.MemberNodeName(member), ip, kubeletVersion, capacity)
	n.Labels[contract.MemberTaintKey] = member
	n.Labels["node.kubernetes.io/instance-type"] = "nest-member-node"
	n.Spec.Taints = []corev1.Taint{{Key: contract.MemberTaintKey, Value: member, Effect: corev1.TaintEffectNoSchedule}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = port
	n.Status.NodeInfo.OSImage = "Nest member node (" + member + ")"
	n.Status.NodeInfo.ContainerRuntimeVersion = "member://" + member
	return n
}
