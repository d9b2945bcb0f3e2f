package syncer

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/service"
	"github.com/nestdev/nest/internal/syncer/kinds/serviceaccounttoken"
	"github.com/nestdev/nest/internal/testutil"
)

// newProvider is a podProvider over a fake host API server holding host,
// whose informer cache holds the same, with tenant pods bound to the virtual
// node and a share of capacity.
func newProvider(t *testing.T, capacity corev1.ResourceList, host []runtime.Object, tenantPods ...runtime.Object) (*podProvider, *fake.Clientset) {
	t.Helper()
	security, err := NewPodSecurity("baseline")
	if err != nil {
		t.Fatal(err)
	}
	hostClient := fake.NewClientset(host...)
	objects := testObjects(t, 0, hostClient)
	p := &podProvider{
		tr: tr, metadata: defaultMetadata, security: security, host: hostClient, objects: objects,
		recorder:   record.NewFakeRecorder(10),
		tenantPods: podLister(t, tenantPods...),
		hostPods:   corelisters.NewPodLister(indexerOf(t, host...)).Pods(tr.HostNamespace),
		services:   func(string) []service.Address { return nil },
	}
	p.capacity = &admission{capacity: map[string]corev1.ResourceList{tr.NodeName: capacity}, pods: p.tenantPods, onHost: p.runsOnHost}
	return p, hostClient
}

// simplePod is a tenant pod bound to the virtual node that references
// nothing, requesting cpu.
func simplePod(name, cpu string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: tr.NodeName, Containers: []corev1.Container{{Name: "app", Image: "img",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// hostPodOf is the host pod the syncer made for a tenant pod.
func hostPodOf(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	pt, err := tr.TranslatePod(pod, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	pt.Pod.UID = "host-" + pod.UID
	return pt.Pod
}

func TestCreatePodRefusesWhatIsNotInTheShare(t *testing.T) {
	share := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("3")}
	running := simplePod("running", "1500m")
	gpu := simplePod("gpu", "100m")
	gpu.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	hugepages := simplePod("hugepages", "100m")
	hugepages.Spec.Containers[0].Resources.Requests["hugepages-2Mi"] = resource.MustParse("2Mi")
	tests := []struct {
		name    string
		pod     *corev1.Pod
		wantErr string
	}{
		{name: "fits", pod: simplePod("small", "500m")},
		{name: "an extended resource the share lacks", pod: gpu,
			wantErr: "refused by the virtual node: spec.containers[0] (app).resources.limits[nvidia.com/gpu]: nvidia.com/gpu is not in the tenant's share of the host"},
		{name: "huge pages the share lacks", pod: hugepages, wantErr: "hugepages-2Mi is not in the tenant's share of the host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, host := newProvider(t, share, []runtime.Object{hostPodOf(t, running)}, running, tt.pod)
			err := p.CreatePod(context.Background(), tt.pod)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := host.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", tt.pod.Name), metav1.GetOptions{}); err != nil {
					t.Errorf("no host pod: %v", err)
				}
				return
			}
			if err == nil || !errdefs.IsInvalidInput(err) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CreatePod = %v, want invalid input with %q", err, tt.wantErr)
			}
			if n := testutil.CountActions(host.Actions(), "create"); n != 0 {
				t.Errorf("a refused pod made %d host objects", n)
			}
		})
	}
}

// hostPortPod is simplePod with one host port.
func hostPortPod(name string, port corev1.ContainerPort) *corev1.Pod {
	p := simplePod(name, "100m")
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{port}
	return p
}

