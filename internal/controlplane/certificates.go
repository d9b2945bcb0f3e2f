package controlplane

import (
	"cmp"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nestdev/nest/internal/pki"
)

// ExpiryWarning is how long before a certificate expires Certificates marks
// it as expiring: 30 days.
const ExpiryWarning = 30 * 24 * time.Hour

// Certificate is one certificate of a tenant's control plane, where it is
// kept and when it expires.
type Certificate struct {
	// Secret and Key are the host Secret and its data key holding the
	// certificate. For a kubeconfig, Key is "<data key>/<user>".
	Secret, Key string
	// Subject and Issuer are the certificate's and its issuer's common
	// names; CA says whether it is a CA.
	Subject, Issuer string
	CA              bool
	NotAfter        time.Time
	// IssuedAt is when it was issued (pki.IssuedAt).
	IssuedAt time.Time
	// Index is its place among the certificates of its key: 0 for the
	// first, the one that is served or signs; a CA bundle during a CA
	// rotation, or the API server's chain, holds more.
	Index int
	// Expiring: it expires within ExpiryWarning of the time Certificates
	// was given. OutlivesIssuer: it expires after the CA that signed it,
	// which clients stop trusting first.
	Expiring, OutlivesIssuer bool
}

// Certificates lists every certificate in the tenant's Secrets (the PKI
// Secret's *.crt keys and the client certificates of the kubeconfigs in the
// others), sorted by expiry, soonest first, as of now. A key that holds
// no parseable certificate is an error naming the Secret and key: the
// control plane would fail on it too.
func Certificates(secrets []corev1.Secret, now time.Time) ([]Certificate, error) {
	var out []Certificate
	for _, s := range secrets {
		for _, key := range sortedKeys(s.Data) {
			certs, err := certificatesIn(key, s.Data[key])
			if err != nil {
				return nil, fmt.Errorf("host Secret %s/%s, key %s: %w", s.Namespace, s.Name, key, err)
			}
			for _, c := range certs {
				c.Secret = s.Name
				out = append(out, c)
			}
		}
	}
	markIssuers(out, now)
	slices.SortStableFunc(out, func(a, b Certificate) int { return a.NotAfter.Compare(b.NotAfter) })
	return out, nil
}

// certificatesIn are the certificates of one Secret key: every PEM
// certificate of a *.crt (a CA bundle while a CA rotates, the API server's
// chain), the client certificates of a kubeconfig (*.conf, KubeconfigKey,
// KubeconfigInternalKey), or none (keys, the service-account key pair).
func certificatesIn(key string, data []byte) ([]Certificate, error) {
	switch {
	case strings.HasSuffix(key, ".crt"):
		certs, err := pki.ParseCertificates(data)
		if err != nil {
			return nil, err
		}
		out := make([]Certificate, 0, len(certs))
		for i, cert := range certs {
			c := certificateOf(cert)
			c.Key, c.Index = key, i
			out = append(out, c)
		}
		return out, nil
	case strings.HasSuffix(key, ".conf") || key == KubeconfigKey || key == KubeconfigInternalKey:
		cfg, err := clientcmd.Load(data)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		var out []Certificate
		for _, user := range sortedKeys(cfg.AuthInfos) {
			pemData := cfg.AuthInfos[user].ClientCertificateData
			if len(pemData) == 0 {
				continue
			}
			c, err := parseCertificate(pemData)
			if err != nil {
				return nil, fmt.Errorf("user %s: %w", user, err)
			}
			c.Key = key + "/" + user
			out = append(out, c)
		}
		return out, nil
	}
	return nil, nil
}

// parseCertificate reads the first PEM certificate of data.
func parseCertificate(data []byte) (Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return Certificate{}, fmt.Errorf("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return Certificate{}, err
	}
	return certificateOf(cert), nil
}

func certificateOf(cert *x509.Certificate) Certificate {
	return Certificate{Subject: cert.Subject.CommonName, Issuer: cert.Issuer.CommonName, CA: cert.IsCA, NotAfter: cert.NotAfter, IssuedAt: pki.IssuedAt(cert)}
}

// markIssuers sets Expiring and OutlivesIssuer. A certificate's issuer is
// the CA of the set with the issuer's common name.
func markIssuers(certs []Certificate, now time.Time) {
	caExpiry := map[string]time.Time{}
	for _, c := range certs {
		if c.CA {
			caExpiry[c.Subject] = c.NotAfter
		}
	}
	for i := range certs {
		c := &certs[i]
		c.Expiring = c.NotAfter.Sub(now) < ExpiryWarning
		if issuerExpiry, ok := caExpiry[c.Issuer]; ok && c.Issuer != c.Subject {
			c.OutlivesIssuer = c.NotAfter.After(issuerExpiry)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp.Compare[string])
	return keys
}
