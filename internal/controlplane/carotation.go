package controlplane

import (
	"bytes"
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/pki"
)

// A CA rotation (nestv1.AnnotationRotateCA) moves each authority it names
// through the shapes of the PKI Secret below, one per phase; ReconcilePKI
// brings the Secret to the shape of the phase in status, so a shape
// written twice, or a phase read late from a cache, changes nothing:
//
//	before   bundle [old]       key old
//	Trust    bundle [old, new]  key old  key.next new
//	Reissue  bundle [new, old]  key new                (cluster: cross.crt, new signed by old)
//	Retire   bundle [new]       key new
//
// The bundle is the file every component trusts (ca.crt, etcd/ca.crt,
// front-proxy-ca.crt; sa.pub for the service-account key), so adding to it
// is adding trust. The shapes tell themselves apart, which is what makes a
// phase written again harmless: Trust makes a new CA only while the bundle
// holds one, and Reissue swaps only while key.next exists.

// rotatable is an authority a CA rotation replaces: its bundle and key
// files in the PKI Secret, and the common name prefix its CAs get.
type rotatable struct {
	name        nestv1.CAName
	bundle, key string
	// publicKeys: the bundle holds public keys, not certificates (the
	// service-account key).
	publicKeys bool
	prefix     string
}

// rotatables are the authorities that rotate, in nestv1.CANames' order:
// those of authorities with a rotation name, and the service-account key.
var rotatables = func() []rotatable {
	var out []rotatable
	for _, a := range authorities {
		if a.rotation != "" {
			out = append(out, rotatable{name: a.rotation, bundle: a.cert, key: a.key, prefix: a.name})
		}
	}
	return append(out, rotatable{name: nestv1.CAServiceAccount, bundle: ServiceAccountPub, key: ServiceAccountKey, publicKeys: true})
}()

// CACrossCert is the PKI Secret key of the new cluster CA cross-signed by
// the old one, from phase Reissue until Retire: the API server's
// certificate is served with it (APIServerCert holds both).
const CACrossCert = "ca-cross.crt"

// nextKey is the PKI Secret key of an authority's new key during phase
// Trust, before it signs.
func nextKey(key string) string { return key + ".next" }

// SettledPKI is PKI Secret data with every CA rotation's traces settled
// on the CAs that sign: each bundle holds its signer alone, and no new key
// waits and no cross-signed CA is served. A snapshot taken during a
// rotation is restored this way: the restored tenant has no rotation
// under way to finish it.
func SettledPKI(data map[string][]byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	for k, v := range data {
		out[k] = v
	}
	for _, a := range rotatables {
		if _, err := a.retire(out); err != nil {
			return nil, fmt.Errorf("settle %s: %w", a.name, err)
		}
		delete(out, nextKey(a.key))
	}
	chainServing(out)
	return out, nil
}

// applyCAPhase brings data to the shape of phase for every authority
// rotation names; zero rotation changes nothing. A new CA is made for
// lifetime (zero is pki.CAValidity), named for cluster.
func applyCAPhase(data map[string][]byte, cluster string, rotation *nestv1.CARotation, lifetime time.Duration) (bool, error) {
	if rotation == nil {
		return false, nil
	}
	changed := false
	for _, a := range rotatables {
		if !slices.Contains(rotation.Authorities, a.name) {
			continue
		}
		var c bool
		var err error
		switch rotation.Phase {
		case nestv1.CAPhaseTrust:
			c, err = a.addTrust(data, cluster, lifetime)
		case nestv1.CAPhaseReissue, nestv1.CAPhaseGrace:
			c, err = a.swapSigner(data)
		case nestv1.CAPhaseRetire:
			c, err = a.retire(data)
		}
		if err != nil {
			return false, fmt.Errorf("CA rotation %s, phase %s, authority %s: %w", rotation.Request, rotation.Phase, a.name, err)
		}
		changed = changed || c
	}
	return changed, nil
}

