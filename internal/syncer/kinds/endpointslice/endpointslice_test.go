package endpointslice

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
	"github.com/nestdev/nest/internal/testutil"
)

func tenantSlice(name string, addressType discoveryv1.AddressType, ips ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name), Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
		AddressType: addressType,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("sql"), Port: ptr.To[int32](5432), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}, NodeName: ptr.To("nest-virtual-node")})
	}
	return s
}

func hostServiceOf(name string) *corev1.Service {
	svc := &corev1.Service{ObjectMeta: hostcopy.Meta(tr.VirtualCluster, tr.HostNamespace, &metav1.ObjectMeta{Name: name, Namespace: "shop", UID: "tenant-svc"})}
	svc.UID = "host-svc"
	return svc
}

func TestHostEndpointSlicesKeepOnlyTheTenantsPodAddresses(t *testing.T) {
	pods := map[string]bool{"10.244.1.5": true, "10.244.1.6": true}
	slices := []*discoveryv1.EndpointSlice{
		tenantSlice("db-b", discoveryv1.AddressTypeIPv4, "10.244.1.6", "10.96.0.1"),
		tenantSlice("db-a", discoveryv1.AddressTypeIPv4, "10.244.1.5", "192.0.2.7"),
		tenantSlice("db-fqdn", discoveryv1.AddressTypeFQDN, "db.example.org"),
	}
	hostSvc := hostServiceOf("db")
	out, dropped := tr.HostEndpointSlices(hostSvc, slices, func(ip string) bool { return pods[ip] })
	if len(out) != 2 || dropped != 2 {
		t.Fatalf("got %d host slices and %d dropped endpoints, want 2 slices (no FQDN one) and 2 dropped", len(out), dropped)
	}
	for i, want := range []string{"10.244.1.5", "10.244.1.6"} {
		s := out[i]
		if len(s.Endpoints) != 1 || s.Endpoints[0].Addresses[0] != want || s.Endpoints[0].NodeName != nil {
			t.Errorf("host slice %d has endpoints %+v, want only %s without the tenant's node name", i, s.Endpoints, want)
		}
		if s.Namespace != tr.HostNamespace || s.Labels[discoveryv1.LabelServiceName] != hostSvc.Name || s.Labels[contract.LabelTenantOf] != tr.VirtualCluster ||
			s.Labels[discoveryv1.LabelManagedBy] != contract.EndpointSliceManager || s.Labels[LabelTenantService] != "db" {
			t.Errorf("host slice %d is %s/%s with labels %v", i, s.Namespace, s.Name, s.Labels)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != hostSvc.UID {
			t.Errorf("host slice %d is owned by %+v, want the host Service", i, s.OwnerReferences)
		}
		if len(s.Ports) != 1 || *s.Ports[0].Port != 5432 {
			t.Errorf("host slice %d has ports %+v", i, s.Ports)
		}
	}
}

func TestHostEndpointSlicesAreBounded(t *testing.T) {
	var many []*discoveryv1.EndpointSlice
	for i := range MaxHostEndpointSlices + 3 {
		many = append(many, tenantSlice(string(rune('a'+i)), discoveryv1.AddressTypeIPv4, "10.244.1.5"))
	}
	out, dropped := tr.HostEndpointSlices(hostServiceOf("db"), many, func(string) bool { return true })
	if len(out) != MaxHostEndpointSlices || dropped != 3 {
		t.Errorf("got %d host slices and %d dropped, want %d and 3", len(out), dropped, MaxHostEndpointSlices)
	}
}

// The syncer writes the host slices of a Service without a selector and
// deletes them once the Service has a selector.
func TestEndpointSliceSyncerFollowsTheTenant(t *testing.T) {
	ctx := context.Background()
	tenantSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop", UID: "tenant-svc"}}
	hostSvc := hostServiceOf("db")
	hostPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: tr.HostNamespace, Labels: map[string]string{contract.LabelTenantOf: tr.VirtualCluster}},
		Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}}}}
	// 10.244.9.9 was the finished host pod's: its IP is free for anyone now.
	tenant := fake.NewClientset(tenantSvc, tenantSlice("db-a", discoveryv1.AddressTypeIPv4, "10.244.1.5", "10.244.9.9", "10.244.1.5"))
	finished := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done", Namespace: tr.HostNamespace, Labels: map[string]string{contract.LabelTenantOf: tr.VirtualCluster}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, PodIPs: []corev1.PodIP{{IP: "10.244.9.9"}}}}
	controllerSlice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "db-controller", Namespace: tr.HostNamespace,
		Labels: map[string]string{discoveryv1.LabelServiceName: hostSvc.Name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4}
	host := fake.NewClientset(hostSvc, hostPod, finished, controllerSlice)
	tf, hf := informers.NewSharedInformerFactory(tenant, 0), informers.NewSharedInformerFactoryWithOptions(host, 0, informers.WithNamespace(tr.HostNamespace))
	e := &Syncer{
		tr: tr, host: host, recorder: record.NewFakeRecorder(10),
		tenantServices: tf.Core().V1().Services().Lister(), tenantSlices: tf.Discovery().V1().EndpointSlices().Lister(),
		hostServices: hf.Core().V1().Services().Lister().Services(tr.HostNamespace),
		hostSlices:   hf.Discovery().V1().EndpointSlices().Lister().EndpointSlices(tr.HostNamespace),
		hostPods:     hf.Core().V1().Pods().Lister().Pods(tr.HostNamespace),
	}
	tf.Start(ctx.Done())
	hf.Start(ctx.Done())
	tf.WaitForCacheSync(ctx.Done())
	hf.WaitForCacheSync(ctx.Done())

	if _, err := e.Sync(ctx, "shop/db"); err != nil {
		t.Fatal(err)
	}
	got, err := host.DiscoveryV1().EndpointSlices(tr.HostNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ours []discoveryv1.EndpointSlice
	for _, sl := range got.Items {
		if sl.Labels[discoveryv1.LabelManagedBy] == contract.EndpointSliceManager {
			ours = append(ours, sl)
		}
	}
	if len(ours) != 1 || len(ours[0].Endpoints) != 1 || ours[0].Endpoints[0].Addresses[0] != "10.244.1.5" {
		t.Fatalf("host slices %+v, want one with the live tenant pod's address, once", ours)
	}
	got.Items = ours
	select {
	case ev := <-e.recorder.(*record.FakeRecorder).Events:
		if !strings.Contains(ev, "EndpointsNotCopied") {
			t.Errorf("event %q, want EndpointsNotCopied", ev)
		}
	default:
		t.Error("no event says an endpoint was not copied")
	}
	if _, err := host.DiscoveryV1().EndpointSlices(tr.HostNamespace).Get(ctx, "db-controller", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the host controller's slice of the Service, which had a selector, is still there (%v)", err)
	}

	// The host slice reaches the cache, then the Service gets a selector.
	if err := hf.Discovery().V1().EndpointSlices().Informer().GetIndexer().Add(&got.Items[0]); err != nil {
		t.Fatal(err)
	}
	withSelector := tenantSvc.DeepCopy()
	withSelector.Spec.Selector = map[string]string{"app": "db"}
	if err := tf.Core().V1().Services().Informer().GetIndexer().Update(withSelector); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Sync(ctx, "shop/db"); err != nil {
		t.Fatal(err)
	}
	got, _ = host.DiscoveryV1().EndpointSlices(tr.HostNamespace).List(ctx, metav1.ListOptions{})
	if len(got.Items) != 0 {
		t.Errorf("host slices %+v remain after the Service got a selector", got.Items)
	}
}

