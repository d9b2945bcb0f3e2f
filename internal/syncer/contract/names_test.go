package contract

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestHostNameIsBoundedAndCollisionFree(t *testing.T) {
	long := strings.Repeat("a", 253)
	names := map[string]bool{}
	for _, c := range [][3]string{
		{"alpha", "default", "web"},
		{"alpha", "default", "web-x"},
		{"alpha", "default-x", "web"},
		{"beta", "default", "web"},
		{"alpha", "web-default", "x"}, // same readable parts as x/web-default in another layout
		{"alpha", "x", "web-default"},
		{"alpha", "default", long},
		{"alpha", "default", long[:252] + "b"},
		{"alpha", "default", "web.v1"}, // dots are valid in pod, ConfigMap and Secret names
		{"alpha", "default", "web-v1"}, // same readable part as web.v1
		{"alpha", "default", strings.Repeat("a.", 40) + "b"},
	} {
		n := HostName(c[0], c[1], c[2])
		if len(n) > 63 || len(validation.IsDNS1123Label(n)) > 0 {
			t.Errorf("HostName%v = %q: not a valid DNS label: %v", c, n, validation.IsDNS1123Label(n))
		}
		if _, hash, _ := strings.Cut(n[len(n)-17:], "-"); len(hash) != 16 {
			t.Errorf("HostName%v = %q: want a 16-hex-character (64-bit) hash suffix", c, n)
		}
		if names[n] {
			t.Errorf("HostName%v = %q collides", c, n)
		}
		names[n] = true
	}
	if first, again := HostName("alpha", "default", "web"), HostName("alpha", "default", "web"); first != again {
		t.Errorf("HostName is not stable: %s then %s", first, again)
	}
	if n := HostName("alpha", "shop", "web"); len(validation.IsDNS1035Label(n)) > 0 {
		t.Errorf("HostName of a Service name %q is not a valid Service name", n)
	}
}

// A copy is an object's only with its labels and annotations, and, asked
// by UID, only the copy made for that very object.
func TestIsCopyOfUID(t *testing.T) {
	copyOf := &metav1.ObjectMeta{Labels: HostLabels("alpha", "shop"), Annotations: HostAnnotations("shop", "web", "uid-1")}
	for _, tt := range []struct {
		vc, ns, name, uid string
		want              bool
	}{
		{"alpha", "shop", "web", "uid-1", true},
		{"alpha", "shop", "web", "uid-2", false},
		{"alpha", "shop", "web", "", false},
		{"beta", "shop", "web", "uid-1", false},
		{"alpha", "shop", "db", "uid-1", false},
	} {
		if got := IsCopyOfUID(copyOf, tt.vc, tt.ns, tt.name, tt.uid); got != tt.want {
			t.Errorf("IsCopyOfUID(%s %s/%s %q) = %v, want %v", tt.vc, tt.ns, tt.name, tt.uid, got, tt.want)
		}
	}
}

func TestShortName(t *testing.T) {
	if got := ShortName("alpha-member-gpu", "k"); got != "alpha-member-gpu" {
		t.Errorf("a short name was changed: %q", got)
	}
	long := strings.Repeat("a", 70)
	got := ShortName(long, "alpha/"+long)
	if len(got) != 63 || got == ShortName(long, "beta/"+long) || len(validation.IsDNS1123Label(got)) > 0 {
		t.Errorf("ShortName of 70 characters = %q: want 63, a valid label, differing by key", got)
	}
}
