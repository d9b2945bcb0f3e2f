package service

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
)

// A host copy asks for the tenant's ClusterIP only inside a host Service
// range and above its static band, so a tenant never takes an address the
// host's admins may assign (10.96.0.10 for the host's DNS, say).
func TestHostServiceAsksForTheTenantClusterIPOnlyInTheDynamicBand(t *testing.T) {
	tr := Translator{Translation: contract.Translation{VirtualCluster: "alpha", HostNamespace: "vc-alpha", HostServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}}}
	for ip, want := range map[string]string{
		"10.96.37.4": "10.96.37.4", // dynamic band: the same address
		"10.96.1.1":  "10.96.1.1",  // just above the 256 static addresses after 10.96.0.0
		"10.96.1.0":  "",           // the last static one
		"10.96.0.10": "",           // static band: the host's to assign
		"10.96.0.1":  "",           // the host's own kubernetes Service
		"10.100.3.3": "",           // outside every host range
		"None":       "None",       // headless stays headless
	} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}
		host, ok := tr.HostService(svc)
		if !ok {
			t.Fatalf("%s: no host copy", ip)
		}
		if host.Spec.ClusterIP != want {
			t.Errorf("tenant ClusterIP %s: host copy asks for %q, want %q", ip, host.Spec.ClusterIP, want)
		}
	}
	if got := staticBand(netip.MustParsePrefix("10.96.0.0/12")); got != 256 {
		t.Errorf("static band of a /12: %d, want 256", got)
	}
	if got := staticBand(netip.MustParsePrefix("10.96.0.0/24")); got != 16 {
		t.Errorf("static band of a /24: %d, want 16", got)
	}
}

// The zone file holds what the hosts file cannot: SRV records of named
// ports (per endpoint for a headless Service) and ExternalName CNAMEs.
func TestZoneRecordsFollowTheDNSSpecification(t *testing.T) {
	tr := Translator{Translation: contract.Translation{ClusterDomain: "cluster.local"}}
	svc := func(name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Ports: ports}}
	}
	web := svc("web", "10.96.1.5", corev1.ServicePort{Name: "http", Port: 80}, corev1.ServicePort{Port: 81}, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	ext := svc("ext", "")
	ext.Spec.Type, ext.Spec.ExternalName = corev1.ServiceTypeExternalName, "foo.example.com"
	headless := svc("db", corev1.ClusterIPNone, corev1.ServicePort{Name: "sql", Port: 5432})
	ready := true
	slice := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("sql"), Port: ptr.To[int32](5432), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.7"}, Hostname: ptr.To("db-0"), Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
			{Addresses: []string{"10.244.1.8"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
		}}
	var got []string
	got = append(got, tr.ZoneRecords(web, nil)...)
	got = append(got, tr.ZoneRecords(ext, nil)...)
	got = append(got, tr.ZoneRecords(headless, []*discoveryv1.EndpointSlice{slice})...)
	want := []string{
		"_http._tcp.web.shop.svc.cluster.local. 5 IN SRV 0 100 80 web.shop.svc.cluster.local.",
		"_dns._udp.web.shop.svc.cluster.local. 5 IN SRV 0 100 53 web.shop.svc.cluster.local.",
		"ext.shop.svc.cluster.local. 5 IN CNAME foo.example.com.",
		"_sql._tcp.db.shop.svc.cluster.local. 5 IN SRV 0 100 5432 db-0.db.shop.svc.cluster.local.",
		"_sql._tcp.db.shop.svc.cluster.local. 5 IN SRV 0 100 5432 10-244-1-8.db.shop.svc.cluster.local.",
	}
	if !slices.Equal(got, want) {
		t.Errorf("records\n got %q\nwant %q", got, want)
	}
	// Each SRV target of the headless Service resolves through the hosts file.
	names := map[string]bool{}
	for _, r := range tr.HeadlessRecords(headless, []*discoveryv1.EndpointSlice{slice}) {
		names[r.Name+"."] = true
	}
	for _, n := range []string{"db-0.db.shop.svc.cluster.local.", "10-244-1-8.db.shop.svc.cluster.local."} {
		if !names[n] {
			t.Errorf("no A record for SRV target %s", n)
		}
	}
	zone := string(contract.ClusterZone("cluster.local", 42, got))
	if !strings.Contains(zone, "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 42 ") {
		t.Errorf("zone lacks its SOA with serial 42:\n%s", zone)
	}
}

