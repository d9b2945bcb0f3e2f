package memberusage

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/controller/membergrant"
	"github.com/nestdev/nest/internal/controlplane"
	"github.com/nestdev/nest/internal/syncer/contract"
)

const memberName = "gpu-pool"

// runs counts the runs of each test name (go test -count).
var runs = map[string]int{}

// grant is one test's VirtualCluster and its member namespace.
type grant struct {
	vc        *nestv1.VirtualCluster
	namespace string
}

// setUp creates host namespace name, VirtualCluster name in it, member
// namespace nest-name with a service account that may list pods there
// only, and the members Secret with that account's token (or with token,
// when it is not empty), as the grant controller would write it.
func setUp(t *testing.T, name, token string) grant {
	t.Helper()
	ctx := context.Background()
	// A fresh name each run, so -count runs do not meet the last run's objects.
	runs[name]++
	name = fmt.Sprintf("%s-%d", name, runs[name])
	must(t, host.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: name}}
	must(t, host.Create(ctx, vc))
	g := grant{vc: vc, namespace: "nest-" + name}
	must(t, member.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: g.namespace}}))
	must(t, member.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: g.namespace, Name: "nest-syncer"}}))
	must(t, member.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: g.namespace, Name: "nest-syncer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}}))
	must(t, member.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: g.namespace, Name: "nest-syncer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "nest-syncer"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: g.namespace, Name: "nest-syncer"}}}))
	if token == "" {
		tr, err := memberCS.CoreV1().ServiceAccounts(g.namespace).CreateToken(ctx, "nest-syncer",
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		must(t, err)
		token = tr.Status.Token
	}
	data, err := contract.MemberPlacements{Members: []contract.MemberPlacement{{
		Name: memberName, Namespace: g.namespace, Server: memberConfig.Host, CAData: memberConfig.CAData,
		Token: token, TokenExpiry: time.Now().Add(time.Hour).UTC(),
		APIServerAddress: "10.20.0.5:6443", DNSAddress: "10.20.0.10",
	}}}.Marshal()
	must(t, err)
	must(t, host.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: contract.MembersSecret(name), Labels: map[string]string{
			membergrant.LabelManagedBy: membergrant.ManagedByValue, controlplane.LabelVirtualCluster: name}},
		Data: map[string][]byte{contract.MembersKey: data},
	}))
	return g
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// createPod creates a member pod for tenant pod default/name requesting
// gpus, and writes the status the member's kubelet would: started at
// start, and when finished is set, Succeeded with one container finished
// then.
func createPod(t *testing.T, g grant, name string, gpus int64, start time.Time, finished *time.Time) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	gpu := corev1.ResourceList{GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI), corev1.ResourceCPU: resource.MustParse("2")}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: g.namespace, Name: name + "-x-default-x-" + g.vc.Name,
			Labels: map[string]string{contract.LabelTenantOf: g.vc.Name},
			Annotations: map[string]string{contract.AnnotationTenantNamespace: "default", contract.AnnotationTenantName: name,
				contract.AnnotationTenantUID: "tenant-uid-" + name}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "train", Image: "registry.example/train:1",
				Resources: corev1.ResourceRequirements{Requests: gpu, Limits: corev1.ResourceList{GPUResource: gpu[GPUResource]}}}},
		},
	}
	must(t, member.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: start}}
	if finished != nil {
		pod.Status.Phase = corev1.PodSucceeded
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "train", Image: "registry.example/train:1",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, StartedAt: metav1.NewTime(start), FinishedAt: metav1.NewTime(*finished)}}}}
	}
	must(t, member.Status().Update(ctx, pod))
	return pod
}

