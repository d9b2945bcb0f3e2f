package syncer

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// What the host runtime saw when it dialled a registry never reaches the
// tenant: only the kind of failure does.
func TestImagePullErrorsReachTheTenantAsTheirKind(t *testing.T) {
	refused := `failed to pull and unpack image "10.0.0.9:22/x:latest": failed to resolve reference "10.0.0.9:22/x:latest": failed to do request: Head "https://10.0.0.9:22/v2/x/manifests/latest": dial tcp 10.0.0.9:22: connect: connection refused`
	for _, tt := range []struct {
		text string
		want ImagePullFailure
	}{
		{refused, ImageRegistryFailed},
		{`rpc error: code = Unknown desc = failed to resolve reference: http: server gave HTTP response to HTTPS client`, ImageRegistryFailed},
		{`failed to resolve reference "ghcr.io/o/x:1": ghcr.io/o/x:1: not found`, ImageNotFound},
		{`pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed`, ImageAccessDenied},
		{`unexpected status from HEAD request to https://r.example/v2/x/manifests/1: 401 Unauthorized`, ImageAccessDenied},
	} {
		if got := ClassifyImagePullError(tt.text); got != tt.want {
			t.Errorf("ClassifyImagePullError(%q) = %q, want %q", tt.text, got, tt.want)
		}
	}

	tenant := tenantPod()
	host := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
		{Name: "app", Image: "10.0.0.9:22/x", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: refused}}},
		{Name: "side", Image: "busybox", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "busybox": ErrImagePull: ` + refused}}},
		{Name: "cfg", Image: "busybox", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `secret "s" not found`}}},
	}}}
	s := TenantStatus(tenant, host)
	for i, want := range []string{
		`Failed to pull image "10.0.0.9:22/x": ` + string(ImageRegistryFailed),
		`Back-off pulling image "busybox": ` + string(ImageRegistryFailed),
		`secret "s" not found`,
	} {
		if got := s.ContainerStatuses[i].State.Waiting.Message; got != want {
			t.Errorf("container %d waiting message %q, want %q", i, got, want)
		}
	}
	if host.Status.ContainerStatuses[0].State.Waiting.Message != refused {
		t.Error("TenantStatus changed the host pod's status")
	}

	for _, tt := range []struct{ host, want string }{
		{`Failed to pull image "10.0.0.9:22/x": ` + refused, `Failed to pull image "10.0.0.9:22/x": ` + string(ImageRegistryFailed)},
		{`Back-off pulling image "busybox": ErrImagePull: ` + refused, `Back-off pulling image "busybox": ` + string(ImageRegistryFailed)},
		{`Successfully pulled image "busybox" in 1.2s`, `Successfully pulled image "busybox" in 1.2s`},
		{`Error: ErrImagePull`, `Error: ErrImagePull`},
	} {
		if got := TenantEventMessage(tt.host); got != tt.want {
			t.Errorf("TenantEventMessage(%q) = %q, want %q", tt.host, got, tt.want)
		}
		if strings.Contains(TenantEventMessage(tt.host), "connection refused") {
			t.Errorf("the runtime's dial error reached the tenant: %q", TenantEventMessage(tt.host))
		}
	}
}
