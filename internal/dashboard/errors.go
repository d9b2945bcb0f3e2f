package dashboard

import (
	"errors"
	"net/http"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nestdev/nest/internal/vcops"
)

// statusOf is the HTTP status a page answers with when err stopped it: the
// API server's own code (403 for RBAC, 404, 409, 422), 400 for bad input,
// 401 to sign in, else 502 (the host API server failed us).
func statusOf(err error) int {
	var fe *vcops.FieldError
	var st apierrors.APIStatus
	switch {
	case errors.Is(err, ErrSignIn):
		return http.StatusUnauthorized
	case errors.As(err, &fe), errors.Is(err, vcops.ErrNoSnapshotSchedule):
		return http.StatusUnprocessableEntity
	case errors.As(err, &st) && st.Status().Code >= 400:
		return int(st.Status().Code)
	}
	return http.StatusBadGateway
}

// formFields are the create and share forms' inputs, in page order.
var formFields = []string{vcops.FieldName, vcops.FieldNamespace, vcops.FieldCPU, vcops.FieldMemory, vcops.FieldGPU, vcops.FieldPods,
	vcops.FieldStorage, vcops.FieldReplicas, vcops.FieldPodSecurity, vcops.FieldServiceType, vcops.FieldExternalIPs}

// specFields maps API field paths, as the API server names them in a
// refusal's causes, to the form input that sets them. Longest prefix wins.
var specFields = map[string]string{
	"metadata.name":                                   vcops.FieldName,
	"metadata.namespace":                              vcops.FieldNamespace,
	"spec.promoteResources.resources[cpu]":            vcops.FieldCPU,
	"spec.promoteResources.resources[memory]":         vcops.FieldMemory,
	"spec.promoteResources.resources[nvidia.com/gpu]": vcops.FieldGPU,
	"spec.promoteResources.resources[pods]":           vcops.FieldPods,
	"spec.virtualNode.podSecurityLevel":               vcops.FieldPodSecurity,
	"spec.controlPlane.service.type":                  vcops.FieldServiceType,
	"spec.externalIPs":                                vcops.FieldExternalIPs,
	"spec.controlPlane.replicas":                      vcops.FieldReplicas,
	"spec.virtualNode.storage.requests":               vcops.FieldStorage,
}

// quotedKey turns spec.promoteResources.resources.cpu and ...[cpu] alike.
var quotedKey = regexp.MustCompile(`\.resources\.([a-z0-9./-]+)$`)

// fieldForPath names the form input an API field path belongs to, or "".
func fieldForPath(path string) string {
	path = quotedKey.ReplaceAllString(path, ".resources[$1]")
	best := ""
	for prefix := range specFields {
		if (path == prefix || strings.HasPrefix(path, prefix+"[") || strings.HasPrefix(path, prefix+".")) && len(prefix) > len(best) {
			best = prefix
		}
	}
	return specFields[best]
}

// formErrors sorts err into messages per form input, and the rest (not tied
// to one input) under "". It understands vcops.FieldError and the causes of
// an API server's Invalid.
func formErrors(err error) map[string]string {
	out := map[string]string{}
	var fe *vcops.FieldError
	if errors.As(err, &fe) {
		out[fe.Field] = fe.Reason
		return out
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Details != nil && len(st.Status().Details.Causes) > 0 {
		for _, c := range st.Status().Details.Causes {
			f := fieldForPath(c.Field)
			if f == "" && strings.Contains(c.Message, "metadata.name") {
				// Rules on the whole object name no field; their messages do.
				f = vcops.FieldName
			}
			msg := c.Message
			if prev, ok := out[f]; ok {
				msg = prev + "; " + msg
			}
			out[f] = msg
		}
		return out
	}
	out[""] = err.Error()
	return out
}
