package pipelined

import (
	"testing"
	"time"
)

// conns builds connections with the given scheduling state for policy tests.
func testConns(states ...pconn) []*pconn {
	cs := make([]*pconn, len(states))
	for i := range states {
		c := states[i]
		cs[i] = &c
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
		{"all busy", testConns(pconn{inflight: 1}, pconn{inflight: 2}), -1},
		{"one idle", testConns(pconn{inflight: 1}, pconn{inflight: 0}), 1},
		{"closing idle skipped", testConns(pconn{closing: true}, pconn{inflight: 3}), -1},
		{"most recently used", testConns(pconn{idleSince: now.Add(-time.Second)}, pconn{idleSince: now}, pconn{idleSince: now.Add(-time.Minute)}), 1},
	}
	for _, tt := range tests {
		var lw leastWait
		got := lw.idle(tt.conns)
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
		{"fewest in flight", testConns(pconn{inflight: 3}, pconn{inflight: 1}, pconn{inflight: 2}), 4, 1},
		{"at depth", testConns(pconn{inflight: 4}, pconn{inflight: 4}), 4, -1},
		{"depth one", testConns(pconn{inflight: 1}), 1, -1},
		{"closing", testConns(pconn{inflight: 1, closing: true}, pconn{inflight: 3}), 4, 1},
		{"exclusive", testConns(pconn{inflight: 1, exclusive: true}, pconn{inflight: 3}), 4, 1},
		{"large head", testConns(pconn{inflight: 1, large: true}, pconn{inflight: 3}), 4, 1},
		{"reserved", testConns(pconn{inflight: 1, reserved: true}, pconn{inflight: 2}), 4, 1},
		{"nothing eligible", testConns(pconn{inflight: 1, large: true}, pconn{inflight: 1, exclusive: true}), 4, -1},
		{"tie: younger head", testConns(pconn{inflight: 2, headTick: 5}, pconn{inflight: 2, headTick: 9}, pconn{inflight: 2, headTick: 7}), 4, 1},
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
	conns := testConns(pconn{inflight: 1}, pconn{inflight: 1}, pconn{inflight: 1})
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
	conns := testConns(pconn{inflight: 3}, pconn{inflight: 1, reserved: true}, pconn{inflight: 2}, pconn{inflight: 1, closing: true})
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
			conns[i] = &pconn{inflight: 1 + i%3, headTick: uint64(i)}
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
		conns[i] = &pconn{inflight: i % 2, idleSince: now.Add(time.Duration(i))}
	}
	var lw leastWait
	b.ReportAllocs()
	for b.Loop() {
		lw.idle(conns)
	}
}

func TestPolicyAllocatesNothing(t *testing.T) {
	conns := testConns(pconn{inflight: 1}, pconn{inflight: 2}, pconn{})
	var lw leastWait
	if n := testing.AllocsPerRun(100, func() {
		lw.idle(conns)
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
