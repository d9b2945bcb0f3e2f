package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nestdev/nest/internal/addons"
	"github.com/nestdev/nest/internal/agent"
	"github.com/nestdev/nest/internal/components"
	"github.com/nestdev/nest/internal/controller/nodepromotion"
	"github.com/nestdev/nest/internal/devcluster"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/pki"
	"github.com/nestdev/nest/internal/testutil"
	"github.com/nestdev/nest/test/e2e/framework"
)

// TestNodeAgent checks nest-agent on a worker of a local host cluster: who
// it serves, and that through it alone a worker leaves its cluster, is
// wiped, and joins again with a bootstrap token, as promotion and release
// will move nodes.
func TestNodeAgent(t *testing.T) {
	framework.RequireRoot(t)
	t.Parallel()
	cluster := framework.LeaseCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	stateDir := framework.StartHostCluster(t, ctx, cluster)
	l := devcluster.Layout{Root: stateDir}
	nodes := framework.Topology(t, stateDir, 2)
	cp, worker := nodes[0], nodes[1]
	ca := loadAgentCA(t, l)
	manager := agentClient(t, ca, worker.Name, worker, agent.ManagerIdentity)
	cs := clientset(t, l.AdminKubeconfig()).(*kubernetes.Clientset)

	t.Run("the agent reports its node", func(t *testing.T) {
		st, err := manager.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The kubelet trusts the host's CA, which the admin kubeconfig holds.
		host, err := clientcmd.BuildConfigFromFlags("", l.AdminKubeconfig())
		if err != nil {
			t.Fatal(err)
		}
		hostCA := host.CAData
		if len(hostCA) == 0 {
			if hostCA, err = os.ReadFile(host.CAFile); err != nil {
				t.Fatal(err)
			}
		}
		want := agent.Status{NodeName: worker.Name, Kubelet: agent.ServiceStatus{Running: true}, KubeProxy: agent.ServiceStatus{Running: true},
			Server: devcluster.APIServerURL(cp), Bootstrapped: true, CAHash: pki.BundleHash(hostCA), PodCIDR: worker.PodCIDR.String(), Sandboxes: st.Sandboxes}
		if want.CAHash == "" || st != want {
			t.Errorf("status = %+v, want %+v", st, want)
		}
	})

	t.Run("the agent serves nest-manager only", func(t *testing.T) {
		other := agentClient(t, ca, worker.Name, worker, "system:admin")
		_, err := other.Status(ctx)
		var api *agent.APIError
		if !errors.As(err, &api) || api.StatusCode != http.StatusForbidden {
			t.Errorf("a client certificate of the agent CA for another name: err = %v, want 403", err)
		}
		foreign, err := pki.NewCA("not-the-agent-ca")
		if err != nil {
			t.Fatal(err)
		}
		stranger := agentClientSigned(t, ca, foreign, worker.Name, worker, agent.ManagerIdentity)
		if _, err := stranger.Status(ctx); err == nil {
			t.Error("a client certificate of another CA was served")
		}
		impostor := agentClient(t, ca, cp.Name, worker, agent.ManagerIdentity)
		if _, err := impostor.Status(ctx); err == nil {
			t.Errorf("the agent of %s answered a client that expected %s", worker.Name, cp.Name)
		}
	})

	t.Run("a worker leaves the host and joins again with a bootstrap token", func(t *testing.T) {
		cfg := devcluster.AgentConfig(l, worker)
		if err := manager.Reset(ctx); !agent.IsConflict(err) {
			t.Fatalf("reset while the kubelet runs: err = %v, want 409", err)
		}
		if err := manager.Stop(ctx); err != nil {
			t.Fatalf("stop: %v", err)
		}
		if err := manager.Reset(ctx); err != nil {
			t.Fatalf("reset: %v", err)
		}
		st, err := manager.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Kubelet.Running || st.KubeProxy.Running || st.Server != "" || st.Sandboxes != 0 {
			t.Fatalf("after reset: %+v, want nothing running, no server, no sandbox", st)
		}
		for _, path := range []string{cfg.Kubelet.Kubeconfig, cfg.Kubelet.CertDir, cfg.Kubelet.RootDir} {
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("after reset %s is still there (stat: %v)", path, err)
			}
		}
		if err := cs.CoreV1().Nodes().Delete(ctx, worker.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}

		if _, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, "nest:node-autoapprove-bootstrap", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the host auto-approves bootstrap requests (get: %v): a token could ask for any node's name", err)
		}
		tok := createBootstrapToken(t, ctx, cs, worker.Name, "e2e: "+worker.Name+" joins again")
		caPEM := []byte(testutil.ReadFile(t, filepath.Join(l.PKIDir(), components.CACert)))
		joined := time.Now()
		if err := manager.Join(ctx, agent.JoinRequest{Server: devcluster.APIServerURL(cp), CACertPEM: caPEM, BootstrapToken: tok.Token}); err != nil {
			t.Fatalf("join: %v", err)
		}
		// The host approves no bootstrap request by itself: nest-manager
		// approves the node's own, as here while the agent starts it.
		approving, stop := context.WithCancel(ctx)
		approved := make(chan int, 1)
		go func() {
			total := 0
			_ = wait.PollUntilContextCancel(approving, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				n, _ := nodepromotion.ApproveNodeClient(ctx, cs, worker.Name)
				total += n
				return false, nil
			})
			approved <- total
		}()
		err = manager.Start(ctx)
		stop()
		if n := <-approved; n != 1 || err != nil {
			t.Fatalf("start: %v, with %d client certificate requests approved, want 1", err, n)
		}
		waitNodeReady(t, ctx, cs, worker.Name)
		requireIssuedNodeCSR(t, ctx, cs, worker.Name, joined)
		if pod := runTenantPod(t, ctx, cs, "on-"+worker.Name, map[string]string{corev1.LabelHostname: worker.Name}); pod.Spec.NodeName != worker.Name {
			t.Errorf("pod %s runs on %q, want %s", pod.Name, pod.Spec.NodeName, worker.Name)
		}
		st, err = manager.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Kubelet.Running || !st.KubeProxy.Running || !st.Bootstrapped || st.Server != devcluster.APIServerURL(cp) {
			t.Errorf("after join: %+v, want both running and joined to %s", st, devcluster.APIServerURL(cp))
		}
	})
}

