package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
)

// writeKubeconfig writes a member kubeconfig with two contexts (the current
// one, gpu, with its CA in a file beside it) into dir, and returns its path.
func writeKubeconfig(t *testing.T, dir, user string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), []byte("member CA"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "member.kubeconfig")
	data := `apiVersion: v1
kind: Config
current-context: gpu
contexts:
- {name: gpu, context: {cluster: gpu, user: gpu-admin}}
- {name: other, context: {cluster: other, user: other-admin}}
clusters:
- {name: gpu, cluster: {server: "https://10.20.0.5:6443", certificate-authority: ca.crt}}
- {name: other, cluster: {server: "https://192.0.2.9:6443"}}
users:
- {name: gpu-admin, user: ` + user + `}
- {name: other-admin, user: {token: other-secret-token}}
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestMemberAddBuild(t *testing.T) {
	dir := t.TempDir()
	path := writeKubeconfig(t, dir, "{token: gpu-token}")
	a := memberAdd{name: "gpu-pool", kubeconfig: path, apiServerAddress: "10.20.0.5:6443", dnsAddress: "10.20.0.10", nodePortAddress: "10.0.0.11",
		selector: "team=ml,tier=gpu", cpu: "64", memory: "256Gi", gpu: "8"}
	mc, kubeconfig, err := a.build()
	if err != nil {
		t.Fatal(err)
	}
	ref := mc.Spec.KubeconfigSecretRef
	if mc.Name != "gpu-pool" || ref.Namespace != "nest-system" || ref.Name != "nest-member-gpu-pool" || ref.Key != "kubeconfig" {
		t.Errorf("MemberCluster %s refers to Secret %+v", mc.Name, ref)
	}
	if mc.Spec.Network.APIServerAddress != "10.20.0.5:6443" || mc.Spec.Network.DNSAddress != "10.20.0.10" || mc.Spec.Network.NodePortAddress != "10.0.0.11" {
		t.Errorf("network %+v", mc.Spec.Network)
	}
	if sel := mc.Spec.VirtualClusterSelector; sel == nil || len(sel.MatchLabels) != 2 || sel.MatchLabels["team"] != "ml" || sel.MatchLabels["tier"] != "gpu" {
		t.Errorf("virtualClusterSelector %+v", sel)
	}
	for name, want := range map[corev1.ResourceName]string{"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8"} {
		if q := mc.Spec.Resources[name]; q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("resources[%s] = %v, want %s", name, q.String(), want)
		}
	}
	// Only the current context is stored, with its CA file embedded.
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw.Contexts) != 1 || len(raw.Clusters) != 1 || len(raw.AuthInfos) != 1 || raw.CurrentContext != "gpu" {
		t.Errorf("stored kubeconfig keeps %d contexts, %d clusters, %d users, current %q; want the gpu context alone",
			len(raw.Contexts), len(raw.Clusters), len(raw.AuthInfos), raw.CurrentContext)
	}
	if c := raw.Clusters["gpu"]; c == nil || string(c.CertificateAuthorityData) != "member CA" || c.CertificateAuthority != "" {
		t.Errorf("stored cluster %+v, want the CA file embedded", c)
	}
	if bytes.Contains(kubeconfig, []byte("other-secret-token")) {
		t.Error("the stored kubeconfig holds another context's credentials")
	}

	// Without --selector no VirtualCluster may use it; without caps none is set.
	a.selector, a.cpu, a.memory, a.gpu = "", "", "", ""
	if mc, _, err = a.build(); err != nil || mc.Spec.VirtualClusterSelector != nil || mc.Spec.Resources != nil {
		t.Errorf("without --selector and caps: %v, selector %v, resources %v", err, mc.Spec.VirtualClusterSelector, mc.Spec.Resources)
	}
	// Without the address flags the network is empty: tenants are reached
	// through their host LoadBalancer addresses.
	a.apiServerAddress, a.dnsAddress, a.nodePortAddress = "", "", ""
	if mc, _, err = a.build(); err != nil || mc.Spec.Network != (nestv1.MemberNetwork{}) {
		t.Errorf("without address flags: %v, network %+v; want it empty", err, mc.Spec.Network)
	}
}

func TestMemberAddRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	good := writeKubeconfig(t, dir, "{token: gpu-token}")
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("this is not: [a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	execDir := t.TempDir()
	withExec := writeKubeconfig(t, execDir, "{exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}}")
	base := memberAdd{name: "gpu-pool", kubeconfig: good, apiServerAddress: "10.20.0.5:6443", dnsAddress: "10.20.0.10"}
	for _, tt := range []struct {
		name string
		edit func(*memberAdd)
		want string
	}{
		{"garbage file", func(a *memberAdd) { a.kubeconfig = garbage }, "--kubeconfig " + garbage + ": not a kubeconfig"},
		{"missing file", func(a *memberAdd) { a.kubeconfig = filepath.Join(dir, "nope") }, "--kubeconfig " + filepath.Join(dir, "nope") + ": not a kubeconfig"},
		{"no file", func(a *memberAdd) { a.kubeconfig = "" }, "--kubeconfig : required"},
		{"exec", func(a *memberAdd) { a.kubeconfig = withExec }, "--kubeconfig " + withExec + ": users[gpu-admin].exec runs a command"},
		{"bad name", func(a *memberAdd) { a.name = "GPU_pool" }, `NAME "GPU_pool"`},
		{"node port address by name", func(a *memberAdd) { a.nodePortAddress = "lb.host.example" }, `--node-port-address "lb.host.example": want an IP address`},
		{"bad selector", func(a *memberAdd) { a.selector = "team in (ml)" }, `--selector "team in (ml)"`},
		{"bad cpu", func(a *memberAdd) { a.cpu = "lots" }, `--cpu "lots": want a positive quantity`},
		{"negative gpu", func(a *memberAdd) { a.gpu = "-1" }, `--gpu "-1": want a positive quantity`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := base
			tt.edit(&a)
			if _, _, err := a.build(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

func TestAddAndRemoveMember(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).Build()
	mc := func() *nestv1.MemberCluster {
		return &nestv1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "gpu-pool"}, Spec: nestv1.MemberClusterSpec{
			KubeconfigSecretRef: nestv1.SecretKeyRef{Namespace: "nest-system", Name: "nest-member-gpu-pool", Key: "kubeconfig"},
			Network:             nestv1.MemberNetwork{APIServerAddress: "10.20.0.5:6443", DNSAddress: "10.20.0.10"},
		}}
	}
	if err := addMember(ctx, c, mc(), []byte("kubeconfig bytes")); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "nest-system", Name: "nest-member-gpu-pool"}, secret); err != nil {
		t.Fatal(err)
	}
	if string(secret.Data["kubeconfig"]) != "kubeconfig bytes" || secret.Labels[memberLabel] != "gpu-pool" {
		t.Errorf("Secret data %q, labels %v", secret.Data["kubeconfig"], secret.Labels)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "gpu-pool"}, &nestv1.MemberCluster{}); err != nil {
		t.Fatal(err)
	}
	if err := addMember(ctx, c, mc(), []byte("other")); err == nil || !strings.Contains(err.Error(), "MemberCluster gpu-pool already exists") {
		t.Errorf("adding it again: %v", err)
	}

	if err := removeMember(ctx, c, "gpu-pool"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "gpu-pool"}, &nestv1.MemberCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("MemberCluster after remove: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("Secret after remove: %v", err)
	}
	if err := removeMember(ctx, c, "gpu-pool"); err == nil || !strings.Contains(err.Error(), `NAME "gpu-pool": no MemberCluster gpu-pool`) {
		t.Errorf("removing it again: %v", err)
	}

	// A Secret left behind is not overwritten, and no MemberCluster is made.
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "nest-system", Name: "nest-member-gpu-pool"}}); err != nil {
		t.Fatal(err)
	}
	if err := addMember(ctx, c, mc(), []byte("kubeconfig bytes")); err == nil || !strings.Contains(err.Error(), "Secret nest-system/nest-member-gpu-pool already exists") {
		t.Errorf("adding over a left-behind Secret: %v", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: "gpu-pool"}, &nestv1.MemberCluster{}); !apierrors.IsNotFound(err) {
		t.Errorf("MemberCluster made anyway: %v", err)
	}
}

// When the API server refuses the MemberCluster, the Secret made for it goes.
func TestAddMemberCleansUpTheSecretOfARefusedMember(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*nestv1.MemberCluster); ok {
				return apierrors.NewInvalid(nestv1.GroupVersion.WithKind("MemberCluster").GroupKind(), obj.GetName(),
					field.ErrorList{field.Invalid(field.NewPath("spec", "network", "apiServerAddress"), "10.20.0.5", "must be host:port")})
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	refused := &nestv1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "gpu-pool"}}
	err := addMember(ctx, c, refused, []byte("kubeconfig bytes"))
	if err == nil || !strings.Contains(err.Error(), "spec.network.apiServerAddress") {
		t.Fatalf("error %v, want the API server's refusal naming the field", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "nest-system", Name: "nest-member-gpu-pool"}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Secret made for the refused MemberCluster: %v", err)
	}
}

func TestListMembers(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mc := func(name string, age time.Duration, reachable metav1.ConditionStatus, nodes int32, allocatable corev1.ResourceList) *nestv1.MemberCluster {
		m := &nestv1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Status: nestv1.MemberClusterStatus{Nodes: nodes, Allocatable: allocatable}}
		if reachable != "" {
			m.Status.Conditions = []metav1.Condition{{Type: nestv1.ConditionReachable, Status: reachable, Reason: "R"}}
		}
		return m
	}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(
		mc("gpu-pool", 2*time.Hour, metav1.ConditionTrue, 3, corev1.ResourceList{
			"cpu": resource.MustParse("64"), "memory": resource.MustParse("256Gi"), "nvidia.com/gpu": resource.MustParse("8")}),
		mc("batch", 90*time.Minute, metav1.ConditionFalse, 0, nil),
		mc("new", 5*time.Second, "", 0, nil),
	).Build()
	var out bytes.Buffer
	if err := listMembers(context.Background(), c, &out, now); err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		got = append(got, strings.Fields(line))
	}
	want := [][]string{
		{"NAME", "REACHABLE", "NODES", "CPU", "MEMORY", "GPU", "AGE"},
		{"batch", "False", "0", "<none>", "<none>", "<none>", "1h30m0s"},
		{"gpu-pool", "True", "3", "64", "256Gi", "8", "2h0m0s"},
		{"new", "Unknown", "0", "<none>", "<none>", "<none>", "5s"},
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("nest member list printed\n%s\nwant the rows %v", out.String(), want)
	}
}

// nest member add takes the member's kubeconfig as --kubeconfig, as the
// issue spells it, and the host's as --host-kubeconfig; list and remove
// keep the host --kubeconfig of every other command.
func TestMemberCommandsAreRegistered(t *testing.T) {
	root := NewRootCommand()
	add, _, err := root.Find([]string{"member", "add"})
	if err != nil || add.Name() != "add" {
		t.Fatalf("nest member add: %v", err)
	}
	if err := add.ParseFlags([]string{"--kubeconfig", "member.yaml", "--host-kubeconfig", "host.yaml"}); err != nil {
		t.Fatal(err)
	}
	if got := add.Flags().Lookup("kubeconfig").Value.String(); got != "member.yaml" {
		t.Errorf("nest member add --kubeconfig = %q", got)
	}
	if got := root.PersistentFlags().Lookup("kubeconfig").Value.String(); got != "" {
		t.Errorf("nest member add --kubeconfig also set the host's: %q", got)
	}
	for _, name := range []string{"list", "remove"} {
		cmd, _, err := NewRootCommand().Find([]string{"member", name})
		if err != nil || cmd.Name() != name {
			t.Fatalf("nest member %s: %v", name, err)
		}
		if cmd.InheritedFlags().Lookup("kubeconfig") == nil {
			t.Errorf("nest member %s does not take the host --kubeconfig", name)
		}
	}
}
