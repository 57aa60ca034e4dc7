package pipelined

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pipelined/pipelined/internal/model"
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

// TestDispatchQueue runs dispatchLocked over a hand-built pool at its
// connection limit: who is placed, and how many connections are kept
// free (reserved) for the requests that need an idle one.
func TestDispatchQueue(t *testing.T) {
	busy := connState{inflight: 1, exclusive: true}
	long := time.Now().Add(-time.Minute)
	tests := []struct {
		name     string
		conns    []connState
		nearEnd  int    // index of an idle connection near its Keep-Alive end, or -1
		queue    string // P: POST, G: GET (pipelineable), in FIFO order
		placed   string // the waiters placed, as indexes into queue
		reserved int
	}{
		{"all busy: nobody placed, every connection reserved", []connState{busy, busy}, -1, "PPGPG", "", 2},
		{"all busy, fewer solo waiters than connections", []connState{busy, busy, busy}, -1, "GPG", "", 1},
		{"one idle: the first waiter takes it", []connState{{idleSince: long}, busy}, -1, "PGG", "0", 0},
		{"idle near its Keep-Alive end: only a retryable request takes it", []connState{{idleSince: long}, busy}, 0, "PPGP", "2", 2},
		{"pipelining: GETs behind a GET", []connState{{inflight: 1}, busy}, -1, "GPG", "02", 1},
	}
	for _, tt := range tests {
		tr := NewTransport(TransportOptions{MaxConnsPerHost: len(tt.conns), PipelineDepth: 4})
		p := newHostPool(tr, poolKey{scheme: "http", addr: "127.0.0.1:1"})
		p.conns = testConns(tt.conns...)
		p.answered = true
		p.model.NoteProven()
		if tt.nearEnd >= 0 {
			// Idle for a minute of the 90 s announced: past half of it.
			p.conns[tt.nearEnd].s.kaIdle = 90 * time.Second
		}
		var ws []*waiter
		for _, m := range tt.queue {
			method := http.MethodGet
			if m == 'P' {
				method = http.MethodPost
			}
			var body io.Reader
			if m == 'P' {
				body = strings.NewReader("x")
			}
			req, _ := http.NewRequest(method, "http://127.0.0.1:1/", body)
			w := &waiter{a: newAttempt(newRequest(tr, req, p.key), false)}
			ws = append(ws, w)
			p.waiters.push(w)
		}
		p.mu.Lock()
		p.dispatchLocked()
		p.mu.Unlock()
		var placed string
		for i, w := range ws {
			select {
			case <-w.a.r.sig:
				if wr := w.res; wr.err != nil || wr.c == nil {
					t.Errorf("%s: waiter %d: %v", tt.name, i, wr.err)
				}
				placed += itoa(i)
			default:
			}
		}
		reserved := 0
		for _, c := range p.conns {
			if c.s.reserved {
				reserved++
			}
		}
		if placed != tt.placed || reserved != tt.reserved {
			t.Errorf("%s: placed %q, reserved %d; want %q, %d", tt.name, placed, reserved, tt.placed, tt.reserved)
		}
		if got, want := p.waiters.len(), len(ws)-len(placed); got != want {
			t.Errorf("%s: %d waiters left, want %d", tt.name, got, want)
		}
		solo := 0
		for _, w := range p.waiters.ws {
			if !pipelineableAt(w.a, 4) {
				solo++
			}
		}
		if p.waiters.solo != solo {
			t.Errorf("%s: waitQueue.solo = %d, want %d", tt.name, p.waiters.solo, solo)
		}
		tr.Close()
	}
}