// dedicatedCIDR holds the pods of the tenant's one dedicated node in these
// tests; 10.244.1.0/24 the tenant's host pods, on virtual nodes.
var dedicatedCIDR = netip.MustParsePrefix("10.244.2.0/24")

// endpointSliceSyncerOf is an endpoint slice syncer whose listers hold the
// tenant and host objects, whose host client holds the host objects too,
// and whose dedicated pod CIDRs are cidrs.
func endpointSliceSyncerOf(t *testing.T, tenantObjs, hostObjs []runtime.Object, cidrs []netip.Prefix) (*Syncer, *fake.Clientset) {
	t.Helper()
	tenantServices, tenantSlices, _ := testutil.ByKind(t, tenantObjs)
	hostServices, hostSlices, hostPods := testutil.ByKind(t, hostObjs)
	host := fake.NewClientset(hostObjs...)
	return &Syncer{
		tr: tr, host: host, recorder: record.NewFakeRecorder(10),
		tenantServices: corelisters.NewServiceLister(testutil.Indexer(t, tenantServices...)),
		tenantSlices:   discoverylisters.NewEndpointSliceLister(testutil.Indexer(t, tenantSlices...)),
		hostServices:   corelisters.NewServiceLister(testutil.Indexer(t, hostServices...)).Services(tr.HostNamespace),
		hostSlices:     discoverylisters.NewEndpointSliceLister(testutil.Indexer(t, hostSlices...)).EndpointSlices(tr.HostNamespace),
		hostPods:       podLister(t, hostPods...).Pods(tr.HostNamespace),
		dedicated:      func() []netip.Prefix { return cidrs },
	}, host
}