func loadAgentCA(t *testing.T, l devcluster.Layout) *pki.CA {
	t.Helper()
	ca, err := pki.LoadCA(pki.KeyPair{
		CertPEM: []byte(testutil.ReadFile(t, filepath.Join(l.PKIDir(), devcluster.AgentCACert))),
		KeyPEM:  []byte(testutil.ReadFile(t, filepath.Join(l.PKIDir(), devcluster.AgentCAKey))),
	})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// agentClient is a client of node n's agent that expects it to be the agent
// of expectNode, with a client certificate of the agent CA for name.
func agentClient(t *testing.T, ca *pki.CA, expectNode string, n devcluster.Node, name string) *agent.Client {
	return agentClientSigned(t, ca, ca, expectNode, n, name)
}

// agentClientSigned is agentClient with a client certificate that signer issued.
func agentClientSigned(t *testing.T, ca, signer *pki.CA, expectNode string, n devcluster.Node, name string) *agent.Client {
	t.Helper()
	pair, err := signer.Issue(agent.ClientCertSpec(name, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	host, port := devcluster.AgentAddress(n)
	c, err := agent.NewClient(expectNode, host, port, ca.CertPEM, cert)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func createBootstrapToken(t *testing.T, ctx context.Context, cs kubernetes.Interface, node, description string) addons.BootstrapToken {
	t.Helper()
	tok, err := addons.NewBootstrapToken(node, description, 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Secrets(tok.Secret.Namespace).Create(ctx, tok.Secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return tok
}

func waitNodeReady(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string) {
	t.Helper()
	var last *corev1.Node
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		last = n
		return kube.NodeReady(n), nil
	})
	if err != nil {
		t.Fatalf("node %s not Ready: %v (last seen: %+v)", name, err, last)
	}
}

// requireIssuedNodeCSR checks that node name got its client certificate
// through a request a bootstrap token made after since, approved and signed.
func requireIssuedNodeCSR(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string, since time.Time) {
	t.Helper()
	list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, csr := range list.Items {
		if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || csr.CreationTimestamp.Time.Before(since.Add(-time.Second).Truncate(time.Second)) {
			continue
		}
		if len(csr.Spec.Groups) > 0 && slices.Contains(csr.Spec.Groups, "system:bootstrappers") && len(csr.Status.Certificate) > 0 {
			cert, err := pki.ParseCertificate(csr.Status.Certificate)
			if err != nil {
				t.Fatal(err)
			}
			if cert.Subject.CommonName != "system:node:"+name {
				t.Errorf("bootstrap CSR %s issued %q, want system:node:%s", csr.Name, cert.Subject.CommonName, name)
			}
			return
		}
	}
	t.Errorf("no node client CSR from a bootstrap token since %s was issued (%d CSRs)", since.Format(time.RFC3339), len(list.Items))
}
