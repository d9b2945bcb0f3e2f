package syncer

import (
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Image pull errors. The host runtime's error text names what the host node
// saw when it dialled a registry: refused or timed-out connections, TLS
// errors from whatever answered, addresses the registry name resolved to.
// Passed on word for word, it would let a tenant map what the host node
// reaches. The tenant gets the kind of failure only (ImagePullFailure), in
// container statuses and in the kubelet's events alike; the full text stays
// in the host's events and kubelet log for the platform team.

// ImagePullFailure is the kind of an image pull failure, as the tenant is
// told it.
type ImagePullFailure string

// Kinds of image pull failures.
const (
	// ImageNotFound: the registry answered that the image or tag does not
	// exist.
	ImageNotFound ImagePullFailure = "not found in the registry"
	// ImageAccessDenied: the registry refused the pull with the pod's
	// credentials, or without any.
	ImageAccessDenied ImagePullFailure = "the registry refused access (check the pod's imagePullSecrets)"
	// ImageRegistryFailed: anything else, from a registry that cannot be
	// reached to one that answers with an error.
	ImageRegistryFailed ImagePullFailure = "the registry could not be reached or failed to serve the image"
)

// imagePullReasons are the container waiting reasons of the kubelet's image
// manager whose messages carry runtime error text.
var imagePullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "RegistryUnavailable": true,
	"ImageInspectError": true, "SignatureValidationFailed": true,
}

// ClassifyImagePullError reduces a runtime's image pull error text to its
// kind.
func ClassifyImagePullError(text string) ImagePullFailure {
	t := strings.ToLower(text)
	switch {
	case containsAny(t, "not found", "manifest unknown", "name unknown"):
		return ImageNotFound
	case containsAny(t, "unauthorized", "authorization failed", "denied", "forbidden", "authentication required"):
		return ImageAccessDenied
	}
	return ImageRegistryFailed
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// tenantWaiting returns the waiting state the tenant sees: an image pull
// failure's message reduced to its kind, anything else as the host has it.
func tenantWaiting(w *corev1.ContainerStateWaiting, image string) *corev1.ContainerStateWaiting {
	if w == nil || !imagePullReasons[w.Reason] {
		return w
	}
	out := w.DeepCopy()
	verb := "Failed to pull image"
	if w.Reason == "ImagePullBackOff" {
		verb = "Back-off pulling image"
	}
	out.Message = fmt.Sprintf("%s %q: %s", verb, image, ClassifyImagePullError(w.Message))
	return out
}

// pulledImage finds the image a kubelet image event names.
var pulledImage = regexp.MustCompile(`^(Failed to pull image|Back-off pulling image) "([^"]*)"`)

// TenantEventMessage is the message of a host kubelet event as the tenant
// sees it: an image pull failure reduced to its kind, anything else as the
// host has it.
func TenantEventMessage(message string) string {
	m := pulledImage.FindStringSubmatch(message)
	if m == nil {
		return message
	}
	return fmt.Sprintf("%s %q: %s", m[1], m[2], ClassifyImagePullError(message[len(m[0]):]))
}
