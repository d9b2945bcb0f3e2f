package syncer

import (
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nestdev/nest/internal/syncer/contract"
	"github.com/nestdev/nest/internal/syncer/kinds"
)

// queueNames are the names of the queues a syncer runs.
func queueNames(s *syncer) []string {
	var names []string
	for _, q := range s.registration.Queues {
		names = append(names, q.Kind)
	}
	slices.Sort(names)
	return names
}

func TestKindTableRowsHaveANameAndAMode(t *testing.T) {
	seen := map[string]bool{}
	for _, row := range kindTable() {
		if row.name == "" || row.register == nil {
			t.Errorf("row %+v: every row needs a name and a register function", row)
		}
		if row.modes&(kinds.VirtualNode|kinds.Member) == 0 {
			t.Errorf("row %s runs in no mode", row.name)
		}
		if seen[row.name] {
			t.Errorf("row %s is in the table twice", row.name)
		}
		seen[row.name] = true
	}
}

func TestVirtualNodeSyncerRunsEveryKindOfItsMode(t *testing.T) {
	s := runKindSyncers(t, fake.NewClientset(), fake.NewClientset(), func(o *Options) {
		o.NodeIP = "10.0.0.9"
		o.StorageClasses = []contract.StorageClass{{HostName: "standard", Name: "standard", Default: true}}
		o.EgressBlocks = []networkingv1.IPBlock{{CIDR: "0.0.0.0/0"}}
	})
	want := []string{"clusteradmins", "clusterdns", "configmaps", "dns", "endpointslices", "members", "networkpolicies", "networkpolicypods",
		"nodeports", "orphanpods", "persistentvolumeclaims", "secrets", "services", "storageclasses", "tenantpoddeletes", "tokens"}
	if got := queueNames(s); !slices.Equal(got, want) {
		t.Errorf("virtual-node queues = %v, want %v", got, want)
	}
	if len(s.registration.Runners) != 2 {
		t.Errorf("virtual-node runners = %d, want 2: the node-port listeners' closer and the provisioner", len(s.registration.Runners))
	}
}

func TestMemberSyncerRunsOnlyTheCopiesItsPodsUse(t *testing.T) {
	s := memberSyncer(t, fake.NewClientset(), fake.NewClientset())
	want := []string{"member-gpu-configmaps", "member-gpu-held", "member-gpu-orphanpods", "member-gpu-secrets",
		"member-gpu-tenantpoddeletes", "member-gpu-tokens"}
	if got := queueNames(s); !slices.Equal(got, want) {
		t.Errorf("member queues = %v, want %v", got, want)
	}
	if s.provider.policyLabels != nil {
		t.Error("a member syncer labels host pods for NetworkPolicies, which are the host syncer's")
	}
}