// tenantService is the tenant Service shop/db, with selector when not nil,
// and its host copy.
func tenantService(selector map[string]string) (*corev1.Service, *corev1.Service) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop", UID: "tenant-svc"}, Spec: corev1.ServiceSpec{Selector: selector}}
	hostSvc := &corev1.Service{ObjectMeta: hostcopy.Meta(tr.VirtualCluster, tr.HostNamespace, &svc.ObjectMeta)}
	hostSvc.UID = "host-svc"
	return svc, hostSvc
}

// tenantHostPod is a live host pod of the tenant, at ip.
func tenantHostPod(name, ip string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tr.HostNamespace, Labels: map[string]string{contract.LabelTenantOf: tr.VirtualCluster}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}}}}
}

// hostControllerSlice is the host EndpointSlice controller's slice of the
// host Service hostSvc.
func hostControllerSlice(hostSvc *corev1.Service) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: hostSvc.Name + "-ctrl", Namespace: tr.HostNamespace,
		Labels: map[string]string{discoveryv1.LabelServiceName: hostSvc.Name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}}}}
}

// syncersSlices are the host slices the syncer wrote, by name, as their
// endpoints' first addresses.
func syncersSlices(t *testing.T, host *fake.Clientset) map[string][]string {
	t.Helper()
	list, err := host.DiscoveryV1().EndpointSlices(tr.HostNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, s := range list.Items {
		if s.Labels[discoveryv1.LabelManagedBy] != contract.EndpointSliceManager {
			continue
		}
		out[s.Name] = []string{}
		for _, e := range s.Endpoints {
			out[s.Name] = append(out[s.Name], e.Addresses[0])
		}
	}
	return out
}

// A Service with a selector: the host's controller names its host pods, and
// the syncer adds only the endpoints on dedicated nodes, and only while the
// tenant has some.
// manySlicesLastDedicated is MaxHostEndpointSlices slices of host pods,
// then one, last by name, with an endpoint on a dedicated node.
func manySlicesLastDedicated() []runtime.Object {
	var out []runtime.Object
	for i := range MaxHostEndpointSlices {
		out = append(out, tenantSlice(fmt.Sprintf("db-%02d", i), discoveryv1.AddressTypeIPv4, "10.244.1.5"))
	}
	return append(out, tenantSlice(fmt.Sprintf("db-%02d", MaxHostEndpointSlices), discoveryv1.AddressTypeIPv4, "10.244.2.7"))
}

func TestEndpointSliceSyncerAddsDedicatedEndpointsOfSelectedServices(t *testing.T) {
	svc, hostSvc := tenantService(map[string]string{"app": "db"})
	// A copy of db-a the syncer wrote earlier, when 10.244.2.7 was there.
	staleCopy, _ := tr.HostEndpointSlices(hostSvc, []*discoveryv1.EndpointSlice{tenantSlice("db-a", discoveryv1.AddressTypeIPv4, "10.244.2.7")}, func(string) bool { return true })
	tests := []struct {
		name   string
		slices []runtime.Object
		cidrs  []netip.Prefix
		stale  bool
		want   map[string][]string
	}{
		{"dedicated endpoints only, in the slices that have some",
			[]runtime.Object{
				tenantSlice("db-a", discoveryv1.AddressTypeIPv4, "10.244.1.5", "10.244.2.7", "192.0.2.9", "10.244.2.8"),
				tenantSlice("db-b", discoveryv1.AddressTypeIPv4, "10.244.1.6"),
			},
			[]netip.Prefix{dedicatedCIDR}, false,
			map[string][]string{contract.HostName(tr.VirtualCluster, "shop", "db-a"): {"10.244.2.7", "10.244.2.8"}}},
		{"no endpoint on a dedicated node",
			[]runtime.Object{tenantSlice("db-a", discoveryv1.AddressTypeIPv4, "10.244.1.5", "192.0.2.9")},
			[]netip.Prefix{dedicatedCIDR}, false, map[string][]string{}},
		{"no dedicated nodes",
			[]runtime.Object{tenantSlice("db-a", discoveryv1.AddressTypeIPv4, "10.244.1.5", "10.244.2.7")},
			nil, false, map[string][]string{}},
		{"the dedicated endpoint is gone: its copy goes",
			[]runtime.Object{tenantSlice("db-a", discoveryv1.AddressTypeIPv4, "10.244.1.5")},
			[]netip.Prefix{dedicatedCIDR}, true, map[string][]string{}},
		{"the dedicated nodes are gone: the copy goes",
			[]runtime.Object{tenantSlice("db-a", discoveryv1.AddressTypeIPv4, "10.244.1.5", "10.244.2.7")},
			nil, true, map[string][]string{}},
		{"slices of host pods only take no place under the slice bound", manySlicesLastDedicated(),
			[]netip.Prefix{dedicatedCIDR}, false,
			map[string][]string{contract.HostName(tr.VirtualCluster, "shop", fmt.Sprintf("db-%02d", MaxHostEndpointSlices)): {"10.244.2.7"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			controller := hostControllerSlice(hostSvc)
			hostObjs := []runtime.Object{hostSvc, controller, tenantHostPod("p", "10.244.1.5"), tenantHostPod("q", "10.244.1.6")}
			if tt.stale {
				hostObjs = append(hostObjs, staleCopy[0].DeepCopy())
			}
			e, host := endpointSliceSyncerOf(t, append([]runtime.Object{svc}, tt.slices...), hostObjs, tt.cidrs)
			if _, err := e.Sync(ctx, "shop/db"); err != nil {
				t.Fatal(err)
			}
			got := syncersSlices(t, host)
			if !maps.EqualFunc(got, tt.want, slices.Equal) {
				t.Errorf("host slices %v, want %v", got, tt.want)
			}
			for name := range tt.want {
				s, err := host.DiscoveryV1().EndpointSlices(tr.HostNamespace).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if s.Labels[discoveryv1.LabelServiceName] != hostSvc.Name || s.Labels[LabelTenantService] != "db" || s.Labels[contract.LabelTenantNamespace] != "shop" {
					t.Errorf("host slice %s has labels %v, want it the host Service %s's", name, s.Labels, hostSvc.Name)
				}
				if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != hostSvc.UID {
					t.Errorf("host slice %s is owned by %+v, want the host Service", name, s.OwnerReferences)
				}
			}
			if _, err := host.DiscoveryV1().EndpointSlices(tr.HostNamespace).Get(ctx, controller.Name, metav1.GetOptions{}); err != nil {
				t.Errorf("the host controller's slice of the selected Service is gone: %v", err)
			}
			select {
			case ev := <-e.recorder.(*record.FakeRecorder).Events:
				t.Errorf("event %q: the host pods the syncer leaves to the host's controller are no dropped endpoints", ev)
			default:
			}
		})
	}
}

// A Service without a selector admits the addresses of the tenant's host
// pods and of its dedicated nodes' pods, and nothing else.
func TestEndpointSliceSyncerAdmitsDedicatedAddressesWithoutASelector(t *testing.T) {
	svc, hostSvc := tenantService(nil)
	slice := tenantSlice("db-a", discoveryv1.AddressTypeIPv4, "10.244.1.5", "10.244.2.7", "192.0.2.9", "10.244.3.1")
	name := contract.HostName(tr.VirtualCluster, "shop", "db-a")
	tests := []struct {
		name  string
		cidrs []netip.Prefix
		want  []string
	}{
		{"with dedicated nodes", []netip.Prefix{dedicatedCIDR}, []string{"10.244.1.5", "10.244.2.7"}},
		{"without", nil, []string{"10.244.1.5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, host := endpointSliceSyncerOf(t, []runtime.Object{svc, slice}, []runtime.Object{hostSvc, tenantHostPod("p", "10.244.1.5")}, tt.cidrs)
			if _, err := e.Sync(context.Background(), "shop/db"); err != nil {
				t.Fatal(err)
			}
			if got := syncersSlices(t, host); len(got) != 1 || !slices.Equal(got[name], tt.want) {
				t.Errorf("host slices %v, want %s with %v", got, name, tt.want)
			}
			select {
			case ev := <-e.recorder.(*record.FakeRecorder).Events:
				if !strings.Contains(ev, "EndpointsNotCopied") {
					t.Errorf("event %q, want EndpointsNotCopied", ev)
				}
			default:
				t.Error("no event says the foreign addresses were not copied")
			}
		})
	}
}

func TestEndpointSliceSyncerKeys(t *testing.T) {
	selected, _ := tenantService(map[string]string{"app": "db"})
	bare := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "shop"}}
	// A host slice of a tenant Service deleted while the syncer was down.
	left := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "left", Namespace: tr.HostNamespace,
		Labels: map[string]string{contract.LabelTenantNamespace: "old", LabelTenantService: "gone"}}}
	tests := []struct {
		name  string
		cidrs []netip.Prefix
		want  []string
	}{
		{"without dedicated nodes: Services without a selector", nil, []string{"old/gone", "shop/bare"}},
		{"with dedicated nodes: every Service", []netip.Prefix{dedicatedCIDR}, []string{"old/gone", "shop/bare", "shop/db"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := endpointSliceSyncerOf(t, []runtime.Object{selected, bare}, []runtime.Object{left}, tt.cidrs)
			got := e.Keys()
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("keys() = %q, want %q", got, tt.want)
			}
		})
	}
	// A syncer built without the ConfigMap's reader has no dedicated nodes.
	e, _ := endpointSliceSyncerOf(t, []runtime.Object{selected, bare}, nil, nil)
	e.dedicated = nil
	if got := e.Keys(); !slices.Equal(got, []string{"shop/bare"}) {
		t.Errorf("keys() without a dedicated reader = %q, want [shop/bare]", got)
	}
}

