package syncer

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestCreateOrUpdate(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	notFound, exists, broken := apierrors.NewNotFound(gr, "x"), apierrors.NewAlreadyExists(gr, "x"), errors.New("cache broken")
	tests := []struct {
		name       string
		lookup     error
		differs    bool
		createErr  error
		wantCreate bool
		wantUpdate bool
		wantErr    bool
	}{
		{name: "missing: created", lookup: notFound, wantCreate: true},
		{name: "created meanwhile by another worker", lookup: notFound, createErr: exists, wantCreate: true},
		{name: "create refused", lookup: notFound, createErr: broken, wantCreate: true, wantErr: true},
		{name: "present and equal: left alone", differs: false},
		{name: "present and different: updated", differs: true, wantUpdate: true},
		{name: "lookup failed", lookup: broken, differs: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			created, updated := false, false
			err := createOrUpdate(tt.lookup, func() bool { return tt.differs },
				func() error { created = true; return tt.createErr },
				func() error { updated = true; return nil })
			if created != tt.wantCreate || updated != tt.wantUpdate || (err != nil) != tt.wantErr {
				t.Errorf("created %v, updated %v, err %v", created, updated, err)
			}
		})
	}
}
