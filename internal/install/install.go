// Package install puts Nest into a host cluster: it server-side applies the
// manifests embedded from config/ (CRDs, RBAC, the nest-manager Deployment) and
// waits until the CRDs are established and the manager is available.
package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/config"
)

// FieldOwner is the server-side apply field manager of installed objects.
const FieldOwner = "nest-install"

// Namespace is where the manifests install nest-manager.
const Namespace = "nest-system"

// NodeNetworkAgent names the node network agent's DaemonSet and namespace
// (config/nodenetwork).
const NodeNetworkAgent = "nest-node-network"

// Manifests returns the objects to install, in apply order.
func Manifests() ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, entry := range config.Order {
		files, err := filesOf(entry)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			objs, err := decodeFile(f)
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
		}
	}
	return out, nil
}

func filesOf(entry string) ([]string, error) {
	if path.Ext(entry) == ".yaml" {
		return []string{entry}, nil
	}
	entries, err := fs.ReadDir(config.Manifests, entry)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		files = append(files, path.Join(entry, e.Name()))
	}
	slices.Sort(files)
	return files, nil
}

func decodeFile(name string) ([]*unstructured.Unstructured, error) {
	data, err := config.Manifests.ReadFile(name)
	if err != nil {
		return nil, err
	}
	return Decode(name, data)
}

// Decode reads every object of a YAML or JSON stream (documents separated
// by "---"); name is the stream's, for errors. Empty documents are skipped.
func Decode(name string, data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("decode %s: %w", name, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

// Options says which image the manager runs.
type Options struct {
	// ManagerImage overrides the nest-manager image when set.
	ManagerImage string
	// ManagerPodAnnotations are added to the manager's pod template; a changed
	// value (such as an image fingerprint) rolls the manager.
	ManagerPodAnnotations map[string]string
	// ManagerArgs are appended to the manager container's arguments, such as
	// the host cluster's address ranges (--host-pod-cidrs=10.244.0.0/16); a
	// flag given again overrides the manifest's.
	ManagerArgs []string
	// NodeNetworkArgs are appended to the node network agent's arguments
	// (the DaemonSet nest-node-network), such as host ranges its pull proxy
	// must also refuse (--pull-proxy-deny=198.51.100.0/24).
	NodeNetworkArgs []string
}

// Apply installs or upgrades Nest in the cluster c talks to, then waits (up to
// timeout) for the CRDs to be established and the manager to be available.
func Apply(ctx context.Context, c client.Client, o Options, timeout time.Duration) error {
	objs, err := Manifests()
	if err != nil {
		return err
	}
	if err := customize(objs, o); err != nil {
		return err
	}
	if err := ApplyObjects(ctx, c, objs, timeout); err != nil {
		return err
	}
	return waitInstalled(ctx, c, objs, timeout)
}

// ApplyObjects applies objs in order with server-side apply (field owner
// FieldOwner, taking ownership of conflicting fields). Objects whose kind a
// CRD earlier in objs defines are applied once that CRD is established (up
// to timeout), as kubectl apply of a whole directory fails to do on a fresh
// API server. It does not wait for what it applied to be ready.
func ApplyObjects(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, timeout time.Duration) error {
	for i, u := range objs {
		if crd := definitionIn(u, objs[:i]); crd != nil {
			if err := waitInstalled(ctx, c, []*unstructured.Unstructured{crd}, timeout); err != nil {
				return fmt.Errorf("wait for the definition of %s %s: %w", u.GetKind(), u.GetName(), err)
			}
		}
		// Discovery may lag an established CRD by a moment.
		var noMatch error
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership)
			if meta.IsNoMatchError(err) {
				noMatch = err
				return false, nil
			}
			return true, err
		})
		if err != nil && noMatch != nil {
			err = noMatch
		}
		if err != nil {
			return fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// definitionIn returns the CustomResourceDefinition in before that
// defines u's kind, or nil.
func definitionIn(u *unstructured.Unstructured, before []*unstructured.Unstructured) *unstructured.Unstructured {
	gvk := u.GroupVersionKind()
	for _, b := range before {
		if b.GetKind() != "CustomResourceDefinition" {
			continue
		}
		group, _, _ := unstructured.NestedString(b.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(b.Object, "spec", "names", "kind")
		if group == gvk.Group && kind == gvk.Kind {
			return b
		}
	}
	return nil
}

// customize applies o to the manager Deployment and the node network agent
// DaemonSet among objs.
func customize(objs []*unstructured.Unstructured, o Options) error {
	for _, u := range objs {
		if u.GetKind() == "Deployment" && u.GetName() == "nest-manager" {
			if err := customizeManager(u, o); err != nil {
				return err
			}
		}
		if u.GetKind() == "DaemonSet" && u.GetName() == NodeNetworkAgent && len(o.NodeNetworkArgs) > 0 {
			if err := appendArgs(u, o.NodeNetworkArgs); err != nil {
				return err
			}
		}
	}
	return nil
}

func customizeManager(u *unstructured.Unstructured, o Options) error {
	if o.ManagerImage != "" {
		if err := setImage(u, o.ManagerImage); err != nil {
			return err
		}
	}
	if len(o.ManagerArgs) > 0 {
		if err := appendArgs(u, o.ManagerArgs); err != nil {
			return err
		}
	}
	for k, v := range o.ManagerPodAnnotations {
		if err := unstructured.SetNestedField(u.Object, v, "spec", "template", "metadata", "annotations", k); err != nil {
			return err
		}
	}
	return nil
}

// appendArgs appends args to the first container of workload u.
func appendArgs(u *unstructured.Unstructured, args []string) error {
	containers, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) == 0 {
		return fmt.Errorf("%s %s has no containers: %v", u.GetKind(), u.GetName(), err)
	}
	c := containers[0].(map[string]any)
	have, _ := c["args"].([]any)
	for _, a := range args {
		have = append(have, a)
	}
	c["args"] = have
	return unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
}

func setImage(u *unstructured.Unstructured, image string) error {
	containers, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if err != nil || len(containers) == 0 {
		return fmt.Errorf("nest-manager Deployment has no containers: %v", err)
	}
	containers[0].(map[string]any)["image"] = image
	return unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
}

func waitInstalled(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, u := range objs {
			switch u.GetKind() {
			case "CustomResourceDefinition":
				var crd apiextensionsv1.CustomResourceDefinition
				if err := c.Get(ctx, types.NamespacedName{Name: u.GetName()}, &crd); err != nil || !established(&crd) {
					return false, nil
				}
			case "Deployment":
				var d appsv1.Deployment
				if err := c.Get(ctx, client.ObjectKeyFromObject(u), &d); err != nil || !deploymentAvailable(&d) {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// deploymentAvailable is true once the newest generation is rolled out and
// every replica is available.
func deploymentAvailable(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == want &&
		d.Status.AvailableReplicas == want && d.Status.Replicas == want
}
