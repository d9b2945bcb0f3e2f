package membergrant

import (
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// fakeToken is a JWT with the claims a member's TokenRequest API gives
// (unsigned: nothing here checks signatures).
func fakeToken(t *testing.T, iat, exp time.Time, namespace, sa, uid string) string {
	t.Helper()
	claims := map[string]any{"iat": iat.Unix(), "exp": exp.Unix(),
		"kubernetes.io": map[string]any{"namespace": namespace, "serviceaccount": map[string]any{"name": sa, "uid": uid}}}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return "eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString(payload) + ".sig"
}

func TestReusableToken(t *testing.T) {
	iat := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	exp := iat.Add(time.Hour)
	renew := iat.Add(48 * time.Minute)
	good := &contract.MemberPlacement{Name: "gpu", Namespace: "nest-ml-x", Server: "https://m:6443", TokenExpiry: exp,
		Token: fakeToken(t, iat, exp, "nest-ml-x", SyncerServiceAccount, "uid-1")}
	with := func(change func(p *contract.MemberPlacement)) *contract.MemberPlacement {
		p := *good
		change(&p)
		return &p
	}
	for _, tt := range []struct {
		name string
		old  *contract.MemberPlacement
		now  time.Time
		ok   bool
	}{
		{"fresh", good, iat.Add(10 * time.Minute), true},
		{"just before 80%", good, renew.Add(-time.Second), true},
		{"at 80%", good, renew, false},
		{"expired", good, exp.Add(time.Minute), false},
		{"none", nil, iat, false},
		{"another namespace", with(func(p *contract.MemberPlacement) { p.Namespace = "nest-ml-y" }), iat, false},
		{"another server", with(func(p *contract.MemberPlacement) { p.Server = "https://other:6443" }), iat, false},
		{"service account made again", with(func(p *contract.MemberPlacement) {
			p.Token = fakeToken(t, iat, exp, "nest-ml-x", SyncerServiceAccount, "uid-0")
		}), iat, false},
		{"another service account", with(func(p *contract.MemberPlacement) {
			p.Token = fakeToken(t, iat, exp, "nest-ml-x", "default", "uid-1")
		}), iat, false},
		{"not a JWT", with(func(p *contract.MemberPlacement) { p.Token = "opaque" }), iat, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			renewAt, ok := reusableToken(tt.old, "nest-ml-x", "https://m:6443", "uid-1", tt.now)
			if ok != tt.ok {
				t.Fatalf("reusable = %v, want %v", ok, tt.ok)
			}
			if ok && !renewAt.Equal(renew) {
				t.Errorf("renew at %s, want %s", renewAt, renew)
			}
		})
	}
}

func TestParseClaimsRefusesNoLifetime(t *testing.T) {
	now := time.Now()
	if _, err := parseClaims(fakeToken(t, now, now, "ns", "sa", "u")); err == nil {
		t.Error("a token that expires when issued was accepted")
	}
	if _, err := parseClaims("a.!!!.c"); err == nil {
		t.Error("a payload that is not base64 was accepted")
	}
}
