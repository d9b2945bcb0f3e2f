package syncer

import (
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/nestdev/nest/internal/syncer/kinds/configmap"
	"github.com/nestdev/nest/internal/syncer/kinds/hostcopy"
	"github.com/nestdev/nest/internal/syncer/kinds/secret"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nestdev/nest/internal/testutil"
)

// indexerOf is an informer cache holding objs, for listers in tests.
func indexerOf(t *testing.T, objs ...runtime.Object) cache.Indexer {
	return testutil.Indexer(t, objs...)
}

func podLister(t *testing.T, pods ...runtime.Object) corelisters.PodLister {
	return corelisters.NewPodLister(indexerOf(t, pods...))
}

func tenantConfigMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name)}, Data: data}
}

func hostConfigMap(meta metav1.ObjectMeta, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: meta, Data: data}
}

// testObjects is an objectSyncer writing to host, within a budget of budget
// bytes, whose tenant and host caches are empty.
func testObjects(t *testing.T, budget int64, host *fake.Clientset) *objectSyncer {
	t.Helper()
	hostCMs := corelisters.NewConfigMapLister(indexerOf(t)).ConfigMaps(tr.HostNamespace)
	hostSecrets := corelisters.NewSecretLister(indexerOf(t)).Secrets(tr.HostNamespace)
	o := &objectSyncer{
		tr: tr, budget: hostcopy.NewBudget(budget, tr.VirtualCluster, hostCMs, hostSecrets),
		tenantConfigMaps: corelisters.NewConfigMapLister(indexerOf(t)), tenantSecrets: corelisters.NewSecretLister(indexerOf(t)),
		hostSecrets: hostSecrets,
		pods:        cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{referencesIndex: tr.podReferences}),
	}
	target := func(kind string) hostcopy.Target {
		return hostcopy.Target{VirtualCluster: tr.VirtualCluster, HostNamespace: tr.HostNamespace, Host: host,
			Budget: o.budget, Referenced: o.referencer(kind), Recorder: record.NewFakeRecorder(10)}
	}
	o.configMaps = configmap.New(configmap.Config{Target: target(hostcopy.KindConfigMap), HostCache: hostCMs, Tenant: o.tenantConfigMaps})
	o.secrets = secret.New(secret.Config{Target: target(hostcopy.KindSecret), HostCache: hostSecrets, Tenant: o.tenantSecrets})
	return o
}

// withTranslator is Options whose flags hold tr's translation.
func withTranslator(tr Translator) Options {
	var o Options
	o.Translation = tr.Translation
	return o
}

// hostOptions is a host syncer's Options writing DNS to dnsDir.
func hostOptions(dnsDir string) Options {
	o := withTranslator(tr)
	o.PodSecurityLevel, o.Host, o.DNSDir = "baseline", &rest.Config{}, dnsDir
	return o
}
