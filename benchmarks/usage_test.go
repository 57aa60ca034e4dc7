package main

import (
	"os"
	"testing"
	"time"
)

var sink []*[64]byte

// TestUsage: the counters move with what the process does, and a row's
// rounds add up before they are divided by its requests.
func TestUsage(t *testing.T) {
	u0 := readUsage()
	// The runtime counts small allocations as it refills its caches of
	// spans, so a count lags by up to a span's worth: ask for many.
	const n = 100000
	for range n {
		sink = append(sink, new([64]byte))
	}
	sink = nil
	if _, err := os.ReadFile("/proc/self/io"); err != nil {
		t.Skip("no /proc/self/io:", err)
	}
	d := readUsage().sub(u0)
	if d.Allocs < n*9/10 || d.AllocBytes < 64*n*9/10 {
		t.Errorf("allocs %d (%d B), want about %d (%d B)", d.Allocs, d.AllocBytes, n, 64*n)
	}
	if d.Reads < 1 {
		t.Errorf("reads %d, want at least the read of /proc/self/io", d.Reads)
	}

	a := result{Requests: 10, Usage: &usage{Sys: 10 * time.Microsecond, Reads: 10, Writes: 20, VolCsw: 5, GoSwitches: 40, Allocs: 100, GCs: 1}}
	b := result{Requests: 30, Usage: &usage{Sys: 30 * time.Microsecond, Reads: 30, Writes: 20, VolCsw: 15, GoSwitches: 40, Allocs: 300, GCs: 1}}
	a.finish()
	b.finish()
	var r result
	r.merge(a)
	r.merge(b)
	want := breakdown{SysUs: 1, Reads: 1, Writes: 1, CtxSw: 0.5, GoSwitches: 2, Allocs: 10, GCPer1k: 50}
	if r.Breakdown == nil || *r.Breakdown != want {
		t.Errorf("merged breakdown %+v, want %+v", r.Breakdown, want)
	}
	if a.Usage.Reads != 10 {
		t.Errorf("merge changed a round's usage: %+v", a.Usage)
	}
}
