package syncer

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nestdev/nest/internal/pullproxy"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// Image references a hostile tenant writes to make the host node's runtime
// dial the node itself or the host's networks are refused before they reach
// the runtime; ordinary references pass. The refusal names the field and
// the registry the tenant wrote, and what the registry is for those every
// host denies, never the host's ranges or deny list entries it matched.
func TestImagePolicyRefusesRegistriesOnTheHost(t *testing.T) {
	policy := contract.ImagePolicy{Denied: []string{"10.244.0.0/16", "10.96.0.0/12", "192.0.2.0/24", "registry.internal", "*.corp.example"}}
	const onTheHost = "the registry is in the host's networks or on the platform's deny list"
	for _, tt := range []struct {
		image   string
		refused string // in the error, "" when the image is allowed
	}{
		{image: "busybox"},
		{image: "docker.io/library/busybox:1.36"},
		{image: "registry.k8s.io/e2e-test-images/agnhost:2.53"},
		{image: "ghcr.io/org/app@sha256:" + strings.Repeat("a", 64)},
		{image: "203.0.113.7:5000/app"},
		{image: "127.0.0.1:22/x", refused: "images from 127.0.0.1:22 are not allowed on the virtual node: the registry is the node itself (loopback)"},
		{image: "127.9.9.9/x", refused: "the node itself (loopback)"},
		{image: "localhost:10250/x", refused: "images from localhost:10250 are not allowed on the virtual node: the registry is the node itself (localhost)"},
		{image: "localhost/x", refused: "the node itself (localhost)"},
		{image: "LocalHost.:10250/x", refused: "the node itself (localhost)"},
		{image: "kubelet.localhost/x", refused: "the node itself (a localhost name)"},
		{image: "[::1]:5000/x", refused: "the node itself (loopback)"},
		{image: "[::ffff:127.0.0.1]:5000/x", refused: "the node itself (loopback)"},
		{image: "169.254.169.254/latest", refused: "link-local, where cloud metadata services answer"},
		{image: "0.0.0.0:6443/x", refused: "an unspecified address"},
		{image: "10.244.1.5:8080/x", refused: "images from 10.244.1.5:8080 are not allowed on the virtual node: " + onTheHost},
		{image: "10.96.0.1:443/x", refused: onTheHost},
		{image: "192.0.2.10:10250/x", refused: onTheHost},
		{image: "registry.internal:5000/x", refused: "images from registry.internal:5000 are not allowed on the virtual node: " + onTheHost},
		{image: "a.b.corp.example/x", refused: onTheHost},
		{image: "2130706433:22/x", refused: "non-standard form"},
		{image: "0x7f.1:22/x", refused: "non-standard form"},
		{image: "0177.0.0.1:22/x", refused: "non-standard form"},
		{image: "127.1:22/x", refused: "non-standard form"},
		{image: "UPPER/x", refused: "not an image reference"},
	} {
		err := checkImage(policy, "spec.containers[0].image", tt.image)
		switch {
		case tt.refused == "" && err != nil:
			t.Errorf("%s refused: %v", tt.image, err)
		case tt.refused != "" && (err == nil || !strings.Contains(err.Error(), tt.refused) || !strings.HasPrefix(err.Error(), "spec.containers[0].image: ")):
			t.Errorf("%s: error %v, want one naming the field and %q", tt.image, err, tt.refused)
		}
		if err == nil {
			continue
		}
		for _, entry := range append(slices.Clone(policy.Denied), alwaysDeniedEntries...) {
			// Ranges and domain suffixes are the list's own words; a
			// registry name the tenant wrote may be one too.
			if strings.ContainsAny(entry, "/*") && strings.Contains(err.Error(), entry) {
				t.Errorf("%s: the refusal %q names the deny list entry %s", tt.image, err, entry)
			}
		}
	}
}

func TestImagePolicyAllowList(t *testing.T) {
	policy := contract.ImagePolicy{Allowed: []string{"docker.io", "registry.example.com:5000", "*.example.org"}}
	for image, allowed := range map[string]bool{
		"busybox":                         true,
		"registry.example.com:5000/app":   true,
		"registry.example.com/app":        false,
		"registry.example.com:5001/app":   false,
		"eu.mirror.example.org/app":       true,
		"example.org/app":                 false,
		"ghcr.io/org/app":                 false,
		"localhost:5000/app":              false,
		"registry.example.com.evil.io/ap": false,
	} {
		err := checkImage(policy, "spec.containers[0].image", image)
		if (err == nil) != allowed {
			t.Errorf("%s: error %v, want allowed %v", image, err, allowed)
		}
		if err != nil && !strings.Contains(err.Error(), "the node itself") &&
			!strings.Contains(err.Error(), "spec.virtualNode.imageRegistries): docker.io, registry.example.com:5000, *.example.org") {
			t.Errorf("%s: error %q does not name the allowed registries", image, err)
		}
	}
}

