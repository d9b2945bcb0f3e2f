package service

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
)

// The pod IP the cluster DNS syncer points kube-dns at in these tests.
const controlPlaneIP = "10.244.0.7"

func TestClusterDNSService(t *testing.T) {
	svc := tr.ClusterDNSService()
	if svc.Namespace != "kube-system" || svc.Name != "kube-dns" {
		t.Errorf("Service %s/%s, want kube-system/kube-dns", svc.Namespace, svc.Name)
	}
	if svc.Spec.ClusterIP != tr.DNSServer || svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service of type %q asks for ClusterIP %q, want a ClusterIP Service at DNSServer %s", svc.Spec.Type, svc.Spec.ClusterIP, tr.DNSServer)
	}
	if len(svc.Spec.Selector) != 0 {
		t.Errorf("Service has selector %v, want none: the syncer writes its endpoints", svc.Spec.Selector)
	}
	if svc.Labels[contract.LabelManagedBy] != contract.ManagedByValue || svc.Labels["k8s-app"] != "kube-dns" {
		t.Errorf("Service labels %v, want %s=%s and k8s-app=kube-dns", svc.Labels, contract.LabelManagedBy, contract.ManagedByValue)
	}
	type port struct {
		name     string
		protocol corev1.Protocol
		port     int32
		target   string
	}
	var got []port
	for _, p := range svc.Spec.Ports {
		got = append(got, port{p.Name, p.Protocol, p.Port, p.TargetPort.String()})
	}
	want := []port{
		{"dns", corev1.ProtocolUDP, 53, fmt.Sprint(contract.DefaultDNSPort)},
		{"dns-tcp", corev1.ProtocolTCP, 53, fmt.Sprint(contract.DefaultDNSPort)},
		{"https", corev1.ProtocolTCP, 443, "0"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ports %+v, want %+v", got, want)
	}
	if !IsClusterDNSService(svc) {
		t.Error("IsClusterDNSService is false for the Service ClusterDNSService builds")
	}
}

func TestIsClusterDNSService(t *testing.T) {
	ours := tr.ClusterDNSService()
	tests := []struct {
		name   string
		mutate func(*corev1.Service)
		want   bool
	}{
		{"ours", func(*corev1.Service) {}, true},
		{"the tenant's own, without the label", func(s *corev1.Service) { delete(s.Labels, contract.LabelManagedBy) }, false},
		{"labelled by someone else", func(s *corev1.Service) { s.Labels[contract.LabelManagedBy] = "Helm" }, false},
		{"another namespace", func(s *corev1.Service) { s.Namespace = "shop" }, false},
		{"another name", func(s *corev1.Service) { s.Name = "coredns" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ours.DeepCopy()
			tt.mutate(s)
			if got := IsClusterDNSService(s); got != tt.want {
				t.Errorf("IsClusterDNSService(%s/%s, labels %v) = %v, want %v", s.Namespace, s.Name, s.Labels, got, tt.want)
			}
		})
	}
}

func TestClusterDNSEndpointSlice(t *testing.T) {
	dnsPorts := []string{"dns UDP 1053", "dns-tcp TCP 1053"}
	tests := []struct {
		name     string
		podIP    string
		apiPort  int32
		wantType discoveryv1.AddressType
		ports    []string
	}{
		{"IPv4 with the API server's port", "10.244.0.7", 6443, discoveryv1.AddressTypeIPv4, append(slices.Clone(dnsPorts), "https TCP 6443")},
		{"IPv4 before the API server published its port", "10.244.0.7", 0, discoveryv1.AddressTypeIPv4, dnsPorts},
		{"IPv6", "fd00:10:244::7", 6443, discoveryv1.AddressTypeIPv6, append(slices.Clone(dnsPorts), "https TCP 6443")},
		{"IPv6 without the API port", "fd00:10:244::7", 0, discoveryv1.AddressTypeIPv6, dnsPorts},
		{"IPv4-mapped IPv6 is IPv4", "::ffff:10.244.0.7", 0, discoveryv1.AddressTypeIPv4, dnsPorts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ClusterDNSEndpointSlice(tt.podIP, tt.apiPort)
			if s.Namespace != "kube-system" || s.Name != "kube-dns-nest" {
				t.Errorf("slice %s/%s, want kube-system/kube-dns-nest", s.Namespace, s.Name)
			}
			if s.AddressType != tt.wantType {
				t.Errorf("address type %s, want %s", s.AddressType, tt.wantType)
			}
			if len(s.Endpoints) != 1 || !slices.Equal(s.Endpoints[0].Addresses, []string{tt.podIP}) || !ptr.Deref(s.Endpoints[0].Conditions.Ready, false) {
				t.Errorf("endpoints %+v, want one ready endpoint at %s", s.Endpoints, tt.podIP)
			}
			var ports []string
			for _, p := range s.Ports {
				ports = append(ports, fmt.Sprintf("%s %s %d", ptr.Deref(p.Name, ""), ptr.Deref(p.Protocol, ""), ptr.Deref(p.Port, 0)))
			}
			if !slices.Equal(ports, tt.ports) {
				t.Errorf("ports %q, want %q", ports, tt.ports)
			}
			for k, v := range map[string]string{
				discoveryv1.LabelServiceName: "kube-dns",
				discoveryv1.LabelManagedBy:   contract.EndpointSliceManager,
				contract.LabelManagedBy:      contract.ManagedByValue,
			} {
				if s.Labels[k] != v {
					t.Errorf("label %s=%q, want %q (labels %v)", k, s.Labels[k], v, s.Labels)
				}
			}
		})
	}
}