// bundleLen is how many certificates or public keys the bundle holds.
func (a rotatable) bundleLen(data map[string][]byte) int {
	if a.publicKeys {
		keys, _ := pki.ParsePublicKeys(data[a.bundle])
		return len(keys)
	}
	certs, _ := pki.ParseCertificates(data[a.bundle])
	return len(certs)
}

// addTrust makes the new CA (key) and adds it to the bundle, while the
// bundle holds the old one alone.
func (a rotatable) addTrust(data map[string][]byte, cluster string, lifetime time.Duration) (bool, error) {
	if len(data[nextKey(a.key)]) > 0 || a.bundleLen(data) != 1 {
		return false, nil
	}
	if a.publicKeys {
		priv, pub, err := pki.NewServiceAccountKey()
		if err != nil {
			return false, err
		}
		data[nextKey(a.key)] = priv
		data[a.bundle] = append(bytes.Clone(data[a.bundle]), pub...)
		return true, nil
	}
	ca, err := pki.NewCAFor(fmt.Sprintf("%s-%s-%d", a.prefix, cluster, time.Now().Unix()), lifetime)
	if err != nil {
		return false, err
	}
	data[nextKey(a.key)] = ca.KeyPEM
	data[a.bundle] = append(bytes.Clone(data[a.bundle]), ca.CertPEM...)
	return true, nil
}

// swapSigner makes the new key the one that signs, first in the bundle;
// for the cluster CA it also cross-signs the new CA by the old.
func (a rotatable) swapSigner(data map[string][]byte) (bool, error) {
	next := data[nextKey(a.key)]
	if len(next) == 0 {
		return false, nil
	}
	if a.publicKeys {
		key, err := pki.ParsePrivateKey(next)
		if err != nil {
			return false, err
		}
		if err := a.orderPublicKeys(data, key.Public()); err != nil {
			return false, err
		}
	} else {
		old, err := pki.LoadCA(pki.KeyPair{CertPEM: data[a.bundle], KeyPEM: data[a.key]})
		if err != nil {
			return false, err
		}
		fresh, err := pki.LoadCA(pki.KeyPair{CertPEM: data[a.bundle], KeyPEM: next})
		if err != nil {
			return false, err
		}
		if a.name == nestv1.CACluster {
			if data[CACrossCert], err = old.CrossSign(fresh.Certificate()); err != nil {
				return false, err
			}
		}
		data[a.bundle] = signerFirst(data[a.bundle], fresh)
	}
	data[a.key] = next
	delete(data, nextKey(a.key))
	return true, nil
}

// retire leaves the signer alone in the bundle and drops the cross-signed
// certificate.
func (a rotatable) retire(data map[string][]byte) (bool, error) {
	changed := false
	if _, ok := data[CACrossCert]; ok && a.name == nestv1.CACluster {
		delete(data, CACrossCert)
		changed = true
	}
	if a.bundleLen(data) <= 1 {
		return changed, nil
	}
	if a.publicKeys {
		key, err := pki.ParsePrivateKey(data[a.key])
		if err != nil {
			return false, err
		}
		pub, err := pki.EncodePublicKeys(key.Public())
		if err != nil {
			return false, err
		}
		data[a.bundle] = pub
		return true, nil
	}
	ca, err := pki.LoadCA(pki.KeyPair{CertPEM: data[a.bundle], KeyPEM: data[a.key]})
	if err != nil {
		return false, err
	}
	data[a.bundle] = ca.CertificatePEM()
	return true, nil
}

// orderPublicKeys puts first the public key that signs from now on.
func (a rotatable) orderPublicKeys(data map[string][]byte, signer crypto.PublicKey) error {
	keys, err := pki.ParsePublicKeys(data[a.bundle])
	if err != nil {
		return err
	}
	slices.SortStableFunc(keys, func(x, _ crypto.PublicKey) int {
		if pki.SamePublicKey(x, signer) {
			return -1
		}
		return 0
	})
	out, err := pki.EncodePublicKeys(keys...)
	data[a.bundle] = out
	return err
}

