package service

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/testutil"
)

var tr = Translator{Translation: contract.Translation{
	VirtualCluster: "alpha", HostNamespace: "vc-alpha", ClusterDomain: "cluster.local",
	APIServerHost: "10.96.0.5", APIServerPort: 6443, DNSServer: "10.96.0.6",
}}

func indexerOf(t *testing.T, objs ...runtime.Object) cache.Indexer {
	return testutil.Indexer(t, objs...)
}

// hostMeta is the metadata of the syncer's host copy of the tenant object
// shop/name of virtual cluster vc.
func hostMeta(vc, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: contract.HostName(vc, "shop", name), Namespace: tr.HostNamespace,
		Labels: contract.HostLabels(vc, "shop"), Annotations: contract.HostAnnotations("shop", name, "uid-"+name),
	}
}

// foreignMeta is the metadata of a host object that holds the host name of
// the tenant object shop/name but was not made for it.
func foreignMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: contract.HostName(tr.VirtualCluster, "shop", name), Namespace: tr.HostNamespace, UID: "foreign", Labels: map[string]string{"app": "host-thing"}}
}

// byKind sorts objects into Services, EndpointSlices and Pods, for the
// listers a syncer under test reads; any other kind fails the test.
func byKind(t *testing.T, objs []runtime.Object) (services, slices, pods []runtime.Object) {
	t.Helper()
	for _, o := range objs {
		switch o.(type) {
		case *corev1.Service:
			services = append(services, o)
		case *discoveryv1.EndpointSlice:
			slices = append(slices, o)
		case *corev1.Pod:
			pods = append(pods, o)
		default:
			t.Fatalf("no lister for %T", o)
		}
	}
	return services, slices, pods
}
