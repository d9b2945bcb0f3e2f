package nodepromotion

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"github.com/nestdev/nest/internal/addons"
)

// nodesGroup is the group of every node's client certificate.
const nodesGroup = "system:nodes"

// kubeletRequest is what a kubelet's certificate signing request must be,
// beyond what every one must be, for kubeletRequestProblem to pass it.
type kubeletRequest struct {
	// signer the request must name.
	signer string
	// asker is the user who must ask, and askerGroup, when set, a group
	// they must ask in.
	asker, askerGroup string
	// usage is the one auth usage allowed: server or client auth.
	usage certificatesv1.KeyUsage
	// names says why the names in req are not allowed, or "" when they are.
	names func(req *x509.CertificateRequest) string
}

// kubeletRequestProblem says why csr is not the request want describes of
// node's kubelet, or "" when it is. Every such request names want.signer,
// is asked by want.asker (in want.askerGroup, when set), holds one PEM
// certificate request for subject system:node:<node> in system:nodes with
// names want.names passes, and asks for no usage but digital signature,
// key encipherment and want.usage. The checks run in that order, and the
// first that fails says why.
func kubeletRequestProblem(csr *certificatesv1.CertificateSigningRequest, node string, want kubeletRequest) string {
	if csr.Spec.SignerName != want.signer {
		return "signer " + csr.Spec.SignerName
	}
	if csr.Spec.Username != want.asker || want.askerGroup != "" && !slices.Contains(csr.Spec.Groups, want.askerGroup) {
		return fmt.Sprintf("asked by %s in %v", csr.Spec.Username, csr.Spec.Groups)
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return "no PEM certificate request"
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return "unparseable request: " + err.Error()
	}
	if req.Subject.CommonName != "system:node:"+node || !slices.Equal(req.Subject.Organization, []string{nodesGroup}) {
		return fmt.Sprintf("subject %q in %v", req.Subject.CommonName, req.Subject.Organization)
	}
	if p := want.names(req); p != "" {
		return p
	}
	for _, u := range csr.Spec.Usages {
		if u != certificatesv1.UsageDigitalSignature && u != certificatesv1.UsageKeyEncipherment && u != want.usage {
			return "usage " + string(u)
		}
	}
	return ""
}

// servingRequestProblem says why csr is not a kubelet serving certificate
// request of node at ip alone, or "" when it is: signer
// kubernetes.io/kubelet-serving, asked by system:node:<node>, for subject
// system:node:<node> in system:nodes, naming only the node and its address,
// for server auth. The tenant's controller-manager signs what is approved.
func servingRequestProblem(csr *certificatesv1.CertificateSigningRequest, node, ip string) string {
	return kubeletRequestProblem(csr, node, kubeletRequest{
		signer: certificatesv1.KubeletServingSignerName,
		asker:  "system:node:" + node, askerGroup: nodesGroup,
		usage: certificatesv1.UsageServerAuth,
		names: func(req *x509.CertificateRequest) string {
			if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
				return "email or URI names"
			}
			for _, name := range req.DNSNames {
				if name != node {
					return "DNS name " + name
				}
			}
			want := net.ParseIP(ip)
			for _, addr := range req.IPAddresses {
				if !addr.Equal(want) {
					return "IP address " + addr.String()
				}
			}
			return ""
		},
	})
}

// approveServing approves the pending kubelet serving certificate requests
// of node at ip in the tenant, and only those servingRequestProblem passes.
// It returns how many it approved.
func approveServing(ctx context.Context, cs kubernetes.Interface, node, ip string) (int, error) {
	return approveWhere(ctx, cs, func(csr *certificatesv1.CertificateSigningRequest) bool {
		return servingRequestProblem(csr, node, ip) == ""
	}, "NestNodeServing", "nest-manager approves serving certificates of promoted node "+node+" for its own name and address")
}

