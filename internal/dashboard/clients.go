package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
)

// ErrSignIn is returned by a ClientSource when the request carries no
// credentials: the user must sign in first.
var ErrSignIn = errors.New("sign in with a bearer token first")

// ClientSource gives each request a host-cluster client that acts as the
// request's user, so host RBAC decides what the user sees and does. The
// dashboard holds no rights of its own.
type ClientSource interface {
	// ClientFor returns the client for r's user, or ErrSignIn.
	ClientFor(r *http.Request) (client.WithWatch, error)
	// SignIn reports whether users sign in with a token (TokenClients)
	// rather than being the kubeconfig's user (KubeconfigClients).
	SignIn() bool
	// Identity describes the credentials for the page header, such as
	// "kubeconfig context kind-host".
	Identity(r *http.Request) string
}

// restMapper knows the kinds the dashboard reads and writes, so a client
// needs no discovery call: discovery per request would cost a round trip
// each, and the user may not be allowed it.
func restMapper() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range []schema.GroupVersionKind{
		nestv1.GroupVersion.WithKind("VirtualCluster"),
		corev1.SchemeGroupVersion.WithKind("Pod"),
		corev1.SchemeGroupVersion.WithKind("Event"),
		corev1.SchemeGroupVersion.WithKind("ResourceQuota"),
		corev1.SchemeGroupVersion.WithKind("Secret"),
	} {
		m.Add(gvk, meta.RESTScopeNamespace)
	}
	m.Add(corev1.SchemeGroupVersion.WithKind("Namespace"), meta.RESTScopeRoot)
	m.Add(authenticationv1.SchemeGroupVersion.WithKind("SelfSubjectReview"), meta.RESTScopeRoot)
	return m
}

// KubeconfigClients acts as the user of a kubeconfig: `nest dashboard` on
// the user's machine, like `kubectl proxy`.
type KubeconfigClients struct {
	c       client.WithWatch
	context string
}

// NewKubeconfigClients makes the one client every request uses; context
// names the kubeconfig context for the page header.
func NewKubeconfigClients(cfg *rest.Config, context string) (*KubeconfigClients, error) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: kube.NewScheme(), Mapper: restMapper()})
	if err != nil {
		return nil, fmt.Errorf("host cluster client: %w", err)
	}
	return &KubeconfigClients{c: c, context: context}, nil
}

// ClientFor returns the kubeconfig user's client.
func (k *KubeconfigClients) ClientFor(*http.Request) (client.WithWatch, error) { return k.c, nil }

// SignIn is false: the kubeconfig's user is the dashboard's user.
func (k *KubeconfigClients) SignIn() bool { return false }

// Identity names the kubeconfig context.
func (k *KubeconfigClients) Identity(*http.Request) string {
	return "kubeconfig context " + k.context
}

// TokenCookie holds a signed-in user's bearer token: HttpOnly, SameSite
// Strict, Secure over TLS.
const TokenCookie = "nest_dashboard_token"

// TokenClients acts as whoever signed in with a bearer token: the dashboard
// in the host cluster. Requests share one connection pool; each carries its
// user's token and nothing else.
type TokenClients struct {
	anonymous *rest.Config
	transport http.RoundTripper
	mapper    meta.RESTMapper
}

// NewTokenClients takes the host API server's address and CA from base and
// drops every credential base has.
func NewTokenClients(base *rest.Config) (*TokenClients, error) {
	anon := rest.AnonymousClientConfig(base)
	rt, err := rest.TransportFor(anon)
	if err != nil {
		return nil, fmt.Errorf("host cluster transport: %w", err)
	}
	return &TokenClients{anonymous: anon, transport: rt, mapper: restMapper()}, nil
}

// ClientFor returns a client with the token from r's TokenCookie, or ErrSignIn.
func (t *TokenClients) ClientFor(r *http.Request) (client.WithWatch, error) {
	ck, err := r.Cookie(TokenCookie)
	if err != nil || ck.Value == "" {
		return nil, ErrSignIn
	}
	return t.clientWithToken(ck.Value)
}

func (t *TokenClients) clientWithToken(token string) (client.WithWatch, error) {
	hc := &http.Client{Transport: transport.NewBearerAuthRoundTripper(token, t.transport)}
	return client.NewWithWatch(t.anonymous, client.Options{Scheme: kube.NewScheme(), Mapper: t.mapper, HTTPClient: hc})
}

// SignIn is true.
func (t *TokenClients) SignIn() bool { return true }

// Identity is the user name recorded at sign-in.
func (t *TokenClients) Identity(r *http.Request) string {
	if ck, err := r.Cookie(userCookie); err == nil && ck.Value != "" {
		if user, err := url.QueryUnescape(ck.Value); err == nil {
			return "signed in as " + user
		}
	}
	return "signed in"
}

// userCookie remembers the signed-in user's name for the header only; it
// grants nothing.
const userCookie = "nest_dashboard_user"
