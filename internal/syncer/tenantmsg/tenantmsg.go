// Package tenantmsg writes what a tenant reads of the host: the events,
// status messages and conditions nest-syncer puts in the tenant cluster
// when the host refuses or fails what it does for the tenant, and the host
// kubelet's words it passes on.
//
// The host's own text names the host: its namespaces, the host names of
// the tenant's objects, its quotas, its addresses and ranges. A tenant
// reading those learns how the host is laid out, and the names do not
// help it anyway: it must change its pod, a field of it, or ask for more
// of a VirtualCluster's quota. So every such message goes through a Scope,
// which keeps the host's reason (Forbidden, Invalid, a full quota) and the
// tenant's field paths, turns host names back into the tenant's, and drops
// host names and addresses it cannot turn back. What the host said word for
// word stays in the syncer's log.
package tenantmsg

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// What a message shows instead of what the tenant must not read.
const (
	// HostAddress stands for an IP address or range of the host.
	HostAddress = "<host address>"
	// HostObject stands for a host object's name the scope cannot turn
	// into a tenant object's.
	HostObject = "<host object>"
	// HostNamespace stands for the tenant's host namespace where no
	// tenant namespace can take its place.
	HostNamespace = "<host namespace>"
)

// Scope is what one message is about: the tenant object, and what of the
// host stands for it. The zero Scope shows no host name and no address.
type Scope struct {
	// VirtualCluster and Namespace, the tenant object's namespace, turn the
	// host names of the tenant's objects (contract.HostName) back into
	// theirs.
	VirtualCluster string
	// HostNamespace is the tenant's namespace on the host, or in a member
	// cluster; "HostNamespace/name" reads as "Namespace/name" (and the
	// kubelet's "name_HostNamespace" as "name_Namespace"), the namespace
	// alone as the constant HostNamespace.
	HostNamespace string
	// Member is the member cluster whose API server wrote the message, ""
	// for the host's: its quota is the member grant, not the
	// VirtualCluster's.
	Member string
	// Namespace is the tenant namespace of the object the message is
	// about.
	Namespace string
	// Names are host names, UIDs and other words the tenant knows by
	// other words: a host pod's UID, its host node, its token Secret.
	Names map[string]string
	// Addresses are the IP addresses the tenant knows already (its pod's,
	// its Service's ClusterIP); no other address or range is shown.
	Addresses []string
	// Field turns a field path of the host object into the tenant
	// object's; false for a field only the host object has. nil: the
	// paths are the same.
	Field func(path string) (string, bool)
}

// In is s for a tenant object of namespace.
func (s Scope) In(namespace string) Scope {
	s.Namespace = namespace
	return s
}

// WithName is s with one more host word the tenant knows as tenant.
func (s Scope) WithName(host, tenant string) Scope {
	if host == "" || host == tenant {
		return s
	}
	names := make(map[string]string, len(s.Names)+1)
	for k, v := range s.Names {
		names[k] = v
	}
	names[host] = tenant
	s.Names = names
	return s
}

// Error is what the tenant reads of err, a failure of what the syncer did
// for it. Text marked as the tenant's (AsIs, WithText) is kept; a context
// given with Wrap leads; an API error of the host is its reason in the
// tenant's terms (HostStatus); anything else is Scrub of its text.
func (s Scope) Error(err error) string {
	if err == nil {
		return ""
	}
	if text, ok := s.describe(err); ok {
		return text
	}
	return s.Scrub(err.Error())
}

// Tell is err with Error() as the tenant reads it (Error), for code that
// hands err to the tenant as it is, such as virtual-kubelet's pod
// controller. It still wraps err: errors.Is and As, and virtual-kubelet's
// errdefs (through Cause), see what err is.
func (s Scope) Tell(err error) error {
	if err == nil {
		return nil
	}
	return &told{text: s.Error(err), err: err}
}

