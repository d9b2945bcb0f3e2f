// Package nodenet gives a tenant's hostNetwork pod the host ports of its
// virtual node. Such a pod runs on the host cluster as an ordinary pod with a
// network namespace of its own, so the node's hostPorts (held by other pods)
// and the node's InternalIP are not there. nest-syncer writes a Config into
// the host pod's Annotation; the privileged node agent reads it and calls
// Apply on the pod's network namespace, which DNATs each host port to the pod
// holding it.
//
// The node IP is also made an address of the namespace (a /32 on lo),
// because a kubelet's node has it: a socket bound to it (curl --interface
// <NodeIP>) can only connect() from a local source address, and the replies
// addressed to it must be delivered in the pod. It is nevertheless another
// pod's IP on the pod network (the control-plane pod's, serving NodePorts
// and the kubelet API), so it is not stolen: arp_ignore and arp_announce
// keep the pod from answering ARP for it or using it as an ARP source, and
// a policy routing rule sends the pod's own traffic to it out of its
// interface instead of to its own lo.
//
// Only IPv4 is supported.
package nodenet

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
)

// Annotation is the host pod annotation holding the JSON of a Config
// (Config.Encode), written by nest-syncer and read by the node agent.
const Annotation = "nest.dev/node-network"

// MaxMappings bounds Config.Mappings: every mapping costs up to two rules
// that each packet leaving the pod is matched against.
const MaxMappings = 256

// AllAddresses as a Mapping.HostIP means every address of the virtual node:
// 127.0.0.1 and Config.NodeIP, as a kubelet binds 0.0.0.0.
const AllAddresses = "0.0.0.0"

// Protocols accepted in Mapping.Protocol, spelled as corev1.Protocol.
const (
	TCP  = "TCP"
	UDP  = "UDP"
	SCTP = "SCTP"
)

// loopback is the node address that HostIP 0.0.0.0 adds besides NodeIP.
var loopback = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// Mapping is one host port of the virtual node, forwarded to the pod that
// holds it.
type Mapping struct {
	// Protocol is "TCP", "UDP" or "SCTP" (Kubernetes corev1.Protocol spelling).
	Protocol string `json:"protocol"`
	// HostIP is the node address the port is bound to: "0.0.0.0" means every
	// node address (127.0.0.1 and NodeIP), else one IPv4 address in dotted
	// decimal.
	HostIP string `json:"hostIP"`
	// HostPort is the port on the node, 1-65535.
	HostPort int32 `json:"hostPort"`
	// PodIP is the IPv4 address of the pod holding the port.
	PodIP string `json:"podIP"`
	// PodPort is that pod's containerPort, 1-65535.
	PodPort int32 `json:"podPort"`
}

// Config is what one hostNetwork pod's network namespace gets.
type Config struct {
	// NodeIP is the virtual node's InternalIP (IPv4). It must not be
	// loopback or unspecified: 127.0.0.1 is always a node address anyway.
	NodeIP string `json:"nodeIP"`
	// Mappings are the node's host ports, at most MaxMappings. Their order
	// carries no meaning; Encode sorts them.
	Mappings []Mapping `json:"mappings"`
}

