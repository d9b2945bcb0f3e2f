package components

import (
	"slices"
	"strconv"
)

// ClientComponent is a control-plane component that works through the API
// server: kube-controller-manager or kube-scheduler.
type ClientComponent struct {
	// Kubeconfig is the file it reaches the API server with. It also
	// delegates the authentication and authorization of its own HTTPS
	// endpoint (/healthz, /metrics) to the API server through it.
	Kubeconfig string
	// BindAddress is where that endpoint listens.
	BindAddress string
	// LeaderElect makes replicas elect a leader through a Lease in
	// kube-system, so only one acts; a single replica needs none and
	// starts without waiting for a previous one's lease to lapse.
	LeaderElect bool
}

// flags are the flags both client components take.
func (c ClientComponent) flags() Flags {
	return Flags{
		{"kubeconfig", c.Kubeconfig}, {"authentication-kubeconfig", c.Kubeconfig}, {"authorization-kubeconfig", c.Kubeconfig},
		{"bind-address", c.BindAddress},
		{"leader-elect", strconv.FormatBool(c.LeaderElect)},
		{"profiling", "false"},
	}
}

// ControllerManagerFlags is the kube-controller-manager command line both
// control planes share; pki holds the files it names. signerCert is the
// file of pki with the CSR signer's certificate alone, which the signer
// requires (a trust bundle, ca.crt while a CA rotates, holds more).
func ControllerManagerFlags(c ClientComponent, pki PKIDir, signerCert string) Flags {
	return slices.Concat(c.flags(), Flags{
		// Published in every namespace as kube-root-ca.crt, which projected
		// service-account volumes mount as ca.crt.
		{"root-ca-file", pki.Path(CACert)},
		{"service-account-private-key-file", pki.Path(ServiceAccountKey)},
		// The CSR API's signer.
		{"cluster-signing-cert-file", pki.Path(signerCert)}, {"cluster-signing-key-file", pki.Path(CAKey)},
		{"use-service-account-credentials", "true"},
		// Bootstrap tokens (--enable-bootstrap-token-auth) need these two,
		// which are off by default.
		{"controllers", "*,bootstrapsigner,tokencleaner"},
	})
}

// SchedulerFlags is the kube-scheduler command line both control planes share.
func SchedulerFlags(c ClientComponent) Flags { return c.flags() }
