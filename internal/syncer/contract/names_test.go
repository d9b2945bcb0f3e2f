package contract

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	// A copy that does not record a UID, or records an empty one, is no
	// object's by UID, not even of an object asked for with none.
	for _, uid := range []string{"uid-1", ""} {
		noUID := &metav1.ObjectMeta{Labels: HostLabels("alpha", "shop"), Annotations: map[string]string{AnnotationTenantNamespace: "shop", AnnotationTenantName: "web"}}
		if IsCopyOfUID(noUID, "alpha", "shop", "web", uid) {
			t.Errorf("a copy without %s is the copy of UID %q", AnnotationTenantUID, uid)
		}
		noUID.Annotations[AnnotationTenantUID] = ""
		if IsCopyOfUID(noUID, "alpha", "shop", "web", uid) {
			t.Errorf("a copy with an empty %s is the copy of UID %q", AnnotationTenantUID, uid)
		}
	}
	// The UID annotation alone makes nothing a copy.
	if IsCopyOfUID(&metav1.ObjectMeta{Annotations: HostAnnotations("shop", "web", "uid-1")}, "alpha", "shop", "web", "uid-1") {
		t.Error("an object without the host labels is a copy")
	}
}

// GetCopy looks the copy up at its host name and says whether what it finds
// there is the copy of that very object.
func TestGetCopy(t *testing.T) {
	podsGR := schema.GroupResource{Resource: "pods"}
	copyName := HostName("alpha", "shop", "web")
	host := map[string]*corev1.Pod{
		copyName: {ObjectMeta: metav1.ObjectMeta{Name: copyName, Labels: HostLabels("alpha", "shop"), Annotations: HostAnnotations("shop", "web", "uid-1")}},
		// An object at the host name of shop/db that is not its copy.
		HostName("alpha", "shop", "db"): {ObjectMeta: metav1.ObjectMeta{Name: HostName("alpha", "shop", "db"), Labels: map[string]string{"app": "db"}}},
	}
	var asked []string
	get := func(name string) (*corev1.Pod, error) {
		asked = append(asked, name)
		if name == HostName("alpha", "shop", "broken") {
			return nil, errors.New("host unreachable")
		}
		if p, ok := host[name]; ok {
			return p, nil
		}
		return nil, apierrors.NewNotFound(podsGR, name)
	}
	for _, tt := range []struct {
		name, uid string
		ok, found bool
		err       string
	}{
		{"web", "uid-1", true, true, ""},
		{"web", "uid-2", false, true, ""}, // an earlier web's copy
		{"web", "", false, true, ""},
		{"db", "uid-3", false, true, ""}, // not a copy at all
		{"gone", "uid-4", false, false, ""},
		{"broken", "uid-5", false, false, "host unreachable"},
	} {
		asked = nil
		got, ok, err := GetCopy(get, "alpha", "shop", tt.name, tt.uid)
		if want := []string{HostName("alpha", "shop", tt.name)}; !slices.Equal(asked, want) {
			t.Errorf("%s: asked for %v, want %v", tt.name, asked, want)
		}
		if ok != tt.ok || (got != nil) != tt.found {
			t.Errorf("%s %q: got %v, ok %v; want found %v, ok %v", tt.name, tt.uid, got, ok, tt.found, tt.ok)
		}
		if (err == nil) != (tt.err == "") || err != nil && err.Error() != tt.err {
			t.Errorf("%s: error %v, want %q", tt.name, err, tt.err)
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