func TestCreatePodRejectsWhatDoesNotFitAsAKubeletDoes(t *testing.T) {
	share := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourcePods: resource.MustParse("3")}
	running := hostPortPod("running", corev1.ContainerPort{ContainerPort: 80, HostPort: 8080})
	running.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1500m")
	tests := []struct {
		name       string
		pod        *corev1.Pod
		wantReason string
		wantMsg    string
	}{
		{name: "more cpu than is free", pod: simplePod("big", "501m"), wantReason: "OutOfcpu",
			wantMsg: "Pod was rejected: insufficient cpu: the pod requests 501m, and 500m of the tenant's 2 is free (1500m requested by 1 other pods on the virtual node): lower the request, or wait for other pods to finish"},
		{name: "a host port another pod holds on every address", pod: hostPortPod("same-port", corev1.ContainerPort{ContainerPort: 80, HostPort: 8080, HostIP: "10.0.0.1"}),
			wantReason: "NodePorts", wantMsg: "Pod was rejected: Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports (TCP/10.0.0.1:8080 is held by pod running)"},
		{name: "the same host port over UDP", pod: hostPortPod("udp", corev1.ContainerPort{ContainerPort: 80, HostPort: 8080, Protocol: corev1.ProtocolUDP})},
		{name: "another host port", pod: hostPortPod("other-port", corev1.ContainerPort{ContainerPort: 80, HostPort: 8081})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, host := newProvider(t, share, []runtime.Object{hostPodOf(t, running)}, running, tt.pod)
			var notified []*corev1.Pod
			p.notify = func(pod *corev1.Pod) { notified = append(notified, pod) }
			if err := p.CreatePod(context.Background(), tt.pod); err != nil {
				t.Fatalf("CreatePod = %v, want nil: a rejection is the pod's status, not an error", err)
			}
			_, err := host.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", tt.pod.Name), metav1.GetOptions{})
			if tt.wantReason == "" {
				if err != nil || len(notified) != 0 {
					t.Fatalf("an admitted pod: host pod error %v, %d status notifications", err, len(notified))
				}
				return
			}
			if !apierrors.IsNotFound(err) {
				t.Errorf("a rejected pod has a host pod (get: %v)", err)
			}
			if len(notified) != 1 {
				t.Fatalf("%d status notifications, want 1", len(notified))
			}
			if s := notified[0].Status; s.Phase != corev1.PodFailed || s.Reason != tt.wantReason || s.Message != tt.wantMsg {
				t.Errorf("status = %s %s %q, want Failed %s %q", s.Phase, s.Reason, s.Message, tt.wantReason, tt.wantMsg)
			}
			// A finished pod is not started again when the pod controller
			// hands it back.
			failed := tt.pod.DeepCopy()
			failed.Status = notified[0].Status
			if err := p.CreatePod(context.Background(), failed); err != nil || testutil.CountActions(host.Actions(), "create") != 0 || len(notified) != 1 {
				t.Errorf("CreatePod of the rejected pod again = %v, %d host creates, %d notifications", err, testutil.CountActions(host.Actions(), "create"), len(notified))
			}
		})
	}
}

func TestCreateOrAdoptOnlyTouchesItsOwnHostPod(t *testing.T) {
	pod := simplePod("web", "100m")
	same := hostPodOf(t, pod)
	stale := hostPodOf(t, pod)
	stale.Annotations[contract.AnnotationTenantUID] = "uid-earlier"
	foreign := &corev1.Pod{ObjectMeta: testutil.ForeignMeta(tr.VirtualCluster, tr.HostNamespace, "web")}
	otherCluster := hostPodOf(t, pod)
	otherCluster.Labels[contract.LabelTenantOf] = "beta"
	otherObject := hostPodOf(t, pod)
	otherObject.Annotations[contract.AnnotationTenantName] = "api"
	tests := []struct {
		name        string
		existing    *corev1.Pod
		wantErr     string
		wantDeleted bool
	}{
		{name: "none: created"},
		{name: "this pod's: adopted", existing: same},
		{name: "an earlier pod of the same name: deleted, then waited for", existing: stale, wantErr: "still terminating", wantDeleted: true},
		{name: "an unlabelled host pod", existing: foreign, wantErr: "already exists and is not the copy of shop/web"},
		{name: "another virtual cluster's pod", existing: otherCluster, wantErr: "already exists and is not the copy of shop/web"},
		{name: "another tenant pod's", existing: otherObject, wantErr: "already exists and is not the copy of shop/web"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var host []runtime.Object
			if tt.existing != nil {
				host = append(host, tt.existing)
			}
			p, client := newProvider(t, nil, host)
			got, err := p.createOrAdopt(context.Background(), pod, hostPodOf(t, pod))
			if tt.wantErr == "" && (err != nil || got.Annotations[contract.AnnotationTenantUID] != string(pod.UID)) ||
				tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("createOrAdopt = %v, %v; want error %q", got, err, tt.wantErr)
			}
			_, err = client.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), same.Name, metav1.GetOptions{})
			if deleted := tt.existing != nil && apierrors.IsNotFound(err); deleted != tt.wantDeleted {
				t.Errorf("existing host pod deleted %v, want %v", deleted, tt.wantDeleted)
			}
		})
	}
}

