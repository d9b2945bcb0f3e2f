package vcops

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/version"
)

func TestShareResources(t *testing.T) {
	res, err := Share{CPU: "4", Memory: " 8Gi ", GPU: "1", Pods: "20"}.Resources()
	if err != nil {
		t.Fatal(err)
	}
	if res.Cpu().String() != "4" || res.Memory().String() != "8Gi" || res.Pods().Value() != 20 {
		t.Errorf("resources = %v", res)
	}
	if q := res[GPUResource]; q.Value() != 1 {
		t.Errorf("gpu = %v", q.String())
	}
	if res, err := (Share{}).Resources(); err != nil || len(res) != 0 {
		t.Errorf("empty share = %v, %v; want no resources (defaults apply)", res, err)
	}
	for _, tc := range []struct {
		share Share
		field string
	}{
		{Share{CPU: "four"}, FieldCPU},
		{Share{Memory: "-1Gi"}, FieldMemory},
		{Share{GPU: "0"}, FieldGPU},
		{Share{Pods: "1.5"}, FieldPods},
		{Share{Pods: "-3"}, FieldPods},
	} {
		_, err := tc.share.Resources()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Reason, "such as") {
			t.Errorf("%+v: error %v, want a FieldError for %s with an example", tc.share, err, tc.field)
		}
	}
}

func TestValidateName(t *testing.T) {
	for name, ok := range map[string]bool{
		"team-a": true, strings.Repeat("a", nestv1.MaxNameLength): true,
		strings.Repeat("a", nestv1.MaxNameLength+1): false, "Team": false, "-a": false, "": false, "a_b": false,
	} {
		if err := ValidateName(name); (err == nil) != ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

// The CRD's own rule and MaxNameLength are one fact written twice (a CEL
// rule cannot name a Go constant); this keeps them equal.
func TestMaxNameLengthMatchesTheCRD(t *testing.T) {
	crd, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "nest.dev_virtualclusters.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if rule := fmt.Sprintf("size(self.metadata.name) <= %d", nestv1.MaxNameLength); !strings.Contains(string(crd), rule) {
		t.Errorf("the CRD has no rule %q: update MaxNameLength or the marker on VirtualCluster", rule)
	}
}

func newClient(objs ...client.Object) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(objs...).Build()
}

func TestCreateMakesTheNamespaceAndIsRepeatable(t *testing.T) {
	ctx := context.Background()
	c := newClient()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: DefaultNamespace("demo")}}
	created, err := Create(ctx, c, vc.DeepCopy(), CreatedByDashboard)
	if err != nil || !created {
		t.Fatalf("first create: %v, %v", created, err)
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, types.NamespacedName{Name: "vc-demo"}, &ns); err != nil || ns.Labels[CreatedByLabel] != CreatedByDashboard {
		t.Fatalf("namespace vc-demo: %v %v", ns.Labels, err)
	}
	if created, err := Create(ctx, c, vc.DeepCopy(), CreatedByDashboard); err != nil || created {
		t.Errorf("second create: created=%v err=%v, want the already-exists path", created, err)
	}
}

// A VirtualCluster the API server refuses leaves no namespace behind.
func TestCreateRemovesTheNamespaceItMadeWhenRefused(t *testing.T) {
	ctx := context.Background()
	refuse := interceptor.Funcs{Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*nestv1.VirtualCluster); ok {
			return apierrors.NewInvalid(schema.GroupKind{Group: "nest.dev", Kind: "VirtualCluster"}, obj.GetName(), nil)
		}
		return c.Create(ctx, obj, opts...)
	}}
	existing := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(existing).WithInterceptorFuncs(refuse).Build()
	for _, ns := range []string{"vc-new", "team"} {
		vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: ns}}
		if _, err := Create(ctx, c, vc, CreatedByCLI); !apierrors.IsInvalid(err) {
			t.Fatalf("%s: error %v, want the API server's Invalid", ns, err)
		}
	}
	if err := c.Get(ctx, types.NamespacedName{Name: "vc-new"}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace vc-new made for the refused cluster is still there (%v)", err)
	}
	if err := c.Get(ctx, types.NamespacedName{Name: "team"}, &corev1.Namespace{}); err != nil {
		t.Errorf("namespace team existed before and must stay: %v", err)
	}
}

func TestCreateRefusesAnOccupiedNamespace(t *testing.T) {
	ctx := context.Background()
	c := newClient(&nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: "team"}})
	_, err := Create(ctx, c, &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: "team"}}, CreatedByCLI)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != FieldNamespace || !strings.Contains(err.Error(), "VirtualCluster first") {
		t.Fatalf("error %v: want a namespace FieldError naming the holder", err)
	}
}