// Every tenant Service with a ClusterIP has an A record: its host copy's
// address, or its own when it has no host copy (no selector).
func TestServiceRecordsIncludeServicesWithoutHostCopies(t *testing.T) {
	copied := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.5.5", Selector: map[string]string{"app": "web"}}}
	bare := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "bare"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.6.6"}}
	hostCopy := &corev1.Service{ObjectMeta: testutil.CopyMeta(tr.HostNamespace, "alpha", "web"), Spec: corev1.ServiceSpec{ClusterIP: "10.96.9.9"}}
	s := &Syncer{tr: tr,
		tenantServices: corelisters.NewServiceLister(testutil.Indexer(t, copied, bare)),
		tenantSlices:   discoverylisters.NewEndpointSliceLister(testutil.Indexer(t)),
		hostServices:   corelisters.NewServiceLister(testutil.Indexer(t, hostCopy)).Services(tr.HostNamespace)}
	got := map[string]string{}
	for _, r := range s.Records() {
		got[r.Name] = r.IP
	}
	if got["web.shop.svc.cluster.local"] != "10.96.9.9" || got["bare.shop.svc.cluster.local"] != "10.96.6.6" {
		t.Errorf("records %v", got)
	}
}

// The syncer's kube-dns has no host copy: host pods reach the control-plane
// pod at DNSServer already. A kube-dns of the tenant's own is a Service like
// any other.
func TestHostServiceOfKubeDNS(t *testing.T) {
	ours := tr.ClusterDNSService()
	if _, copied := tr.HostService(ours); copied {
		t.Error("the syncer's kube-dns Service gets a host copy")
	}
	own := ours.DeepCopy()
	delete(own.Labels, contract.LabelManagedBy)
	own.Spec.Selector = map[string]string{"k8s-app": "kube-dns"}
	hostSvc, copied := tr.HostService(own)
	if !copied {
		t.Fatal("the tenant's own kube-dns Service gets no host copy")
	}
	if hostSvc.Name != contract.HostName(tr.VirtualCluster, "kube-system", "kube-dns") || hostSvc.Namespace != tr.HostNamespace {
		t.Errorf("host copy %s/%s", hostSvc.Namespace, hostSvc.Name)
	}
}

// Host pods resolve and reach the syncer's kube-dns at DNSServer, whatever
// ClusterIP the tenant gave it; the tenant's own kube-dns at its host copy's
// address, or its own without one.
func TestKubeDNSRecordAndAddress(t *testing.T) {
	const name = "kube-dns.kube-system.svc.cluster.local"
	ours := tr.ClusterDNSService()
	ours.Spec.ClusterIP = "10.0.0.10" // the tenant refused DNSServer
	own := ours.DeepCopy()
	delete(own.Labels, contract.LabelManagedBy)
	hostCopy, _ := tr.HostService(own)
	hostCopy.Spec.ClusterIP = "10.96.9.9"
	tests := []struct {
		name     string
		tenant   *corev1.Service
		hostCopy *corev1.Service
		want     string
	}{
		{"ours", ours, nil, tr.DNSServer},
		{"ours, with a host copy left from before", ours, hostCopy, tr.DNSServer},
		{"the tenant's own, copied", own, hostCopy, "10.96.9.9"},
		{"the tenant's own, not copied yet", own, nil, "10.0.0.10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var host []runtime.Object
			if tt.hostCopy != nil {
				host = append(host, tt.hostCopy)
			}
			s := &Syncer{tr: tr,
				tenantServices: corelisters.NewServiceLister(testutil.Indexer(t, tt.tenant)),
				tenantSlices:   discoverylisters.NewEndpointSliceLister(testutil.Indexer(t)),
				hostServices:   corelisters.NewServiceLister(testutil.Indexer(t, host...)).Services(tr.HostNamespace)}
			got := ""
			for _, r := range s.Records() {
				if r.Name == name {
					got = r.IP
				}
			}
			if got != tt.want {
				t.Errorf("record %s = %q, want %q", name, got, tt.want)
			}
			if a := s.Addresses("kube-system"); len(a) != 1 || a[0].IP != tt.want {
				t.Errorf("addresses = %+v, want kube-dns at %s", a, tt.want)
			}
		})
	}
}

