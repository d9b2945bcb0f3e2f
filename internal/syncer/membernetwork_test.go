package syncer

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nestdev/nest/internal/syncer/contract"
)

func exposedTestServices() []*corev1.Service {
	svc := func(ns, name string, typ corev1.ServiceType, ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Type: typ, ClusterIP: "10.96.0.50", Ports: ports}}
	}
	return []*corev1.Service{
		svc("shop", "web", corev1.ServiceTypeNodePort,
			corev1.ServicePort{Name: "http", Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP},
			corev1.ServicePort{Name: "dns", Port: 53, NodePort: 30053, Protocol: corev1.ProtocolUDP}),
		svc("shop", "internal", corev1.ServiceTypeClusterIP, corev1.ServicePort{Name: "http", Port: 80}),
		svc("default", "lb", corev1.ServiceTypeLoadBalancer, corev1.ServicePort{Name: "https", Port: 443, NodePort: 31443}),
	}
}

func TestMemberExposedServicesAreTheTCPNodePortsInOrder(t *testing.T) {
	exposed, dropped := MemberExposedServices(exposedTestServices())
	if dropped != 0 || len(exposed) != 2 {
		t.Fatalf("exposed %d Services, dropped %d; want lb and web, none dropped", len(exposed), dropped)
	}
	if exposed[0].Name != "lb" || exposed[1].Name != "web" {
		t.Fatalf("order %s, %s; want default/lb before shop/web", exposed[0].Name, exposed[1].Name)
	}
	if len(exposed[1].Spec.Ports) != 1 || exposed[1].Spec.Ports[0].NodePort != 30080 {
		t.Fatalf("web's exposed ports %+v; want only the TCP one", exposed[1].Spec.Ports)
	}
}

func TestMemberExposedServicesStopAtTheBudget(t *testing.T) {
	var many []*corev1.Service
	for i := range maxMemberExposedPorts + 3 {
		many = append(many, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s" + strings.Repeat("x", i)},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Port: 80, NodePort: int32(30000 + i)}}}})
	}
	exposed, dropped := MemberExposedServices(many)
	if len(exposed) != maxMemberExposedPorts || dropped != 3 {
		t.Fatalf("exposed %d, dropped %d; want %d and 3", len(exposed), dropped, maxMemberExposedPorts)
	}
}

func TestMemberHostPortsLeadToTheViewAndTheNodePorts(t *testing.T) {
	exposed, _ := MemberExposedServices(exposedTestServices())
	ports := memberHostPorts(2, exposed)
	want := map[string]corev1.ServicePort{
		"dns":      {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(contract.FirstMemberDNSPort + 2)},
		"dns-tcp":  {Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53, TargetPort: intstr.FromInt32(contract.FirstMemberDNSPort + 2)},
		"injector": {Name: "injector", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(contract.FirstMemberInjectorPort + 2)},
		"np-30080": {Name: "np-30080", Protocol: corev1.ProtocolTCP, Port: 30080, TargetPort: intstr.FromInt32(30080)},
		"np-31443": {Name: "np-31443", Protocol: corev1.ProtocolTCP, Port: 31443, TargetPort: intstr.FromInt32(31443)},
	}
	if len(ports) != len(want) {
		t.Fatalf("ports %+v; want %d", ports, len(want))
	}
	for _, p := range ports {
		if p != want[p.Name] {
			t.Errorf("port %+v; want %+v", p, want[p.Name])
		}
	}
}

func TestMemberSideServicesPointAtTheHostNodePorts(t *testing.T) {
	exposed, _ := MemberExposedServices(exposedTestServices())
	nodePorts := map[string]int32{"dns": 31000, "dns-tcp": 31001, "injector": 31443, "np-30080": 32080}
	got := tr.memberSideServices(hostPath{address: "198.51.100.10", ports: nodePorts}, "198.51.100.10", 31234, exposed)
	byName := map[string]memberSideService{}
	for _, s := range got {
		byName[s.name] = s
	}
	dns := byName[memberDNSService]
	if dns.address != "198.51.100.10" || dns.targets["dns"] != 31000 || dns.targets["dns-tcp"] != 31001 || dns.tenant != "" {
		t.Errorf("nest-dns %+v; want the host node ports of the view", dns)
	}
	api := byName[memberAPIService]
	if api.targets["https"] != 31234 || api.tenant != "kubernetes.default.svc."+tr.ClusterDomain || api.ports[0].Port != 443 {
		t.Errorf("kubernetes %+v; want 443 to the API server's address", api)
	}
	web := byName[contract.HostName(tr.VirtualCluster, "shop", "web")]
	if web.tenant != "web.shop.svc."+tr.ClusterDomain || web.targets["http"] != 32080 || len(web.ports) != 1 || web.ports[0].Port != 80 {
		t.Errorf("web %+v; want port 80 to host node port 32080, named web.shop.svc", web)
	}
	if _, ok := byName[contract.HostName(tr.VirtualCluster, "default", "lb")]; ok {
		t.Error("lb has no host node port yet but got a member Service")
	}
	if inj := byName[contract.MemberInjectorService]; inj.targets["https"] != 31443 || inj.ports[0].Port != 443 || inj.tenant != "" {
		t.Errorf("nest-injector %+v; want 443 to the host node port of the injector", inj)
	}
	if len(got) != 4 {
		t.Errorf("%d member Services; want nest-dns, nest-injector, kubernetes and web", len(got))
	}
}

// Through a LoadBalancer, member pods reach the host Service at its first
// IP, on the Service's own ports; through node ports, at nodePortAddress on
// the node ports.
func TestPathToTheHostServiceIsItsLoadBalancerOrItsNodePorts(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
		{Name: "dns", Port: 53, NodePort: 31000}, {Name: "np-30080", Port: 30080, NodePort: 32080},
	}}}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.host.example"}, {IP: "198.51.100.200"}}
	lb := pathTo(svc, "", true)
	if lb.address != "198.51.100.200" || lb.ports["dns"] != 53 || lb.ports["np-30080"] != 30080 {
		t.Errorf("through the LoadBalancer: %+v; want its IP (not its host name) on the Service ports", lb)
	}
	np := pathTo(svc, "10.0.0.11", false)
	if np.address != "10.0.0.11" || np.ports["dns"] != 31000 || np.ports["np-30080"] != 32080 {
		t.Errorf("through node ports: %+v; want nodePortAddress on the node ports", np)
	}
	svc.Status.LoadBalancer.Ingress = nil
	if waiting := pathTo(svc, "", true); waiting.address != "" {
		t.Errorf("a LoadBalancer with no address yet: %+v; want no address", waiting)
	}
}

