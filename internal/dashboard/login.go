package dashboard

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/klog/v2"
)

// sessionLength is how long the sign-in cookie lasts; the token's own
// expiry, checked by the API server on every call, may end it sooner.
const sessionLength = 8 * time.Hour

// loginView is the sign-in page.
type loginView struct {
	Next  string
	Error string
}

// safeNext keeps a post-sign-in redirect on this site: a plain path, never
// a URL with a scheme or host, nor one a browser would read as one (a
// leading "//", a backslash, or control characters it strips).
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") ||
		strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return "/"
	}
	for _, r := range next {
		if r < 0x20 || r == 0x7f {
			return "/"
		}
	}
	return next
}

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	if !s.o.Clients.SignIn() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, r, http.StatusOK, "login", "Sign in", loginView{Next: safeNext(r.URL.Query().Get("next"))}, nil)
}

// login checks the token with a SelfSubjectReview, as `kubectl auth whoami`
// does, and keeps it in an HttpOnly cookie. The token is never shown again
// or logged.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	tc, ok := s.o.Clients.(*TokenClients)
	if !ok {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	next := safeNext(r.PostFormValue("next"))
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token == "" {
		s.render(w, r, http.StatusUnprocessableEntity, "login", "Sign in", loginView{Next: next, Error: "paste a bearer token, such as the output of kubectl create token NAME"}, nil)
		return
	}
	user, err := tc.whoAmI(r.Context(), token)
	if err != nil {
		s.render(w, r, statusOf(err), "login", "Sign in", loginView{Next: next, Error: "the host API server refused this token: " + err.Error()}, nil)
		return
	}
	tc.remember(token, user)
	setTokenCookie(w, r, token, int(sessionLength.Seconds()))
	klog.InfoS("Signed in", "user", user)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if tc, ok := s.o.Clients.(*TokenClients); ok {
		if token := tokenOf(r); token != "" {
			tc.forget(token)
		}
	}
	setTokenCookie(w, r, "", -1)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// setTokenCookie sets (or with maxAge -1 clears) the token cookie: HttpOnly,
// SameSite=Strict, and over TLS Secure with the __Host- prefix, so a page on
// a sibling domain cannot plant its own token in the user's browser.
func setTokenCookie(w http.ResponseWriter, r *http.Request, token string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: tokenCookieName(r), Value: token, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: maxAge})
}

// whoAmI asks the host API server who the token belongs to.
func (t *TokenClients) whoAmI(ctx context.Context, token string) (string, error) {
	c, err := t.clientWithToken(token)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	review := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return "", err
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("the API server named no user for this token")
	}
	return review.Status.UserInfo.Username, nil
}
