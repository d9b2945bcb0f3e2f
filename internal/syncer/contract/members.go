package contract

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Member clusters are clusters outside the host where a tenant may place
// pods (issue 10). nest-manager sets each grant up in the member (a
// namespace, a service account limited to it, a ResourceQuota) and hands
// nest-syncer what it needs to place pods there through one host Secret in
// the tenant's host namespace, never through the tenant. nest-syncer shows
// each member as one more tainted virtual node and runs the pods bound to
// it in the member, with the same translation as on the host.

// MembersSecret is the name of the host Secret, in the VirtualCluster's host
// namespace, that holds the member placements of the VirtualCluster vc under
// MembersKey (a MemberPlacements, as JSON).
func MembersSecret(vc string) string { return vc + "-members" }

// MembersKey is the key of MembersSecret's data.
const MembersKey = "members.json"

// MemberNodePrefix begins the name of the tenant node that stands for a
// member cluster; MemberNodeName gives the whole name.
const MemberNodePrefix = "nest-member-"

// MemberNodeName is the tenant node that stands for the member cluster member.
func MemberNodeName(member string) string { return MemberNodePrefix + member }

// MemberTaintKey is the key of the NoSchedule taint on a member node (its
// value is the member's name) and of the label naming the member, so that
// only pods that tolerate or select it land there.
const MemberTaintKey = "nest.dev/member"

// MemberPlacements is what nest-syncer needs to place a tenant's pods in its
// member clusters: one entry per grant that nest-manager has set up.
type MemberPlacements struct {
	Members []MemberPlacement `json:"members"`
}

// MemberPlacement is one member cluster as nest-syncer uses it.
type MemberPlacement struct {
	// Name of the MemberCluster; the tenant node is MemberNodeName(Name).
	Name string `json:"name"`
	// Namespace is the tenant's namespace in the member, where its pods,
	// ConfigMaps and Secrets go.
	Namespace string `json:"namespace"`
	// Server is the member API server's URL, CAData the PEM of the CA
	// that signs its certificate, and TLSServerName the name to verify it
	// with, when the URL's host is not in the certificate.
	Server        string `json:"server"`
	CAData        []byte `json:"caData,omitempty"`
	TLSServerName string `json:"tlsServerName,omitempty"`
	// Token is a short-lived token of the tenant's service account in the
	// member, which may act only in Namespace; nest-manager replaces it
	// before it expires (TokenExpiry).
	Token       string    `json:"token"`
	TokenExpiry time.Time `json:"tokenExpiry"`
	// APIServerAddress (host:port) and DNSAddress (an IP) are where pods in
	// the member reach the tenant's API server and DNS.
	APIServerAddress string `json:"apiServerAddress"`
	DNSAddress       string `json:"dnsAddress"`
	// NodePortAddress, when set, is the IP where the member's nodes reach
	// the host's node ports: the tenant's DNS and its exposed Services
	// reach member pods through it (nest-syncer's member network), and
	// DNSAddress is not used.
	NodePortAddress string `json:"nodePortAddress,omitempty"`
	// LoadBalancer, set only without NodePortAddress, says that the member
	// network goes through the address of a host LoadBalancer Service
	// (MemberHostService) instead of node ports; DNSAddress is not used.
	LoadBalancer bool `json:"loadBalancer,omitempty"`
	// InjectorCert and InjectorKey (PEM) serve the member's network
	// injector (nest-syncer serves it): a certificate for
	// nest-injector.<Namespace>.svc followed by the CA that signed it, which
	// the member's webhook configuration trusts. Set with a member network
	// (HasMemberNetwork).
	InjectorCert []byte `json:"injectorCert,omitempty"`
	InjectorKey  []byte `json:"injectorKey,omitempty"`
	// Nodes is how many of the member's Nodes were Ready and schedulable
	// at nest-manager's last probe; with none, the member node is NotReady.
	Nodes int32 `json:"nodes"`
	// Allocatable is the member node's capacity: for each resource the
	// grant names, the smaller of the grant and what the member offers;
	// cpu, memory, ephemeral-storage and pods the grant does not name as
	// the member has them. Pods are admitted against it before anything is
	// created in the member.
	Allocatable corev1.ResourceList `json:"allocatable"`
}

