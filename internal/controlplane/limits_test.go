package controlplane

import (
	"flag"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/syncer/contract"
)

func list(pairs ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		out[corev1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return out
}

func sameList(got, want corev1.ResourceList) error {
	if len(got) != len(want) {
		return fmt.Errorf("%v, want %v", got, want)
	}
	for name, q := range want {
		if g, ok := got[name]; !ok || g.Cmp(q) != 0 {
			return fmt.Errorf("%s = %s, want %s (all: %v)", name, g.String(), q.String(), got)
		}
	}
	return nil
}

func TestLimitRangeFor(t *testing.T) {
	tests := []struct {
		name                   string
		share                  corev1.ResourceList
		defaults, requests, mx corev1.ResourceList
	}{{
		name:     "default share",
		defaults: list("cpu", "500m", "memory", "512Mi", "ephemeral-storage", "1Gi"),
		requests: list("cpu", "10m", "memory", "32Mi", "ephemeral-storage", "64Mi"),
		// The share, except cpu: kube-apiserver's 2 cpu limit is larger.
		mx: list("cpu", "2", "memory", "4Gi"),
	}, {
		name:     "small share caps the defaults; the control plane's limits raise max",
		share:    list("cpu", "250m", "memory", "256Mi", "ephemeral-storage", "512Mi"),
		defaults: list("cpu", "250m", "memory", "256Mi", "ephemeral-storage", "512Mi"),
		requests: list("cpu", "10m", "memory", "32Mi", "ephemeral-storage", "64Mi"),
		mx:       list("cpu", "2", "memory", "1Gi", "ephemeral-storage", "512Mi"),
	}, {
		name:     "tiny share caps the default requests too",
		share:    list("cpu", "5m", "memory", "16Mi"),
		defaults: list("cpu", "5m", "memory", "16Mi", "ephemeral-storage", "1Gi"),
		requests: list("cpu", "5m", "memory", "16Mi", "ephemeral-storage", "64Mi"),
		mx:       list("cpu", "2", "memory", "1Gi"),
	}, {
		name:     "large share",
		share:    list("cpu", "64", "memory", "256Gi"),
		defaults: list("cpu", "500m", "memory", "512Mi", "ephemeral-storage", "1Gi"),
		requests: list("cpu", "10m", "memory", "32Mi", "ephemeral-storage", "64Mi"),
		mx:       list("cpu", "64", "memory", "256Gi"),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lr := LimitRangeFor(vc(func(v *nestv1.VirtualCluster) { v.Spec.PromoteResources.Resources = tt.share }))
			if lr.Name != names.LimitRange() || len(lr.Spec.Limits) != 1 || lr.Spec.Limits[0].Type != corev1.LimitTypeContainer {
				t.Fatalf("limit range %s %+v", lr.Name, lr.Spec)
			}
			item := lr.Spec.Limits[0]
			for _, c := range []struct {
				field     string
				got, want corev1.ResourceList
			}{{"default", item.Default, tt.defaults}, {"defaultRequest", item.DefaultRequest, tt.requests}, {"max", item.Max, tt.mx}} {
				if err := sameList(c.got, c.want); err != nil {
					t.Errorf("%s: %v", c.field, err)
				}
			}
		})
	}
}

// The control-plane pod lives in the namespace the LimitRange governs: each
// of its containers states requests and limits within max.
func TestControlPlaneFitsLimitRange(t *testing.T) {
	for _, share := range []corev1.ResourceList{nil, list("cpu", "100m", "memory", "128Mi")} {
		v := vc(func(v *nestv1.VirtualCluster) { v.Spec.PromoteResources.Resources = share })
		item := LimitRangeFor(v).Spec.Limits[0]
		pod := StatefulSetFor(v, Options{}, ServiceIPs{}).Spec.Template.Spec
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				limit, hasLimit := c.Resources.Limits[name]
				request := c.Resources.Requests[name]
				if !hasLimit || request.Cmp(limit) > 0 || limit.Cmp(item.Max[name]) > 0 {
					t.Errorf("share %v: %s %s request %s limit %s max %s", share, c.Name, name, request.String(), limit.String(), ptr.To(item.Max[name]).String())
				}
			}
		}
	}
}

