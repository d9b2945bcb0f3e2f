package virtualcluster

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controlplane"
)

// observed is what one reconcile found, filled in by the phases in order. A
// phase that cannot finish leaves the later fields at their zero values.
type observed struct {
	// namespaceHolder, when set, is the other VirtualCluster that holds the
	// host namespace: this one gets nothing.
	namespaceHolder string
	// certificates is true once the PKI and component kubeconfig Secrets are right.
	certificates bool
	// pkiRolledOut: every control-plane replica runs the pod template of
	// the current PKI Secret and is ready.
	pkiRolledOut bool
	// hostObjects is true once the Service and StatefulSet exist.
	hostObjects bool
	// endpoint is the external API server URL; "" while a LoadBalancer has none.
	endpoint string
	// kubeconfig is true once the admin kubeconfig Secret and spec.kubeconfig are written.
	kubeconfig bool
	// podReady is true when the control-plane StatefulSet has a ready replica.
	podReady bool
	// readyReplicas is how many control-plane pods are ready.
	readyReplicas int32
	// available is true when the tenant API server answers /readyz.
	available bool
	// availableMessage says why it is not available.
	availableMessage string
	// nodesReady is true once the virtual node is Ready in the tenant cluster.
	nodesReady bool
	// nodesMessage says why it is not.
	nodesMessage string
}

// Condition reasons.
const (
	ReasonIssued             = "Issued"
	ReasonIssuing            = "Issuing"
	ReasonAvailable          = "Available"
	ReasonStarting           = "ControlPlaneStarting"
	ReasonWaitingForEndpoint = "WaitingForEndpoint"
	ReasonNodesReady         = "NodesReady"
	ReasonNodesNotReady      = "NodesNotReady"
	ReasonReady              = "Ready"
	ReasonNotReady           = "NotReady"
	// ReasonNamespaceInUse: another VirtualCluster holds the host namespace.
	ReasonNamespaceInUse = "NamespaceInUse"
)

// conditionsFor derives the VirtualCluster's conditions from what a reconcile
// observed. name and namespace name the VirtualCluster in messages.
func conditionsFor(o observed, generation int64, name, namespace string) []metav1.Condition {
	if o.namespaceHolder != "" {
		msg := controlplane.NamespaceInUseMessage(namespace, o.namespaceHolder, name)
		var out []metav1.Condition
		for _, t := range []string{nestv1.ConditionCertificatesReady, nestv1.ConditionControlPlaneAvailable, nestv1.ConditionNodesReady, nestv1.ConditionReady} {
			out = append(out, metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: ReasonNamespaceInUse, Message: msg, ObservedGeneration: generation})
		}
		return out
	}
	cond := func(t string, ok bool, yes, no, msgYes, msgNo string) metav1.Condition {
		c := metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: no, Message: msgNo, ObservedGeneration: generation}
		if ok {
			c.Status, c.Reason, c.Message = metav1.ConditionTrue, yes, msgYes
		}
		return c
	}
	availableMsg := o.availableMessage
	if availableMsg == "" {
		availableMsg = "the tenant API server does not answer /readyz yet"
	}
	nodesMsg := o.nodesMessage
	if nodesMsg == "" {
		nodesMsg = "waiting for the virtual node to register"
	}
	ready := o.certificates && o.hostObjects && o.endpoint != "" && o.kubeconfig && o.available && o.nodesReady
	return []metav1.Condition{
		cond(nestv1.ConditionCertificatesReady, o.certificates, ReasonIssued, ReasonIssuing,
			"every certificate and kubeconfig is issued", "issuing the tenant PKI"),
		cond(nestv1.ConditionControlPlaneAvailable, o.available, ReasonAvailable, ReasonStarting,
			"the tenant API server answers /readyz", availableMsg),
		cond(nestv1.ConditionNodesReady, o.nodesReady, ReasonNodesReady, ReasonNodesNotReady,
			"the virtual node is Ready in the tenant cluster", nodesMsg),
		cond(nestv1.ConditionReady, ready, ReasonReady, notReadyReason(o),
			"the virtual cluster is ready: use the kubeconfig Secret", notReadyMessage(o)),
	}
}

func notReadyReason(o observed) string {
	if o.hostObjects && o.endpoint == "" {
		return ReasonWaitingForEndpoint
	}
	return ReasonNotReady
}

func notReadyMessage(o observed) string {
	switch {
	case !o.certificates:
		return "issuing the tenant PKI"
	case !o.hostObjects:
		return "creating the control-plane Service and StatefulSet"
	case o.endpoint == "":
		return "waiting for the Service to get an external address"
	case !o.available:
		return "waiting for the tenant API server to answer /readyz"
	case !o.kubeconfig:
		return "writing the kubeconfig"
	default:
		return "waiting for the virtual node to be Ready"
	}
}

// phaseFor derives the coarse phase. A cluster that was Completed and is not
// ready again after a spec change is Updating.
func phaseFor(o observed, previous nestv1.Phase) nestv1.Phase {
	switch {
	case o.namespaceHolder != "":
		return nestv1.PhasePending
	case !o.certificates || !o.hostObjects:
		return nestv1.PhasePreparing
	case o.endpoint == "":
		return nestv1.PhasePending
	case o.available && o.kubeconfig && o.nodesReady:
		return nestv1.PhaseCompleted
	case previous == nestv1.PhaseCompleted || previous == nestv1.PhaseUpdating:
		return nestv1.PhaseUpdating
	default:
		return nestv1.PhaseInitialized
	}
}

// ReasonReconcileError: a phase failed before the condition was ever observed.
const ReasonReconcileError = "ReconcileError"

// failureNote starts the part of a condition message that says the last
// reconcile failed; a later failure replaces it rather than adding another.
const failureNote = " (last reconcile failed: "

// maxConditionMessage is metav1.Condition's limit on Message.
const maxConditionMessage = 32768

// setFailure adds err to the message of condition t (Ready when t is ""),
// keeping its status and reason: a failed attempt is not an observation, so
// a transient error does not flip a Ready cluster. A condition not set yet
// is set False with ReasonReconcileError.
func setFailure(conds *[]metav1.Condition, t string, err error, generation int64) {
	if t == "" {
		t = nestv1.ConditionReady
	}
	c := meta.FindStatusCondition(*conds, t)
	if c == nil {
		meta.SetStatusCondition(conds, metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: ReasonReconcileError,
			Message: truncate("reconcile failed: "+err.Error(), maxConditionMessage), ObservedGeneration: generation})
		return
	}
	base, _, _ := strings.Cut(c.Message, failureNote)
	c.Message = truncate(base+failureNote+err.Error()+")", maxConditionMessage)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