func TestMemberSideServicesLeaveOutAnAPIServerByName(t *testing.T) {
	for _, s := range tr.memberSideServices(hostPath{address: "198.51.100.10"}, "lb.member.example", 6443, nil) {
		if s.name == memberAPIService {
			t.Fatal("an API server address by name got a member Service: an EndpointSlice takes IPs only")
		}
	}
}

func TestMemberHostServiceNameFitsAServiceName(t *testing.T) {
	if got := contract.MemberHostService("alpha", "gpu"); got != "alpha-member-gpu" {
		t.Errorf("short name %q", got)
	}
	long := contract.MemberHostService(strings.Repeat("v", 40), strings.Repeat("m", 40))
	if len(long) > 63 || long == contract.MemberHostService(strings.Repeat("v", 40), strings.Repeat("m", 41)) {
		t.Errorf("long name %q (%d): want at most 63 characters and distinct per member", long, len(long))
	}
}

func TestCorefileHasAViewPerMemberSlot(t *testing.T) {
	c := contract.Corefile(contract.DefaultDNSPort, "/dns/hosts", "/dns/zone", "/dns/reverse", "cluster.local", 8080)
	for slot := range contract.MaxMembers {
		block := ".:" + strconv.Itoa(contract.FirstMemberDNSPort+slot) + " {"
		i := strings.Index(c, block)
		if i < 0 {
			t.Fatalf("no view for slot %d in\n%s", slot, c)
		}
		rest := c[i:]
		end := strings.Index(rest, "\n}\n")
		view := rest[:end]
		if !strings.Contains(view, "hosts /dns/"+contract.MemberHostsFileName(slot)+" cluster.local") || !strings.Contains(view, "file /dns/reverse cluster.local") {
			t.Errorf("view of slot %d:\n%s\nwant its hosts file, then the SOA-only zone", slot, view)
		}
		if strings.Contains(view, "/dns/hosts ") || strings.Contains(view, "/dns/zone") || strings.Contains(view, "forward") {
			t.Errorf("view of slot %d reads the tenant's own records or forwards:\n%s", slot, view)
		}
	}
}

