package contract

import (
	"flag"
	"io"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nestdev/nest/internal/version"
)

var tr = Translation{
	VirtualCluster: "alpha", HostNamespace: "vc-alpha", ClusterDomain: "cluster.local",
	APIServerHost: "10.96.0.5", APIServerPort: 6443, DNSServer: "10.96.0.6",
	NodeName: "nest-virtual-node", PriorityClassName: "nest-tenant-workload",
	MaxGracePeriodSeconds: DefaultMaxGracePeriodSeconds,
}

func TestFlagsRoundTrip(t *testing.T) {
	withLimits := tr
	withLimits.DefaultLimits = corev1.ResourceList{"cpu": resource.MustParse("500m"), "memory": resource.MustParse("512Mi")}
	withLimits.HostServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/108")}
	withLimits.HelperImage, withLimits.HelperImagePullPolicy = "nest.local/nest-syncer:dev", corev1.PullNever
	withLimits.NodeDisk = &NodeDisk{Size: resource.MustParse("2Gi"), StorageClassName: "fast"}
	withLimits.ConfinePrivileged, withLimits.NodeNetwork = true, true
	withLimits.NetworkFence = "10.96.0.1:443"
	withLimits.Images = ImagePolicy{Allowed: []string{"registry.example.com:5000", "*.example.org"}, Denied: []string{"10.0.0.0/8", "evil.example"}}
	withLimits.AlwaysPullImages = true
	withLimits.MaxGracePeriodSeconds = 45
	withLimits.VirtualClusterUID = "6f1c2a9e-vc"
	want := Flags{Translation: withLimits, NodeIP: "10.244.0.3", Capacity: corev1.ResourceList{"cpu": resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("1")},
		PodSecurityLevel: "restricted", KubernetesVersion: "v1.37.2", TokenMaxAge: 15 * time.Second, TenantKubeconfig: "/k", DNSDir: "/d",
		HostMetadata:      MetadataAllowList{Labels: []string{"app", "example.com/*"}, Annotations: []string{"example.com/owner"}},
		DataBudgetBytes:   64 << 20,
		HostPodCIDRs:      []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")},
		EgressProxySocket: "/run/nest-egress/proxy.sock"}
	var got Flags
	fs := newFlagSet()
	got.BindFlags(fs)
	if err := fs.Parse(want.Args()); err != nil {
		t.Fatal(err)
	}
	gotLimits := FormatResourceList(got.DefaultLimits)
	got.DefaultLimits = nil
	if !slices.Equal(got.HostServiceCIDRs, withLimits.HostServiceCIDRs) {
		t.Errorf("host Service CIDRs %v, want %v", got.HostServiceCIDRs, withLimits.HostServiceCIDRs)
	}
	got.HostServiceCIDRs = nil
	if !slices.Equal(got.HostPodCIDRs, want.HostPodCIDRs) {
		t.Errorf("host pod CIDRs %v, want %v", got.HostPodCIDRs, want.HostPodCIDRs)
	}
	if got.HelperImage != withLimits.HelperImage || got.HelperImagePullPolicy != corev1.PullNever {
		t.Errorf("helper image %q %q", got.HelperImage, got.HelperImagePullPolicy)
	}
	if d := got.NodeDisk; d == nil || d.Size.Cmp(resource.MustParse("2Gi")) != 0 || d.StorageClassName != "fast" {
		t.Errorf("node disk %+v, want 2Gi of class fast", d)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
	noHelper := got
	noHelper.NodeNetwork = false
	noHelper.HelperImage = ""
	if err := noHelper.Validate(); err == nil || !strings.Contains(err.Error(), "--helper-image") {
		t.Errorf("a disk without a helper image: Validate = %v, want --helper-image named", err)
	}
	if !got.ConfinePrivileged {
		t.Error("--privileged-containers=Confine did not come back")
	}
	if !got.NodeNetwork {
		t.Error("--node-network did not come back")
	}
	if got.NetworkFence != "10.96.0.1:443" {
		t.Errorf("--network-fence came back as %q", got.NetworkFence)
	}
	for fence, want := range map[string]string{"10.96.0.1": "HOST:PORT", "": ""} {
		bad := got
		bad.NetworkFence = fence
		if err := bad.Validate(); want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("--network-fence=%q: Validate = %v, want %q named", fence, err, want)
		}
	}
	noFenceImage := got
	noFenceImage.HelperImage, noFenceImage.NodeDisk, noFenceImage.NodeNetwork = "", nil, false
	if err := noFenceImage.Validate(); err == nil || !strings.Contains(err.Error(), "--network-fence needs --helper-image") {
		t.Errorf("a fence without a helper image: Validate = %v, want --helper-image named", err)
	}
	noAddress := got
	noAddress.NodeIP = ""
	if err := noAddress.Validate(); err == nil || !strings.Contains(err.Error(), "--node-ip") {
		t.Errorf("the node network without a node IP: Validate = %v, want --node-ip named", err)
	}
	if !reflect.DeepEqual(got.Images, withLimits.Images) || !got.AlwaysPullImages || got.MaxGracePeriodSeconds != 45 {
		t.Errorf("images %+v, always pull %v, grace %d did not come back", got.Images, got.AlwaysPullImages, got.MaxGracePeriodSeconds)
	}
	noGrace := got
	noGrace.MaxGracePeriodSeconds = 0
	if err := noGrace.Validate(); err == nil || !strings.Contains(err.Error(), "--max-termination-grace-period") {
		t.Errorf("a zero grace bound: Validate = %v, want --max-termination-grace-period named", err)
	}
	got.HelperImage, got.HelperImagePullPolicy, got.NodeDisk, got.ConfinePrivileged, got.NodeNetwork, got.NetworkFence = "", "", nil, false, false, ""
	if got.KubernetesVersion != want.KubernetesVersion {
		t.Errorf("--kubernetes-version came back as %q", got.KubernetesVersion)
	}
	if got.VirtualClusterUID != withLimits.VirtualClusterUID {
		t.Errorf("--virtual-cluster-uid came back as %q", got.VirtualClusterUID)
	}
	got.Images, got.AlwaysPullImages, got.MaxGracePeriodSeconds, got.VirtualClusterUID = ImagePolicy{}, false, DefaultMaxGracePeriodSeconds, ""
	if gotLimits != "cpu=500m,memory=512Mi" || !reflect.DeepEqual(got.Translation, tr) || FormatResourceList(got.Capacity) != "cpu=4,nvidia.com/gpu=1" || got.TokenMaxAge != want.TokenMaxAge || got.PodSecurityLevel != "restricted" {
		t.Errorf("round trip: %+v", got)
	}
	if !reflect.DeepEqual(got.HostMetadata, want.HostMetadata) || got.DataBudgetBytes != 64<<20 {
		t.Errorf("round trip: host metadata %+v, data budget %d", got.HostMetadata, got.DataBudgetBytes)
	}
	if got.EgressProxySocket != want.EgressProxySocket {
		t.Errorf("--egress-proxy-socket came back as %q, want %q", got.EgressProxySocket, want.EgressProxySocket)
	}
	for _, sock := range []string{"proxy.sock", "/run/nest-egress/../proxy.sock", "/run/nest-egress/"} {
		bad := got
		bad.EgressProxySocket = sock
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "--egress-proxy-socket") {
			t.Errorf("--egress-proxy-socket=%q: Validate = %v, want it named", sock, err)
		}
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
	got.APIServerHost = ""
	if err := got.Validate(); err == nil || !strings.Contains(err.Error(), "--api-server-host") {
		t.Errorf("Validate = %v, want the missing flag named", err)
	}
	if _, err := ParseResourceList("cpu"); err == nil {
		t.Error("a pair without = parses")
	}
}

