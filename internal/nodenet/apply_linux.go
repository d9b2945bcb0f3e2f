//go:build linux

package nodenet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TableName is the nftables table (family ip) that Apply owns in the pod's
// namespace; Apply replaces it whole, so nothing else may put rules in it.
const TableName = "nest"

// Sysctl paths Apply writes inside the pod's namespace.
const (
	// ReadySysctl (ip_nonlocal_bind) is the "ready" marker: Apply writes
	// "1" to it LAST, after the nftables table, the other sysctls, the lo
	// address and the ip rules; a helper init container in the pod waits
	// for this file to read "1" as the signal that the host ports are in
	// place. Keep that order when changing Apply. Since NodeIP became a
	// local address of the namespace the value itself is no longer needed
	// (binding NodeIP works without it) and is harmless; it is kept only
	// as the marker, because this file exists in every network namespace
	// and nothing else in the pod sets it.
	ReadySysctl = "/proc/sys/net/ipv4/ip_nonlocal_bind"
	// RouteLocalnetSysctl ("1") stops the kernel dropping, as martian, a
	// packet from or to 127.0.0.1 that DNAT sends out of eth0 (and its
	// reply). It would equally accept packets for 127.0.0.0/8 arriving on
	// eth0, so that a neighbour on the pod network could reach what the pod
	// binds to 127.0.0.1 only (CVE-2020-8558); the prerouting chain of
	// TableName drops those, as kube-proxy does.
	RouteLocalnetSysctl = "/proc/sys/net/ipv4/conf/all/route_localnet"
	// ARPIgnoreSysctl ("1"): answer ARP only for addresses of the interface
	// the request came in on, so the pod never claims NodeIP (on lo) on
	// eth0.
	ARPIgnoreSysctl = "/proc/sys/net/ipv4/conf/all/arp_ignore"
	// ARPAnnounceSysctl ("2"): take an ARP request's source address from the
	// outgoing interface's own addresses, never NodeIP.
	ARPAnnounceSysctl = "/proc/sys/net/ipv4/conf/all/arp_announce"
)

// The kernel applies max(conf/all, conf/<dev>) for both arp_ignore and
// arp_announce, so writing conf/all covers eth0 and any interface the pod
// has or gets; the per-interface files are left alone.
const (
	arpIgnore   = "1"
	arpAnnounce = "2"
)

// Preferences of the IPv4 policy routing rules Apply keeps in the pod's
// namespace. The kernel's default "0: from all lookup local" is moved to
// LocalRulePref so that NodeRulePref can come before it.
const (
	// NodeRulePref is "to <NodeIP>/32 iif lo lookup main": packets the pod
	// itself sends to NodeIP (iif lo matches locally generated packets)
	// skip the local table, where NodeIP now is, and leave through the
	// pod's interface to the control-plane pod that really has it.
	NodeRulePref = 50
	// LocalRulePref is "lookup local", replacing the default rule at 0.
	LocalRulePref = 100
)

// State is what Inspect found in a network namespace.
type State struct {
	// Table reports whether the table ip TableName exists.
	Table bool
	// DNATRules is the number of rules in its output chain: one per mapping
	// and node address (HostIP 0.0.0.0 counts twice).
	DNATRules int
	// LoopbackDropRules is the number of rules in its prerouting chain,
	// which drops 127.0.0.0/8 arriving from outside the namespace: 2.
	LoopbackDropRules int
	// NonlocalBind and RouteLocalnet report whether ReadySysctl and
	// RouteLocalnetSysctl read "1".
	NonlocalBind, RouteLocalnet bool
	// ARPIgnore and ARPAnnounce report whether ARPIgnoreSysctl reads "1" and
	// ARPAnnounceSysctl reads "2".
	ARPIgnore, ARPAnnounce bool
	// NodeIP lists the global-scope /32 IPv4 addresses on lo (the ones
	// Apply adds), comma-separated; "" if there are none.
	NodeIP string
	// NodeAddress reports that exactly one such address is on lo.
	NodeAddress bool
	// NodeRule reports that, for that address, the rule NodeRulePref
	// "to <NodeIP>/32 iif lo lookup main" exists.
	NodeRule bool
	// LocalRuleMoved reports that "LocalRulePref: lookup local" exists and
	// the kernel's default "0: lookup local" does not.
	LocalRuleMoved bool
}