// TestDispatchToH2: waiters left in the HTTP/1 queue once the host speaks
// HTTP/2, with no HTTP/1.1 connection open or being dialed, go to the
// h2Host (useH2): nothing else would ever serve them, since
// canDialLocked dials nothing for them. TestH2PoolsChurn found them stuck
// there (a dial that found the h2Host served already closed its
// connection and left them); with a dial in progress, or a connection,
// they stay.
func TestDispatchToH2(t *testing.T) {
	for _, tt := range []struct {
		name          string
		dialing       int
		conns, demote bool
		want          bool // the waiter is sent to HTTP/2
	}{
		{name: "nothing else", want: true},
		{name: "a dial in progress", dialing: 1},
		{name: "an HTTP/1.1 connection", conns: true},
		{name: "turned back to HTTP/1.1", demote: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTransport(TransportOptions{MaxConnsPerHost: 1})
			defer tr.Close()
			p := newHostPool(tr, poolKey{scheme: "https", addr: "127.0.0.1:1"})
			p.mu.Lock()
			defer p.mu.Unlock()
			h := p.h2HostLocked()
			h.demoted.Store(tt.demote)
			p.dialing = tt.dialing
			if tt.conns {
				p.conns = testConns(connState{inflight: 1, exclusive: true}) // it serves the waiter once free
			}
			req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1:1/", nil)
			w := &waiter{a: newAttempt(newRequest(tr, req, p.key), false)}
			p.waiters.push(w)
			p.dispatchLocked()
			var got bool
			select {
			case <-w.a.r.sig:
				u, ok := w.res.err.(*useH2)
				got = ok && u.h == h
				if !got {
					t.Fatalf("waiter given %+v", w.res)
				}
				h.users.Add(-1)
			default:
			}
			if got != tt.want {
				t.Errorf("sent to HTTP/2: %t, want %t", got, tt.want)
			}
		})
	}
}

// TestBurstPlacedOnceAnswered: a burst of a route the host has not
// answered yet waits for one answer of each of its routes and is then
// pipelined: the requests that queued while their route was unseen take
// its verdict (waitQueue.learned) instead of each being written alone.
// The server runs a connection's requests at once, each answered after its
// delay; the host answered a request of another route before, and is
// proven (so that the probe, whose proof the scheduling of two callers
// decides, does not weigh). The burst takes an answer time per route and
// ⌈n / (connections × depth)⌉ more, where it took n / connections.
func TestBurstPlacedOnceAnswered(t *testing.T) {
	tests := []struct {
		name    string
		conns   int
		delay   time.Duration
		methods []string // taken in turn by the burst's requests
		answers int      // answer times the burst may take
	}{
		{"one connection", 1, 50 * time.Millisecond, []string{"GET"}, 1 + 2},
		{"two connections", 2, 50 * time.Millisecond, []string{"GET"}, 1 + 1},
		{"GET and HEAD", 1, 30 * time.Millisecond, []string{"GET", "HEAD"}, 2 + 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &memServer{handle: memServeConcurrent(func(string, string) time.Duration { return tt.delay })}
				tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: tt.conns, PipelineConnsPerHost: tt.conns, PipelineDepth: 8})
				defer tr.Close()
				if got := <-memGet(tr, "/warm"); got != "/warm" {
					t.Fatalf("/warm = %q", got)
				}
				markProven(tr, "mem.test:80")
				start := time.Now()
				var wg sync.WaitGroup
				for i := range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						req, _ := http.NewRequest(tt.methods[i%len(tt.methods)], fmt.Sprintf("http://mem.test/items/x%d", i), nil)
						resp, err := tr.RoundTrip(req)
						if err != nil {
							t.Error(err)
							return
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}()
				}
				wg.Wait()
				if took, want := time.Since(start), time.Duration(tt.answers)*tt.delay+model.QuickWait; took > want {
					t.Errorf("the burst took %v (%.1f answer times), want at most %v", took, float64(took)/float64(tt.delay), want)
				}
			})
		})
	}
}

