package syncer

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
)

var tr = Translator{Translation: contract.Translation{
	VirtualCluster: "alpha", HostNamespace: "vc-alpha", ClusterDomain: "cluster.local",
	APIServerHost: "10.96.0.5", APIServerPort: 6443, DNSServer: "10.96.0.6",
	NodeName: "nest-virtual-node", PriorityClassName: "nest-tenant-workload",
	MaxGracePeriodSeconds: contract.DefaultMaxGracePeriodSeconds,
}}

var defaultMetadata = contract.MetadataAllowList{Labels: contract.DefaultHostLabels, Annotations: contract.DefaultHostAnnotations}

func tenantPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "uid-1", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName:           "nest-virtual-node",
			ServiceAccountName: "builder",
			NodeSelector:       map[string]string{"disk": "ssd"},
			Tolerations:        []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}},
			PriorityClassName:  "tenant-high",
			Priority:           ptr.To[int32](1000),
			ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "registry"}},
			Containers: []corev1.Container{{
				Name: "app", Image: "img",
				Env: []corev1.EnvVar{
					{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
					{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
					{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "color"}}},
				},
				EnvFrom:        []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Optional: ptr.To(true)}}},
				Resources:      corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}},
			}},
			Volumes: []corev1.Volume{
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
				}}}},
				{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

func TestTranslatePod(t *testing.T) {
	pt, err := tr.TranslatePod(tenantPod(), defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := pt.Pod
	if p.Namespace != "vc-alpha" || p.Name != contract.HostName("alpha", "shop", "web-1") {
		t.Errorf("host pod %s/%s", p.Namespace, p.Name)
	}
	if p.Labels["app"] != "web" || p.Labels[contract.LabelTenantOf] != "alpha" || p.Labels[contract.LabelTenantNamespace] != "shop" {
		t.Errorf("labels %v", p.Labels)
	}
	if ns, name, ok := contract.TenantKey(p.Annotations); !ok || ns != "shop" || name != "web-1" || p.Annotations[contract.AnnotationTenantUID] != "uid-1" {
		t.Errorf("annotations %v do not point back to the tenant pod", p.Annotations)
	}
	s := p.Spec
	if s.NodeName != "" || s.NodeSelector != nil || s.Tolerations != nil || s.Priority != nil || s.PriorityClassName != "nest-tenant-workload" {
		t.Errorf("tenant scheduling fields kept: %+v", s)
	}
	if s.ServiceAccountName != "" || ptr.Deref(s.AutomountServiceAccountToken, true) || ptr.Deref(s.EnableServiceLinks, true) {
		t.Error("the host pod may get a host token or host Service environment")
	}
	if s.Hostname != "web-1" || s.DNSPolicy != corev1.DNSNone || s.DNSConfig.Nameservers[0] != "10.96.0.6" || s.DNSConfig.Searches[0] != "shop.svc.cluster.local" {
		t.Errorf("hostname %q, DNS %s %+v", s.Hostname, s.DNSPolicy, s.DNSConfig)
	}
	if s.ImagePullSecrets[0].Name != contract.HostName("alpha", "shop", "registry") {
		t.Errorf("image pull secret %v", s.ImagePullSecrets)
	}
	// A kubelet only warns about a missing pull Secret and tries the pull.
	if !pt.IsOptional("secret", "registry") {
		t.Error("a missing image pull Secret would keep the pod from starting")
	}
	c := s.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env["NS"].Value != "shop" || env["IP"].ValueFrom == nil || env["COLOR"].ValueFrom.ConfigMapKeyRef.Name != contract.HostName("alpha", "shop", "settings") {
		t.Errorf("env %+v", env)
	}
	if env["KUBERNETES_SERVICE_HOST"].Value != "10.96.0.5" || env["KUBERNETES_SERVICE_PORT"].Value != "6443" || env["KUBERNETES_PORT_6443_TCP_ADDR"].Value != "10.96.0.5" {
		t.Errorf("in-cluster clients are not pointed at the tenant API server: %+v", env)
	}
	if c.EnvFrom[0].SecretRef.Name != contract.HostName("alpha", "shop", "creds") || c.ReadinessProbe == nil {
		t.Errorf("envFrom %+v, probe %v", c.EnvFrom, c.ReadinessProbe)
	}
	if cpu, mem := c.Resources.Requests[corev1.ResourceCPU], c.Resources.Requests[corev1.ResourceMemory]; cpu.String() != "100m" || !mem.IsZero() {
		t.Errorf("requests %v: want the tenant's cpu and a stated zero memory", c.Resources.Requests)
	}
	sources := s.Volumes[0].Projected.Sources
	if len(sources) != 3 || sources[0].Secret == nil || sources[0].Secret.Name != contract.TokenSecretName(p.Name) || sources[0].Secret.Items[0].Path != "token" {
		t.Fatalf("token projection %+v", sources)
	}
	if sources[1].ConfigMap.Name != contract.HostName("alpha", "shop", "kube-root-ca.crt") || sources[2].Secret.Items[0].Key != identityNamespace {
		t.Errorf("projection %+v", sources)
	}
	if len(pt.Tokens) != 1 || pt.Tokens[0].ExpirationSeconds != 3607 || !pt.UsesTokenSecret || pt.Identity[identityNamespace] != "shop" {
		t.Errorf("tokens %+v identity %v", pt.Tokens, pt.Identity)
	}
	if strings.Join(pt.ConfigMaps, ",") != "kube-root-ca.crt,settings" || strings.Join(pt.Secrets, ",") != "creds,registry" {
		t.Errorf("references: configmaps %v secrets %v", pt.ConfigMaps, pt.Secrets)
	}
	if !pt.IsOptional("secret", "creds") || pt.IsOptional("configmap", "settings") {
		t.Errorf("optional %v", pt.Optional)
	}
	if sc := s.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v: want seccomp RuntimeDefault", sc)
	}
	if caps := c.SecurityContext.Capabilities; !slices.Contains(caps.Drop, "NET_RAW") {
		t.Errorf("capabilities %+v: want NET_RAW dropped", caps)
	}
}

// A container that requests more than the host's default limit and states no
// limit would be refused by the host's LimitRange; it gets its request as limit.
func TestDefaultLimitsNeverFallBelowRequests(t *testing.T) {
	withLimits := tr
	withLimits.DefaultLimits = corev1.ResourceList{"cpu": resource.MustParse("500m"), "memory": resource.MustParse("512Mi")}
	p := tenantPod()
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
		"cpu": resource.MustParse("2"), "memory": resource.MustParse("64Mi"),
	}}
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "limited", Image: "img", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"memory": resource.MustParse("1Gi")}, Limits: corev1.ResourceList{"memory": resource.MustParse("2Gi")},
	}})
	pt, err := withLimits.TranslatePod(p, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, second := pt.Pod.Spec.Containers[0].Resources.Limits, pt.Pod.Spec.Containers[1].Resources.Limits
	if got := contract.FormatResourceList(first); got != "cpu=2" {
		t.Errorf("limits of a container requesting 2 cpu and 64Mi with no limits = %q, want cpu=2 only (memory left to the LimitRange)", got)
	}
	if got := contract.FormatResourceList(second); got != "memory=2Gi" {
		t.Errorf("a container's own limits = %q, want memory=2Gi untouched", got)
	}
}

