package virtualcluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The cache keeps host objects without their managedFields, which nest-manager
// never reads.
func TestCacheDropsManagedFields(t *testing.T) {
	transform := CacheOptions().DefaultTransform
	if transform == nil {
		t.Fatal("the cache options have no default transform")
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Name:          "pki",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "nest-manager", Operation: metav1.ManagedFieldsOperationApply}},
	}}
	out, err := transform(secret)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := out.(*corev1.Secret)
	if !ok {
		t.Fatalf("the transform returned a %T, want the *Secret it was given", out)
	}
	if got.Name != "pki" || got.ManagedFields != nil {
		t.Errorf("cached Secret %q has managedFields %v, want the Secret without them", got.Name, got.ManagedFields)
	}
}
