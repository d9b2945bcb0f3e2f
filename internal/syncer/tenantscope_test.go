package syncer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// hostRanges are the host's pod, Service and node ranges as the platform
// gives them (the image deny list): what a probe found in refusals.
var hostRanges = []string{"10.244.0.0/16", "10.96.0.0/16", "198.51.100.0/24"}

// assertNoHostWords fails when text, which the tenant reads, names the
// tenant's host namespace, the host pod of pod, or a host range.
func assertNoHostWords(t *testing.T, text string, pod *corev1.Pod) {
	t.Helper()
	for _, leak := range append([]string{tr.HostNamespace, contract.HostName(tr.VirtualCluster, pod.Namespace, pod.Name)}, hostRanges...) {
		if strings.Contains(text, leak) {
			t.Errorf("the tenant reads %q, which names the host's %q", text, leak)
		}
	}
}

// A pod whose image names a registry in the host's networks is refused
// with the field and the registry the tenant wrote: not with the deny
// list's range, the host namespace or the host pod's name. The error is
// what virtual-kubelet puts on the pod's status and ProviderCreateFailed
// event.
func TestImageRefusalNamesNothingOfTheHost(t *testing.T) {
	pod := simplePod("web", "100m")
	pod.Spec.Containers[0].Image = "198.51.100.7:5000/app:1"
	p, host := newProvider(t, nil, nil, pod)
	p.tr.Images = contract.ImagePolicy{Denied: hostRanges}
	err := p.CreatePod(context.Background(), pod)
	const want = "refused by the virtual node: spec.containers[0].image: images from 198.51.100.7:5000 are not allowed on the virtual node"
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("CreatePod = %v, want %q", err, want)
	}
	assertNoHostWords(t, err.Error(), pod)
	if len(host.Actions()) != 0 {
		t.Errorf("a refused pod reached the host: %v", host.Actions())
	}
}

// A pod the host refuses to create is told why in its own terms: the
// host's reason, the field path of its own spec (past the virtual node's
// helper init container), the VirtualCluster's quota that is full; never
// the host pod's name, the host namespace or the quota's name and figures,
// which the host's error carries.
func TestFailedHostCreateIsToldInTheTenantsTerms(t *testing.T) {
	hostName := contract.HostName(tr.VirtualCluster, "shop", "web")
	for _, tt := range []struct {
		name string
		host error
		want string
	}{
		{name: "a field the host finds invalid",
			host: apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, hostName, field.ErrorList{
				field.Invalid(field.NewPath("spec", "containers").Index(0).Child("lifecycle", "preStop", "sleep", "seconds"), 3600,
					"must be greater than 0 and less than terminationGracePeriodSeconds (300)"),
				field.Invalid(field.NewPath("spec", "initContainers").Index(1).Child("image"), "tool", "image of pod "+tr.HostNamespace+"/"+hostName),
			}),
			want: "the host did not create the pod: spec.containers[0].lifecycle.preStop.sleep.seconds: Invalid value: 3600: must be greater than 0 and less than terminationGracePeriodSeconds (300); " +
				`spec.initContainers[0].image: Invalid value: "tool": image of pod shop/web`},
		{name: "the share's quota",
			host: apierrors.NewForbidden(corev1.Resource("pods"), hostName,
				errors.New("exceeded quota: alpha-tenant-share, requested: requests.cpu=100m, used: requests.cpu=2, limited: requests.cpu=2")),
			want: "the host did not create the pod: the VirtualCluster's spec.promoteResources.resources.cpu quota is full"},
		{name: "the host's Pod Security",
			host: apierrors.NewForbidden(corev1.Resource("pods"), hostName,
				errors.New(`violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`)),
			want: `the host did not create the pod: forbidden by the host: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := simplePod("web", "100m")
			// A pod with a subdomain gets the virtual node's /etc/hosts
			// helper first among its host pod's init containers.
			pod.Spec.Hostname, pod.Spec.Subdomain = "web", "db"
			pod.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "tool"}}
			p, host := newProvider(t, nil, nil, pod)
			p.tr.HelperImage = "nest-syncer:dev"
			host.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tt.host
			})
			// Stopped, CreatePod makes one attempt instead of waiting out
			// its retries.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := p.CreatePod(ctx, pod)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("CreatePod =\n  %v\nwant\n  %s", err, tt.want)
			}
			assertNoHostWords(t, err.Error(), pod)
			if !errors.Is(err, tt.host) {
				t.Error("the error no longer wraps the host's, which the syncer's own checks read")
			}
		})
	}
}

// The host kubelet's events and status messages name the host pod, its
// namespace and UID, its host node and the host copies of what it mounts:
// the tenant reads its own names instead.
func TestHostKubeletWordsAreTheTenants(t *testing.T) {
	pod := simplePod("web", "100m")
	pod.Spec.NodeName = tr.NodeName
	hp := hostPodOf(t, pod)
	hp.Spec.NodeName = "host-worker-2"
	hp.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}}
	settings := contract.HostName(tr.VirtualCluster, "shop", "settings")
	p, _ := newProvider(t, nil, []runtime.Object{hp}, pod)
	s := &syncer{provider: p, recorder: p.recorder}

	s.forwardEvent(&corev1.Event{
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: hp.Name}, Source: corev1.EventSource{Component: "kubelet"},
		Type: corev1.EventTypeWarning, Reason: "BackOff", LastTimestamp: metav1.NewTime(time.Now()),
		Message: "Back-off restarting failed container app in pod " + hp.Name + "_" + tr.HostNamespace + "(" + string(hp.UID) + ")",
	})
	want := "Warning BackOff Back-off restarting failed container app in pod web_shop(" + string(pod.UID) + ")"
	if got := drainEvents(p.recorder); got != want {
		t.Errorf("forwarded event %q, want %q", got, want)
	}

	hp.Status.Message = "Pod was rejected on host-worker-2"
	hp.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
		Reason: "CreateContainerConfigError", Message: `configmap "` + settings + `" not found`,
	}}}}
	hp.Status.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionFalse,
		Message: "pod " + tr.HostNamespace + "/" + hp.Name + " at 10.244.1.5 cannot reach 10.96.0.1"}}
	status := TenantStatus(pod, hp)
	if got := status.ContainerStatuses[0].State.Waiting.Message; got != `configmap "settings" not found` {
		t.Errorf("waiting message %q, want the tenant's ConfigMap named", got)
	}
	if got := status.Message; got != "Pod was rejected on "+tr.NodeName {
		t.Errorf("status message %q, want the virtual node named", got)
	}
	var ready string
	for _, c := range status.Conditions {
		if c.Type == corev1.ContainersReady {
			ready = c.Message
		}
	}
	if want := "pod shop/web at 10.244.1.5 cannot reach <host address>"; ready != want {
		t.Errorf("condition message %q, want %q", ready, want)
	}
}
