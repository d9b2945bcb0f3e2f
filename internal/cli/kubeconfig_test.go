package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nestv1 "github.com/nestdev/nest/api/v1alpha1"
	"github.com/nestdev/nest/internal/kube"
)

// nest kubeconfig -o FILE leaves FILE with mode 0600 even when it existed
// with a wider mode: os.WriteFile alone would keep 0644, and the tenant's
// admin credential would be readable by every user of the machine.
func TestKubeconfigOutputIsPrivate(t *testing.T) {
	want := []byte("apiVersion: v1\nkind: Config\n# tenant admin\n")
	vc := &nestv1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "demo", Namespace: "vc-demo"},
		Spec:       nestv1.VirtualClusterSpec{Kubeconfig: base64.StdEncoding.EncodeToString(want)},
	}
	c := fake.NewClientBuilder().WithScheme(kube.NewScheme()).WithObjects(vc).Build()
	key := types.NamespacedName{Namespace: "vc-demo", Name: "demo"}
	dir := t.TempDir()
	check := func(t *testing.T, path string) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %#o, want 0600", path, mode)
		}
		if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s holds %q (%v), want the kubeconfig %q", path, got, err, want)
		}
	}

	t.Run("existing-0644-file", func(t *testing.T) {
		path := filepath.Join(dir, "existing")
		if err := os.WriteFile(path, []byte("an older, longer kubeconfig that must not survive in part"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o644); err != nil { // whatever the umask
			t.Fatal(err)
		}
		if err := kubeconfig(context.Background(), c, key, false, path, nil); err != nil {
			t.Fatal(err)
		}
		check(t, path)
	})
	t.Run("new-file", func(t *testing.T) {
		path := filepath.Join(dir, "new")
		if err := kubeconfig(context.Background(), c, key, false, path, nil); err != nil {
			t.Fatal(err)
		}
		check(t, path)
	})
	t.Run("symlink-to-0644-file", func(t *testing.T) {
		target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
		if err := os.WriteFile(target, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(target, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("target", link); err != nil {
			t.Fatal(err)
		}
		if err := kubeconfig(context.Background(), c, key, false, link, nil); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the link %s was replaced: %v, %v", link, fi.Mode(), err)
		}
		check(t, target)
	})
	t.Run("stdout", func(t *testing.T) {
		var out bytes.Buffer
		if err := kubeconfig(context.Background(), c, key, false, "", &out); err != nil || !bytes.Equal(out.Bytes(), want) {
			t.Errorf("standard output %q (%v), want %q", out.Bytes(), err, want)
		}
	})
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 4 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %v, want existing, new, target and link: no temporary file left", dir, names)
	}
}