// A writer that takes over a zone file (a syncer that starts leading, or
// restarts) writes a serial above the one it finds, even one ahead of the
// clock, so CoreDNS reloads the zone.
func TestZoneSerialGrowsAcrossWriters(t *testing.T) {
	s := newTestServiceSyncer(t, fake.NewClientset(), record.NewFakeRecorder(1))
	s.dnsDir = t.TempDir()
	s.tenantSlices = discoverylisters.NewEndpointSliceLister(testutil.Indexer(t))
	ahead := uint32(time.Now().Unix()) + 1000
	if err := os.WriteFile(filepath.Join(s.dnsDir, contract.ZoneFileName), contract.ClusterZone(tr.ClusterDomain, ahead, []string{"old"}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(s.dnsDir, contract.ZoneFileName))
	if err != nil {
		t.Fatal(err)
	}
	if got := contract.ZoneSerial(data); got <= ahead {
		t.Errorf("serial %d after taking over a zone of serial %d; want it to grow", got, ahead)
	}
}

func TestHostService(t *testing.T) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.0.0.9", Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}}},
	}
	h, ok := tr.HostService(svc)
	if !ok || h.Spec.Type != corev1.ServiceTypeClusterIP || h.Spec.ClusterIP != "" || h.Spec.Ports[0].NodePort != 0 {
		t.Fatalf("host service %+v", h)
	}
	if h.Spec.Selector["app"] != "web" || h.Spec.Selector[contract.LabelTenantOf] != "alpha" || h.Spec.Selector[contract.LabelTenantNamespace] != "shop" {
		t.Errorf("selector %v may select other tenants' pods", h.Spec.Selector)
	}
	for _, skip := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: "default"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"a": "b"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "shop"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}},
	} {
		if _, ok := tr.HostService(skip); ok {
			t.Errorf("%s is synced", skip.Name)
		}
	}
	manual, ok := tr.HostService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "manual", Namespace: "shop"}})
	if !ok || manual.Spec.Selector != nil {
		t.Errorf("a Service without a selector gets host copy %v (copied: %v), want one without a selector", manual, ok)
	}
	if ServiceNeedsUpdate(h, h) {
		t.Error("an unchanged Service needs an update")
	}
}

// Every field the syncer copies to a host Service is one a change to
// brings about an update, and the API server's defaults bring none.
func TestServiceNeedsUpdateSeesEveryCopiedField(t *testing.T) {
	base := &corev1.Service{Spec: corev1.ServiceSpec{SessionAffinity: corev1.ServiceAffinityClientIP,
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("http")}}}}
	defaulted := base.DeepCopy()
	defaulted.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(corev1.DefaultClientIPServiceAffinitySeconds)}}
	if ServiceNeedsUpdate(defaulted, base) {
		t.Error("the API server's default affinity timeout needs an update, for ever")
	}
	for name, change := range map[string]func(*corev1.Service){
		"affinity timeout": func(s *corev1.Service) {
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		},
		"appProtocol":       func(s *corev1.Service) { s.Spec.Ports[0].AppProtocol = ptr.To("h2c") },
		"no appProtocol":    func(s *corev1.Service) { s.Spec.Ports[0].AppProtocol = nil },
		"port":              func(s *corev1.Service) { s.Spec.Ports[0].Port = 81 },
		"affinity":          func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityNone },
		"unready addresses": func(s *corev1.Service) { s.Spec.PublishNotReadyAddresses = true },
		"selector":          func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "web"} },
	} {
		want := defaulted.DeepCopy()
		change(want)
		if !ServiceNeedsUpdate(defaulted, want) {
			t.Errorf("a change of %s needs no update", name)
		}
	}
}

func TestHostsFile(t *testing.T) {
	r1, _ := tr.ServiceRecord("shop", "web", "10.96.3.4")
	if _, ok := tr.ServiceRecord("shop", "headless", "None"); ok {
		t.Error("a headless Service got an address record")
	}
	a := HostsFile([]DNSRecord{r1, tr.APIServerRecord()})
	b := HostsFile([]DNSRecord{tr.APIServerRecord(), r1})
	if string(a) != string(b) || !strings.Contains(string(a), "10.96.3.4 web.shop.svc.cluster.local\n") || !strings.Contains(string(a), "10.96.0.5 kubernetes.default.svc.cluster.local\n") {
		t.Errorf("hosts file:\n%s", a)
	}
}