// An empty allow-list copies nothing, and must not come back as the
// defaults; a flag left out means the defaults.
func TestAllowListFlags(t *testing.T) {
	for _, tt := range []struct {
		name            string
		args            []string
		wantLabels      []string
		wantAnnotations []string
		wantBudget      int64
		wantErr         string
	}{
		{name: "flags left out: defaults", args: nil, wantLabels: DefaultHostLabels, wantAnnotations: DefaultHostAnnotations},
		{name: "empty lists stay empty", args: Flags{}.Args(), wantLabels: []string{}, wantAnnotations: []string{}},
		{name: "lists and budget", args: []string{"--host-labels=a, b/*", "--host-annotations=c", "--data-budget-bytes=1024"},
			wantLabels: []string{"a", "b/*"}, wantAnnotations: []string{"c"}, wantBudget: 1024},
		{name: "a * inside an entry", args: []string{"--host-labels=a*b"}, wantErr: "may only end an entry"},
		{name: "a budget that is not a number", args: []string{"--data-budget-bytes=1Gi"}, wantErr: "data-budget-bytes"},
		{name: "a privileged policy the API lacks", args: []string{"--privileged-containers=Allow"}, wantErr: "use Refuse or Confine"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got Flags
			fs := newFlagSet()
			fs.SetOutput(io.Discard)
			got.BindFlags(fs)
			err := fs.Parse(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse = %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.HostMetadata.Labels, tt.wantLabels) || !reflect.DeepEqual(got.HostMetadata.Annotations, tt.wantAnnotations) || got.DataBudgetBytes != tt.wantBudget {
				t.Errorf("labels %#v, annotations %#v, budget %d", got.HostMetadata.Labels, got.HostMetadata.Annotations, got.DataBudgetBytes)
			}
		})
	}
	o := Flags{Translation: tr, TenantKubeconfig: "/k", Capacity: corev1.ResourceList{"cpu": resource.MustParse("1")}, DataBudgetBytes: -1}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--data-budget-bytes") {
		t.Errorf("Validate = %v, want a negative budget refused", err)
	}
}

func newFlagSet() *flag.FlagSet { return flag.NewFlagSet("nest-syncer", flag.ContinueOnError) }

// A syncer started without --kubernetes-version reports the host's
// version, the one every tenant ran before tenants had a choice.
func TestKubernetesVersionDefault(t *testing.T) {
	var got Flags
	fs := newFlagSet()
	got.BindFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if got.KubernetesVersion != version.Kubernetes {
		t.Errorf("default --kubernetes-version %q, want %s", got.KubernetesVersion, version.Kubernetes)
	}
}
