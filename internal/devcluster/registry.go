package devcluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/images"
	"github.com/nestdev/nest/internal/install"
)

// The local host cluster runs an OCI registry (addons.Registry, the CNCF
// Distribution registry built from the module k8s/registry pins) behind a
// LoadBalancer Service, so the machine and every pod of the cluster reach
// it at one address (RegistryAddress): snapshots are pushed to it by
// `nest snapshot create --to oci://...`, the tests and `make demo`.

var registryKey = types.NamespacedName{Namespace: addons.RegistryNamespace, Name: addons.RegistryName}

// startRegistry applies the registry's namespace, Deployment and Service.
func (u *upRun) startRegistry(ctx context.Context) error {
	c, err := adminClient(u.l)
	if err != nil {
		return err
	}
	var objs []*unstructured.Unstructured
	for _, o := range addons.Registry(images.Registry, images.RegistryPort) {
		uo, err := toUnstructured(o)
		if err != nil {
			return err
		}
		objs = append(objs, uo)
	}
	return install.ApplyObjects(ctx, c, objs, time.Minute)
}

// waitRegistry waits until the registry is ready at its address.
func (u *upRun) waitRegistry(ctx context.Context) error {
	c, err := adminClient(u.l)
	if err != nil {
		return err
	}
	return waitFor(ctx, 2*time.Minute, "the registry ready at its LoadBalancer address", u.l, nil, func(ctx context.Context) bool {
		var d appsv1.Deployment
		if c.Get(ctx, registryKey, &d) != nil || d.Status.ReadyReplicas < 1 {
			return false
		}
		_, err := RegistryAddressIn(ctx, c)
		return err == nil
	})
}

// RegistryAddress is the address, host:port, of the registry of the local
// host cluster in stateDir: an oci:// URL names it first, as in
// oci://ADDRESS/backups/team-a:1. It fails while the registry's Service
// has no address yet.
func RegistryAddress(ctx context.Context, stateDir string) (string, error) {
	c, err := adminClient(Layout{Root: stateDir})
	if err != nil {
		return "", err
	}
	return RegistryAddressIn(ctx, c)
}

// RegistryAddressIn is RegistryAddress, read through c, a client of the
// local host cluster.
func RegistryAddressIn(ctx context.Context, c client.Client) (string, error) {
	var svc corev1.Service
	if err := c.Get(ctx, registryKey, &svc); err != nil {
		return "", fmt.Errorf("the registry's Service %s: %w", registryKey, err)
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			return net.JoinHostPort(in.IP, strconv.Itoa(images.RegistryPort)), nil
		}
	}
	return "", fmt.Errorf("the registry's Service %s has no address yet", registryKey)
}
