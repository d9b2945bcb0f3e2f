package dashboard

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"sync"

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
		nestv1.GroupVersion.WithKind(nestv1.VirtualClusterKind),
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

// TokenCookie holds a signed-in user's bearer token over plain HTTP (the
// dashboard on loopback, or behind kubectl port-forward); over TLS it is
// SecureTokenCookie.
const TokenCookie = "nest_dashboard_token"

// SecureTokenCookie is TokenCookie over TLS: the __Host- prefix makes the
// browser refuse it unless Secure, host-only and for path /.
const SecureTokenCookie = "__Host-" + TokenCookie

func tokenCookieName(r *http.Request) string {
	if r.TLS != nil {
		return SecureTokenCookie
	}
	return TokenCookie
}

// tokenOf is the bearer token r carries, or "".
func tokenOf(r *http.Request) string {
	ck, err := r.Cookie(tokenCookieName(r))
	if err != nil {
		return ""
	}
	return ck.Value
}

// TokenClients acts as whoever signed in with a bearer token: the dashboard
// in the host cluster. Requests share one connection pool; each carries its
// user's token and nothing else.
type TokenClients struct {
	anonymous *rest.Config
	transport http.RoundTripper
	mapper    meta.RESTMapper
	// users maps a token's SHA-256 to the user the API server named at
	// sign-in, for the page header and logs. The browser cannot forge it.
	mu    sync.Mutex
	users map[[sha256.Size]byte]string
}

// maxRememberedUsers bounds the users map; past it the oldest half is not
// kept apart, the map is simply started again (names show as "signed in").
const maxRememberedUsers = 10000

func (t *TokenClients) remember(token, user string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.users) >= maxRememberedUsers {
		t.users = map[[sha256.Size]byte]string{}
	}
	t.users[sha256.Sum256([]byte(token))] = user
}

func (t *TokenClients) forget(token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.users, sha256.Sum256([]byte(token)))
}

// NewTokenClients takes the host API server's address and CA from base and
// drops every credential base has.
func NewTokenClients(base *rest.Config) (*TokenClients, error) {
	anon := rest.AnonymousClientConfig(base)
	rt, err := rest.TransportFor(anon)
	if err != nil {
		return nil, fmt.Errorf("host cluster transport: %w", err)
	}
	return &TokenClients{anonymous: anon, transport: rt, mapper: restMapper(), users: map[[sha256.Size]byte]string{}}, nil
}

// ClientFor returns a client with the token from r's token cookie, or ErrSignIn.
func (t *TokenClients) ClientFor(r *http.Request) (client.WithWatch, error) {
	token := tokenOf(r)
	if token == "" {
		return nil, ErrSignIn
	}
	return t.clientWithToken(token)
}

func (t *TokenClients) clientWithToken(token string) (client.WithWatch, error) {
	hc := &http.Client{Transport: transport.NewBearerAuthRoundTripper(token, t.transport)}
	return client.NewWithWatch(t.anonymous, client.Options{Scheme: kube.NewScheme(), Mapper: t.mapper, HTTPClient: hc})
}

// SignIn is true.
func (t *TokenClients) SignIn() bool { return true }

// Identity is the user the API server named when this token signed in.
func (t *TokenClients) Identity(r *http.Request) string {
	token := tokenOf(r)
	if token == "" {
		return "not signed in"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if user, ok := t.users[sha256.Sum256([]byte(token))]; ok {
		return "signed in as " + user
	}
	return "signed in"
}
