// Package contract is what nest-syncer and the rest of Nest agree on about
// the host copies of tenant objects: their names, and the labels and
// annotations that say whose copy an object is. nest-manager, the CLI, the
// dashboard and each kind's syncer import it instead of the syncer runtime.
package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nestdev/nest/internal/kindsync"
)

// Labels and annotations on host objects the syncer makes. Tenants may not
// set labels or annotations under nest.dev/, so these always mean what they say.
const (
	// LabelTenantOf names the VirtualCluster a host object belongs to.
	LabelTenantOf = "nest.dev/tenant-of"
	// LabelTenantNamespace is the tenant namespace of the object.
	LabelTenantNamespace = "nest.dev/tenant-namespace"
	// AnnotationTenantName is the tenant object's name.
	AnnotationTenantName = "nest.dev/tenant-name"
	// AnnotationTenantNamespace is the tenant object's namespace.
	AnnotationTenantNamespace = "nest.dev/tenant-namespace"
	// AnnotationTenantUID is the tenant object's UID.
	AnnotationTenantUID = "nest.dev/tenant-uid"
	// AnnotationSpecHash digests the tenant pod fields a pod update may change,
	// so a restarted syncer knows whether the host pod is current.
	AnnotationSpecHash = "nest.dev/tenant-spec-hash"

	// ReservedPrefix starts every label and annotation key only Nest
	// writes; tenant objects may not carry such keys.
	ReservedPrefix = "nest.dev/"
)

// maxHostName keeps host names valid DNS labels: a pod's name becomes its
// hostname in places, and labels are at most 63 characters.
const maxHostName = 63

// hashLen hex characters (64 bits) of SHA-256 make a collision between two
// tenant objects of one virtual cluster practically impossible: about 2^-64
// per pair, and about 3·10^-8 that any two of a million objects collide.
const hashLen = 16

// HostName returns the host name of the tenant object namespace/name of the
// virtual cluster vc: "<name>-<namespace>-<hash>", with dots turned into
// dashes and the readable part cut so the whole is at most 63 characters. It
// is a valid DNS label, and a DNS-1035 label (a Service name) when name is
// one. The hash covers the unambiguous triple, so two different tenant
// objects never share a host name even when their readable parts do.
func HostName(vc, namespace, name string) string {
	sum := sha256.Sum256([]byte(vc + "/" + namespace + "/" + name))
	suffix := "-" + hex.EncodeToString(sum[:])[:hashLen]
	readable := strings.ReplaceAll(name+"-"+namespace, ".", "-")
	if limit := maxHostName - len(suffix); len(readable) > limit {
		readable = strings.TrimRight(readable[:limit], "-")
	}
	return readable + suffix
}

// ShortName returns name when it is at most 63 characters; else name cut,
// with trailing dashes and dots dropped, and ended with "-" and a 64-bit
// hash of key, 63 characters in all.
func ShortName(name, key string) string {
	if len(name) <= maxHostName {
		return name
	}
	sum := sha256.Sum256([]byte(key))
	suffix := "-" + hex.EncodeToString(sum[:])[:hashLen]
	return strings.TrimRight(name[:maxHostName-len(suffix)], "-.") + suffix
}

// LabelManagedBy marks the objects nest-syncer keeps that are not copies
// of tenant objects (the tenant's kube-dns Service, the member network's
// Services), with ManagedByValue. A kube-dns Service without it is the
// tenant's own, and nest-syncer treats it as any other Service.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedByValue = "nest-syncer"
)

// SyncerBinary is nest-syncer's path in its image, which also runs the
// helper init containers of host pods.
const SyncerBinary = "/nest-syncer"

// TokenSecretName is the host Secret that carries one pod's service-account
// tokens and identity, owned by the host pod.
func TokenSecretName(hostPod string) string { return hostPod + "-token" }

// LabelTokenSecret ("true") marks the token Secrets (TokenSecretName): the
// token refresher lists only those, and the Secret kind leaves them alone.
const LabelTokenSecret = ReservedPrefix + "token-secret"

