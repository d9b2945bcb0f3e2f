package volumearchive

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// PackCommand's stream, fed to UnpackCommand, gives the same files back,
// and each reports its Stats as one JSON line on stderr.
func TestMainPacksAndUnpacks(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "blob"), bytes.Repeat([]byte{7}, 3000), 0o640); err != nil {
		t.Fatal(err)
	}
	var stream, packReport bytes.Buffer
	if err := Main([]string{PackCommand, "--dir=" + src}, nil, &stream, &packReport); err != nil {
		t.Fatal(err)
	}
	var unpackReport bytes.Buffer
	if err := Main([]string{UnpackCommand, "--dir=" + dst, "--limit=3000"}, &stream, nil, &unpackReport); err != nil {
		t.Fatal(err)
	}
	for _, report := range []*bytes.Buffer{&packReport, &unpackReport} {
		var st Stats
		if err := json.Unmarshal(report.Bytes(), &st); err != nil || st.Files != 1 || st.Bytes != 3000 {
			t.Errorf("report %q: %+v, %v", report, st, err)
		}
	}
	if got, err := os.ReadFile(filepath.Join(dst, "blob")); err != nil || len(got) != 3000 {
		t.Errorf("unpacked blob: %d bytes, %v", len(got), err)
	}
}

// Bad invocations are refused, naming what is missing.
func TestMainRefusesBadArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "want a subcommand"},
		{[]string{"explode"}, "unknown subcommand"},
		{[]string{PackCommand}, "--dir is required"},
		{[]string{UnpackCommand, "--dir=" + t.TempDir()}, "--limit is required"},
	} {
		err := Main(tc.args, nil, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