// signerFirst is the bundle with ca's certificate first, the others after
// it in their order.
func signerFirst(bundle []byte, ca *pki.CA) []byte {
	certs, _ := pki.ParseCertificates(bundle)
	out := ca.CertificatePEM()
	for _, c := range certs {
		if !c.Equal(ca.Certificate()) {
			out = append(out, pki.EncodeCertificates(c)...)
		}
	}
	return out
}

// chainServing appends the cross-signed cluster CA (CACrossCert), while
// there is one, to the API server's certificate, and drops it after.
func chainServing(data map[string][]byte) bool {
	certs, err := pki.ParseCertificates(data[APIServerCert])
	if err != nil {
		return false
	}
	want := append(pki.EncodeCertificates(certs[0]), data[CACrossCert]...)
	if bytes.Equal(want, data[APIServerCert]) {
		return false
	}
	data[APIServerCert] = want
	return true
}

// CARotationDue lists the authorities of data whose signing CA has a third
// of its life or less left at now: nest-manager rotates them before they
// expire. The service-account key never expires.
func CARotationDue(data map[string][]byte, now time.Time) []nestv1.CAName {
	var out []nestv1.CAName
	for _, a := range rotatables {
		if a.publicKeys {
			continue
		}
		ca, err := pki.LoadCA(pki.KeyPair{CertPEM: data[a.bundle], KeyPEM: data[a.key]})
		if err != nil {
			continue
		}
		c := ca.Certificate()
		if c.NotAfter.Sub(now) < c.NotAfter.Sub(pki.IssuedAt(c))/3 {
			out = append(out, a.name)
		}
	}
	return out
}

// MaxCARotationGrace is the longest grace a CA rotation may ask for.
const MaxCARotationGrace = 365 * 24 * time.Hour

// ParseCARotationRequest reads nestv1.AnnotationRotateCA's value and
// returns the rotation it asks for, in phase Trust from now, with its
// authorities in nestv1.CANames' order and its grace defaulted. The error
// names the field at fault and what it takes.
func ParseCARotationRequest(raw string, now time.Time) (*nestv1.CARotation, error) {
	var req nestv1.CARotationRequest
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		return nil, fmt.Errorf(`annotation %s is not {"request": ..., "authorities": [...], "grace": "24h"}: %w`, nestv1.AnnotationRotateCA, err)
	}
	if req.Request == "" || len(req.Request) > 64 {
		return nil, fmt.Errorf("annotation %s: request must be 1 to 64 characters, such as a time (it is %d)", nestv1.AnnotationRotateCA, len(req.Request))
	}
	rot := &nestv1.CARotation{Request: req.Request, Phase: nestv1.CAPhaseTrust, PhaseTime: metav1.NewTime(now.Truncate(time.Second)),
		Grace: metav1.Duration{Duration: nestv1.DefaultCARotationGrace}}
	if req.Grace != nil {
		if req.Grace.Duration < 0 || req.Grace.Duration > MaxCARotationGrace {
			return nil, fmt.Errorf("annotation %s: grace %s must be from 0s to %s", nestv1.AnnotationRotateCA, req.Grace.Duration, MaxCARotationGrace)
		}
		rot.Grace = *req.Grace
	}
	for _, a := range req.Authorities {
		if !slices.Contains(nestv1.CANames, a) {
			return nil, fmt.Errorf("annotation %s: authority %q is none of %v", nestv1.AnnotationRotateCA, a, nestv1.CANames)
		}
	}
	for _, a := range nestv1.CANames {
		if len(req.Authorities) == 0 || slices.Contains(req.Authorities, a) {
			rot.Authorities = append(rot.Authorities, a)
		}
	}
	return rot, nil
}

// CANameList is names joined by ", ", for messages.
func CANameList(names []nestv1.CAName) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}
