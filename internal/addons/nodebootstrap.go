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
// by TLS bootstrapping, as kubeadm grants them, but one:
//   - bootstrap tokens (group system:bootstrappers) may ask for a node client
//     certificate;
//   - nodes may renew their own client certificate;
//   - nodes may run kube-proxy with their own credential (system:node-proxier
//     reads Services, EndpointSlices and Nodes), so a joined node needs no
//     second credential.
//
// Unlike kubeadm's, no binding lets the controller-manager approve a
// bootstrap request by itself: it would approve any node name a token asks
// for, so a token handed to one node could get another's certificate (a
// host control-plane node's, or a tenant's virtual node's, whose pods'
// Secrets the Node authorizer then serves). nest-manager approves each
// request itself, only for the node the token was made for
// (ApproveNodeClient in package nodepromotion). The ClusterRoles are
// upstream's, from the API server's bootstrap policy.
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
		bind("nest:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes"),
		bind("nest:node-proxier", "system:node-proxier", "system:nodes"),
	}
}

// LabelBootstrapFor marks the bootstrap token Secrets Nest makes for a node
// with the node's name, so they are deleted once the node has joined.
const LabelBootstrapFor = "nest.dev/bootstrap-for"

// BootstrapToken is a new bootstrap token and the kube-system Secret that
// makes it valid: for authentication only, until now+ttl, after which the
// controller-manager's tokencleaner deletes it.
type BootstrapToken struct {
	// Token is "<id>.<secret>", what a kubelet's bootstrap kubeconfig holds.
	Token string
	// ID is the token's public half: a kubelet that uses it is
	// system:bootstrap:<ID>.
	ID     string
	Secret *corev1.Secret
}

// NewBootstrapToken generates a token for node, which description says
// what it is for. Its Secret carries LabelBootstrapFor.
func NewBootstrapToken(node, description string, ttl time.Duration, now time.Time) (BootstrapToken, error) {
	token, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return BootstrapToken{}, fmt.Errorf("generate a bootstrap token: %w", err)
	}
	id, secret := token[:bootstrapapi.BootstrapTokenIDBytes], token[bootstrapapi.BootstrapTokenIDBytes+1:]
	return BootstrapToken{Token: token, ID: id, Secret: &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstraputil.BootstrapTokenSecretName(id), Namespace: metav1.NamespaceSystem,
			Labels: map[string]string{LabelBootstrapFor: node}},
		Type: bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:               id,
			bootstrapapi.BootstrapTokenSecretKey:           secret,
			bootstrapapi.BootstrapTokenDescriptionKey:      description,
			bootstrapapi.BootstrapTokenExpirationKey:       now.Add(ttl).UTC().Format(time.RFC3339),
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
		},
	}}, nil
}
