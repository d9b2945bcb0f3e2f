package membergrant

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionregistrationv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/syncer/contract"
)

// The network injector of a grant (served by nest-syncer; see
// internal/syncer/injector.go): nest-manager issues its certificate and
// registers it in the member with a MutatingWebhookConfiguration for the
// grant's namespace alone. Only when the MemberCluster names
// network.nodePortAddress: the webhook is reached through the host's node
// ports.

// InjectorWebhookName is the webhook's name in every configuration.
const InjectorWebhookName = "inject.nest.dev"

// InjectorConfigName is the member's MutatingWebhookConfiguration of the
// grant whose namespace is ns.
func InjectorConfigName(ns string) string { return "nest-injector-" + ns }

// injectorHost is the name the injector's certificate is for: the member
// Service the webhook configuration calls.
func injectorHost(ns string) string { return contract.MemberInjectorService + "." + ns + ".svc" }

// injectorCert returns the injector's certificate (followed by its CA) and
// key for namespace ns, and when it is to be renewed: old's, when it is
// for ns and not due by the tenant's certificate renewal r (its leaf
// lifetime, renewal point and rotations, as every leaf of the tenant),
// else a new pair: a CA of its own, which only this webhook trusts, and a
// serving certificate it signs, both for r.LeafLifetime.
func injectorCert(old *contract.MemberPlacement, ns string, r controlplane.Renewal) (cert, key []byte, renewAt time.Time, err error) {
	if old != nil && old.Namespace == ns && len(old.InjectorKey) > 0 {
		if c, err := pki.ParseCertificate(old.InjectorCert); err == nil && c.VerifyHostname(injectorHost(ns)) == nil && !r.Due(c, nil) {
			return old.InjectorCert, old.InjectorKey, r.RenewAt(c), nil
		}
	}
	lifetime := cmp.Or(r.LeafLifetime, pki.LeafValidity)
	ca, err := pki.NewCAFor("nest-injector-"+ns, lifetime)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	pair, err := ca.Issue(pki.CertSpec{CommonName: injectorHost(ns), DNSNames: []string{injectorHost(ns)}, Usage: pki.ServerAuth, Validity: lifetime})
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	leaf, err := pki.ParseCertificate(pair.CertPEM)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	return append(pair.CertPEM, ca.CertPEM...), pair.KeyPEM, r.RenewAt(leaf), nil
}

// applyInjector registers the injector for namespace ns in the member: every
// pod created there passes it, and none is created while it does not
// answer (failurePolicy Fail), so no pod escapes the tenant's addresses or
// its labels' check.
func applyInjector(ctx context.Context, m *memberConn, vc *nestv1.VirtualCluster, ns string, caBundle []byte) *grantFailure {
	hook := admissionregistrationv1ac.MutatingWebhook().WithName(InjectorWebhookName).
		WithClientConfig(admissionregistrationv1ac.WebhookClientConfig().WithCABundle(caBundle...).
			WithService(admissionregistrationv1ac.ServiceReference().WithNamespace(ns).WithName(contract.MemberInjectorService).
				WithPath(contract.InjectorPath).WithPort(443))).
		WithRules(admissionregistrationv1ac.RuleWithOperations().WithOperations(admissionregistrationv1.Create).
			WithAPIGroups("").WithAPIVersions("v1").WithResources("pods").WithScope(admissionregistrationv1.NamespacedScope)).
		WithNamespaceSelector(metav1ac.LabelSelector().WithMatchLabels(map[string]string{corev1.LabelMetadataName: ns})).
		WithFailurePolicy(admissionregistrationv1.Fail).WithSideEffects(admissionregistrationv1.SideEffectClassNone).
		WithMatchPolicy(admissionregistrationv1.Equivalent).WithAdmissionReviewVersions("v1").WithTimeoutSeconds(5)
	cfg := admissionregistrationv1ac.MutatingWebhookConfiguration(InjectorConfigName(ns)).WithLabels(MemberLabels(vc)).WithWebhooks(hook)
	if _, err := m.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Apply(ctx, cfg,
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		return memberFailure(m.config.Host, "apply MutatingWebhookConfiguration "+InjectorConfigName(ns), err)
	}
	return nil
}

// deleteInjector removes the grant's webhook configuration: before its
// namespace goes, or when the member no longer has a node-port address.
// A configuration without Nest's labels for vc is left alone, and so is
// one the member's kubeconfig may not read: a member registered without a
// node-port address need not grant that, and never had one.
func deleteInjector(ctx context.Context, m *memberConn, vc *nestv1.VirtualCluster, ns string) *grantFailure {
	name := InjectorConfigName(ns)
	cfg, err := m.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return nil
	}
	if err != nil {
		return memberFailure(m.config.Host, "get MutatingWebhookConfiguration "+name, err)
	}
	if !IsOurs(cfg.Labels, vc) {
		return nil
	}
	if err := m.cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return memberFailure(m.config.Host, "delete MutatingWebhookConfiguration "+name, err)
	}
	return nil
}

// injectorProbe is the pod a dry run creates in the grant's namespace to
// see the injector at work: labelled as the tenant's, and within Pod
// Security "restricted".
func injectorProbe(vc *nestv1.VirtualCluster) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "nest-injector-probe-",
			Labels: map[string]string{contract.LabelTenantOf: vc.Name, contract.LabelTenantNamespace: metav1.NamespaceDefault}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "probe", Image: "nest-injector-probe",
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
}

// probeInjector asks the member, with a server-side dry run that stores
// nothing, to create injectorProbe in ns, and reports whether the injector
// set the tenant's API server on it, or why not. A refusal by the
// namespace's quota comes after the mutating webhooks (quota is checked
// last), so it shows the injector answered.
func probeInjector(ctx context.Context, m *memberConn, vc *nestv1.VirtualCluster, ns string) (bool, string) {
	pod, err := m.cs.CoreV1().Pods(ns).Create(ctx, injectorProbe(vc), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err != nil && strings.Contains(err.Error(), "exceeded quota"):
		return true, ""
	case err != nil:
		return false, fmt.Sprintf("a dry-run pod in %s was refused: %v", ns, err)
	}
	for _, e := range pod.Spec.Containers[0].Env {
		if e.Name == "KUBERNETES_SERVICE_HOST" && pod.Spec.DNSPolicy == corev1.DNSNone {
			return true, ""
		}
	}
	return false, fmt.Sprintf("a dry-run pod in %s came back without the tenant's API server and DNS: the webhook %s did not run", ns, InjectorConfigName(ns))
}