// approveWhere approves the undecided requests in cs's cluster that accept
// passes, with reason and message, and returns how many it approved.
func approveWhere(ctx context.Context, cs kubernetes.Interface, accept func(*certificatesv1.CertificateSigningRequest) bool, reason, message string) (int, error) {
	list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list certificate signing requests: %w", err)
	}
	approved := 0
	for i := range list.Items {
		csr := &list.Items[i]
		if decided(csr) || !accept(csr) {
			continue
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: reason, Message: message,
		})
		if _, err := cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
			return approved, fmt.Errorf("approve certificate signing request %s: %w", csr.Name, err)
		}
		approved++
	}
	return approved, nil
}

func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed {
			return true
		}
	}
	return false
}

// servingIssued reports whether the tenant has signed a serving certificate
// for node's kubelet, asked for since since, without which the API server
// cannot reach it (logs, exec). An older one is of an earlier stay.
func servingIssued(ctx context.Context, cs kubernetes.Interface, node string, since time.Time) (bool, error) {
	list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, fmt.Errorf("list certificate signing requests: %w", err)
	}
	for _, csr := range list.Items {
		if csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && csr.Spec.Username == "system:node:"+node && len(csr.Status.Certificate) > 0 &&
			!csr.CreationTimestamp.Time.Before(since.Truncate(time.Second)) {
			return true, nil
		}
	}
	return false, nil
}

// nodeClientRequestProblem says why csr is not node's kubelet asking, with
// the bootstrap token tokenID, for its own client certificate, or "" when
// it is: signer kubernetes.io/kube-apiserver-client-kubelet, asked by
// system:bootstrap:<tokenID>, for subject system:node:<node> in
// system:nodes, with no names, for client auth.
func nodeClientRequestProblem(csr *certificatesv1.CertificateSigningRequest, node, tokenID string) string {
	return kubeletRequestProblem(csr, node, kubeletRequest{
		signer: certificatesv1.KubeAPIServerClientKubeletSignerName,
		asker:  "system:bootstrap:" + tokenID,
		usage:  certificatesv1.UsageClientAuth,
		names: func(req *x509.CertificateRequest) string {
			if len(req.DNSNames) > 0 || len(req.IPAddresses) > 0 || len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
				return "names in a client certificate"
			}
			return ""
		},
	})
}

// ApproveNodeClient approves the pending requests in which node's kubelet,
// with a bootstrap token Nest issued for node (a Secret labelled
// addons.LabelBootstrapFor=node in kube-system), asks cs's cluster for its
// own client certificate, and no other; the controller-manager signs them.
// It returns how many it approved. Neither the host nor a tenant
// auto-approves bootstrap requests (addons.NodeBootstrapRBAC), so a token
// handed to a node can only ever give that node's name.
func ApproveNodeClient(ctx context.Context, cs kubernetes.Interface, node string) (int, error) {
	tokens, err := cs.CoreV1().Secrets(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(labels.Set{addons.LabelBootstrapFor: node}).String(),
	})
	if err != nil {
		return 0, fmt.Errorf("list the bootstrap tokens of node %s: %w", node, err)
	}
	if len(tokens.Items) == 0 {
		return 0, nil
	}
	return approveWhere(ctx, cs, func(csr *certificatesv1.CertificateSigningRequest) bool {
		return slices.ContainsFunc(tokens.Items, func(s corev1.Secret) bool {
			return s.Type == bootstrapapi.SecretTypeBootstrapToken && nodeClientRequestProblem(csr, node, string(s.Data[bootstrapapi.BootstrapTokenIDKey])) == ""
		})
	}, "NestNodeClient", "nest-manager approves node "+node+"'s client certificate, asked with a bootstrap token it issued for it")
}

// deleteBootstrapTokens deletes the bootstrap token Secrets made for node
// in cs's cluster, once it has joined: they would let anyone who read them
// off the node ask for its certificate again.
func deleteBootstrapTokens(ctx context.Context, cs kubernetes.Interface, node string) error {
	err := cs.CoreV1().Secrets(metav1.NamespaceSystem).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{addons.LabelBootstrapFor: node}).String()})
	if err != nil {
		return fmt.Errorf("delete the bootstrap tokens of node %s: %w", node, err)
	}
	return nil
}