// Apply makes the network namespace bind-mounted at netnsPath (such as
// /var/run/netns/cni-...) forward c's host ports and own c.NodeIP:
//
//  1. it replaces the table ip TableName in one nftables transaction: DNAT
//     of each host port in output, masquerade in postrouting of what was
//     DNAT'ed or comes from NodeIP and leaves the namespace, and, in
//     prerouting, a drop of packets from or to 127.0.0.0/8 that did not
//     come in on lo (see RouteLocalnetSysctl);
//  2. it writes ARPIgnoreSysctl, ARPAnnounceSysctl and RouteLocalnetSysctl;
//  3. it adds the rules LocalRulePref and NodeRulePref, then deletes the
//     default "0: lookup local" rule (in that order, so there is always a
//     local rule), then adds NodeIP/32 to lo; it removes the lo address and
//     rule of a previous, different NodeIP;
//  4. finally it writes ReadySysctl, the marker a helper init container
//     waits for.
//
// NodeIP must be local because connect() from a socket bound to it
// (curl --interface <NodeIP>) needs a local source address (with
// ip_nonlocal_bind alone the output route lookup fails with ENETUNREACH),
// and replies addressed to NodeIP must be delivered in the pod. NodeIP is
// still the control-plane pod's address on the pod network: arp_ignore and
// arp_announce keep the pod from answering ARP for it or using it as an ARP
// source, and the NodeRulePref rule sends the pod's own traffic to NodeIP
// (NodePorts, the kubelet API) out of its interface as before.
//
// Apply is idempotent; a mapping left out of c stops answering. The caller
// needs CAP_NET_ADMIN and CAP_SYS_ADMIN (setns). Errors name netnsPath and
// the step that failed; after an error some steps may be in place but
// ReadySysctl may not be set.
func Apply(netnsPath string, c Config) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("nodenet: apply %s: %w", netnsPath, err)
	}
	nodeIP := netip.MustParseAddr(c.NodeIP)
	ns, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return fmt.Errorf("nodenet: apply %s: open network namespace: %w", netnsPath, err)
	}
	defer ns.Close()
	if err := replaceTable(ns, nodeIP, c.Mappings); err != nil {
		return fmt.Errorf("nodenet: apply %s: replace nftables table ip %s: %w", netnsPath, TableName, err)
	}
	err = InNetNS(ns, func() error {
		if err := writeSysctl(ARPIgnoreSysctl, arpIgnore); err != nil {
			return err
		}
		if err := writeSysctl(ARPAnnounceSysctl, arpAnnounce); err != nil {
			return err
		}
		return writeSysctl(RouteLocalnetSysctl, "1")
	})
	if err != nil {
		return fmt.Errorf("nodenet: apply %s: sysctls: %w", netnsPath, err)
	}
	if err := ownNodeIP(ns, nodeIP); err != nil {
		return fmt.Errorf("nodenet: apply %s: node address %s: %w", netnsPath, nodeIP, err)
	}
	if err := InNetNS(ns, func() error { return writeSysctl(ReadySysctl, "1") }); err != nil {
		return fmt.Errorf("nodenet: apply %s: sysctls: %w", netnsPath, err)
	}
	return nil
}

// Inspect reports what Apply configured in the namespace at netnsPath, for
// tests and the agent's log. A missing table is not an error.
func Inspect(netnsPath string) (State, error) {
	ns, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return State{}, fmt.Errorf("nodenet: inspect %s: open network namespace: %w", netnsPath, err)
	}
	defer ns.Close()
	var s State
	if err := inspectTable(ns, &s); err != nil {
		return State{}, fmt.Errorf("nodenet: inspect %s: nftables: %w", netnsPath, err)
	}
	err = InNetNS(ns, func() error {
		var err error
		if s.RouteLocalnet, err = sysctlIs(RouteLocalnetSysctl, "1"); err != nil {
			return err
		}
		if s.ARPIgnore, err = sysctlIs(ARPIgnoreSysctl, arpIgnore); err != nil {
			return err
		}
		if s.ARPAnnounce, err = sysctlIs(ARPAnnounceSysctl, arpAnnounce); err != nil {
			return err
		}
		s.NonlocalBind, err = sysctlIs(ReadySysctl, "1")
		return err
	})
	if err != nil {
		return State{}, fmt.Errorf("nodenet: inspect %s: sysctls: %w", netnsPath, err)
	}
	if err := inspectNodeIP(ns, &s); err != nil {
		return State{}, fmt.Errorf("nodenet: inspect %s: node address: %w", netnsPath, err)
	}
	return s, nil
}

