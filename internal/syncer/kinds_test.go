package syncer

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nestdev/nest/internal/kindsync"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds/serviceaccounttoken"
	"github.com/nestdev/nest/internal/testutil"
)

// The kind syncers run here as in nest-syncer, over real informers and work
// queues, against client-go's fake clientsets for the tenant and the host.

// runKindSyncers starts a syncer's informers and kind syncers (no virtual
// node) over fake tenant and host API servers holding the given objects.
// Each of with changes the options first.
func runKindSyncers(t *testing.T, tenant, host *fake.Clientset, with ...func(*Options)) *syncer {
	t.Helper()
	// Cleanups run last first: the syncers stop before their DNS directory
	// is removed, so no write races the removal.
	dnsDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	o := withTranslator(tr)
	o.PodSecurityLevel, o.DNSDir, o.TokenMaxAge = "baseline", dnsDir, time.Hour
	for _, w := range with {
		w(&o)
	}
	s, err := newSyncerFor(ctx, o, tenant, host)
	if err != nil {
		t.Fatal(err)
	}
	// A sync under way when the test ends finishes writing before the
	// directory goes.
	t.Cleanup(func() { cancel(); s.waitSyncers() })
	if err := s.startSyncers(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// failFirst makes the first n calls of verb on resource fail with a
// server error, as an overloaded or restarting API server does.
func failFirst(c *fake.Clientset, verb, resource string, n int32) *atomic.Int32 {
	var failed atomic.Int32
	c.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed.Load() >= n {
			return false, nil, nil
		}
		failed.Add(1)
		return true, nil, apierrors.NewServiceUnavailable("injected fault")
	})
	return &failed
}

// eventually polls cond every 10 ms until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond() })
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// drain waits until the queues are empty and no key is being synced, then
// stops them, so a check that nothing was written sees every sync's effect.
func drain(t *testing.T, queues ...*kindsync.Syncer) {
	t.Helper()
	for _, k := range queues {
		eventually(t, k.Kind+" queue empty", func() (bool, error) { return k.Queue.Len() == 0, nil })
		k.Queue.ShutDownWithDrain()
	}
}

// podUsing is a tenant pod on the virtual node that mounts a ConfigMap and a
// Secret.
func podUsing(configMap, secret string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "uid-web"},
		Spec: corev1.PodSpec{
			NodeName:   tr.NodeName,
			Containers: []corev1.Container{{Name: "web", Image: "nginx"}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}}},
				{Name: "secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}},
			},
		},
	}
}

