package addons

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LoadBalancerNamespace is where MetalLB runs and reads its configuration
// (IPAddressPools, L2Advertisements).
const LoadBalancerNamespace = "metallb-system"

// Names of MetalLB's controller Deployment and speaker DaemonSet, their
// ServiceAccounts (as upstream's manifests name them) and its RBAC.
const (
	LoadBalancerController = "controller"
	LoadBalancerSpeaker    = "speaker"
	loadBalancerRoleName   = "metallb"
	// loadBalancerMetricsPort is where both serve metrics, which their
	// probes read; the speaker's is on its node's address.
	loadBalancerMetricsPort = 7472
)

// LoadBalancer returns MetalLB in L2 mode, run from image (which holds
// /controller and /speaker, built from the pinned go.universe.tf/metallb):
// its namespace, ServiceAccounts and RBAC, the controller Deployment, which
// gives LoadBalancer Services addresses from the IPAddressPools, and the
// speaker DaemonSet on every node, in the node's network namespace with
// NET_RAW, which answers ARP for the addresses its node announces. They
// follow upstream's config/manifests/metallb-native.yaml, less the
// webhooks (off: nothing but Nest writes the configuration here) and
// memberlist (off: speakers on every node pick the announcing node from the
// nodes' and endpoints' state, as upstream documents). The RBAC is
// upstream's, less webhook and CRD management. MetalLB's CRDs and pool are
// the caller's.
func LoadBalancer(image string) []client.Object {
	labels := func(component string) map[string]string {
		return map[string]string{"app": "metallb", "component": component}
	}
	sa := func(name string) *corev1.ServiceAccount {
		return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: LoadBalancerNamespace}}
	}
	var subjects []rbacv1.Subject
	for _, name := range []string{LoadBalancerController, LoadBalancerSpeaker} {
		subjects = append(subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: LoadBalancerNamespace})
	}
	meta := metav1.ObjectMeta{Name: loadBalancerRoleName}
	inNamespace := metav1.ObjectMeta{Name: loadBalancerRoleName, Namespace: LoadBalancerNamespace}
	read := []string{"get", "list", "watch"}
	probe := &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/metrics", Port: intstr.FromInt32(loadBalancerMetricsPort)}},
		PeriodSeconds: 2, TimeoutSeconds: 2, FailureThreshold: 3,
	}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	controller := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: LoadBalancerController, Namespace: LoadBalancerNamespace, Labels: labels("controller")},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels("controller")},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels("controller")},
				Spec: corev1.PodSpec{
					ServiceAccountName:            LoadBalancerController,
					TerminationGracePeriodSeconds: ptr.To(int64(0)),
					SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65534)), FSGroup: ptr.To(int64(65534))},
					Containers: []corev1.Container{{
						Name: "controller", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
						Command:        []string{"/controller"},
						Args:           []string{"--port=7472", "--log-level=info", "--webhook-mode=disabled", "--disable-cert-rotation"},
						Env:            []corev1.EnvVar{{Name: "METALLB_NAMESPACE", Value: LoadBalancerNamespace}},
						Ports:          []corev1.ContainerPort{{Name: "monitoring", ContainerPort: loadBalancerMetricsPort}},
						ReadinessProbe: probe,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
	speaker := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: LoadBalancerSpeaker, Namespace: LoadBalancerNamespace, Labels: labels("speaker")},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels("speaker")},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels("speaker")},
				Spec: corev1.PodSpec{
					ServiceAccountName:            LoadBalancerSpeaker,
					HostNetwork:                   true,
					TerminationGracePeriodSeconds: ptr.To(int64(2)),
					// Every node, the control plane's too: with memberlist
					// off, a speaker must run wherever endpoints may be.
					Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "speaker", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
						Command: []string{"/speaker"},
						Args:    []string{"--port=7472", "--log-level=info"},
						Env: []corev1.EnvVar{
							{Name: "METALLB_NAMESPACE", Value: LoadBalancerNamespace},
							fieldEnv("METALLB_NODE_NAME", "spec.nodeName"),
							fieldEnv("METALLB_POD_NAME", "metadata.name"),
							fieldEnv("METALLB_HOST", "status.hostIP"),
						},
						Ports:          []corev1.ContainerPort{{Name: "monitoring", ContainerPort: loadBalancerMetricsPort}},
						ReadinessProbe: probe,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_RAW"}, Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
	return []client.Object{
		// The speaker runs on its node's network: a privileged namespace, as
		// upstream's.
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LoadBalancerNamespace, Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "privileged",
		}}},
		sa(LoadBalancerController), sa(LoadBalancerSpeaker),
		&rbacv1.ClusterRole{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "endpoints", "nodes", "namespaces"}, Verbs: read},
			{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
			{APIGroups: []string{"metallb.io"}, Resources: []string{"*"}, Verbs: []string{"*"}},
		}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: loadBalancerRoleName}},
		// Its own namespace's pods (a speaker reads its own), Secrets (BGP
		// passwords) and ConfigMaps.
		&rbacv1.Role{ObjectMeta: inNamespace, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "secrets", "configmaps"}, Verbs: read},
		}},
		&rbacv1.RoleBinding{ObjectMeta: inNamespace, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: loadBalancerRoleName}},
		controller, speaker,
	}
}