// Every place a pod names an image is checked, and the error names it.
func TestTranslatePodChecksEveryImage(t *testing.T) {
	local := "127.0.0.1:10250/x"
	withTr := tr
	withTr.Images = contract.ImagePolicy{}
	for field, set := range map[string]func(*corev1.Pod){
		"spec.containers[0].image":     func(p *corev1.Pod) { p.Spec.Containers[0].Image = local },
		"spec.initContainers[0].image": func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{{Name: "i", Image: local}} },
		"spec.ephemeralContainers[0].image": func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "e", Image: local}}}
		},
		"spec.volumes[0].image.reference": func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: local}}}}
		},
	} {
		p := tenantPod()
		set(p)
		if _, err := withTr.TranslatePod(p, defaultMetadata, nil); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: TranslatePod error %v, want the field named", field, err)
		}
	}
}

func TestValidateRegistryEntry(t *testing.T) {
	for entry, ok := range map[string]bool{
		"registry.example.com": true, "registry.example.com:5000": true, "*.example.com": true, "10.0.0.0/8": true, "fd00::/8": true, "docker.io": true,
		"": false, "*": false, "registry.example.com/path": false, "a*.example.com": false, "user@registry": false,
	} {
		if err := contract.ValidateRegistryEntry(entry); (err == nil) != ok {
			t.Errorf("ValidateRegistryEntry(%q) = %v, want valid %v", entry, err, ok)
		}
	}
}

// Without kubelets that check pull credentials, every container and image
// volume of a host pod pulls its image, with the pod's own credentials.
func TestAlwaysPullImages(t *testing.T) {
	withTr := tr
	withTr.AlwaysPullImages = true
	p := tenantPod()
	p.Spec.Containers[0].ImagePullPolicy = corev1.PullIfNotPresent
	p.Spec.InitContainers = []corev1.Container{{Name: "i", Image: "busybox", ImagePullPolicy: corev1.PullNever}}
	p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "e", Image: "busybox", ImagePullPolicy: corev1.PullNever}}}
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "img", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "busybox", PullPolicy: corev1.PullIfNotPresent}}})
	pt, err := withTr.TranslatePod(p, defaultMetadata, nil)
	if err != nil {
		t.Fatal(err)
	}
	policies := []corev1.PullPolicy{pt.Pod.Spec.InitContainers[0].ImagePullPolicy, pt.Pod.Spec.Containers[0].ImagePullPolicy, pt.EphemeralContainers[0].ImagePullPolicy}
	for _, v := range pt.Pod.Spec.Volumes {
		if v.Image != nil {
			policies = append(policies, v.Image.PullPolicy)
		}
	}
	if len(policies) != 4 {
		t.Fatalf("%d pull policies, want 4 (the image volume is missing)", len(policies))
	}
	for i, got := range policies {
		if got != corev1.PullAlways {
			t.Errorf("pull policy %d = %s, want Always", i, got)
		}
	}
	if pt, _ := tr.TranslatePod(p, defaultMetadata, nil); pt.Pod.Spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
		t.Error("the pod's own pull policy is not kept by default")
	}
}

// TestAlwaysDeniedAddressesAreThePullProxys: the addresses nest-syncer
// refuses as registries are the ones every node's pull proxy refuses to
// dial, so a name that resolves to one fares as the address does.
func TestAlwaysDeniedAddressesAreThePullProxys(t *testing.T) {
	var ours []string
	for _, d := range alwaysDenied {
		if _, err := netip.ParsePrefix(d.entry); err == nil {
			ours = append(ours, d.entry)
		}
	}
	var proxy []string
	for _, p := range pullproxy.AlwaysDenied {
		proxy = append(proxy, p.String())
	}
	slices.Sort(ours)
	slices.Sort(proxy)
	if !slices.Equal(ours, proxy) {
		t.Errorf("nest-syncer always denies the addresses %v, the pull proxy %v: keep them the same", ours, proxy)
	}
}
