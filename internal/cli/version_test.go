package cli

import (
	"bytes"
	"testing"

	"github.com/spf13/cobra"

	"github.com/nestdev/nest/internal/version"
)

// `nest --version`, and the standalone nest-agent and
// nest-node-network-agent, which their mains name and give
// version.Describe() as their Version, print version.Line.
func TestVersionFlag(t *testing.T) {
	out, err := runNest(t, "--version")
	if want := version.Line("nest") + "\n"; err != nil || out != want {
		t.Errorf("nest --version = %q, %v; want %q", out, err, want)
	}
	for name, cmd := range map[string]*cobra.Command{
		"nest-agent":              NewAgentCommand(),
		"nest-node-network-agent": NewNodeNetworkAgentCommand(),
	} {
		cmd.Use = name + " --flag VALUE"
		cmd.Version = version.Describe()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"--version"})
		if want := version.Line(name) + "\n"; cmd.Execute() != nil || out.String() != want {
			t.Errorf("%s --version printed %q, want %q", name, out.String(), want)
		}
	}
}
