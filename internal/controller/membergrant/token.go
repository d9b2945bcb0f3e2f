package membergrant

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nestdev/nest/internal/syncer/contract"
)

// renewFraction of a token's life passes before it is replaced, as the
// kubelet does for projected tokens: nest-syncer always holds a token with
// a fifth of its life left, so a late reconcile does not strand it.
const renewFraction = 0.8

// tokenClaims are the parts of a service-account token nest-manager reads
// to decide whether to keep it. The token is not verified here: it was
// issued to nest-manager by the member, and a wrong reading only costs a
// new token.
type tokenClaims struct {
	IssuedAt   int64 `json:"iat"`
	Expiry     int64 `json:"exp"`
	Kubernetes struct {
		Namespace      string `json:"namespace"`
		ServiceAccount struct {
			Name string `json:"name"`
			UID  string `json:"uid"`
		} `json:"serviceaccount"`
	} `json:"kubernetes.io"`
}

// parseClaims reads the claims of a JWT without checking its signature.
func parseClaims(token string) (tokenClaims, error) {
	var c tokenClaims
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return c, errors.New("token is not a JWT: want three dot-separated parts")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return c, fmt.Errorf("token payload: %w", err)
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return c, fmt.Errorf("token payload: %w", err)
	}
	if c.IssuedAt == 0 || c.Expiry <= c.IssuedAt {
		return c, fmt.Errorf("token claims iat %d and exp %d do not give a lifetime", c.IssuedAt, c.Expiry)
	}
	return c, nil
}

// renewTime is when a token issued at iat and expiring at exp is replaced.
func renewTime(iat, exp time.Time) time.Time {
	return iat.Add(time.Duration(float64(exp.Sub(iat)) * renewFraction))
}

// reusableToken reports whether old, the placement found in the host
// Secret, still carries a token nest-syncer may use for the service
// account saUID in namespace on server, and when to replace it. A token of
// a service account that was deleted and made again (another UID) no
// longer authenticates, so it is not kept.
func reusableToken(old *contract.MemberPlacement, namespace, server string, saUID types.UID, now time.Time) (renewAt time.Time, ok bool) {
	if old == nil || old.Token == "" || old.Namespace != namespace || old.Server != server {
		return time.Time{}, false
	}
	c, err := parseClaims(old.Token)
	if err != nil || c.Kubernetes.Namespace != namespace || c.Kubernetes.ServiceAccount.Name != SyncerServiceAccount ||
		c.Kubernetes.ServiceAccount.UID != string(saUID) {
		return time.Time{}, false
	}
	renewAt = renewTime(time.Unix(c.IssuedAt, 0), time.Unix(c.Expiry, 0))
	if !now.Before(renewAt) {
		return time.Time{}, false
	}
	return renewAt, true
}