// kubernetesSlice is the tenant API server's slice of its "kubernetes"
// Service, publishing port on the control-plane pod.
func kubernetesSlice(ports ...discoveryv1.EndpointPort) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault, Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{controlPlaneIP}}},
		Ports:       ports,
	}
}

func httpsPort(port int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To("https"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}
}

// clusterDNSSyncerOf is a cluster DNS syncer whose listers hold cached and
// whose tenant client holds live: the cache may lag the tenant.
func clusterDNSSyncerOf(t *testing.T, podIP string, cached []runtime.Object, live ...runtime.Object) (*clusterDNSSyncer, *fake.Clientset) {
	t.Helper()
	services, slices, _ := testutil.ByKind(t, cached)
	tenant := fake.NewClientset(live...)
	return &clusterDNSSyncer{
		tr: tr, podIP: podIP, tenant: tenant,
		services: corelisters.NewServiceLister(testutil.Indexer(t, services...)),
		slices:   discoverylisters.NewEndpointSliceLister(testutil.Indexer(t, slices...)),
	}, tenant
}

// writes are the tenant client's create, update and delete calls, as
// "verb resource name".
func writes(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		switch a.GetVerb() {
		case "create", "update":
			o := a.(k8stesting.CreateAction).GetObject().(metav1.Object)
			out = append(out, fmt.Sprintf("%s %s %s", a.GetVerb(), a.GetResource().Resource, o.GetName()))
		case "delete":
			out = append(out, fmt.Sprintf("delete %s %s", a.GetResource().Resource, a.(k8stesting.DeleteAction).GetName()))
		}
	}
	return out
}

func TestClusterDNSSyncerCreatesTheServiceThenItsSlice(t *testing.T) {
	ctx := context.Background()
	c, tenant := clusterDNSSyncerOf(t, controlPlaneIP, []runtime.Object{kubernetesSlice(httpsPort(6443))})
	if _, err := c.sync(ctx, clusterDNSKey); err != nil {
		t.Fatal(err)
	}
	if got, want := writes(tenant), []string{"create services kube-dns", "create endpointslices kube-dns-nest"}; !slices.Equal(got, want) {
		t.Fatalf("writes %q, want %q", got, want)
	}
	svc, err := tenant.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != tr.DNSServer || !IsClusterDNSService(svc) {
		t.Errorf("Service with ClusterIP %q and labels %v, want DNSServer %s and the syncer's label", svc.Spec.ClusterIP, svc.Labels, tr.DNSServer)
	}
	s, err := tenant.DiscoveryV1().EndpointSlices("kube-system").Get(ctx, "kube-dns-nest", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := ClusterDNSEndpointSlice(controlPlaneIP, 6443)
	if s.Endpoints[0].Addresses[0] != controlPlaneIP || len(s.Ports) != 3 || *s.Ports[2].Port != 6443 || s.Labels[discoveryv1.LabelServiceName] != "kube-dns" {
		t.Errorf("slice %+v, want %+v", s, want)
	}
}

// A tenant whose Service range does not hold DNSServer refuses it: the
// Service takes whatever address the tenant allocates.
func TestClusterDNSSyncerFallsBackToAnAllocatedClusterIP(t *testing.T) {
	ctx := context.Background()
	c, tenant := clusterDNSSyncerOf(t, controlPlaneIP, nil)
	var asked []string
	tenant.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc := a.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		asked = append(asked, svc.Spec.ClusterIP)
		if svc.Spec.ClusterIP == tr.DNSServer {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, svc.Name, field.ErrorList{
				field.Invalid(field.NewPath("spec", "clusterIPs").Index(0), svc.Spec.ClusterIP, "provided IP is not in the valid range")})
		}
		return false, nil, nil
	})
	if _, err := c.sync(ctx, clusterDNSKey); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(asked, []string{tr.DNSServer, ""}) {
		t.Errorf("Services created with ClusterIPs %q, want %s then none (allocated)", asked, tr.DNSServer)
	}
	svc, err := tenant.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil || !IsClusterDNSService(svc) {
		t.Fatalf("Service %+v (%v), want the syncer's", svc, err)
	}
	if _, err := tenant.DiscoveryV1().EndpointSlices("kube-system").Get(ctx, "kube-dns-nest", metav1.GetOptions{}); err != nil {
		t.Errorf("no slice after the fallback: %v", err)
	}
}

