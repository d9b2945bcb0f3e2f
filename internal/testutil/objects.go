package testutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// CopyMeta is the metadata of nest-syncer's host copy, in hostNamespace,
// of the tenant object shop/name of virtual cluster vc, whose UID is
// "uid-" + name.
func CopyMeta(hostNamespace, vc, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: contract.HostName(vc, "shop", name), Namespace: hostNamespace,
		Labels: contract.HostLabels(vc, "shop"), Annotations: contract.HostAnnotations("shop", name, "uid-"+name),
	}
}

// ForeignMeta is the metadata of a host object in hostNamespace that holds
// the host name of virtual cluster vc's tenant object shop/name but was not
// made for it.
func ForeignMeta(vc, hostNamespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: contract.HostName(vc, "shop", name), Namespace: hostNamespace, UID: "foreign", Labels: map[string]string{"app": "host-thing"}}
}

// ByKind sorts objects into Services, EndpointSlices and Pods, for the
// listers a syncer under test reads; any other kind fails the test.
func ByKind(t testing.TB, objs []runtime.Object) (services, slices, pods []runtime.Object) {
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

// CountActions counts the actions a fake clientset (its Actions method)
// recorded with one of verbs.
func CountActions(actions []k8stesting.Action, verbs ...string) int {
	n := 0
	for _, a := range actions {
		for _, v := range verbs {
			if a.GetVerb() == v {
				n++
			}
		}
	}
	return n
}
