// Package provisioner is the dynamic volume provisioner of the local host
// cluster: for each claim of its StorageClass it makes a directory and a "local"
// PersistentVolume pinned to the node the scheduler chose for the pod.
//
// The claim lifecycle (watching claims, binding, retries, reclaiming) is
// sig-storage-lib-external-provisioner's; this package only creates and removes
// directories, and records the larger size of a claim that grows (Resizer). Its StorageClass must use volumeBindingMode WaitForFirstConsumer,
// so the node is known when the volume is made.
package provisioner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// Name is the provisioner name a StorageClass refers to.
const Name = "nest.dev/local-volume"

// hostnameLabel is set by every kubelet to its node name.
const hostnameLabel = "kubernetes.io/hostname"

// Local provisions volumes as directories under Root. Every node of the local
// host cluster shares one filesystem, so the directory is where the node's
// kubelet will bind-mount it from.
type Local struct {
	Root string
}

var _ controller.Provisioner = (*Local)(nil)

// Provision creates the volume's directory and returns its PersistentVolume.
func (p *Local) Provision(_ context.Context, opts controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	dir := filepath.Join(p.Root, opts.PVName)
	pv, err := PersistentVolume(opts, dir)
	if err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, controller.ProvisioningFinished, fmt.Errorf("create volume directory %s: %w", dir, err)
	}
	// Pods may run as any user; the directory is theirs.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, controller.ProvisioningFinished, err
	}
	return pv, controller.ProvisioningFinished, nil
}

// Delete removes the directory behind pv. It refuses a path outside Root, so a
// hand-made PersistentVolume can never make it delete other data.
func (p *Local) Delete(_ context.Context, pv *corev1.PersistentVolume) error {
	if pv.Spec.Local == nil {
		return fmt.Errorf("persistentvolume %s has no spec.local: not made by %s", pv.Name, Name)
	}
	path := filepath.Clean(pv.Spec.Local.Path)
	root := filepath.Clean(p.Root) + string(filepath.Separator)
	if !strings.HasPrefix(path, root) {
		return fmt.Errorf("persistentvolume %s: spec.local.path %s is outside %s; not deleting it", pv.Name, path, p.Root)
	}
	return os.RemoveAll(path)
}

// PersistentVolume builds the PersistentVolume for a claim: the claimed size and
// access modes, the class's reclaim policy, a local source at dir, and node
// affinity to the node the scheduler selected.
func PersistentVolume(opts controller.ProvisionOptions, dir string) (*corev1.PersistentVolume, error) {
	claim := opts.PVC
	if opts.SelectedNodeName == "" {
		return nil, fmt.Errorf("claim %s/%s has no selected node: StorageClass %q must set volumeBindingMode: WaitForFirstConsumer", claim.Namespace, claim.Name, opts.StorageClass.Name)
	}
	if claim.Spec.Selector != nil {
		return nil, fmt.Errorf("claim %s/%s: spec.selector is not supported by %s; remove it", claim.Namespace, claim.Name, Name)
	}
	size, ok := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return nil, fmt.Errorf("claim %s/%s: spec.resources.requests.storage is required", claim.Namespace, claim.Name)
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if opts.StorageClass.ReclaimPolicy != nil {
		reclaim = *opts.StorageClass.ReclaimPolicy
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: opts.PVName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   claim.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              opts.StorageClass.Name,
			VolumeMode:                    claim.Spec.VolumeMode,
			MountOptions:                  opts.StorageClass.MountOptions,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: hostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{opts.SelectedNodeName},
				}}}},
			}},
		},
	}, nil
}

// Run serves claims until ctx ends, with the cluster credentials in kubeconfig.
func Run(ctx context.Context, kubeconfig, root string) error {
	if root == "" {
		return errors.New("provisioner: the volume directory is empty: pass --dir")
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("provisioner: load kubeconfig %s: %w", kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	go runResizer(ctx, client)
	ctrl := controller.NewProvisionController(ctx, client, Name, &Local{Root: root}, controller.LeaderElection(false))
	ctrl.Run(ctx)
	return nil
}
