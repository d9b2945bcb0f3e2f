package snapshot

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/volumearchive"
)

func volumes() []Volume {
	v := func(name string) Volume {
		return Volume{Namespace: "app", Name: name, UID: "uid-" + name, StorageClassName: "standard",
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, Request: resource.MustParse("1Gi")}
	}
	return []Volume{v("data-db-0"), v("never-bound")}
}

// writeWithVolumes writes a snapshot whose first volume holds data and
// whose second has none.
func writeWithVolumes(t *testing.T, data []byte, recipients []age.Recipient) []byte {
	t.Helper()
	c := contents(t)
	path := filepath.Join(t.TempDir(), "volume.tar")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	c.VolumePaths = []string{path, ""}
	var out bytes.Buffer
	m := Manifest{NestVersion: "v0.test", KubernetesVersion: "v1.36.3", Namespace: "vc-alpha", VirtualCluster: "alpha", Volumes: volumes()}
	if _, err := Write(&out, m, c, recipients, len(recipients) == 0); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// A volume's data comes back as written, sealed in the archive; a claim
// without data is listed with no part.
func TestSnapshotVolumesRoundTrip(t *testing.T) {
	data := bytes.Repeat([]byte("tenant volume bytes "), 1000)
	id := identity(t)
	archive := writeWithVolumes(t, data, []age.Recipient{id.Recipient()})
	if bytes.Contains(archive, []byte("tenant volume bytes")) {
		t.Fatal("the archive holds the volume's data in the clear")
	}
	dir := t.TempDir()
	s, err := Read(bytes.NewReader(archive), dir, []age.Identity{id})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Manifest.Volumes) != 2 || s.Manifest.Volumes[0].Part != "volumes/0.tar.age" || s.Manifest.Volumes[1].Part != "" {
		t.Fatalf("volumes %+v", s.Manifest.Volumes)
	}
	if got, _ := os.ReadFile(s.VolumePaths[0]); !bytes.Equal(got, data) || s.VolumePaths[1] != "" {
		t.Errorf("volume data back: %d bytes at %q, %q; want %d bytes and none", len(got), s.VolumePaths[0], s.VolumePaths[1], len(data))
	}
	s.Remove()
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("Remove left %d files", len(left))
	}
	plain, err := Read(bytes.NewReader(writeWithVolumes(t, data, nil)), t.TempDir(), nil)
	if err != nil || plain.Manifest.Volumes[0].Part != "volumes/0.tar" {
		t.Fatalf("plain snapshot with volumes: %+v, %v", plain, err)
	}
}

// A changed volume part, or a manifest that moves a volume's part, is
// refused and leaves no file.
func TestDamagedVolumesAreRefused(t *testing.T) {
	id := identity(t)
	data := bytes.Repeat([]byte("v"), 4096)
	good := writeWithVolumes(t, data, []age.Recipient{id.Recipient()})
	at := bytes.LastIndex(good, []byte("volumes/0.tar.age")) + 512
	tampered := bytes.Clone(good)
	tampered[at+100] ^= 0xff
	moved := rewriteManifest(t, good, func(m *Manifest) { m.Volumes[0].Part = "../../etc/passwd" })
	dropped := rewriteManifest(t, good, func(m *Manifest) { m.Volumes = nil })
	for _, tc := range []struct {
		name    string
		archive []byte
		want    string
	}{
		{"tampered", tampered, "SHA-256"},
		{"part renamed", moved, "want \"volumes/0.tar.age\""},
		{"volume dropped from the manifest", dropped, "names the parts"},
		{"cut short", good[:at+1000], "cut short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Read(bytes.NewReader(tc.archive), dir, []age.Identity{id})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("left %d files behind", len(left))
			}
		})
	}
}

// The copy pods meet the baseline Pod Security level, which a tenant's
// host namespace enforces by default, and not the restricted one, for
// which volumes are refused before anything is made.
func TestCopyPodsMeetBaselineOnly(t *testing.T) {
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "vc-alpha"}}
	cp := copier{image: "nest.local/nest-syncer:dev", binary: "/usr/local/bin/nest-syncer"}
	for _, fill := range []bool{false, true} {
		pod := copyPod(vc, cp, "claim", fill, "node-1", time.Hour)
		check := func(level psapi.Level) bool {
			return policy.AggregateCheckResults(e.EvaluatePod(psapi.LevelVersion{Level: level, Version: psapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec)).Allowed
		}
		if !check(psapi.LevelBaseline) || check(psapi.LevelRestricted) {
			t.Errorf("copy pod (fill %v): baseline %v, restricted %v; want only baseline", fill, check(psapi.LevelBaseline), check(psapi.LevelRestricted))
		}
		if pod.Labels[contract.LabelTenantOf] != "" {
			t.Error("the copy pod carries the tenant label: the syncer would take it for a tenant pod")
		}
		if got := pod.Spec.Volumes[0].PersistentVolumeClaim.ReadOnly; got == fill {
			t.Errorf("copy pod (fill %v) mounts the claim read-only %v", fill, got)
		}
	}
	vc.Spec.VirtualNode.PodSecurityLevel = nestv1.PodSecurityRestricted
	if err := checkVolumesCopyable(vc); err == nil || !strings.Contains(err.Error(), "--include-volumes") {
		t.Errorf("restricted tenant: %v, want refused naming --include-volumes", err)
	}
}