func hostConfigMapData(host *fake.Clientset, tenantName string) (map[string]string, error) {
	cm, err := host.CoreV1().ConfigMaps(tr.HostNamespace).Get(context.Background(), contract.HostName(tr.VirtualCluster, "shop", tenantName), metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return cm.Data, nil
}

func TestConfigMapSyncerRetriesACopyTheHostRefused(t *testing.T) {
	tenant := fake.NewClientset(tenantConfigMap("settings", map[string]string{"color": "blue"}), podUsing("settings", "none"))
	host := fake.NewClientset()
	failed := failFirst(host, "create", "configmaps", 3)
	runKindSyncers(t, tenant, host)
	eventually(t, "host copy after three refused creates", func() (bool, error) {
		data, err := hostConfigMapData(host, "settings")
		return err == nil && data["color"] == "blue", nil
	})
	if failed.Load() != 3 {
		t.Errorf("%d creates refused, want 3: the copy was not made through the retries", failed.Load())
	}
}

func TestConfigMapSyncerFollowsUpdatesAndDeletes(t *testing.T) {
	ctx := context.Background()
	tenant := fake.NewClientset(tenantConfigMap("settings", map[string]string{"color": "blue"}), podUsing("settings", "none"))
	host := fake.NewClientset()
	failFirst(host, "update", "configmaps", 2)
	failFirst(host, "delete", "configmaps", 2)
	runKindSyncers(t, tenant, host)
	eventually(t, "first copy", func() (bool, error) {
		_, err := hostConfigMapData(host, "settings")
		return err == nil, nil
	})
	if _, err := tenant.CoreV1().ConfigMaps("shop").Update(ctx, tenantConfigMap("settings", map[string]string{"color": "green"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "update reaches the host through two refused updates", func() (bool, error) {
		data, err := hostConfigMapData(host, "settings")
		return err == nil && data["color"] == "green", nil
	})
	if err := tenant.CoreV1().ConfigMaps("shop").Delete(ctx, "settings", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "delete reaches the host through two refused deletes", func() (bool, error) {
		_, err := hostConfigMapData(host, "settings")
		return apierrors.IsNotFound(err), nil
	})
}

func TestConfigMapSyncerOnlyCopiesWhatPodsUse(t *testing.T) {
	tenant := fake.NewClientset(tenantConfigMap("settings", nil), tenantConfigMap("unused", nil), podUsing("settings", "none"))
	host := fake.NewClientset()
	s := runKindSyncers(t, tenant, host)
	eventually(t, "copy of the used ConfigMap", func() (bool, error) {
		_, err := hostConfigMapData(host, "settings")
		return err == nil, nil
	})
	drain(t, s.configMaps)
	if _, err := hostConfigMapData(host, "unused"); !apierrors.IsNotFound(err) {
		t.Errorf("a ConfigMap no pod uses was copied (get: %v)", err)
	}
}

func TestConfigMapSyncerRestoresACopyDeletedFromOutside(t *testing.T) {
	tenant := fake.NewClientset(tenantConfigMap("settings", map[string]string{"color": "blue"}), podUsing("settings", "none"))
	host := fake.NewClientset()
	runKindSyncers(t, tenant, host)
	name := contract.HostName(tr.VirtualCluster, "shop", "settings")
	eventually(t, "first copy", func() (bool, error) {
		_, err := host.CoreV1().ConfigMaps(tr.HostNamespace).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil, nil
	})
	if err := host.CoreV1().ConfigMaps(tr.HostNamespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "copy made again", func() (bool, error) {
		_, err := host.CoreV1().ConfigMaps(tr.HostNamespace).Get(context.Background(), name, metav1.GetOptions{})
		return err == nil, nil
	})
}

func TestConfigMapSyncerDeletesAnOrphanLeftWhileItWasDown(t *testing.T) {
	orphan := hostConfigMap(testutil.CopyMeta(tr.HostNamespace, tr.VirtualCluster, "gone"), map[string]string{"k": "v"})
	host := fake.NewClientset(orphan)
	runKindSyncers(t, fake.NewClientset(), host)
	eventually(t, "orphan deleted", func() (bool, error) {
		_, err := hostConfigMapData(host, "gone")
		return apierrors.IsNotFound(err), nil
	})
}

func TestSecretSyncerRetriesAndLeavesTokenSecretsAlone(t *testing.T) {
	ctx := context.Background()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: "shop", UID: "uid-creds"}, Data: map[string][]byte{"password": []byte("one")}}
	tenant := fake.NewClientset(secret, podUsing("none", "creds"))
	host := fake.NewClientset()
	failFirst(host, "create", "secrets", 2)
	failFirst(host, "update", "secrets", 2)
	runKindSyncers(t, tenant, host)
	name := contract.HostName(tr.VirtualCluster, "shop", "creds")
	hostPassword := func() string {
		s, err := host.CoreV1().Secrets(tr.HostNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return string(s.Data["password"])
	}
	eventually(t, "copy through two refused creates", func() (bool, error) { return hostPassword() == "one", nil })
	changed := secret.DeepCopy()
	changed.Data["password"] = []byte("two")
	if _, err := tenant.CoreV1().Secrets("shop").Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "update through two refused updates", func() (bool, error) { return hostPassword() == "two", nil })
}

// A token Secret carries the tenant key of its pod, not of a tenant Secret:
// the Secret syncer must not take it for an orphan copy and delete it.
func TestSecretSyncerDoesNotDeleteTokenSecrets(t *testing.T) {
	tokenSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Name: contract.TokenSecretName(contract.HostName(tr.VirtualCluster, "shop", "web")), Namespace: tr.HostNamespace,
		Labels: contract.HostLabels(tr.VirtualCluster, "shop"), Annotations: contract.HostAnnotations("shop", "web", "uid-web"),
	}}
	tokenSecret.Labels[contract.LabelTokenSecret] = "true"
	host := fake.NewClientset(tokenSecret)
	s := runKindSyncers(t, fake.NewClientset(), host)
	drain(t, s.secrets, s.tokens)
	if _, err := host.CoreV1().Secrets(tr.HostNamespace).Get(context.Background(), tokenSecret.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("token Secret: %v", err)
	}
}