// describe walks err's chain for the first error that says what the
// tenant reads; false when none does.
func (s Scope) describe(err error) (string, bool) {
	for e := err; e != nil; e = next(e) {
		switch x := e.(type) {
		case *told:
			return x.text, true
		case *tenantText:
			return x.text, true
		case *wrapped:
			return x.context + ": " + s.Error(x.err), true
		case *contract.NotOurCopyError:
			return fmt.Sprintf("another object on the host holds the name of this %s's copy: rename the %s, or ask the platform team to remove the other object", x.Kind, x.Kind), true
		case interface{ Unwrap() []error }:
			var parts []string
			for _, inner := range x.Unwrap() {
				if inner != nil {
					parts = append(parts, s.Error(inner))
				}
			}
			return strings.Join(slices.Compact(parts), "; "), true
		case apierrors.APIStatus:
			return s.HostStatus(x.Status()), true
		case *url.Error, *net.OpError, *net.DNSError:
			return "the host API server could not be reached", true
		}
		if e == context.Canceled || e == context.DeadlineExceeded {
			return "the virtual node stopped waiting for the host API server", true
		}
	}
	return "", false
}

// next is the error e wraps: errors' Unwrap, or errdefs' Cause.
func next(e error) error {
	switch x := e.(type) {
	case interface{ Unwrap() error }:
		return x.Unwrap()
	case interface{ Cause() error }:
		return x.Cause()
	}
	return nil
}

// Failures of the host API server, as the tenant reads them.
const (
	hostUnavailable = "the host API server is busy or did not answer in time; the virtual node tries again"
	hostFailed      = "the host API server failed; the virtual node tries again"
)

// quotaRE finds a quota admission refusal's quota and what was asked:
// "exceeded quota: NAME, requested: a=1,b=2, used: ..., limited: ...".
var quotaRE = regexp.MustCompile(`exceeded quota: [^,]*, requested: (.*?), used: `)

// failedQuotaRE finds the name of a quota in its other refusal, "failed
// quota: NAME: must specify ...".
var failedQuotaRE = regexp.MustCompile(`failed quota: [^:]*:`)

// HostStatus is the host API server's refusal st as the tenant reads it:
// its reason, a full quota named by the VirtualCluster field that bounds
// it, an invalid object's causes with the tenant's field paths, never the
// host object's name, namespace or the quota's name and figures.
func (s Scope) HostStatus(st metav1.Status) string {
	switch st.Reason {
	case metav1.StatusReasonForbidden:
		if m := quotaRE.FindStringSubmatch(st.Message); m != nil {
			return s.fullQuotas(m[1])
		}
		detail := afterFirst(st.Message, " is forbidden: ")
		if strings.HasPrefix(detail, "User ") {
			// RBAC: the syncer's own host identity, which the tenant
			// cannot change.
			return "the virtual node may not do this on the host"
		}
		detail = failedQuotaRE.ReplaceAllString(detail, "a quota of the VirtualCluster:")
		return "forbidden by the host: " + s.Scrub(detail)
	case metav1.StatusReasonInvalid:
		return s.invalid(st)
	case metav1.StatusReasonAlreadyExists:
		return "another object on the host holds its name"
	case metav1.StatusReasonNotFound:
		return "not found on the host"
	case metav1.StatusReasonConflict:
		return "it changed on the host meanwhile; the virtual node tries again"
	case metav1.StatusReasonUnauthorized:
		return "the host refused the virtual node's credentials"
	case metav1.StatusReasonTimeout, metav1.StatusReasonServerTimeout, metav1.StatusReasonTooManyRequests, metav1.StatusReasonServiceUnavailable:
		return hostUnavailable
	case metav1.StatusReasonInternalError:
		if strings.Contains(st.Message, "failed calling webhook") {
			return "an admission webhook of the host did not answer; the virtual node tries again"
		}
		return hostFailed
	case metav1.StatusReasonRequestEntityTooLarge:
		return "too large for the host"
	}
	if st.Code >= 500 {
		return hostFailed
	}
	reason := string(st.Reason)
	if reason == "" {
		reason = fmt.Sprintf("status %d", st.Code)
	}
	return "the host refused it (" + reason + ")"
}

