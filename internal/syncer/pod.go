package syncer

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/service"
	"github.com/nestdev/nest/internal/syncer/kinds/serviceaccounttoken"
)

// Translator holds what pod translation needs to know about the virtual
// cluster and its host side: the Translation nest-manager sets
// (contract.Flags), and the tenant's share.
type Translator struct {
	contract.Translation
	// Share is the tenant's share of the host, the virtual nodes' capacity
	// together; nest-syncer sets it from its capacity.
	Share corev1.ResourceList
}

// ForcedGracePeriodSeconds is the grace period of a host pod whose tenant pod
// is gone from the tenant API (a force delete): the kubelet kills a pod
// removed from its API server with its minimum grace period too.
const ForcedGracePeriodSeconds int64 = 1

// GracePeriod is the grace period the host gives a tenant's grace period
// (nil: the pod's own), cut to MaxGracePeriodSeconds.
func (t Translator) GracePeriod(seconds *int64) *int64 {
	if seconds == nil {
		return nil
	}
	return ptr.To(min(*seconds, t.maxGracePeriod()))
}

// DeletionGracePeriod is the grace period of a host pod's deletion for a
// tenant deletion with seconds (nil: the pod's own): GracePeriod, but never
// 0, which would delete the host pod at once and free its quota while its
// containers still run; ForcedGracePeriodSeconds when the tenant pod is
// gone from the tenant API (force-deleted).
func (t Translator) DeletionGracePeriod(seconds *int64, tenantPodGone bool) *int64 {
	if tenantPodGone {
		return ptr.To(ForcedGracePeriodSeconds)
	}
	if g := t.GracePeriod(seconds); g != nil {
		return ptr.To(max(*g, ForcedGracePeriodSeconds))
	}
	return nil
}

func (t Translator) maxGracePeriod() int64 {
	if t.MaxGracePeriodSeconds > 0 {
		return t.MaxGracePeriodSeconds
	}
	return contract.DefaultMaxGracePeriodSeconds
}

// PodWarning is something the tenant is told about its pod with a Warning
// event once its host pod exists: what the host does differently from what
// the pod asked for.
type PodWarning struct {
	Reason, Message string
}

// Reasons of PodWarning events.
const (
	// ReasonGracePeriodCut: the pod's terminationGracePeriodSeconds is above
	// the VirtualCluster's bound.
	ReasonGracePeriodCut = "GracePeriodCut"
	// ReasonDNSConfigForming: nameservers or search domains past the
	// limits were dropped, as the kubelet's event of the same reason says.
	ReasonDNSConfigForming = "DNSConfigForming"
	// ReasonPrivilegedConfined: containers that ask for privileged run
	// without host privileges (Translator.ConfinePrivileged).
	ReasonPrivilegedConfined = "PrivilegedConfined"
)

// confinedWarning names the containers of pod, of every kind, that ask for
// privileged and run without it; false when there are none, or privileged
// containers are refused rather than confined.
func (t Translator) confinedWarning(pod *corev1.Pod) (PodWarning, bool) {
	names := privilegedContainers(pod)
	if !t.ConfinePrivileged || len(names) == 0 {
		return PodWarning{}, false
	}
	return PodWarning{ReasonPrivilegedConfined, fmt.Sprintf(
		"containers %s asked for privileged: the virtual node runs them without host privileges (no host devices, no capabilities beyond its Pod Security level)", strings.Join(names, ", "))}, true
}

