package devcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// GPUResource is the extended resource `nest dev up --gpus` advertises.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// gpuFieldOwner is the field manager of the advertised GPUs.
const gpuFieldOwner = "nest-dev"

// advertiseGPUs makes every worker advertise count GPUs, as Kubernetes
// documents for extended resources: a JSON patch of the node's status
// subresource. The kubelet keeps capacity it does not manage and derives
// allocatable from capacity, so later status updates keep both; allocatable
// is patched too so schedulers see it at once, not at the kubelet's next
// status update.
func advertiseGPUs(ctx context.Context, l Layout, nodes []Node, count int) error {
	c, err := adminClient(l)
	if err != nil {
		return err
	}
	quantity := strconv.Itoa(count)
	// "/" in a resource name is "~1" in a JSON pointer (RFC 6901).
	key := strings.ReplaceAll(string(GPUResource), "/", "~1")
	patch, err := json.Marshal([]map[string]string{
		{"op": "add", "path": "/status/capacity/" + key, "value": quantity},
		{"op": "add", "path": "/status/allocatable/" + key, "value": quantity},
	})
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.ControlPlane() {
			continue
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
		if err := c.Status().Patch(ctx, node, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(gpuFieldOwner)); err != nil {
			return fmt.Errorf("advertise %s %s on %s: %w", quantity, GPUResource, n.Name, err)
		}
	}
	return nil
}