// ownNodeIP puts nodeIP/32 on lo and sets up the policy routing rules; see
// Apply. Every step checks first, so a second call changes nothing.
func ownNodeIP(ns netns.NsHandle, nodeIP netip.Addr) error {
	h, lo, err := loopbackOf(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	rules, err := h.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list ip rules: %w", err)
	}
	// Rules before the address: the new local rule, then the NodeIP rule in
	// front of it, and only then the default local rule goes, so there is
	// never a moment without a local rule. Until NodeIP is local the rules
	// change nothing; once it is added to lo, NodeRulePref already comes
	// before every local rule, so the pod's own traffic to NodeIP never
	// stays in the pod.
	if !slices.ContainsFunc(rules, func(r netlink.Rule) bool { return isLocalRule(r, LocalRulePref) }) {
		if err := h.RuleAdd(localRule(LocalRulePref)); err != nil {
			return fmt.Errorf("add ip rule %d lookup local: %w", LocalRulePref, err)
		}
	}
	if !slices.ContainsFunc(rules, func(r netlink.Rule) bool { return isNodeRule(r) && ruleDst(r) == nodeIP }) {
		if err := h.RuleAdd(nodeRule(nodeIP)); err != nil {
			return fmt.Errorf("add ip rule %d to %s/32 iif lo lookup main: %w", NodeRulePref, nodeIP, err)
		}
	}
	for _, r := range rules {
		if isLocalRule(r, 0) {
			if err := h.RuleDel(&r); err != nil {
				return fmt.Errorf("delete ip rule 0 lookup local: %w", err)
			}
		}
	}
	if err := h.AddrReplace(lo, &netlink.Addr{IPNet: hostNet(nodeIP)}); err != nil {
		return fmt.Errorf("add %s/32 to lo: %w", nodeIP, err)
	}
	// What a previous Apply added for another NodeIP: the address first, so
	// that while it is still local its rule still sends traffic out.
	addrs, err := h.AddrList(lo, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list addresses of lo: %w", err)
	}
	for _, a := range addrs {
		if ip, ok := nodeAddr(a); ok && ip != nodeIP {
			if err := h.AddrDel(lo, &a); err != nil {
				return fmt.Errorf("remove old node address %s/32 from lo: %w", ip, err)
			}
		}
	}
	for _, r := range rules {
		if isNodeRule(r) && ruleDst(r) != nodeIP {
			if err := h.RuleDel(&r); err != nil {
				return fmt.Errorf("delete old ip rule %d to %s: %w", NodeRulePref, r.Dst, err)
			}
		}
	}
	return nil
}

func inspectNodeIP(ns netns.NsHandle, s *State) error {
	h, lo, err := loopbackOf(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	addrs, err := h.AddrList(lo, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list addresses of lo: %w", err)
	}
	var found []string
	var nodeIP netip.Addr
	for _, a := range addrs {
		if ip, ok := nodeAddr(a); ok {
			found = append(found, ip.String())
			nodeIP = ip
		}
	}
	s.NodeIP = strings.Join(found, ",")
	s.NodeAddress = len(found) == 1
	rules, err := h.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list ip rules: %w", err)
	}
	s.NodeRule = s.NodeAddress && slices.ContainsFunc(rules, func(r netlink.Rule) bool { return isNodeRule(r) && ruleDst(r) == nodeIP })
	s.LocalRuleMoved = slices.ContainsFunc(rules, func(r netlink.Rule) bool { return isLocalRule(r, LocalRulePref) }) &&
		!slices.ContainsFunc(rules, func(r netlink.Rule) bool { return isLocalRule(r, 0) })
	return nil
}

// loopbackOf is a netlink handle in ns, which the caller closes, and ns's lo.
func loopbackOf(ns netns.NsHandle) (*netlink.Handle, netlink.Link, error) {
	h, err := handleIn(ns)
	if err != nil {
		return nil, nil, err
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		h.Close()
		return nil, nil, fmt.Errorf("find lo: %w", err)
	}
	return h, lo, nil
}

