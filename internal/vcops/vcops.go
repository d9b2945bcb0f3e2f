// Package vcops holds what users do to VirtualCluster objects in the host
// cluster: create one (with its host namespace), change its share, read its
// kubeconfig and delete it. The nest CLI and the dashboard both call it, so
// the two agree on defaults, validation and clean-up. Every function acts with
// the client it is given, that is with its user's own rights.
package vcops

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/version"
)

// CreatedByLabel marks host namespaces a Nest tool made for a virtual
// cluster; DeleteOwnNamespace removes only those.
const CreatedByLabel = "nest.dev/created-by"

// Values of CreatedByLabel, one per tool that creates namespaces.
const (
	CreatedByCLI       = "nest-cli"
	CreatedByDashboard = "nest-dashboard"
)

// GPUResource is the extended resource the share's gpu field sets.
const GPUResource corev1.ResourceName = "nvidia.com/gpu"

// DefaultNamespace is the host namespace of a virtual cluster when the user
// names none: one namespace per tenant, as vcluster does.
func DefaultNamespace(name string) string { return "vc-" + name }

// Field names the user-facing fields FieldError refers to. The CLI maps them
// to flags (--cpu), the dashboard to form inputs.
const (
	FieldName        = "name"
	FieldNamespace   = "namespace"
	FieldCPU         = "cpu"
	FieldMemory      = "memory"
	FieldGPU         = "gpu"
	FieldPods        = "pods"
	FieldPodSecurity = "podSecurity"
	FieldServiceType = "serviceType"
	FieldExternalIPs = "externalIPs"
	// FieldReplicas is the control plane's replica count.
	FieldReplicas = "replicas"
	// FieldStorage is what the tenant's PersistentVolumeClaims may request
	// together on the host.
	FieldStorage = "storage"
	// FieldNodes and FieldNodeSelector are the dedicated nodes a promote
	// policy asks for.
	FieldNodes        = "nodes"
	FieldNodeSelector = "nodeSelector"
)

// FieldError is bad input in one field, with what a good value looks like.
type FieldError struct {
	// Field is one of the Field* names.
	Field string
	// Value is what the user gave.
	Value string
	// Reason says what is wrong and what is accepted, such as "want a
	// positive quantity, such as 4 or 8Gi".
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s %q: %s", e.Field, e.Value, e.Reason)
}

// Share is a tenant's share of host capacity as a user types it. Empty
// strings and zero Pods leave that resource at its default (see
// controlplane.Share).
type Share struct {
	CPU, Memory, GPU string
	Pods             string
}

// Resources parses the share into spec.promoteResources.resources, or
// returns a *FieldError for the first bad field.
func (s Share) Resources() (corev1.ResourceList, error) {
	res := corev1.ResourceList{}
	for _, q := range []struct {
		field, value string
		name         corev1.ResourceName
	}{{FieldCPU, s.CPU, corev1.ResourceCPU}, {FieldMemory, s.Memory, corev1.ResourceMemory}, {FieldGPU, s.GPU, GPUResource}} {
		v := strings.TrimSpace(q.value)
		if v == "" {
			continue
		}
		parsed, err := resource.ParseQuantity(v)
		if err != nil || parsed.Sign() <= 0 {
			return nil, &FieldError{Field: q.field, Value: q.value, Reason: "want a positive quantity, such as 4 or 8Gi"}
		}
		res[q.name] = parsed
	}
	if p := strings.TrimSpace(s.Pods); p != "" {
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil || n <= 0 {
			return nil, &FieldError{Field: FieldPods, Value: s.Pods, Reason: "want a positive whole number, such as 110"}
		}
		res[corev1.ResourcePods] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return res, nil
}

// ValidateName checks a VirtualCluster name before anything is created: a
// DNS-1123 label of at most nestv1.MaxNameLength characters.
func ValidateName(name string) error {
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return &FieldError{Field: FieldName, Value: name, Reason: "want lower-case letters, digits and '-', starting and ending with a letter or digit, such as team-a"}
	}
	if len(name) > nestv1.MaxNameLength {
		return &FieldError{Field: FieldName, Value: name, Reason: fmt.Sprintf("want at most %d characters: host object names are derived from it", nestv1.MaxNameLength)}
	}
	return nil
}

