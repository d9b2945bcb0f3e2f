package isolation

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// privateRegistry is the registry name the credentials case serves from a
// devcluster.Mirror on this machine.
const privateRegistry = "private.nest.test"

// pulledWithCredentials: an image alpha pulled with its own pull Secret
// onto every host node tenant pods run on is not simply run for beta's pod,
// which names it with imagePullPolicy IfNotPresent and has no credentials:
// the host kubelet asks the registry again with beta's (no) credentials,
// which a private registry refuses, where for another pod of alpha's with
// the same Secret it uses the cached image. This is the host kubelets'
// KubeletEnsureSecretPulledImages, which nest-manager's
// --host-verifies-pull-credentials=true relies on. (The kubelet words both
// an absent image and one the pod may not use the same way under pull
// policy Never, so IfNotPresent is what shows the check.)
func (e *env) pulledWithCredentials(t *testing.T) {
	logFile, err := os.Create(filepath.Join(t.TempDir(), "mirror.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() })
	m, err := devcluster.StartMirror(e.stateDir, privateRegistry, t.TempDir(), logFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	ref := privateRegistry + "/team/app:1"
	img, err := images.Image(images.Spec{Name: ref, Files: []images.File{{Path: "/testapp", Source: filepath.Join(framework.BinDir(), "testapp"), Mode: 0o755}}, Entrypoint: []string{"/testapp"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Push(e.ctx, ref, img); err != nil {
		t.Fatal(err)
	}
	auth := base64.StdEncoding.EncodeToString([]byte("alpha:secret"))
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "private-pull", Namespace: "default"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, privateRegistry, auth)},
	}
	if _, err := e.alpha.Clientset(t).CoreV1().Secrets("default").Create(e.ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	withImage := func(policy corev1.PullPolicy, pullSecret bool) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].Image, p.Spec.Containers[0].ImagePullPolicy = ref, policy
			if pullSecret {
				p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: secret.Name}}
			}
		}
	}

	// The host scheduler places tenant pods: alpha pulls with its Secret,
	// then beta's pod must land on a node alpha pulled onto and beta never
	// pulled onto itself (an anonymous pull of beta's would make the image
	// free for all there). Until it does, alpha pulls again.
	pulling := fmt.Sprintf("Pulling: Pulling image %q", ref)
	var pulled, betaPulled []string
	for i := 0; ; i++ {
		if i == 6 {
			t.Fatalf("beta's pods never landed on a node only alpha pulled onto: alpha %v, beta %v", pulled, betaPulled)
		}
		name := fmt.Sprintf("private-pull-%d", i)
		e.runServer(t, e.alpha, name, withImage(corev1.PullAlways, true))
		if n := e.hostPod(t, e.alpha, "default", name).Spec.NodeName; !slices.Contains(pulled, n) {
			pulled = append(pulled, n)
		}
		if i == 0 {
			e.runServer(t, e.alpha, "cached-for-alpha", withImage(corev1.PullIfNotPresent, true))
			if ev := e.tenantEvents(t, e.alpha, "default", "cached-for-alpha"); !strings.Contains(ev, "already present on machine and can be accessed by the pod") || strings.Contains(ev, pulling) {
				t.Errorf("alpha's own pod with the same Secret did not use the cached image; events:\n%s", ev)
			}
		}
		pod := testPod(fmt.Sprintf("borrowed-image-%d", i), withImage(corev1.PullIfNotPresent, false))
		e.create(t, e.beta, pod)
		node := e.hostPod(t, e.beta, "default", pod.Name).Spec.NodeName
		if !slices.Contains(pulled, node) || slices.Contains(betaPulled, node) {
			betaPulled = append(betaPulled, node)
			continue
		}
		testutil.Eventually(t, 2*time.Minute, "the host kubelet pulling the image again for beta", func() error {
			ev := e.tenantEvents(t, e.beta, "default", pod.Name)
			if strings.Contains(ev, "already present on machine") {
				t.Fatalf("beta's pod, without credentials, was given the image alpha pulled with its own; events:\n%s", ev)
			}
			if !strings.Contains(ev, pulling) {
				return fmt.Errorf("events: %s", ev)
			}
			return nil
		})
		return
	}
}
