package pipelined

import (
	"testing"
	"time"
)

// connState is the scheduling state of a connection in policy tests.
type connState struct {
	inflight                            int
	closing, exclusive, large, reserved bool
	headTick                            uint64
	idleSince                           time.Time
}

// testConns builds connections with the given scheduling states.
func testConns(states ...connState) []*pconn {
	cs := make([]*pconn, len(states))
	for i, s := range states {
		cs[i] = &pconn{s: sched{inflight: s.inflight, retired: s.closing, exclusive: s.exclusive,
			streaming: s.large, reserved: s.reserved, headTick: s.headTick, idleSince: s.idleSince}}
	}
	return cs
}

func TestLeastWaitIdle(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name  string
		conns []*pconn
		want  int // index, or -1 for nil
	}{
		{"none", nil, -1},
		{"all busy", testConns(connState{inflight: 1}, connState{inflight: 2}), -1},
		{"one idle", testConns(connState{inflight: 1}, connState{inflight: 0}), 1},
		{"closing idle skipped", testConns(connState{closing: true}, connState{inflight: 3}), -1},
		{"most recently used", testConns(connState{idleSince: now.Add(-time.Second)}, connState{idleSince: now}, connState{idleSince: now.Add(-time.Minute)}), 1},
	}
	for _, tt := range tests {
		var lw leastWait
		got := lw.idle(tt.conns, false)
		if idx := indexOf(tt.conns, got); idx != tt.want {
			t.Errorf("%s: idle() = conn %d, want conn %d", tt.name, idx, tt.want)
		}
	}
}

func TestLeastWaitPipeline(t *testing.T) {
	tests := []struct {
		name  string
		conns []*pconn
		depth int
		want  int
	}{
		{"fewest in flight", testConns(connState{inflight: 3}, connState{inflight: 1}, connState{inflight: 2}), 4, 1},
		{"at depth", testConns(connState{inflight: 4}, connState{inflight: 4}), 4, -1},
		{"depth one", testConns(connState{inflight: 1}), 1, -1},
		{"closing", testConns(connState{inflight: 1, closing: true}, connState{inflight: 3}), 4, 1},
		{"exclusive", testConns(connState{inflight: 1, exclusive: true}, connState{inflight: 3}), 4, 1},
		{"large head", testConns(connState{inflight: 1, large: true}, connState{inflight: 3}), 4, 1},
		{"reserved", testConns(connState{inflight: 1, reserved: true}, connState{inflight: 2}), 4, 1},
		{"nothing eligible", testConns(connState{inflight: 1, large: true}, connState{inflight: 1, exclusive: true}), 4, -1},
		{"tie: younger head", testConns(connState{inflight: 2, headTick: 5}, connState{inflight: 2, headTick: 9}, connState{inflight: 2, headTick: 7}), 4, 1},
	}
	for _, tt := range tests {
		var lw leastWait
		got := lw.pipeline(tt.conns, tt.depth)
		if idx := indexOf(tt.conns, got); idx != tt.want {
			t.Errorf("%s: pipeline(depth %d) = conn %d, want conn %d", tt.name, tt.depth, idx, tt.want)
		}
	}
}

// TestLeastWaitPipelineTiesRotate: exact ties are shared round robin, not
// always given to the first connection.
func TestLeastWaitPipelineTiesRotate(t *testing.T) {
	conns := testConns(connState{inflight: 1}, connState{inflight: 1}, connState{inflight: 1})
	var lw leastWait
	seen := make(map[int]int)
	for range 30 {
		seen[indexOf(conns, lw.pipeline(conns, 4))]++
	}
	for i := range conns {
		if seen[i] != 10 {
			t.Errorf("30 tied picks: conn %d chosen %d times, want 10", i, seen[i])
		}
	}
}

func TestLeastWaitDrainCandidate(t *testing.T) {
	conns := testConns(connState{inflight: 3}, connState{inflight: 1, reserved: true}, connState{inflight: 2}, connState{inflight: 1, closing: true})
	var lw leastWait
	if got := indexOf(conns, lw.drainCandidate(conns)); got != 2 {
		t.Errorf("drainCandidate() = conn %d, want conn 2", got)
	}
}

func indexOf(conns []*pconn, c *pconn) int {
	for i, x := range conns {
		if x == c {
			return i
		}
	}
	return -1
}

func BenchmarkLeastWaitPipeline(b *testing.B) {
	for _, n := range []int{2, 8, 32} {
		conns := make([]*pconn, n)
		for i := range conns {
			conns[i] = &pconn{s: sched{inflight: 1 + i%3, headTick: uint64(i)}}
		}
		b.Run(itoa(n), func(b *testing.B) {
			var lw leastWait
			b.ReportAllocs()
			for b.Loop() {
				lw.pipeline(conns, 4)
			}
		})
	}
}

func BenchmarkLeastWaitIdle(b *testing.B) {
	conns := make([]*pconn, 8)
	now := time.Now()
	for i := range conns {
		conns[i] = &pconn{s: sched{inflight: i % 2, idleSince: now.Add(time.Duration(i))}}
	}
	var lw leastWait
	b.ReportAllocs()
	for b.Loop() {
		lw.idle(conns, false)
	}
}

func TestPolicyAllocatesNothing(t *testing.T) {
	conns := testConns(connState{inflight: 1}, connState{inflight: 2}, connState{})
	var lw leastWait
	if n := testing.AllocsPerRun(100, func() {
		lw.idle(conns, false)
		lw.pipeline(conns, 4)
		lw.drainCandidate(conns)
	}); n != 0 {
		t.Errorf("policy allocations per choice = %v, want 0", n)
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
