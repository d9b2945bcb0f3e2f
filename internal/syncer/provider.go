package syncer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
	"github.com/nestdev/nest/internal/syncer/kinds/service"
	"github.com/nestdev/nest/internal/syncer/kinds/serviceaccounttoken"
	"github.com/nestdev/nest/internal/syncer/tenantmsg"
)

// podProvider is the virtual-kubelet pod lifecycle handler: it runs tenant
// pods as host pods and reports their status back.
type podProvider struct {
	tr       Translator
	metadata contract.MetadataAllowList
	security *PodSecurity
	capacity *admission
	host     kubernetes.Interface
	hostCfg  *rest.Config
	tenant   kubernetes.Interface
	objects  *objectSyncer
	tokens   *serviceaccounttoken.Issuer
	recorder record.EventRecorder
	// services lists the tenant Services of a namespace, for pods' service
	// variables.
	services func(namespace string) []service.Address

	tenantPods corelisters.PodLister
	hostPods   corelisters.PodNamespaceLister

	mu     sync.Mutex
	notify func(*corev1.Pod)
	// gate holds pods over a member grant (member syncers only; nil on
	// the host, where such a pod is rejected), and retryHeld puts a held
	// pod's key back on the held queue.
	gate      *gatekeeper
	retryHeld func(key string)
	// deleting holds host pods this syncer deleted, by name, so their
	// disappearance finishes a tenant deletion instead of replacing the pod.
	deleting sync.Map
	// tenantDeletes deletes tenant pods whose host pod is gone, keyed
	// tenantDeleteKey, so the informer handler that sees the host pod go
	// makes no API call and a failed delete is retried.
	tenantDeletes *kindsync.Syncer
	// policyLabels are the labels the tenant's NetworkPolicies call for on
	// a pod's host pod (kinds/networkpolicy); nil in member syncers.
	policyLabels func(*corev1.Pod) map[string]string
	// nodeNetwork is the node network annotation of a virtual node's
	// hostNetwork pods (nodenetwork.go); nil without Options.NodeNetwork.
	nodeNetwork func(node string) (string, error)
	// member is the member cluster a member syncer runs pods in, "" on
	// the host: what the tenant is told of a full quota names its grant.
	member string
}

// CreatePod checks the tenant pod against the Pod Security level,
// translates it, admits it to the tenant's share of the host, copies what it
// references, issues its tokens and creates the host pod. A refused pod never
// reaches the host; the error becomes the tenant pod's status message and an
// event, so it names the tenant's pod and fields only (tell): what the host
// said goes to the log. A pod that does not fit the node is rejected as a
// kubelet rejects it: it ends Failed, so its controller replaces it. A
// finished pod is never started again.
func (p *podProvider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	pt, err := p.createPod(ctx, pod)
	var host *corev1.Pod
	if pt != nil {
		host = pt.Pod
	}
	return p.tell(ctx, pod, host, err)
}

// createPod is CreatePod with the error in the host's words, and the
// translation, nil when translation did not get that far.
func (p *podProvider) createPod(ctx context.Context, pod *corev1.Pod) (*PodTranslation, error) {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil, nil
	}
	if err := p.security.Check(pod); err != nil {
		return nil, refused(err)
	}
	pt, err := p.translate(pod, p.services(pod.Namespace))
	if err != nil {
		return nil, refused(err)
	}
	if err := p.withNodeNetwork(pod, pt.Pod); err != nil {
		return pt, err
	}
	if err := p.checkClaims(ctx, pod, pt.Claims); err != nil {
		return pt, err
	}
	if err := p.capacity.admit(pod); err != nil {
		var r *Rejection
		switch {
		case errors.As(err, &r) && p.gate != nil:
			p.holdPod(pod, r, p.retryHeld)
			return pt, nil
		case errors.As(err, &r):
			p.reject(pod, r)
			return pt, nil
		}
		return pt, refused(err)
	}
	if p.gate != nil {
		p.gate.release(pod.Namespace + "/" + pod.Name)
	}
	// virtual-kubelet fails a pod with restartPolicy Never on the first
	// error CreatePod returns, so a passing one (a race with the orphan
	// syncer over the token Secret, a conflict, an earlier host pod still
	// going) is retried here first.
	err = retry.OnError(createBackoff, func(err error) bool { return !errdefs.IsInvalidInput(err) && ctx.Err() == nil },
		func() error { return p.start(ctx, pod, pt) })
	if p.gate != nil && isQuotaExceeded(err) {
		// The member's own quota counts what the gatekeeper does not (its
		// LimitRange's default requests, pods still terminating there):
		// the pod waits for room as one over the grant does.
		p.capacity.forget(pod.UID)
		p.holdPod(pod, &Rejection{Reason: ReasonQuotaExceeded, Message: p.tell(ctx, pod, pt.Pod, err).Error()}, p.retryHeld)
		return pt, nil
	}
	if p.gate != nil && isWebhookUnavailable(err) {
		// With the injector's failurePolicy Fail, a member that cannot
		// reach it refuses the pod; a pod with restartPolicy Never would
		// fail for good if this were an error.
		p.capacity.forget(pod.UID)
		p.holdPod(pod, &Rejection{Reason: ReasonInjectorUnavailable, Message: p.tell(ctx, pod, pt.Pod, err).Error()}, p.retryHeld)
		return pt, nil
	}
	if err == nil {
		for _, w := range pt.Warnings {
			p.recorder.Event(pod, corev1.EventTypeWarning, w.Reason, w.Message)
		}
	}
	return pt, err
}

