//go:build linux

package nodenet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
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

// route_localnet, which Apply sets, would let a neighbour on the pod network
// reach what the pod binds to 127.0.0.1 only (CVE-2020-8558), or send it
// packets that claim to come from there; the prerouting chain drops both.
// The peer is made to send such packets out of its eth0, and the same
// sends are shown to arrive once the chain is deleted, so that it is the
// chain, not a kernel martian check, that stops them.
func TestApplyDropsLoopbackFromOutside(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (network namespaces, nftables, setns); run it as root, it is not optional")
	}
	podNS, podPath := newNetNS(t, "lo-pod")
	peerNS, _ := newNetNS(t, "lo-peer")
	linkNamespaces(t, podNS, peerNS)
	serveTCP(t, podNS, "127.0.0.1:7778", "loopback-only")
	spoofed := listenUDP(t, podNS, podIP+":7779")
	sendLoopbackOut(t, peerNS, podIP)
	acceptLocalSources(t, podNS)
	c := Config{NodeIP: nodeIP}
	if err := Apply(podPath, c); err != nil {
		t.Fatal(err)
	}
	assertState(t, podPath, nodeIP, 0)
	assertRawPrerouting(t, podNS)
	const toLoopback, fromLoopback = "tcp 127.0.0.1:7778", "udp " + podIP + ":7779 from 127.0.0.1"
	expectDropped(t, peerNS, toLoopback, fromLoopback, spoofed)

	deleteChain(t, podNS, "prerouting")
	expectAnswer(t, peerNS, toLoopback, "loopback-only")
	send(t, peerNS, fromLoopback)
	if got, ok := receivedFrom(spoofed, 5*time.Second); !ok || got != "127.0.0.1" {
		t.Errorf("%s without the prerouting chain: received %t from %q, want it from 127.0.0.1", fromLoopback, ok, got)
	}

	if err := Apply(podPath, c); err != nil { // puts the chain back
		t.Fatal(err)
	}
	expectDropped(t, peerNS, toLoopback, fromLoopback, spoofed)
}

// expectDropped checks that a connection to toLoopback fails and that a
// datagram sent as fromLoopback is not received.
func expectDropped(t *testing.T, peer netns.NsHandle, toLoopback, fromLoopback string, received net.PacketConn) {
	t.Helper()
	if got, err := ask(peer, toLoopback, time.Second); err == nil {
		t.Errorf("%s, by the peer: answered %q, want no connection", toLoopback, got)
	}
	send(t, peer, fromLoopback)
	if from, ok := receivedFrom(received, time.Second); ok {
		t.Errorf("%s, by the peer: received from %s, want it dropped", fromLoopback, from)
	}
}

// sendLoopbackOut makes ns send 127.0.0.1 out of eth0 to gateway, as a
// hostile neighbour would: a rule before the local table's picks a main
// table route for it, and route_localnet lets 127.0.0.1 be a source on
// eth0 and the answers from it in.
func sendLoopbackOut(t *testing.T, ns netns.NsHandle, gateway string) {
	t.Helper()
	h := handleAt(t, ns)
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	loopback := &net.IPNet{IP: net.IPv4(127, 0, 0, 1), Mask: net.CIDRMask(32, 32)}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: loopback, Gw: net.ParseIP(gateway)}); err != nil {
		t.Fatalf("route 127.0.0.1 via %s: %v", gateway, err)
	}
	toMain := netlink.NewRule()
	toMain.Priority, toMain.Table, toMain.Dst = 10, unix.RT_TABLE_MAIN, loopback
	for _, add := range []*netlink.Rule{localRule(LocalRulePref), toMain} {
		if err := h.RuleAdd(add); err != nil {
			t.Fatalf("add rule %v: %v", add, err)
		}
	}
	if err := h.RuleDel(localRule(0)); err != nil {
		t.Fatalf("delete rule 0 lookup local: %v", err)
	}
	inNS(t, ns, func() error { return writeSysctl(RouteLocalnetSysctl, "1") })
}

