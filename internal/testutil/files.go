package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFile writes content to path (mode 0644), making its parent
// directories (0755), and fails the test on any error.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ReadFile returns the content of path, and fails the test when it cannot
// be read: a missing file is a failure, never an empty string.
func ReadFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