// PodTranslation is a host pod and what must exist before it can start.
type PodTranslation struct {
	// Pod is the host pod.
	Pod *corev1.Pod
	// ConfigMaps and Secrets are the tenant objects (in the pod's namespace)
	// the pod references, which must be copied to the host first. Optional
	// references are listed in Optional.
	ConfigMaps, Secrets []string
	Optional            map[string]bool
	// Tokens to request for the pod's token Secret; empty when the pod
	// mounts no service-account token.
	Tokens []serviceaccounttoken.Projection
	// EphemeralContainers are the tenant pod's, translated like its
	// containers. The host takes them only through the pod's
	// ephemeralcontainers subresource, after the pod exists, so Pod leaves
	// them out.
	EphemeralContainers []corev1.EphemeralContainer
	// Identity is the data of the token Secret besides the tokens: the tenant
	// pod's name, namespace, UID and, when volumes show them, labels and
	// annotations, for downward API files (see identityData).
	Identity map[string]string
	// UsesTokenSecret is true when the host pod mounts its token Secret.
	UsesTokenSecret bool
	// NodeDiskClaim is the claim of the virtual node's disk the host pod
	// mounts (NodeDiskClaimFor makes it), "" when it mounts none.
	NodeDiskClaim string
	// Warnings are what the tenant is told once the host pod exists.
	Warnings []PodWarning
	// Claims are the tenant PersistentVolumeClaims the pod mounts, in its
	// namespace; the host pod mounts their host claims, which must be the
	// virtual node's copies (the provider checks).
	Claims []string
	// identityUsed holds the Identity keys the pod's volumes project, each
	// with the downward API field path it stands for.
	identityUsed map[string]string
	// fieldAnnotations are host pod annotations holding the tenant labels and
	// annotations variables refer to (see metadataFieldAnnotation).
	fieldAnnotations map[string]string

	virtualCluster, namespace string
}

// Keys of the token Secret that stand for downward API fields.
const (
	identityName        = "pod-name"
	identityNamespace   = "pod-namespace"
	identityUID         = "pod-uid"
	identityLabels      = "pod-labels"
	identityAnnotations = "pod-annotations"
)

// defaultTokenSeconds is what the API server defaults a projected token's
// expirationSeconds to.
const defaultTokenSeconds = 3600

// allowedVolume reports whether the host can honour a volume as the tenant
// means it. Claims and network volumes name tenant objects or host storage that
// the tenant has no right to; they are refused rather than silently changed.
func allowedVolume(v corev1.VolumeSource) (string, bool) {
	switch {
	case v.EmptyDir != nil, v.ConfigMap != nil, v.Secret != nil, v.Projected != nil, v.DownwardAPI != nil, v.Image != nil:
		return "", true
	case v.HostPath != nil:
		// A path on the virtual node's disk, or refused: translateHostPaths.
		return "", true
	case v.PersistentVolumeClaim != nil:
		// The host claim behind the tenant's: see PodTranslation.Claims.
		return "", true
	case v.Ephemeral != nil:
		return "ephemeral", false
	}
	return "this volume type", false
}

