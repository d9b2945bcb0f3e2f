package ipblock

import (
	"net/netip"
	"reflect"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestSubtract(t *testing.T) {
	got := Subtract(prefixes("0.0.0.0/0", "203.0.113.0/24", "10.1.0.0/16", "::/0"), prefixes("10.0.0.0/8", "10.0.0.0/8", "192.168.0.0/16", "fd00::/8"))
	want := []networkingv1.IPBlock{
		// 203.0.113.0/24 lies inside 0.0.0.0/0, and 10.1/16 inside a denied range.
		{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "192.168.0.0/16"}},
		{CIDR: "::/0", Except: []string{"fd00::/8"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Subtract = %+v, want %+v", got, want)
	}
	if got := Subtract(prefixes("10.1.2.0/24"), prefixes("10.1.2.0/24")); len(got) != 0 {
		t.Errorf("a range minus itself = %+v, want nothing", got)
	}
}

func TestCovers(t *testing.T) {
	for _, tt := range []struct {
		outer, inner string
		want         bool
	}{
		{"10.0.0.0/8", "10.1.0.0/16", true},
		{"10.1.0.0/16", "10.0.0.0/8", false},
		{"10.0.0.0/8", "10.0.0.0/8", true},
		{"::/0", "10.0.0.0/8", false},
		{"0.0.0.0/0", "::1/128", false},
	} {
		if got := Covers(netip.MustParsePrefix(tt.outer), netip.MustParsePrefix(tt.inner)); got != tt.want {
			t.Errorf("Covers(%s, %s) = %v, want %v", tt.outer, tt.inner, got, tt.want)
		}
	}
}