// checkClaims refuses a pod whose claims are not backed by host claims the
// virtual node made for them (kinds/persistentvolumeclaim): a claim bound
// to a volume the tenant made itself, one of another StorageClass, or one
// not bound yet. A host claim is the claim's only if it carries the
// claim's namespace, name and UID.
func (p *podProvider) checkClaims(ctx context.Context, pod *corev1.Pod, claims []string) error {
	for _, name := range claims {
		tenantClaim, err := p.tenant.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return refused(fmt.Errorf("persistentVolumeClaim %s does not exist: create it first", name))
		}
		if err != nil {
			return err
		}
		hostName := contract.HostName(p.tr.VirtualCluster, pod.Namespace, name)
		host, err := p.host.CoreV1().PersistentVolumeClaims(p.tr.HostNamespace).Get(ctx, hostName, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err != nil || !contract.IsCopyOfUID(host, p.tr.VirtualCluster, pod.Namespace, name, string(tenantClaim.UID)) {
			return refused(fmt.Errorf("persistentVolumeClaim %s has no volume of the virtual node: claims of a StorageClass the virtual node offers get one once bound; a volume made in the tenant cluster cannot be mounted", name))
		}
	}
	return nil
}

// isQuotaExceeded reports whether err is an API server's refusal of a
// create by a ResourceQuota.
func isQuotaExceeded(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota")
}

// isWebhookUnavailable reports whether the API server could not call an
// admission webhook (kube-apiserver answers 500 "failed calling webhook").
func isWebhookUnavailable(err error) bool {
	return apierrors.IsInternalError(err) && strings.Contains(err.Error(), "failed calling webhook")
}

// createBackoff paces CreatePod's retries: about 1.5 s in all.
var createBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 5}

// start copies what an admitted pod references, issues its tokens and
// creates its host pod; each step may be repeated.
func (p *podProvider) start(ctx context.Context, pod *corev1.Pod, pt *PodTranslation) error {
	if err := p.objects.ensureFor(ctx, pod.Namespace, pt); err != nil {
		return err
	}
	if err := p.ensureNodeDisk(ctx, pt.NodeDiskClaim); err != nil {
		return err
	}
	// Tokens are requested before the pod exists, so a tenant that refuses
	// them leaves nothing on the host.
	var tokenSecret *corev1.Secret
	undo := func() {}
	if pt.UsesTokenSecret {
		var err error
		if tokenSecret, err = p.tokens.SecretFor(ctx, p.tr.VirtualCluster, p.tr.HostNamespace, pod, pt.Pod.Name, pt.Tokens, pt.Identity); err != nil {
			return err
		}
		if undo, err = p.objects.budget.Reserve(hostcopy.KindSecret, tokenSecret, hostcopy.IdentitySize(tokenSecret.Data)); err != nil {
			return tenantmsg.Wrap(err, "the pod's labels and annotations for its downward API files")
		}
	}
	host, err := p.createOrAdopt(ctx, pod, pt.Pod)
	if err == nil && tokenSecret != nil {
		// Written right after the pod, owned by it: the host kubelet mounts it
		// once it gets to the pod, and the garbage collector removes it with
		// the pod.
		err = p.writeTokenSecret(ctx, tokenSecret, host)
	}
	if err != nil {
		undo()
	}
	return err
}

