package install

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/nestdev/nest/hack/chartgen"
)

// The Helm chart's CRDs and its manager, RBAC and PriorityClass templates are
// generated from config/ (the manifests this package installs) by
// `make generate`. This regenerates them into a temporary directory and fails
// when the checked-in chart differs, so the chart cannot drift from config/.
func TestChartIsGeneratedFromConfig(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := chartgen.Generate(root)
	if err != nil {
		t.Fatalf("generate the chart from config/: %v", err)
	}
	tmp := t.TempDir()
	if err := files.Write(tmp); err != nil {
		t.Fatal(err)
	}
	chart := filepath.Join(root, chartgen.ChartDir)
	err = filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(tmp, p)
		if err != nil {
			return err
		}
		want, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(chart, rel))
		switch {
		case err != nil:
			t.Errorf("%s: run `make generate`: %v", filepath.Join(chartgen.ChartDir, rel), err)
		case !bytes.Equal(got, want):
			t.Errorf("%s is not what config/ generates: run `make generate`", filepath.Join(chartgen.ChartDir, rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// crds/ holds only copies of config/crd: one left behind would still be
	// installed by Helm.
	crds, err := filepath.Glob(filepath.Join(chart, "crds", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range crds {
		if _, ok := files[filepath.ToSlash(filepath.Join("crds", filepath.Base(p)))]; !ok {
			t.Errorf("%s has no source in config/crd: run `make generate`", filepath.Join(chartgen.ChartDir, "crds", filepath.Base(p)))
		}
	}
}