// Create makes the host namespace (labelled CreatedByLabel=createdBy) unless
// it exists, then the VirtualCluster. It reports created=false when the
// VirtualCluster already exists, as `kubectl apply` would. When the API
// server refuses the VirtualCluster, a namespace Create made for it is
// removed again, so a failure leaves nothing behind. Objects in first
// (nest restore's PKI Secret) are written in the namespace before the
// VirtualCluster, so its controller finds them there: made, or, where one
// is left that no object controls, given first's labels and data. Nothing
// is written while the VirtualCluster exists, and a failure removes the
// Secrets and the namespace this call made.
func Create(ctx context.Context, c client.Client, vc *nestv1.VirtualCluster, createdBy string, first ...*corev1.Secret) (created bool, err error) {
	key := client.ObjectKeyFromObject(vc)
	if err := ValidateName(vc.Name); err != nil {
		return false, err
	}
	if err := checkNamespaceFree(ctx, c, key); err != nil {
		return false, err
	}
	// A VirtualCluster already there is reported, and its Secrets are
	// never written over.
	if err := c.Get(ctx, key, &nestv1.VirtualCluster{}); err == nil {
		return false, nil
	} else if !apierrors.IsNotFound(err) {
		return false, err
	}
	madeNamespace, err := ensureNamespace(ctx, c, key.Namespace, createdBy)
	if err != nil {
		return false, err
	}
	// undo removes what this call made, so a failure leaves nothing.
	var made []*corev1.Secret
	undo := func(err error) (bool, error) {
		var errs []error
		for _, s := range made {
			errs = append(errs, client.IgnoreNotFound(c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name}})))
		}
		if madeNamespace {
			errs = append(errs, client.IgnoreNotFound(c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: key.Namespace}})))
		}
		if derr := errors.Join(errs...); derr != nil {
			return false, fmt.Errorf("create virtual cluster %s: %w (and removing what was made for it failed: %v)", key, err, derr)
		}
		return false, fmt.Errorf("create virtual cluster %s: %w", key, err)
	}
	for _, s := range first {
		created, err := putSecret(ctx, c, s)
		if err != nil {
			return undo(err)
		}
		if created {
			made = append(made, s)
		}
	}
	switch err := c.Create(ctx, vc); {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return undo(err)
	}
	return true, nil
}

// putSecret creates want, or gives the Secret of its name, unless an object
// controls it, want's labels and data; it says whether it created it.
func putSecret(ctx context.Context, c client.Client, want *corev1.Secret) (created bool, err error) {
	got := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: want.Namespace, Name: want.Name}}
	op, err := controllerutil.CreateOrUpdate(ctx, c, got, func() error {
		if owner := metav1.GetControllerOf(got); owner != nil {
			return fmt.Errorf("it belongs to %s %s: delete that first", owner.Kind, owner.Name)
		}
		got.Labels, got.Data, got.Type = want.Labels, want.Data, want.Type
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("write Secret %s/%s: %w", want.Namespace, want.Name, err)
	}
	return op == controllerutil.OperationResultCreated, nil
}

// checkNamespaceFree refuses a new VirtualCluster in a namespace that holds
// another: nest-manager would refuse it too, with the same message.
func checkNamespaceFree(ctx context.Context, c client.Client, key types.NamespacedName) error {
	var list nestv1.VirtualClusterList
	if err := c.List(ctx, &list, client.InNamespace(key.Namespace)); err != nil {
		return fmt.Errorf("list virtual clusters in namespace %s: %w", key.Namespace, err)
	}
	for _, vc := range list.Items {
		if vc.Name == key.Name {
			return nil // already there: Create reports it
		}
	}
	if holder := controlplane.NamespaceHolder("", list.Items); holder != "" {
		return &FieldError{Field: FieldNamespace, Value: key.Namespace, Reason: controlplane.NamespaceInUseMessage(key.Namespace, holder, key.Name)}
	}
	return nil
}