func TestControlPlaneResources(t *testing.T) {
	tests := []struct {
		name                      string
		resources                 corev1.ResourceRequirements
		cpu, memory               string
		readOnly, mutating        int
		requestCPU, requestMemory string
	}{
		{"defaults", corev1.ResourceRequirements{}, "2", "1Gi", 128, 64, "100m", "256Mi"},
		{"request above the default limit", corev1.ResourceRequirements{Requests: list("cpu", "3", "memory", "2Gi")}, "3", "2Gi", 299, 149, "3", "2Gi"},
		{"explicit limit", corev1.ResourceRequirements{Limits: list("memory", "4Gi")}, "2", "4Gi", 400, 200, "100m", "256Mi"},
		{"limit below the default request", corev1.ResourceRequirements{Limits: list("memory", "200Mi", "cpu", "50m")}, "50m", "200Mi", 20, 10, "50m", "200Mi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := vc(func(v *nestv1.VirtualCluster) { v.Spec.ControlPlane.Resources = tt.resources })
			pod := StatefulSetFor(v, Options{}, ServiceIPs{}).Spec.Template.Spec
			api := pod.InitContainers[2]
			if err := sameList(api.Resources.Limits, list("cpu", tt.cpu, "memory", tt.memory)); err != nil {
				t.Errorf("kube-apiserver limits: %v", err)
			}
			if err := sameList(api.Resources.Requests, list("cpu", tt.requestCPU, "memory", tt.requestMemory)); err != nil {
				t.Errorf("kube-apiserver requests: %v", err)
			}
			args := strings.Join(api.Args, " ")
			for _, want := range []string{fmt.Sprintf("--max-requests-inflight=%d ", tt.readOnly), fmt.Sprintf("--max-mutating-requests-inflight=%d", tt.mutating)} {
				if !strings.Contains(args+" ", want) {
					t.Errorf("kube-apiserver lacks %s", want)
				}
			}
		})
	}
	// Every container has a memory limit its Go runtime knows about, and
	// the control plane's GOGC.
	pod := StatefulSetFor(vc(nil), Options{}, ServiceIPs{}).Spec.Template.Spec
	want := map[string]string{"etcd": "512Mi", "etcd-member": "64Mi", "kube-apiserver": "1Gi", "kube-controller-manager": "512Mi", "kube-scheduler": "256Mi", "nest-syncer": "512Mi", "coredns": "128Mi"}
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		limit := c.Resources.Limits[corev1.ResourceMemory]
		if limit.String() != want[c.Name] {
			t.Errorf("%s memory limit %s, want %s", c.Name, limit.String(), want[c.Name])
		}
		gomem, gogc := "", ""
		for _, e := range c.Env {
			switch e.Name {
			case "GOMEMLIMIT":
				gomem = e.Value
			case "GOGC":
				gogc = e.Value
			}
		}
		if gogc != strconv.Itoa(ControlPlaneGOGC) {
			t.Errorf("%s GOGC %q, want %d", c.Name, gogc, ControlPlaneGOGC)
		}
		if n, err := strconv.ParseInt(gomem, 10, 64); err != nil || n >= limit.Value() || n < limit.Value()*8/10 {
			t.Errorf("%s GOMEMLIMIT %q for a limit of %s", c.Name, gomem, limit.String())
		}
	}
}

func TestAPIServerInflight(t *testing.T) {
	for _, tc := range []struct {
		limit              string
		readOnly, mutating int
	}{
		{"128Mi", 20, 10}, // below the baseline: the floor
		{"512Mi", 43, 21},
		{"1Gi", 128, 64},
		{"2656Mi", 400, 200}, // the upstream defaults
		{"16Gi", 400, 200},
	} {
		r, m := APIServerInflight(resource.MustParse(tc.limit))
		if r != tc.readOnly || m != tc.mutating {
			t.Errorf("%s: %d/%d, want %d/%d", tc.limit, r, m, tc.readOnly, tc.mutating)
		}
	}
}

