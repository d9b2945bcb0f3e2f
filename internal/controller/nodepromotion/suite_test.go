package nodepromotion

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/controller/globalnode"
	"github.com/nestdev/nest/internal/controller/nodeassignment"
	"github.com/nestdev/nest/internal/controller/virtualcluster"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/internal/testutil/envsuite"
)

// The suite runs node promotion with the inventory and node assignment
// controllers against two real API servers (envtest, our builds): the host,
// and a second one that stands for every tenant cluster. No kubelet runs:
// a fake agent per node stands for nest-agent and its kubelet, and on Start
// registers the node, Ready, in the cluster it joined.
var (
	host, tenant     client.Client
	hostCS, tenantCS kubernetes.Interface
	agents           = &fakeAgents{nodes: map[string]*fakeNode{}}
	hostServer       = "https://host.test:6443"
	tenantServer     = "https://tenant.test:6443"
	tenantEnv        *envtest.Environment
	tenantCfg        *rest.Config
	testDrainTimeout = 3 * time.Second
	// testPullProxyDeny is the manager's controlplane.PullProxyDeny.
	testPullProxyDeny = []string{"10.244.0.0/16", "192.0.2.0/24"}
)

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the controller tests with `make unit`, which points it at our kube-apiserver and etcd builds")
		os.Exit(1)
	}
	tenantEnv = &envtest.Environment{}
	var err error
	tenantCfg, err = tenantEnv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the tenant's envtest:", err)
		os.Exit(1)
	}
	envsuite.Suite{
		Logs:    true,
		Options: ctrl.Options{Cache: virtualcluster.CacheOptions()},
		Setup: func(mgr ctrl.Manager) error {
			hostCS = kubernetes.NewForConfigOrDie(mgr.GetConfig())
			tenantCS = kubernetes.NewForConfigOrDie(tenantCfg)
			var err error
			if tenant, err = client.New(tenantCfg, client.Options{}); err != nil {
				return err
			}
			hostObjects, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
			if err != nil {
				return err
			}
			agents.clusters = map[string]client.Client{hostServer: hostObjects, tenantServer: tenant}
			// envtest authorizes with RBAC alone; a real API server's Node
			// authorizer lets kubelets ask for their certificates and write
			// their Node.
			for name, role := range map[string]string{"test:nodes-request-certificates": "system:node-bootstrapper", "test:nodes-write-nodes": "system:node"} {
				if err := tenant.Create(context.Background(), &rbacv1.ClusterRoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
					Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
				}); err != nil {
					return err
				}
			}
			if err := (&globalnode.Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
				return err
			}
			if err := (&nodeassignment.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}).SetupWithManager(mgr); err != nil {
				return err
			}
			return (&Reconciler{
				Client: mgr.GetClient(), HostClient: hostCS, Agents: agents,
				Tenants:       fakeTenants{},
				Host:          HostJoin{Server: hostServer, CACertPEM: []byte("host CA")},
				DrainTimeout:  testDrainTimeout,
				PullProxyDeny: testPullProxyDeny,
			}).SetupWithManager(mgr)
		},
		Started: func(_ *rest.Config, c client.Client) { host = c },
		Stop: func() {
			if err := tenantEnv.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "stop the tenant's envtest:", err)
			}
		},
	}.Main(m)
}

// tenantCA is the cluster CA bundle of the tenant envtest stands for, which
// a test may rotate.
var tenantCA = &caBundle{}

type caBundle struct {
	mu  sync.Mutex
	pem []byte
}

// bundle is the CA bundle, a new CA's on first use.
func (b *caBundle) bundle() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pem == nil {
		b.pem = newCAPEM("tenant")
	}
	return slices.Clone(b.pem)
}

// rotate replaces the bundle with a new CA's and returns it.
func (b *caBundle) rotate() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pem = newCAPEM("tenant, rotated")
	return slices.Clone(b.pem)
}

// set makes pem the bundle again.
func (b *caBundle) set(pem []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pem = slices.Clone(pem)
}

func newCAPEM(name string) []byte {
	ca, err := pki.NewCA(name)
	if err != nil {
		panic(err)
	}
	return ca.CertificatePEM()
}

// fakeTenants serves the tenant envtest for any VirtualCluster that exists
// in the host and is not being deleted.
type fakeTenants struct{}

func (fakeTenants) For(ctx context.Context, key types.NamespacedName) (*Tenant, error) {
	vc := &nestv1.VirtualCluster{}
	if err := host.Get(ctx, key, vc); err != nil || !vc.DeletionTimestamp.IsZero() {
		return nil, ErrTenantGone
	}
	return &Tenant{Client: tenantCS, Objects: tenant, Join: agent.JoinRequest{
		Server: tenantServer, CACertPEM: tenantCA.bundle(), KubeletClientCAPEM: []byte("kubelet client CA"),
		ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local", ServerTLSBootstrap: true,
	}}, nil
}

type fakeAgents struct {
	mu       sync.Mutex
	nodes    map[string]*fakeNode
	clusters map[string]client.Client
}

func (f *fakeAgents) For(_ context.Context, gn *nestv1.GlobalNode) (Agent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[gn.Name]
	if !ok {
		return nil, fmt.Errorf("no agent for %s", gn.Name)
	}
	return n, nil
}

// add registers a node whose kubelet runs joined to the host.
func (f *fakeAgents) add(name string) *fakeNode {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := &fakeNode{name: name, running: true, server: hostServer, clusters: f.clusters}
	f.nodes[name] = n
	return n
}

