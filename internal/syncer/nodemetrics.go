package syncer

import (
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/component-base/metrics"

	"github.com/nestdev/nest/internal/kindsync"
)

// nodeMetricsHandler serves the virtual node's kubelet /metrics: the pod and
// container counts a kubelet reports (kubelet_running_pods,
// kubelet_running_containers) and the syncer's own sync metrics. It has a
// registry of its own, not the syncer's full one, because tenants read it
// through nodes/proxy: client-go's metrics there would name the host API
// server.
func nodeMetricsHandler(pods corelisters.PodLister) http.Handler {
	runningPods := metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: "kubelet", Name: "running_pods",
		Help: "Tenant pods on the virtual node that have a running container, as the kubelet counts them.",
	})
	runningContainers := metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem: "kubelet", Name: "running_containers",
		Help: "Running containers of the tenant pods on the virtual node.",
	})
	reg := metrics.NewKubeRegistry()
	reg.MustRegister(append([]metrics.Registerable{runningPods, runningContainers}, kindsync.SyncMetrics()...)...)
	serve := metrics.HandlerFor(reg, metrics.HandlerOpts{})
	// Counted at each scrape from the informer's cache, as the kubelet
	// counts from its pod manager: nothing to keep in step between scrapes.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, c := countRunning(pods)
		runningPods.Set(float64(p))
		runningContainers.Set(float64(c))
		serve.ServeHTTP(w, r)
	})
}

// countRunning counts the pods of the lister that are running and their
// running containers, from their reported statuses.
func countRunning(pods corelisters.PodLister) (podCount, containerCount int) {
	list, err := pods.List(labels.Everything())
	if err != nil {
		return 0, 0
	}
	for _, p := range list {
		running := 0
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Running != nil {
				running++
			}
		}
		containerCount += running
		if running > 0 && p.Status.Phase == corev1.PodRunning {
			podCount++
		}
	}
	return podCount, containerCount
}
