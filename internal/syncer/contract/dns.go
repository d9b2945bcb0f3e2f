package contract

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// The tenant's CoreDNS runs in the control-plane pod with the Corefile
// nest-manager writes (Corefile) and serves the files nest-syncer writes
// (HostsFileName, ZoneFileName, MemberHostsFileName).

// HostsFileName and ZoneFileName are the files the syncer writes for the
// tenant's CoreDNS.
const (
	HostsFileName = "hosts"
	ZoneFileName  = "zone"
)

// DefaultDNSPort and DefaultDNSHealthPort are where the tenant's CoreDNS
// serves DNS and /health in the control-plane pod.
const (
	DefaultDNSPort       = 1053
	DefaultDNSHealthPort = 8080
)

// ClusterDNSNamespace and ClusterDNSName name the tenant's cluster DNS
// Service, kube-system/kube-dns as kubeadm clusters have it, which
// nest-syncer keeps.
const (
	ClusterDNSNamespace = "kube-system"
	ClusterDNSName      = "kube-dns"
)

// EndpointSliceManager is the endpointslice.kubernetes.io/managed-by value
// of the EndpointSlices nest-syncer writes, so the host's EndpointSlice
// controllers leave them alone.
const EndpointSliceManager = "nest-syncer.nest.dev"

// Corefile is CoreDNS' configuration for the tenant. The hosts file the
// syncer writes (hostsPath) answers A and PTR queries for the Services and
// pods it holds. Behind it, the zone file the syncer writes (zonePath,
// ClusterZone) answers the rest of the cluster domain: SRV records of named
// ports, CNAMEs of ExternalName Services, and NXDOMAIN with the zone's SOA
// for every other name (the hosts plugin alone would answer SERVFAIL, and
// resolvers stop their search-path walk on SERVFAIL). The static zone at
// reversePath (ZoneFile) does the same for reverse names. Nothing is
// forwarded anywhere else. CoreDNS serves on port, and /health on healthPort
// and /ready on the next port, both on loopback only: other pods must not
// reach them.
//
// Each member slot has a view of its own on FirstMemberDNSPort+slot, for
// the tenant's pods in that member: the names in the slot's hosts file
// (MemberHostsFileName, next to hostsPath), which nest-syncer's member
// network writes with
// the member's addresses, then the static SOA-only zone at reversePath
// (ZoneFile) for the cluster domain, so every other name under it, SRV
// records and ExternalName CNAMEs included, is NXDOMAIN there.
func Corefile(port int, hostsPath, zonePath, reversePath, clusterDomain string, healthPort int) string {
	return mainView(port, hostsPath, zonePath, reversePath, clusterDomain, healthPort) + memberViews(path.Dir(hostsPath), reversePath, clusterDomain)
}

// memberViews are the Corefile's server blocks of the member views; soaPath
// is a zone file with the SOA alone.
func memberViews(dir, soaPath, clusterDomain string) string {
	var b strings.Builder
	for slot := range MaxMembers {
		fmt.Fprintf(&b, `.:%d {
    errors
    hosts %s %s {
        reload 1s
        ttl 5
        fallthrough
    }
    file %s %s
}
`, FirstMemberDNSPort+slot, path.Join(dir, MemberHostsFileName(slot)), clusterDomain, soaPath, clusterDomain)
	}
	return b.String()
}

func mainView(port int, hostsPath, zonePath, reversePath, clusterDomain string, healthPort int) string {
	return fmt.Sprintf(`.:%d {
    errors
    health 127.0.0.1:%d
    ready 127.0.0.1:%d
    hosts %s %s in-addr.arpa ip6.arpa {
        reload 1s
        ttl 5
        fallthrough
    }
    file %s %s {
        reload 1s
    }
    file %s in-addr.arpa ip6.arpa
    loadbalance
}
`, port, healthPort, healthPort+1, hostsPath, clusterDomain, zonePath, clusterDomain, reversePath)
}

// ZoneFile is the static zone CoreDNS' file plugin serves for the reverse
// zones: an SOA alone, at each zone's origin, so every reverse name the
// hosts file lacks is NXDOMAIN. The negative-answer TTL is as short as the
// records' (5 s).
func ZoneFile(clusterDomain string) string {
	return soa("@", clusterDomain, 1)
}

// soa is a zone's SOA and NS records at origin, with serial.
func soa(origin, clusterDomain string, serial uint32) string {
	return fmt.Sprintf("%[1]s 5 IN SOA ns.dns.%[2]s. hostmaster.%[2]s. %[3]d 7200 1800 86400 5\n%[1]s 5 IN NS ns.dns.%[2]s.\n", origin, clusterDomain, serial)
}

// ZoneSerial is the SOA serial of a zone file ClusterZone rendered, 0 when
// it has none.
func ZoneSerial(zone []byte) uint32 {
	for line := range strings.Lines(string(zone)) {
		f := strings.Fields(line)
		if len(f) > 6 && f[3] == "SOA" {
			if n, err := strconv.ParseUint(f[6], 10, 32); err == nil {
				return uint32(n)
			}
		}
	}
	return 0
}

// ClusterZone renders the cluster domain's zone file: its SOA with serial
// (CoreDNS reloads the file when the serial grows) and records, sorted, so
// an unchanged set renders to identical bytes.
func ClusterZone(clusterDomain string, serial uint32, records []string) []byte {
	sorted := slices.Clone(records)
	slices.Sort(sorted)
	var b strings.Builder
	b.WriteString("; Written by nest-syncer: SRV records of named Service ports and CNAMEs of ExternalName Services.\n")
	b.WriteString(soa(clusterDomain+".", clusterDomain, serial))
	for _, r := range sorted {
		b.WriteString(r + "\n")
	}
	return []byte(b.String())
}