func TestServiceSyncerRetriesAndWritesDNS(t *testing.T) {
	ctx := context.Background()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", UID: "uid-web"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}},
	}}
	tenant := fake.NewClientset(svc)
	host := fake.NewClientset()
	failFirst(host, "create", "services", 3)
	s := runKindSyncers(t, tenant, host)
	name := contract.HostName(tr.VirtualCluster, "shop", "web")
	var copied *corev1.Service
	eventually(t, "host Service through three refused creates", func() (bool, error) {
		got, err := host.CoreV1().Services(tr.HostNamespace).Get(ctx, name, metav1.GetOptions{})
		copied = got
		return err == nil, nil
	})
	// The fake host allocates no ClusterIP; set one as the host API server would.
	copied.Spec.ClusterIP = "10.96.7.7"
	if _, err := host.CoreV1().Services(tr.HostNamespace).Update(ctx, copied, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	hosts := filepath.Join(s.o.DNSDir, contract.HostsFileName)
	eventually(t, "DNS record for the host ClusterIP", func() (bool, error) {
		data, err := os.ReadFile(hosts)
		return err == nil && strings.Contains(string(data), "10.96.7.7 web.shop.svc."+tr.ClusterDomain), nil
	})
	external := svc.DeepCopy()
	external.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.com"}
	if _, err := tenant.CoreV1().Services("shop").Update(ctx, external, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "host Service deleted once the tenant's became ExternalName", func() (bool, error) {
		_, err := host.CoreV1().Services(tr.HostNamespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	eventually(t, "DNS record gone", func() (bool, error) {
		data, err := os.ReadFile(hosts)
		return err == nil && !strings.Contains(string(data), "web.shop"), nil
	})
}

func TestTokenSyncerRefreshesDueTokensThroughFailures(t *testing.T) {
	ctx := context.Background()
	due := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Name: contract.TokenSecretName(contract.HostName(tr.VirtualCluster, "shop", "web")), Namespace: tr.HostNamespace,
		Labels: contract.HostLabels(tr.VirtualCluster, "shop"), Annotations: contract.HostAnnotations("shop", "web", "uid-web"),
	}, Data: map[string][]byte{"token-0-0": []byte("old")}}
	due.Labels[contract.LabelTokenSecret] = "true"
	due.Annotations[serviceaccounttoken.AnnotationProjections] = `[{"Key":"token-0-0","ExpirationSeconds":3600}]`
	due.Annotations[serviceaccounttoken.AnnotationRefreshAt] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	tenant := fake.NewClientset()
	tokenRequests := failFirst(tenant, "create", "serviceaccounts", 2)
	tenant.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if tokenRequests.Load() < 2 {
			return false, nil, nil
		}
		return true, &authenticationv1.TokenRequest{Status: authenticationv1.TokenRequestStatus{
			Token: "new", ExpirationTimestamp: metav1.NewTime(time.Now().Add(time.Hour)),
		}}, nil
	})
	host := fake.NewClientset(due)
	failFirst(host, "update", "secrets", 2)
	runKindSyncers(t, tenant, host)
	eventually(t, "fresh token stored", func() (bool, error) {
		s, err := host.CoreV1().Secrets(tr.HostNamespace).Get(ctx, due.Name, metav1.GetOptions{})
		if err != nil || string(s.Data["token-0-0"]) != "new" {
			return false, nil
		}
		next, err := time.Parse(time.RFC3339, s.Annotations[serviceaccounttoken.AnnotationRefreshAt])
		return err == nil && next.After(time.Now().Add(40*time.Minute)), nil
	})
}

func TestSyncFailuresShowInMetrics(t *testing.T) {
	tenant := fake.NewClientset(tenantConfigMap("settings", nil), podUsing("settings", "none"))
	host := fake.NewClientset()
	failFirst(host, "create", "configmaps", 1)
	runKindSyncers(t, tenant, host)
	eventually(t, "copy", func() (bool, error) {
		_, err := hostConfigMapData(host, "settings")
		return err == nil, nil
	})
	srv := httptest.NewServer(kindsync.MetricsHandler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`nest_syncer_sync_errors_total{kind="configmaps"}`,
		`nest_syncer_sync_duration_seconds_count{kind="configmaps"}`,
		`workqueue_depth{name="configmaps"}`,
		`workqueue_retries_total{name="configmaps"}`,
		`workqueue_depth{name="tokens"}`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
