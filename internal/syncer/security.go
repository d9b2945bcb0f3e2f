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
// pod's hostNetwork and host ports are not violations: its host pod never
// gets the host's network or a host port (see TranslatePod), so the check
// reads the spec as the host pod has it.
func (s *PodSecurity) Check(p *corev1.Pod) error {
	spec := &p.Spec
	if spec.HostNetwork || len(HostPorts(spec)) > 0 {
		spec = spec.DeepCopy()
		spec.HostNetwork = false
		for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for i := range list {
				clearHostPorts(&list[i])
			}
		}
	}
	result := policy.AggregateCheckResults(s.evaluator.EvaluatePod(s.level, &p.ObjectMeta, spec))
	if result.Allowed {
		return nil
	}
	return fmt.Errorf("violates PodSecurity %q: %s", s.level.String(), result.ForbiddenDetail())
}
