//go:build linux

package nodenet

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The test builds two namespaces joined by a veth pair, standing in for a
// hostNetwork pod ("pod", which Apply configures) and the pod network
// ("peer"): peer holds pod1's and pod2/pod3's IPs and also NodeIP, because
// on a real node NodeIP is another pod's IP that traffic must still reach
// although Apply makes it an address of the pod's namespace too.
// (This kernel has no dummy interfaces; a veth also makes the DNAT'ed
// traffic leave eth0, so masquerade and route_localnet are exercised.)
const (
	podIP   = "10.213.0.10"
	nodeIP  = "10.213.0.1"
	pod1IP  = "10.213.0.2"
	pod23IP = "10.213.0.3"
	nodeIP2 = "10.213.0.4" // the NodeIP after the node's address changed
)

func TestApplyForwardsHostPorts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (network namespaces, nftables, setns); run it as root, it is not optional")
	}
	hostBefore := readSysctls(t)
	podNS, podPath := newNetNS(t, "pod")
	peerNS, _ := newNetNS(t, "peer")
	linkNamespaces(t, podNS, peerNS)
	serveTCP(t, peerNS, pod1IP+":8080", "pod1")
	serveTCP(t, peerNS, pod23IP+":8080", "pod2")
	serveUDP(t, peerNS, pod23IP+":8081", "pod3")
	serveTCP(t, peerNS, nodeIP+":9999", "node")
	serveTCP(t, peerNS, nodeIP2+":9999", "node2")
	serveTCP(t, podNS, podIP+":7777", "hostpod")

	c := Config{NodeIP: nodeIP, Mappings: []Mapping{
		{Protocol: TCP, HostIP: "127.0.0.1", HostPort: 54323, PodIP: pod1IP, PodPort: 8080},
		{Protocol: TCP, HostIP: nodeIP, HostPort: 54323, PodIP: pod23IP, PodPort: 8080},
		{Protocol: UDP, HostIP: nodeIP, HostPort: 54323, PodIP: pod23IP, PodPort: 8081},
		{Protocol: TCP, HostIP: AllAddresses, HostPort: 54324, PodIP: pod1IP, PodPort: 8080},
	}}
	if err := Apply(podPath, c); err != nil {
		t.Fatal(err)
	}
	assertState(t, podPath, nodeIP, 5)
	assertNetlink(t, podNS, nodeIP)
	if err := Apply(podPath, c); err != nil { // idempotent
		t.Fatalf("second Apply: %v", err)
	}
	assertState(t, podPath, nodeIP, 5)
	assertNetlink(t, podNS, nodeIP)
	if got := readSysctlsIn(t, podNS); got.arpIgnore != "1" || got.arpAnnounce != "2" {
		t.Errorf("pod namespace: arp_ignore %s, arp_announce %s; want 1, 2", got.arpIgnore, got.arpAnnounce)
	}

	// A target "proto addr:port" is dialled from the namespace; with
	// " from <ip>" the socket is first bound to ip (port 0), as
	// curl --interface <ip> does.
	want := map[string]string{
		"tcp 127.0.0.1:54323 from " + nodeIP: "pod1", // curl --interface NodeIP http://127.0.0.1:54323
		"tcp 127.0.0.1:54323":                "pod1",
		"tcp " + nodeIP + ":54323":           "pod2", // curl http://NodeIP:54323
		"udp " + nodeIP + ":54323":           "pod3", // echo x | nc -u NodeIP 54323
		"tcp 127.0.0.1:54324":                "pod1",
		"tcp " + nodeIP + ":54324":           "pod1",
		// Unmapped: NodeIP is local now, so only the rule NodeRulePref
		// keeps this from ending on the pod's own lo (refused).
		"tcp " + nodeIP + ":9999": "node",
		// Bound to NodeIP, to the pod network: only the masquerade of
		// saddr NodeIP gets the answer back.
		"tcp " + nodeIP + ":9999 from " + nodeIP:  "node",
		"tcp " + pod1IP + ":8080 from " + nodeIP:  "pod1",
		"udp " + nodeIP + ":54323 from " + nodeIP: "pod3",
	}
	for target, answer := range want {
		expectAnswer(t, podNS, target, answer)
	}
	// The control-plane pod (peer, from NodeIP) reaching the hostNetwork
	// pod: its SYN must not be taken for a martian from a local address,
	// and the answer must go back out of eth0.
	expectAnswer(t, peerNS, "tcp "+podIP+":7777 from "+nodeIP, "hostpod")

	c.Mappings = slices.DeleteFunc(c.Mappings, func(m Mapping) bool { return m.Protocol == UDP })
	if err := Apply(podPath, c); err != nil {
		t.Fatalf("Apply without the UDP mapping: %v", err)
	}
	assertState(t, podPath, nodeIP, 4)
	expectSilence(t, podNS, "udp "+nodeIP+":54323")
	delete(want, "udp "+nodeIP+":54323")
	delete(want, "udp "+nodeIP+":54323 from "+nodeIP)
	for target, answer := range want {
		expectAnswer(t, podNS, target, answer)
	}

	// The node's address changes: the old one leaves lo and its rule goes.
	c2 := Config{NodeIP: nodeIP2, Mappings: []Mapping{
		{Protocol: TCP, HostIP: AllAddresses, HostPort: 54324, PodIP: pod1IP, PodPort: 8080},
	}}
	if err := Apply(podPath, c2); err != nil {
		t.Fatalf("Apply with NodeIP %s: %v", nodeIP2, err)
	}
	assertState(t, podPath, nodeIP2, 2)
	assertNetlink(t, podNS, nodeIP2)
	for target, answer := range map[string]string{
		"tcp 127.0.0.1:54324 from " + nodeIP2: "pod1",
		"tcp " + nodeIP2 + ":54324":           "pod1",
		"tcp " + nodeIP2 + ":9999":            "node2",
		"tcp " + nodeIP + ":9999":             "node", // an ordinary pod IP again
	} {
		expectAnswer(t, podNS, target, answer)
	}
	expectAnswer(t, peerNS, "tcp "+podIP+":7777 from "+nodeIP2, "hostpod")

	if after := readSysctls(t); after != hostBefore {
		t.Errorf("the test's own namespace changed: sysctls were %+v, now %+v", hostBefore, after)
	}
}

func TestApplyErrorNamesPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing")
	err := Apply(path, Config{NodeIP: nodeIP})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "open network namespace") {
		t.Fatalf("Apply(%s) = %v, want an error naming the path and the step", path, err)
	}
}

type sysctls struct{ nonlocalBind, routeLocalnet, arpIgnore, arpAnnounce string }

// readSysctls reads the sysctls Apply writes in the calling thread's
// namespace (the test's own, unless called through inNetNS).
func readSysctls(t *testing.T) sysctls {
	t.Helper()
	s, err := readSysctlFiles()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func readSysctlFiles() (sysctls, error) {
	var s sysctls
	for _, f := range []struct {
		path string
		dst  *string
	}{
		{ReadySysctl, &s.nonlocalBind}, {RouteLocalnetSysctl, &s.routeLocalnet},
		{ARPIgnoreSysctl, &s.arpIgnore}, {ARPAnnounceSysctl, &s.arpAnnounce},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return sysctls{}, err
		}
		*f.dst = strings.TrimSpace(string(b))
	}
	return s, nil
}

func readSysctlsIn(t *testing.T, ns netns.NsHandle) sysctls {
	t.Helper()
	var s sysctls
	inNS(t, ns, func() (err error) { s, err = readSysctlFiles(); return err })
	return s
}

func assertState(t *testing.T, path, node string, rules int) {
	t.Helper()
	s, err := Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	want := State{
		Table: true, DNATRules: rules, NonlocalBind: true, RouteLocalnet: true,
		ARPIgnore: true, ARPAnnounce: true,
		NodeIP: node, NodeAddress: true, NodeRule: true, LocalRuleMoved: true,
	}
	if s != want {
		t.Fatalf("Inspect = %+v, want %+v", s, want)
	}
}

// assertNetlink checks, independently of Inspect, that node/32 is the only
// global address on lo and that the rules are there exactly once.
func assertNetlink(t *testing.T, ns netns.NsHandle, node string) {
	t.Helper()
	h := handleAt(t, ns)
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := h.AddrList(lo, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var onLo []string
	for _, a := range addrs {
		onLo = append(onLo, a.IPNet.String())
	}
	want := []string{"127.0.0.1/8", node + "/32"}
	slices.Sort(onLo)
	slices.Sort(want)
	if !slices.Equal(onLo, want) {
		t.Errorf("addresses on lo: %v, want %v", onLo, want)
	}
	rules, err := h.RuleList(netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	count := map[int]int{}
	for _, r := range rules {
		count[r.Priority]++
		switch r.Priority {
		case 0, LocalRulePref:
			if r.Table != unix.RT_TABLE_LOCAL || r.Src != nil || r.Dst != nil || r.IifName != "" {
				t.Errorf("rule %d is %v iif %q, want from all lookup local", r.Priority, r, r.IifName)
			}
		case NodeRulePref:
			if r.Table != unix.RT_TABLE_MAIN || r.Dst == nil || r.Dst.String() != node+"/32" || r.IifName != "lo" {
				t.Errorf("rule %d is %v iif %q, want to %s/32 iif lo lookup main", r.Priority, r, r.IifName, node)
			}
		}
	}
	if count[0] != 0 || count[NodeRulePref] != 1 || count[LocalRulePref] != 1 {
		t.Errorf("rules by preference %v: want none at 0 and one each at %d and %d; rules: %v",
			count, NodeRulePref, LocalRulePref, rules)
	}
}

// newNetNS creates a named namespace (so Apply gets a path, as from CNI)
// with lo up, without moving the test's own thread.
func newNetNS(t *testing.T, role string) (netns.NsHandle, string) {
	t.Helper()
	name := fmt.Sprintf("nodenet-test-%d-%s", os.Getpid(), role)
	cur, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close()
	var ns netns.NsHandle
	err = inNetNS(cur, func() error { // NewNamed moves the thread; inNetNS moves it back
		var err error
		ns, err = netns.NewNamed(name)
		return err
	})
	if err != nil {
		t.Fatalf("create network namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete network namespace %s: %v", name, err)
		}
	})
	h := handleAt(t, ns)
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("bring up lo in %s: %v", name, err)
	}
	return ns, filepath.Join("/var/run/netns", name)
}