func TestMemberNetworkSyncAppliesTheHostServiceAndTheMemberDNS(t *testing.T) {
	host, member := fake.NewClientset(), fake.NewClientset()
	stale := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "nest-alpha-0123456789", Labels: memberNetworkLabels("alpha", "gpu")}}
	foreign := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: "nest-alpha-0123456789"}}
	for _, s := range []*corev1.Service{stale, foreign} {
		if _, err := member.CoreV1().Services(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := testMemberNetwork(ctx, t, host, member)
	n.nodePortAddress, n.apiHost, n.apiPort = "198.51.100.10", "198.51.100.10", 31234
	mtr, dir := n.tr, n.dnsDir
	if _, err := n.sync(ctx, memberNetworkKey); err != nil {
		t.Fatal(err)
	}
	svc, err := host.CoreV1().Services(tr.HostNamespace).Get(ctx, contract.MemberHostService("alpha", "gpu"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("host Service: %v", err)
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort || len(svc.Spec.Selector) != 0 || len(svc.Spec.Ports) != 4 || svc.Labels[contract.LabelTenantOf] != "alpha" {
		t.Fatalf("host Service %+v; want a NodePort without a selector, with dns, dns-tcp, injector and np-30080, labelled as the tenant's", svc)
	}
	slice, err := host.DiscoveryV1().EndpointSlices(tr.HostNamespace).Get(ctx, svc.Name, metav1.GetOptions{})
	if err != nil || len(slice.Endpoints) != 1 || slice.Endpoints[0].Addresses[0] != "10.244.0.7" {
		t.Fatalf("host EndpointSlice %+v (%v); want the control-plane pod", slice, err)
	}
	for _, p := range slice.Ports {
		if *p.Name == "dns" && *p.Port != contract.FirstMemberDNSPort+1 {
			t.Errorf("host EndpointSlice sends DNS to %d; want slot 1's view on %d", *p.Port, contract.FirstMemberDNSPort+1)
		}
	}
	if _, err := member.CoreV1().Services(mtr.HostNamespace).Get(ctx, memberDNSService, metav1.GetOptions{}); err != nil {
		t.Errorf("member Service %s: %v", memberDNSService, err)
	}
	if _, err := member.CoreV1().Services(mtr.HostNamespace).Get(ctx, "gone", metav1.GetOptions{}); err == nil {
		t.Error("a member Service memberNetwork made and no longer wants is still there")
	}
	if _, err := member.CoreV1().Services(mtr.HostNamespace).Get(ctx, "theirs", metav1.GetOptions{}); err != nil {
		t.Errorf("a member Service memberNetwork did not make was touched: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, contract.MemberHostsFileName(1))); err != nil {
		t.Errorf("the member's DNS view was not written: %v", err)
	}
}

// Through a LoadBalancer, the host Service is of that type, and the member
// Services point at its address once the host's load balancer gives it one:
// nothing before, so no member pod is sent to a node port.
func TestMemberNetworkSyncThroughALoadBalancerWaitsForItsAddress(t *testing.T) {
	host, member := fake.NewClientset(), fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := testMemberNetwork(ctx, t, host, member)
	n.loadBalancer, n.apiHost, n.apiPort = true, "198.51.100.201", 443
	mtr := n.tr
	after, err := n.sync(ctx, memberNetworkKey)
	if err != nil {
		t.Fatal(err)
	}
	name := contract.MemberHostService("alpha", "gpu")
	svc, err := host.CoreV1().Services(tr.HostNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil || svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Fatalf("host Service %+v (%v); want a LoadBalancer", svc, err)
	}
	if after != loadBalancerPoll {
		t.Errorf("without an address the path is looked at again after %s; want %s", after, loadBalancerPoll)
	}
	if slices, _ := member.DiscoveryV1().EndpointSlices(mtr.HostNamespace).List(ctx, metav1.ListOptions{}); len(slices.Items) != 0 {
		t.Fatalf("member EndpointSlices %+v before the LoadBalancer has an address; want none", slices.Items)
	}

	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.200"}}
	if _, err := host.CoreV1().Services(tr.HostNamespace).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.sync(ctx, memberNetworkKey); err != nil {
		t.Fatal(err)
	}
	// The API server is the tenant's own LoadBalancer address; DNS and the
	// injector are the grant's.
	for name, want := range map[string]string{memberDNSService: "198.51.100.200", contract.MemberInjectorService: "198.51.100.200", memberAPIService: "198.51.100.201"} {
		slice, err := member.DiscoveryV1().EndpointSlices(mtr.HostNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(slice.Endpoints) != 1 || slice.Endpoints[0].Addresses[0] != want {
			t.Errorf("member EndpointSlice %s %+v (%v); want %s", name, slice, err, want)
		}
	}
	slice, err := member.DiscoveryV1().EndpointSlices(mtr.HostNamespace).Get(ctx, memberDNSService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range slice.Ports {
		if *p.Port != 53 {
			t.Errorf("nest-dns port %s goes to %d; want the LoadBalancer's port 53", *p.Name, *p.Port)
		}
	}
}

// testMemberNetwork is member "gpu"'s network syncer in slot 1 of tenant
// alpha, whose one tenant Service is exposedTestServices' first, between
// host and member, with the control-plane pod at 10.244.0.7 and a view
// directory of its own; the caller sets its path to the tenant.
func testMemberNetwork(ctx context.Context, t *testing.T, host, member kubernetes.Interface) *memberNetwork {
	t.Helper()
	tenant := fake.NewClientset(exposedTestServices()[0])
	f := informers.NewSharedInformerFactory(tenant, 0)
	lister := f.Core().V1().Services().Lister()
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	mtr := tr
	mtr.HostNamespace = "nest-alpha-0123456789"
	return &memberNetwork{tr: mtr, member: "gpu", slot: 1,
		podIP: "10.244.0.7", hostNamespace: tr.HostNamespace, host: host, memberClient: member, tenantServices: lister, dnsDir: t.TempDir()}
}
