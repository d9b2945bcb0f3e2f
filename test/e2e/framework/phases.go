package framework

import (
	"fmt"
	"strings"
	"time"
)

// Phases records how long each phase of a test case took, for its log: a
// case whose wall time grows shows which wait grew.
type Phases struct {
	last  time.Time
	parts []string
}

// NewPhases starts the clock of the first phase now.
func NewPhases() *Phases { return &Phases{last: time.Now()} }

// Done ends the phase named what, which began when the one before it
// ended (or at NewPhases), and starts the next.
func (p *Phases) Done(what string) {
	now := time.Now()
	p.parts = append(p.parts, fmt.Sprintf("%s %.1fs", what, now.Sub(p.last).Seconds()))
	p.last = now
}

// String lists the phases in order with their seconds, such as
// "tenant ready 12.3s, workload created 4.5s".
func (p *Phases) String() string { return strings.Join(p.parts, ", ") }
