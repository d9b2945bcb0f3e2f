package addons

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RegistryNamespace is where the local host cluster's OCI registry runs;
// its Deployment and LoadBalancer Service are both named RegistryName.
const (
	RegistryNamespace = "nest-registry"
	RegistryName      = "registry"
)

// Registry returns an OCI registry (the CNCF Distribution registry, from
// image, which serves plain HTTP on port with the configuration its image
// holds) for the local host cluster: its namespace, a one-replica
// Deployment with its blobs in an emptyDir (they last as long as the pod:
// this is a test and demo registry, not a store), and a LoadBalancer
// Service on port, which the machine and every pod reach. Its readiness
// probe asks for the API's base, /v2/.
func Registry(image string, port int32) []client.Object {
	labels := map[string]string{"app": RegistryName}
	meta := metav1.ObjectMeta{Name: RegistryName, Namespace: RegistryNamespace, Labels: labels}
	deployment := &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// One pod writes the blobs: never two at once.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(int64(5)),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65534)), FSGroup: ptr.To(int64(65534)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name: RegistryName, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: port}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/v2/", Port: intstr.FromInt32(port)}},
							PeriodSeconds: 1, TimeoutSeconds: 2, FailureThreshold: 3,
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "blobs", MountPath: "/var/lib/registry"}},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: []corev1.Volume{{Name: "blobs", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
	service := &corev1.Service{
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: labels,
			Ports:    []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromInt32(port)}},
		},
	}
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: RegistryNamespace, Labels: map[string]string{
			"pod-security.kubernetes.io/enforce": "restricted",
		}}},
		deployment, service,
	}
}