func TestDeletePodOnlyDeletesItsOwnHostPod(t *testing.T) {
	pod := simplePod("web", "100m")
	stale := hostPodOf(t, pod)
	stale.Annotations[contract.AnnotationTenantUID] = "uid-earlier"
	for _, tt := range []struct {
		name     string
		existing *corev1.Pod
		cached   bool
		wantGone bool
	}{
		{name: "in the cache", existing: hostPodOf(t, pod), cached: true, wantGone: true},
		{name: "not in the cache yet", existing: hostPodOf(t, pod), wantGone: true},
		{name: "a foreign host pod", existing: &corev1.Pod{ObjectMeta: testutil.ForeignMeta(tr.VirtualCluster, tr.HostNamespace, "web")}},
		{name: "an earlier pod's host pod", existing: stale, cached: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, client := newProvider(t, nil, []runtime.Object{tt.existing})
			if !tt.cached {
				p.hostPods = corelisters.NewPodLister(indexerOf(t)).Pods(tr.HostNamespace)
			}
			if err := p.DeletePod(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			_, err := client.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), tt.existing.Name, metav1.GetOptions{})
			if gone := apierrors.IsNotFound(err); gone != tt.wantGone {
				t.Errorf("host pod deleted %v, want %v", gone, tt.wantGone)
			}
		})
	}
}

func TestUpdatePodCopiesOnlyAllowedMetadata(t *testing.T) {
	pod := simplePod("web", "100m")
	p, client := newProvider(t, nil, []runtime.Object{hostPodOf(t, pod)})
	upd := pod.DeepCopy()
	upd.Labels = map[string]string{"tier": "front", "sidecar.istio.io/inject": "true"}
	if err := p.UpdatePod(context.Background(), upd); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", "web"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["tier"] != "front" || got.Labels["sidecar.istio.io/inject"] != "" || got.Annotations[contract.AnnotationSpecHash] != SpecHash(upd) {
		t.Errorf("host pod labels %v, annotations %v", got.Labels, got.Annotations)
	}
}

// A host pod names the VirtualCluster as its controller while its tenant
// pod has a controller, so kubectl drain evicts it, and follows the tenant
// pod when it is orphaned.
func TestHostPodControllerFollowsTheTenantPod(t *testing.T) {
	pod := simplePod("web", "100m")
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs-uid", Controller: ptr.To(true)}}
	p, client := newProvider(t, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, nil, pod)
	p.tr.VirtualClusterUID = "vc-uid"
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	hostName := contract.HostName("alpha", "shop", "web")
	controller := func() *metav1.OwnerReference {
		t.Helper()
		got, err := client.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), hostName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return metav1.GetControllerOf(got)
	}
	if c := controller(); c == nil || c.Kind != "VirtualCluster" || c.UID != "vc-uid" {
		t.Fatalf("host pod controller %+v, want the VirtualCluster (vc-uid)", c)
	}
	orphaned := pod.DeepCopy()
	orphaned.OwnerReferences = nil
	p.hostPods = corelisters.NewPodLister(indexerOf(t)).Pods(tr.HostNamespace)
	if err := p.UpdatePod(context.Background(), orphaned); err != nil {
		t.Fatal(err)
	}
	if c := controller(); c != nil {
		t.Errorf("host pod of an orphaned tenant pod has controller %+v, want none", c)
	}
}