func handleAt(t *testing.T, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// linkNamespaces joins pod's eth0 (podIP/24) to peer's eth0, which holds
// the pod network addresses, NodeIP and nodeIP2 among them.
func linkNamespaces(t *testing.T, pod, peer netns.NsHandle) {
	t.Helper()
	podH, peerH := handleAt(t, pod), handleAt(t, peer)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0", PeerNamespace: netlink.NsFd(peer)}
	if err := podH.LinkAdd(veth); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	configure := func(h *netlink.Handle, addrs ...string) {
		link, err := h.LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			addr, err := netlink.ParseAddr(a + "/24")
			if err == nil {
				err = h.AddrAdd(link, addr)
			}
			if err != nil {
				t.Fatalf("add %s: %v", a, err)
			}
		}
		if err := h.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
	}
	configure(podH, podIP)
	configure(peerH, pod1IP, pod23IP, nodeIP, nodeIP2)
}

// inNS runs fn on a thread inside ns: sockets belong to the namespace of
// the thread that creates them.
func inNS(t *testing.T, ns netns.NsHandle, fn func() error) {
	t.Helper()
	if err := inNetNS(ns, fn); err != nil {
		t.Fatal(err)
	}
}

func serveTCP(t *testing.T, ns netns.NsHandle, addr, answer string) {
	t.Helper()
	var l net.Listener
	inNS(t, ns, func() (err error) { l, err = net.Listen("tcp4", addr); return err })
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(conn, answer)
			conn.Close()
		}
	}()
}

func serveUDP(t *testing.T, ns netns.NsHandle, addr, answer string) {
	t.Helper()
	var pc net.PacketConn
	inNS(t, ns, func() (err error) { pc, err = net.ListenPacket("udp4", addr); return err })
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(answer), from)
		}
	}()
}

// ask sends one request from inside ns to target ("tcp a:p" or "udp a:p",
// optionally followed by " from <ip>" to bind the socket to ip first) and
// returns the answer.
func ask(ns netns.NsHandle, target string, timeout time.Duration) (string, error) {
	network, addr, _ := strings.Cut(target, " ")
	addr, from, bound := strings.Cut(addr, " from ")
	var dialer net.Dialer
	if bound {
		ip := net.ParseIP(from)
		if network == "udp" {
			dialer.LocalAddr = &net.UDPAddr{IP: ip}
		} else {
			dialer.LocalAddr = &net.TCPAddr{IP: ip}
		}
	}
	var answer string
	err := inNetNS(ns, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		conn, err := dialer.DialContext(ctx, network+"4", addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		deadline, _ := ctx.Deadline()
		conn.SetDeadline(deadline)
		if network == "udp" {
			if _, err := conn.Write([]byte("x\n")); err != nil {
				return err
			}
			buf := make([]byte, 64)
			n, err := conn.Read(buf)
			answer = string(buf[:n])
			return err
		}
		b, err := io.ReadAll(conn)
		answer = string(b)
		return err
	})
	return answer, err
}

func expectAnswer(t *testing.T, ns netns.NsHandle, target, want string) {
	t.Helper()
	got, err := ask(ns, target, 5*time.Second)
	if err != nil || got != want {
		t.Errorf("%s: got %q, %v; want %q", target, got, err, want)
	}
}

// expectSilence polls until target stops answering: a removed mapping must
// give connection refused or no answer, never the old pod.
func expectSilence(t *testing.T, ns netns.NsHandle, target string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		got, err := ask(ns, target, 500*time.Millisecond)
		if err != nil {
			t.Logf("%s after removal: %v (as expected)", target, err)
			return
		}
		t.Logf("%s still answers %q", target, got)
	}
	t.Errorf("%s still answers 10s after its mapping was removed", target)
}
