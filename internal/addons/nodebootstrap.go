package addons

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NodeBootstrapRBAC returns the bindings with which kubelets join a cluster
// by TLS bootstrapping, as kubeadm grants them:
//   - bootstrap tokens (group system:bootstrappers) may ask for a node client
//     certificate, and the controller-manager approves those requests;
//   - nodes may renew their own client certificate;
//   - nodes may run kube-proxy with their own credential (system:node-proxier
//     reads Services, EndpointSlices and Nodes), so a joined node needs no
//     second credential.
//
// The ClusterRoles are upstream's, from the API server's bootstrap policy.
func NodeBootstrapRBAC() []client.Object {
	bind := func(name, role, group string) client.Object {
		return &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: group}},
		}
	}
	return []client.Object{
		bind("nest:kubelet-bootstrap", "system:node-bootstrapper", bootstrapapi.BootstrapDefaultGroup),
		bind("nest:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstrapapi.BootstrapDefaultGroup),
		bind("nest:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"),
		bind("nest:node-proxier", "system:node-proxier", "system:nodes"),
	}
}

// BootstrapToken is a new bootstrap token and the kube-system Secret that
// makes it valid: for authentication only, until now+ttl, after which the
// controller-manager's tokencleaner deletes it.
type BootstrapToken struct {
	// Token is "<id>.<secret>", what a kubelet's bootstrap kubeconfig holds.
	Token  string
	Secret *corev1.Secret
}

// NewBootstrapToken generates a token for description (which says what it
// is for, such as the node it lets join).
func NewBootstrapToken(description string, ttl time.Duration, now time.Time) (BootstrapToken, error) {
	token, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return BootstrapToken{}, fmt.Errorf("generate a bootstrap token: %w", err)
	}
	id, secret := token[:bootstrapapi.BootstrapTokenIDBytes], token[bootstrapapi.BootstrapTokenIDBytes+1:]
	return BootstrapToken{Token: token, Secret: &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstraputil.BootstrapTokenSecretName(id), Namespace: metav1.NamespaceSystem},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:               id,
			bootstrapapi.BootstrapTokenSecretKey:           secret,
			bootstrapapi.BootstrapTokenDescriptionKey:      description,
			bootstrapapi.BootstrapTokenExpirationKey:       now.Add(ttl).UTC().Format(time.RFC3339),
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
		},
	}}, nil
}