// waitUsage waits until vc's status.memberUsage entry passes check, and
// returns it.
func waitUsage(t *testing.T, g grant, what string, check func(nestv1.MemberUsageStatus) error) nestv1.MemberUsageStatus {
	t.Helper()
	var got nestv1.MemberUsageStatus
	eventually(t, fmt.Sprintf("usage of %s: %s", g.vc.Name, what), func() error {
		cur := &nestv1.VirtualCluster{}
		if err := host.Get(context.Background(), client.ObjectKeyFromObject(g.vc), cur); err != nil {
			return err
		}
		i := slices.IndexFunc(cur.Status.MemberUsage, func(st nestv1.MemberUsageStatus) bool { return st.Name == memberName })
		if i < 0 {
			return fmt.Errorf("no entry in %+v", cur.Status.MemberUsage)
		}
		got = cur.Status.MemberUsage[i]
		if err := check(got); err != nil {
			return fmt.Errorf("%w (entry %+v)", err, got)
		}
		return nil
	})
	return got
}

// updatedAt passes an entry written by a pass at clock time at.
func updatedAt(at time.Time, then func(nestv1.MemberUsageStatus) error) func(nestv1.MemberUsageStatus) error {
	return func(st nestv1.MemberUsageStatus) error {
		if st.LastUpdated == nil || !st.LastUpdated.Time.Equal(at) {
			return fmt.Errorf("not yet a pass at %s", at)
		}
		return then(st)
	}
}

func hoursAre(gpu string, pods, running int64) func(nestv1.MemberUsageStatus) error {
	return func(st nestv1.MemberUsageStatus) error {
		if st.GPUHours != gpu || st.Pods != pods || st.Running != running {
			return fmt.Errorf("want gpuHours %s, pods %d, running %d", gpu, pods, running)
		}
		return nil
	}
}

// book reads the usage ConfigMap of g.
func book(t *testing.T, g grant) (*corev1.ConfigMap, Book) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	must(t, host.Get(context.Background(), client.ObjectKey{Namespace: g.vc.Namespace, Name: ConfigMapName(g.vc.Name)}, cm))
	b, err := parseBook(cm.Data[RecordsKey])
	must(t, err)
	return cm, b
}

func TestFinishedPodCountedOnce(t *testing.T) {
	g := setUp(t, "finished", "")
	end := testClock.Now().Add(-time.Hour)
	createPod(t, g, "train", 1, end.Add(-2*time.Hour), &end)
	waitUsage(t, g, "2 GPU-hours of one pod", hoursAre("2.000", 1, 0))

	// Several passes later, with the clock moved on, it is still counted once.
	for range 3 {
		step(time.Hour)
		waitUsage(t, g, "a pass at "+testClock.Now().String(), updatedAt(testClock.Now(), hoursAre("2.000", 1, 0)))
	}
	st := waitUsage(t, g, "cpu hours", func(st nestv1.MemberUsageStatus) error {
		if st.CPUHours != "4.000" || st.Since == nil || !st.Since.Time.Equal(end.Add(-2*time.Hour)) || st.Message != "" {
			return fmt.Errorf("want 4 cpu-hours since the pod's start")
		}
		return nil
	})
	_ = st
	cm, b := book(t, g)
	if len(b.Records) != 1 {
		t.Fatalf("records = %+v, want the one pod", b.Records)
	}
	r := b.Records[0]
	if r.Namespace != "default" || r.Name != "train" || r.TenantUID != "tenant-uid-train" || r.Member != memberName || r.End == nil || !r.End.Equal(end) {
		t.Errorf("record = %+v", r)
	}
	if cm.Labels[controlplane.LabelVirtualCluster] != g.vc.Name || cm.Labels[membergrant.LabelManagedBy] != membergrant.ManagedByValue ||
		len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].Name != g.vc.Name {
		t.Errorf("ConfigMap labels %v, owners %+v", cm.Labels, cm.OwnerReferences)
	}
	key := g.vc.Namespace + "/" + g.vc.Name
	if got := testutil.ToFloat64(gpuSeconds.WithLabelValues(key, memberName)); got != 7200 {
		t.Errorf("%s = %v, want 7200", "nest_member_usage_gpu_seconds_total", got)
	}
	if got := testutil.ToFloat64(cpuSeconds.WithLabelValues(key, memberName)); got != 14400 {
		t.Errorf("%s = %v, want 14400", "nest_member_usage_cpu_seconds_total", got)
	}
}