// Parse decodes the JSON of a Config (as found in Annotation) and validates
// it. Unknown fields are an error rather than ignored, because a field this
// agent does not understand may change which packets go where.
func Parse(s string) (Config, error) {
	var c Config
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("nodenet: parse %s: %w", Annotation, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("nodenet: parse %s: trailing data after the JSON object", Annotation)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Encode validates c and returns its canonical JSON: mappings sorted, no
// whitespace, so that equal configurations give equal annotations and the
// syncer does not rewrite the pod for a reordering. c is not modified.
func (c Config) Encode() (string, error) {
	if err := c.Validate(); err != nil {
		return "", err
	}
	out := Config{NodeIP: c.NodeIP, Mappings: slices.Clone(c.Mappings)}
	if out.Mappings == nil {
		out.Mappings = []Mapping{} // "[]", not "null": one spelling per config
	}
	slices.SortFunc(out.Mappings, compareMappings)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return "", fmt.Errorf("nodenet: encode: %w", err)
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

func compareMappings(a, b Mapping) int {
	if c := strings.Compare(a.Protocol, b.Protocol); c != 0 {
		return c
	}
	if c := compareAddrStrings(a.HostIP, b.HostIP); c != 0 {
		return c
	}
	if a.HostPort != b.HostPort {
		return int(a.HostPort - b.HostPort)
	}
	if c := compareAddrStrings(a.PodIP, b.PodIP); c != 0 {
		return c
	}
	return int(a.PodPort - b.PodPort)
}

// compareAddrStrings orders numerically so 10.0.0.9 sorts before 10.0.0.10;
// Validate has already made both parseable.
func compareAddrStrings(a, b string) int {
	return netip.MustParseAddr(a).Compare(netip.MustParseAddr(b))
}

// Validate reports the first problem in c as an error naming the field, the
// bad value and what is accepted, e.g.
// `mappings[2].hostPort: 0 is out of range 1-65535`. Two mappings that claim
// the same protocol, address and port (0.0.0.0 overlaps both node
// addresses) are refused, because only one of them could get the packets.
func (c Config) Validate() error {
	nodeIP, err := parseNodeIP(c.NodeIP)
	if err != nil {
		return err
	}
	if len(c.Mappings) > MaxMappings {
		return fmt.Errorf("nodenet: mappings: %d mappings, at most %d are allowed", len(c.Mappings), MaxMappings)
	}
	claimed := map[destination]int{}
	for i, m := range c.Mappings {
		if err := m.validate(); err != nil {
			return fmt.Errorf("nodenet: mappings[%d].%w", i, err)
		}
		for _, d := range m.destinations(nodeIP) {
			if j, dup := claimed[d]; dup {
				return fmt.Errorf("nodenet: mappings[%d]: %s %s:%d is already mapped by mappings[%d]; remove one of them",
					i, m.Protocol, d.addr, d.port, j)
			}
			claimed[d] = i
		}
	}
	return nil
}

func parseNodeIP(s string) (netip.Addr, error) {
	a, err := parseIPv4(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("nodenet: nodeIP: %w", err)
	}
	if a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return netip.Addr{}, fmt.Errorf("nodenet: nodeIP: %s is not a unicast address; set the virtual node's InternalIP", s)
	}
	return a, nil
}

// validate returns errors that start with the field name, for Validate to
// prefix with the mapping's index.
func (m Mapping) validate() error {
	switch m.Protocol {
	case TCP, UDP, SCTP:
	default:
		return fmt.Errorf("protocol: %q is not one of TCP, UDP, SCTP (uppercase, as corev1.Protocol)", m.Protocol)
	}
	if _, err := parseIPv4(m.HostIP); err != nil {
		return fmt.Errorf("hostIP: %w (use 0.0.0.0 for every node address)", err)
	}
	if err := checkPort(m.HostPort); err != nil {
		return fmt.Errorf("hostPort: %w", err)
	}
	pod, err := parseIPv4(m.PodIP)
	if err != nil {
		return fmt.Errorf("podIP: %w", err)
	}
	if pod.IsLoopback() || pod.IsUnspecified() || pod.IsMulticast() {
		return fmt.Errorf("podIP: %s is not a pod address; use the IP of the pod holding the port", m.PodIP)
	}
	if err := checkPort(m.PodPort); err != nil {
		return fmt.Errorf("podPort: %w", err)
	}
	return nil
}

func parseIPv4(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, errors.New("empty, an IPv4 address is required")
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%q is not an IPv4 address in dotted decimal (IPv6 is not supported)", s)
	}
	return a, nil
}

func checkPort(p int32) error {
	if p < 1 || p > 65535 {
		return fmt.Errorf("%d is out of range 1-65535", p)
	}
	return nil
}

// destination is one (protocol, node address, port) a mapping answers on.
type destination struct {
	proto string
	addr  netip.Addr
	port  uint16
}

// destinations expands HostIP 0.0.0.0 into the node's two addresses. m must
// be valid.
func (m Mapping) destinations(nodeIP netip.Addr) []destination {
	d := destination{proto: m.Protocol, port: uint16(m.HostPort)}
	if m.HostIP != AllAddresses {
		d.addr = netip.MustParseAddr(m.HostIP)
		return []destination{d}
	}
	lo, node := d, d
	lo.addr, node.addr = loopback, nodeIP
	return []destination{lo, node}
}