// TranslatePod returns the host pod for a tenant pod bound to the virtual
// node; services are the Services of the pod's namespace, for its service
// variables. It refuses, with an error naming the field, what the host cannot
// honour. Pod Security is checked separately, before translation. Of the
// tenant's labels and annotations, only the keys metadata allows reach the
// host pod (see copyAllowed); the rest stay in the tenant cluster.
func (t Translator) TranslatePod(tenant *corev1.Pod, metadata contract.MetadataAllowList, services []service.Address) (*PodTranslation, error) {
	if err := checkReservedKeys(tenant); err != nil {
		return nil, err
	}
	if err := checkUnsupportedSpec(&tenant.Spec); err != nil {
		return nil, err
	}
	if err := checkHostProfiles(tenant); err != nil {
		return nil, err
	}
	if err := checkPodImages(t.Images, &tenant.Spec); err != nil {
		return nil, err
	}
	name := contract.HostName(t.VirtualCluster, tenant.Namespace, tenant.Name)
	out := &PodTranslation{
		virtualCluster: t.VirtualCluster, namespace: tenant.Namespace,
		Optional:     map[string]bool{},
		identityUsed: map[string]string{}, fieldAnnotations: map[string]string{},
	}
	spec := tenant.Spec.DeepCopy()
	if dropped := t.scheduleOnHost(spec, tenant.Namespace, tenant.Name); dropped != "" {
		out.Warnings = append(out.Warnings, PodWarning{ReasonDNSConfigForming, dropped})
	}
	if g := t.GracePeriod(spec.TerminationGracePeriodSeconds); g != nil && *g != *spec.TerminationGracePeriodSeconds {
		out.Warnings = append(out.Warnings, PodWarning{ReasonGracePeriodCut, fmt.Sprintf(
			"spec.terminationGracePeriodSeconds %d is above the virtual node's bound (the VirtualCluster's spec.virtualNode.maxTerminationGracePeriodSeconds): the pod gets %d seconds to stop", *spec.TerminationGracePeriodSeconds, *g)})
		spec.TerminationGracePeriodSeconds = g
	}
	hardenRuntime(spec)
	if t.AlwaysPullImages {
		alwaysPull(spec)
	}
	if err := t.translateVolumes(spec, name, out); err != nil {
		return nil, err
	}
	out.Identity = identityData(tenant, out.identityUsed)
	serviceEnv := t.serviceEnv(tenant, services)
	ephemeral := ephemeralAsContainers(tenant.Spec.EphemeralContainers)
	if t.ConfinePrivileged {
		confinePrivileged(spec, ephemeral)
	}
	if w, ok := t.confinedWarning(tenant); ok {
		out.Warnings = append(out.Warnings, w)
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers, ephemeral} {
		for i := range cs {
			t.translateContainer(&cs[i], tenant, serviceEnv, out)
		}
	}
	if spec.Resources != nil {
		t.dropTenantOnlyResources(spec.Resources)
	}
	claim, err := t.translateHostPaths(spec, cmp.Or(tenant.Spec.NodeName, t.NodeName), ephemeral)
	if err != nil {
		return nil, err
	}
	out.NodeDiskClaim = claim
	for i, c := range ephemeral {
		dropNetRaw(&c)
		if t.AlwaysPullImages {
			c.ImagePullPolicy = corev1.PullAlways
		}
		// The API refuses resources on ephemeral containers; translation
		// zero-fills requests.
		c.Resources = corev1.ResourceRequirements{}
		out.EphemeralContainers = append(out.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon(c), TargetContainerName: tenant.Spec.EphemeralContainers[i].TargetContainerName})
	}
	hostNetworkNode := ""
	if tenant.Spec.HostNetwork {
		hostNetworkNode = cmp.Or(tenant.Spec.NodeName, t.NodeName)
	}
	if err := t.tenantEtcHosts(spec, tenant.Namespace, hostNetworkNode); err != nil {
		return nil, err
	}
	t.waitForNodeNetwork(spec, hostNetworkNode)
	// Last, so it runs first.
	t.fenceNetwork(spec)
	for i, s := range spec.ImagePullSecrets {
		// Optional: a kubelet pulls without a pull Secret it cannot find.
		spec.ImagePullSecrets[i].Name = out.secret(s.Name, ptr.To(true))
	}
	labels := copyAllowed(tenant.Labels, metadata.Labels)
	maps.Copy(labels, contract.HostLabels(t.VirtualCluster, tenant.Namespace))
	if out.NodeDiskClaim != "" {
		labels[LabelNodeDisk] = out.NodeDiskClaim
	}
	annotations := copyAllowed(tenant.Annotations, metadata.Annotations)
	maps.Copy(annotations, out.fieldAnnotations)
	maps.Copy(annotations, contract.HostAnnotations(tenant.Namespace, tenant.Name, string(tenant.UID)))
	// The hash covers the tenant's full metadata, copied or not, so any
	// change reaches UpdatePod.
	annotations[contract.AnnotationSpecHash] = SpecHash(tenant)
	out.Pod = &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: t.HostNamespace, Labels: labels, Annotations: annotations,
			OwnerReferences: t.HostPodController(tenant)},
		Spec: *spec,
	}
	return out, nil
}

