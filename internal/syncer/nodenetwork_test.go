package syncer

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nestdev/nest/internal/nodenet"
)

func heldPortPod(name, ip string, phase corev1.PodPhase, ports ...corev1.ContainerPort) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: tr.NodeName, Containers: []corev1.Container{{Name: "app", Image: "img", Ports: ports}}},
		Status:     corev1.PodStatus{Phase: phase, PodIP: ip},
	}
}

func TestNodeNetworkOfForwardsEveryHeldHostPort(t *testing.T) {
	pods := []*corev1.Pod{
		heldPortPod("web", "10.1.0.5", corev1.PodRunning, corev1.ContainerPort{ContainerPort: 80, HostPort: 8080}),
		heldPortPod("dns", "10.1.0.6", corev1.PodRunning, corev1.ContainerPort{ContainerPort: 53, HostPort: 53, HostIP: "127.0.0.1", Protocol: corev1.ProtocolUDP}),
		heldPortPod("plain", "10.1.0.7", corev1.PodRunning, corev1.ContainerPort{ContainerPort: 80}),
		heldPortPod("starting", "", corev1.PodPending, corev1.ContainerPort{ContainerPort: 80, HostPort: 9090}),
		heldPortPod("done", "10.1.0.8", corev1.PodSucceeded, corev1.ContainerPort{ContainerPort: 80, HostPort: 9091}),
		heldPortPod("v6", "fd00::8", corev1.PodRunning, corev1.ContainerPort{ContainerPort: 80, HostPort: 9092}),
		heldPortPod("web-replacement", "10.1.0.9", corev1.PodRunning, corev1.ContainerPort{ContainerPort: 80, HostPort: 8080, HostIP: "10.0.0.9"}),
	}
	pods[len(pods)-1].CreationTimestamp = metav1.NewTime(time.Now())
	// The API server leaves hostIP unchecked: a bad one is left out, and
	// the node's other ports stay.
	pods = append(pods, heldPortPod("odd", "10.1.0.10", corev1.PodRunning, corev1.ContainerPort{ContainerPort: 80, HostPort: 7070, HostIP: "not-an-ip"}))
	got := NodeNetworkOf("10.0.0.9", pods, func(p *corev1.Pod) string { return p.Status.PodIP })
	// Oldest pod first, then by name; the replacement's port is its
	// predecessor's until that one is gone.
	want := []nodenet.Mapping{
		{Protocol: "UDP", HostIP: "127.0.0.1", HostPort: 53, PodIP: "10.1.0.6", PodPort: 53},
		{Protocol: "TCP", HostIP: "0.0.0.0", HostPort: 8080, PodIP: "10.1.0.5", PodPort: 80},
	}
	if got.NodeIP != "10.0.0.9" || !slices.Equal(got.Mappings, want) {
		t.Errorf("NodeNetworkOf = %+v, want node IP 10.0.0.9 and %+v", got, want)
	}
	if _, err := got.Encode(); err != nil {
		t.Errorf("the node network does not encode: %v", err)
	}
}

func TestHostNetworkPodWaitsForTheNodeNetworkAgent(t *testing.T) {
	on := tr
	on.HelperImage, on.NodeNetwork = "nest.local/nest-syncer:dev", true
	for _, tt := range []struct {
		name        string
		tr          Translator
		hostNetwork bool
		want        bool
	}{
		{"hostNetwork pod", on, true, true},
		{"pod on the pod network", on, false, false},
		{"node network off", func() Translator { t := on; t.NodeNetwork = false; return t }(), true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := tenantPod()
			p.Spec.HostNetwork = tt.hostNetwork
			pt, err := tt.tr.TranslatePod(p, defaultMetadata, nil)
			if err != nil {
				t.Fatal(err)
			}
			inits := pt.Pod.Spec.InitContainers
			got := len(inits) > 0 && inits[0].Name == nodeNetworkName
			if got != tt.want {
				t.Fatalf("first init container is the node network helper: %v, want %v (%d init containers)", got, tt.want, len(inits))
			}
			if !got {
				return
			}
			h := inits[0]
			if sc := h.SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 || !*sc.RunAsNonRoot {
				t.Errorf("helper security context %+v: want non-root with every capability dropped", sc)
			}
			if len(h.Env) != 1 || h.Env[0].ValueFrom == nil || h.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.uid" || !slices.Contains(h.Command, "--pod-uid=$("+envPodUID+")") {
				t.Errorf("helper env %+v and command %v: want the host pod's UID passed as --pod-uid", h.Env, h.Command)
			}
			if !slices.Contains(h.Command, nodeNetworkCommand) {
				t.Errorf("helper command %v does not run %s", h.Command, nodeNetworkCommand)
			}
		})
	}
}

