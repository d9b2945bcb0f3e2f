// Package docscheck holds tests that keep the docs in step with the tree.
package docscheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/architecture.md's Layout names every Go package under internal/ and
// every command under cmd/: a package added without a line there fails.
func TestArchitectureLayoutNamesEveryPackage(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(doc), "## Layout\n")
	if !ok {
		t.Fatal("docs/architecture.md has no Layout section")
	}
	for _, top := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			goFiles, _ := filepath.Glob(filepath.Join(path, "*.go"))
			if len(goFiles) == 0 {
				return nil
			}
			rel, _ := filepath.Rel(root, path)
			if !strings.Contains(layout, "\n"+filepath.ToSlash(rel)+"/ ") {
				t.Errorf("docs/architecture.md's Layout does not name %s/", rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
