package version

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	// ", Kubernetes v1.36.3 (supported v1.36.3, v1.37.2)"
	k8s := ", Kubernetes " + Kubernetes + " (supported " + strings.Join(Supported, ", ") + ")"
	vcs := func(kv ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{}
		for i := 0; i < len(kv); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return info
	}
	const rev = "abc1234def5678901234567890abcdef01234567"
	for _, c := range []struct {
		name, nest string
		info       *debug.BuildInfo
		want       string
	}{
		{"stamped at a tag", "v0.4.0", vcs("vcs", "git", "vcs.revision", rev, "vcs.modified", "false"), "v0.4.0 (commit abc1234def56)" + k8s},
		{"stamped, naming the commit", "v0.4.0-12-gabc1234-dirty", vcs("vcs.revision", rev, "vcs.modified", "true"), "v0.4.0-12-gabc1234-dirty" + k8s},
		{"stamped with the commit alone", "abc1234", vcs("vcs.revision", rev), "abc1234" + k8s},
		{"unstamped, changed tree", "dev", vcs("vcs.revision", rev, "vcs.modified", "true"), "dev (commit abc1234def56-dirty)" + k8s},
		{"stamped empty", "", vcs("vcs.revision", "abc"), "dev (commit abc)" + k8s},
		{"no commit recorded", "dev", vcs("-trimpath", "true"), "dev" + k8s},
		{"no build info", "v0.4.0", nil, "v0.4.0" + k8s},
	} {
		if got := describe(c.nest, c.info); got != c.want {
			t.Errorf("%s: describe = %q, want %q", c.name, got, c.want)
		}
	}
	// A test binary records no commit, and nothing stamps it.
	if got, want := Line("nest-manager"), "nest-manager version dev"+k8s; got != want {
		t.Errorf("Line = %q, want %q", got, want)
	}
}

func TestHandleFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--version"}, true},
		{[]string{"-version"}, true},
		{[]string{"--leader-elect=false", "--metrics-bind-address", ":0", "--version"}, true},
		{nil, false},
		{[]string{}, false},
		{[]string{"--leader-elect=false"}, false},
		{[]string{"--version=false"}, false},
		{[]string{"-v"}, false},
		{[]string{"--", "--version"}, false},
		{[]string{"-timeout", "5s", "--", "--version"}, false},
		// A command word's arguments are its own (nest-syncer's helpers,
		// testapp's clients), as is nest-probe's URL.
		{[]string{"cat", "--version"}, false},
		{[]string{"etc-hosts", "-version"}, false},
		{[]string{"http://127.0.0.1:8080/healthz", "--version"}, false},
	} {
		var out bytes.Buffer
		got := HandleFlag(c.args, "nest-syncer", &out)
		if got != c.want {
			t.Errorf("HandleFlag(%q) = %v, want %v", c.args, got, c.want)
		}
		want := ""
		if c.want {
			want = Line("nest-syncer") + "\n"
		}
		if out.String() != want {
			t.Errorf("HandleFlag(%q) wrote %q, want %q", c.args, out.String(), want)
		}
	}
}
