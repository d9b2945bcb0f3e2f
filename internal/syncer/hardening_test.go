package syncer

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestHostPodSeccomp(t *testing.T) {
	runtimeDefault := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	tests := []struct {
		name          string
		pod           *corev1.PodSecurityContext
		container     *corev1.SeccompProfile
		wantContainer *corev1.SeccompProfile
	}{
		{name: "none set: RuntimeDefault"},
		{name: "an empty security context", pod: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true)}},
		{name: "the tenant's RuntimeDefault", pod: &corev1.PodSecurityContext{SeccompProfile: runtimeDefault}},
		{name: "Unconfined, which Pod Security refuses anyway", pod: &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}},
		{name: "a container's RuntimeDefault is kept", container: runtimeDefault, wantContainer: runtimeDefault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tenantPod()
			p.Spec.SecurityContext = tt.pod
			if tt.container != nil {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: tt.container}
			}
			pt, err := tr.TranslatePod(p, defaultMetadata, nil)
			if err != nil {
				t.Fatal(err)
			}
			sc := pt.Pod.Spec.SecurityContext
			if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod seccomp %+v, want RuntimeDefault", sc.SeccompProfile)
			}
			if tt.pod != nil && tt.pod.RunAsNonRoot != nil && !ptr.Deref(sc.RunAsNonRoot, false) {
				t.Error("the tenant's other security context fields were dropped")
			}
			if got := pt.Pod.Spec.Containers[0].SecurityContext.SeccompProfile; !ptrEqual(got, tt.wantContainer) {
				t.Errorf("container seccomp %+v, want %+v", got, tt.wantContainer)
			}
		})
	}
}

func ptrEqual(a, b *corev1.SeccompProfile) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func TestHostPodDropsNetRaw(t *testing.T) {
	tests := []struct {
		name     string
		caps     *corev1.Capabilities
		wantDrop []corev1.Capability
	}{
		{name: "none set", wantDrop: []corev1.Capability{"NET_RAW"}},
		{name: "the tenant's drops are kept", caps: &corev1.Capabilities{Drop: []corev1.Capability{"MKNOD"}}, wantDrop: []corev1.Capability{"MKNOD", "NET_RAW"}},
		{name: "ALL already dropped", caps: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, wantDrop: []corev1.Capability{"ALL"}},
		{name: "NET_RAW added by the tenant", caps: &corev1.Capabilities{Add: []corev1.Capability{"CAP_NET_RAW"}}, wantDrop: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tenantPod()
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "img"}, {Name: "sidecar", Image: "img", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)}}
			for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
				for i := range cs {
					if tt.caps != nil {
						cs[i].SecurityContext = &corev1.SecurityContext{Capabilities: tt.caps.DeepCopy()}
					}
				}
			}
			pt, err := tr.TranslatePod(p, defaultMetadata, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range slices.Concat(pt.Pod.Spec.InitContainers, pt.Pod.Spec.Containers) {
				if got := c.SecurityContext.Capabilities.Drop; !slices.Equal(got, tt.wantDrop) {
					t.Errorf("container %s drops %v, want %v", c.Name, got, tt.wantDrop)
				}
			}
			if tt.caps == nil && p.Spec.Containers[0].SecurityContext != nil {
				t.Error("translation changed the tenant pod")
			}
		})
	}
}

// Pod Security baseline, which every tenant pod meets, already refuses what
// the hardening does not override: an Unconfined seccomp profile anywhere,
// and adding NET_RAW back.
func TestBaselineRefusesWhatHardeningReliesOn(t *testing.T) {
	baseline, err := NewPodSecurity("baseline")
	if err != nil {
		t.Fatal(err)
	}
	unconfined := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	for name, mutate := range map[string]func(*corev1.Pod){
		"pod Unconfined": func(p *corev1.Pod) { p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: unconfined} },
		"container Unconfined": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: unconfined}
		},
		"NET_RAW": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}}}
		},
	} {
		p := tenantPod()
		mutate(p)
		if err := baseline.Check(p); err == nil || !strings.Contains(err.Error(), "baseline") {
			t.Errorf("%s: baseline check = %v, want refused", name, err)
		}
	}
}