// fullQuotas names the quotas a create or update would take past,
// requested being the refusal's "a=1,b=2" list.
func (s Scope) fullQuotas(requested string) string {
	var quotas []string
	for _, item := range strings.Split(requested, ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(item), "=")
		if name == "" {
			continue
		}
		if q := s.Quota(name); !slices.Contains(quotas, q) {
			quotas = append(quotas, q)
		}
	}
	if len(quotas) == 0 {
		if s.Member != "" {
			return "the member cluster grant is used up"
		}
		return "a quota of the VirtualCluster is full"
	}
	return strings.Join(quotas, " and ") + " " + plural(len(quotas), "is", "are") + " full"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Quota names the quota that holds resource (a ResourceQuota's resource
// name, such as requests.cpu or count/configmaps) in the tenant's terms:
// the VirtualCluster field the platform sets it from, or the member
// grant's.
func (s Scope) Quota(resource string) string {
	if s.Member != "" {
		return "the member cluster grant's " + resource + " quota"
	}
	return "the VirtualCluster's " + VirtualClusterField(resource) + " quota"
}

// VirtualClusterField is the VirtualCluster field a host ResourceQuota's
// resource comes from: the share (spec.promoteResources.resources) for
// pods and their requests and limits, the object budget
// (spec.virtualNode.objectBudget) for copies of ConfigMaps, Secrets and
// Services, storage (spec.virtualNode.storage) for claims.
func VirtualClusterField(resource string) string {
	const (
		share   = "spec.promoteResources.resources."
		budget  = "spec.virtualNode.objectBudget."
		storage = "spec.virtualNode.storage."
		class   = ".storageclass.storage.k8s.io/"
	)
	r := strings.TrimPrefix(resource, "count/")
	if _, perClass, ok := strings.Cut(r, class); ok {
		r = perClass
	}
	switch r {
	case "pods":
		return share + "pods"
	case "configmaps":
		return budget + "configMaps"
	case "secrets":
		return budget + "secrets"
	case "services", "services.nodeports", "services.loadbalancers":
		return budget + "services"
	case "persistentvolumeclaims":
		return storage + "claims"
	case "requests.storage":
		return storage + "requests"
	}
	r = strings.TrimPrefix(strings.TrimPrefix(r, "requests."), "limits.")
	return share + r
}

// invalid is an Invalid refusal: each cause with the tenant's field path,
// or the message without the object's name when it gives no causes.
func (s Scope) invalid(st metav1.Status) string {
	var causes []string
	if st.Details != nil {
		for _, c := range st.Details.Causes {
			msg := s.Scrub(c.Message)
			switch field, ok := s.field(c.Field); {
			case c.Field == "":
				causes = append(causes, msg)
			case ok:
				causes = append(causes, field+": "+msg)
			default:
				causes = append(causes, "a field the virtual node sets: "+msg)
			}
		}
	}
	if len(causes) == 0 {
		return "invalid on the host: " + s.Scrub(afterFirst(st.Message, " is invalid: "))
	}
	return strings.Join(causes, "; ")
}

func (s Scope) field(path string) (string, bool) {
	if s.Field == nil {
		return path, true
	}
	return s.Field(path)
}

// afterFirst is what follows sep in text, or text when sep is not in it:
// an API error's message without its `kind "name" is ...` start.
func afterFirst(text, sep string) string {
	if _, after, ok := strings.Cut(text, sep); ok {
		return after
	}
	return text
}

// Scrub rewrites host text for the tenant: host names the scope knows
// become the tenant's (Names, and the host names of tenant objects of
// Namespace, contract.HostName); the host namespace becomes Namespace
// where it stands with a name ("namespace/name", the kubelet's
// "name_namespace"), else HostNamespace; other host names of tenant
// objects become HostObject; IP addresses and ranges other than Addresses
// become HostAddress.
func (s Scope) Scrub(text string) string {
	return s.scrubNames(s.scrubAddresses(text))
}

// ScrubNames is Scrub without the addresses, for text the tenant's own
// containers wrote (a termination message), in which addresses are theirs.
func (s Scope) ScrubNames(text string) string { return s.scrubNames(text) }

// ipv4RE and ipv6RE find candidates for addresses and ranges; each is
// parsed before it is replaced.
var (
	ipv4RE = regexp.MustCompile(`\b\d{1,3}(?:\.\d{1,3}){3}(?:/\d{1,2})?\b`)
	ipv6RE = regexp.MustCompile(`[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:/\d{1,3})?`)
)

func (s Scope) scrubAddresses(text string) string {
	replace := func(candidate string) string {
		addr, _, _ := strings.Cut(candidate, "/")
		a, err := netip.ParseAddr(addr)
		if err != nil || slices.ContainsFunc(s.Addresses, func(k string) bool {
			ka, err := netip.ParseAddr(k)
			return err == nil && ka == a && !strings.Contains(candidate, "/")
		}) {
			return candidate
		}
		return HostAddress
	}
	text = ipv4RE.ReplaceAllStringFunc(text, replace)
	return ipv6RE.ReplaceAllStringFunc(text, replace)
}

// hostNameRE matches the host name of a tenant object: a readable part and
// 16 hex digits of hash (contract.HostName).
var hostNameRE = regexp.MustCompile(`^(.+)-[0-9a-f]{16}$`)

func isNameByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-'
}