// handleIn is a netlink handle in ns, which the caller closes. Its sockets
// are made on a thread inside ns and keep that namespace wherever they are
// used. Not netlink.NewHandleAt: when it cannot switch its thread back, it
// unlocks the thread anyway, leaving it in ns for other goroutines.
func handleIn(ns netns.NsHandle) (*netlink.Handle, error) {
	var h *netlink.Handle
	err := InNetNS(ns, func() (err error) {
		h, err = netlink.NewHandle()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	return h, nil
}

func hostNet(a netip.Addr) *net.IPNet {
	b := a.As4()
	return &net.IPNet{IP: net.IP(b[:]), Mask: net.CIDRMask(32, 32)}
}

// nodeAddr recognises an address Apply put on lo: IPv4, /32, global scope
// (127.0.0.1/8 is host scope).
func nodeAddr(a netlink.Addr) (netip.Addr, bool) {
	if a.IPNet == nil || a.Scope != unix.RT_SCOPE_UNIVERSE {
		return netip.Addr{}, false
	}
	if ones, bits := a.Mask.Size(); ones != 32 || bits != 32 {
		return netip.Addr{}, false
	}
	ip, ok := netip.AddrFromSlice(a.IP.To4())
	return ip, ok && ip.Is4()
}

func localRule(pref int) *netlink.Rule {
	r := netlink.NewRule() // not Rule{}: its zero Goto would mean "goto 0"
	r.Family = netlink.FAMILY_V4
	r.Priority = pref
	r.Table = unix.RT_TABLE_LOCAL
	return r
}

func nodeRule(nodeIP netip.Addr) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = netlink.FAMILY_V4
	r.Priority = NodeRulePref
	r.Table = unix.RT_TABLE_MAIN
	r.Dst = hostNet(nodeIP)
	r.IifName = "lo"
	return r
}

// unconditional reports that r has no selector: "from all".
func unconditional(r netlink.Rule) bool {
	return r.Src == nil && r.Dst == nil && r.IifName == "" && r.OifName == "" &&
		r.Mark == 0 && r.Mask == nil && r.Tos == 0 && r.IPProto == 0 &&
		r.Dport == nil && r.Sport == nil && r.UIDRange == nil && !r.Invert && r.Goto < 0
}

// isLocalRule matches "<pref>: from all lookup local".
func isLocalRule(r netlink.Rule, pref int) bool {
	return r.Priority == pref && r.Table == unix.RT_TABLE_LOCAL && unconditional(r)
}

// isNodeRule matches a rule Apply adds at NodeRulePref, for any NodeIP.
func isNodeRule(r netlink.Rule) bool {
	if r.Priority != NodeRulePref || r.Table != unix.RT_TABLE_MAIN || r.IifName != "lo" || r.Dst == nil {
		return false
	}
	ones, bits := r.Dst.Mask.Size()
	return ones == 32 && bits == 32
}

// ruleDst is the destination of a rule isNodeRule matched.
func ruleDst(r netlink.Rule) netip.Addr {
	ip, _ := netip.AddrFromSlice(r.Dst.IP.To4())
	return ip
}

func replaceTable(ns netns.NsHandle, nodeIP netip.Addr, mappings []Mapping) error {
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	table := &nftables.Table{Name: TableName, Family: nftables.TableFamilyIPv4}
	// Add (a no-op if present), delete, add: deleting alone fails the whole
	// batch when the table is absent, and the kernel applies the batch
	// atomically, so no packet sees a half-built table.
	conn.AddTable(table)
	conn.DelTable(table)
	conn.AddTable(table)
	output := conn.AddChain(&nftables.Chain{
		Name: "output", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest,
	})
	for _, m := range mappings {
		for _, d := range m.destinations(nodeIP) {
			conn.AddRule(&nftables.Rule{Table: table, Chain: output, Exprs: dnatExprs(d, m)})
		}
	}
	postrouting := conn.AddChain(&nftables.Chain{
		Name: "postrouting", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	conn.AddRule(&nftables.Rule{Table: table, Chain: postrouting, Exprs: masqueradeExprs()})
	conn.AddRule(&nftables.Rule{Table: table, Chain: postrouting, Exprs: masqueradeNodeIPExprs(nodeIP)})
	// Raw priority, before conntrack and NAT: the rules see the addresses
	// on the wire. Replies to what output DNAT'ed and postrouting
	// masqueraded come back to eth0's address, so they are not dropped.
	prerouting := conn.AddChain(&nftables.Chain{
		Name: "prerouting", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw,
	})
	conn.AddRule(&nftables.Rule{Table: table, Chain: prerouting, Exprs: dropLoopbackExprs(daddrOffset)})
	conn.AddRule(&nftables.Rule{Table: table, Chain: prerouting, Exprs: dropLoopbackExprs(saddrOffset)})
	return conn.Flush()
}

// Offsets in the IPv4 header of the addresses dropLoopbackExprs matches.
const (
	saddrOffset = 12
	daddrOffset = 16
)

// dropLoopbackExprs is `iifname != "lo" ip daddr 127.0.0.0/8 drop` (offset
// daddrOffset) or the same for ip saddr (saddrOffset): RouteLocalnetSysctl
// would otherwise let a neighbour on the pod network reach the pod's
// 127.0.0.1, or pass for it.
func dropLoopbackExprs(offset uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname("lo")},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127, 0, 0, 0}},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

var protoNumbers = map[string]byte{TCP: unix.IPPROTO_TCP, UDP: unix.IPPROTO_UDP, SCTP: unix.IPPROTO_SCTP}

// dnatExprs is `ip daddr <d.addr> meta l4proto <proto> th dport <d.port>
// dnat to <m.PodIP>:<m.PodPort>`; the destination port sits at offset 2 of
// the TCP, UDP and SCTP headers alike.
func dnatExprs(d destination, m Mapping) []expr.Any {
	daddr := d.addr.As4()
	pod := netip.MustParseAddr(m.PodIP).As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: daddr[:]},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{protoNumbers[d.proto]}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(d.port)},
		&expr.Immediate{Register: 1, Data: pod[:]},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(uint16(m.PodPort))},
		&expr.NAT{
			Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4,
			RegAddrMin: 1, RegProtoMin: 2, Specified: true,
		},
	}
}