// fakeNode is one node's agent and kubelet. It refuses what the real agent
// refuses (reset or join while running) with the same 409.
type fakeNode struct {
	mu      sync.Mutex
	name    string
	running bool
	server  string
	// ca is the CA bundle of the node's last join, which its kubelet
	// trusts once started.
	ca       []byte
	joins    []agent.JoinRequest
	tokens   []*corev1.Secret
	calls    []string
	down     bool
	clusters map[string]client.Client
}

func (n *fakeNode) record(call string) error {
	n.calls = append(n.calls, call)
	if n.down {
		return fmt.Errorf("dial %s: connection refused", n.name)
	}
	return nil
}

func (n *fakeNode) Status(context.Context) (agent.Status, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.record("status"); err != nil {
		return agent.Status{}, err
	}
	return agent.Status{NodeName: n.name, Kubelet: agent.ServiceStatus{Running: n.running}, KubeProxy: agent.ServiceStatus{Running: n.running},
		Server: n.server, Bootstrapped: n.running && n.server != "", CAHash: pki.BundleHash(n.ca), PodCIDR: podCIDROf(n.name)}, nil
}

func (n *fakeNode) Stop(context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.record("stop"); err != nil {
		return err
	}
	n.running = false
	return nil
}

func (n *fakeNode) Reset(context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.record("reset"); err != nil {
		return err
	}
	if n.running {
		return &agent.APIError{StatusCode: http.StatusConflict, Message: "kubelet runs"}
	}
	n.server, n.ca = "", nil
	return nil
}

func (n *fakeNode) Join(_ context.Context, req agent.JoinRequest) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.record("join"); err != nil {
		return err
	}
	if err := req.Validate(); err != nil && req.Server != hostServer && req.Server != tenantServer {
		return err
	}
	if n.running || (n.server != "" && n.server != req.Server) {
		return &agent.APIError{StatusCode: http.StatusConflict, Message: "running or joined elsewhere"}
	}
	n.server, n.ca = req.Server, req.CACertPEM
	n.joins = append(n.joins, req)
	// Keep the token's Secret as it was at the join: Nest deletes it once
	// the node has joined.
	secret := &corev1.Secret{}
	id, _, _ := strings.Cut(req.BootstrapToken, ".")
	if err := n.clusters[req.Server].Get(context.Background(), client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "bootstrap-token-" + id}, secret); err != nil {
		return fmt.Errorf("the join's bootstrap token Secret: %w", err)
	}
	n.tokens = append(n.tokens, secret)
	return nil
}

// Start registers the node, Ready, in the cluster it joined, as its kubelet
// would after TLS bootstrapping. In the tenant it is the kubelet's own
// identity that writes the Node, which the tenant's admission policy checks.
func (n *fakeNode) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.record("start"); err != nil {
		return err
	}
	n.running = true
	c := n.clusters[n.server]
	if c == nil {
		return fmt.Errorf("joined to unknown server %q", n.server)
	}
	if n.server == tenantServer {
		var err error
		if c, err = client.New(kubeletConfig(n.name), client.Options{}); err != nil {
			return err
		}
	}
	if err := registerNode(ctx, c, n.name); err != nil {
		return fmt.Errorf("register Node %s in %s: %w", n.name, n.server, err)
	}
	if len(n.joins) > 0 && n.joins[len(n.joins)-1].ServerTLSBootstrap {
		return requestServingCert(ctx, n.name)
	}
	return nil
}

// requestServingCert asks the tenant for a kubelet serving certificate as
// node's kubelet does (impersonating it, so the request names it), and signs
// it once it is approved, as the tenant's controller-manager would.
func requestServingCert(ctx context.Context, node string) error {
	asNode, err := kubernetes.NewForConfig(kubeletConfig(node))
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		DNSNames:    []string{node},
		IPAddresses: []net.IP{net.ParseIP(ipOf(node))},
	}, key)
	if err != nil {
		return err
	}
	csr, err := asNode.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("request a serving certificate as %s: %w", node, err)
	}
	go signWhenApproved(csr.Name)
	return nil
}

// kubeletConfig reaches the tenant as node's kubelet, as its client
// certificate makes it.
func kubeletConfig(node string) *rest.Config {
	cfg := rest.CopyConfig(tenantCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
	return cfg
}

func signWhenApproved(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		csr, err := tenantCS.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil || !decided(csr) {
			return false, nil
		}
		signed, err := pki.NewCA("signed for " + name)
		if err != nil {
			return false, err
		}
		csr.Status.Certificate = signed.CertPEM
		_, err = tenantCS.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{})
		return err == nil, nil
	})
}

func (n *fakeNode) callList() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.calls)
}

func (n *fakeNode) tokenList() []*corev1.Secret {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.tokens)
}

func (n *fakeNode) joinList() []agent.JoinRequest {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.joins)
}

// registerNode creates a Ready Node with an InternalIP, as a kubelet does;
// an existing one is marked Ready.
func registerNode(ctx context.Context, c client.Client, name string) error {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}}}
	if err := c.Create(ctx, node); err != nil && client.IgnoreAlreadyExists(err) != nil {
		return err
	}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return err
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ipOf(name)}}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	return c.Status().Update(ctx, node)
}

// podCIDROf is the pod CIDR of a test node's own CNI configuration.
func podCIDROf(name string) string { return fmt.Sprintf("10.244.%d.0/24", len(name)) }

// ipOf gives each test node its own documentation address.
func ipOf(name string) string { return fmt.Sprintf("198.51.100.%d", 100+len(name)%50) }

func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, check)
}