func TestSetShareKeepsOtherResources(t *testing.T) {
	ctx := context.Background()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "vc-demo"},
		Spec: nestv1.VirtualClusterSpec{PromoteResources: nestv1.PromoteResources{Resources: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("4"), GPUResource: resource.MustParse("1"), corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
		}}}}
	c := newClient(vc)
	if err := SetShare(ctx, c, client.ObjectKeyFromObject(vc), corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}); err != nil {
		t.Fatal(err)
	}
	got := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(vc), got); err != nil {
		t.Fatal(err)
	}
	r := got.Spec.PromoteResources.Resources
	if r.Cpu().String() != "3" {
		t.Errorf("cpu = %s, want 3", r.Cpu())
	}
	if _, ok := r[GPUResource]; ok {
		t.Errorf("gpu kept (%v): a share without gpu removes it", r)
	}
	if q := r[corev1.ResourceEphemeralStorage]; q.String() != "10Gi" {
		t.Errorf("ephemeral-storage = %v, want it kept", q.String())
	}
}

// TestSetShareRetriesAConflict: nest-manager writing the status between
// SetShare's read and its patch makes the patch conflict; SetShare reads
// again and applies the share instead of handing the conflict to the user.
func TestSetShareRetriesAConflict(t *testing.T) {
	ctx := context.Background()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "vc-demo"}}
	conflicts := 0
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(vc).WithInterceptorFuncs(interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if conflicts == 0 {
				conflicts++
				return apierrors.NewConflict(schema.GroupResource{Group: nestv1.GroupVersion.Group, Resource: "virtualclusters"}, obj.GetName(), errors.New("the object has been modified"))
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	}).Build()
	if err := SetShare(ctx, c, client.ObjectKeyFromObject(vc), corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}); err != nil {
		t.Fatalf("SetShare after one conflict: %v", err)
	}
	got := &nestv1.VirtualCluster{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(vc), got); err != nil {
		t.Fatal(err)
	}
	if cpu := got.Spec.PromoteResources.Resources.Cpu().String(); conflicts != 1 || cpu != "3" {
		t.Errorf("conflicts %d, cpu %s: want one conflict, then cpu 3", conflicts, cpu)
	}
}

func TestReadKubeconfig(t *testing.T) {
	ctx := context.Background()
	pending := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "vc-p"}, Status: nestv1.VirtualClusterStatus{Phase: nestv1.PhasePreparing}}
	ready := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "vc-r"},
		Spec: nestv1.VirtualClusterSpec{Kubeconfig: base64.StdEncoding.EncodeToString([]byte("apiVersion: v1\n"))}}
	c := newClient(pending, ready)
	if _, err := ReadKubeconfig(ctx, c, client.ObjectKeyFromObject(pending), false); !errors.Is(err, ErrNoKubeconfig) {
		t.Errorf("pending cluster: %v, want ErrNoKubeconfig", err)
	}
	data, err := ReadKubeconfig(ctx, c, client.ObjectKeyFromObject(ready), false)
	if err != nil || string(data) != "apiVersion: v1\n" {
		t.Errorf("ready cluster: %q %v", data, err)
	}
	if _, err := ReadKubeconfig(ctx, c, types.NamespacedName{Namespace: "vc-x", Name: "x"}, false); !apierrors.IsNotFound(err) {
		t.Errorf("missing cluster: %v, want NotFound", err)
	}
}

func TestDeleteOwnNamespaceRemovesOnlyNamespacesNestMade(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		labels  map[string]string
		removed bool
	}{
		{map[string]string{CreatedByLabel: CreatedByCLI}, true},
		{map[string]string{CreatedByLabel: CreatedByDashboard}, true},
		{map[string]string{CreatedByLabel: "someone-else"}, false},
		{nil, false},
	} {
		c := newClient(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: tc.labels}})
		if err := DeleteOwnNamespace(ctx, c, "team"); err != nil {
			t.Fatal(err)
		}
		err := c.Get(ctx, types.NamespacedName{Name: "team"}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) != tc.removed {
			t.Errorf("labels %v: removed = %v, want %v", tc.labels, apierrors.IsNotFound(err), tc.removed)
		}
	}
}

func TestPromotePolicy(t *testing.T) {
	p, err := PromotePolicy(2, "gpu=true,zone=a")
	if err != nil || p.NodeCount != 2 || len(p.LabelSelector.MatchLabels) != 2 || p.LabelSelector.MatchLabels["zone"] != "a" {
		t.Errorf("PromotePolicy(2, gpu=true,zone=a) = %+v, %v", p, err)
	}
	if p, err := PromotePolicy(1, ""); err != nil || p.LabelSelector.MatchLabels != nil {
		t.Errorf("no selector: %+v, %v; want any promotable node", p, err)
	}
	for _, c := range []struct {
		count    int
		selector string
		field    string
	}{{-1, "", FieldNodes}, {MaxPromotedNodes + 1, "", FieldNodes}, {1, "gpu in (a,b)", FieldNodeSelector}, {1, "=x", FieldNodeSelector}} {
		var fe *FieldError
		if _, err := PromotePolicy(c.count, c.selector); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("PromotePolicy(%d, %q) = %v, want a %s field error", c.count, c.selector, err, c.field)
		}
	}
}

