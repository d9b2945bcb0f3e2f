package contract

import (
	"net/netip"
	"slices"
	"testing"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestFormatPodCIDRs(t *testing.T) {
	tests := []struct {
		name string
		in   []netip.Prefix
		want string
	}{
		{"none", nil, ""},
		{"one", prefixes("10.244.1.0/24"), "10.244.1.0/24"},
		{"sorted, deduplicated and masked",
			prefixes("fd00:10:244:2::/64", "10.244.2.0/24", "10.244.1.7/24", "10.244.1.0/24", "fd00:10:244:2::9/64"),
			"10.244.1.0/24\n10.244.2.0/24\nfd00:10:244:2::/64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FormatPodCIDRs(tt.in)
			if got != tt.want {
				t.Errorf("FormatPodCIDRs = %q, want %q", got, tt.want)
			}
			if back, want := ParsePodCIDRs(got), ParsePodCIDRs(tt.want); !slices.Equal(back, want) || len(back) != len(slices.Compact(slices.Clone(back))) {
				t.Errorf("ParsePodCIDRs(FormatPodCIDRs) = %v, want %v", back, want)
			}
		})
	}
}

func TestParsePodCIDRs(t *testing.T) {
	tests := []struct {
		name, data string
		want       []netip.Prefix
	}{
		{"empty", "", nil},
		{"what FormatPodCIDRs writes", "10.244.1.0/24\n10.244.2.0/24\nfd00:10:244:2::/64",
			prefixes("10.244.1.0/24", "10.244.2.0/24", "fd00:10:244:2::/64")},
		{"masked", "10.244.1.7/24\n", prefixes("10.244.1.0/24")},
		{"blanks, spaces and CRLF", "\n  10.244.1.0/24  \r\n\n10.244.2.0/24\r\n", prefixes("10.244.1.0/24", "10.244.2.0/24")},
		{"junk lines are skipped", "10.244.1.0/24\nnot a CIDR\n10.244.3.1\n10.244.0.0/33\n0.0.0.0/0 # comment\n10.244.2.0/24",
			prefixes("10.244.1.0/24", "10.244.2.0/24")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParsePodCIDRs(tt.data); !slices.Equal(got, tt.want) {
				t.Errorf("ParsePodCIDRs(%q) = %v, want %v", tt.data, got, tt.want)
			}
		})
	}
}

func TestNodeIPsRoundTrip(t *testing.T) {
	in := []netip.Addr{netip.MustParseAddr("fd00::12"), netip.MustParseAddr("172.18.0.3"), netip.MustParseAddr("172.18.0.2"), netip.MustParseAddr("172.18.0.3")}
	data := FormatNodeIPs(in)
	if data != "172.18.0.2\n172.18.0.3\nfd00::12" {
		t.Errorf("FormatNodeIPs = %q, want sorted, one a line, without repeats", data)
	}
	want := []netip.Addr{netip.MustParseAddr("172.18.0.2"), netip.MustParseAddr("172.18.0.3"), netip.MustParseAddr("fd00::12")}
	if got := ParseNodeIPs(data); !slices.Equal(got, want) {
		t.Errorf("ParseNodeIPs(%q) = %v, want %v", data, got, want)
	}
	if got := FormatNodeIPs(nil); got != "" {
		t.Errorf("FormatNodeIPs(nil) = %q, want empty", got)
	}
}

func TestParseNodeIPsSkipsJunk(t *testing.T) {
	data := "\n 172.18.0.2 \r\nnot an IP\n172.18.0.0/16\n172.18.0.3:10250\n256.1.1.1\n172.18.0.4 # comment\nfd00::12\n"
	want := []netip.Addr{netip.MustParseAddr("172.18.0.2"), netip.MustParseAddr("fd00::12")}
	if got := ParseNodeIPs(data); !slices.Equal(got, want) {
		t.Errorf("ParseNodeIPs(%q) = %v, want %v", data, got, want)
	}
}