// TestOverloadAtLimit: 50 callers in a closed loop against a server that
// runs requests at once and answers each after 10 ms, over 5 connections
// 10 deep: the practical limit is 5,000 requests per second, and a
// request's queueing ideal P / limit is 10 ms. After a warm-up of five
// answer times (the host's first answer, the probe's), the transport
// serves about the limit with its p99 near the ideal. The first requests,
// queued while their route was unseen, were each written alone once their
// turn came (waitQueue.learned), for 90 ms, well past the warm-up (with
// 500 callers, a second of it: 0.26 of the limit, p99 1 s; more callers
// here crash the race detector's runtime now and then).
func TestOverloadAtLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			callers = 50
			service = 10 * time.Millisecond
			warm    = 5 * service
			window  = 500 * time.Millisecond
			limit   = 5 * 10 * time.Second / service // requests per second
			ideal   = callers * time.Second / limit
		)
		srv := &memServer{handle: memServeConcurrent(func(string, string) time.Duration { return service })}
		tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 5, PipelineConnsPerHost: 5, PipelineDepth: 10})
		defer tr.Close()
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					sent := time.Now()
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://mem.test/list", nil)
					resp, err := tr.RoundTrip(req)
					if err != nil {
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if now := time.Now(); now.Sub(start) > warm && now.Sub(start) <= warm+window {
						mu.Lock()
						lat = append(lat, now.Sub(sent))
						mu.Unlock()
					}
				}
			}()
		}
		time.Sleep(warm + window)
		cancel()
		wg.Wait()
		slices.Sort(lat)
		p99 := lat[len(lat)*99/100]
		rate := float64(len(lat)) / window.Seconds()
		if rate < 0.9*float64(limit) || p99 > 2*ideal {
			t.Errorf("%.0f requests per second (%.2f of the limit), p99 %v; want 0.9 of the limit at least, p99 at most %v",
				rate, rate/float64(limit), p99, 2*ideal)
		}
	})
}

// TestAbandonedHeadCut: a request given up before its answer's head closes
// its connection once it is the oldest unanswered one, as net/http closes
// a cancelled request's connection, and the requests pipelined behind it
// are sent again elsewhere (pconn.abandoned): they are answered when it is
// given up (or when the head ahead of it is answered), not when its
// answer comes, which nobody reads. The server runs a connection's
// requests at once: /slow answers after 30 ms, /slower after 60, /fast at
// once, each in its turn.
func TestAbandonedHeadCut(t *testing.T) {
	delay := map[string]time.Duration{"/fast": 0, "/slow": 30 * time.Millisecond, "/slower": 60 * time.Millisecond}
	tests := []struct {
		name     string
		ahead    string        // a request ahead of the one given up ("": none)
		given    string        // the request given up after 10 ms
		wantFast time.Duration // /fast, behind both, answered by then
	}{
		{"head given up", "", "/slow", 10 * time.Millisecond},
		{"given up behind a head", "/slow", "/slower", 30 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &memServer{handle: memServeConcurrent(func(_, path string) time.Duration { return delay[path] })}
				tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 1, PipelineConnsPerHost: 1, PipelineDepth: 4})
				defer tr.Close()
				for _, path := range []string{"/fast", "/slow", "/slower"} { // each route answered once
					if got := <-memGet(tr, path); got != path {
						t.Fatalf("%s = %q", path, got)
					}
				}
				markProven(tr, "mem.test:80")
				start := time.Now()
				var ahead <-chan string
				if tt.ahead != "" {
					ahead = memGet(tr, tt.ahead)
					synctest.Wait()
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
				defer cancel()
				given := make(chan error, 1)
				go func() {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://mem.test"+tt.given, nil)
					resp, err := tr.RoundTrip(req)
					if err == nil {
						resp.Body.Close()
					}
					given <- err
				}()
				synctest.Wait()
				fast := memGet(tr, "/fast") // pipelined behind the one given up
				if got := <-fast; got != "/fast" {
					t.Errorf("/fast = %q", got)
				}
				if took := time.Since(start); took > tt.wantFast {
					t.Errorf("/fast answered after %v, want by %v", took, tt.wantFast)
				}
				if err := <-given; !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: %v, want the deadline", tt.given, err)
				}
				if ahead != nil {
					if got := <-ahead; got != tt.ahead {
						t.Errorf("%s = %q", tt.ahead, got)
					}
				}
				tr.Close()
				synctest.Wait() // the server's goroutines end with their connections
			})
		})
	}
}

