package contract

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// kindsImport is the import path of the syncer's kinds; each kind's
// package lies below it.
const kindsImport = "github.com/nestdev/nest/internal/syncer/kinds"

// importsKinds returns the imports of the Go file path that are
// kindsImport or below it.
func importsKinds(t *testing.T, fset *token.FileSet, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	var out []string
	for _, spec := range f.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			t.Fatalf("%s: import %s: %v", path, spec.Path.Value, err)
		}
		if p == kindsImport || strings.HasPrefix(p, kindsImport+"/") {
			out = append(out, p)
		}
	}
	return out
}

// TestNothingOutsideTheSyncerImportsAKind keeps the syncer's kinds private
// to it: the rest of Nest (nest-manager, the CLI, the dashboard, the
// binaries) shares only this package with the syncer, so a kind can change
// without them. Test files are not checked: a test may use a kind to check
// that both sides agree.
func TestNothingOutsideTheSyncerImportsAKind(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	syncer := filepath.Join(root, "internal", "syncer")
	fset := token.NewFileSet()
	// The runtime registers the kinds: if it no longer imports them under
	// kindsImport, the path is wrong and the walk below would prove nothing.
	if len(importsKinds(t, fset, filepath.Join(syncer, "register.go"))) == 0 {
		t.Fatalf("internal/syncer/register.go imports nothing under %s: is the import path still right?", kindsImport)
	}
	checked := 0
	for _, dir := range []string{"internal", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				name := d.Name()
				if path == syncer || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			checked++
			for _, p := range importsKinds(t, fset, path) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s imports %s: only internal/syncer may import the syncer's kinds; share what it needs through internal/syncer/contract", rel, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked == 0 {
		t.Fatal("no Go files found under internal/ and cmd/")
	}
}
