package addons

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// MetalLB runs as upstream's manifests run it, less webhooks and
// memberlist: a speaker on every node's network with NET_RAW only, and the
// controller unprivileged with its webhooks off.
func TestLoadBalancerRunsL2SpeakersOnEveryNodeAndNoWebhooks(t *testing.T) {
	var speaker *appsv1.DaemonSet
	var controller *appsv1.Deployment
	for _, o := range LoadBalancer("img") {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			speaker = o
		case *appsv1.Deployment:
			controller = o
		case *corev1.Namespace:
			if o.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
				t.Errorf("namespace %s does not admit the speaker's host network", o.Name)
			}
		}
	}
	if speaker == nil || controller == nil {
		t.Fatal("no speaker DaemonSet or controller Deployment")
	}
	sp := speaker.Spec.Template.Spec
	if !sp.HostNetwork || len(sp.Tolerations) != 1 || sp.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("speaker: hostNetwork %v, tolerations %v; want the node's network on every node", sp.HostNetwork, sp.Tolerations)
	}
	sc := sp.Containers[0].SecurityContext
	if !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_RAW"}) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("speaker capabilities %+v, want NET_RAW only", sc.Capabilities)
	}
	for _, e := range sp.Containers[0].Env {
		if e.Name == "METALLB_ML_BIND_ADDR" {
			t.Error("the speaker starts memberlist")
		}
	}
	cc := controller.Spec.Template.Spec.Containers[0]
	if !slices.Contains(cc.Args, "--webhook-mode=disabled") || cc.Image != "img" || sp.Containers[0].Image != "img" {
		t.Errorf("controller args %v, images %s and %s", cc.Args, cc.Image, sp.Containers[0].Image)
	}
}
