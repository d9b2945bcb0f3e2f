// Package pki issues the certificates, keys and kubeconfigs a Kubernetes cluster
// needs: certificate authorities, serving and client certificates, and
// service-account signing keys.
//
// Keys are ECDSA P-256, which every Kubernetes component accepts (service-account
// tokens are then signed with ES256). Certificates and keys are PEM encoded:
// "CERTIFICATE" blocks for certificates and "EC PRIVATE KEY" / "PUBLIC KEY" blocks
// for keys, the formats kubeadm writes and the components read.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// Default validity periods, matching kubeadm: ten years for authorities, one
// year for leaf certificates.
const (
	CAValidity   = 10 * 365 * 24 * time.Hour
	LeafValidity = 365 * 24 * time.Hour
)

// clockSkew backdates NotBefore so a certificate is valid at once on machines
// whose clocks differ slightly.
const clockSkew = 5 * time.Minute

// IssuedAt is when cert was issued: its NotBefore, which Issue and NewCA
// backdate by five minutes, moved forward again.
func IssuedAt(cert *x509.Certificate) time.Time { return cert.NotBefore.Add(clockSkew) }

// KeyPair is a PEM-encoded certificate and its private key.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// CA is a certificate authority that can issue leaf certificates.
type CA struct {
	KeyPair
	cert *x509.Certificate
	key  crypto.Signer
}

// Usage says what a leaf certificate is for.
type Usage int

const (
	// ClientAuth is a certificate a client presents (kubeconfigs, kubelet client).
	ClientAuth Usage = 1 << iota
	// ServerAuth is a certificate a server presents (API server, kubelet, etcd).
	ServerAuth
)

// CertSpec describes a leaf certificate. CommonName is required; Kubernetes reads
// it as the user name and Organizations as the groups of a client certificate.
type CertSpec struct {
	CommonName    string
	Organizations []string
	DNSNames      []string
	IPs           []net.IP
	Usage         Usage
	// Validity defaults to LeafValidity when zero.
	Validity time.Duration
}

// NewCA creates a self-signed certificate authority named commonName, valid
// for CAValidity.
func NewCA(commonName string) (*CA, error) { return NewCAFor(commonName, CAValidity) }

// NewCAFor creates a self-signed certificate authority named commonName,
// valid for validity from now (zero is CAValidity).
func NewCAFor(commonName string, validity time.Duration) (*CA, error) {
	if validity == 0 {
		validity = CAValidity
	}
	if commonName == "" {
		return nil, errors.New("pki: CA common name is empty")
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          mustSerial(),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: self-sign CA %q: %w", commonName, err)
	}
	return newCAFromParts(der, key)
}

// LoadCA parses a CA from a PEM key and a PEM certificate, as written by
// NewCA, or a bundle of CA certificates (a trust bundle while a CA
// rotates): the CA is the bundle's certificate whose public key is the
// key's, and its CertPEM stays the whole bundle. It fails when no
// certificate of the bundle matches the key, or the one that does is no CA.
func LoadCA(pair KeyPair) (*CA, error) {
	certs, err := ParseCertificates(pair.CertPEM)
	if err != nil {
		return nil, err
	}
	key, err := ParsePrivateKey(pair.KeyPEM)
	if err != nil {
		return nil, err
	}
	for _, cert := range certs {
		if !SamePublicKey(cert.PublicKey, key.Public()) {
			continue
		}
		if !cert.IsCA {
			return nil, fmt.Errorf("pki: certificate %q is not a CA", cert.Subject.CommonName)
		}
		return &CA{KeyPair: pair, cert: cert, key: key}, nil
	}
	return nil, fmt.Errorf("pki: the key is not that of the CA certificate (nor of any of the %d certificates given): are its certificate and key a pair?", len(certs))
}

// SamePublicKey reports whether a and b are the same public key.
func SamePublicKey(a, b crypto.PublicKey) bool {
	k, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && k.Equal(b)
}

// Certificate returns the parsed CA certificate: the one that signs.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// CertificatePEM is the PEM of the CA certificate that signs, without
// the rest of its bundle.
func (ca *CA) CertificatePEM() []byte { return encodeCert(ca.cert.Raw) }

// CrossSign returns, PEM encoded, a certificate for other's subject and
// public key signed by ca, valid until the earlier of the two expiries:
// an intermediate through which a client that trusts only ca verifies
// what other signs. A CA rotation serves it behind the API server's
// certificate, so kubeconfigs holding the old CA alone keep working until
// the old CA is retired.
func (ca *CA) CrossSign(other *x509.Certificate) ([]byte, error) {
	notAfter := other.NotAfter
	if ca.cert.NotAfter.Before(notAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          mustSerial(),
		Subject:               other.Subject,
		SubjectKeyId:          other.SubjectKeyId,
		NotBefore:             other.NotBefore,
		NotAfter:              notAfter,
		KeyUsage:              other.KeyUsage,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, other.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("pki: cross-sign %q by %q: %w", other.Subject.CommonName, ca.cert.Subject.CommonName, err)
	}
	return encodeCert(der), nil
}

