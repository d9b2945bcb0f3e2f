package devcluster

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRaiseKernelLimitsRaisesOnlyWhatIsLower(t *testing.T) {
	root := t.TempDir()
	write := func(file, v string) {
		p := filepath.Join(root, file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("fs/inotify/max_user_instances", "128")
	write("fs/inotify/max_user_watches", "1048576")
	var out bytes.Buffer
	if err := raiseKernelLimits(root, &out); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "fs/inotify/max_user_instances")); strings.TrimSpace(string(got)) != "8192" {
		t.Errorf("max_user_instances = %q, want 8192", got)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "fs/inotify/max_user_watches")); strings.TrimSpace(string(got)) != "1048576" {
		t.Errorf("max_user_watches = %q, want the higher 1048576 kept", got)
	}
	if !strings.Contains(out.String(), "fs.inotify.max_user_instances from 128 to 8192") || strings.Contains(out.String(), "watches") {
		t.Errorf("output %q: want the one raise named", out.String())
	}
	write("fs/inotify/max_user_watches", "many")
	if err := raiseKernelLimits(root, &out); err == nil || !strings.Contains(err.Error(), "max_user_watches") {
		t.Errorf("a limit that is not a number: %v, want an error naming it", err)
	}
}
