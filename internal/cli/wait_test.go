package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controller/virtualcluster"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/kube"
)

// readyzServer is a tenant API server stand-in whose /readyz fails the
// first failures times. It returns the server and its call count.
func readyzServer(t *testing.T, failures int64) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) <= failures {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func kubeconfigFor(t *testing.T, srv *httptest.Server) string {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["tenant"] = &clientcmdapi.Cluster{Server: srv.URL, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["tenant"] = &clientcmdapi.Context{Cluster: "tenant", AuthInfo: "admin"}
	cfg.CurrentContext = "tenant"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(data)
}

func TestWaitReachablePollsTheKubeconfigEndpointUntilItAnswers(t *testing.T) {
	srv, calls := readyzServer(t, 3)
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "vc-demo"}, Spec: nestv1.VirtualClusterSpec{Kubeconfig: kubeconfigFor(t, srv)}}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(vc, controlplane.ServiceFor(vc, "")).Build()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := waitReachable(ctx, c, client.ObjectKeyFromObject(vc), time.Now(), &out); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != 4 {
		t.Errorf("/readyz called %d times, want 4 (3 refusals, then ok)", got)
	}
	if !strings.Contains(out.String(), "answers through its kubeconfig") {
		t.Errorf("output %q does not say the endpoint answers", out.String())
	}
}

func TestWaitReachableNamesTheEndpointWhenItNeverAnswers(t *testing.T) {
	srv, _ := readyzServer(t, 1<<40)
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "vc-demo"}, Spec: nestv1.VirtualClusterSpec{Kubeconfig: kubeconfigFor(t, srv)}}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(vc, controlplane.ServiceFor(vc, "")).Build()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := waitReachable(ctx, c, client.ObjectKeyFromObject(vc), time.Now(), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "does not answer from here") {
		t.Fatalf("err = %v, want one saying the endpoint does not answer", err)
	}
}

// The Service's own type decides, not the spec's, which nest-manager's
// --default-service-type fills when unset.
func TestWaitReachableSkipsAClusterIPEndpoint(t *testing.T) {
	srv, calls := readyzServer(t, 0)
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "vc-demo"}, Spec: nestv1.VirtualClusterSpec{Kubeconfig: kubeconfigFor(t, srv)}}
	svc := controlplane.ServiceFor(vc, corev1.ServiceTypeClusterIP)
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(vc, svc).Build()
	if err := waitReachable(context.Background(), c, client.ObjectKeyFromObject(vc), time.Now(), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != 0 {
		t.Errorf("/readyz called %d times for a ClusterIP endpoint, want 0", got)
	}
}

// nest upgrade --wait prints each step, ends once the control plane runs
// the version, and gives up at once on a refusal.
func TestWaitUpgradedFollowsTheConditionAndStopsOnARefusal(t *testing.T) {
	ctx := context.Background()
	to := "v1.37.2"
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "vc-a"},
		Status: nestv1.VirtualClusterStatus{Version: to, Conditions: []metav1.Condition{
			{Type: nestv1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: virtualcluster.ReasonUpToDate, Message: "the control plane runs " + to},
			{Type: nestv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready"},
		}}}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(vc).Build()
	var out bytes.Buffer
	if err := waitUpgraded(ctx, c, client.ObjectKeyFromObject(vc), to, time.Now(), &out); err != nil || !strings.Contains(out.String(), "UpToDate: the control plane runs "+to) {
		t.Errorf("upgraded: %v, printed %q", err, out.String())
	}
	vc.Status.Version = "v1.36.3"
	vc.Status.Conditions[0] = metav1.Condition{Type: nestv1.ConditionUpgrading, Status: metav1.ConditionFalse, Reason: virtualcluster.ReasonUpgradeRefused, Message: "spec.kubernetesVersion: downgrades are refused"}
	c = fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(vc).Build()
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := waitUpgraded(tctx, c, client.ObjectKeyFromObject(vc), to, time.Now(), &out); err == nil || !strings.Contains(err.Error(), "downgrades are refused") || tctx.Err() != nil {
		t.Errorf("refused: %v (context %v), want the refusal at once", err, tctx.Err())
	}
}

func TestUpgradeWaitsLongerByDefault(t *testing.T) {
	cmd := newUpgradeCommand(&hostFlags{})
	if got := cmd.Flags().Lookup("timeout").Value.String(); got != upgradeTimeout.String() {
		t.Errorf("nest upgrade --timeout defaults to %s, want %s", got, upgradeTimeout)
	}
}
