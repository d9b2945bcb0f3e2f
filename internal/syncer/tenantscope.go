package syncer

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/tenantmsg"
)

// podScope is what a message about the tenant pod may name, and how the
// host words for it read in the tenant (tenantmsg): host is its host pod,
// or the host pod it was to become, nil when translation stopped first.
// The pod's host name and UID, its host node, its token Secret and its
// virtual node's disk read as the tenant knows them; the host names of
// the ConfigMaps, Secrets and claims of its namespace turn back into
// theirs by themselves (tenantmsg.Scope.Scrub). Its IPs and host IPs, which
// its status shows, and the addresses of registries its images name, which
// it wrote, stay.
func podScope(vc, hostNamespace string, tenant, host *corev1.Pod) tenantmsg.Scope {
	s := tenantmsg.Scope{VirtualCluster: vc, HostNamespace: hostNamespace, Namespace: tenant.Namespace, Names: map[string]string{}}
	hostName := contract.HostName(vc, tenant.Namespace, tenant.Name)
	s.Names[hostName] = tenant.Name
	s.Names[contract.TokenSecretName(hostName)] = "the pod's tokens"
	if tenant.Spec.NodeName != "" {
		s.Names[contract.NodeDiskClaim(vc, tenant.Spec.NodeName)] = "the virtual node's disk"
	}
	s.Addresses = registryAddresses(&tenant.Spec)
	if host != nil {
		if host.UID != "" && tenant.UID != "" {
			s.Names[string(host.UID)] = string(tenant.UID)
		}
		if host.Spec.NodeName != "" && tenant.Spec.NodeName != "" {
			s.Names[host.Spec.NodeName] = tenant.Spec.NodeName
		}
		for _, ip := range host.Status.PodIPs {
			s.Addresses = append(s.Addresses, ip.IP)
		}
		for _, ip := range host.Status.HostIPs {
			s.Addresses = append(s.Addresses, ip.IP)
		}
	}
	s.Field = podFields(tenant, host)
	return s
}

// scope is podScope for this provider's host or member namespace.
func (p *podProvider) scope(tenant, host *corev1.Pod) tenantmsg.Scope {
	s := podScope(p.tr.VirtualCluster, p.tr.HostNamespace, tenant, host)
	s.Member = p.member
	return s
}

// tell is err as the tenant pod is to show it (tenantmsg.Scope.Tell),
// with what the host said logged here, where the platform team reads it:
// virtual-kubelet puts the error it gets on the pod's status and events.
func (p *podProvider) tell(ctx context.Context, tenant, host *corev1.Pod, err error) error {
	if err == nil {
		return nil
	}
	out := p.scope(tenant, host).Tell(err)
	if out.Error() != err.Error() {
		klog.FromContext(ctx).Info("The tenant is told less than the host said", "pod", klog.KObj(tenant), "told", out.Error(), "err", err)
	}
	return out
}

// podFields maps the field paths of host, the host pod of tenant (nil:
// not made yet), to the tenant pod's. The host pod starts with the
// virtual node's helper init containers and ends with its volumes, which
// the tenant pod does not have.
func podFields(tenant, host *corev1.Pod) func(string) (string, bool) {
	helpers := 0
	if host != nil {
		for _, c := range host.Spec.InitContainers {
			if !isHelper(c.Name) {
				break
			}
			helpers++
		}
	}
	return func(path string) (string, bool) {
		if i, rest, ok := indexed(path, "spec.initContainers["); ok {
			if i < helpers {
				return "", false
			}
			return fmt.Sprintf("spec.initContainers[%d]%s", i-helpers, rest), true
		}
		if i, _, ok := indexed(path, "spec.volumes["); ok && i >= len(tenant.Spec.Volumes) {
			return "", false
		}
		return path, true
	}
}

// indexed splits a field path that starts with prefix, a list field and
// its "[", into the index and the rest of the path.
func indexed(path, prefix string) (int, string, bool) {
	after, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return 0, "", false
	}
	digits, rest, ok := strings.Cut(after, "]")
	if !ok {
		return 0, "", false
	}
	i, err := strconv.Atoi(digits)
	if err != nil {
		return 0, "", false
	}
	return i, rest, true
}

// registryAddresses are the IP addresses of the registries the pod's
// images name: the tenant wrote them, so a message naming them tells it
// nothing of the host.
func registryAddresses(spec *corev1.PodSpec) []string {
	var out []string
	add := func(image string) {
		ref, err := name.ParseReference(image)
		if err != nil {
			return
		}
		host, _ := splitRegistry(ref.Context().RegistryStr())
		if _, err := netip.ParseAddr(host); err == nil {
			out = append(out, host)
		}
	}
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range list {
			add(c.Image)
		}
	}
	for _, c := range spec.EphemeralContainers {
		add(c.Image)
	}
	for _, v := range spec.Volumes {
		if v.Image != nil {
			add(v.Image.Reference)
		}
	}
	return out
}
