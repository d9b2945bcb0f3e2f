package controlplane

import (
	"slices"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/syncer/contract"
)

func TestStorageClassesFor(t *testing.T) {
	host := []storagev1.StorageClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "hdd"}, VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate)},
		{ObjectMeta: metav1.ObjectMeta{Name: "standard", Annotations: map[string]string{defaultClassAnnotation: "true"}},
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer), AllowVolumeExpansion: ptr.To(true)},
	}
	names := func(cs []contract.StorageClass) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name+"="+c.HostName)
		}
		return out
	}
	got, missing := StorageClassesFor(vc(nil), host)
	if !slices.Equal(names(got), []string{"standard=standard"}) || !got[0].Default || !got[0].AllowVolumeExpansion || got[0].ReclaimPolicy != "Delete" || len(missing) != 0 {
		t.Errorf("unset: %+v, missing %v; want the host's default class as the tenant's default", got, missing)
	}
	got, missing = StorageClassesFor(vc(func(v *nestv1.VirtualCluster) {
		v.Spec.VirtualNode.Storage.Classes = []nestv1.StorageClassMapping{{HostName: "hdd", Name: "slow"}, {HostName: "nvme"}}
	}), host)
	if !slices.Equal(names(got), []string{"slow=hdd"}) || len(missing) != 1 || !strings.Contains(missing[0], "spec.virtualNode.storage.classes[1]") {
		t.Errorf("mapped: %v, missing %v", names(got), missing)
	}
	if got, _ := StorageClassesFor(vc(func(v *nestv1.VirtualCluster) { v.Spec.VirtualNode.Storage.Classes = []nestv1.StorageClassMapping{} }), host); len(got) != 0 {
		t.Errorf("an empty list gives %v, want none", names(got))
	}
	args := strings.Join(StatefulSetFor(vc(nil), Options{HostStorageClasses: host}, ServiceIPs{}).Spec.Template.Spec.Containers[2].Args, " ")
	if !strings.Contains(args, "--storage-classes=standard=standard:Delete:WaitForFirstConsumer:true:true") {
		t.Errorf("nest-syncer args lack the storage classes: %s", args)
	}
}
