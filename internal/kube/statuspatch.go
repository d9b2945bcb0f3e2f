package kube

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