func TestInPrefixes(t *testing.T) {
	in := inPrefixes(prefixes("10.244.1.0/24", "fd00:10:244:2::/64"))
	tests := []struct {
		addr string
		want bool
	}{
		{"10.244.1.9", true},
		{"10.244.1.0", true},
		{"10.244.2.9", false},
		{"192.0.2.7", false},
		{"fd00:10:244:2::9", true},
		{"fd00:10:244:3::9", false},
		{"::ffff:10.244.1.9", true},  // IPv4-mapped: the IPv4 address
		{"::ffff:10.244.2.9", false}, // mapped, but outside
		{"::10.244.1.9", false},      // IPv4-compatible, not mapped: an IPv6 address
		{"", false},
		{"junk", false},
		{"10.244.1.9/32", false},
		{"10.244.1", false},
	}
	for _, tt := range tests {
		if got := in(tt.addr); got != tt.want {
			t.Errorf("inPrefixes(...)(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
	if inPrefixes(nil)("10.244.1.9") {
		t.Error("no prefixes admit an address")
	}
}

var tr = Translator{VirtualCluster: "alpha", HostNamespace: "vc-alpha"}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func podLister(t *testing.T, pods ...runtime.Object) corelisters.PodLister {
	return corelisters.NewPodLister(testutil.Indexer(t, pods...))
}
