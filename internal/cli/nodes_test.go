package cli

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
)

func TestListNodes(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	gn := func(name string, age time.Duration, state nestv1.NodeState, ip, holder string, phase nestv1.NodePhase) *nestv1.GlobalNode {
		return &nestv1.GlobalNode{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age))},
			Spec:       nestv1.GlobalNodeSpec{NodeIP: ip, State: state},
			Status:     nestv1.GlobalNodeStatus{VirtualCluster: holder, Phase: phase},
		}
	}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(
		gn("worker-2", 90*time.Minute, nestv1.NodeStateOccupied, "198.51.100.12", "vc-alpha/alpha", nestv1.NodePhaseTenant),
		gn("worker-1", 2*time.Hour, nestv1.NodeStateFree, "198.51.100.11", "", nestv1.NodePhaseHost),
		gn("worker-3", 5*time.Second, nestv1.NodeStateFree, "2001:db8::13", "", ""),
	).Build()
	var out bytes.Buffer
	if err := listNodes(context.Background(), c, &out, now); err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		got = append(got, strings.Fields(line))
	}
	want := [][]string{
		{"NAME", "STATE", "VIRTUALCLUSTER", "NODE-IP", "PHASE", "AGE"},
		{"worker-1", "free", "<none>", "198.51.100.11", "Host", "2h0m0s"},
		{"worker-2", "occupied", "vc-alpha/alpha", "198.51.100.12", "Tenant", "1h30m0s"},
		{"worker-3", "free", "<none>", "2001:db8::13", "<none>", "5s"},
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("nest nodes printed\n%s\nwant the rows %v", out.String(), want)
	}
}

func TestNodesCommandIsRegistered(t *testing.T) {
	cmd, _, err := NewRootCommand().Find([]string{"nodes"})
	if err != nil || cmd.Name() != "nodes" {
		t.Fatalf("nest nodes: %v, found %q", err, cmd.Name())
	}
	if cmd.Flags().Lookup("kubeconfig") == nil && cmd.InheritedFlags().Lookup("kubeconfig") == nil {
		t.Error("nest nodes does not take --kubeconfig")
	}
}
