// Package serviceaccounttoken delivers the tenant's service-account tokens
// to host pods: the Issuer requests them from the tenant API server, bound
// to the tenant pod, into one host Secret per pod (contract.TokenSecretName)
// that also carries the pod's identity for downward API files; the kind's
// queue, "tokens", refreshes them in place before they expire, as the
// kubelet does, so the host kubelet updates the mounted files and pods keep
// running.
package serviceaccounttoken

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

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
)

// Annotations of a pod's token Secret.
const (
	// AnnotationRefreshAt is when the Secret's tokens are next refreshed (RFC 3339).
	AnnotationRefreshAt = contract.AnnotationTokenRefreshAt
	// AnnotationProjections lists the tokens to request, as JSON.
	AnnotationProjections = contract.ReservedPrefix + "token-projections"
	// annotationServiceAccount is the tenant pod's service account.
	annotationServiceAccount = contract.ReservedPrefix + "tenant-service-account"
)

// Projection is one service-account token a host pod needs: requested
// from the tenant API server and stored under Key (contract.TokenKeyPrefix
// and more) in the pod's token Secret, for Audience, lasting
// ExpirationSeconds as the pod asked.
type Projection struct {
	Key               string
	Audience          string
	ExpirationSeconds int64
}

// Issuer requests service-account tokens from the tenant API server and
// decides when to refresh them: at 80% of their lifetime, as the kubelet
// does, or after MaxAge, whichever comes first.
type Issuer struct {
	Tenant kubernetes.Interface
	MaxAge time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

func (ti *Issuer) now() time.Time {
	if ti.Now == nil {
		return time.Now()
	}
	return ti.Now()
}

// SecretFor returns the token Secret of hostPod in hostNamespace, the host
// pod of tenant (virtual cluster vc): fresh tokens bound to the tenant pod,
// one per projection, and identity, the tenant pod's identity for downward
// API files. The error is the tenant API server's refusal of a token.
func (ti *Issuer) SecretFor(ctx context.Context, vc, hostNamespace string, tenant *corev1.Pod, hostPod string, tokens []Projection, identity map[string]string) (*corev1.Secret, error) {
	projections, _ := json.Marshal(tokens)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:        contract.TokenSecretName(hostPod),
			Namespace:   hostNamespace,
			Labels:      contract.HostLabels(vc, tenant.Namespace),
			Annotations: contract.HostAnnotations(tenant.Namespace, tenant.Name, string(tenant.UID)),
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{},
	}
	s.Labels[contract.LabelTokenSecret] = "true"
	s.Annotations[AnnotationProjections] = string(projections)
	s.Annotations[annotationServiceAccount] = tenant.Spec.ServiceAccountName
	for k, v := range identity {
		s.Data[k] = []byte(v)
	}
	return s, ti.fill(ctx, s)
}

// fill requests every token the Secret lists and sets the next refresh time.
func (ti *Issuer) fill(ctx context.Context, s *corev1.Secret) error {
	var projections []Projection
	if err := json.Unmarshal([]byte(s.Annotations[AnnotationProjections]), &projections); err != nil {
		return fmt.Errorf("token Secret %s: bad %s annotation: %w", s.Name, AnnotationProjections, err)
	}
	s.Annotations = maps.Clone(s.Annotations)
	if len(projections) == 0 {
		delete(s.Annotations, AnnotationRefreshAt)
		return nil
	}
	namespace, name, _ := contract.TenantKey(s.Annotations)
	next := ti.now().Add(ti.MaxAge)
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
	s.Annotations[AnnotationRefreshAt] = next.UTC().Format(time.RFC3339)
	return nil
}

// refreshAt is 80% into the shorter of the requested and the granted
// lifetime: the API server may extend a token but the pod asked for less.
func (ti *Issuer) refreshAt(expires time.Time, requestedSeconds int64) time.Time {
	now := ti.now()
	lifetime := min(expires.Sub(now), time.Duration(requestedSeconds)*time.Second)
	return now.Add(lifetime * 8 / 10)
}

func (ti *Issuer) request(ctx context.Context, namespace, serviceAccount, podName, podUID string, p Projection) (string, time.Time, error) {
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
	resp, err := ti.Tenant.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, serviceAccount, req, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("request a token for service account %s/%s: %w", namespace, serviceAccount, err)
	}
	return resp.Status.Token, resp.Status.ExpirationTimestamp.Time, nil
}

// dueIn reports whether a token Secret needs fresh tokens now and, if not,
// how long until it does. A Secret with no tokens, only identity, never
// does; one whose refresh time cannot be read does at once.
func (ti *Issuer) dueIn(s *corev1.Secret) (wait time.Duration, due bool) {
	v, ok := s.Annotations[AnnotationRefreshAt]
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

// refresher renews the tokens of pods' token Secrets in place when they
// are due: the host kubelet updates the mounted files, and the pods keep
// running. Its keys are host Secret names.
type refresher struct {
	issuer  *Issuer
	host    kubernetes.Interface
	secrets corelisters.SecretNamespaceLister
}

// sync refreshes one token Secret if it is due, and asks to be called again
// when it next is.
func (r *refresher) sync(ctx context.Context, name string) (time.Duration, error) {
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
func (r *refresher) keys() []string {
	list, _ := r.secrets.List(labels.SelectorFromSet(labels.Set{contract.LabelTokenSecret: "true"}))
	names := make([]string, 0, len(list))
	for _, s := range list {
		names = append(names, s.Name)
	}
	return names
}

// workers is how many token Secrets are refreshed at once.
const workers = 2

// Register makes the kind's queue, "tokens", which events of the token
// Secrets feed; each key comes back when its Secret is next due.
func Register(c *kinds.Context, issuer *Issuer) kinds.Registration {
	secrets := c.HostInformers.Core().V1().Secrets()
	r := &refresher{issuer: issuer, host: c.Host, secrets: secrets.Lister().Secrets(c.HostNamespace)}
	q := c.NewQueue("tokens", workers, r.sync, r.keys)
	_, _ = secrets.Informer().AddEventHandler(kinds.OnEvery(func(s *corev1.Secret) {
		if s.Labels[contract.LabelTokenSecret] == "true" {
			q.Add(s.Name)
		}
	}))
	return kinds.Registration{Queues: []*kindsync.Syncer{q}}
}