// ensureNodeDisk creates the claim of a virtual node's disk unless it
// exists; claim "" is none. The claim is never updated: its size is fixed
// when it is made. It looks first: a full storage quota refuses a create
// before the name is found taken.
func (p *podProvider) ensureNodeDisk(ctx context.Context, claim string) error {
	if claim == "" {
		return nil
	}
	claims := p.host.CoreV1().PersistentVolumeClaims(p.tr.HostNamespace)
	existing, err := claims.Get(ctx, claim, metav1.GetOptions{})
	if err == nil {
		return notTenantClaim(existing)
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	_, err = claims.Create(ctx, p.tr.NodeDiskClaimFor(claim), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if existing, err = claims.Get(ctx, claim, metav1.GetOptions{}); err == nil {
			return notTenantClaim(existing)
		}
		return err
	}
	if err != nil {
		return tenantmsg.Wrap(fmt.Errorf("create the virtual node's disk %s: %w", claim, err), "the virtual node's disk, where hostPath volumes live, could not be made")
	}
	klog.FromContext(ctx).Info("Created the virtual node's disk", "claim", klog.KRef(p.tr.HostNamespace, claim))
	return nil
}

// notTenantClaim refuses to take a host claim that stands for a tenant
// claim (kinds/persistentvolumeclaim) as a virtual node's disk: a tenant
// namespace "node-disk" gives its claims the names disks have.
func notTenantClaim(c *corev1.PersistentVolumeClaim) error {
	if ns, name, ok := contract.TenantKey(c.Annotations); ok {
		return errdefs.AsInvalidInput(tenantmsg.WithText(
			fmt.Errorf("the virtual node's disk %s cannot be made: the tenant claim %s/%s holds its host name; delete or rename that claim", c.Name, ns, name),
			fmt.Sprintf("the virtual node's disk, where hostPath volumes live, cannot be made: the claim %s/%s holds its name on the host; delete or rename that claim", ns, name)))
	}
	return nil
}

// deleteNodeDisk deletes the disk of a virtual node the count no longer
// has, as a node's disk goes with the node, so the host's storage and the
// object quota's claim count agree with the count again. Only this virtual
// cluster's claim is deleted; the host's PVC protection keeps it until the
// last host pod that mounts it is gone.
func (p *podProvider) deleteNodeDisk(ctx context.Context, node string) error {
	name := contract.NodeDiskClaim(p.tr.VirtualCluster, node)
	claims := p.host.CoreV1().PersistentVolumeClaims(p.tr.HostNamespace)
	c, err := claims.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the disk %s of removed virtual node %s: %w", name, node, err)
	}
	if _, _, tenants := contract.TenantKey(c.Annotations); tenants || c.Labels[contract.LabelTenantOf] != p.tr.VirtualCluster {
		return nil
	}
	err = claims.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &c.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the disk %s of removed virtual node %s: %w", name, node, err)
	}
	klog.FromContext(ctx).Info("Deleted the disk of a virtual node beyond the count", "node", node, "claim", klog.KRef(p.tr.HostNamespace, name))
	return nil
}

// refused marks err as the tenant's to fix: the pod controller reports it on
// the tenant pod. Its text is the tenant's already: it names the pod's
// fields, and what the tenant wrote in them.
func refused(err error) error {
	return errdefs.AsInvalidInput(tenantmsg.AsIs(fmt.Errorf("refused by the virtual node: %w", err)))
}

// createOrAdopt creates the host pod, or returns the one that already runs
// this tenant pod (a restarted syncer, a retried create). A stale host pod,
// left by an earlier tenant pod of the same name, is deleted and waited for.
// A host pod under the name that is not this tenant pod's is never touched.
func (p *podProvider) createOrAdopt(ctx context.Context, pod, want *corev1.Pod) (*corev1.Pod, error) {
	pods := p.host.CoreV1().Pods(p.tr.HostNamespace)
	created, err := pods.Create(ctx, want, metav1.CreateOptions{})
	if err == nil {
		klog.FromContext(ctx).V(2).Info("Created host pod", "pod", klog.KObj(pod), "hostPod", klog.KObj(created))
		return created, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, tenantmsg.Wrap(fmt.Errorf("create host pod %s/%s: %w", p.tr.HostNamespace, want.Name, err), "the host did not create the pod")
	}
	existing, err := pods.Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		return nil, tenantmsg.Wrap(fmt.Errorf("get host pod %s: %w", want.Name, err), "the pod could not be read on the host")
	}
	if !contract.IsCopyOf(existing, p.tr.VirtualCluster, pod.Namespace, pod.Name) {
		return nil, contract.NotOurCopy("pod", existing, pod.Namespace+"/"+pod.Name)
	}
	if existing.Annotations[contract.AnnotationTenantUID] == string(pod.UID) {
		return existing, nil
	}
	if existing.DeletionTimestamp == nil {
		p.deleting.Store(want.Name, true)
		opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &existing.UID}}
		if err := pods.Delete(ctx, want.Name, opts); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("delete stale host pod %s: %w", want.Name, err)
		}
	}
	return nil, tenantmsg.WithText(fmt.Errorf("host pod %s of an earlier pod named %s is still terminating", want.Name, klog.KObj(pod)),
		fmt.Sprintf("an earlier pod named %s is still stopping on the virtual node: this one starts once it is gone", klog.KObj(pod)))
}

