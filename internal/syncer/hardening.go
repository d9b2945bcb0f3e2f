package syncer

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Runtime hardening of host pods. Pod Security (security.go) refuses what
// would escape a container; this file narrows what a container that stays in
// bounds may do on a shared host node, beyond what the baseline level asks.

// netRaw lets a container forge packets (ARP and DNS spoofing on the host
// node's pod network). Runtimes grant it by default; baseline Pod Security
// refuses adding it back, so dropping it costs well-behaved pods nothing.
const (
	netRaw        corev1.Capability = "NET_RAW"
	capabilityAll corev1.Capability = "ALL"
)

// checkHostProfiles refuses seccomp and AppArmor profiles of type Localhost,
// in fields or in the legacy annotations: they name files on host nodes, which
// a tenant neither sees nor controls, and which may be absent or permissive.
func checkHostProfiles(p *corev1.Pod) error {
	if sc := p.Spec.SecurityContext; sc != nil {
		if err := refuseLocalhostProfiles("spec.securityContext", sc.SeccompProfile, sc.AppArmorProfile); err != nil {
			return err
		}
	}
	for _, list := range []struct {
		field      string
		containers []corev1.Container
	}{{"spec.initContainers", p.Spec.InitContainers}, {"spec.containers", p.Spec.Containers}, {"spec.ephemeralContainers", ephemeralAsContainers(p.Spec.EphemeralContainers)}} {
		for i, c := range list.containers {
			if c.SecurityContext == nil {
				continue
			}
			field := fmt.Sprintf("%s[%d] (%s).securityContext", list.field, i, c.Name)
			if err := refuseLocalhostProfiles(field, c.SecurityContext.SeccompProfile, c.SecurityContext.AppArmorProfile); err != nil {
				return err
			}
		}
	}
	for key, value := range p.Annotations {
		if isLegacyProfileAnnotation(key) && strings.HasPrefix(value, corev1.SeccompLocalhostProfileNamePrefix) {
			return fmt.Errorf("metadata.annotations[%s]: %q names a profile file on host nodes, which the virtual node does not support: remove the annotation and set securityContext.seccompProfile or appArmorProfile to RuntimeDefault", key, value)
		}
	}
	return nil
}

func refuseLocalhostProfiles(field string, seccomp *corev1.SeccompProfile, apparmor *corev1.AppArmorProfile) error {
	if seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeLocalhost {
		return fmt.Errorf("%s.seccompProfile: Localhost profiles name files on host nodes, which the virtual node does not support: use type RuntimeDefault", field)
	}
	if apparmor != nil && apparmor.Type == corev1.AppArmorProfileTypeLocalhost {
		return fmt.Errorf("%s.appArmorProfile: Localhost profiles name files on host nodes, which the virtual node does not support: use type RuntimeDefault", field)
	}
	return nil
}

// isLegacyProfileAnnotation reports whether key is one of the pre-field
// seccomp or AppArmor annotations. Both use the "localhost/" value prefix
// for profiles on the node.
func isLegacyProfileAnnotation(key string) bool {
	return key == corev1.SeccompPodAnnotationKey ||
		strings.HasPrefix(key, corev1.SeccompContainerAnnotationKeyPrefix) ||
		strings.HasPrefix(key, corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix)
}

// hardenRuntime gives the host pod the runtime's default seccomp profile,
// unless the tenant already chose it, and drops NET_RAW from every container
// that did not ask for it. Localhost profiles are refused before this
// (checkHostProfiles) and Unconfined ones by Pod Security; a container's own
// RuntimeDefault profile is kept as it is.
func hardenRuntime(spec *corev1.PodSpec) {
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if p := spec.SecurityContext.SeccompProfile; p == nil || p.Type != corev1.SeccompProfileTypeRuntimeDefault {
		spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			dropNetRaw(&cs[i])
		}
	}
}

// dropNetRaw adds NET_RAW to a container's dropped capabilities unless it
// adds NET_RAW itself or already drops it (or ALL).
func dropNetRaw(c *corev1.Container) {
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	if c.SecurityContext.Capabilities == nil {
		c.SecurityContext.Capabilities = &corev1.Capabilities{}
	}
	caps := c.SecurityContext.Capabilities
	if hasCapability(caps.Add, netRaw) || hasCapability(caps.Drop, netRaw) || hasCapability(caps.Drop, capabilityAll) {
		return
	}
	caps.Drop = append(caps.Drop, netRaw)
}

// hasCapability matches capability names as container runtimes do: with or
// without the CAP_ prefix, in any case.
func hasCapability(list []corev1.Capability, want corev1.Capability) bool {
	return slices.ContainsFunc(list, func(c corev1.Capability) bool {
		return strings.EqualFold(strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_"), string(want))
	})
}

// confinePrivileged clears securityContext.privileged on every container of
// spec, ephemeral ones included, and of more: the virtual node has no host
// privileges to give, so such a container runs as any other of its Pod
// Security level, with the runtime's default devices, capabilities and
// seccomp profile.
func confinePrivileged(spec *corev1.PodSpec, more []corev1.Container) {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers, more} {
		for i := range cs {
			if sc := cs[i].SecurityContext; sc != nil {
				sc.Privileged = nil
			}
		}
	}
	for i := range spec.EphemeralContainers {
		if sc := spec.EphemeralContainers[i].SecurityContext; sc != nil {
			sc.Privileged = nil
		}
	}
}

// privilegedContainers names the containers of p, of every kind, that ask
// for privileged.
func privilegedContainers(p *corev1.Pod) []string {
	var names []string
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers, ephemeralAsContainers(p.Spec.EphemeralContainers)} {
		for _, c := range cs {
			if c.SecurityContext != nil && ptr.Deref(c.SecurityContext.Privileged, false) {
				names = append(names, c.Name)
			}
		}
	}
	return names
}
