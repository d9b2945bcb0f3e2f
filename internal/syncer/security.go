package syncer

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// PodSecurity checks tenant pods against one Pod Security Standard level,
// with the upstream pod-security-admission checks. A tenant cannot lower it:
// the level comes from the VirtualCluster on the host, and namespace labels in
// the tenant cluster do not apply here.
type PodSecurity struct {
	// HostPathOnDisk says that hostPath volumes are paths on the virtual
	// node's disk (translateHostPaths): at the baseline level they are then
	// not violations. The restricted level still refuses them, as the
	// disk's helper runs as root.
	HostPathOnDisk bool
	// ConfinePrivileged says that privileged containers run without host
	// privileges (Translator.ConfinePrivileged): privileged is then not a
	// violation at either level.
	ConfinePrivileged bool

	level     psapi.LevelVersion
	evaluator policy.Evaluator
}

// NewPodSecurity returns a checker for level "baseline" or "restricted".
// "privileged" is refused: it would let a tenant pod escape onto the host.
func NewPodSecurity(level string) (*PodSecurity, error) {
	l, err := psapi.ParseLevel(level)
	if err != nil || l == psapi.LevelPrivileged {
		return nil, fmt.Errorf("pod security level %q: use baseline or restricted", level)
	}
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		return nil, err
	}
	return &PodSecurity{level: psapi.LevelVersion{Level: l, Version: psapi.LatestVersion()}, evaluator: e}, nil
}

// Check returns nil when the pod meets the level, else an error that names
// each violation, as the PodSecurity admission plugin words them. A tenant
// pod's hostNetwork and host ports are not violations, nor, with
// HostPathOnDisk, its hostPath volumes, nor, with ConfinePrivileged, its
// privileged containers: its host pod never gets the host's network, a host
// port, a host path or host privileges (see TranslatePod), so the check
// reads the spec as the host pod has it.
func (s *PodSecurity) Check(p *corev1.Pod) error {
	spec := &p.Spec
	onDisk := s.HostPathOnDisk && s.level.Level == psapi.LevelBaseline && hasHostPath(spec)
	confine := s.ConfinePrivileged && len(privilegedContainers(p)) > 0
	if spec.HostNetwork || len(HostPorts(spec)) > 0 || onDisk || confine {
		spec = spec.DeepCopy()
		if confine {
			confinePrivileged(spec, nil)
		}
		spec.HostNetwork = false
		for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for i := range list {
				clearHostPorts(&list[i])
			}
		}
		if onDisk {
			for i := range spec.Volumes {
				if spec.Volumes[i].HostPath != nil {
					spec.Volumes[i].VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: nodeDiskName}}
				}
			}
		}
	}
	result := policy.AggregateCheckResults(s.evaluator.EvaluatePod(s.level, &p.ObjectMeta, spec))
	if result.Allowed {
		return nil
	}
	return fmt.Errorf("violates PodSecurity %q: %s", s.level.String(), result.ForbiddenDetail())
}

func hasHostPath(spec *corev1.PodSpec) bool {
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			return true
		}
	}
	return false
}