func TestSetPromotePolicyReplacesAndRemoves(t *testing.T) {
	ctx := context.Background()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "vc-demo"},
		Spec: nestv1.VirtualClusterSpec{PromotePolicies: []nestv1.PromotePolicy{{NodeCount: 1}, {NodeCount: 3}}}}
	c := newClient(vc)
	key := client.ObjectKeyFromObject(vc)
	get := func() []nestv1.PromotePolicy {
		got := &nestv1.VirtualCluster{}
		if err := c.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		return got.Spec.PromotePolicies
	}
	p, _ := PromotePolicy(2, "gpu=true")
	if err := SetPromotePolicy(ctx, c, key, p); err != nil {
		t.Fatal(err)
	}
	if got := get(); len(got) != 1 || got[0].NodeCount != 2 || got[0].LabelSelector.MatchLabels["gpu"] != "true" {
		t.Errorf("promote policies %+v, want the one asked for", got)
	}
	none, _ := PromotePolicy(0, "")
	if err := SetPromotePolicy(ctx, c, key, none); err != nil {
		t.Fatal(err)
	}
	if got := get(); len(got) != 0 {
		t.Errorf("promote policies %+v after asking for 0 nodes, want none", got)
	}
}

func TestSetMemberGrantAddsReplacesAndRemoves(t *testing.T) {
	ctx := context.Background()
	other := nestv1.MemberGrant{Name: "cpu-pool", Resources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}}
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "vc-demo"},
		Spec: nestv1.VirtualClusterSpec{Members: []nestv1.MemberGrant{other}}}
	c := newClient(vc)
	key := client.ObjectKeyFromObject(vc)
	get := func() []nestv1.MemberGrant {
		got := &nestv1.VirtualCluster{}
		if err := c.Get(ctx, key, got); err != nil {
			t.Fatal(err)
		}
		return got.Spec.Members
	}
	for _, gpus := range []string{"1", "2"} {
		if err := SetMemberGrant(ctx, c, key, "gpu", corev1.ResourceList{GPUResource: resource.MustParse(gpus)}); err != nil {
			t.Fatal(err)
		}
		got := get()
		if len(got) != 2 || got[1].Name != "gpu" || got[1].Resources.Name(GPUResource, resource.DecimalSI).String() != gpus {
			t.Fatalf("grants %+v, want cpu-pool kept and gpu with %s", got, gpus)
		}
	}
	if err := SetMemberGrant(ctx, c, key, "gpu", nil); err != nil {
		t.Fatal(err)
	}
	if got := get(); len(got) != 1 || got[0].Name != "cpu-pool" {
		t.Fatalf("grants %+v after revoking gpu, want cpu-pool alone", got)
	}
	if err := SetMemberGrant(ctx, c, key, "gpu", nil); err == nil {
		t.Fatal("revoking a grant that is not there succeeds")
	}
}

// Upgrade checks the move against the running version, names the field
// when it refuses, and shows FROM->TO until the control plane runs TO.
func TestUpgradeSetsTheVersionOrRefusesNamingTheField(t *testing.T) {
	ctx := context.Background()
	from, to := version.Kubernetes, version.Newest()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "up", Namespace: "vc-up"},
		Spec: nestv1.VirtualClusterSpec{KubernetesVersion: from}, Status: nestv1.VirtualClusterStatus{Version: from}}
	c := newClient(vc)
	key := client.ObjectKeyFromObject(vc)
	for _, bad := range []string{"v1.20.0", "v1.35.0"} {
		var fe *FieldError
		if _, err := Upgrade(ctx, c, key, bad); !errors.As(err, &fe) || fe.Field != FieldKubernetesVersion {
			t.Errorf("upgrade to %s: %v, want a FieldError on %s", bad, err, FieldKubernetesVersion)
		}
	}
	got, err := Upgrade(ctx, c, key, to)
	if err != nil || got != from {
		t.Fatalf("upgrade to %s: from %q, %v", to, got, err)
	}
	if err := c.Get(ctx, key, vc); err != nil || vc.Spec.KubernetesVersion != to {
		t.Fatalf("spec.kubernetesVersion %q after the upgrade (%v), want %s", vc.Spec.KubernetesVersion, err, to)
	}
	if col := VersionColumn(vc); col != from+"->"+to {
		t.Errorf("while upgrading the list shows %q", col)
	}
	vc.Status.Version = to
	if err := c.Update(ctx, vc); err != nil {
		t.Fatal(err)
	}
	if _, err := Upgrade(ctx, c, key, from); err == nil || !strings.Contains(err.Error(), "downgrades are refused") {
		t.Errorf("downgrade once %s runs: %v", to, err)
	}
	if col := VersionColumn(vc); col != to {
		t.Errorf("once upgraded the list shows %q", col)
	}
}

