package syncer

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// privilegedPod is a tenant pod whose init container, container and
// ephemeral container each ask for privileged, as upstream's e2e Job
// fixtures and kubectl debug --profile=sysadmin do.
func privilegedPod() *corev1.Pod {
	pod := simplePod("job", "100m")
	privileged := func() *corev1.SecurityContext { return &corev1.SecurityContext{Privileged: ptr.To(true)} }
	pod.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "img", SecurityContext: privileged()}}
	pod.Spec.Containers[0].SecurityContext = privileged()
	pod.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debug", Image: "img", SecurityContext: privileged()}}}
	return pod
}

// With Confine, no host container is privileged and the tenant pod keeps
// what it asked for; without it, translation leaves privileged alone for
// Pod Security to refuse.
func TestConfinePrivilegedClearsPrivilegedOnEveryHostContainer(t *testing.T) {
	pod := privilegedPod()
	confining := tr
	confining.ConfinePrivileged = true
	pt, err := confining.TranslatePod(pod, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	host := append(append(append([]corev1.Container{}, pt.Pod.Spec.InitContainers...), pt.Pod.Spec.Containers...), ephemeralAsContainers(pt.EphemeralContainers)...)
	if len(host) != 3 {
		t.Fatalf("host pod has %d containers of the three kinds, want 3", len(host))
	}
	for _, c := range host {
		if c.SecurityContext == nil || c.SecurityContext.Privileged != nil {
			t.Errorf("host container %s: securityContext %+v, want privileged cleared", c.Name, c.SecurityContext)
		}
	}
	if got := privilegedContainers(pod); strings.Join(got, ",") != "setup,app,debug" {
		t.Errorf("the tenant pod's privileged containers are now %v: translation changed it", got)
	}

	pt, err = tr.TranslatePod(pod, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !ptr.Deref(pt.Pod.Spec.Containers[0].SecurityContext.Privileged, false) {
		t.Error("without ConfinePrivileged translation cleared privileged: Pod Security is what refuses it")
	}
}

// Baseline refuses privileged, naming it, unless the virtual node confines
// it; every other baseline rule still holds for a confined pod.
func TestPodSecurityReadsConfinedPrivilegedAsTheHostPodHasIt(t *testing.T) {
	refusing, err := NewPodSecurity("baseline")
	if err != nil {
		t.Fatal(err)
	}
	confining, err := NewPodSecurity("baseline")
	if err != nil {
		t.Fatal(err)
	}
	confining.ConfinePrivileged = true

	pod := privilegedPod()
	if err := refusing.Check(pod); err == nil || !strings.Contains(err.Error(), "privileged") {
		t.Errorf("Refuse: check = %v, want a refusal naming privileged", err)
	}
	if err := confining.Check(pod); err != nil {
		t.Errorf("Confine: check = %v, want allowed", err)
	}
	if got := privilegedContainers(pod); len(got) != 3 {
		t.Errorf("the check changed the tenant pod: privileged containers %v", got)
	}
	pod.Spec.Containers[0].SecurityContext.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}
	if err := confining.Check(pod); err == nil || !strings.Contains(err.Error(), "SYS_ADMIN") {
		t.Errorf("Confine with SYS_ADMIN added: check = %v, want a refusal naming the capability", err)
	}
}

// A confined pod runs, and its tenant pod gets a Warning event that names
// the containers; a pod without privileged containers gets none.
func TestCreatePodWarnsAboutConfinedContainers(t *testing.T) {
	pod := privilegedPod()
	pod.Spec.EphemeralContainers = nil
	plain := simplePod("plain", "100m")
	p, host := newProvider(t, nil, nil, pod, plain)
	p.tr.ConfinePrivileged = true
	p.security.ConfinePrivileged = true
	for _, tp := range []*corev1.Pod{pod, plain} {
		if err := p.CreatePod(context.Background(), tp); err != nil {
			t.Fatalf("create %s: %v", tp.Name, err)
		}
	}
	got, err := host.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", pod.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sc := got.Spec.Containers[0].SecurityContext; sc == nil || sc.Privileged != nil {
		t.Errorf("host container securityContext %+v, want privileged cleared", sc)
	}
	events := drainEvents(p.recorder)
	if strings.Count(events, ReasonPrivilegedConfined) != 1 || !strings.Contains(events, "containers setup, app asked for privileged") {
		t.Errorf("events %q, want one %s naming setup and app", events, ReasonPrivilegedConfined)
	}
}
