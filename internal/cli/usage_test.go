package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
)

func TestPrintUsage(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	vc := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-ml", Name: "ml"},
		Status: nestv1.VirtualClusterStatus{MemberUsage: []nestv1.MemberUsageStatus{
			{Name: "gpu-pool", GPUHours: "2.000", CPUHours: "4.500", Pods: 3, Running: 1, Since: &since},
			{Name: "spot", GPUHours: "0.000", CPUHours: "0.000", Message: "list pods of namespace nest-ml-1 in the member spot: Unauthorized"},
		}}}
	empty := &nestv1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "vc-web", Name: "web"}}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(vc, empty).Build()
	ctx := context.Background()

	var out bytes.Buffer
	if err := printUsage(ctx, c, types.NamespacedName{Namespace: "vc-ml", Name: "ml"}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("output:\n%s", out.String())
	}
	for i, want := range [][]string{
		{"MEMBER", "PODS", "RUNNING", "GPU-HOURS", "CPU-HOURS", "SINCE"},
		{"gpu-pool", "3", "1", "2.000", "4.500", "2026-03-01T12:00:00Z"},
		{"spot", "0", "0", "0.000", "0.000", "<none>"},
	} {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("line %d = %q, want %q", i, got, want)
		}
	}
	if !strings.Contains(lines[3], "spot: not updated:") || !strings.Contains(lines[3], "Unauthorized") {
		t.Errorf("the failing member is not explained: %q", lines[3])
	}

	out.Reset()
	if err := printUsage(ctx, c, types.NamespacedName{Namespace: "vc-web", Name: "web"}, &out); err != nil || !strings.Contains(out.String(), "No member usage recorded") {
		t.Errorf("no usage: %q, %v", out.String(), err)
	}
	err := printUsage(ctx, c, types.NamespacedName{Namespace: "vc-x", Name: "x"}, &out)
	if err == nil || !strings.Contains(err.Error(), "no VirtualCluster vc-x/x") {
		t.Errorf("missing VirtualCluster: %v", err)
	}
}

func TestUsageCommandRegistered(t *testing.T) {
	cmd, _, err := NewRootCommand().Find([]string{"usage"})
	if err != nil || cmd.Name() != "usage" || cmd.Flags().Lookup("namespace") == nil {
		t.Errorf("nest usage: %v, %v", cmd, err)
	}
}
