package syncer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/egress"
	"github.com/nestdev/nest/internal/testutil"
)

const egressVC, egressNS = "alpha", "vc-alpha"

// hostPod is a running host pod of egressNS with the given tenant-of label
// ("" for none) and IPs.
func hostPod(name, tenantOf string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: egressNS}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if tenantOf != "" {
		p.Labels = map[string]string{contract.LabelTenantOf: tenantOf}
	}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
	}
	return p
}

// dedicatedNodes is the dedicated-nodes ConfigMap of egressVC with data.
func dedicatedNodes(nodeIPs, podCIDRs string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: contract.DedicatedNodesConfigMap(egressVC), Namespace: egressNS},
		Data:       map[string]string{contract.DedicatedNodeIPsKey: nodeIPs, contract.DedicatedPodCIDRsKey: podCIDRs},
	}
}

// checkAllowed fails the test for each of allowed that p refuses and each
// of refused that p allows.
func checkAllowed(t *testing.T, p *egress.Published, allowed, refused []string) {
	t.Helper()
	for _, want := range []struct {
		allow bool
		dests []string
	}{{true, allowed}, {false, refused}} {
		for _, dest := range want.dests {
			if got := p.Allowed(netip.MustParseAddrPort(dest)); got != want.allow {
				t.Errorf("Allowed(%s) = %v, want %v", dest, got, want.allow)
			}
		}
	}
}

// What the tenant API server may dial comes from host pods and the
// dedicated-nodes ConfigMap, each part on its own ports.
func TestEgressDestinationsOf(t *testing.T) {
	withPhase := func(p *corev1.Pod, phase corev1.PodPhase) *corev1.Pod { p.Status.Phase = phase; return p }
	onHostNetwork := func(p *corev1.Pod) *corev1.Pod { p.Spec.HostNetwork = true; return p }
	tests := []struct {
		name             string
		pods             []*corev1.Pod
		dedicated        *corev1.ConfigMap
		allowed, refused []string
	}{
		{
			name: "a control-plane pod gets only the kubelet API ports",
			pods: []*corev1.Pod{hostPod("alpha-0", "", "10.244.1.5")},
			allowed: []string{"10.244.1.5:10250", fmt.Sprintf("10.244.1.5:%d", contract.FirstMemberKubeletPort),
				fmt.Sprintf("10.244.1.5:%d", contract.FirstMemberKubeletPort+contract.MaxMembers-1)},
			refused: []string{"10.244.1.5:6443", "10.244.1.5:2379", "10.244.1.5:2380", "10.244.1.5:1053", "10.244.1.5:10257",
				fmt.Sprintf("10.244.1.5:%d", contract.FirstMemberKubeletPort+contract.MaxMembers), "10.244.1.5:10248"},
		},
		{
			name:    "a tenant pod gets any port, on each of its IPs",
			pods:    []*corev1.Pod{hostPod("web", egressVC, "10.244.2.7", "fd00:10:244:2::7")},
			allowed: []string{"10.244.2.7:443", "10.244.2.7:8443", "10.244.2.7:10250", "[fd00:10:244:2::7]:9443"},
			refused: []string{"10.244.2.8:443"},
		},
		{
			name:    "another VirtualCluster's pod in the namespace is neither the tenant's nor the control plane's",
			pods:    []*corev1.Pod{hostPod("intruder", "beta", "10.244.3.9")},
			refused: []string{"10.244.3.9:443", "10.244.3.9:10250"},
		},
		{
			name:    "a pod without an IP, or with one that does not parse, adds nothing",
			pods:    []*corev1.Pod{hostPod("pending", egressVC), hostPod("garbled", egressVC, "not-an-ip"), hostPod("cp-pending", "")},
			refused: []string{"10.244.2.7:443", "0.0.0.0:443"},
		},
		{
			name:    "status.podIP stands in for an empty status.podIPs",
			pods:    []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: egressNS, Labels: map[string]string{contract.LabelTenantOf: egressVC}}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.2.9"}}},
			allowed: []string{"10.244.2.9:80"},
		},
		{
			name: "finished pods and pods on the host network add nothing",
			pods: []*corev1.Pod{
				withPhase(hostPod("done", egressVC, "10.244.2.10"), corev1.PodSucceeded),
				withPhase(hostPod("crashed", egressVC, "10.244.2.11"), corev1.PodFailed),
				onHostNetwork(hostPod("hostnet", egressVC, "172.18.0.2")),
				onHostNetwork(hostPod("cp-hostnet", "", "172.18.0.3")),
			},
			refused: []string{"10.244.2.10:80", "10.244.2.11:80", "172.18.0.2:80", "172.18.0.3:10250"},
		},
		{
			name:      "dedicated node IPs on the kubelet port, their pod CIDRs on any port",
			dedicated: dedicatedNodes("172.18.0.4\nfc00::4\n", "10.244.5.0/24\nfd00:10:244:5::/64"),
			allowed:   []string{"172.18.0.4:10250", "[fc00::4]:10250", "10.244.5.1:443", "10.244.5.254:10250", "[fd00:10:244:5::9]:8080"},
			refused:   []string{"172.18.0.4:22", "172.18.0.4:6443", "172.18.0.5:10250", "10.244.6.1:443"},
		},
		{
			name:      "malformed ConfigMap values admit nothing",
			dedicated: dedicatedNodes("172.18.0.0/16\nnode-a\n172.18.0.4:10250", "10.244.0.0\neverything\n10.244.5.0/33"),
			refused:   []string{"172.18.0.4:10250", "172.18.0.1:10250", "10.244.0.0:443", "10.244.5.1:443"},
		},
		{
			name:    "no pods and no ConfigMap allow nothing",
			refused: []string{"10.244.1.5:10250", "172.18.0.4:10250"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &egress.Published{}
			egressDestinationsOf(egressVC, tt.pods, tt.dedicated).publish(p)
			checkAllowed(t, p, tt.allowed, tt.refused)
		})
	}
}