func TestNodeNetworkHelperWaitsForTheAgentsMark(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ip_nonlocal_bind")
	if err := os.WriteFile(ready, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	uid := "uid-" + strings.ReplaceAll(t.Name(), "/", "-")
	proved := make(chan error, 1)
	go func() {
		// The agent's check: the helper answers on the pod's proof socket
		// while it waits.
		proved <- wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			c, err := net.Dial("unix", nodenet.ProofSocket(uid))
			if err != nil {
				return false, nil
			}
			return true, c.Close()
		})
	}()
	err := RunNodeNetworkHelper(context.Background(), []string{"--timeout=300ms", "--ready-file=" + ready, "--pod-uid=" + uid})
	if perr := <-proved; perr != nil {
		t.Errorf("the helper did not answer on its proof socket while it waited: %v", perr)
	}
	if err == nil || !strings.Contains(err.Error(), "nest-node-network DaemonSet") {
		t.Errorf("helper before the agent = %v, want a timeout naming the DaemonSet", err)
	}
	if err := os.WriteFile(ready, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RunNodeNetworkHelper(context.Background(), []string{"--timeout=5s", "--ready-file=" + ready, "--pod-uid=" + uid}); err != nil {
		t.Errorf("helper after the agent = %v, want nil", err)
	}
	missing := filepath.Join(t.TempDir(), "absent")
	if err := RunNodeNetworkHelper(context.Background(), []string{"--timeout=5s", "--ready-file=" + missing, "--pod-uid=" + uid}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("helper without the file = %v, want an error naming it", err)
	}
}

// A tenant pod update rewrites the host pod's annotations from the
// translation, which knows nothing of the node network: the annotation the
// node network syncer wrote stays.
func TestTenantPodUpdateKeepsTheNodeNetwork(t *testing.T) {
	pod := simplePod("web", "100m")
	pod.Spec.HostNetwork = true
	host := hostPodOf(t, pod)
	const network = `{"nodeIP":"10.0.0.9","mappings":[]}`
	host.Annotations[nodenet.Annotation] = network
	p, client := newProvider(t, nil, []runtime.Object{host})
	upd := pod.DeepCopy()
	upd.Labels = map[string]string{"tier": "front"}
	if err := p.UpdatePod(context.Background(), upd); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), host.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["tier"] != "front" || got.Annotations[nodenet.Annotation] != network {
		t.Errorf("after the update: labels %v, node network %q; want the new label and %q", got.Labels, got.Annotations[nodenet.Annotation], network)
	}
}

func TestNodeNetworkFollowsHostPortPods(t *testing.T) {
	web := heldPortPod("web", "10.1.0.5", corev1.PodRunning, corev1.ContainerPort{ContainerPort: 80, HostPort: 8080})
	agent := heldPortPod("agent", "10.1.0.20", corev1.PodRunning)
	agent.Spec.HostNetwork = true
	pt, err := tr.TranslatePod(agent, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	webHost, err := tr.TranslatePod(web, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The forward goes to the IP the host kubelet gave web's host pod, not
	// to the one web's tenant status shows, which the tenant may write.
	webHost.Pod.Status.PodIP = "10.1.0.5"
	web.Status.PodIP = "10.9.9.9"
	tenant, host := fake.NewClientset(web, agent), fake.NewClientset(pt.Pod, webHost.Pod)
	// With a virtual node address and the node network on, as the
	// controller configures nest-syncer.
	runKindSyncers(t, tenant, host, func(o *Options) {
		o.NodeIP, o.HelperImage, o.NodeNetwork = "10.0.0.9", "nest.local/nest-syncer:dev", true
	})

	mappings := func() []nodenet.Mapping {
		got, err := host.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), pt.Pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		raw, ok := got.Annotations[nodenet.Annotation]
		if !ok {
			return nil
		}
		c, err := nodenet.Parse(raw)
		if err != nil || c.NodeIP != "10.0.0.9" {
			t.Fatalf("annotation %q: %v, want node IP 10.0.0.9", raw, err)
		}
		return c.Mappings
	}
	want := nodenet.Mapping{Protocol: "TCP", HostIP: "0.0.0.0", HostPort: 8080, PodIP: "10.1.0.5", PodPort: 80}
	eventually(t, "the hostNetwork pod's host pod gets web's host port", func() (bool, error) {
		m := mappings()
		return len(m) == 1 && m[0] == want, nil
	})
	if err := tenant.CoreV1().Pods("shop").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "web's host port leaves the annotation with web", func() (bool, error) {
		return len(mappings()) == 0, nil
	})
}