// HasMemberNetwork says whether nest-syncer keeps a path from the member's
// pods back to the tenant's DNS, injector and exposed Services, through
// host node ports (NodePortAddress) or a host LoadBalancer (LoadBalancer).
func (p MemberPlacement) HasMemberNetwork() bool { return p.NodePortAddress != "" || p.LoadBalancer }

// ParseMemberPlacements reads MembersSecret's data and checks each entry,
// naming the entry and field at fault.
func ParseMemberPlacements(data []byte) (MemberPlacements, error) {
	var p MemberPlacements
	if len(data) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("%s: %w", MembersKey, err)
	}
	seen := map[string]bool{}
	for i, m := range p.Members {
		switch {
		case m.Name == "":
			return p, fmt.Errorf("%s: members[%d].name is empty", MembersKey, i)
		case seen[m.Name]:
			return p, fmt.Errorf("%s: members[%d].name %q appears twice", MembersKey, i, m.Name)
		case m.Namespace == "":
			return p, fmt.Errorf("%s: members[%d] (%s): namespace is empty", MembersKey, i, m.Name)
		case m.Server == "":
			return p, fmt.Errorf("%s: members[%d] (%s): server is empty", MembersKey, i, m.Name)
		case m.Token == "":
			return p, fmt.Errorf("%s: members[%d] (%s): token is empty", MembersKey, i, m.Name)
		}
		seen[m.Name] = true
	}
	slices.SortFunc(p.Members, func(a, b MemberPlacement) int { return cmp.Compare(a.Name, b.Name) })
	return p, nil
}

// Marshal renders p as MembersSecret's data, sorted by name so that an
// unchanged set writes the same bytes.
func (p MemberPlacements) Marshal() ([]byte, error) {
	p.Members = slices.Clone(p.Members)
	slices.SortFunc(p.Members, func(a, b MemberPlacement) int { return cmp.Compare(a.Name, b.Name) })
	return json.Marshal(p)
}

// FirstMemberDNSPort is the port of the tenant CoreDNS' view for the member
// in slot 0 (the member node on FirstMemberKubeletPort); slot i answers on
// FirstMemberDNSPort+i.
const FirstMemberDNSPort = 1060

// MaxMembers is how many member syncers (and CoreDNS views) one tenant has
// at most: one per grant.
const MaxMembers = 8

// LabelMemberNetwork marks the Services and EndpointSlices the member
// network keeps, on the host and in the member, with the member's name.
const LabelMemberNetwork = "nest.dev/member-network"

// MemberHostsFileName is the hosts file of the tenant CoreDNS' view for the
// member in slot.
func MemberHostsFileName(slot int) string { return "member-" + strconv.Itoa(slot) + ".hosts" }

// MemberHostService names the host Service that exposes a tenant's DNS and
// node ports to member: <vc>-member-<member>, cut with a hash suffix to a
// Service name's 63 characters.
func MemberHostService(vc, member string) string {
	return ShortName(vc+"-member-"+member, vc+"/"+member)
}

// FirstMemberInjectorPort is the injector port of the member in slot 0;
// slot i serves on FirstMemberInjectorPort+i.
const FirstMemberInjectorPort = 10280

// MemberInjectorService is the member Service the webhook configuration
// calls, on port 443, at InjectorPath.
const (
	MemberInjectorService = "nest-injector"
	InjectorPath          = "/inject"
)

// FirstMemberKubeletPort is the kubelet API port of the first member node;
// the others take the next free ones, one per member (at most
// MaxMembers, as many as a VirtualCluster may have grants). The range
// is clear of every port the control-plane pod serves (kube-controller-
// manager's 10257, kube-scheduler's 10259, the syncer's 10250).
const FirstMemberKubeletPort = 10270

// VirtualNodeKubeletPort is the kubelet API port the host's virtual nodes
// advertise.
const VirtualNodeKubeletPort = 10250

// KubeletPorts are the ports of the kubelet APIs a syncer serves on its
// pod IP: the virtual nodes' port, and the first and last of the member
// nodes' range.
func KubeletPorts() (virtualNode, firstMember, lastMember int32) {
	return VirtualNodeKubeletPort, FirstMemberKubeletPort, FirstMemberKubeletPort + MaxMembers - 1
}