// An ephemeral container the tenant adds (kubectl debug) reaches the host pod
// through its ephemeralcontainers subresource, translated and hardened like
// any container; one that breaks Pod Security does not.
func TestUpdatePodAddsEphemeralContainers(t *testing.T) {
	pod := simplePod("web", "100m")
	p, client := newProvider(t, nil, []runtime.Object{hostPodOf(t, pod)})
	debug := pod.DeepCopy()
	debug.Spec.EphemeralContainers = []corev1.EphemeralContainer{{TargetContainerName: "app", EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debugger", Image: "busybox", Env: []corev1.EnvVar{{Name: "NS", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}}}}
	if SpecHash(debug) == SpecHash(pod) {
		t.Fatal("adding an ephemeral container leaves the spec hash alone, so the pod controller would never call UpdatePod")
	}
	if err := p.UpdatePod(context.Background(), debug); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", "web"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.EphemeralContainers) != 1 {
		t.Fatalf("host pod ephemeral containers %+v, want the debugger", got.Spec.EphemeralContainers)
	}
	ec := got.Spec.EphemeralContainers[0]
	env := map[string]string{}
	for _, e := range ec.Env {
		env[e.Name] = e.Value
	}
	if len(ec.Resources.Requests) > 0 || len(ec.Resources.Limits) > 0 {
		t.Errorf("ephemeral container has resources %+v, which the API refuses", ec.Resources)
	}
	if ec.TargetContainerName != "app" || env["NS"] != "shop" || env["KUBERNETES_SERVICE_HOST"] != tr.APIServerHost {
		t.Errorf("ephemeral container not translated: target %q, env %v", ec.TargetContainerName, env)
	}
	if ec.SecurityContext == nil || ec.SecurityContext.Capabilities == nil || !hasCapability(ec.SecurityContext.Capabilities.Drop, "NET_RAW") {
		t.Errorf("ephemeral container keeps NET_RAW: %+v", ec.SecurityContext)
	}

	privileged := debug.DeepCopy()
	privileged.Spec.EphemeralContainers = append(privileged.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "root", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}})
	privileged.Labels = map[string]string{"tier": "front"}
	if err := p.UpdatePod(context.Background(), privileged); err != nil {
		t.Fatalf("a refused ephemeral container blocks the pod's other changes: %v", err)
	}
	got, err = client.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", "web"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ec := range got.Spec.EphemeralContainers {
		if ec.Name == "root" {
			t.Error("the privileged ephemeral container reached the host pod")
		}
	}
	if got.Labels["tier"] != "front" {
		t.Errorf("host pod labels %v: the label did not follow the refused ephemeral container", got.Labels)
	}
	if events := drainEvents(p.recorder); !strings.Contains(events, "EphemeralContainerRefused") || !strings.Contains(events, "PodSecurity") {
		t.Errorf("events %q, want the refusal with its reason", events)
	}
}

// An ephemeral container translation refuses (a Localhost seccomp profile)
// is an event, not an error: virtual-kubelet would mark a restartPolicy
// Never pod Failed while its host pod runs on. The pod's other changes
// still reach the host.
func TestUpdatePodWithAnEphemeralContainerTranslationRefusesIsNoError(t *testing.T) {
	pod := simplePod("web", "100m")
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	p, client := newProvider(t, nil, []runtime.Object{hostPodOf(t, pod)})
	debug := pod.DeepCopy()
	debug.Labels = map[string]string{"tier": "front"}
	debug.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name: "debugger", Image: "busybox", SecurityContext: &corev1.SecurityContext{
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("host.json")}}}}}
	if _, err := tr.TranslatePod(debug, defaultMetadata, nil); err == nil {
		t.Fatal("translation takes a Localhost profile: the test shows nothing")
	}
	if err := p.UpdatePod(context.Background(), debug); err != nil {
		t.Fatalf("UpdatePod: %v, want the refusal as an event", err)
	}
	got, err := client.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", "web"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.EphemeralContainers) != 0 || got.Labels["tier"] != "front" {
		t.Errorf("host pod ephemeral containers %v, labels %v: want none, and the label", got.Spec.EphemeralContainers, got.Labels)
	}
	if events := drainEvents(p.recorder); !strings.Contains(events, ReasonEphemeralContainerRefused) || !strings.Contains(events, "seccompProfile") {
		t.Errorf("events %q, want the refusal naming the field", events)
	}
}

// A conflict (the informer's host pod is stale) is retried with the host
// pod read afresh, not returned: virtual-kubelet fails a restartPolicy
// Never pod on UpdatePod's error.
func TestUpdatePodRetriesAConflictWithAFreshHostPod(t *testing.T) {
	pod := simplePod("web", "100m")
	p, client := newProvider(t, nil, []runtime.Object{hostPodOf(t, pod)})
	updates := 0
	client.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if updates++; updates == 1 {
			return true, nil, apierrors.NewConflict(corev1.Resource("pods"), contract.HostName("alpha", "shop", "web"), nil)
		}
		return false, nil, nil
	})
	labelled := pod.DeepCopy()
	labelled.Labels = map[string]string{"tier": "front"}
	if err := p.UpdatePod(context.Background(), labelled); err != nil {
		t.Fatalf("UpdatePod: %v, want the conflict retried", err)
	}
	got, err := client.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", "web"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updates != 2 || got.Labels["tier"] != "front" {
		t.Errorf("%d updates, host labels %v: want a second update carrying the label", updates, got.Labels)
	}
	gets := 0
	for _, a := range client.Actions() {
		if a.Matches("get", "pods") {
			gets++
		}
	}
	if gets < 2 { // the retry's read, and the test's own
		t.Errorf("%d GETs of the host pod: the retry used the stale cache", gets)
	}
}

