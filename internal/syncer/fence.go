package syncer

import (
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nestdev/nest/internal/images"
)

// networkFenceName names the helper init container that holds a host pod
// until its isolation NetworkPolicy is in force (contract.Translation's
// NetworkFence); tenant pods may not use it.
const networkFenceName = "nest-network-fence"

// networkFenceResources are the fence's request and limit: nest-probe, a
// static standard-library binary, dials in a loop in a few MiB. They are
// small because every host pod runs the fence, and a pod's request is at
// least its largest init container's.
var networkFenceResources = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("16Mi")}

// fenceNetwork makes the fence the host pod's first init container, before
// the other helpers and every container of the tenant's: a network plugin
// applies a pod's NetworkPolicies only once it has seen the pod, which can
// be a second after the pod's network is up, and a connection opened in
// that second outlives the policy. The fence dials NetworkFence, an address
// the policy refuses, until it is refused while the tenant's own API server
// (APIServerHost), which the policy allows, answers (nest-probe -fence):
// a network that is not up yet refuses everything too. Nothing is done
// without a helper image or a fence address.
func (t Translator) fenceNetwork(spec *corev1.PodSpec) {
	if t.NetworkFence == "" || t.HelperImage == "" {
		return
	}
	allowed := net.JoinHostPort(t.APIServerHost, strconv.Itoa(int(t.APIServerPort)))
	c := t.helperContainer(networkFenceName, []string{images.ProbePath, "-fence=" + t.NetworkFence, "-allowed=" + allowed}, false)
	c.Resources = corev1.ResourceRequirements{Requests: networkFenceResources, Limits: networkFenceResources}
	spec.InitContainers = append([]corev1.Container{c}, spec.InitContainers...)
}