// ensureNamespace creates the namespace unless it exists and says whether it
// did; one being deleted it waits out (within ctx) and creates anew.
func ensureNamespace(ctx context.Context, c client.Client, name, createdBy string) (bool, error) {
	for {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{CreatedByLabel: createdBy}}}
		err := c.Create(ctx, ns)
		if err == nil {
			return true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return false, fmt.Errorf("create namespace %s: %w", name, err)
		}
		// A namespace still terminating (nest delete just removed it)
		// refuses new objects: wait until it is gone, and make it anew.
		if err := c.Get(ctx, types.NamespacedName{Name: name}, ns); client.IgnoreNotFound(err) != nil {
			return false, err
		} else if err == nil && ns.DeletionTimestamp == nil {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("namespace %s is still being deleted: %w", name, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// SetShare replaces spec.promoteResources.resources of the VirtualCluster
// with res for cpu, memory, gpu and pods, keeping other resource names. It
// patches with an optimistic lock, so a concurrent change is not
// overwritten, and on a Conflict (nest-manager writing the status between
// the read and the patch is enough) reads again and retries, with
// client-go's retry.DefaultRetry backoff: the new share is computed from
// the fresh read, so a retry is safe.
func SetShare(ctx context.Context, c client.Client, key types.NamespacedName, res corev1.ResourceList) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return setShareOnce(ctx, c, key, res) })
}

// setShareOnce is one read and optimistic-lock patch of SetShare.
func setShareOnce(ctx context.Context, c client.Client, key types.NamespacedName, res corev1.ResourceList) error {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); err != nil {
		return fmt.Errorf("virtual cluster %s: %w", key, err)
	}
	before := vc.DeepCopy()
	next := corev1.ResourceList{}
	for name, q := range vc.Spec.PromoteResources.Resources {
		switch name {
		case corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, GPUResource:
		default:
			next[name] = q
		}
	}
	for name, q := range res {
		next[name] = q
	}
	vc.Spec.PromoteResources.Resources = next
	if err := c.Patch(ctx, vc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("change the share of virtual cluster %s: %w", key, err)
	}
	return nil
}

// PromotePolicy is the one promote policy nest create --nodes and nest
// scale write: count dedicated host nodes, chosen among those whose labels
// match selector ("k=v,k2=v2"; empty: any promotable node). It returns a
// *FieldError for a bad count or selector.
func PromotePolicy(count int, selector string) (nestv1.PromotePolicy, error) {
	if count < 0 || count > MaxPromotedNodes {
		return nestv1.PromotePolicy{}, &FieldError{Field: FieldNodes, Value: strconv.Itoa(count), Reason: fmt.Sprintf("want 0 to %d", MaxPromotedNodes)}
	}
	set, err := labels.ConvertSelectorToLabelsMap(selector)
	if err != nil {
		return nestv1.PromotePolicy{}, &FieldError{Field: FieldNodeSelector, Value: selector, Reason: "want label pairs such as gpu=true,zone=a: " + err.Error()}
	}
	p := nestv1.PromotePolicy{NodeCount: int32(count)}
	if len(set) > 0 {
		p.LabelSelector.MatchLabels = set
	}
	return p, nil
}

// MaxPromotedNodes is the most nodes one promote policy may ask for, as the
// CRD bounds nodeCount.
const MaxPromotedNodes = 1000

// SetPromotePolicy makes p the VirtualCluster's only promote policy, or
// removes every promote policy when p asks for no node. Node assignment
// then claims or releases nodes (docs/dedicated-nodes.md). It patches with
// an optimistic lock, as SetShare does.
func SetPromotePolicy(ctx context.Context, c client.Client, key types.NamespacedName, p nestv1.PromotePolicy) error {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); err != nil {
		return fmt.Errorf("virtual cluster %s: %w", key, err)
	}
	before := vc.DeepCopy()
	vc.Spec.PromotePolicies = nil
	if p.NodeCount > 0 {
		vc.Spec.PromotePolicies = []nestv1.PromotePolicy{p}
	}
	if err := c.Patch(ctx, vc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("change the dedicated nodes of virtual cluster %s: %w", key, err)
	}
	return nil
}

// FieldKubernetesVersion is the version an upgrade moves to.
const FieldKubernetesVersion = "kubernetesVersion"

