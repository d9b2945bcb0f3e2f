//go:build !linux

package netagent

import (
	"errors"
	"net/netip"
)

// ForgetConnections deletes conntrack entries; only Linux has them.
func ForgetConnections([]netip.Addr) (int, error) {
	return 0, errors.New("conntrack entries exist on Linux only")
}
