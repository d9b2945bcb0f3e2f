package memberusage

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metric labels: the VirtualCluster as namespace/name, and the member.
const (
	labelVirtualCluster = "virtual_cluster"
	labelMember         = "member"
)

var (
	// gpuSeconds and cpuSeconds grow by the usage each pass adds to the
	// records, so rate() and increase() over them are GPU and CPU use.
	// They count from nest-manager's start; the records hold the totals.
	gpuSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nest_member_usage_gpu_seconds_total",
		Help: "nvidia.com/gpu requested by tenant pods in member clusters times the seconds they ran.",
	}, []string{labelVirtualCluster, labelMember})
	cpuSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nest_member_usage_cpu_seconds_total",
		Help: "cpu requested by tenant pods in member clusters times the seconds they ran.",
	}, []string{labelVirtualCluster, labelMember})
	podsRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nest_member_pods_running",
		Help: "Tenant pods running in member clusters at the last pass of the memberusage controller.",
	}, []string{labelVirtualCluster, labelMember})
)

// init registers the metrics with controller-runtime's registry, which
// nest-manager's metrics endpoint serves.
func init() {
	metrics.Registry.MustRegister(gpuSeconds, cpuSeconds, podsRunning)
}

// observe adds what after counts beyond before to the counters of the
// VirtualCluster vc (namespace/name), and sets the running gauge. A
// member whose total did not grow adds nothing: counters never decrease.
func observe(vc string, before, after map[string]Summary) {
	for m, a := range after {
		b := before[m]
		if d := a.GPUSeconds - b.GPUSeconds; d > 0 {
			gpuSeconds.WithLabelValues(vc, m).Add(d)
		}
		if d := a.CPUSeconds - b.CPUSeconds; d > 0 {
			cpuSeconds.WithLabelValues(vc, m).Add(d)
		}
		podsRunning.WithLabelValues(vc, m).Set(float64(a.Running))
	}
}

// forget drops the running gauge of a VirtualCluster that is gone; its
// counters stay until nest-manager restarts, as counters do.
func forget(vc string) {
	podsRunning.DeletePartialMatch(prometheus.Labels{labelVirtualCluster: vc})
}