// Upgrade sets spec.kubernetesVersion of the VirtualCluster to to, which
// the controller then rolls out (docs/upgrades.md), and returns the
// version its control plane runs. A move version.CheckUpgrade refuses
// (a downgrade, a skipped minor, an unsupported version) returns a
// *FieldError and changes nothing; asking for the version already asked
// for changes nothing either. It patches with an optimistic lock and
// retries on a conflict, as SetShare does.
func Upgrade(ctx context.Context, c client.Client, key types.NamespacedName, to string) (from string, err error) {
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vc := &nestv1.VirtualCluster{}
		if err := c.Get(ctx, key, vc); err != nil {
			return fmt.Errorf("virtual cluster %s: %w", key, err)
		}
		from = controlplane.RunningVersion(vc)
		if err := version.CheckUpgrade(from, to); err != nil {
			return &FieldError{Field: FieldKubernetesVersion, Value: to, Reason: err.Error()}
		}
		if vc.Spec.KubernetesVersion == to {
			return nil
		}
		before := vc.DeepCopy()
		vc.Spec.KubernetesVersion = to
		if err := c.Patch(ctx, vc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("upgrade virtual cluster %s: %w", key, err)
		}
		return nil
	})
	return from, err
}

// ErrNoSnapshotSchedule is RequestSnapshot's refusal of a VirtualCluster
// without spec.snapshots: a request has nowhere to go.
var ErrNoSnapshotSchedule = errors.New("it has no snapshot schedule")

// RequestSnapshot asks nest-manager for a snapshot of the VirtualCluster
// now, to its schedule's repository (nestv1.AnnotationSnapshotRequested),
// and returns the request's value, the time in RFC 3339 with nanoseconds,
// which status.snapshots.lastRequest shows once it is served. A
// VirtualCluster with no spec.snapshots is refused with
// ErrNoSnapshotSchedule, the message naming the field.
func RequestSnapshot(ctx context.Context, c client.Client, key types.NamespacedName, now time.Time) (string, error) {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); err != nil {
		return "", fmt.Errorf("virtual cluster %s: %w", key, err)
	}
	if vc.Spec.Snapshots == nil {
		return "", fmt.Errorf("virtual cluster %s: %w: set spec.snapshots (its repository and recipients), or use nest snapshot create --to", key, ErrNoSnapshotSchedule)
	}
	value := now.UTC().Format(time.RFC3339Nano)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, nestv1.AnnotationSnapshotRequested, value)
	if err := c.Patch(ctx, vc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return "", fmt.Errorf("request a snapshot of %s: %w", key, err)
	}
	return value, nil
}

// VersionColumn is the version a list shows for vc (nest list, the
// dashboard): the one its control plane runs, and while it moves to
// another, FROM->TO.
func VersionColumn(vc *nestv1.VirtualCluster) string {
	from, to := controlplane.RunningVersion(vc), controlplane.KubernetesVersion(vc)
	if from == to {
		return to
	}
	return from + "->" + to
}

// ErrNoKubeconfig is returned by ReadKubeconfig while the operator has not
// written the kubeconfig yet.
var ErrNoKubeconfig = errors.New("no kubeconfig yet")

// ReadKubeconfig returns the tenant admin kubeconfig of the VirtualCluster:
// the external one from spec.kubeconfig, or with internal the in-cluster one
// from its kubeconfig Secret.
func ReadKubeconfig(ctx context.Context, c client.Client, key types.NamespacedName, internal bool) ([]byte, error) {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); err != nil {
		return nil, fmt.Errorf("virtual cluster %s: %w", key, err)
	}
	if internal {
		var s corev1.Secret
		if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: controlplane.NamesOf(vc).KubeconfigSecret()}, &s); err != nil {
			return nil, err
		}
		return s.Data[controlplane.KubeconfigInternalKey], nil
	}
	if vc.Spec.Kubeconfig == "" {
		return nil, fmt.Errorf("virtual cluster %s has %w (phase %q): wait until it is Ready", key, ErrNoKubeconfig, vc.Status.Phase)
	}
	return base64.StdEncoding.DecodeString(vc.Spec.Kubeconfig)
}

