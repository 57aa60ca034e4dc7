//go:build !race

package pipelined

// raceEnabled reports whether the race detector is on: load tests scale
// down under it, since it slows each request tenfold.
const raceEnabled = false
