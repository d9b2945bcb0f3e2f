package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// StatusFieldPatch is a JSON merge patch that sets status.<field> to value
// and nothing else. A nil value (a nil slice included) is null, which
// removes the field.
func StatusFieldPatch(field string, value any) ([]byte, error) {
	return json.Marshal(map[string]map[string]any{"status": {field: value}})
}

// PatchStatusField sets status.<field> of obj through the status
// subresource, and nothing else: controllers that share an object's status
// each own one field and never overwrite another's, whatever their cached
// copy holds. An object already gone is not an error.
func PatchStatusField(ctx context.Context, c client.Client, obj client.Object, field string, value any) error {
	patch, err := StatusFieldPatch(field, value)
	if err != nil {
		return err
	}
	if err := c.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patch status.%s of %s/%s: %w", field, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// ApplyStatus applies status, the status fields one controller owns
// (field name to value, each converted to JSON's shapes), to obj with
// server-side apply as fieldOwner, forcing ownership. Controllers that
// share an object's status each apply their own fields and conditions
// (entries of a list of type map) and never write another's; a field the
// owner applied before and leaves out now is removed. obj's apiVersion and
// kind come from its Go type (NewScheme). An object already gone is not an
// error.
func ApplyStatus(ctx context.Context, c client.Client, obj client.Object, fieldOwner string, status map[string]any) error {
	gvk, err := apiutil.GVKForObject(obj, NewScheme())
	if err != nil {
		return err
	}
	// Through JSON: the values' own JSON tags and formats (times as
	// RFC 3339) are what the API server reads.
	raw, err := json.Marshal(status)
	if err != nil {
		return fmt.Errorf("status of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": fields}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(obj.GetNamespace())
	u.SetName(obj.GetName())
	err = c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("apply the status of %s/%s as %s: %w", obj.GetNamespace(), obj.GetName(), fieldOwner, err)
	}
	return nil
}

// StampCondition sets c's LastTransitionTime as meta.SetStatusCondition
// would against conditions (the one there of c's type, if its status is
// the same, else now), and says whether that condition already reads as c
// does: the same status, reason, message and observed generation. A
// controller that applies its own condition skips the write then.
func StampCondition(conditions []metav1.Condition, c *metav1.Condition, now time.Time) (unchanged bool) {
	c.LastTransitionTime = metav1.NewTime(now)
	old := meta.FindStatusCondition(conditions, c.Type)
	if old == nil || old.Status != c.Status {
		return false
	}
	c.LastTransitionTime = old.LastTransitionTime
	return old.Reason == c.Reason && old.Message == c.Message && old.ObservedGeneration == c.ObservedGeneration
}