// writeTokenSecret creates the pod's token Secret, owned by the host pod, or
// renews an existing one, if that is the token Secret of the same tenant pod.
func (p *podProvider) writeTokenSecret(ctx context.Context, s *corev1.Secret, owner *corev1.Pod) error {
	s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID}}
	secrets := hostcopy.Copies[*corev1.Secret]{
		Kind: "Secret", Client: p.host.CoreV1().Secrets(p.tr.HostNamespace),
		// Never cached: a token Secret is written once per host pod, and the
		// live object is what matters for the ownership check.
		Cached: func(name string) (*corev1.Secret, error) {
			return nil, apierrors.NewNotFound(corev1.Resource("secrets"), name)
		},
		Differs: func(_, _ *corev1.Secret) bool { return true },
		Merged: func(have, want *corev1.Secret) *corev1.Secret {
			upd := have.DeepCopy()
			upd.Data, upd.Annotations, upd.Labels, upd.OwnerReferences = want.Data, want.Annotations, want.Labels, want.OwnerReferences
			return upd
		},
	}
	if err := secrets.Apply(ctx, s); err != nil {
		return tenantmsg.Wrap(fmt.Errorf("write token Secret %s: %w", s.Name, err), "the pod's service account tokens could not be stored on the host")
	}
	return nil
}

// ReasonEphemeralContainerRefused is the tenant pod's Warning event for an
// ephemeral container (kubectl debug) the virtual node cannot run.
const ReasonEphemeralContainerRefused = "EphemeralContainerRefused"

// ReasonUpdateRefused is the tenant pod's Warning event for an update the
// virtual node cannot carry to the host pod.
const ReasonUpdateRefused = "UpdateRefused"

// UpdatePod carries the fields a pod update may change (labels, annotations,
// images, active deadline, new ephemeral containers, resized resources) to
// the host pod.
//
// virtual-kubelet marks a pod Failed (restartPolicy Never) or Pending for
// any error UpdatePod returns, while its host pod runs on. So an update the
// virtual node refuses is a Warning event on the tenant pod, never an
// error, and a passing error (a conflict with a stale cache) is retried
// first with the host pod read afresh, as CreatePod does.
func (p *podProvider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	pt := p.translateUpdate(pod)
	if pt == nil {
		return nil
	}
	read := p.hostPods.Get
	// A terminal error (the host pod is not this pod's copy) stays as it is.
	err := retry.OnError(createBackoff, func(err error) bool {
		return !errdefs.IsInvalidInput(err) && !kindsync.IsTerminal(err) && ctx.Err() == nil
	},
		func() error {
			err := p.updateHostPod(ctx, pod, pt, read)
			read = func(name string) (*corev1.Pod, error) {
				return p.host.CoreV1().Pods(p.tr.HostNamespace).Get(ctx, name, metav1.GetOptions{})
			}
			return err
		})
	if errdefs.IsInvalidInput(err) {
		p.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonUpdateRefused, "update refused by the virtual node: %v", p.tell(ctx, pod, pt.Pod, err))
		return nil
	}
	return p.tell(ctx, pod, pt.Pod, err)
}

// translate is TranslatePod with the labels the tenant's NetworkPolicies
// call for on the host pod.
func (p *podProvider) translate(pod *corev1.Pod, services []service.Address) (*PodTranslation, error) {
	pt, err := p.tr.TranslatePod(pod, p.metadata, services)
	if err == nil && p.policyLabels != nil {
		maps.Copy(pt.Pod.Labels, p.policyLabels(pod))
	}
	return pt, err
}

