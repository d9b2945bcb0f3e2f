package components

import "strings"

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
