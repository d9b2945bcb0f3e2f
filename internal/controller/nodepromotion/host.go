package nodepromotion

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// DiscoverHostServer finds the URL at which a node joins the host cluster,
// for HostJoin.Server when nest-manager's --host-api-server is unset. It is
// not the in-cluster address (the kubernetes Service's ClusterIP): a node
// that joins has no kube-proxy yet to route it. It takes, in order:
//
//   - the server of kube-public/cluster-info's kubeconfig, which kubeadm
//     writes with the endpoint its nodes join (a load balancer in front of
//     several API servers, where there is one);
//   - else the first ready address, sorted, of the default/kubernetes
//     EndpointSlice: an API server's --advertise-address, on its https port.
//
// It returns an error naming both when neither holds an address. Callers
// discover once, at start: a released node counts as home only while it
// joins the same URL.
func DiscoverHostServer(ctx context.Context, cs kubernetes.Interface) (string, error) {
	fromInfo, err := clusterInfoServer(ctx, cs)
	if err != nil || fromInfo != "" {
		return fromInfo, err
	}
	fromSlice, err := apiServerEndpoint(ctx, cs)
	if err != nil || fromSlice != "" {
		return fromSlice, err
	}
	return "", errors.New("no server in kube-public/cluster-info and no ready address in the default/kubernetes EndpointSlice: set --host-api-server")
}

// clusterInfoServer is the server of kube-public/cluster-info's kubeconfig,
// "" when there is none.
func clusterInfoServer(ctx context.Context, cs kubernetes.Interface) (string, error) {
	cm, err := cs.CoreV1().ConfigMaps(metav1.NamespacePublic).Get(ctx, "cluster-info", metav1.GetOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read kube-public/cluster-info: %w", err)
	}
	cfg, err := clientcmd.Load([]byte(cm.Data["kubeconfig"]))
	if err != nil || len(cfg.Clusters) != 1 {
		return "", nil
	}
	for _, c := range cfg.Clusters {
		return c.Server, nil
	}
	return "", nil
}

// apiServerEndpoint is https://ADDRESS:PORT of the lowest ready address of
// the default/kubernetes EndpointSlices, "" when there is none.
func apiServerEndpoint(ctx context.Context, cs kubernetes.Interface) (string, error) {
	found, err := cs.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	if err != nil {
		return "", fmt.Errorf("list the default/kubernetes EndpointSlices: %w", err)
	}
	var addrs []string
	port := int32(0)
	for _, s := range found.Items {
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == "https" && p.Port != nil {
				port = *p.Port
			}
		}
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				addrs = append(addrs, e.Addresses...)
			}
		}
	}
	if len(addrs) == 0 || port == 0 {
		return "", nil
	}
	slices.Sort(addrs)
	return "https://" + net.JoinHostPort(addrs[0], strconv.Itoa(int(port))), nil
}