// ipsDstNAT is the conntrack status bit IPS_DST_NAT.
const ipsDstNAT = 1 << 5

// masqueradeExprs is `ct status dnat oifname != "lo" masquerade`: the source
// of a DNAT'ed packet is 127.0.0.1 or NodeIP, which the pod network cannot
// answer, unless it stays on lo (the target is the pod itself).
func masqueradeExprs() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{
			SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: make([]byte, 4),
		},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname("lo")},
		&expr.Masq{},
	}
}

// masqueradeNodeIPExprs is `ip saddr <NodeIP> oifname != "lo" masquerade`:
// a socket bound to NodeIP (curl --interface) talking to anything on the
// pod network, whose answer would go to the control-plane pod that really
// has NodeIP. The reply to the masqueraded address is de-NATed back to
// NodeIP and, NodeIP being local, delivered in the pod.
func masqueradeNodeIPExprs(nodeIP netip.Addr) []expr.Any {
	saddr := nodeIP.As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: saddr[:]},
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: ifname("lo")},
		&expr.Masq{},
	}
}

// ifname pads to IFNAMSIZ so the comparison is exact, not a prefix match.
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

// inspectTable sets s.Table, s.DNATRules and s.LoopbackDropRules.
func inspectTable(ns netns.NsHandle, s *State) error {
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(tables, func(t *nftables.Table) bool { return t.Name == TableName })
	if i < 0 {
		return nil
	}
	s.Table = true
	t := tables[i]
	if s.DNATRules, err = countRules(conn, t, "output"); err != nil {
		return err
	}
	s.LoopbackDropRules, err = countRules(conn, t, "prerouting")
	return err
}

func countRules(conn *nftables.Conn, t *nftables.Table, chain string) (int, error) {
	rules, err := conn.GetRules(t, &nftables.Chain{Name: chain, Table: t})
	return len(rules), err
}

// InNetNS runs fn on an OS thread switched into the network namespace ns
// and returns fn's error. /proc/sys/net and new sockets belong to the
// calling thread's namespace, so the thread is locked; a socket (such as a
// netlink handle's) made in fn stays in ns after InNetNS returns. fn runs
// in a goroutine of its own so that, if switching back fails, that
// goroutine ends still locked and the runtime kills its thread instead of
// handing a thread in the wrong namespace to other goroutines; the error
// then says so. fn must not start goroutines that need to be in ns, nor
// unlock the thread. The caller needs CAP_SYS_ADMIN.
func InNetNS(ns netns.NsHandle, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread() // the thread has not moved
			done <- fmt.Errorf("remember current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		fnErr := fn()
		if err := netns.Set(orig); err != nil {
			done <- errors.Join(fnErr, fmt.Errorf("return to original network namespace (thread discarded): %w", err))
			return // still locked: the thread dies with this goroutine
		}
		runtime.UnlockOSThread()
		done <- fnErr
	}()
	return <-done
}

func writeSysctl(path, value string) error {
	if err := os.WriteFile(path, []byte(value+"\n"), 0); err != nil {
		return fmt.Errorf("write %s to %s: %w", value, path, err)
	}
	return nil
}

func sysctlIs(path, value string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(b)) == value, nil
}
