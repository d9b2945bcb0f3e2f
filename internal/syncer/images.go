package syncer

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// alwaysDenied are the registries every tenant is denied: addresses of the
// node itself and of its link (cloud metadata services), and the names RFC
// 6761 reserves for loopback. Each has what the tenant is told it is: these
// are the same on every host, so naming them tells nothing of this one.
var alwaysDenied = []deniedRegistry{
	{"localhost", "the node itself (localhost)"}, {"*.localhost", "the node itself (a localhost name)"},
	{"127.0.0.0/8", "the node itself (loopback)"}, {"::1/128", "the node itself (loopback)"},
	{"169.254.0.0/16", "the node's link (link-local, where cloud metadata services answer)"},
	{"fe80::/10", "the node's link (link-local)"},
	{"0.0.0.0/8", "an unspecified address, which reaches the node itself"}, {"::/128", "an unspecified address, which reaches the node itself"},
	{"224.0.0.0/4", "a multicast address"}, {"ff00::/8", "a multicast address"},
}

// deniedRegistry is a registry entry every tenant is denied, and what it
// is, in the tenant's words.
type deniedRegistry struct{ entry, what string }

// alwaysDeniedEntries are the entries of alwaysDenied, as matchRegistry
// takes them.
var alwaysDeniedEntries = func() []string {
	out := make([]string, len(alwaysDenied))
	for i, d := range alwaysDenied {
		out[i] = d.entry
	}
	return out
}()

// dockerHub is how go-containerregistry names Docker Hub's registry; image
// references and contract.ImagePolicy entries say docker.io.
const dockerHub = "index.docker.io"

// checkImage refuses image, with a reason for the tenant, when its
// registry is denied or not allowed. field names where the image was
// given, such as spec.containers[0].image. The reason names the registry
// the tenant wrote and, for the registries every host denies, what they
// are; never the deny list entry that matched one of the host's own ranges
// or the platform's list, which would tell the tenant the host's layout.
// The allowed registries are the VirtualCluster's, the tenant's to use.
func checkImage(p contract.ImagePolicy, field, image string) error {
	ref, err := name.ParseReference(image)
	if err != nil {
		return fmt.Errorf("%s: %q is not an image reference: %v", field, image, err)
	}
	registry := ref.Context().RegistryStr()
	if host, _ := splitRegistry(registry); isOddNumericHost(host) {
		return fmt.Errorf("%s: registry %s is an IP address in a non-standard form, which resolvers read as any address: write the registry's name", field, registry)
	}
	if entry, ok := matchRegistry(alwaysDeniedEntries, registry); ok {
		what := alwaysDenied[slices.IndexFunc(alwaysDenied, func(d deniedRegistry) bool { return d.entry == entry })].what
		return fmt.Errorf("%s: images from %s are not allowed on the virtual node: the registry is %s; use another registry", field, registryName(registry), what)
	}
	if _, ok := matchRegistry(p.Denied, registry); ok {
		return fmt.Errorf("%s: images from %s are not allowed on the virtual node: the registry is in the host's networks or on the platform's deny list; use another registry", field, registryName(registry))
	}
	if len(p.Allowed) > 0 {
		if _, ok := matchRegistry(p.Allowed, registry); !ok {
			return fmt.Errorf("%s: images from %s are not allowed on the virtual node: use one of the registries the VirtualCluster allows (spec.virtualNode.imageRegistries): %s", field, registryName(registry), strings.Join(p.Allowed, ", "))
		}
	}
	return nil
}

// checkPodImages checks against p every image the pod spec names: its containers', init
// containers', ephemeral containers' and image volumes'.
func checkPodImages(p contract.ImagePolicy, spec *corev1.PodSpec) error {
	for _, list := range []struct {
		field      string
		containers []corev1.Container
	}{{"spec.initContainers", spec.InitContainers}, {"spec.containers", spec.Containers}, {"spec.ephemeralContainers", ephemeralAsContainers(spec.EphemeralContainers)}} {
		for i, c := range list.containers {
			if err := checkImage(p, fmt.Sprintf("%s[%d].image", list.field, i), c.Image); err != nil {
				return err
			}
		}
	}
	for i, v := range spec.Volumes {
		if v.Image == nil {
			continue
		}
		if err := checkImage(p, fmt.Sprintf("spec.volumes[%d].image.reference", i), v.Image.Reference); err != nil {
			return err
		}
	}
	return nil
}

// registryName is the registry as image references write it.
func registryName(registry string) string {
	if registry == dockerHub {
		return "docker.io"
	}
	return registry
}

// matchRegistry returns the first entry of list that registry (host or
// host:port, as go-containerregistry gives it) matches.
func matchRegistry(list []string, registry string) (string, bool) {
	host, port := splitRegistry(registry)
	addr, err := netip.ParseAddr(host)
	isIP := err == nil
	for _, entry := range list {
		if prefix, err := netip.ParsePrefix(entry); err == nil {
			if isIP && prefix.Contains(addr.Unmap()) {
				return entry, true
			}
			continue
		}
		if matchRegistryName(strings.ToLower(entry), host, port) {
			return entry, true
		}
	}
	return "", false
}

// matchRegistryName reports whether entry (host, host:port or *.domain)
// names host and port. An entry without a port names every port.
func matchRegistryName(entry, host, port string) bool {
	if entry == "docker.io" {
		entry = dockerHub
	}
	if suffix, ok := strings.CutPrefix(entry, "*."); ok {
		return strings.HasSuffix(host, "."+suffix)
	}
	entryHost, entryPort := splitRegistry(entry)
	return entryHost == host && (entryPort == "" || entryPort == port)
}

// splitRegistry splits host[:port] (an IPv6 host in brackets) and lowers the
// host's case; a trailing dot of a fully qualified name is dropped, so
// "localhost." is "localhost".
func splitRegistry(registry string) (host, port string) {
	host = registry
	if h, p, err := net.SplitHostPort(registry); err == nil {
		host, port = h, p
	}
	host = strings.Trim(host, "[]")
	return strings.TrimSuffix(strings.ToLower(host), "."), port
}

// isOddNumericHost reports whether host is a number a C resolver reads as
// an IPv4 address (inet_aton: "2130706433", "0x7f.1", "0177.0.0.1",
// "127.1") but is not one in dotted-quad form, which netip parses and the
// deny lists check.
func isOddNumericHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	for _, label := range strings.Split(host, ".") {
		digits := strings.TrimPrefix(label, "0x")
		if digits == "" || strings.Trim(digits, "0123456789abcdef") != "" {
			return false
		}
		if digits == label && strings.Trim(label, "0123456789") != "" {
			return false
		}
	}
	return true
}