// translateUpdate translates an updated tenant pod. The pod was admitted
// before its update, so what the virtual node refuses now can only be an
// ephemeral container it cannot run (kubectl debug): that one is refused,
// with an event, and the update goes on without the pod's new ephemeral
// containers. It returns nil, after an event, when even that is refused.
func (p *podProvider) translateUpdate(pod *corev1.Pod) *PodTranslation {
	// Service variables are fixed when the host pod is made: nil.
	pt, err := p.translate(pod, nil)
	if err == nil {
		return pt
	}
	without := pod.DeepCopy()
	without.Spec.EphemeralContainers = nil
	// Translation's refusals name the pod's fields only.
	if pt, errWithout := p.translate(without, nil); errWithout == nil {
		p.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonEphemeralContainerRefused, "refused by the virtual node: %v", err)
		return pt
	}
	p.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonUpdateRefused, "update refused by the virtual node: %v", err)
	return nil
}

// updateHostPod makes one attempt at carrying pt to the host pod, which
// read returns.
func (p *podProvider) updateHostPod(ctx context.Context, pod *corev1.Pod, pt *PodTranslation, read func(string) (*corev1.Pod, error)) error {
	host, err := read(pt.Pod.Name)
	if err != nil {
		return err
	}
	if !p.isHostPodOf(host, pod) {
		return contract.NotOurCopy("pod", host, pod.Namespace+"/"+pod.Name)
	}
	if len(pt.EphemeralContainers) > len(host.Spec.EphemeralContainers) {
		updated, err := p.addEphemeralContainers(ctx, pod, pt, host)
		switch {
		case errdefs.IsInvalidInput(err):
			// Refused: the tenant hears why, and the pod's other changes
			// still reach the host.
			p.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonEphemeralContainerRefused, "refused by the virtual node: %v", p.tell(ctx, pod, host, err))
		case err != nil:
			return err
		default:
			host = updated
		}
	}
	if err := p.refreshIdentity(ctx, pt); errdefs.IsInvalidInput(err) {
		// Past the object budget: the downward API files keep their
		// values, and the pod's other changes still reach the host.
		p.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonUpdateRefused, "update refused by the virtual node: %v", p.tell(ctx, pod, host, err))
	} else if err != nil {
		return err
	}
	if resized := resizedContainers(host, pt.Pod); resized != nil {
		if host, err = p.host.CoreV1().Pods(p.tr.HostNamespace).UpdateResize(ctx, host.Name, resized, metav1.UpdateOptions{}); err != nil {
			return tenantmsg.Wrap(fmt.Errorf("resize host pod %s: %w", resized.Name, err), "the host did not resize the pod")
		}
	}
	upd := host.DeepCopy()
	upd.Labels, upd.Annotations = pt.Pod.Labels, keepNodeNetwork(pt.Pod.Annotations, host)
	// A tenant pod adopted or orphaned since, or a host pod made before
	// host pods had owners.
	upd.OwnerReferences = pt.Pod.OwnerReferences
	upd.Spec.ActiveDeadlineSeconds = pt.Pod.Spec.ActiveDeadlineSeconds
	copyImages(upd.Spec.InitContainers, pt.Pod.Spec.InitContainers)
	copyImages(upd.Spec.Containers, pt.Pod.Spec.Containers)
	if _, err := p.host.CoreV1().Pods(p.tr.HostNamespace).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		return tenantmsg.Wrap(fmt.Errorf("update host pod %s: %w", upd.Name, err), "the host did not update the pod")
	}
	return nil
}

// addEphemeralContainers gives the host pod the tenant pod's ephemeral
// containers (kubectl debug), once they pass the same checks as the pod:
// the tenant may only add them, so the host's are a prefix of the tenant's.
// It returns the updated host pod.
func (p *podProvider) addEphemeralContainers(ctx context.Context, pod *corev1.Pod, pt *PodTranslation, host *corev1.Pod) (*corev1.Pod, error) {
	if err := p.security.Check(pod); err != nil {
		return nil, errdefs.AsInvalidInput(tenantmsg.AsIs(err))
	}
	if err := p.objects.ensureFor(ctx, pod.Namespace, pt); err != nil {
		return nil, err
	}
	upd := host.DeepCopy()
	upd.Spec.EphemeralContainers = pt.EphemeralContainers
	updated, err := p.host.CoreV1().Pods(p.tr.HostNamespace).UpdateEphemeralContainers(ctx, upd.Name, upd, metav1.UpdateOptions{})
	if err != nil {
		return nil, tenantmsg.Wrap(fmt.Errorf("add ephemeral containers to host pod %s: %w", upd.Name, err), "the host did not add the ephemeral containers")
	}
	// kubectl debug --profile=sysadmin asks for privileged.
	if w, ok := p.tr.confinedWarning(pod); ok {
		p.recorder.Event(pod, corev1.EventTypeWarning, w.Reason, w.Message)
	}
	return updated, nil
}

