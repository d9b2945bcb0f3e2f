package components

import (
	"fmt"
	"net/netip"
	"strings"
)

// Flag is one command-line flag, rendered --Name=Value.
type Flag struct {
	Name, Value string
}

// Flags is a command line in the order it is rendered. No name appears
// twice.
type Flags []Flag

// Args renders f as "--name=value" arguments, in order.
func (f Flags) Args() []string {
	out := make([]string, len(f))
	for i, fl := range f {
		out[i] = "--" + fl.Name + "=" + fl.Value
	}
	return out
}

// Map returns f keyed by flag name. A later flag wins, as it does on a
// component's command line.
func (f Flags) Map() map[string]string {
	out := make(map[string]string, len(f))
	for _, fl := range f {
		out[fl.Name] = fl.Value
	}
	return out
}

// String renders f for logs and test failures.
func (f Flags) String() string { return strings.Join(f.Args(), " ") }

// ParseCIDRs parses a comma-separated list of CIDRs, such as the value of
// --host-pod-cidrs. Empty entries are skipped; host bits are masked off. The
// error names flag and the bad entry.
func ParseCIDRs(flag, list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("--%s: %q is not a CIDR: list CIDRs separated by commas, such as 10.244.0.0/16,fd00:10:244::/56", flag, s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
