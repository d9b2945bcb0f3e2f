//go:build race

package egress

// raceEnabled tells TestRealClient to build its child with -race.
const raceEnabled = true