// A hostNetwork pod runs on the pod network with the virtual node's hostname.
func TestTranslateHostNetworkPod(t *testing.T) {
	p := tenantPod()
	p.Spec.HostNetwork = true
	pt, err := tr.TranslatePod(p, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := pt.Pod.Spec; s.HostNetwork || s.Hostname != tr.NodeName || s.DNSPolicy != corev1.DNSNone {
		t.Errorf("host pod hostNetwork %v, hostname %q (want %q), DNS policy %s", s.HostNetwork, s.Hostname, tr.NodeName, s.DNSPolicy)
	}
}

// A claim becomes the host claim of the same tenant claim, named by Nest.
func TestTranslatePodMountsTheHostClaim(t *testing.T) {
	p := tenantPod()
	p.Spec.Volumes = append(p.Spec.Volumes,
		corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0", ReadOnly: true}}},
		corev1.Volume{Name: "again", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-db-0"}}})
	pt, err := tr.TranslatePod(p, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pt.Claims, []string{"data-db-0"}) {
		t.Errorf("claims %v, want [data-db-0]", pt.Claims)
	}
	for _, v := range pt.Pod.Spec.Volumes {
		if c := v.PersistentVolumeClaim; c != nil && (c.ClaimName != contract.HostName("alpha", "shop", "data-db-0") || (v.Name == "data") != c.ReadOnly) {
			t.Errorf("host volume %s: %+v", v.Name, c)
		}
	}
}

func TestTranslatePodRefuses(t *testing.T) {
	for _, tt := range []struct {
		field  string
		mutate func(*corev1.Pod)
	}{
		{"runtimeClassName", func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr.To("kata") }},
		{"spec.os.name", func(p *corev1.Pod) { p.Spec.OS = &corev1.PodOS{Name: corev1.Windows} }},
		{"nest.dev/", func(p *corev1.Pod) { p.Labels["nest.dev/tenant-of"] = "beta" }},
		{"nest.dev/", func(p *corev1.Pod) { p.Annotations = map[string]string{"nest.dev/tenant-uid": "x"} }},
		{"spec.securityContext.seccompProfile", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}}
		}},
		{"spec.containers[0] (app).securityContext.seccompProfile", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}}
		}},
		{"spec.initContainers[0] (init).securityContext.seccompProfile", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "img", SecurityContext: &corev1.SecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}}}}
		}},
		{"spec.securityContext.appArmorProfile", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("k8s-x")}}
		}},
		{"spec.containers[0] (app).securityContext.appArmorProfile", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To("k8s-x")}}
		}},
		{"metadata.annotations[container.apparmor.security.beta.kubernetes.io/app]", func(p *corev1.Pod) {
			p.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/app": "localhost/k8s-x"}
		}},
		{"metadata.annotations[seccomp.security.alpha.kubernetes.io/pod]", func(p *corev1.Pod) {
			p.Annotations = map[string]string{"seccomp.security.alpha.kubernetes.io/pod": "localhost/p.json"}
		}},
		{"metadata.annotations[container.seccomp.security.alpha.kubernetes.io/app]", func(p *corev1.Pod) {
			p.Annotations = map[string]string{"container.seccomp.security.alpha.kubernetes.io/app": "localhost/p.json"}
		}},
	} {
		p := tenantPod()
		tt.mutate(p)
		if _, err := tr.TranslatePod(p, defaultMetadata, nil); err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: error %v does not name the field", tt.field, err)
		}
	}
}

