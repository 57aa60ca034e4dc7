package model

import (
	"testing"
	"time"
)

// TestDecide: why a host is not pipelined, computed once (Decide, Stats,
// Gains), in a row of situations under a fake clock.
func TestDecide(t *testing.T) {
	const ms = time.Millisecond
	serial := func(gap time.Duration) func(*Host) {
		return func(m *Host) {
			for range 2 * Memory {
				m.NoteOrder(gap, 0, 0)
			}
		}
	}
	lateHeads := func(m *Host) {
		for i := range 2000 {
			w := ms
			if i%100 == 99 {
				w = 200 * ms
			}
			m.NoteHeadWait(w)
		}
	}
	fallBack := func(m *Host) { m.NoteFailure(false) }
	for _, tt := range []struct {
		name       string
		fixed      bool
		configured int
		steps      []func(*Host)
		want       Reason
		gains      bool
		serial     bool
	}{
		{"nothing seen", false, 4, nil, Pipelined, true, false},
		{"a depth fallback", false, 4, []func(*Host){fallBack}, Fallback, true, false},
		{"a depth fallback at depth 1", false, 1, []func(*Host){fallBack}, Pipelined, true, false},
		{"late heads", false, 4, []func(*Host){lateHeads}, LateHeads, false, false},
		{"serial, 10 ms", false, 4, []func(*Host){serial(10 * ms)}, SerialSlow, false, true},
		{"serial, 0.5 ms: still gains", false, 4, []func(*Host){serial(500 * time.Microsecond)}, Pipelined, true, true},
		{"a fallback before late heads", false, 4, []func(*Host){lateHeads, fallBack}, Fallback, false, false},
		{"fixed: learns nothing", true, 4, []func(*Host){lateHeads, serial(10 * ms)}, Pipelined, true, false},
		{"fixed: a fallback still counts", true, 4, []func(*Host){fallBack}, Fallback, true, false},
	} {
		clock := newFakeClock()
		m := New(tt.fixed, readAhead)
		m.clock = clock.now
		for _, step := range tt.steps {
			clock.advance(ms)
			step(&m)
		}
		d := m.Decide(tt.configured)
		if d.Reason != tt.want || d.Serial != tt.serial {
			t.Errorf("%s: Decide = %+v, want reason %q, serial %v", tt.name, d, tt.want, tt.serial)
		}
		if s := m.Stats(time.Second, tt.configured); s.Reason != d.Reason || s.Serial != d.Serial || s.Proven != d.Proven {
			t.Errorf("%s: Stats says %q, serial %v, proven %v; Decide %+v", tt.name, s.Reason, s.Serial, s.Proven, d)
		}
		if got := m.Gains(); got != tt.gains {
			t.Errorf("%s: Gains = %v, want %v", tt.name, got, tt.gains)
		}
	}
}

// TestProbe: a probe waits while the host is not proven, and a stalled
// one is copied once per such time, only if its class was known bounded,
// spending a duplicate whatever the budget holds.
func TestProbe(t *testing.T) {
	const hol = time.Second
	m := New(false, readAhead)
	m.clock = newFakeClock().now
	if got := m.ProbeWait(hol); got != hol {
		t.Errorf("ProbeWait before any head wait = %v, want HeadOfLineTimeout (%v)", got, hol)
	}
	for _, tt := range []struct {
		v    Verdict
		want bool
	}{{Unseen, false}, {Late, false}, {Known, true}, {Known, false}} {
		if got := m.CopyProbe(tt.v); got != tt.want {
			t.Errorf("CopyProbe(%v) = %v, want %v", tt.v, got, tt.want)
		}
	}
	if m.dup != -1 {
		t.Errorf("duplicate budget %v after one copy, want -1", m.dup)
	}
	m.NoteStalledProbe()
	if !m.InFallback() {
		t.Errorf("a stalled probe of a host not proven: no fallback")
	}
	if !m.CopyProbe(Known) {
		t.Errorf("CopyProbe after the fallback = false, want a new copy")
	}
	m.NoteProven()
	if got := m.ProbeWait(hol); got != 0 || m.CopyProbe(Known) {
		t.Errorf("proven: ProbeWait = %v, want 0, and no copy", got)
	}
	fixed := New(true, readAhead)
	if got := fixed.ProbeWait(hol); got != 0 {
		t.Errorf("fixed: ProbeWait = %v, want 0", got)
	}
}

// TestWaits: the waits derived from the host's round trip.
func TestWaits(t *testing.T) {
	const ms = time.Millisecond
	for _, tt := range []struct {
		rtt                    time.Duration
		streamGap, burst, soon time.Duration
	}{
		{0, QuickWait, QuickWait, QuickWait},
		{ms, QuickWait, QuickWait, QuickWait},
		{4 * ms, 8 * ms, QuickWait, 8 * ms},
		{QuickWait, 10 * ms, 0, 10 * ms},
		{50 * ms, 100 * ms, 0, 100 * ms},
	} {
		var m Host
		if tt.rtt > 0 {
			m.NoteRoundTrip(tt.rtt)
		}
		if got := m.StreamGap(); got != tt.streamGap {
			t.Errorf("rtt %v: StreamGap = %v, want %v", tt.rtt, got, tt.streamGap)
		}
		if got := m.BurstWait(); got != tt.burst {
			t.Errorf("rtt %v: BurstWait = %v, want %v", tt.rtt, got, tt.burst)
		}
		if got := m.DialSoon(); got != tt.soon {
			t.Errorf("rtt %v: DialSoon = %v, want %v", tt.rtt, got, tt.soon)
		}
	}
}
