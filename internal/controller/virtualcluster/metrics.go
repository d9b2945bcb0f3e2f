package virtualcluster

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
)

// certificateExpiry is each certificate's expiry, as Unix time in seconds,
// by VirtualCluster (namespace/name), Secret and key (controlplane.
// Certificates: a kubeconfig's as "<key>/<user>"; of a bundle, the first,
// which is served or signs), as cert-manager's
// certmanager_certificate_expiration_timestamp_seconds: alert on
// nest_certificate_expiry_seconds - time() < 7 * 86400.
var certificateExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "nest_certificate_expiry_seconds",
	Help: "When each certificate of a VirtualCluster expires, as Unix time in seconds.",
}, []string{"virtual_cluster", "secret", "key"})

// init registers the metric with controller-runtime's registry, which
// nest-manager's metrics endpoint serves.
func init() {
	metrics.Registry.MustRegister(certificateExpiry)
}

// recordCertificateExpiry sets the expiry of every certificate of the
// Secrets' data (name to data) of vc, and drops the series of its
// certificates that are gone.
func recordCertificateExpiry(vc *nestv1.VirtualCluster, data map[string]map[string][]byte) {
	var secrets []corev1.Secret
	for name, d := range data {
		secrets = append(secrets, corev1.Secret{Data: d})
		secrets[len(secrets)-1].Name = name
	}
	certs, err := controlplane.Certificates(secrets, time.Now())
	if err != nil {
		return
	}
	id := vc.Namespace + "/" + vc.Name
	certificateExpiry.DeletePartialMatch(prometheus.Labels{"virtual_cluster": id})
	for _, c := range certs {
		if c.Index > 0 {
			continue
		}
		certificateExpiry.WithLabelValues(id, c.Secret, c.Key).Set(float64(c.NotAfter.Unix()))
	}
}

// forgetCertificateExpiry drops every series of vc, once it is deleted.
func forgetCertificateExpiry(vc *nestv1.VirtualCluster) {
	certificateExpiry.DeletePartialMatch(prometheus.Labels{"virtual_cluster": vc.Namespace + "/" + vc.Name})
}
