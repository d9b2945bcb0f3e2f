// Command chartgen writes the Helm chart's copies of config/ (charts/nest/crds
// and the generated templates) for `make generate`; see package
// github.com/nestdev/nest/hack/chartgen for what it derives and why.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nestdev/nest/hack/chartgen"
)

func main() {
	root := flag.String("root", ".", "repository root, holding config/ and charts/nest/")
	flag.Parse()
	files, err := chartgen.Generate(*root)
	if err == nil {
		err = files.Write(filepath.Join(*root, chartgen.ChartDir))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartgen:", err)
		os.Exit(1)
	}
}