func TestHeadlessRecords(t *testing.T) {
	headless := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "shop"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"}},
	}
	slice := &discoveryv1.EndpointSlice{
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.7"}, Hostname: ptr.To("db-0"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.244.2.9"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
		},
	}
	fqdn := func(rs []DNSRecord) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.IP+" "+r.Name)
		}
		return out
	}
	got := fqdn(tr.HeadlessRecords(headless, []*discoveryv1.EndpointSlice{slice}))
	want := []string{"10.244.1.7 db.shop.svc.cluster.local", "10.244.1.7 db-0.db.shop.svc.cluster.local"}
	if !slices.Equal(got, want) {
		t.Errorf("ready endpoints only: got %v, want %v", got, want)
	}
	publish := headless.DeepCopy()
	publish.Spec.PublishNotReadyAddresses = true
	if got := fqdn(tr.HeadlessRecords(publish, []*discoveryv1.EndpointSlice{slice})); !slices.Contains(got, "10.244.2.9 db.shop.svc.cluster.local") {
		t.Errorf("publishNotReadyAddresses: not-ready endpoint missing from %v", got)
	}
	clusterIP := headless.DeepCopy()
	clusterIP.Spec.ClusterIP = "10.96.4.4"
	if got := tr.HeadlessRecords(clusterIP, []*discoveryv1.EndpointSlice{slice}); len(got) != 0 {
		t.Errorf("a ClusterIP Service got endpoint records %v", got)
	}
	fqdnSlice := slice.DeepCopy()
	fqdnSlice.AddressType = discoveryv1.AddressTypeFQDN
	if got := tr.HeadlessRecords(headless, []*discoveryv1.EndpointSlice{fqdnSlice}); len(got) != 0 {
		t.Errorf("FQDN endpoints became address records %v", got)
	}
}

func TestServiceCopyFailureIsAnEventOnTheTenantService(t *testing.T) {
	host := fake.NewClientset()
	host.PrependReactor("create", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("services"), contract.HostName(tr.VirtualCluster, "shop", "web"),
			errors.New("exceeded quota: alpha-object-budget, requested: services=1, used: services=20, limited: services=20"))
	})
	recorder := record.NewFakeRecorder(10)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}}
	s := newTestServiceSyncer(t, host, recorder, svc)
	if _, err := s.SyncService(context.Background(), "shop/web"); err == nil {
		t.Error("the refused copy is not an error, so it would not be retried")
	}
	select {
	case ev := <-recorder.Events:
		if !strings.HasPrefix(ev, "Warning HostServiceFailed") || !strings.Contains(ev, "the VirtualCluster's spec.virtualNode.objectBudget.services quota is full") {
			t.Errorf("event %q: want a warning naming the VirtualCluster's quota", ev)
		}
		for _, leak := range []string{tr.HostNamespace, contract.HostName(tr.VirtualCluster, "shop", "web"), "alpha-object-budget", "used: "} {
			if strings.Contains(ev, leak) {
				t.Errorf("event %q names the host's %q", ev, leak)
			}
		}
	default:
		t.Error("no event on the tenant Service")
	}
}

func TestServiceCopyIsNotWrittenOverAForeignService(t *testing.T) {
	foreign := &corev1.Service{ObjectMeta: testutil.ForeignMeta(tr.VirtualCluster, tr.HostNamespace, "web"), Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "host-thing"}}}
	host := fake.NewClientset(foreign)
	recorder := record.NewFakeRecorder(10)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}}}
	s := newTestServiceSyncer(t, host, recorder, svc)
	if _, err := s.SyncService(context.Background(), "shop/web"); !kindsync.IsTerminal(err) {
		t.Errorf("sync = %v, want a terminal error: retrying cannot free the name", err)
	}
	s.tenantServices = corelisters.NewServiceLister(testutil.Indexer(t))
	s.hostServices = corelisters.NewServiceLister(testutil.Indexer(t, foreign)).Services(tr.HostNamespace)
	_, _ = s.SyncService(context.Background(), "shop/web")
	got, err := host.CoreV1().Services(tr.HostNamespace).Get(context.Background(), foreign.Name, metav1.GetOptions{})
	if err != nil || got.Spec.Selector["app"] != "host-thing" {
		t.Errorf("foreign Service %+v (%v) was changed or deleted", got, err)
	}
	select {
	case ev := <-recorder.Events:
		if !strings.Contains(ev, "another object on the host holds the name of this Service's copy: rename the Service") || strings.Contains(ev, tr.HostNamespace) {
			t.Errorf("event %q does not say the name is taken, or names the host namespace", ev)
		}
	default:
		t.Error("no event on the tenant Service")
	}
}

// newTestServiceSyncer is a Syncer over host whose tenant cluster
// holds services and whose host informer cache is empty.
func newTestServiceSyncer(t *testing.T, host *fake.Clientset, recorder record.EventRecorder, services ...runtime.Object) *Syncer {
	return New(Config{
		Translator: tr, Host: host, Recorder: recorder,
		TenantServices: corelisters.NewServiceLister(testutil.Indexer(t, services...)),
		HostServices:   corelisters.NewServiceLister(testutil.Indexer(t)).Services(tr.HostNamespace),
	})
}