func checkReservedKeys(p *corev1.Pod) error {
	for _, m := range []struct {
		field string
		keys  map[string]string
	}{{"metadata.labels", p.Labels}, {"metadata.annotations", p.Annotations}} {
		for k := range m.keys {
			if strings.HasPrefix(k, contract.ReservedPrefix) {
				return fmt.Errorf("%s: key %q is reserved for Nest: remove it or use another prefix", m.field, k)
			}
		}
	}
	return nil
}

func checkUnsupportedSpec(s *corev1.PodSpec) error {
	if err := checkReservedNames(s); err != nil {
		return err
	}
	for i, v := range s.Volumes {
		if kind, ok := allowedVolume(v.VolumeSource); !ok {
			return fmt.Errorf("spec.volumes[%d] (%s): %s volumes are not supported on the virtual node: use emptyDir, configMap, secret, projected, downwardAPI or persistentVolumeClaim", i, v.Name, kind)
		}
	}
	if s.OS != nil && s.OS.Name != corev1.Linux {
		return fmt.Errorf("spec.os.name: the virtual node runs Linux pods only: remove the field or set it to linux")
	}
	if s.RuntimeClassName != nil {
		return fmt.Errorf("spec.runtimeClassName: the host chooses the container runtime on the virtual node: remove the field")
	}
	if len(s.ResourceClaims) > 0 {
		return fmt.Errorf("spec.resourceClaims: dynamic resource allocation is not supported on the virtual node: request extended resources such as nvidia.com/gpu instead")
	}
	return nil
}

// scheduleOnHost clears what only makes sense among tenant nodes and pods:
// the host scheduler places the pod by host rules, within the tenant's quota.
// It returns what of the pod's dnsConfig was dropped, "" when nothing was.
func (t Translator) scheduleOnHost(spec *corev1.PodSpec, namespace, tenantName string) (droppedDNS string) {
	nodeName := cmp.Or(spec.NodeName, t.NodeName)
	spec.NodeName = ""
	spec.NodeSelector = nil
	spec.Affinity = nil
	spec.Tolerations = nil
	spec.TopologySpreadConstraints = nil
	spec.SchedulerName = ""
	spec.ReadinessGates = nil
	spec.PriorityClassName = t.PriorityClassName
	spec.Priority = nil
	spec.PreemptionPolicy = nil
	spec.Overhead = nil
	spec.EphemeralContainers = nil
	// No host credentials and no host Service environment reach a tenant pod.
	spec.ServiceAccountName = ""
	spec.DeprecatedServiceAccount = ""
	spec.AutomountServiceAccountToken = ptr.To(false)
	spec.EnableServiceLinks = ptr.To(false)
	if spec.HostNetwork {
		// A pod on the node's network: the virtual node has no network of
		// its own to give, so the host pod gets a network namespace on the
		// host's pod network, which reaches every tenant pod and Service as
		// a node does, and the node's hostname, as on a node.
		spec.HostNetwork = false
		spec.Hostname, spec.Subdomain = "", ""
		if len(validation.IsDNS1123Label(nodeName)) == 0 {
			spec.Hostname = nodeName
		}
	}
	if spec.Hostname == "" && len(validation.IsDNS1123Label(tenantName)) == 0 {
		spec.Hostname = tenantName
	}
	if spec.DNSPolicy != corev1.DNSNone && spec.DNSPolicy != corev1.DNSDefault {
		spec.DNSPolicy = corev1.DNSNone
		spec.DNSConfig, droppedDNS = t.dnsConfig(namespace, spec.DNSConfig)
	}
	return droppedDNS
}

// alwaysPull makes the host kubelet pull every image of the pod, with the
// pod's own pull Secrets, before it runs it. Ephemeral containers are set in
// TranslatePod: they are not in the host pod's spec.
func alwaysPull(spec *corev1.PodSpec) {
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			cs[i].ImagePullPolicy = corev1.PullAlways
		}
	}
	for _, v := range spec.Volumes {
		if v.Image != nil {
			v.Image.PullPolicy = corev1.PullAlways
		}
	}
}

