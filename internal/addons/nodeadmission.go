package addons

import (
	"context"
	"encoding/json"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AssignedNodesName names the ValidatingAdmissionPolicy, its binding and
// its parameter, the ConfigMap kube-system/nest-assigned-nodes whose keys
// are the nodes Nest moved into the cluster (each one's value is its host
// address, for people reading it; the policy reads the keys only).
const AssignedNodesName = "nest-assigned-nodes"

// The policy's CEL. Its message says what to do, in the kubelet's log and
// the tenant's audit log.
const (
	nodeAdmissionMatch      = "'system:nodes' in request.userInfo.groups"
	nodeAdmissionExpression = "has(params.data) && object.metadata.name in params.data"
	nodeAdmissionMessage    = "'node ' + object.metadata.name + ' is not assigned to this cluster by Nest: kubelets may register " +
		"and update only the nodes Nest moved here (the keys of ConfigMap kube-system/" + AssignedNodesName + "); to add a " +
		"dedicated node, have it assigned to this VirtualCluster on the host (spec.promoteResources: nodeInfos or nodeCount) " +
		"and Nest joins it'"
)

// NodeAdmission returns what limits a cluster's kubelets to the nodes Nest
// assigned to it. nest-manager approves a bootstrap request only for the
// node its token was made for (NodeBootstrapRBAC), but the tenant is
// cluster-admin of its own cluster and may mint node certificates of any
// name with its own CSRs or tokens; this policy keeps such a kubelet from
// registering a Node, or writing one that exists (such as nest-syncer's
// virtual nodes), under a name Nest did not assign. The parameter comes first, so the binding never exists
// without it; a kubelet's request without it is refused
// (parameterNotFoundAction Deny), as is one the API server cannot evaluate
// (failurePolicy Fail).
//
// CREATE cannot be the only operation: a Node's name is immutable, so no
// kubelet renames its way in, but one with an unassigned name could still
// update a Node of that name that someone else made. The status
// subresource is matched too, where kubelets write addresses and
// conditions. Other users (the tenant's admin, nest-syncer, the
// controller-manager) are not kubelets and are not matched.
//
// The policy cannot see a certificate request's subject (CEL does not
// parse the PEM request), which is why approval is nest-manager's; the
// policy stops what another certificate may do to Nodes.
func NodeAdmission() []client.Object {
	return []client.Object{
		&corev1.ConfigMap{ObjectMeta: assignedNodesMeta()},
		&admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: AssignedNodesName},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				ParamKind:        &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
				FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
				MatchConstraints: nodeWrites(),
				MatchConditions: []admissionregistrationv1.MatchCondition{{
					Name: "kubelets", Expression: nodeAdmissionMatch,
				}},
				Validations: []admissionregistrationv1.Validation{{
					Expression:        nodeAdmissionExpression,
					Message:           "the node is not assigned to this cluster by Nest (ConfigMap kube-system/" + AssignedNodesName + " lists those that are)",
					MessageExpression: nodeAdmissionMessage,
					Reason:            ptr.To(metav1.StatusReasonForbidden),
				}},
			},
		},
		&admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: AssignedNodesName},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: AssignedNodesName,
				ParamRef: &admissionregistrationv1.ParamRef{
					Name: AssignedNodesName, Namespace: metav1.NamespaceSystem,
					ParameterNotFoundAction: ptr.To(admissionregistrationv1.DenyAction),
				},
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		},
	}
}

// nodeWrites matches every create and update of a Node and of its status,
// where kubelets write addresses and conditions.
func nodeWrites() *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{
		ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes", "nodes/status"},
				},
			},
		}},
	}
}

func assignedNodesMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: AssignedNodesName, Namespace: metav1.NamespaceSystem}
}

// AssignNode lists node, at nodeIP, in the parameter of NodeAdmission, and
// makes the ConfigMap if there is none. It patches the one key, so writers
// of other nodes never conflict and no version is needed.
func AssignNode(ctx context.Context, c client.Client, node, nodeIP string) error {
	err := patchAssigned(ctx, c, node, &nodeIP)
	if apierrors.IsNotFound(err) {
		cm := &corev1.ConfigMap{ObjectMeta: assignedNodesMeta(), Data: map[string]string{node: nodeIP}}
		if err = c.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
			err = patchAssigned(ctx, c, node, &nodeIP)
		}
	}
	if err != nil {
		return fmt.Errorf("list node %s in ConfigMap %s/%s: %w", node, metav1.NamespaceSystem, AssignedNodesName, err)
	}
	return nil
}

// UnassignNode removes node from the parameter of NodeAdmission; a
// ConfigMap that is gone lists nothing already.
func UnassignNode(ctx context.Context, c client.Client, node string) error {
	if err := patchAssigned(ctx, c, node, nil); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove node %s from ConfigMap %s/%s: %w", node, metav1.NamespaceSystem, AssignedNodesName, err)
	}
	return nil
}

// patchAssigned sets node's key to *value, or removes it when value is nil
// (null in a JSON merge patch).
func patchAssigned(ctx context.Context, c client.Client, node string, value *string) error {
	body, err := json.Marshal(map[string]map[string]*string{"data": {node: value}})
	if err != nil {
		return err
	}
	return c.Patch(ctx, &corev1.ConfigMap{ObjectMeta: assignedNodesMeta()}, client.RawPatch(types.MergePatchType, body))
}