// Issue signs a new leaf certificate for spec with a fresh key. It never
// outlives the CA: a validity past the CA's expiry is cut to it, as
// cert-manager's CA issuer does, since clients stop trusting the leaf when
// the CA expires.
func (ca *CA) Issue(spec CertSpec) (KeyPair, error) {
	if spec.CommonName == "" {
		return KeyPair{}, errors.New("pki: certificate common name is empty")
	}
	if spec.Usage == 0 {
		return KeyPair{}, fmt.Errorf("pki: certificate %q has no usage: set ClientAuth, ServerAuth or both", spec.CommonName)
	}
	key, err := newKey()
	if err != nil {
		return KeyPair{}, err
	}
	validity := spec.Validity
	if validity == 0 {
		validity = LeafValidity
	}
	now := time.Now()
	notAfter := now.Add(validity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: mustSerial(),
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: spec.Organizations},
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  extKeyUsages(spec.Usage),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("pki: sign certificate %q: %w", spec.CommonName, err)
	}
	keyPEM, err := encodePrivateKey(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// NewServiceAccountKey returns a PEM private key for signing service-account
// tokens and its PEM public key for verifying them.
func NewServiceAccountKey() (private, public []byte, err error) {
	key, err := newKey()
	if err != nil {
		return nil, nil, err
	}
	private, err = encodePrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("pki: encode public key: %w", err)
	}
	return private, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParseCertificates decodes every PEM certificate in data, in order. It
// fails when data holds none, or a CERTIFICATE block that does not parse.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	return parseBlocks(data, "CERTIFICATE", x509.ParseCertificate)
}

// BundleHash identifies a CA bundle: the hex SHA-256 of the DER of each
// certificate of the PEM data, in order, so the same certificates hash
// the same whatever the PEM's line breaks or comments, and the order
// counts. Data with no certificate, or one that does not parse, hashes
// to "".
func BundleHash(data []byte) string {
	certs, err := ParseCertificates(data)
	if err != nil {
		return ""
	}
	h := sha256.New()
	for _, c := range certs {
		h.Write(c.Raw)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// parseBlocks parses every PEM block of type typ in data, in order, and
// fails when there is none or one does not parse.
func parseBlocks[T any](data []byte, typ string, parse func([]byte) (T, error)) ([]T, error) {
	var out []T
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != typ {
			continue
		}
		v, err := parse(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pki: no PEM %s block found", typ)
	}
	return out, nil
}

// EncodeCertificates is certs PEM encoded, in order.
func EncodeCertificates(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, encodeCert(c.Raw)...)
	}
	return out
}

// ParsePublicKeys decodes every PEM "PUBLIC KEY" block in data, in order,
// as kube-apiserver's --service-account-key-file reads it.
func ParsePublicKeys(data []byte) ([]crypto.PublicKey, error) {
	return parseBlocks(data, "PUBLIC KEY", func(der []byte) (crypto.PublicKey, error) { return x509.ParsePKIXPublicKey(der) })
}

// EncodePublicKeys is keys PEM encoded as "PUBLIC KEY" blocks, in order.
func EncodePublicKeys(keys ...crypto.PublicKey) ([]byte, error) {
	var out []byte
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			return nil, fmt.Errorf("pki: encode public key: %w", err)
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	return out, nil
}

// ParseCertificate decodes the first PEM certificate in data.
func ParseCertificate(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("pki: no PEM CERTIFICATE block found")
	}
	return x509.ParseCertificate(block.Bytes)
}

// ParsePrivateKey decodes a PEM EC, PKCS#8 or PKCS#1 private key.
func ParsePrivateKey(data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("pki: no PEM private key block found")
	}
	switch block.Type {
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("pki: PKCS#8 key of type %T cannot sign", key)
		}
		return signer, nil
	default:
		return nil, fmt.Errorf("pki: unsupported private key block %q", block.Type)
	}
}

func newCAFromParts(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodePrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &CA{KeyPair: KeyPair{CertPEM: encodeCert(der), KeyPEM: keyPEM}, cert: cert, key: key}, nil
}

func extKeyUsages(u Usage) []x509.ExtKeyUsage {
	var out []x509.ExtKeyUsage
	if u&ServerAuth != 0 {
		out = append(out, x509.ExtKeyUsageServerAuth)
	}
	if u&ClientAuth != 0 {
		out = append(out, x509.ExtKeyUsageClientAuth)
	}
	return out
}

func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate key: %w", err)
	}
	return key, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodePrivateKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// mustSerial returns a random 128-bit serial number, as RFC 5280 recommends.
func mustSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(fmt.Sprintf("pki: read random serial: %v", err))
	}
	return n
}