// ephemeralAsContainers copies ephemeral containers as containers, the type
// checks and translation take; TargetContainerName is left behind.
func ephemeralAsContainers(ecs []corev1.EphemeralContainer) []corev1.Container {
	if len(ecs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(ecs))
	for i, ec := range ecs {
		out[i] = corev1.Container(*ec.EphemeralContainerCommon.DeepCopy())
	}
	return out
}

// configMap records a reference to a tenant ConfigMap and returns the name
// of its host copy.
func (out *PodTranslation) configMap(name string, optional *bool) string {
	out.addRef(&out.ConfigMaps, "configmap/"+name, name, ptr.Deref(optional, false))
	return contract.HostName(out.virtualCluster, out.namespace, name)
}

// secret records a reference to a tenant Secret and returns the name of its
// host copy.
func (out *PodTranslation) secret(name string, optional *bool) string {
	out.addRef(&out.Secrets, "secret/"+name, name, ptr.Deref(optional, false))
	return contract.HostName(out.virtualCluster, out.namespace, name)
}

// addRef records a reference; an object is optional only if every reference
// to it is.
func (out *PodTranslation) addRef(list *[]string, key, name string, optional bool) {
	if !slices.Contains(*list, name) {
		*list = append(*list, name)
		out.Optional[key] = optional
		return
	}
	out.Optional[key] = out.Optional[key] && optional
}

// IsOptional reports whether every reference to the ConfigMap (kind
// "configmap") or Secret (kind "secret") is optional.
func (out *PodTranslation) IsOptional(kind, name string) bool { return out.Optional[kind+"/"+name] }

func (t Translator) translateVolumes(spec *corev1.PodSpec, hostPod string, out *PodTranslation) error {
	for i := range spec.Volumes {
		v := &spec.Volumes[i].VolumeSource
		switch {
		case v.ConfigMap != nil:
			v.ConfigMap.Name = out.configMap(v.ConfigMap.Name, v.ConfigMap.Optional)
		case v.Secret != nil:
			v.Secret.SecretName = out.secret(v.Secret.SecretName, v.Secret.Optional)
		case v.PersistentVolumeClaim != nil:
			if !slices.Contains(out.Claims, v.PersistentVolumeClaim.ClaimName) {
				out.Claims = append(out.Claims, v.PersistentVolumeClaim.ClaimName)
			}
			v.PersistentVolumeClaim.ClaimName = contract.HostName(t.VirtualCluster, out.namespace, v.PersistentVolumeClaim.ClaimName)
		case v.DownwardAPI != nil:
			p := &corev1.ProjectedVolumeSource{DefaultMode: v.DownwardAPI.DefaultMode, Sources: []corev1.VolumeProjection{{DownwardAPI: &corev1.DownwardAPIProjection{Items: v.DownwardAPI.Items}}}}
			v.DownwardAPI, v.Projected = nil, p
			fallthrough
		case v.Projected != nil:
			if err := t.translateProjection(v.Projected, hostPod, i, out); err != nil {
				return fmt.Errorf("spec.volumes[%d] (%s): %w", i, spec.Volumes[i].Name, err)
			}
		}
	}
	return nil
}