// acceptLocalSources makes ns take in, on eth0, packets whose source is one
// of its own addresses such as 127.0.0.1. By default the kernel drops them
// as martians (Apply's ip rules make it check every source), so the saddr
// rule of the prerouting chain is a second line; these sysctls, which a
// pod may have, show that it holds on its own. rp_filter is turned off
// too, should the namespace have inherited it from the host.
func acceptLocalSources(t *testing.T, ns netns.NsHandle) {
	t.Helper()
	inNS(t, ns, func() error {
		return errors.Join(
			writeSysctl("/proc/sys/net/ipv4/conf/all/accept_local", "1"),
			writeSysctl("/proc/sys/net/ipv4/conf/all/rp_filter", "0"),
			writeSysctl("/proc/sys/net/ipv4/conf/eth0/rp_filter", "0"),
		)
	})
}

// assertRawPrerouting checks that the prerouting chain is a filter chain at
// raw priority: before conntrack and NAT, it sees the addresses on the wire.
func assertRawPrerouting(t *testing.T, ns netns.NsHandle) {
	t.Helper()
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	chains, err := conn.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chains {
		if c.Table.Name != TableName || c.Name != "prerouting" {
			continue
		}
		if c.Type != nftables.ChainTypeFilter || c.Hooknum == nil || *c.Hooknum != *nftables.ChainHookPrerouting ||
			c.Priority == nil || *c.Priority != *nftables.ChainPriorityRaw {
			t.Errorf("chain prerouting: type %s, hook %v, priority %v; want filter, prerouting (%d), raw (%d)",
				c.Type, deref(c.Hooknum), deref(c.Priority), *nftables.ChainHookPrerouting, *nftables.ChainPriorityRaw)
		}
		return
	}
	t.Errorf("no chain prerouting in table ip %s", TableName)
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func deleteChain(t *testing.T, ns netns.NsHandle, name string) {
	t.Helper()
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	conn.DelChain(&nftables.Chain{Name: name, Table: &nftables.Table{Name: TableName, Family: nftables.TableFamilyIPv4}})
	if err := conn.Flush(); err != nil {
		t.Fatalf("delete chain %s: %v", name, err)
	}
}

func listenUDP(t *testing.T, ns netns.NsHandle, addr string) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	inNS(t, ns, func() (err error) { pc, err = net.ListenPacket("udp4", addr); return err })
	t.Cleanup(func() { pc.Close() })
	return pc
}

// receivedFrom reads one datagram from pc and returns its source address,
// or false if none comes within timeout.
func receivedFrom(pc net.PacketConn, timeout time.Duration) (string, bool) {
	pc.SetReadDeadline(time.Now().Add(timeout))
	_, from, err := pc.ReadFrom(make([]byte, 64))
	if err != nil {
		return "", false
	}
	return from.(*net.UDPAddr).IP.String(), true
}

// send sends one datagram from inside ns to target, "udp a:p from <ip>",
// without waiting for an answer.
func send(t *testing.T, ns netns.NsHandle, target string) {
	t.Helper()
	addr, from, _ := strings.Cut(strings.TrimPrefix(target, "udp "), " from ")
	inNS(t, ns, func() error {
		to, err := net.ResolveUDPAddr("udp4", addr)
		if err != nil {
			return err
		}
		conn, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(from)}, to)
		if err != nil {
			return fmt.Errorf("%s: %w", target, err)
		}
		defer conn.Close()
		_, err = conn.Write([]byte("x\n"))
		return err
	})
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
// namespace (the test's own, unless called through InNetNS).
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
		Table: true, DNATRules: rules, LoopbackDropRules: 2, NonlocalBind: true, RouteLocalnet: true,
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
	err = InNetNS(cur, func() error { // NewNamed moves the thread; InNetNS moves it back
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
	h, err := handleIn(ns)
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
	if err := InNetNS(ns, fn); err != nil {
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
	err := InNetNS(ns, func() error {
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