func TestPodSecurity(t *testing.T) {
	baseline, err := NewPodSecurity("baseline")
	if err != nil {
		t.Fatal(err)
	}
	if err := baseline.Check(tenantPod()); err != nil {
		t.Errorf("an ordinary pod is refused: %v", err)
	}
	for name, mutate := range map[string]func(*corev1.Pod){
		"privileged": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		},
		"hostPID": func(p *corev1.Pod) { p.Spec.HostPID = true },
		"hostIPC": func(p *corev1.Pod) { p.Spec.HostIPC = true },

		"hostPath": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		},
		"SYS_ADMIN": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}
		},
	} {
		p := tenantPod()
		mutate(p)
		if err := baseline.Check(p); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	hostNetwork := tenantPod()
	hostNetwork.Spec.HostNetwork = true
	if err := baseline.Check(hostNetwork); err != nil {
		t.Errorf("a hostNetwork pod, which runs on the pod network, is refused: %v", err)
	}
	// Host ports are the virtual node's, never the host's: the host pod has
	// none (TestTranslatePodClearsHostPorts). The API server gives a
	// hostNetwork pod's ports host ports.
	hostNetwork.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}
	if err := baseline.Check(hostNetwork); err != nil {
		t.Errorf("a hostNetwork pod with a port is refused: %v", err)
	}
	if hostNetwork.Spec.Containers[0].Ports[0].HostPort != 80 || !hostNetwork.Spec.HostNetwork {
		t.Error("Check changed the tenant pod")
	}
	restricted, err := NewPodSecurity("restricted")
	if err != nil {
		t.Fatal(err)
	}
	if err := restricted.Check(tenantPod()); err == nil {
		t.Error("restricted accepts a pod that may run as root")
	}
	if _, err := NewPodSecurity("privileged"); err == nil {
		t.Error("the privileged level is accepted")
	}
}

func TestTranslatePodClearsHostPorts(t *testing.T) {
	p := tenantPod()
	p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "img", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
		Ports: []corev1.ContainerPort{{ContainerPort: 53, HostPort: 53, HostIP: "127.0.0.1", Protocol: corev1.ProtocolUDP}}}}
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, HostPort: 80}}
	pt, err := tr.TranslatePod(p, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range append(pt.Pod.Spec.InitContainers, pt.Pod.Spec.Containers...) {
		if len(c.Ports) != 1 {
			t.Fatalf("%s: ports %v, want the container port kept", c.Name, c.Ports)
		}
		if port := c.Ports[0]; port.HostPort != 0 || port.HostIP != "" || port.ContainerPort == 0 {
			t.Errorf("%s: host pod port %+v, want the container port without a host port", c.Name, port)
		}
	}
	if got := HostPorts(&p.Spec); len(got) != 2 || got[0].String() != "UDP/127.0.0.1:53" || got[1].String() != "TCP/0.0.0.0:80" {
		t.Errorf("HostPorts of the tenant pod = %v", got)
	}
}

func TestHostPortConflicts(t *testing.T) {
	hp := func(proto corev1.Protocol, ip string, port int32) HostPort {
		return HostPort{Protocol: proto, IP: ip, Port: port}
	}
	tests := []struct {
		a, b HostPort
		want bool
	}{
		{hp("TCP", "0.0.0.0", 80), hp("TCP", "0.0.0.0", 80), true},
		{hp("TCP", "0.0.0.0", 80), hp("TCP", "10.0.0.1", 80), true},
		{hp("TCP", "10.0.0.1", 80), hp("TCP", "::", 80), true},
		{hp("TCP", "10.0.0.1", 80), hp("TCP", "10.0.0.1", 80), true},
		{hp("TCP", "127.0.0.1", 80), hp("TCP", "10.0.0.1", 80), false},
		{hp("TCP", "10.0.0.1", 80), hp("UDP", "10.0.0.1", 80), false},
		{hp("TCP", "0.0.0.0", 80), hp("TCP", "0.0.0.0", 81), false},
	}
	for _, tt := range tests {
		if got := tt.a.conflicts(tt.b); got != tt.want || tt.b.conflicts(tt.a) != got {
			t.Errorf("%s and %s conflict = %v, want %v both ways", tt.a, tt.b, got, tt.want)
		}
	}
}