// translateProjection rewrites one projected volume: ConfigMaps and Secrets
// point at their host copies, service-account tokens and tenant identity
// fields come from the pod's token Secret.
func (t Translator) translateProjection(p *corev1.ProjectedVolumeSource, hostPod string, volume int, out *PodTranslation) error {
	var sources []corev1.VolumeProjection
	for j, src := range p.Sources {
		switch {
		case src.ConfigMap != nil:
			src.ConfigMap.Name = out.configMap(src.ConfigMap.Name, src.ConfigMap.Optional)
		case src.Secret != nil:
			src.Secret.Name = out.secret(src.Secret.Name, src.Secret.Optional)
		case src.ServiceAccountToken != nil:
			key := fmt.Sprintf("%s%d-%d", contract.TokenKeyPrefix, volume, j)
			out.Tokens = append(out.Tokens, serviceaccounttoken.Projection{Key: key, Audience: src.ServiceAccountToken.Audience, ExpirationSeconds: ptr.Deref(src.ServiceAccountToken.ExpirationSeconds, defaultTokenSeconds)})
			src = tokenSecretProjection(hostPod, []corev1.KeyToPath{{Key: key, Path: src.ServiceAccountToken.Path}})
			out.UsesTokenSecret = true
		case src.DownwardAPI != nil:
			identity, rest := splitIdentityItems(src.DownwardAPI.Items, out.identityUsed)
			if len(identity) > 0 {
				out.UsesTokenSecret = true
				sources = append(sources, tokenSecretProjection(hostPod, identity))
			}
			if len(rest) == 0 {
				continue
			}
			src.DownwardAPI = &corev1.DownwardAPIProjection{Items: rest}
		case src.ClusterTrustBundle != nil, src.PodCertificate != nil:
			return fmt.Errorf("sources[%d]: clusterTrustBundle and podCertificate projections are not supported on the virtual node", j)
		}
		sources = append(sources, src)
	}
	p.Sources = sources
	return nil
}

// tokenSecretProjection projects items of the host pod's token Secret.
func tokenSecretProjection(hostPod string, items []corev1.KeyToPath) corev1.VolumeProjection {
	return corev1.VolumeProjection{Secret: &corev1.SecretProjection{
		LocalObjectReference: corev1.LocalObjectReference{Name: contract.TokenSecretName(hostPod)},
		Items:                items,
	}}
}

// identityFields maps the downward API fields whose host value would differ
// from the tenant's to the token Secret key that holds the tenant's value.
var identityFields = map[string]string{
	"metadata.name":        identityName,
	"metadata.namespace":   identityNamespace,
	"metadata.uid":         identityUID,
	"metadata.labels":      identityLabels,
	"metadata.annotations": identityAnnotations,
}

// identityData is the token Secret's data for the downward API fields the
// pod's volumes use (used: key to field path): name, namespace and UID
// always; the labels and annotations, in the kubelet's file format, and
// single ones (metadata.labels['k']), only when a volume shows them, and
// kept in step with the tenant pod by UpdatePod.
func identityData(tenant *corev1.Pod, used map[string]string) map[string]string {
	out := map[string]string{identityName: tenant.Name, identityNamespace: tenant.Namespace, identityUID: string(tenant.UID)}
	for key, path := range used {
		switch path {
		case "metadata.labels":
			out[key] = formatMap(tenant.Labels)
		case "metadata.annotations":
			out[key] = formatMap(tenant.Annotations)
		default:
			if k, ok := subscript(path, "metadata.labels"); ok {
				out[key] = tenant.Labels[k]
			} else if k, ok := subscript(path, "metadata.annotations"); ok {
				out[key] = tenant.Annotations[k]
			}
		}
	}
	return out
}

// formatMap renders labels or annotations as the kubelet writes them to a
// downward API file (k8s.io/kubernetes/pkg/fieldpath.FormatMap): key="value"
// lines, sorted by key, with Go quoting, no final newline.
func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%v=%q", k, v))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// splitIdentityItems splits a downward API projection into the items the
// token Secret holds (identityKey), recorded in used, and the rest, which
// the host kubelet resolves the same for the host pod as for the tenant's.
func splitIdentityItems(items []corev1.DownwardAPIVolumeFile, used map[string]string) ([]corev1.KeyToPath, []corev1.DownwardAPIVolumeFile) {
	var identity []corev1.KeyToPath
	var rest []corev1.DownwardAPIVolumeFile
	for _, it := range items {
		if it.FieldRef != nil {
			if key, ok := identityKey(it.FieldRef.FieldPath); ok {
				identity = append(identity, corev1.KeyToPath{Key: key, Path: it.Path, Mode: it.Mode})
				used[key] = it.FieldRef.FieldPath
				continue
			}
		}
		rest = append(rest, it)
	}
	return identity, rest
}