// refreshIdentity brings the labels and annotations in the pod's token
// Secret up to date, so downward API files that show them change as the
// kubelet would change them.
func (p *podProvider) refreshIdentity(ctx context.Context, pt *PodTranslation) error {
	if !pt.UsesTokenSecret {
		return nil
	}
	secret, err := p.objects.hostSecrets.Get(contract.TokenSecretName(pt.Pod.Name))
	if err != nil {
		// The token refresher writes a missing Secret whole.
		return nil
	}
	upd := secret.DeepCopy()
	if upd.Data == nil {
		upd.Data = map[string][]byte{}
	}
	changed := false
	for k, v := range pt.Identity {
		if string(upd.Data[k]) != v {
			upd.Data[k], changed = []byte(v), true
		}
	}
	if !changed {
		return nil
	}
	undo, err := p.objects.budget.Reserve(hostcopy.KindSecret, upd, hostcopy.IdentitySize(upd.Data))
	if err != nil {
		return errdefs.AsInvalidInput(tenantmsg.Wrap(err, "the pod's labels and annotations for its downward API files"))
	}
	if _, err := p.host.CoreV1().Secrets(p.tr.HostNamespace).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		undo()
		return fmt.Errorf("update the labels and annotations in token Secret %s: %w", upd.Name, err)
	}
	return nil
}

// resizedContainers is the host pod with the translated resources of want,
// for its resize subresource, or nil when no container's resources changed.
// Resources the host added (LimitRange defaults) and the tenant does not
// state are kept: a resize may not remove them.
func resizedContainers(host, want *corev1.Pod) *corev1.Pod {
	out := host.DeepCopy()
	changed := false
	for i := range out.Spec.Containers {
		c := &out.Spec.Containers[i]
		if i >= len(want.Spec.Containers) || want.Spec.Containers[i].Name != c.Name {
			continue
		}
		w := want.Spec.Containers[i].Resources
		if !covers(c.Resources.Requests, w.Requests) || !covers(c.Resources.Limits, w.Limits) {
			changed = true
			mergeResources(&c.Resources.Requests, w.Requests)
			mergeResources(&c.Resources.Limits, w.Limits)
		}
	}
	if !changed {
		return nil
	}
	return out
}

// covers reports whether have holds every quantity of want, equal.
func covers(have, want corev1.ResourceList) bool {
	for name, q := range want {
		if h, ok := have[name]; !ok || !h.Equal(q) {
			return false
		}
	}
	return true
}

func mergeResources(dst *corev1.ResourceList, src corev1.ResourceList) {
	if len(src) > 0 && *dst == nil {
		*dst = corev1.ResourceList{}
	}
	for name, q := range src {
		(*dst)[name] = q.DeepCopy()
	}
}

func copyImages(dst, src []corev1.Container) {
	for i := range dst {
		if i < len(src) && dst[i].Name == src[i].Name {
			dst[i].Image = src[i].Image
		}
	}
}

// DeletePod deletes the host pod with the tenant's grace period, cut to the
// virtual node's bound (Translator.GracePeriod); when the tenant pod is
// already gone from the tenant API (a force delete), with
// ForcedGracePeriodSeconds, which also shortens a deletion in progress. The
// tenant pod is finished once the host pod is gone (see hostPodDeleted). Only a host
// pod of this tenant pod is deleted: when the informer cache does not show
// one, the live object is checked, and a host pod under the name that is not
// this tenant pod's is left alone.
func (p *podProvider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	// virtual-kubelet records the error on the tenant pod.
	return p.tell(ctx, pod, nil, p.deletePod(ctx, pod))
}