func TestRunningPodGrows(t *testing.T) {
	g := setUp(t, "running", "")
	now := testClock.Now()
	pod := createPod(t, g, "serve", 1, now.Add(-time.Hour), nil)
	waitUsage(t, g, "1 GPU-hour so far", updatedAt(now, hoursAre("1.000", 1, 1)))
	key := g.vc.Namespace + "/" + g.vc.Name
	if got := testutil.ToFloat64(podsRunning.WithLabelValues(key, memberName)); got != 1 {
		t.Errorf("nest_member_pods_running = %v, want 1", got)
	}

	step(time.Hour)
	waitUsage(t, g, "2 GPU-hours an hour later", updatedAt(testClock.Now(), hoursAre("2.000", 1, 1)))
	if got := testutil.ToFloat64(gpuSeconds.WithLabelValues(key, memberName)); got != 7200 {
		t.Errorf("nest_member_usage_gpu_seconds_total = %v, want 7200", got)
	}

	// Gone while running: closed when last seen, and counts no more.
	must(t, member.Delete(context.Background(), pod, client.GracePeriodSeconds(0)))
	waitUsage(t, g, "the pod closed", hoursAre("2.000", 1, 0))
	step(time.Hour)
	waitUsage(t, g, "no more usage an hour later", updatedAt(testClock.Now(), hoursAre("2.000", 1, 0)))
	if got := testutil.ToFloat64(podsRunning.WithLabelValues(key, memberName)); got != 0 {
		t.Errorf("nest_member_pods_running = %v, want 0", got)
	}
}

func TestRecordsBounded(t *testing.T) {
	g := setUp(t, "bounded", "")
	now := testClock.Now()
	for i := range 5 {
		end := now.Add(-time.Duration(i) * time.Hour)
		createPod(t, g, fmt.Sprintf("job-%d", i), 1, end.Add(-time.Hour), &end)
	}
	waitUsage(t, g, "5 pods of 1 GPU-hour each", hoursAre("5.000", 5, 0))
	_, b := book(t, g)
	if len(b.Records) != maxRecords {
		t.Fatalf("kept %d records, want %d", len(b.Records), maxRecords)
	}
	for _, r := range b.Records {
		if r.Name == "job-3" || r.Name == "job-4" {
			t.Errorf("kept %s, which ended first", r.Name)
		}
	}
	if d := b.Dropped[memberName]; d.Pods != 2 || d.GPUSeconds != 7200 {
		t.Errorf("dropped totals = %+v, want 2 pods and 7200 GPU-seconds", d)
	}
	// The dropped pods, still in the member, are not recorded again.
	step(time.Minute)
	waitUsage(t, g, "still 5 pods a pass later", updatedAt(testClock.Now(), hoursAre("5.000", 5, 0)))
}

func TestBadTokenRecordsNothing(t *testing.T) {
	g := setUp(t, "badtoken", "not-a-token")
	end := testClock.Now()
	createPod(t, g, "train", 1, end.Add(-time.Hour), &end)
	st := waitUsage(t, g, "the member refused the token", func(st nestv1.MemberUsageStatus) error {
		if !strings.Contains(st.Message, "Unauthorized") || !strings.Contains(st.Message, g.namespace) {
			return fmt.Errorf("message does not say the token was refused")
		}
		return nil
	})
	if st.Pods != 0 || st.GPUHours != "0.000" || st.LastUpdated != nil {
		t.Errorf("entry = %+v, want nothing recorded", st)
	}
	if _, b := book(t, g); len(b.Records) != 0 {
		t.Errorf("records = %+v, want none", b.Records)
	}
}

// step moves the controller's clock on by d.
func step(d time.Duration) { testClock.SetTime(testClock.Now().Add(d)) }
