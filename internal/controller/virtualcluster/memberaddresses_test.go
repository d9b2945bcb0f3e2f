package virtualcluster

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/pki"
)

// The tenant API server's certificate names the addresses at which its
// pods in member clusters reach it, and follows a change of them.
func TestServingCertificateNamesTheMemberAddressesOfItsGrants(t *testing.T) {
	ctx := context.Background()
	ensureNode(t)
	mc := &nestv1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "certpool"},
		Spec: nestv1.MemberClusterSpec{
			KubeconfigSecretRef: nestv1.SecretKeyRef{Namespace: "nest-system", Name: "nest-member-certpool"},
			Network:             nestv1.MemberNetwork{APIServerAddress: "lb.certpool.example:6443", DNSAddress: "10.20.0.10", NodePortAddress: "10.20.0.11"},
		},
	}
	if err := k8sClient.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), mc) })
	ns := newNamespace(t)
	gpus := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "granted", Namespace: ns},
		Spec: nestv1.VirtualClusterSpec{Members: []nestv1.MemberGrant{{Name: "certpool", Resources: gpus}, {Name: "not-registered", Resources: gpus}}}}
	if err := k8sClient.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	n := controlplane.NamesOf(vc)
	names := func(hosts ...string) func() error {
		return func() error {
			var secret corev1.Secret
			if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: n.PKISecret()}, &secret); err != nil {
				return err
			}
			cert, err := pki.ParseCertificate(secret.Data[controlplane.APIServerCert])
			if err != nil {
				return err
			}
			for _, h := range hosts {
				if err := cert.VerifyHostname(h); err != nil {
					return fmt.Errorf("serving certificate: %w (DNS %v, IPs %v)", err, cert.DNSNames, cert.IPAddresses)
				}
			}
			return nil
		}
	}
	eventually(t, "the certificate names the member's API server host and node-port address", names("lb.certpool.example", "10.20.0.11", nodeIP))

	mc.Spec.Network.NodePortAddress = "10.20.0.12"
	if err := k8sClient.Update(ctx, mc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the certificate follows the member's new node-port address", names("10.20.0.12", "lb.certpool.example"))
}

func TestMemberAddressesOf(t *testing.T) {
	mc := &nestv1.MemberCluster{Spec: nestv1.MemberClusterSpec{Network: nestv1.MemberNetwork{APIServerAddress: "[2001:db8::5]:6443"}}}
	if got := controlplane.MemberAddressesOf(mc); len(got) != 1 || got[0] != "2001:db8::5" {
		t.Errorf("addresses %v; want the IPv6 host alone", got)
	}
}