// deletePod is DeletePod with the error in the host's words.
func (p *podProvider) deletePod(ctx context.Context, pod *corev1.Pod) error {
	name := contract.HostName(p.tr.VirtualCluster, pod.Namespace, pod.Name)
	pods := p.host.CoreV1().Pods(p.tr.HostNamespace)
	host, err := p.hostPods.Get(name)
	if apierrors.IsNotFound(err) || (err == nil && !p.isHostPodOf(host, pod)) {
		host, err = pods.Get(ctx, name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		p.notifyTerminated(pod, "Deleted")
		return nil
	}
	if err != nil {
		return tenantmsg.Wrap(fmt.Errorf("get host pod %s: %w", name, err), "the pod could not be read on the host")
	}
	if !p.isHostPodOf(host, pod) {
		klog.FromContext(ctx).Info("Host pod under the name runs another pod; not deleting it", "pod", klog.KObj(pod), "hostPod", klog.KObj(host))
		p.notifyTerminated(pod, "Deleted")
		return nil
	}
	grace := p.tr.DeletionGracePeriod(pod.DeletionGracePeriodSeconds, p.tenantPodGone(pod))
	p.deleting.Store(name, true)
	err = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: grace, Preconditions: &metav1.Preconditions{UID: &host.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		p.notifyTerminated(pod, "Deleted")
		return nil
	}
	return tenantmsg.Wrap(err, "the host did not delete the pod")
}

// tenantPodGone reports whether pod is no longer in the tenant API, as far
// as the informer cache knows: a pod being deleted gracefully stays there
// until the syncer finishes it, so a missing one was force-deleted.
func (p *podProvider) tenantPodGone(pod *corev1.Pod) bool {
	tenant, err := p.tenantPods.Pods(pod.Namespace).Get(pod.Name)
	return apierrors.IsNotFound(err) || (err == nil && tenant.UID != pod.UID)
}

// runsOnHost reports whether the tenant pod has its host pod, as far as the
// host informer cache knows.
func (p *podProvider) runsOnHost(pod *corev1.Pod) bool {
	host, err := p.hostPods.Get(contract.HostName(p.tr.VirtualCluster, pod.Namespace, pod.Name))
	return err == nil && p.isHostPodOf(host, pod)
}

// isHostPodOf reports whether host was made for exactly this tenant pod: not
// for another object, nor for an earlier pod of the same name.
func (p *podProvider) isHostPodOf(host, pod *corev1.Pod) bool {
	return contract.IsCopyOfUID(host, p.tr.VirtualCluster, pod.Namespace, pod.Name, string(pod.UID))
}

// GetPod returns the tenant view of the pod if it runs on the host. When the
// host pod was made from an older version of the tenant pod, the view carries
// a marker so the pod controller calls UpdatePod. When the tenant pod is
// already gone from the API (a deletion with no grace period), the view is
// built from the host pod, so the pod controller deletes it.
func (p *podProvider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	host, err := p.hostPods.Get(contract.HostName(p.tr.VirtualCluster, namespace, name))
	if err != nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on the host", namespace, name)
	}
	tenant, err := p.tenantPods.Pods(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return viewOfHostPod(host), nil
	}
	if err != nil || host.Annotations[contract.AnnotationTenantUID] != string(tenant.UID) {
		return nil, errdefs.NotFoundf("pod %s/%s is not on the host", namespace, name)
	}
	view := tenant.DeepCopy()
	if host.Annotations[contract.AnnotationSpecHash] != SpecHash(tenant) {
		if view.Annotations == nil {
			view.Annotations = map[string]string{}
		}
		view.Annotations[contract.AnnotationSpecHash] = "stale"
	}
	view.Status = TenantStatus(tenant, host)
	return view, nil
}

// GetPodStatus returns the tenant pod's status from its host pod.
func (p *podProvider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods lists the tenant pods that have a host pod, by tenant namespace and
// name, so the pod controller can delete host pods whose tenant pod is gone.
func (p *podProvider) GetPods(context.Context) ([]*corev1.Pod, error) {
	hosts, err := p.hostPods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(hosts))
	for _, h := range hosts {
		if view := viewOfHostPod(h); view != nil {
			out = append(out, view)
		}
	}
	return out, nil
}

// viewOfHostPod is the little the host pod tells of its tenant pod: its
// namespace, name and UID, and the host status. It is nil for a host pod the
// syncer did not make.
func viewOfHostPod(h *corev1.Pod) *corev1.Pod {
	ns, name, ok := contract.TenantKey(h.Annotations)
	if !ok {
		return nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(h.Annotations[contract.AnnotationTenantUID])},
		Status:     h.Status,
	}
}

// NotifyPods registers the pod controller's status callback, then reports
// the current status of every host pod once.
func (p *podProvider) NotifyPods(ctx context.Context, notify func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = notify
	p.mu.Unlock()
	go func() {
		hosts, _ := p.hostPods.List(labels.Everything())
		for _, h := range hosts {
			p.hostPodChanged(h)
		}
	}()
}

