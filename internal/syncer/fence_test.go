package syncer

import (
	"net"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nestdev/nest/internal/images"
)

// The fence is every host pod's first init container, before the other
// helpers and the tenant's own init containers, and its status stays the
// host's.
func TestTranslatePodFencesTheNetworkFirst(t *testing.T) {
	fenced := withHelper
	fenced.NetworkFence = "10.96.0.1:443"
	pod := subdomainPod()
	pod.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "img"}}
	pt, err := fenced.TranslatePod(pod, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range pt.Pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	if want := []string{networkFenceName, etcHostsName, "migrate"}; !slices.Equal(names, want) {
		t.Fatalf("init containers %v, want %v", names, want)
	}
	fence := pt.Pod.Spec.InitContainers[0]
	allowed := net.JoinHostPort(fenced.APIServerHost, strconv.Itoa(int(fenced.APIServerPort)))
	if want := []string{images.ProbePath, "-fence=10.96.0.1:443", "-allowed=" + allowed}; !slices.Equal(fence.Command, want) {
		t.Errorf("fence command %v, want %v", fence.Command, want)
	}
	if fence.Image != fenced.HelperImage || fence.RestartPolicy == nil || *fence.RestartPolicy != corev1.ContainerRestartPolicyOnFailure {
		t.Errorf("fence image %s restart %v: want the helper image, run again on failure", fence.Image, fence.RestartPolicy)
	}
	if fence.Resources.Requests.Memory().Cmp(*networkFenceResources.Memory()) != 0 || fence.SecurityContext.RunAsNonRoot == nil || !*fence.SecurityContext.RunAsNonRoot {
		t.Errorf("fence resources %v, security %+v: want the fence's small request, as a non-root user", fence.Resources, fence.SecurityContext)
	}
	status := corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{Name: networkFenceName}, {Name: "migrate"}}}
	if got := withoutHelpers(status.InitContainerStatuses); len(got) != 1 || got[0].Name != "migrate" {
		t.Errorf("tenant init statuses %v, want the fence's left out", got)
	}

	// No fence address, or no helper image: no fence.
	for _, off := range []Translator{withHelper, func() Translator { t := tr; t.NetworkFence = "10.96.0.1:443"; return t }()} {
		pt, err := off.TranslatePod(tenantPod(), defaultMetadata, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range pt.Pod.Spec.InitContainers {
			if c.Name == networkFenceName {
				t.Errorf("a fence with fence %q and helper image %q", off.NetworkFence, off.HelperImage)
			}
		}
	}
}

// A tenant pod may not name a container as the fence.
func TestTenantPodMayNotUseTheFencesName(t *testing.T) {
	pod := tenantPod()
	pod.Spec.InitContainers = []corev1.Container{{Name: networkFenceName, Image: "img"}}
	if _, err := withHelper.TranslatePod(pod, defaultMetadata, nil); err == nil {
		t.Error("a tenant init container named as the fence was translated")
	}
}