// scrubNames replaces every word (a run of letters, digits and dashes, as
// names are) the tenant must not read.
func (s Scope) scrubNames(text string) string {
	var out strings.Builder
	for i := 0; i < len(text); {
		if !isNameByte(text[i]) {
			out.WriteByte(text[i])
			i++
			continue
		}
		j := i
		for j < len(text) && isNameByte(text[j]) {
			j++
		}
		inPath := j < len(text) && text[j] == '/' || i > 0 && text[i-1] == '_'
		out.WriteString(s.word(text[i:j], inPath))
		i = j
	}
	return out.String()
}

// word is one word of host text as the tenant reads it; inPath says it
// stands where a namespace does with a name, "namespace/name" or the
// kubelet's "name_namespace".
func (s Scope) word(w string, inPath bool) string {
	if tenant, ok := s.Names[w]; ok {
		return tenant
	}
	if s.HostNamespace != "" && w == s.HostNamespace {
		if inPath && s.Namespace != "" {
			return s.Namespace
		}
		return HostNamespace
	}
	m := hostNameRE.FindStringSubmatch(w)
	if m == nil {
		return w
	}
	if s.VirtualCluster != "" && s.Namespace != "" {
		if name, ok := strings.CutSuffix(m[1], "-"+s.Namespace); ok && contract.HostName(s.VirtualCluster, s.Namespace, name) == w {
			return name
		}
	}
	return HostObject
}

// told is an error as the tenant reads it (Scope.Tell).
type told struct {
	text string
	err  error
}

func (t *told) Error() string { return t.text }
func (t *told) Unwrap() error { return t.err }

// Cause lets virtual-kubelet's errdefs see what the error is.
func (t *told) Cause() error { return t.err }

// tenantText is an error whose tenant text is known (AsIs, WithText).
type tenantText struct {
	text string
	err  error
}

func (t *tenantText) Error() string { return t.err.Error() }
func (t *tenantText) Unwrap() error { return t.err }

// Cause lets virtual-kubelet's errdefs see what the error is.
func (t *tenantText) Cause() error { return t.err }

// AsIs marks err's text as written for the tenant already: a refusal that
// names the tenant's fields. Scope.Error keeps it word for word.
func AsIs(err error) error {
	if err == nil {
		return nil
	}
	return &tenantText{text: err.Error(), err: err}
}

// WithText is err, whose text is for the syncer's log, with text for the
// tenant instead.
func WithText(err error, text string) error {
	if err == nil {
		return nil
	}
	return &tenantText{text: text, err: err}
}

// wrapped is an error with a context in the tenant's terms (Wrap).
type wrapped struct {
	context string
	err     error
}

func (w *wrapped) Error() string { return w.err.Error() }
func (w *wrapped) Unwrap() error { return w.err }

// Cause lets virtual-kubelet's errdefs see what the error is.
func (w *wrapped) Cause() error { return w.err }

// Wrap is err, whose text is for the syncer's log, with context for the
// tenant: Scope.Error reads "context: " and what it makes of err.
func Wrap(err error, context string) error {
	if err == nil {
		return nil
	}
	return &wrapped{context: context, err: err}
}
