package syncer

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func TestNodeMetricsCountRunningPodsAndContainers(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	waiting := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}}
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: "a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running, running}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: "a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running, waiting}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "pending", Namespace: "b"}, Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting}}},
	} {
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	nodeMetricsHandler(corelisters.NewPodLister(indexer)).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	for _, want := range []string{"kubelet_running_pods 2\n", "kubelet_running_containers 3\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("node /metrics lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(string(body), "rest_client_") {
		t.Errorf("node /metrics, which tenants read, shows client-go's metrics that name the host API server:\n%s", body)
	}
}
