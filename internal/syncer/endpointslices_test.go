package syncer

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
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
	svc, _ := tr.HostService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: "tenant-svc"}})
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
		if s.Namespace != tr.HostNamespace || s.Labels[discoveryv1.LabelServiceName] != hostSvc.Name || s.Labels[LabelTenantOf] != tr.VirtualCluster ||
			s.Labels[discoveryv1.LabelManagedBy] != EndpointSliceManager || s.Labels[LabelTenantService] != "db" {
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
	hostPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: tr.HostNamespace, Labels: map[string]string{LabelTenantOf: tr.VirtualCluster}},
		Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}}}}
	// 10.244.9.9 was the finished host pod's: its IP is free for anyone now.
	tenant := fake.NewClientset(tenantSvc, tenantSlice("db-a", discoveryv1.AddressTypeIPv4, "10.244.1.5", "10.244.9.9", "10.244.1.5"))
	finished := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done", Namespace: tr.HostNamespace, Labels: map[string]string{LabelTenantOf: tr.VirtualCluster}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded, PodIPs: []corev1.PodIP{{IP: "10.244.9.9"}}}}
	controllerSlice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "db-controller", Namespace: tr.HostNamespace,
		Labels: map[string]string{discoveryv1.LabelServiceName: hostSvc.Name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4}
	host := fake.NewClientset(hostSvc, hostPod, finished, controllerSlice)
	tf, hf := informers.NewSharedInformerFactory(tenant, 0), informers.NewSharedInformerFactoryWithOptions(host, 0, informers.WithNamespace(tr.HostNamespace))
	e := &endpointSliceSyncer{
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

	if _, err := e.sync(ctx, "shop/db"); err != nil {
		t.Fatal(err)
	}
	got, err := host.DiscoveryV1().EndpointSlices(tr.HostNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ours []discoveryv1.EndpointSlice
	for _, sl := range got.Items {
		if sl.Labels[discoveryv1.LabelManagedBy] == EndpointSliceManager {
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
	if _, err := e.sync(ctx, "shop/db"); err != nil {
		t.Fatal(err)
	}
	got, _ = host.DiscoveryV1().EndpointSlices(tr.HostNamespace).List(ctx, metav1.ListOptions{})
	if len(got.Items) != 0 {
		t.Errorf("host slices %+v remain after the Service got a selector", got.Items)
	}
}