// An in-place resize of the tenant pod resizes the host pod's containers,
// keeping what the host added.
func TestUpdatePodResizesTheHostPod(t *testing.T) {
	pod := simplePod("web", "100m")
	host := hostPodOf(t, pod)
	host.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")} // a LimitRange default
	p, client := newProvider(t, nil, []runtime.Object{host})
	resized := pod.DeepCopy()
	resized.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("250m")
	if SpecHash(resized) == SpecHash(pod) {
		t.Fatal("a resize leaves the spec hash alone, so the pod controller would never call UpdatePod")
	}
	if err := p.UpdatePod(context.Background(), resized); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), host.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := got.Spec.Containers[0].Resources
	if cpu := r.Requests[corev1.ResourceCPU]; cpu.String() != "250m" {
		t.Errorf("host cpu request %s, want 250m", cpu.String())
	}
	if lim := r.Limits[corev1.ResourceCPU]; lim.String() != "500m" {
		t.Errorf("host cpu limit %s, want the host's 500m kept", lim.String())
	}
	if resizedContainers(got, got) != nil {
		t.Error("a pod with unchanged resources would be resized again")
	}
}

// A downward API volume that shows the pod's labels shows the tenant's, in
// the kubelet's format, and follows a change to them.
func TestDownwardAPILabelsFollowTheTenantPod(t *testing.T) {
	pod := simplePod("web", "100m")
	pod.Labels = map[string]string{"tier": "front", "app": "web"}
	pod.Spec.Volumes = []corev1.Volume{{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}}}
	pt, err := tr.TranslatePod(pod, contract.MetadataAllowList{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "app=\"web\"\ntier=\"front\""; pt.Identity[identityLabels] != want || !pt.UsesTokenSecret {
		t.Fatalf("labels file %q (token Secret used: %v), want %q", pt.Identity[identityLabels], pt.UsesTokenSecret, want)
	}
	if _, ok := pt.Identity[identityAnnotations]; ok {
		t.Error("annotations are in the token Secret though no volume shows them")
	}
	host := pt.Pod
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: contract.TokenSecretName(host.Name), Namespace: tr.HostNamespace},
		Data: map[string][]byte{identityLabels: []byte(pt.Identity[identityLabels])}}
	relabelled := pod.DeepCopy()
	relabelled.Labels["tier"] = "back"
	got := tokenSecretAfterUpdate(t, host, secret, relabelled)
	if want := "app=\"web\"\ntier=\"back\""; string(got.Data[identityLabels]) != want {
		t.Errorf("labels file after the change %q, want %q", got.Data[identityLabels], want)
	}
}

// A downward API file of one annotation or label shows the tenant's value,
// from the token Secret: the host kubelet never resolves it against the
// host pod, whose annotations are the host's. It follows a change too.
func TestDownwardAPIOneAnnotationComesFromTheTenantPod(t *testing.T) {
	pod := simplePod("web", "100m")
	pod.Annotations = map[string]string{"team": "shop"}
	items := []corev1.DownwardAPIVolumeFile{
		{Path: "team", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['team']"}},
		{Path: "hash", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + contract.AnnotationSpecHash + "']"}},
		{Path: "tier", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['tier']"}},
	}
	pod.Spec.Volumes = []corev1.Volume{{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: items}}}}
	pt, err := tr.TranslatePod(pod, contract.MetadataAllowList{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, src := range pt.Pod.Spec.Volumes[0].Projected.Sources {
		if src.DownwardAPI != nil {
			t.Errorf("the host kubelet resolves %v against the host pod", src.DownwardAPI.Items)
		}
		if src.Secret != nil && src.Secret.Name == contract.TokenSecretName(pt.Pod.Name) {
			for _, it := range src.Secret.Items {
				files[it.Path] = pt.Identity[it.Key]
			}
		}
	}
	if want := map[string]string{"team": "shop", "hash": "", "tier": ""}; !maps.Equal(files, want) {
		t.Fatalf("files %q, want the tenant's values %q", files, want)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: contract.TokenSecretName(pt.Pod.Name), Namespace: tr.HostNamespace}}
	moved := pod.DeepCopy()
	moved.Annotations["team"] = "billing"
	got := tokenSecretAfterUpdate(t, pt.Pod, secret, moved)
	key, _ := identityKey("metadata.annotations['team']")
	if string(got.Data[key]) != "billing" {
		t.Errorf("team file after the change %q, want billing", got.Data[key])
	}
}

