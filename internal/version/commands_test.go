package version_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// noVersionFlag are the commands under cmd/ that answer no --version, and why.
var noVersionFlag = map[string]string{
	"pause": "the pod sandbox process of every pod: reading the version would grow each (see its package comment)",
}

// TestEveryCommandAnswersVersion reads every command's main: it must call
// version.HandleFlag(os.Args[1:], "NAME", os.Stdout) first and return when
// it is true, or, a cobra command, be named NAME (its Use) and take
// version.Describe() as its Version (cobra then prints version.Line(NAME));
// nest takes the root command of internal/cli, whose test runs `nest
// --version`. NAME is the command's directory. HandleFlag and Describe have
// tests of their own; this one only keeps a new binary from missing them.
func TestEveryCommandAnswersVersion(t *testing.T) {
	dirs, err := os.ReadDir(filepath.Join(root, "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		name := d.Name()
		file, main := findMain(t, filepath.Join(root, "cmd", name))
		if main == nil {
			continue
		}
		seen++
		rel := filepath.ToSlash(filepath.Join("cmd", name, filepath.Base(file.name)))
		if why, ok := noVersionFlag[name]; ok {
			if answersVersion(file, main, name) != "" {
				t.Errorf("%s answers --version now: drop it from noVersionFlag (%s)", rel, why)
			}
			continue
		}
		if how := answersVersion(file, main, name); how == "" {
			t.Errorf("%s does not answer --version: begin main with\n\tif version.HandleFlag(os.Args[1:], %q, os.Stdout) {\n\t\treturn\n\t}\nor, for a cobra command, set its Use to %q and its Version to version.Describe()", rel, name, name+" ...")
		}
	}
	if seen < 7 {
		t.Errorf("found %d commands under cmd/, want at least 7", seen)
	}
}

type parsedFile struct {
	name string
	ast  *ast.File
}

// findMain returns the file of dir's package that declares func main, and
// main; a nil main when there is none.
func findMain(t *testing.T, dir string) (parsedFile, *ast.FuncDecl) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range af.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "main" && af.Name.Name == "main" {
				return parsedFile{f, af}, fn
			}
		}
	}
	return parsedFile{}, nil
}

// importName is the name file knows the package path by, or "".
func importName(file *ast.File, path string) string {
	for _, imp := range file.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				return imp.Name.Name
			}
			return filepath.Base(path)
		}
	}
	return ""
}

// answersVersion says how main, of command name, answers --version: "flag",
// "cobra", "nest", or "" when it does not.
func answersVersion(file parsedFile, main *ast.FuncDecl, name string) string {
	v := importName(file.ast, "github.com/nestdev/nest/internal/version")
	cli := importName(file.ast, "github.com/nestdev/nest/internal/cli")
	if main.Body == nil || len(main.Body.List) == 0 {
		return ""
	}
	if v != "" {
		if s, ok := main.Body.List[0].(*ast.IfStmt); ok && s.Init == nil && s.Else == nil &&
			types.ExprString(s.Cond) == v+".HandleFlag(os.Args[1:], "+strconv.Quote(name)+", os.Stdout)" &&
			len(s.Body.List) == 1 {
			if r, ok := s.Body.List[0].(*ast.ReturnStmt); ok && len(r.Results) == 0 {
				return "flag"
			}
		}
	}
	var hasVersion, named, nestRoot bool
	ast.Inspect(main.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if len(n.Lhs) != 1 || len(n.Rhs) != 1 {
				break
			}
			lhs, ok := n.Lhs[0].(*ast.SelectorExpr)
			if !ok {
				break
			}
			switch rhs := types.ExprString(n.Rhs[0]); lhs.Sel.Name {
			case "Version":
				hasVersion = hasVersion || (v != "" && rhs == v+".Describe()")
			case "Use":
				use, err := strconv.Unquote(rhs)
				words := strings.Fields(use)
				named = named || (err == nil && len(words) > 0 && words[0] == name)
			}
		case *ast.CallExpr:
			nestRoot = nestRoot || (cli != "" && types.ExprString(n.Fun) == cli+".NewRootCommand")
		}
		return true
	})
	switch {
	case hasVersion && named:
		return "cobra"
	case nestRoot && name == "nest":
		return "nest"
	}
	return ""
}