// AnnotationTokenRefreshAt is when a token Secret's tokens are next
// refreshed (RFC 3339); nest-syncer refreshes them then. nest-manager sets
// it to now once a rotated service-account key signs, so every pod gets a
// token the new key signed well before the old key is retired.
const AnnotationTokenRefreshAt = ReservedPrefix + "token-refresh-at"

// TokenKeyPrefix starts the keys of a token Secret that hold tokens; the
// others hold the tenant pod's identity, for downward API files.
const TokenKeyPrefix = "token-"

// HostLabels are the labels that select a virtual cluster's host objects of
// one tenant namespace.
func HostLabels(vc, namespace string) map[string]string {
	return map[string]string{LabelTenantOf: vc, LabelTenantNamespace: namespace}
}

// HostAnnotations point a host object back at its tenant object
// namespace/name with uid.
func HostAnnotations(namespace, name, uid string) map[string]string {
	return map[string]string{AnnotationTenantNamespace: namespace, AnnotationTenantName: name, AnnotationTenantUID: uid}
}

// IsCopyOf reports whether the host object with labels and annotations is
// the syncer's copy of the tenant object namespace/name of the virtual
// cluster vc. Only then may the syncer adopt, update or delete it: a host
// name can be taken by anything else in the host namespace.
func IsCopyOf(host metav1.Object, vc, namespace, name string) bool {
	ns, n, ok := TenantKey(host.GetAnnotations())
	return ok && host.GetLabels()[LabelTenantOf] == vc && ns == namespace && n == name
}

// IsCopyOfUID is IsCopyOf for the tenant object with uid: a copy made for
// an earlier object of the same name is not its copy. An empty uid matches
// no copy.
func IsCopyOfUID(host metav1.Object, vc, namespace, name, uid string) bool {
	return uid != "" && IsCopyOf(host, vc, namespace, name) && host.GetAnnotations()[AnnotationTenantUID] == uid
}

// GetCopy looks up the host copy of the tenant object namespace/name with
// uid of the virtual cluster vc: get, a lister's or client's Get by name,
// fetches the host object at HostName, and ok says whether it is that very
// copy (IsCopyOfUID). When the host holds no object of that name, GetCopy
// returns ok false and no error; when it holds one that is not the copy
// (another object's, or an earlier object's of the same name), it returns
// that object with ok false. Any other error of get is returned as it is.
func GetCopy[T metav1.Object](get func(name string) (T, error), vc, namespace, name, uid string) (host T, ok bool, err error) {
	host, err = get(HostName(vc, namespace, name))
	if err != nil {
		var none T
		if apierrors.IsNotFound(err) {
			return none, false, nil
		}
		return none, false, err
	}
	return host, IsCopyOfUID(host, vc, namespace, name, uid), nil
}

// NotOurCopy is the error for a host object that holds the name of the copy
// of the tenant object tenantKey ("namespace/name") but is not that copy. It
// is terminal: retrying cannot change whose object it is. It wraps a
// *NotOurCopyError, so what the tenant is told of it (tenantmsg) leaves the
// host object's namespace and name out.
func NotOurCopy(kind string, host metav1.Object, tenantKey string) error {
	return kindsync.Terminal(&NotOurCopyError{Kind: kind, HostNamespace: host.GetNamespace(), HostName: host.GetName(), TenantKey: tenantKey})
}

// NotOurCopyError says that the host object HostNamespace/HostName, of
// Kind, holds the name of the copy of the tenant object TenantKey
// ("namespace/name") but is not that copy.
type NotOurCopyError struct {
	Kind, HostNamespace, HostName, TenantKey string
}

// Error is the full story, for the syncer's log and the host administrator.
func (e *NotOurCopyError) Error() string {
	return fmt.Sprintf("host %s %s/%s already exists and is not the copy of %s: refusing to overwrite or delete it; rename the tenant object, or ask the host administrator to remove the host %s",
		e.Kind, e.HostNamespace, e.HostName, e.TenantKey, e.Kind)
}

// TenantKey returns the tenant namespace and name a host object stands for,
// and false when the object was not made by a syncer.
func TenantKey(annotations map[string]string) (namespace, name string, ok bool) {
	namespace, name = annotations[AnnotationTenantNamespace], annotations[AnnotationTenantName]
	return namespace, name, namespace != "" && name != ""
}