// identityKey returns the token Secret key holding the tenant's value of a
// downward API field whose host value would differ: identityFields, or,
// for one label or annotation (metadata.annotations['k']), a key of its
// own, so the host kubelet never resolves it against the host pod's
// metadata.
func identityKey(path string) (string, bool) {
	if key, ok := identityFields[path]; ok {
		return key, true
	}
	for _, prefix := range []string{"metadata.labels", "metadata.annotations"} {
		if _, ok := subscript(path, prefix); ok {
			sum := sha256.Sum256([]byte(path))
			return "pod-field-" + hex.EncodeToString(sum[:6]), true
		}
	}
	return "", false
}

// translateContainer points references at host copies, resolves the
// downward API fields that would otherwise show host values, and gives the
// container the tenant's service variables (serviceEnv), which point
// in-cluster clients at the tenant API server.
func (t Translator) translateContainer(c *corev1.Container, tenant *corev1.Pod, serviceEnv []corev1.EnvVar, out *PodTranslation) {
	for i := range c.EnvFrom {
		e := &c.EnvFrom[i]
		if e.ConfigMapRef != nil {
			e.ConfigMapRef.Name = out.configMap(e.ConfigMapRef.Name, e.ConfigMapRef.Optional)
		}
		if e.SecretRef != nil {
			e.SecretRef.Name = out.secret(e.SecretRef.Name, e.SecretRef.Optional)
		}
	}
	has := map[string]bool{}
	for i := range c.Env {
		e := &c.Env[i]
		has[e.Name] = true
		if e.ValueFrom == nil {
			continue
		}
		switch {
		case e.ValueFrom.ConfigMapKeyRef != nil:
			e.ValueFrom.ConfigMapKeyRef.Name = out.configMap(e.ValueFrom.ConfigMapKeyRef.Name, e.ValueFrom.ConfigMapKeyRef.Optional)
		case e.ValueFrom.SecretKeyRef != nil:
			e.ValueFrom.SecretKeyRef.Name = out.secret(e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Optional)
		case e.ValueFrom.FieldRef != nil:
			if key, value, ok := metadataFieldAnnotation(e.ValueFrom.FieldRef.FieldPath, tenant); ok {
				e.ValueFrom.FieldRef.FieldPath = "metadata.annotations['" + key + "']"
				out.fieldAnnotations[key] = value
			} else if v, ok := t.tenantFieldValue(e.ValueFrom.FieldRef.FieldPath, tenant); ok {
				e.Value, e.ValueFrom = v, nil
			}
		}
	}
	// First, so the container's own variables can refer to them as $(NAME),
	// and left out where the container sets the name itself. (The kubelet
	// lets envFrom override them too; here they win over envFrom.)
	var env []corev1.EnvVar
	for _, e := range serviceEnv {
		if !has[e.Name] {
			env = append(env, e)
		}
	}
	c.Env = append(env, c.Env...)
	clearHostPorts(c)
	t.dropTenantOnlyResources(&c.Resources)
	zeroFillRequests(&c.Resources)
	raiseDefaultLimits(&c.Resources, t.DefaultLimits)
}

// isExtendedResource reports whether name is an extended resource, such as
// example.com/dongle, as upstream's helper of that name decides: a name
// with a domain that is not kubernetes.io's.
func isExtendedResource(name corev1.ResourceName) bool {
	n := string(name)
	return strings.Contains(n, "/") && !strings.Contains(n, corev1.ResourceDefaultNamespacePrefix) &&
		!strings.HasPrefix(n, corev1.DefaultResourceRequestsPrefix)
}

// dropTenantOnlyResources removes the extended resources the share does not
// name from a host container. The syncer admits such a resource only when
// the tenant advertised it on its virtual node (see admission), as a
// cluster admin advertises one by patching a node's status: bookkeeping
// between the tenant's pods and scheduler that no host node offers, so the
// host pod must not ask for it.
func (t Translator) dropTenantOnlyResources(r *corev1.ResourceRequirements) {
	for _, list := range []corev1.ResourceList{r.Requests, r.Limits} {
		for name := range list {
			if _, shared := t.Share[name]; !shared && isExtendedResource(name) {
				delete(list, name)
			}
		}
	}
}

