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
	"crypto/x509"
	"crypto/x509/pkix"
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

// NewCA creates a self-signed certificate authority named commonName.
func NewCA(commonName string) (*CA, error) {
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
		NotAfter:              now.Add(CAValidity),
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

// LoadCA parses a CA from a PEM certificate and key, as written by NewCA.
func LoadCA(pair KeyPair) (*CA, error) {
	cert, err := ParseCertificate(pair.CertPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: certificate %q is not a CA", cert.Subject.CommonName)
	}
	key, err := ParsePrivateKey(pair.KeyPEM)
	if err != nil {
		return nil, err
	}
	return &CA{KeyPair: pair, cert: cert, key: key}, nil
}

// Certificate returns the parsed CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

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
