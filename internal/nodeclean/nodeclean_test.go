package nodeclean

import "testing"

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		`/a/b`:           "/a/b",
		`/with\040space`: "/with space",
		`/tab\011x`:      "/tab\tx",
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
