// Package egress is the tenant API server's way out to nodes and pods.
//
// The tenant API server dials what a tenant names: kubelets for logs, exec,
// attach and port-forward (a Node's address, which a tenant can write),
// pods, Services and nodes through the proxy subresources, admission
// webhooks and aggregated API servers (a URL or a Service's endpoints,
// which a tenant writes too). It runs in the control-plane pod, whose
// network reaches the host, so without a check a tenant could aim any of
// these at a host address.
//
// kube-apiserver's egress selector sends that traffic elsewhere: with the
// EgressSelectorConfiguration this package writes
// (EgressSelectorConfiguration), the `cluster` and `controlplane`
// selections go as HTTP CONNECT over a Unix socket to Proxy, which
// nest-syncer serves beside the API server. Proxy dials only what
// nest-syncer itself published in Published: the control-plane pods'
// kubelet APIs, the tenant's host pods, and the kubelets and pod ranges of
// the tenant's dedicated nodes. Anything else gets 403 Forbidden, and the
// API server fails the request that needed it. The `etcd` selection is not
// configured: etcd is on the pod's loopback, which the proxy never dials,
// and the API server must keep reaching it directly.
//
// The proxy checks the address it dials, after resolving any name itself,
// so a name that resolves to a host address is refused like the address.
package egress