// Delete deletes the VirtualCluster; nest-manager then removes its host
// objects, tenant data included.
func Delete(ctx context.Context, c client.Client, key types.NamespacedName) error {
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	if err := c.Delete(ctx, vc); err != nil {
		return fmt.Errorf("delete virtual cluster %s: %w", key, err)
	}
	return nil
}

// DeleteOwnNamespace removes the namespace if a Nest tool made it
// (CreatedByLabel) and no virtual cluster lives there any more.
func DeleteOwnNamespace(ctx context.Context, c client.Client, name string) error {
	var ns corev1.Namespace
	if err := c.Get(ctx, types.NamespacedName{Name: name}, &ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if by := ns.Labels[CreatedByLabel]; by != CreatedByCLI && by != CreatedByDashboard {
		return nil
	}
	var rest nestv1.VirtualClusterList
	if err := c.List(ctx, &rest, client.InNamespace(name)); err != nil || len(rest.Items) > 0 {
		return err
	}
	return client.IgnoreNotFound(c.Delete(ctx, &ns))
}

// SetMemberGrant makes res the VirtualCluster's grant on the member cluster
// member (spec.members), adding the grant or replacing its resources; an
// empty res removes the grant. It patches with an optimistic lock, as
// SetShare does. nest-manager then sets the grant up in the member
// (docs/member-clusters.md).
func SetMemberGrant(ctx context.Context, c client.Client, key types.NamespacedName, member string, res corev1.ResourceList) error {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); err != nil {
		return fmt.Errorf("virtual cluster %s: %w", key, err)
	}
	before := vc.DeepCopy()
	vc.Spec.Members = slices.DeleteFunc(vc.Spec.Members, func(g nestv1.MemberGrant) bool { return g.Name == member })
	if len(res) > 0 {
		vc.Spec.Members = append(vc.Spec.Members, nestv1.MemberGrant{Name: member, Resources: res})
	} else if len(vc.Spec.Members) == len(before.Spec.Members) {
		return fmt.Errorf("virtual cluster %s has no grant on member cluster %s", key, member)
	}
	if err := c.Patch(ctx, vc, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("change the grant of virtual cluster %s on member cluster %s: %w", key, member, err)
	}
	return nil
}

// RequestRotation asks nest-manager to issue every leaf certificate of the
// VirtualCluster anew now (nestv1.AnnotationRotateCertificates) and returns
// the request's value, the time in RFC 3339 with nanoseconds, which
// status.certificates.lastRotation shows once it is served.
func RequestRotation(ctx context.Context, c client.Client, key types.NamespacedName, now time.Time) (string, error) {
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	value := now.UTC().Format(time.RFC3339Nano)
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, nestv1.AnnotationRotateCertificates, value)
	if err := c.Patch(ctx, vc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return "", fmt.Errorf("request a certificate rotation of %s: %w", key, err)
	}
	return value, nil
}

// RotationDone reports whether the rotation request of the VirtualCluster
// key is over: served (status.certificates.lastRotation), every leaf
// certificate of its Secrets issued since, and its control-plane pods all
// restarted onto them and ready. When it is not, why says what is left.
func RotationDone(ctx context.Context, c client.Client, key types.NamespacedName, request string) (done bool, why string, err error) {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); err != nil {
		return false, "", err
	}
	st := vc.Status.Certificates
	if st == nil || st.LastRotation == nil || st.LastRotation.Request != request {
		return false, "nest-manager has not served the request yet", nil
	}
	n := controlplane.NamesOf(vc)
	var secrets []corev1.Secret
	for _, name := range n.Secrets() {
		s := corev1.Secret{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: name}, &s); err != nil {
			return false, "", client.IgnoreNotFound(err)
		}
		secrets = append(secrets, s)
	}
	certs, err := controlplane.Certificates(secrets, time.Now())
	if err != nil {
		return false, "", err
	}
	for _, cert := range certs {
		if !cert.CA && cert.IssuedAt.Before(st.LastRotation.Time.Time) {
			return false, fmt.Sprintf("%s %s is from before the rotation", cert.Secret, cert.Key), nil
		}
	}
	sts := &appsv1.StatefulSet{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: n.StatefulSet()}, sts); err != nil {
		return false, "", err
	}
	replicas := ptr.Deref(sts.Spec.Replicas, 1)
	if sts.Status.ObservedGeneration < sts.Generation || sts.Status.UpdateRevision != sts.Status.CurrentRevision ||
		sts.Status.UpdatedReplicas != replicas || sts.Status.ReadyReplicas != replicas {
		return false, fmt.Sprintf("control-plane pods restarting: %d of %d updated, %d ready", sts.Status.UpdatedReplicas, replicas, sts.Status.ReadyReplicas), nil
	}
	return true, "", nil
}