// A restored claim is the syncer's copy of the snapshot's claim under the
// restored VirtualCluster's name; once filled, a restore run again leaves
// it; a claim of the name that is another's is refused.
func TestEnsureClaimIsTheTenantClaimsCopyAndResumes(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).Build()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha-clone", Namespace: "vc-alpha-clone"}}
	v := volumes()[0]
	path := filepath.Join(t.TempDir(), "data.tar")
	if err := os.WriteFile(path, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	claim, done, err := ensureClaim(ctx, c, vc, v, path)
	if err != nil || done {
		t.Fatalf("first run: done %v, %v", done, err)
	}
	if claim.Name != contract.HostName("alpha-clone", "app", v.Name) || !contract.IsCopyOfUID(claim, "alpha-clone", "app", v.Name, v.UID) {
		t.Errorf("claim %s %v %v is not the copy of app/%s under alpha-clone", claim.Name, claim.Labels, claim.Annotations, v.Name)
	}
	if _, done, err := ensureClaim(ctx, c, vc, v, path); err != nil || done {
		t.Fatalf("run again before the fill: done %v, %v; want to fill it again", done, err)
	}
	_, sum, _ := hashFile(path)
	claim.Annotations[AnnotationVolumeRestored] = sum
	if err := c.Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if _, done, err := ensureClaim(ctx, c, vc, v, path); err != nil || !done {
		t.Fatalf("run again after the fill: done %v, %v; want done", done, err)
	}
	other := v
	other.UID = "another-uid"
	if _, _, err := ensureClaim(ctx, c, vc, other, path); err == nil || !strings.Contains(err.Error(), "is not the snapshot's claim") {
		t.Errorf("another claim's host claim: %v, want refused", err)
	}
	var got corev1.PersistentVolumeClaim
	if err := c.Get(ctx, client.ObjectKeyFromObject(claim), &got); err != nil || got.Annotations[contract.AnnotationTenantUID] != v.UID {
		t.Errorf("the refused run changed the claim: %v, %v", got.Annotations, err)
	}
}

// The copier's report is its last line of stderr.
func TestStatsIn(t *testing.T) {
	st, err := statsIn([]byte("a warning\n{\"files\":3,\"dirs\":1,\"links\":0,\"bytes\":42}\n"))
	if err != nil || st != (volumearchive.Stats{Files: 3, Dirs: 1, Bytes: 42}) {
		t.Errorf("stats %+v, %v", st, err)
	}
	if _, err := statsIn([]byte("pack /volume: permission denied")); err == nil {
		t.Error("no report: want an error")
	}
}

// A snapshot without volumes' data brings each claim back empty, says so,
// and a restore run again says nothing more.
func TestRestoreVolumesWithoutDataMakesEmptyClaims(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).Build()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "vc-alpha"}}
	s := &Snapshot{Manifest: Manifest{Volumes: volumes()}, Contents: Contents{VolumePaths: []string{"", ""}}}
	var steps []string
	step := func(format string, args ...any) { steps = append(steps, fmt.Sprintf(format, args...)) }
	for range 2 {
		if err := restoreVolumes(ctx, c, nil, vc, copier{}, s, step); err != nil {
			t.Fatal(err)
		}
	}
	if len(steps) != 2 || !strings.Contains(steps[0], "claim app/data-db-0 back, empty") {
		t.Errorf("steps %q, want one empty claim each, once", steps)
	}
	var claims corev1.PersistentVolumeClaimList
	if err := c.List(ctx, &claims, client.InNamespace("vc-alpha")); err != nil || len(claims.Items) != 2 {
		t.Fatalf("%d host claims, %v; want 2", len(claims.Items), err)
	}
	for _, claim := range claims.Items {
		if claim.Spec.Resources.Requests.Storage().String() != "1Gi" || *claim.Spec.StorageClassName != "standard" {
			t.Errorf("claim %s: %+v", claim.Name, claim.Spec)
		}
	}
}

// A raw block claim is refused by name before any copy pod is made, for
// any claim.
func TestPackVolumesRefusesBlockClaims(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).Build()
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "vc-alpha"}}
	block := corev1.PersistentVolumeBlock
	claim := corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "raw", Namespace: "vc-alpha", Annotations: contract.HostAnnotations("app", "raw", "uid-raw")},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeMode: &block},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound},
	}
	// A bound file-system claim sorts first: nothing of it is copied
	// either.
	first := claim
	first.Name, first.Spec = "a-files", corev1.PersistentVolumeClaimSpec{}
	_, _, err := packVolumes(ctx, c, nil, vc, copier{}, []corev1.PersistentVolumeClaim{first, claim}, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "app/raw is a raw block volume") {
		t.Errorf("block claim: %v, want refused by name", err)
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil || len(pods.Items) != 0 {
		t.Errorf("%d copy pods made, %v", len(pods.Items), err)
	}
}