// Secrets handed to Create are in the namespace before the VirtualCluster,
// made or given their data where one of the name is left from before.
func TestCreateWritesTheFirstSecretsBeforeTheVirtualCluster(t *testing.T) {
	ctx := context.Background()
	stale := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-demo", Name: "demo-pki"}, Data: map[string][]byte{"ca.crt": []byte("old")}}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(stale).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*nestv1.VirtualCluster); ok {
				var s corev1.Secret
				if err := c.Get(ctx, types.NamespacedName{Namespace: "vc-demo", Name: "demo-pki"}, &s); err != nil || string(s.Data["ca.crt"]) != "restored" {
					return fmt.Errorf("the VirtualCluster came before its Secret (%v, %q)", err, s.Data["ca.crt"])
				}
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "vc-demo"}}
	pki := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-demo", Name: "demo-pki", Labels: map[string]string{"app": "x"}}, Data: map[string][]byte{"ca.crt": []byte("restored")}}
	if _, err := Create(ctx, c, vc, CreatedByDashboard, pki); err != nil {
		t.Fatal(err)
	}
	var got corev1.Secret
	if err := c.Get(ctx, client.ObjectKeyFromObject(pki), &got); err != nil || got.Labels["app"] != "x" {
		t.Errorf("Secret after Create: %v, %v", got.Labels, err)
	}
}

// A namespace still being deleted is waited out and made anew: nest create
// or nest restore right after nest delete --wait.
func TestCreateWaitsOutANamespaceBeingDeleted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := metav1.Now()
	dying := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "vc-demo", DeletionTimestamp: &now, Finalizers: []string{"kubernetes"}}}
	seenTerminating := 0
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(dying).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			// The namespace controller finishes once Create has seen the
			// namespace terminating twice.
			if ns, ok := obj.(*corev1.Namespace); ok && ns.DeletionTimestamp != nil {
				if seenTerminating++; seenTerminating == 2 {
					done := ns.DeepCopy()
					done.Finalizers = nil
					return c.Update(ctx, done)
				}
			}
			return nil
		},
	}).Build()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "vc-demo"}}
	if created, err := Create(ctx, c, vc, CreatedByCLI); err != nil || !created {
		t.Fatalf("create: %v, %v", created, err)
	}
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: "vc-demo"}, &ns); err != nil || ns.DeletionTimestamp != nil || ns.Labels[CreatedByLabel] != CreatedByCLI {
		t.Errorf("namespace after create: %+v, %v", ns.ObjectMeta, err)
	}
	if seenTerminating < 2 {
		t.Errorf("Create saw the namespace terminating %d times, want it to wait", seenTerminating)
	}
}

// A VirtualCluster that exists keeps its Secrets: Create writes none of
// first, and a Secret a VirtualCluster controls is never written over.
func TestCreateNeverWritesALiveTenantsSecrets(t *testing.T) {
	ctx := context.Background()
	live := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "vc-demo", UID: "u1"}}
	owned := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-demo", Name: "other-pki",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "nest.dev/v1alpha1", Kind: "VirtualCluster", Name: "other", UID: "u2", Controller: ptr.To(true)}}},
		Data: map[string][]byte{"ca.crt": []byte("live")}}
	c := newClient(live, owned)
	pki := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-demo", Name: "demo-pki"}, Data: map[string][]byte{"ca.crt": []byte("restored")}}
	if created, err := Create(ctx, c, live.DeepCopy(), CreatedByCLI, pki); err != nil || created {
		t.Fatalf("create over a live VirtualCluster: %v, %v; want it reported, nothing written", created, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pki), &corev1.Secret{}); err == nil {
		t.Error("a Secret was written for a VirtualCluster that exists")
	}
	c = newClient(owned)
	over := owned.DeepCopy()
	over.Data = map[string][]byte{"ca.crt": []byte("restored")}
	gamma := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "gamma", Namespace: "vc-demo"}}
	if _, err := Create(ctx, c, gamma, CreatedByCLI, over); err == nil || !strings.Contains(err.Error(), "belongs to VirtualCluster other") {
		t.Fatalf("writing over a controlled Secret: %v, want refused", err)
	}
	var got corev1.Secret
	if err := c.Get(ctx, client.ObjectKeyFromObject(owned), &got); err != nil || string(got.Data["ca.crt"]) != "live" {
		t.Errorf("the controlled Secret after the refusal: %q, %v", got.Data["ca.crt"], err)
	}
}
