package syncer

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// Tenant pods get the variables the kubelet would give them in the tenant
// cluster, with the addresses host pods reach: the API server's for
// KUBERNETES_* (overriding the host kubelet's, which name the same port), and
// each Service of the namespace unless service links are off.
func TestServiceVariablesFollowTheKubelet(t *testing.T) {
	tr := Translator{Translation: contract.Translation{VirtualCluster: "alpha", HostNamespace: "vc-alpha", APIServerHost: "10.96.0.6", APIServerPort: 443, DNSServer: "10.96.0.6", ClusterDomain: "cluster.local"}}
	services := []ServiceAddress{
		AddressOf(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "foo-service"}, Spec: corev1.ServiceSpec{ClusterIP: "10.96.7.7",
			Ports: []corev1.ServicePort{{Name: "http", Port: 8765, Protocol: corev1.ProtocolTCP}, {Port: 53, Protocol: corev1.ProtocolUDP}}}}, "10.96.9.9"),
		AddressOf(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "headless"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Port: 80}}}}, ""),
	}
	pod := simplePod("web", "100m")
	pod.Namespace = "shop"
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "FOO_SERVICE_PORT", Value: "mine"}}
	pt, err := tr.TranslatePod(pod, defaultMetadata, services)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range pt.Pod.Spec.Containers[0].Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("variable %s set twice", e.Name)
		}
		env[e.Name] = e.Value
	}
	for name, want := range map[string]string{
		"KUBERNETES_SERVICE_HOST": "10.96.0.6", "KUBERNETES_SERVICE_PORT": "443", "KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT": "tcp://10.96.0.6:443", "KUBERNETES_PORT_443_TCP": "tcp://10.96.0.6:443", "KUBERNETES_PORT_443_TCP_ADDR": "10.96.0.6",
		// The host copy's ClusterIP, which host pods reach.
		"FOO_SERVICE_SERVICE_HOST": "10.96.9.9", "FOO_SERVICE_SERVICE_PORT": "8765", "FOO_SERVICE_SERVICE_PORT_HTTP": "8765",
		"FOO_SERVICE_PORT_8765_TCP": "tcp://10.96.9.9:8765", "FOO_SERVICE_PORT_53_UDP": "udp://10.96.9.9:53", "FOO_SERVICE_PORT_53_UDP_PROTO": "udp",
		"FOO_SERVICE_PORT_8765_TCP_PORT": "8765",
		// The container sets this one itself, and it wins.
		"FOO_SERVICE_PORT": "mine",
	} {
		if env[name] != want {
			t.Errorf("%s=%q, want %q", name, env[name], want)
		}
	}
	if _, ok := env["HEADLESS_SERVICE_HOST"]; ok {
		t.Error("a headless Service got variables")
	}
	if pt.Pod.Spec.Containers[0].Env[len(pt.Pod.Spec.Containers[0].Env)-1].Name != "FOO_SERVICE_PORT" {
		t.Error("the container's own variables must come after the service variables they may refer to")
	}

	pod.Spec.EnableServiceLinks = ptr.To(false)
	pt, err = tr.TranslatePod(pod, defaultMetadata, services)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pt.Pod.Spec.Containers[0].Env {
		if e.Name == "FOO_SERVICE_SERVICE_HOST" {
			t.Error("service links off, yet the namespace's Services have variables")
		}
	}
	if ptr.Deref(pt.Pod.Spec.EnableServiceLinks, true) {
		t.Error("the host kubelet must not add host Services' variables")
	}
}

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

// A variable from one of the tenant pod's labels or annotations (an indexed
// Job's completion index, for one) reads a host pod annotation under Nest's
// prefix that holds the tenant's value: the host kubelet resolves it at each
// container start, and the tenant's own key never reaches the host pod.
func TestLabelAndAnnotationVariablesAreTheTenants(t *testing.T) {
	pod := simplePod("job-1", "100m")
	pod.Annotations = map[string]string{"batch.kubernetes.io/job-completion-index": "3"}
	pod.Labels = map[string]string{"team": "blue"}
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	pod.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "JOB_COMPLETION_INDEX", ValueFrom: field("metadata.annotations['batch.kubernetes.io/job-completion-index']")},
		{Name: "TEAM", ValueFrom: field("metadata.labels['team']")},
		{Name: "MISSING", ValueFrom: field("metadata.labels['absent']")},
	}
	pt, err := tr.TranslatePod(pod, contract.MetadataAllowList{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, copied := pt.Pod.Annotations["batch.kubernetes.io/job-completion-index"]; copied {
		t.Fatal("the tenant's annotation reached the host pod")
	}
	got := map[string]corev1.EnvVar{}
	for _, e := range pt.Pod.Spec.Containers[0].Env {
		got[e.Name] = e
	}
	for name, want := range map[string]string{"JOB_COMPLETION_INDEX": "3", "TEAM": "blue", "MISSING": ""} {
		e := got[name]
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil {
			t.Errorf("%s: %+v, want a field reference", name, e)
			continue
		}
		key, ok := subscript(e.ValueFrom.FieldRef.FieldPath, "metadata.annotations")
		if !ok || !strings.HasPrefix(key, "nest.dev/") {
			t.Errorf("%s reads %s, want an annotation under nest.dev/", name, e.ValueFrom.FieldRef.FieldPath)
			continue
		}
		if v, ok := pt.Pod.Annotations[key]; !ok || v != want {
			t.Errorf("%s: host annotation %s = %q (present %v), want %q", name, key, v, ok, want)
		}
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
	hostCopy := &corev1.Service{ObjectMeta: hostMeta("alpha", "web"), Spec: corev1.ServiceSpec{ClusterIP: "10.96.9.9"}}
	s := &serviceSyncer{tr: tr,
		tenantServices: corelisters.NewServiceLister(indexerOf(t, copied, bare)),
		tenantSlices:   discoverylisters.NewEndpointSliceLister(indexerOf(t)),
		hostServices:   corelisters.NewServiceLister(indexerOf(t, hostCopy)).Services(tr.HostNamespace)}
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
	delete(own.Labels, LabelManagedBy)
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
	delete(own.Labels, LabelManagedBy)
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
			s := &serviceSyncer{tr: tr,
				tenantServices: corelisters.NewServiceLister(indexerOf(t, tt.tenant)),
				tenantSlices:   discoverylisters.NewEndpointSliceLister(indexerOf(t)),
				hostServices:   corelisters.NewServiceLister(indexerOf(t, host...)).Services(tr.HostNamespace)}
			got := ""
			for _, r := range s.Records() {
				if r.Name == name {
					got = r.IP
				}
			}
			if got != tt.want {
				t.Errorf("record %s = %q, want %q", name, got, tt.want)
			}
			if a := s.addresses("kube-system"); len(a) != 1 || a[0].IP != tt.want {
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
	s.tenantSlices = discoverylisters.NewEndpointSliceLister(indexerOf(t))
	ahead := uint32(time.Now().Unix()) + 1000
	if err := os.WriteFile(filepath.Join(s.dnsDir, contract.ZoneFileName), contract.ClusterZone(tr.ClusterDomain, ahead, []string{"old"}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.start(); err != nil {
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