// Any other failure is an error, and retried: no Service without DNSServer.
func TestClusterDNSSyncerRetriesOtherCreateErrors(t *testing.T) {
	c, tenant := clusterDNSSyncerOf(t, controlPlaneIP, nil)
	tenant.PrependReactor("create", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "kube-dns", fmt.Errorf("quota"))
	})
	if _, err := c.sync(context.Background(), clusterDNSKey); err == nil {
		t.Fatal("sync succeeded though the Service could not be created")
	}
	if got, want := writes(tenant), []string{"create services kube-dns"}; !slices.Equal(got, want) {
		t.Errorf("writes %q, want %q: one try, no slice", got, want)
	}
}

// A kube-dns Service of the tenant's own (a kubeadm-style CoreDNS it
// installed) is left alone, and gets no slice of the syncer's.
func TestClusterDNSSyncerLeavesTheTenantsOwnKubeDNSAlone(t *testing.T) {
	own := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.0.0.10", Selector: map[string]string{"k8s-app": "kube-dns"}},
	}
	c, tenant := clusterDNSSyncerOf(t, controlPlaneIP, []runtime.Object{own, kubernetesSlice(httpsPort(6443))}, own)
	if _, err := c.sync(context.Background(), clusterDNSKey); err != nil {
		t.Fatal(err)
	}
	if got := writes(tenant); len(got) != 0 {
		t.Errorf("writes %q to the tenant, want none", got)
	}
}

// The tenant replaced the syncer's kube-dns with its own: the syncer's slice
// would add the control-plane pod to its endpoints, and goes. A slice of the
// same name that the syncer did not write stays.
func TestClusterDNSSyncerDeletesItsSliceFromTheTenantsOwnKubeDNS(t *testing.T) {
	own := tr.ClusterDNSService()
	delete(own.Labels, contract.LabelManagedBy)
	ours := ClusterDNSEndpointSlice(controlPlaneIP, 6443)
	ours.UID = "ours"
	theirs := ours.DeepCopy()
	delete(theirs.Labels, contract.LabelManagedBy)
	tests := []struct {
		name  string
		slice *discoveryv1.EndpointSlice
		want  []string
	}{
		{"the syncer's", ours, []string{"delete endpointslices kube-dns-nest"}},
		{"the tenant's", theirs, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, tenant := clusterDNSSyncerOf(t, controlPlaneIP, []runtime.Object{own, tt.slice}, own, tt.slice)
			if _, err := c.sync(context.Background(), clusterDNSKey); err != nil {
				t.Fatal(err)
			}
			if got := writes(tenant); !slices.Equal(got, tt.want) {
				t.Errorf("writes %q, want %q", got, tt.want)
			}
		})
	}
}

// The control-plane pod restarted with a new IP: the slice follows it.
func TestClusterDNSSyncerUpdatesAStaleSlice(t *testing.T) {
	ctx := context.Background()
	svc := tr.ClusterDNSService()
	stale := ClusterDNSEndpointSlice("10.244.0.3", 6443)
	stale.UID, stale.ResourceVersion = "slice-uid", "7"
	c, tenant := clusterDNSSyncerOf(t, controlPlaneIP, []runtime.Object{svc, stale, kubernetesSlice(httpsPort(6443))}, svc, stale)
	if _, err := c.sync(ctx, clusterDNSKey); err != nil {
		t.Fatal(err)
	}
	if got, want := writes(tenant), []string{"update endpointslices kube-dns-nest"}; !slices.Equal(got, want) {
		t.Fatalf("writes %q, want %q", got, want)
	}
	s, err := tenant.DiscoveryV1().EndpointSlices("kube-system").Get(ctx, "kube-dns-nest", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Endpoints) != 1 || !slices.Equal(s.Endpoints[0].Addresses, []string{controlPlaneIP}) || s.UID != "slice-uid" {
		t.Errorf("slice %s endpoints %+v, want the same slice at %s only", s.UID, s.Endpoints, controlPlaneIP)
	}
}