// The publisher follows the host: a pod or ConfigMap created, changed or
// deleted changes what is published.
func TestEgressPublisherFollowsTheHost(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	host := fake.NewClientset(hostPod("alpha-0", "", "10.244.1.5"), hostPod("web", egressVC, "10.244.2.7"))
	watching := watchesStarted(host)
	pub, err := newEgressPublisher(Options{Flags: contract.Flags{Translation: contract.Translation{VirtualCluster: egressVC, HostNamespace: egressNS}}}, host)
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.start(ctx); err != nil {
		t.Fatal(err)
	}
	// The fake's watches start after its lists, and miss what changes in
	// between: change nothing until both watch.
	waitForWatches(t, watching, "pods", "configmaps")
	checkAllowed(t, pub.published, []string{"10.244.1.5:10250", "10.244.2.7:443"}, []string{"10.244.1.5:443", "172.18.0.4:10250"})

	pods := host.CoreV1().Pods(egressNS)
	if _, err := pods.Create(ctx, hostPod("api", egressVC, "10.244.2.8"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyAllowed(t, pub.published, []string{"10.244.2.8:443"}, []string{"10.244.2.7:443"})

	done := hostPod("api", egressVC, "10.244.2.8")
	done.Status.Phase = corev1.PodSucceeded
	if _, err := pods.UpdateStatus(ctx, done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyAllowed(t, pub.published, nil, []string{"10.244.2.8:443"})

	cms := host.CoreV1().ConfigMaps(egressNS)
	if _, err := cms.Create(ctx, dedicatedNodes("172.18.0.4", "10.244.5.0/24"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyAllowed(t, pub.published, []string{"172.18.0.4:10250", "10.244.5.3:80"}, nil)
	if _, err := cms.Update(ctx, dedicatedNodes("", ""), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyAllowed(t, pub.published, nil, []string{"172.18.0.4:10250", "10.244.5.3:80"})
	// Still there: the control-plane pod, which nothing changed.
	checkAllowed(t, pub.published, []string{"10.244.1.5:10250"}, nil)
}

// watchesStarted reports, on the channel it returns, the resource of each
// watch the fake host serves, once the watch is in place.
func watchesStarted(host *fake.Clientset) <-chan string {
	started := make(chan string, 16)
	host.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if w, ok := action.(k8stesting.WatchActionImpl); ok {
			opts = w.ListOptions
		}
		w, err := host.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		started <- action.GetResource().Resource
		return true, w, nil
	})
	return started
}

// waitForWatches waits until started has reported a watch of each of
// resources.
func waitForWatches(t *testing.T, started <-chan string, resources ...string) {
	t.Helper()
	missing := map[string]bool{}
	for _, r := range resources {
		missing[r] = true
	}
	deadline := time.After(10 * time.Second)
	for len(missing) > 0 {
		select {
		case r := <-started:
			delete(missing, r)
		case <-deadline:
			t.Fatalf("no watch of %v after 10s", missing)
		}
	}
}

// eventuallyAllowed waits until p allows every one of allowed and refuses
// every one of refused.
func eventuallyAllowed(t *testing.T, p *egress.Published, allowed, refused []string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("allowed %v, refused %v", allowed, refused), func() error {
		for _, dest := range allowed {
			if !p.Allowed(netip.MustParseAddrPort(dest)) {
				return fmt.Errorf("%s refused", dest)
			}
		}
		for _, dest := range refused {
			if p.Allowed(netip.MustParseAddrPort(dest)) {
				return fmt.Errorf("%s allowed", dest)
			}
		}
		return nil
	})
}

// runEgressProxy serves on the socket once the host is read, refuses what
// the host does not name with 403, the answer kube-apiserver reports as
// "proxy error ... code 403", and returns nil when its context ends.
func TestRunEgressProxyServesTheSocket(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	o := Options{Flags: contract.Flags{Translation: contract.Translation{VirtualCluster: egressVC, HostNamespace: egressNS}, EgressProxySocket: sock}}
	served := make(chan error, 1)
	go func() { served <- runEgressProxy(ctx, o, fake.NewClientset(hostPod("alpha-0", "", "10.244.1.5"))) }()
	var res *http.Response
	testutil.Eventually(t, 10*time.Second, "a CONNECT answered on "+sock, func() error {
		var err error
		res, err = connectThrough(sock, "172.18.0.4:10250")
		return err
	})
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT to a host kubelet: %s, want 403 Forbidden", res.Status)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("runEgressProxy = %v, want nil once its context ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runEgressProxy did not return after its context ended")
	}
}

// connectThrough sends CONNECT dest on the Unix socket sock, as
// kube-apiserver's egress dialer does, and returns the answer.
func connectThrough(sock, dest string) (*http.Response, error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", dest); err != nil {
		return nil, err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode == http.StatusOK {
		return res, errors.New("a tunnel opened")
	}
	return res, nil
}