// TestRestartedStreamAlone: a watch restarted from its last
// resourceVersion that ended soon after its start (read whole before a
// request behind it would have waited) does not make its route one that
// requests may follow: its route is unseen again (internal/model, noteAnswer), so
// that the next restart, a stream again, has nothing written behind it.
// Taken for bounded, that restart had a GET pipelined behind it for as
// long as the watch ran or HeadOfLineTimeout.
func TestRestartedStreamAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var watches atomic.Int32
		srv := &memServer{handle: memEach(func(c net.Conn, req *http.Request) {
			if req.URL.Query().Get("watch") == "" {
				answer(c, req)
				return
			}
			// A watch: its head and an event at once, then quiet for its
			// time; the second one ends soon.
			last := 2 * time.Second
			if watches.Add(1) == 2 {
				last = 300 * time.Millisecond
			}
			event := `{"type":"ADDED","object":{}}` + "\n"
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(event), event)
			time.Sleep(last)
			io.WriteString(c, "0\r\n\r\n")
		})}
		tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 2, PipelineConnsPerHost: 1, PipelineDepth: 4})
		defer tr.Close()
		if got := <-memGet(tr, "/api/v1/pods/p1"); got != "/api/v1/pods/p1" {
			t.Fatalf("GET = %q", got)
		}
		markProven(tr, "mem.test:80")
		for rv := 1; rv <= 2; rv++ { // a stream, then one that ends soon
			if got := <-memGet(tr, fmt.Sprintf("/api/v1/pods?watch=1&resourceVersion=%d", rv)); strings.HasPrefix(got, "error") {
				t.Fatalf("watch %d: %s", rv, got)
			}
		}
		watch := memGet(tr, "/api/v1/pods?watch=1&resourceVersion=3")
		synctest.Wait() // its head and first event are read
		start := time.Now()
		if got := <-memGet(tr, "/api/v1/pods/p2"); got != "/api/v1/pods/p2" {
			t.Errorf("GET = %q", got)
		}
		if took := time.Since(start); took > 50*time.Millisecond {
			t.Errorf("a GET beside the restarted watch took %v", took)
		}
		if got := <-watch; strings.HasPrefix(got, "error") {
			t.Errorf("watch 3: %s", got)
		}
		tr.Close()
		synctest.Wait()
	})
}

// TestEnqueueBehindUnfollowable: a request placed on a connection before
// one that nothing may follow (its route unseen, a stream's or late, a
// retry) but come to the write token after it is not written behind it
// while it has had no answer: it goes elsewhere (enqueue reports false), as
// the pool would have placed it had it come later. Written behind a
// restarted watch, it waited until HeadOfLineTimeout.
func TestEnqueueBehindUnfollowable(t *testing.T) {
	tr := NewTransport(TransportOptions{})
	defer tr.Close()
	p := newHostPool(tr, poolKey{scheme: "http", addr: "mem.test:80"})
	client, server := memPipe()
	defer server.Close()
	c := newPconn(tr, p, client, nil)
	defer client.Close()
	tests := []struct {
		name     string
		follow   model.Verdict
		alone    bool
		answered bool // the last request's head was read
		want     bool
	}{
		{"behind a known route", model.Known, false, false, true},
		{"behind an unseen route", model.Unseen, false, false, false},
		{"behind an unseen route answered", model.Unseen, false, true, true},
		{"behind a stream", model.Streams, true, false, false},
		{"behind a retry", model.Known, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			last := newTestAttempt(tr, tt.follow, tt.alone)
			last.headersRead = tt.answered
			c.mu.Lock()
			c.fifo = []*attempt{last}
			c.mu.Unlock()
			if got := c.enqueue(newTestAttempt(tr, model.Known, false), false); got != tt.want {
				t.Errorf("enqueue = %v, want %v", got, tt.want)
			}
		})
	}
	c.mu.Lock()
	c.fifo = nil
	c.mu.Unlock()
}

// newTestAttempt returns an attempt of a GET placed with the given verdict
// of its route.
func newTestAttempt(tr *Transport, follow model.Verdict, alone bool) *attempt {
	req, _ := http.NewRequest(http.MethodGet, "http://mem.test/", nil)
	a := newAttempt(newRequest(tr, req, poolKey{scheme: "http", addr: "mem.test:80"}), alone)
	a.follow = follow
	return a
}