// tenantFieldValue returns the tenant's value of a downward API field whose
// host value would be wrong, for an environment variable; status fields (pod
// IP, host IP) are true on the host.
func (t Translator) tenantFieldValue(path string, p *corev1.Pod) (string, bool) {
	switch path {
	case "metadata.name":
		return p.Name, true
	case "metadata.namespace":
		return p.Namespace, true
	case "metadata.uid":
		return string(p.UID), true
	case "spec.nodeName":
		return cmp.Or(p.Spec.NodeName, t.NodeName), true
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, true
	}
	return "", false
}

// metadataFieldAnnotation maps a variable from one label or annotation of
// the tenant pod (metadata.labels['k'], metadata.annotations['k']), such as
// an indexed Job's batch.kubernetes.io/job-completion-index, to a host pod
// annotation under Nest's reserved prefix that holds the tenant's value:
// the host kubelet resolves it at each container start, as the tenant's
// would, and UpdatePod keeps it in step. The tenant's own keys never reach
// the host pod this way, so none of them can mean anything to the host.
func metadataFieldAnnotation(path string, p *corev1.Pod) (key, value string, ok bool) {
	for prefix, m := range map[string]map[string]string{"metadata.labels": p.Labels, "metadata.annotations": p.Annotations} {
		if k, ok := subscript(path, prefix); ok {
			sum := sha256.Sum256([]byte(path))
			return contract.ReservedPrefix + "field-" + hex.EncodeToString(sum[:6]), m[k], true
		}
	}
	return "", "", false
}

// subscript returns key when path is prefix['key'], the downward API's form
// for one label or annotation.
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// zeroFillRequests states a zero cpu and memory request where a container
// gives none. A host ResourceQuota on requests refuses pods that leave them
// out; a zero request is what the tenant scheduler counted anyway.
func zeroFillRequests(r *corev1.ResourceRequirements) {
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := r.Requests[name]; !ok {
			r.Requests[name] = resource.Quantity{Format: resource.DecimalSI}
		}
	}
}

// raiseDefaultLimits sets the limit of each resource in defaults that r
// requests above the default and does not limit to its request, the
// smallest limit the host accepts; the LimitRange fills in the rest.
func raiseDefaultLimits(r *corev1.ResourceRequirements, defaults corev1.ResourceList) {
	for name, def := range defaults {
		req, requested := r.Requests[name]
		if _, limited := r.Limits[name]; limited || !requested || req.Cmp(def) <= 0 {
			continue
		}
		if r.Limits == nil {
			r.Limits = corev1.ResourceList{}
		}
		r.Limits[name] = req.DeepCopy()
	}
}

// SpecHash digests the tenant pod fields that a pod update may change and
// that the host pod mirrors: labels, annotations, images and resources (an
// in-place resize), the active deadline and the ephemeral containers' names;
// and the generation.
func SpecHash(p *corev1.Pod) string {
	images := func(cs []corev1.Container) []string {
		var out []string
		for _, c := range cs {
			r, _ := json.Marshal(c.Resources)
			out = append(out, c.Name+"="+c.Image+" "+string(r))
		}
		return out
	}
	var ephemeral []string
	for _, c := range p.Spec.EphemeralContainers {
		ephemeral = append(ephemeral, c.Name)
	}
	// The generation too: a change the host pod does not mirror (new
	// tolerations) must still reach it, so the host pod's update brings a
	// status with the tenant's new observed generation (see TenantStatus).
	fields := []any{p.Labels, p.Annotations, images(p.Spec.InitContainers), images(p.Spec.Containers), p.Spec.ActiveDeadlineSeconds, p.Generation}
	// Only when there are some: the hash of a pod without stays what it was.
	if len(ephemeral) > 0 {
		fields = append(fields, ephemeral)
	}
	data, _ := json.Marshal(fields)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}
