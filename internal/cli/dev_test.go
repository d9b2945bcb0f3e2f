package cli

import (
	"strings"
	"testing"

	"github.com/nestdev/nest/internal/devcluster"
)

// TestDevAddressingFromEnvironment: $NEST_DEV_SLOT stands in for --slot, a
// flag wins over it, and a value that is not a number is refused naming it.
func TestDevAddressingFromEnvironment(t *testing.T) {
	t.Setenv(devcluster.SlotEnv, "4")
	a, err := (&devFlags{cluster: "gpu"}).addressing()
	if err != nil || a.Slot != 4 || a.Cluster != "gpu" {
		t.Errorf("--cluster gpu under %s=4: %+v, %v; want slot 4", devcluster.SlotEnv, a, err)
	}
	if a, err := (&devFlags{cluster: "gpu", slot: 2}).addressing(); err != nil || a.Slot != 2 {
		t.Errorf("--slot 2 under %s=4: slot %d, %v; want the flag's 2", devcluster.SlotEnv, a.Slot, err)
	}
	t.Setenv(devcluster.SlotEnv, "two")
	if _, err := (&devFlags{cluster: "gpu"}).addressing(); err == nil || !strings.Contains(err.Error(), devcluster.SlotEnv) {
		t.Errorf("%s=two: %v, want an error naming the variable", devcluster.SlotEnv, err)
	}
	t.Setenv(devcluster.SlotEnv, "")
	if a, err := (&devFlags{cluster: "gpu"}).addressing(); err != nil || a.Slot != 1 {
		t.Errorf("--cluster gpu alone: slot %d, %v; want 1", a.Slot, err)
	}
}
