package kube

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ResourceListStyle is how FormatResourceList writes a ResourceList.
type ResourceListStyle struct {
	// Assign joins a name to its quantity, Sep one pair to the next.
	Assign, Sep string
	// Empty stands for a list with nothing in it.
	Empty string
}

var (
	// ResourceListText is for people to read, in status messages and on
	// the dashboard: "cpu 2, memory 4Gi", and "nothing" for an empty list.
	ResourceListText = ResourceListStyle{Assign: " ", Sep: ", ", Empty: "nothing"}
	// ResourceListFlag is "cpu=2,memory=4Gi", and "" for an empty list: what
	// contract.ParseResourceList reads back.
	ResourceListFlag = ResourceListStyle{Assign: "=", Sep: ","}
)

// FormatResourceList writes each resource of l as its name, s.Assign and its
// quantity (Quantity.String, so a zero is "0"), joined by s.Sep, or s.Empty
// when l has none. The pairs are sorted as written, so the output is stable.
// That is by name, except where one name begins another and the longer one
// goes on with a character that sorts before s.Assign: with "=", "cpu.x=1"
// comes before "cpu=1". With " " the order is exactly by name, as no
// resource name holds a character that sorts before a space.
func FormatResourceList(l corev1.ResourceList, s ResourceListStyle) string {
	if len(l) == 0 {
		return s.Empty
	}
	parts := make([]string, 0, len(l))
	for name, q := range l {
		parts = append(parts, string(name)+s.Assign+q.String())
	}
	slices.Sort(parts)
	return strings.Join(parts, s.Sep)
}