// tokenSecretAfterUpdate runs UpdatePod with updated over a host holding
// host and its token Secret secret, and returns the Secret as written.
func tokenSecretAfterUpdate(t *testing.T, host *corev1.Pod, secret *corev1.Secret, updated *corev1.Pod) *corev1.Secret {
	t.Helper()
	p, client := newProvider(t, nil, []runtime.Object{host, secret})
	p.objects.hostSecrets = corelisters.NewSecretLister(indexerOf(t, secret)).Secrets(tr.HostNamespace)
	if err := p.UpdatePod(context.Background(), updated); err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Secrets(tr.HostNamespace).Get(context.Background(), secret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// drainEvents returns the events a fake recorder holds, one per line.
func drainEvents(r record.EventRecorder) string {
	var out []string
	for {
		select {
		case e := <-r.(*record.FakeRecorder).Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

func TestCreatePodRetriesAPassingFailure(t *testing.T) {
	pod := simplePod("web", "100m")
	p, host := newProvider(t, nil, nil, pod)
	failures := 2
	host.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures == 0 {
			return false, nil, nil
		}
		failures--
		return true, nil, apierrors.NewServerTimeout(corev1.Resource("pods"), "create", 1)
	})
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatalf("CreatePod = %v, want the passing failures retried", err)
	}
	if _, err := host.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", "web"), metav1.GetOptions{}); err != nil || failures != 0 {
		t.Errorf("host pod after %d failures left: %v", failures, err)
	}
}

// The tenant pod's annotations a downward API file shows are copied to the
// host in its token Secret, and count against the object budget: a pod
// whose annotations do not fit never reaches the host, and an update that
// would take them past it is an event that leaves the files as they were,
// while the update's other changes (a new image) reach the host pod.
func TestTheTenantIdentityIsInTheObjectBudget(t *testing.T) {
	pod := simplePod("web", "100m")
	pod.Annotations = map[string]string{"note": strings.Repeat("x", 2000)}
	pod.Spec.Volumes = []corev1.Volume{{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
		Items: []corev1.DownwardAPIVolumeFile{{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}}}}}}}
	p, client := newProvider(t, nil, nil, pod)
	p.tokens = &serviceaccounttoken.Issuer{}
	p.objects = testObjects(t, 1000, client)
	err := p.CreatePod(context.Background(), pod)
	if err == nil || !strings.Contains(err.Error(), "object budget exceeded") {
		t.Fatalf("CreatePod: %v, want the object budget exceeded", err)
	}
	if pods, _ := client.CoreV1().Pods(tr.HostNamespace).List(context.Background(), metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("host pods %d, want none", len(pods.Items))
	}

	pod.Annotations["note"] = "small"
	if err := p.CreatePod(context.Background(), pod); err != nil {
		t.Fatalf("CreatePod within the budget: %v", err)
	}
	host, err := client.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), contract.HostName("alpha", "shop", "web"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := client.CoreV1().Secrets(tr.HostNamespace).Get(context.Background(), contract.TokenSecretName(host.Name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.hostPods = corelisters.NewPodLister(indexerOf(t, host)).Pods(tr.HostNamespace)
	p.objects.hostSecrets = corelisters.NewSecretLister(indexerOf(t, secret)).Secrets(tr.HostNamespace)
	grown := pod.DeepCopy()
	grown.Annotations["note"] = strings.Repeat("y", 2000)
	grown.Spec.Containers[0].Image = "img:v2"
	if err := p.UpdatePod(context.Background(), grown); err != nil {
		t.Fatalf("UpdatePod: %v, want the refusal as an event", err)
	}
	updated, err := client.CoreV1().Pods(tr.HostNamespace).Get(context.Background(), host.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Spec.Containers[0].Image != "img:v2" {
		t.Errorf("host pod image %q after the update, want img:v2", updated.Spec.Containers[0].Image)
	}
	got, err := client.CoreV1().Secrets(tr.HostNamespace).Get(context.Background(), secret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(got.Data[identityAnnotations]), "yyy") {
		t.Error("the grown annotations reached the host past the budget")
	}
	if events := drainEvents(p.recorder); !strings.Contains(events, ReasonUpdateRefused) || !strings.Contains(events, "object budget") {
		t.Errorf("events %q, want the update refused for the budget", events)
	}
}