// A slice that is as it should be is not written again.
func TestClusterDNSSyncerLeavesAnUpToDateSlice(t *testing.T) {
	svc := tr.ClusterDNSService()
	current := ClusterDNSEndpointSlice(controlPlaneIP, 6443)
	c, tenant := clusterDNSSyncerOf(t, controlPlaneIP, []runtime.Object{svc, current, kubernetesSlice(httpsPort(6443))}, svc, current)
	if _, err := c.sync(context.Background(), clusterDNSKey); err != nil {
		t.Fatal(err)
	}
	if got := writes(tenant); len(got) != 0 {
		t.Errorf("writes %q, want none", got)
	}
}

// The API server published its port after the slice was written: the slice
// gets the https port.
func TestClusterDNSSyncerAddsTheAPIPortOnceKnown(t *testing.T) {
	ctx := context.Background()
	svc := tr.ClusterDNSService()
	early := ClusterDNSEndpointSlice(controlPlaneIP, 0)
	c, tenant := clusterDNSSyncerOf(t, controlPlaneIP, []runtime.Object{svc, early, kubernetesSlice(httpsPort(6443))}, svc, early)
	if _, err := c.sync(ctx, clusterDNSKey); err != nil {
		t.Fatal(err)
	}
	s, err := tenant.DiscoveryV1().EndpointSlices("kube-system").Get(ctx, "kube-dns-nest", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Ports) != 3 || ptr.Deref(s.Ports[2].Name, "") != "https" || ptr.Deref(s.Ports[2].Port, 0) != 6443 {
		t.Errorf("slice ports %+v, want dns, dns-tcp and https on 6443", s.Ports)
	}
}

// The address type is immutable: a slice of the other family is deleted, to
// be created anew on the next pass.
func TestClusterDNSSyncerReplacesASliceOfTheOtherFamily(t *testing.T) {
	svc := tr.ClusterDNSService()
	v4 := ClusterDNSEndpointSlice(controlPlaneIP, 6443)
	c, tenant := clusterDNSSyncerOf(t, "fd00:10:244::7", []runtime.Object{svc, v4}, svc, v4)
	if _, err := c.sync(context.Background(), clusterDNSKey); err != nil {
		t.Fatal(err)
	}
	if got, want := writes(tenant), []string{"delete endpointslices kube-dns-nest"}; !slices.Equal(got, want) {
		t.Errorf("writes %q, want %q", got, want)
	}
}

func TestClusterDNSSyncerAPIServerPort(t *testing.T) {
	tests := []struct {
		name  string
		slice *discoveryv1.EndpointSlice
		want  int32
	}{
		{"no kubernetes slice yet", nil, 0},
		{"the https port", kubernetesSlice(httpsPort(6443)), 6443},
		{"https among others", kubernetesSlice(
			discoveryv1.EndpointPort{Name: ptr.To("metrics"), Port: ptr.To[int32](9090)}, httpsPort(7443)), 7443},
		{"no https port", kubernetesSlice(discoveryv1.EndpointPort{Name: ptr.To("metrics"), Port: ptr.To[int32](9090)}), 0},
		{"an unnamed port", kubernetesSlice(discoveryv1.EndpointPort{Port: ptr.To[int32](6443)}), 0},
		{"https without a port", kubernetesSlice(discoveryv1.EndpointPort{Name: ptr.To("https")}), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cached []runtime.Object
			if tt.slice != nil {
				cached = append(cached, tt.slice)
				// Another namespace's "kubernetes" slice is not the API server's.
				other := kubernetesSlice(httpsPort(1))
				other.Namespace = "shop"
				cached = append(cached, other)
			}
			c, _ := clusterDNSSyncerOf(t, controlPlaneIP, cached)
			if got := c.apiServerPort(); got != tt.want {
				t.Errorf("apiServerPort() = %d, want %d", got, tt.want)
			}
		})
	}
}