func TestObjectQuotaFor(t *testing.T) {
	tests := []struct {
		name                         string
		mutate                       func(*nestv1.VirtualCluster)
		configMaps, secrets, service string
		dataBytes                    int64
	}{
		// 500 + the DNS, dedicated-nodes, etcd bootstrap, API server and member usage ConfigMaps + kube-root-ca.crt;
		// 500 + 5 Nest Secrets (the members Secret too) + 110 token Secrets; 200 + the API server,
		// DNS and peer Services.
		{"defaults", nil, "506", "615", "203", 64 << 20},
		{"budget and pod count", func(v *nestv1.VirtualCluster) {
			v.Spec.VirtualNode.ObjectBudget = nestv1.ObjectBudgetSpec{ConfigMaps: ptr.To[int32](10), Secrets: ptr.To[int32](0), Services: ptr.To[int32](5), DataBytes: ptr.To(resource.MustParse("1Mi"))}
			v.Spec.PromoteResources.Resources = list("pods", "20")
		}, "16", "25", "8", 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := vc(tt.mutate)
			q := ObjectQuotaFor(v)
			if q.Name != names.ObjectQuota() || q.Spec.ScopeSelector != nil || len(q.Spec.Scopes) != 0 {
				t.Errorf("quota %s scopes %v %v: want an unscoped object quota", q.Name, q.Spec.ScopeSelector, q.Spec.Scopes)
			}
			// Claims: the etcd claim and the default 20 of the tenant's,
			// 1Gi and 10Gi.
			if err := sameList(q.Spec.Hard, list("count/configmaps", tt.configMaps, "count/secrets", tt.secrets, "services", tt.service,
				"persistentvolumeclaims", "21", "requests.storage", "11Gi")); err != nil {
				t.Error(err)
			}
			if got := BudgetOf(v).DataBytes; got != tt.dataBytes {
				t.Errorf("data budget %d, want %d", got, tt.dataBytes)
			}
			args := strings.Join(StatefulSetFor(v, Options{}, ServiceIPs{}).Spec.Template.Spec.Containers[2].Args, " ")
			if want := fmt.Sprintf("--data-budget-bytes=%d", tt.dataBytes); !strings.Contains(args, want) {
				t.Errorf("nest-syncer lacks %s in %s", want, args)
			}
		})
	}
}

// With containerLimits None, tenant containers keep the limits they state:
// no default and no maximum for cpu or memory (a maximum would make a limit
// compulsory), and no quota on limits (which would too).
func TestContainerLimitsNone(t *testing.T) {
	v := vc(func(v *nestv1.VirtualCluster) { v.Spec.VirtualNode.ContainerLimits = nestv1.ContainerLimitsNone })
	item := LimitRangeFor(v).Spec.Limits[0]
	if err := sameList(item.Default, list("ephemeral-storage", "1Gi")); err != nil {
		t.Errorf("default: %v", err)
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := item.Max[name]; ok {
			t.Errorf("max has %s, which makes a %s limit compulsory", name, name)
		}
		if _, ok := DefaultContainerLimits(v)[name]; ok {
			t.Errorf("the syncer is told of a default %s limit", name)
		}
	}
	hard := TenantQuotaFor(v).Spec.Hard
	for _, name := range []corev1.ResourceName{"limits.cpu", "limits.memory"} {
		if _, ok := hard[name]; ok {
			t.Errorf("the tenant quota holds %s, which makes limits compulsory", name)
		}
	}
	for _, name := range []corev1.ResourceName{"requests.cpu", "requests.memory", "pods"} {
		if _, ok := hard[name]; !ok {
			t.Errorf("the tenant quota lacks %s", name)
		}
	}
	if _, ok := TenantQuotaFor(vc(nil)).Spec.Hard["limits.memory"]; !ok {
		t.Error("by default the tenant quota does not hold limits.memory")
	}
}

