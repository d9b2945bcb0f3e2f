package devcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCtr writes a shell script standing in for ctr, with body after a
// line that sets $socket to the --address it was called with, and returns
// its path.
func fakeCtr(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ctr")
	script := "#!/bin/sh\nsocket=$2\n" + body
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestImportImagesImportsIntoTheNodesSideBySide(t *testing.T) {
	nodes, err := Topology(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	// Each import marks its node as started, then waits (up to 10 s) for
	// every node to have started: one run after the other, the first
	// never sees the second and fails.
	started := t.TempDir()
	ctr := fakeCtr(t, fmt.Sprintf(`touch "%[1]s/$(echo "$socket" | md5sum | cut -c1-8)"
for i in $(seq 100); do
	[ "$(ls "%[1]s" | wc -l)" -ge %[2]d ] && exit 0
	sleep 0.1
done
echo "the other node's import did not start alongside" >&2
exit 1
`, started, len(nodes)))
	if err := importImages(context.Background(), ctr, nodes, []string{"a.tar"}); err != nil {
		t.Fatal(err)
	}
}

func TestImportImagesNamesTheFailedImport(t *testing.T) {
	nodes, err := Topology(t.TempDir(), 2)
	if err != nil {
		t.Fatal(err)
	}
	worker := nodes[1].ContainerdSocket()
	ctr := fakeCtr(t, fmt.Sprintf(`[ "$socket" = %q ] || exit 0
echo "no space left" >&2
exit 1
`, worker))
	err = importImages(context.Background(), ctr, nodes, []string{"/images/kube.tar"})
	if err == nil || !strings.Contains(err.Error(), "kube.tar") || !strings.Contains(err.Error(), worker) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("importImages = %v; want the failure naming kube.tar, %s and ctr's message", err, worker)
	}
}