func (p *podProvider) callback() func(*corev1.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.notify
}

// tenantPodOf returns the tenant pod a host pod runs, if it still exists.
func (p *podProvider) tenantPodOf(host *corev1.Pod) (*corev1.Pod, bool) {
	ns, name, ok := contract.TenantKey(host.Annotations)
	if !ok {
		return nil, false
	}
	tenant, err := p.tenantPods.Pods(ns).Get(name)
	if err != nil || string(tenant.UID) != host.Annotations[contract.AnnotationTenantUID] {
		return nil, false
	}
	return tenant, true
}

// hostPodChanged sends a host pod's status up to its tenant pod.
func (p *podProvider) hostPodChanged(host *corev1.Pod) {
	notify := p.callback()
	tenant, ok := p.tenantPodOf(host)
	if notify == nil || !ok {
		return
	}
	view := tenant.DeepCopy()
	view.Status = TenantStatus(tenant, host)
	notify(view)
}

// reportHelperFailures tells the tenant pod, with a FailedMount event, why a
// helper init container of its host pod failed since the host pod's last
// update: a hostPath volume's path that is not of the type it asks for, as
// the kubelet reports a volume it cannot set up; a NetworkNotReady event
// for the network fence.
func (p *podProvider) reportHelperFailures(was, is *corev1.Pod) {
	failures := newHelperFailures(was, is)
	if len(failures) == 0 {
		return
	}
	tenant, ok := p.tenantPodOf(is)
	if !ok {
		return
	}
	for _, e := range failures {
		p.recorder.Event(tenant, corev1.EventTypeWarning, e.reason, e.message)
	}
}

// hostPodDeleted finishes a tenant deletion the syncer started. A host pod
// deleted by anyone else (an eviction, an administrator) fails the tenant
// pod and deletes it, so its controller replaces it, as after a node loss.
func (p *podProvider) hostPodDeleted(host *corev1.Pod) {
	_, ours := p.deleting.LoadAndDelete(host.Name)
	tenant, ok := p.tenantPodOf(host)
	if !ok {
		return
	}
	if ours || tenant.DeletionTimestamp != nil {
		// As a kubelet does once a pod's containers have stopped: report the
		// final status, then finish the deletion at once instead of waiting
		// out the rest of the grace period.
		p.notifyTerminated(tenant, "Deleted")
		p.tenantDeletes.Add(tenantDeleteKey(tenant))
		return
	}
	p.recorder.Eventf(tenant, corev1.EventTypeWarning, "HostPodDeleted", "The pod running this pod on the host was deleted; deleting the pod so its controller replaces it")
	p.notifyTerminated(tenant, "HostPodDeleted")
	p.tenantDeletes.Add(tenantDeleteKey(tenant))
}

// tenantDeleteKey is the tenant deletes queue's key of pod:
// "namespace/name/uid".
func tenantDeleteKey(pod *corev1.Pod) string {
	return pod.Namespace + "/" + pod.Name + "/" + string(pod.UID)
}

// syncTenantDelete removes a tenant pod whose host pod is gone, with no grace
// period left to wait: nothing runs any more. The UID precondition spares a
// pod made under the name since.
func (p *podProvider) syncTenantDelete(ctx context.Context, key string) (time.Duration, error) {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) != 3 {
		return 0, kindsync.Terminal(fmt.Errorf("tenant pod delete key %q is not namespace/name/uid", key))
	}
	uid := types.UID(parts[2])
	err := p.tenant.CoreV1().Pods(parts[0]).Delete(ctx, parts[1], metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &uid},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return 0, nil
	}
	return 0, err
}

// reject ends a pod the node does not admit as the kubelet's rejectPod does:
// a warning event with the reason, and phase Failed with the message.
func (p *podProvider) reject(pod *corev1.Pod, r *Rejection) {
	p.recorder.Event(pod, corev1.EventTypeWarning, r.Reason, r.Message)
	if notify := p.callback(); notify != nil {
		view := pod.DeepCopy()
		view.Status = corev1.PodStatus{
			Phase: corev1.PodFailed, Reason: r.Reason, Message: r.Error(),
			QOSClass: pod.Status.QOSClass, Conditions: pod.Status.Conditions,
		}
		notify(view)
	}
}

func (p *podProvider) notifyTerminated(tenant *corev1.Pod, reason string) {
	if notify := p.callback(); notify != nil {
		view := tenant.DeepCopy()
		view.Status = terminatedStatus(tenant, reason)
		notify(view)
	}
}
