package syncer

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// Annotations of a pod's token Secret.
const (
	// annotationRefreshAt is when the Secret's tokens are next refreshed (RFC 3339).
	annotationRefreshAt = "nest.dev/token-refresh-at"
	// annotationProjections lists the tokens to request, as JSON.
	annotationProjections = "nest.dev/token-projections"
	// annotationServiceAccount is the tenant pod's service account.
	annotationServiceAccount = "nest.dev/tenant-service-account"
)

// tokenIssuer requests service-account tokens from the tenant API server and
// decides when to refresh them: at 80% of their lifetime, as the kubelet
// does, or after maxAge, whichever comes first.
type tokenIssuer struct {
	tenant kubernetes.Interface
	maxAge time.Duration
	now    func() time.Time
}

// secretFor returns the token Secret of a host pod: fresh tokens bound to the
// tenant pod, and the tenant pod's identity for downward API files.
func (ti *tokenIssuer) secretFor(ctx context.Context, tr Translator, tenant *corev1.Pod, pt *PodTranslation) (*corev1.Secret, error) {
	projections, _ := json.Marshal(pt.Tokens)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:        contract.TokenSecretName(pt.Pod.Name),
			Namespace:   tr.HostNamespace,
			Labels:      contract.HostLabels(tr.VirtualCluster, tenant.Namespace),
			Annotations: contract.HostAnnotations(tenant.Namespace, tenant.Name, string(tenant.UID)),
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{},
	}
	s.Labels[contract.LabelTokenSecret] = "true"
	s.Annotations[annotationProjections] = string(projections)
	s.Annotations[annotationServiceAccount] = tenant.Spec.ServiceAccountName
	for k, v := range pt.Identity {
		s.Data[k] = []byte(v)
	}
	return s, ti.fill(ctx, s)
}

// fill requests every token the Secret lists and sets the next refresh time.
func (ti *tokenIssuer) fill(ctx context.Context, s *corev1.Secret) error {
	var projections []TokenProjection
	if err := json.Unmarshal([]byte(s.Annotations[annotationProjections]), &projections); err != nil {
		return fmt.Errorf("token Secret %s: bad %s annotation: %w", s.Name, annotationProjections, err)
	}
	s.Annotations = maps.Clone(s.Annotations)
	if len(projections) == 0 {
		delete(s.Annotations, annotationRefreshAt)
		return nil
	}
	namespace, name, _ := contract.TenantKey(s.Annotations)
	next := ti.now().Add(ti.maxAge)
	for _, p := range projections {
		token, expires, err := ti.request(ctx, namespace, s.Annotations[annotationServiceAccount], name, s.Annotations[contract.AnnotationTenantUID], p)
		if err != nil {
			return err
		}
		s.Data[p.Key] = []byte(token)
		if at := ti.refreshAt(expires, p.ExpirationSeconds); at.Before(next) {
			next = at
		}
	}
	s.Annotations[annotationRefreshAt] = next.UTC().Format(time.RFC3339)
	return nil
}

// refreshAt is 80% into the shorter of the requested and the granted
// lifetime: the API server may extend a token but the pod asked for less.
func (ti *tokenIssuer) refreshAt(expires time.Time, requestedSeconds int64) time.Time {
	now := ti.now()
	lifetime := min(expires.Sub(now), time.Duration(requestedSeconds)*time.Second)
	return now.Add(lifetime * 8 / 10)
}

func (ti *tokenIssuer) request(ctx context.Context, namespace, serviceAccount, podName, podUID string, p TokenProjection) (string, time.Time, error) {
	if serviceAccount == "" {
		serviceAccount = "default"
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(max(p.ExpirationSeconds, 600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: podName, UID: types.UID(podUID)},
	}}
	if p.Audience != "" {
		req.Spec.Audiences = []string{p.Audience}
	}
	resp, err := ti.tenant.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, req, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("request a token for service account %s/%s: %w", namespace, serviceAccount, err)
	}
	return resp.Status.Token, resp.Status.ExpirationTimestamp.Time, nil
}

// dueIn reports whether a token Secret needs fresh tokens now and, if not,
// how long until it does. A Secret with no tokens, only identity, never
// does; one whose refresh time cannot be read does at once.
func (ti *tokenIssuer) dueIn(s *corev1.Secret) (wait time.Duration, due bool) {
	v, ok := s.Annotations[annotationRefreshAt]
	if !ok {
		return 0, false
	}
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0, true
	}
	wait = at.Sub(ti.now())
	return wait, wait <= 0
}

// tokenRefresher renews the tokens of pods' token Secrets in place when
// they are due: the host kubelet updates the mounted files, and the pods
// keep running. Its keys are host Secret names.
type tokenRefresher struct {
	issuer  *tokenIssuer
	host    kubernetes.Interface
	secrets corelisters.SecretNamespaceLister
}

// sync refreshes one token Secret if it is due, and asks to be called again
// when it next is.
func (r *tokenRefresher) sync(ctx context.Context, name string) (time.Duration, error) {
	sec, err := r.secrets.Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if sec.Labels[contract.LabelTokenSecret] != "true" {
		return 0, nil
	}
	if wait, due := r.issuer.dueIn(sec); !due {
		return wait, nil
	}
	upd := sec.DeepCopy()
	if err := r.issuer.fill(ctx, upd); err != nil {
		return 0, fmt.Errorf("refresh the tokens of Secret %s: %w", name, err)
	}
	stored, err := r.host.CoreV1().Secrets(upd.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		return 0, fmt.Errorf("store the refreshed tokens of Secret %s: %w", name, err)
	}
	klog.FromContext(ctx).V(2).Info("Refreshed tokens", "secret", klog.KObj(stored))
	wait, _ := r.issuer.dueIn(stored)
	return wait, nil
}

// keys lists every token Secret, for a resync.
func (r *tokenRefresher) keys() []string {
	list, _ := r.secrets.List(labels.SelectorFromSet(labels.Set{contract.LabelTokenSecret: "true"}))
	names := make([]string, 0, len(list))
	for _, s := range list {
		names = append(names, s.Name)
	}
	return names
}