// RequestCARotation asks nest-manager to rotate the VirtualCluster's CAs
// (nestv1.AnnotationRotateCA): authorities (empty: all), the old CAs
// trusted for grace once every leaf is new (nil: the default). It returns
// the request, the time in RFC 3339 with nanoseconds, which
// status.certificates.caRotation shows once it started. The request is
// checked as nest-manager checks it, and refused here with the same
// error.
func RequestCARotation(ctx context.Context, c client.Client, key types.NamespacedName, authorities []nestv1.CAName, grace *time.Duration, now time.Time) (string, error) {
	req := nestv1.CARotationRequest{Request: now.UTC().Format(time.RFC3339Nano), Authorities: authorities}
	if grace != nil {
		req.Grace = &metav1.Duration{Duration: *grace}
	}
	value, err := json.Marshal(req)
	if err != nil {
		return "", err
	}
	if _, err := controlplane.ParseCARotationRequest(string(value), now); err != nil {
		return "", fmt.Errorf("the CA rotation asked for (--ca, --grace): %w", err)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{nestv1.AnnotationRotateCA: string(value)}}})
	if err != nil {
		return "", err
	}
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	if err := c.Patch(ctx, vc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return "", fmt.Errorf("request a CA rotation of %s: %w", key, err)
	}
	return req.Request, nil
}

// FinishCARotation ends the grace of the VirtualCluster's CA rotation
// under way (nestv1.AnnotationFinishCARotation): the old CAs leave every
// bundle as soon as it reaches phase Grace. It returns the rotation's
// request, and fails when no rotation is under way.
func FinishCARotation(ctx context.Context, c client.Client, key types.NamespacedName) (string, error) {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); err != nil {
		return "", fmt.Errorf("virtual cluster %s: %w", key, err)
	}
	st := vc.Status.Certificates
	if st == nil || st.CARotation == nil {
		return "", fmt.Errorf("virtual cluster %s has no CA rotation under way to finish: nest certs check shows the last one", key)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, nestv1.AnnotationFinishCARotation, st.CARotation.Request)
	if err := c.Patch(ctx, vc, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return "", fmt.Errorf("finish the CA rotation of %s: %w", key, err)
	}
	return st.CARotation.Request, nil
}

// caPhaseOrder ranks the phases of a CA rotation.
var caPhaseOrder = []nestv1.CARotationPhase{nestv1.CAPhaseTrust, nestv1.CAPhaseReissue, nestv1.CAPhaseGrace, nestv1.CAPhaseRetire, nestv1.CAPhaseDone}

// CARotationReached reports whether the CA rotation request of the
// VirtualCluster key has reached phase want (nestv1.CAPhaseGrace: every
// leaf is issued from the new CAs; nestv1.CAPhaseDone: the old CAs are
// gone), and the phase it is in.
func CARotationReached(ctx context.Context, c client.Client, key types.NamespacedName, request string, want nestv1.CARotationPhase) (bool, nestv1.CARotationPhase, error) {
	vc := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, key, vc); err != nil {
		return false, "", err
	}
	st := vc.Status.Certificates
	var phase nestv1.CARotationPhase
	switch {
	case st != nil && st.LastCARotation != nil && st.LastCARotation.Request == request:
		phase = nestv1.CAPhaseDone
	case st != nil && st.CARotation != nil && st.CARotation.Request == request:
		phase = st.CARotation.Phase
	default:
		return false, "", nil
	}
	return slices.Index(caPhaseOrder, phase) >= slices.Index(caPhaseOrder, want), phase, nil
}
