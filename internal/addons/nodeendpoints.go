package addons

import (
	"bytes"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// NodeEndpointsName names the ValidatingAdmissionPolicy and binding of
// NodeEndpoints. The suffix is the one upstream reserves for policies
// loaded from files (manifest-based admission control): no API request can
// create, change or delete an object of that name, not even the tenant's
// cluster-admin's.
const NodeEndpointsName = "nest-node-endpoints.static.k8s.io"

// NodeEndpointsFeatureGate is the kube-apiserver feature gate, alpha and off
// by default in Kubernetes 1.36, that loads admission policies from files.
const NodeEndpointsFeatureGate = "ManifestBasedAdmissionControlConfig"

// NodeEndpointsRules are what NodeEndpoints needs to know of the cluster.
type NodeEndpointsRules struct {
	// Owner is the user name that writes the virtual nodes (nest-syncer's):
	// the policy never applies to it. It also keeps the ClusterAdmins
	// binding, which ClusterAdminsGuard lets no one else change.
	Owner string
	// VirtualNode is the name of the virtual node, and MemberNodePrefix
	// begins the names of member nodes: the nodes only Owner may point
	// anywhere, not even a kubelet of that name.
	VirtualNode, MemberNodePrefix string
}

// NodeEndpoints returns the ValidatingAdmissionPolicy and its binding that
// keep a tenant from steering its own API server with Node objects. The API
// server dials a node's status.addresses at status.daemonEndpoints'
// kubelet port for logs, exec, port-forward and the node proxy, so whoever
// writes them chooses where the control plane connects. The policy refuses
// anyone but Owner:
//   - a Node created with status.addresses or a kubelet port;
//   - a change to status.addresses or status.daemonEndpoints of any Node
//     (on the status subresource; the API server resets status on the main
//     resource itself);
//
// except that a kubelet (group system:nodes, which NodeRestriction keeps to
// its own Node) writes the endpoints of its own dedicated node, never a
// virtual or member node's. Taints, labels, cordoning, conditions and
// extended resources stay the tenant's: conformance specs write them.
//
// Impersonating Owner gets through (a cluster-admin may impersonate
// anyone), which is why the API server's own traffic to nodes also passes
// an egress proxy; this policy keeps honest mistakes and plain patches out.
func NodeEndpoints(r NodeEndpointsRules) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	const typeGroup = "admissionregistration.k8s.io/v1"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: typeGroup, Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: NodeEndpointsName},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: nodeWrites(),
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "not-the-owner", Expression: fmt.Sprintf("request.userInfo.username != %s", celString(r.Owner)),
			}},
			Variables: []admissionregistrationv1.Variable{
				{Name: "nestNode", Expression: fmt.Sprintf("object.metadata.name == %s || object.metadata.name.startsWith(%s)", celString(r.VirtualNode), celString(r.MemberNodePrefix))},
				{Name: "ownKubelet", Expression: "'system:nodes' in request.userInfo.groups && !variables.nestNode"},
				{Name: "addresses", Expression: "object.?status.?addresses.orValue([])"},
				{Name: "kubeletPort", Expression: "object.?status.?daemonEndpoints.?kubeletEndpoint.?Port.orValue(0)"},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "variables.ownKubelet || (request.operation == 'CREATE' ? " +
					"size(variables.addresses) == 0 && variables.kubeletPort == 0 : " +
					"variables.addresses == oldObject.?status.?addresses.orValue([]) && " +
					"variables.kubeletPort == oldObject.?status.?daemonEndpoints.?kubeletEndpoint.?Port.orValue(0))",
				Message: "status.addresses and status.daemonEndpoints of Nodes are Nest's: they say where the API server connects, " +
					"and only nest-syncer (for its virtual and member nodes) and a node's own kubelet write them; " +
					"leave them out (labels, taints, conditions and capacity are yours to change)",
				Reason: ptr.To(metav1.StatusReasonForbidden),
			}},
		},
	}
	return policy, denyBinding(NodeEndpointsName)
}

// denyBinding binds the policy name to every request it matches, under
// the same name, denying what it refuses.
func denyBinding(name string) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
}

// celString quotes s as a CEL string literal.
func celString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// Files of a tenant API server's static admission configuration
// (StaticAdmission).
const (
	// AdmissionConfigFile is the AdmissionConfiguration, the file
	// --admission-control-config-file names.
	AdmissionConfigFile = "admission.yaml"
	// StaticPoliciesDir is the directory, beside AdmissionConfigFile, of
	// the policy manifests; nothing else may be in it.
	StaticPoliciesDir = "policies"
	// NodeEndpointsFile is NodeEndpoints' manifest in StaticPoliciesDir.
	NodeEndpointsFile = "node-endpoints.yaml"
	// ClusterAdminsGuardFile is ClusterAdminsGuard's manifest in
	// StaticPoliciesDir.
	ClusterAdminsGuardFile = "cluster-admins.yaml"
)

// StaticAdmission returns the files of a tenant API server's static
// admission configuration, by their path relative to dir, the directory
// the API server reads them from: AdmissionConfigFile, which points the
// ValidatingAdmissionPolicy plugin at dir/StaticPoliciesDir, and there the
// manifests of NodeEndpoints and of ClusterAdminsGuard, whose owner is
// r.Owner too (nest-syncer writes both the nodes and the binding). The API
// server needs NodeEndpointsFeatureGate, and refuses to start when a file
// is invalid.
func StaticAdmission(dir string, r NodeEndpointsRules) (map[string][]byte, error) {
	config, err := yaml.Marshal(map[string]any{
		"apiVersion": "apiserver.config.k8s.io/v1",
		"kind":       "AdmissionConfiguration",
		"plugins": []map[string]any{{
			"name": "ValidatingAdmissionPolicy",
			"configuration": map[string]any{
				"apiVersion":         "apiserver.config.k8s.io/v1",
				"kind":               "ValidatingAdmissionPolicyConfiguration",
				"staticManifestsDir": strings.TrimSuffix(dir, "/") + "/" + StaticPoliciesDir,
			},
		}},
	})
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{AdmissionConfigFile: config}
	policy, binding := NodeEndpoints(r)
	if files[StaticPoliciesDir+"/"+NodeEndpointsFile], err = manifest(policy, binding); err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", NodeEndpointsName, err)
	}
	policy, binding = ClusterAdminsGuard(r.Owner)
	if files[StaticPoliciesDir+"/"+ClusterAdminsGuardFile], err = manifest(policy, binding); err != nil {
		return nil, fmt.Errorf("manifest of %s: %w", ClusterAdminsGuardName, err)
	}
	return files, nil
}

// manifest is objs as one YAML stream.
func manifest(objs ...any) ([]byte, error) {
	var out bytes.Buffer
	for i, obj := range objs {
		doc, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(doc)
	}
	return out.Bytes(), nil
}