// spec.virtualNode.nodeDisk reaches nest-syncer; without it nest-syncer
// refuses hostPath volumes.
func TestNodeDiskReachesTheSyncer(t *testing.T) {
	for _, tt := range []struct {
		name string
		disk *nestv1.NodeDiskSpec
		want []string
	}{
		{"none", nil, nil},
		{"default class", &nestv1.NodeDiskSpec{Size: resource.MustParse("1Gi")}, []string{"--node-disk-size=1Gi"}},
		{"a class", &nestv1.NodeDiskSpec{Size: resource.MustParse("5Gi"), StorageClassName: ptr.To("fast")}, []string{"--node-disk-size=5Gi", "--node-disk-storage-class=fast"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := vc(func(v *nestv1.VirtualCluster) { v.Spec.VirtualNode.NodeDisk = tt.disk })
			args := StatefulSetFor(v, Options{}, ServiceIPs{}).Spec.Template.Spec.Containers[2].Args
			var got []string
			for _, a := range args {
				if strings.HasPrefix(a, "--node-disk") {
					got = append(got, a)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("nest-syncer's disk flags %v, want %v", got, tt.want)
			}
		})
	}
}

// spec.virtualNode.privilegedContainers reaches nest-syncer only when it
// confines: Refuse, or the field unset, is nest-syncer's default.
func TestPrivilegedContainersReachTheSyncer(t *testing.T) {
	for policy, want := range map[nestv1.PrivilegedContainers]bool{"": false, nestv1.PrivilegedContainersRefuse: false, nestv1.PrivilegedContainersConfine: true} {
		v := vc(func(v *nestv1.VirtualCluster) { v.Spec.VirtualNode.PrivilegedContainers = policy })
		args := StatefulSetFor(v, Options{}, ServiceIPs{}).Spec.Template.Spec.Containers[2].Args
		if got := slices.Contains(args, "--privileged-containers=Confine"); got != want {
			t.Errorf("%q: nest-syncer confines privileged containers = %v, want %v (args %v)", policy, got, want, args)
		}
	}
}

// The host holds the claims to each replica's etcd claim, one disk per
// virtual node and the tenant's own claims (spec.virtualNode.storage), and
// their storage to their sizes.
func TestObjectQuotaBoundsEveryClaim(t *testing.T) {
	for _, tt := range []struct {
		name            string
		mutate          func(*nestv1.VirtualCluster)
		claims, storage string
	}{
		{"two disks", func(v *nestv1.VirtualCluster) {
			v.Spec.VirtualNode.Count = ptr.To[int32](2)
			v.Spec.VirtualNode.NodeDisk = &nestv1.NodeDiskSpec{Size: resource.MustParse("512Mi")}
			v.Spec.Datastore.StorageSize = ptr.To(resource.MustParse("2Gi"))
		}, "23", "13Gi"},
		{"three replicas and a storage budget", func(v *nestv1.VirtualCluster) {
			v.Spec.ControlPlane.Replicas = ptr.To[int32](3)
			v.Spec.VirtualNode.Storage = nestv1.StorageSpec{Requests: ptr.To(resource.MustParse("5Gi")), Claims: ptr.To[int32](4)}
		}, "7", "8Gi"},
	} {
		hard := ObjectQuotaFor(vc(tt.mutate)).Spec.Hard
		if got := hard[corev1.ResourcePersistentVolumeClaims]; got.Cmp(resource.MustParse(tt.claims)) != 0 {
			t.Errorf("%s: persistentvolumeclaims = %s, want %s", tt.name, got.String(), tt.claims)
		}
		if got := hard[corev1.ResourceRequestsStorage]; got.Cmp(resource.MustParse(tt.storage)) != 0 {
			t.Errorf("%s: requests.storage = %s, want %s", tt.name, got.String(), tt.storage)
		}
	}
}

// The manager's --node-network-agent reaches nest-syncer, which then gives
// hostNetwork pods the node network.
func TestNodeNetworkReachesTheSyncer(t *testing.T) {
	for _, on := range []bool{false, true} {
		args := StatefulSetFor(vc(func(*nestv1.VirtualCluster) {}), Options{NodeNetwork: on}, ServiceIPs{}).Spec.Template.Spec.Containers[2].Args
		if got := slices.Contains(args, "--node-network"); got != on {
			t.Errorf("node network agent %v: nest-syncer's --node-network = %v (args %v)", on, got, args)
		}
	}
}

// syncerFlags parses the nest-syncer args of v's control plane back into
// nest-syncer's options.
func syncerFlags(t *testing.T, v *nestv1.VirtualCluster, o Options) contract.Flags {
	t.Helper()
	var got contract.Flags
	fs := flag.NewFlagSet("nest-syncer", flag.ContinueOnError)
	got.BindFlags(fs)
	if err := fs.Parse(StatefulSetFor(v, o, ServiceIPs{}).Spec.Template.Spec.Containers[2].Args); err != nil {
		t.Fatal(err)
	}
	return got
}

// The grace period bound, the registry allow-list, the platform's deny list
// with the host's ranges, and the pull policy reach nest-syncer.
func TestImagePolicyAndGracePeriodReachTheSyncer(t *testing.T) {
	hostRanges := HostNetwork{
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")},
		NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
	}
	v := vc(func(v *nestv1.VirtualCluster) {
		v.Spec.VirtualNode.MaxTerminationGracePeriodSeconds = ptr.To[int64](60)
		v.Spec.VirtualNode.ImageRegistries = []string{"registry.example.com:5000", "*.example.org"}
	})
	got := syncerFlags(t, v, Options{HostNetwork: hostRanges, ImageRegistryDenylist: []string{"registry.internal"}, AlwaysPullImages: true})
	if got.MaxGracePeriodSeconds != 60 || !got.AlwaysPullImages {
		t.Errorf("grace bound %d, always pull %v; want 60, true", got.MaxGracePeriodSeconds, got.AlwaysPullImages)
	}
	if want := []string{"registry.example.com:5000", "*.example.org"}; !slices.Equal(got.Images.Allowed, want) {
		t.Errorf("allowed registries %v, want %v", got.Images.Allowed, want)
	}
	if want := []string{"registry.internal", "10.244.0.0/16", "10.96.0.0/12", "192.0.2.0/24"}; !slices.Equal(got.Images.Denied, want) {
		t.Errorf("denied registries %v, want %v", got.Images.Denied, want)
	}

	// Unset: the default bound, the host's kubelets check credentials, and
	// with the host's ranges unknown every private range is denied.
	got = syncerFlags(t, vc(nil), Options{})
	if got.MaxGracePeriodSeconds != contract.DefaultMaxGracePeriodSeconds || got.AlwaysPullImages || len(got.Images.Allowed) != 0 {
		t.Errorf("defaults: grace bound %d, always pull %v, allowed %v", got.MaxGracePeriodSeconds, got.AlwaysPullImages, got.Images.Allowed)
	}
	for _, private := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} {
		if !slices.Contains(got.Images.Denied, private) {
			t.Errorf("host ranges unknown: %s not denied (%v)", private, got.Images.Denied)
		}
	}
}

// A promoted node's pull proxy denies the CIDRs nest-syncer denies.
func TestPullProxyDenyIsTheDenylistsCIDRs(t *testing.T) {
	hostRanges := HostNetwork{
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")},
		NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
	}
	got := PullProxyDeny(Options{HostNetwork: hostRanges, ImageRegistryDenylist: []string{"registry.internal", "203.0.113.7/24", "*.example.org"}})
	if want := []string{"203.0.113.0/24", "10.244.0.0/16", "10.96.0.0/12", "192.0.2.0/24"}; !slices.Equal(got, want) {
		t.Errorf("PullProxyDeny() = %v, want %v", got, want)
	}
	// With the host's ranges unknown, every private range.
	got = PullProxyDeny(Options{})
	for _, private := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} {
		if !slices.Contains(got, private) {
			t.Errorf("host ranges unknown: %s not denied (%v)", private, got)
		}
	}
}
