package pipelined

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pipelined/pipelined/internal/h1"
	"github.com/pipelined/pipelined/internal/model"
)

// TestClosingResponseWithLateBody sends GETs to a server whose response
// closes the connection and whose body comes 100 ms after its head.
// Requests placed meanwhile must go elsewhere (or wait), never
// spin on the closing connection.
func TestClosingResponseWithLateBody(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/close" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 6\r\n\r\n")
				time.Sleep(100 * time.Millisecond)
				io.WriteString(c, "/close")
				return
			}
			time.Sleep(20 * time.Millisecond)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 8})
	paths := []string{"/close", "/a", "/b", "/c", "/d"}
	var wg sync.WaitGroup
	for _, path := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := get(t, tr, srv.url(path))
			if err != nil {
				t.Errorf("GET %s: %v", path, err)
				return
			}
			if got := readBody(t, resp); got != path {
				t.Errorf("GET %s: body %q", path, got)
			}
		}()
		time.Sleep(5 * time.Millisecond)
	}
	waitOrFail(t, &wg, "GETs")
}

// TestQuietCloseAfterEachAnswer sends GETs to a server that closes each
// connection right after its answer, without saying so. Sequential GETs must all succeed, as with net/http.
func TestQuietCloseAfterEachAnswer(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, serveEchoN(1))
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1})
	for i := range 2000 {
		path := fmt.Sprintf("/%d", i)
		resp, err := get(t, tr, srv.url(path))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		if got := readBody(t, resp); got != path {
			t.Fatalf("GET %s: body %q", path, got)
		}
	}
}

// TestHookMayCallStats: no user callback runs under a lock of the
// transport, so a GotConn hook may call Stats (it deadlocked when GotConn
// ran under the pool's lock).
func TestHookMayCallStats(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, serveEcho)
	tr := newTestTransport(t, TransportOptions{})
	var calls int
	trace := &httptrace.ClientTrace{
		GetConn:     func(string) { tr.Stats(); calls++ },
		GotConn:     func(httptrace.GotConnInfo) { tr.Stats(); calls++ },
		PutIdleConn: func(error) { tr.Stats(); calls++ },
	}
	ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(context.Background(), trace), testTimeout)
	defer cancel()
	for range 2 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.url("/x"), nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		readBody(t, resp)
	}
	if calls != 6 {
		t.Errorf("hooks called %d times, want 6", calls)
	}
}

// TestStatsIdleIsSchedulable: a connection that takes no new request is
// not counted as idle.
func TestStatsIdleIsSchedulable(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/close" {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
				// Keep the connection open: the client closes it.
				io.Copy(io.Discard, br)
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := newTestTransport(t, TransportOptions{})
	resp, err := get(t, tr, srv.url("/close"))
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	for host, s := range tr.Stats() {
		if s.Idle != 0 {
			t.Errorf("%s: Idle = %d after a closing response, want 0", host, s.Idle)
		}
	}
}

// TestNonPipelinedDialLikeNetHTTP: requests that are not pipelined are not
// held by the pipelining threshold; with MaxConnsPerHost 0 (no limit, as
// net/http) concurrent POSTs each get a connection.
func TestNonPipelinedDialLikeNetHTTP(t *testing.T) {
	verifyNoLeaks(t)
	release := make(chan struct{})
	var mu sync.Mutex
	waiting := 0
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			mu.Lock()
			waiting++
			mu.Unlock()
			<-release
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tr := newTestTransport(t, TransportOptions{PipelineConnsPerHost: 2})
	const n = 12
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, srv.url("/p"), strings.NewReader("x"))
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			readBody(t, resp)
		}()
	}
	// All n reach the server at once: none waits for another's answer.
	waitFor(t, "all POSTs at the server", func() bool { mu.Lock(); defer mu.Unlock(); return waiting == n })
	close(release)
	waitOrFail(t, &wg, "POSTs")
	if got := srv.conns.Load(); got != n {
		t.Errorf("connections = %d, want %d", got, n)
	}
}

// TestSerialServerDials: against a server that runs pipelined requests one
// at a time with a long service time, pipelining gains nothing; once the
// pool has seen that, pipelineable requests dial like net/http's (up to
// MaxConnsPerHost, no limit here) instead of queuing behind one another.
func TestSerialServerDials(t *testing.T) {
	verifyNoLeaks(t)
	var mu sync.Mutex
	active, most := 0, 0 // requests in the handler at once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		active++
		most = max(most, active)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		active--
		mu.Unlock()
		io.WriteString(w, r.URL.Path)
	}))
	defer srv.Close()
	tr := newTestTransport(t, TransportOptions{PipelineConnsPerHost: 2, PipelineDepth: 4})
	burst := func() {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				path := fmt.Sprintf("/%d", i)
				resp, err := get(t, tr, srv.URL+path)
				if err != nil {
					t.Error(err)
					return
				}
				if got := readBody(t, resp); got != path {
					t.Errorf("GET %s = %q", path, got)
				}
			}()
		}
		waitOrFail(t, &wg, "burst")
	}
	for range 3 { // learn: pipelined answers come one service time apart
		burst()
	}
	mu.Lock()
	most = 0
	mu.Unlock()
	burst()
	mu.Lock()
	defer mu.Unlock()
	if most <= 2 {
		t.Errorf("at most %d requests ran at once on the server, want more than the 2 pipelined connections", most)
	}
}

// TestManyHostsLeaveNoPool: a client that visits many hosts once each
// keeps no pool (and no goroutine) for them once their connections are
// gone: closed at once (MaxIdleConnsPerHost -1), or by the idle timeout.
func TestManyHostsLeaveNoPool(t *testing.T) {
	n := 100_000
	if raceEnabled || testing.Short() {
		n = 5_000
	}
	verifyNoLeaks(t)
	srv := &memServer{handle: memServeSerial(nil)}
	tr := newTestTransport(t, TransportOptions{DialContext: srv.dial, MaxIdleConnsPerHost: -1})
	for i := range n {
		resp, err := get(t, tr, fmt.Sprintf("http://h%d.test/x", i))
		if err != nil {
			t.Fatal(err)
		}
		readBody(t, resp)
	}
	waitFor(t, "no pool left", func() bool { return len(tr.Stats()) == 0 })
}

func TestIdleTimeoutRemovesPools(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &memServer{handle: memServeSerial(nil)}
		tr := NewTransport(TransportOptions{DialContext: srv.dial}) // default idle timeout
		defer tr.Close()
		for i := range 100 {
			if got := <-memGet(tr, fmt.Sprintf("http://h%d.test/x", i)); got != "/x" {
				t.Fatalf("GET = %q", got)
			}
		}
		if n := len(tr.Stats()); n != 100 {
			t.Fatalf("pools = %d, want 100", n)
		}
		time.Sleep(DefaultIdleConnTimeout)
		synctest.Wait()
		if n := len(tr.Stats()); n != 0 {
			t.Errorf("pools = %d after the idle timeout, want 0", n)
		}
	})
}

// TestPoolLearnsFromPlace: what the pool learns from a response head (the
// per-connection budget from a server's close, the end announced by a
// Keep-Alive max) counts from the response's place on its connection, not
// from the responses it has counted served: after a direct read the turn
// passes on before responseDone, so the next head may be reported first
// (design.md, "Direct reads"). Each row reports the head at place 3 (or 2)
// with served one short, as that order does, and once in order.
func TestPoolLearnsFromPlace(t *testing.T) {
	countdown := &h1.KeepAlive{Max: 98, HasMax: true} // Apache: 98 more after this one
	tests := []struct {
		name          string
		served, place int
		assigned      int
		closing       bool
		ka            *h1.KeepAlive
		firstMax      int // sched.kaFirstMax before (0: no Keep-Alive max seen yet)
		wantBudget    int
		wantKALimit   int
	}{
		{name: "close at 3, 2 not counted yet", served: 1, place: 3, assigned: 8, closing: true, wantBudget: 3},
		{name: "close at 3, in order", served: 2, place: 3, assigned: 8, closing: true, wantBudget: 3},
		{name: "close at the last assigned", served: 1, place: 3, assigned: 3, closing: true, wantBudget: 0},
		{name: "max counts down, 1 not counted yet", served: 0, place: 2, assigned: 2, ka: countdown, firstMax: 100, wantKALimit: 100},
		{name: "max counts down, in order", served: 1, place: 2, assigned: 2, ka: countdown, firstMax: 100, wantKALimit: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTransport(TransportOptions{PipelineDepth: 8})
			defer tr.Close()
			p := newHostPool(tr, poolKey{})
			p.model.Budget().CloseAt = tt.place // the connection before closed at the same count
			c := &pconn{t: tr}
			c.s.served, c.s.assigned, c.s.inflight = tt.served, tt.assigned, tt.assigned-tt.served
			c.s.kaFirstMax = tt.firstMax
			a := &attempt{r: &request{pipelineable: true}, attemptRead: attemptRead{place: tt.place, ka: tt.ka}}
			p.mu.Lock()
			p.gotHeadersLocked(c, a, tt.closing)
			budget, kaLimit := p.model.Budget().N, c.s.kaLimit
			p.mu.Unlock()
			if budget != tt.wantBudget {
				t.Errorf("budget = %d, want %d", budget, tt.wantBudget)
			}
			if kaLimit != tt.wantKALimit {
				t.Errorf("Keep-Alive limit = %d, want %d", kaLimit, tt.wantKALimit)
			}
		})
	}
}

// TestPoolStreamingMarkOwnResponse: a response done clears its
// connection's streaming mark only if it was the stream: the reader may
// already stream the next answer when a direct read's responseDone comes.
func TestPoolStreamingMarkOwnResponse(t *testing.T) {
	for _, streamed := range []bool{false, true} {
		tr := NewTransport(TransportOptions{PipelineDepth: 8})
		p := newHostPool(tr, poolKey{})
		c := &pconn{t: tr}
		c.s.assigned, c.s.inflight, c.s.active = 2, 2, true
		p.streaming(c, &attempt{}) // a body on c became a stream: a's, or the next answer's
		a := &attempt{r: &request{pipelineable: true}, attemptRead: attemptRead{place: 1}, attemptStream: attemptStream{streamed: streamed}}
		p.responseDone(c, a, false, true, false)
		p.mu.Lock()
		got := c.s.streaming
		p.mu.Unlock()
		if want := !streamed; got != want {
			t.Errorf("first answer done, streamed %v: streaming = %v, want %v", streamed, got, want)
		}
		tr.Close()
	}
}

// TestLargeAnswersLowerDepth: a host whose answers are large gets a
// shallower pipeline (bytesDepth), from the lengths of its answers
// (declared, or those of chunked bodies read whole), and its configured
// depth back once they are small again.
func TestLargeAnswersLowerDepth(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			verifyNoLeaks(t)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, _ := strconv.Atoi(r.URL.Query().Get("n"))
				if !chunked {
					w.Header().Set("Content-Length", strconv.Itoa(n))
				} else {
					w.(http.Flusher).Flush() // chunked, whatever the size
				}
				w.Write(make([]byte, n))
			}))
			defer srv.Close()
			tr := newTestTransport(t, TransportOptions{PipelineDepth: 10})
			key := srv.URL
			depthAfter := func(n, times int) int {
				t.Helper()
				for range times {
					resp, err := get(t, tr, fmt.Sprintf("%s/?n=%d", srv.URL, n))
					if err != nil {
						t.Fatal(err)
					}
					if got := len(resp.TransferEncoding) > 0; got != chunked {
						t.Fatalf("chunked answer: %v, want %v", got, chunked)
					}
					readBody(t, resp)
				}
				return tr.Stats()[key].PipelineDepth
			}
			if got := depthAfter(128, 3); got != 10 {
				t.Errorf("depth after 128 B answers = %d, want 10", got)
			}
			if got := depthAfter(256<<10, 20); got != 2 {
				t.Errorf("depth after 256 KiB answers = %d, want 2", got)
			}
			if got := depthAfter(128, 2*model.Memory); got != 10 {
				t.Errorf("depth after small answers again = %d, want 10", got)
			}
		})
	}
}

// TestLargeAnswersOnTheWire: once a host's answers are known to be large,
// a connection never carries more requests than bytesDepth allows, as the
// server sees them: requests received and not yet answered.
func TestLargeAnswersOnTheWire(t *testing.T) {
	verifyNoLeaks(t)
	const size = 256 << 10
	var worst atomic.Int64 // most requests received and not yet answered
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		var received, answered atomic.Int64
		reqs := make(chan struct{}, 64)
		go func() {
			defer close(reqs)
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				// answered counts an answer before its first byte is
				// written: the client cannot have read it yet.
				out := received.Add(1) - answered.Load()
				for w := worst.Load(); out > w && !worst.CompareAndSwap(w, out); w = worst.Load() {
				}
				reqs <- struct{}{}
			}
		}()
		body := make([]byte, size)
		for range reqs {
			answered.Add(1)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
			if _, err := c.Write(body); err != nil {
				return
			}
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 10})
	mustGet(t, tr, srv.url("/99")) // the host's answers are large, and the route known
	worst.Store(0)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mustGet(t, tr, srv.url(fmt.Sprintf("/%d", i)))
		}()
	}
	wg.Wait()
	// pipelineBytes (512 KiB) holds two 256 KiB answers.
	if got := worst.Load(); got != 2 {
		t.Errorf("at most %d requests outstanding on the connection, want 2", got)
	}
}

// A budget learned from unannounced closes holds for model.VerdictFor, then
// is forgotten at the next assignment (and learned again if the server
// still closes); an announced one holds until a connection serves it
// without a close.
func TestQuietBudgetExpires(t *testing.T) {
	tests := []struct {
		name        string
		until       time.Duration // the budget's until from now; 0: announced
		wantRetired bool
		wantBudget  int
	}{
		{"announced", 0, true, 3},
		{"quiet, in force", time.Minute, true, 3},
		{"quiet, expired", -time.Second, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTransport(TransportOptions{PipelineDepth: 8})
			defer tr.Close()
			p := newHostPool(tr, poolKey{})
			p.model.Budget().N, p.model.Budget().Quiet = 3, 3
			if tt.until != 0 {
				p.model.Budget().Until = time.Now().Add(tt.until)
			}
			c := &pconn{t: tr}
			c.s.served, c.s.assigned = 2, 2
			a := &attempt{r: &request{pipelineable: true}}
			p.mu.Lock()
			p.assignLocked(c, a)
			retired, budget := c.s.retired, p.model.Budget().N
			p.mu.Unlock()
			if retired != tt.wantRetired || budget != tt.wantBudget {
				t.Errorf("after the third assignment: retired %v, budget %d; want %v, %d", retired, budget, tt.wantRetired, tt.wantBudget)
			}
		})
	}
}

// TestQuietCountDisproved: a connection that answers more than a count at
// which others closed without notice disproves it: a server that keeps a
// budget closes every connection at it. A candidate count (seen once) is
// forgotten; a budget learned from such closes too, and none is learned
// from them for model.VerdictFor after (a faulty network's resets: the
// closes come at random counts, TestFaultyNetworkDials). An announced
// budget has its own evidence and stays.
func TestQuietCountDisproved(t *testing.T) {
	tests := []struct {
		name              string
		quietClose        int
		budget            int
		quiet             bool // the budget was learned from unannounced closes
		served            int  // the connection's answers, the one done included
		wantQuietClose    int
		wantBudget        int
		wantLearnsAtCount int // a budget learned from two closes at 1 afterwards (0: none)
	}{
		{name: "candidate passed", quietClose: 1, served: 2, wantQuietClose: 0, wantLearnsAtCount: 1},
		{name: "candidate reached", quietClose: 2, served: 2, wantQuietClose: 2, wantLearnsAtCount: 1},
		{name: "quiet budget passed", quietClose: 1, budget: 1, quiet: true, served: 2, wantQuietClose: 0, wantBudget: 0},
		{name: "quiet budget reached", quietClose: 2, budget: 2, quiet: true, served: 2, wantQuietClose: 2, wantBudget: 2, wantLearnsAtCount: 1},
		{name: "announced budget passed", budget: 3, served: 4, wantBudget: 3, wantLearnsAtCount: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTransport(TransportOptions{PipelineDepth: 8})
			defer tr.Close()
			p := newHostPool(tr, poolKey{})
			p.model.Budget().Quiet, p.model.Budget().N = tt.quietClose, tt.budget
			if tt.quiet {
				p.model.Budget().Until = time.Now().Add(model.VerdictFor)
			}
			c := &pconn{t: tr}
			c.s.served, c.s.assigned, c.s.inflight = tt.served-1, tt.served+1, 2
			p.conns = append(p.conns, c)
			p.responseDone(c, &attempt{r: &request{pipelineable: true}}, false, false, false)
			p.mu.Lock()
			quietClose, budget := p.model.Budget().Quiet, p.model.Budget().N
			p.mu.Unlock()
			if quietClose != tt.wantQuietClose || budget != tt.wantBudget {
				t.Errorf("after answer %d: quietClose %d, budget %d; want %d, %d", tt.served, quietClose, budget, tt.wantQuietClose, tt.wantBudget)
			}
			// Then two connections close right after their first answer,
			// with a request written on them.
			for range 2 {
				d := &pconn{t: tr}
				d.s.idleSince = time.Now()
				p.ended(d, io.EOF, 1, 1, true, false, false)
			}
			p.mu.Lock()
			learned := 0
			if !p.model.Budget().Until.IsZero() {
				learned = p.model.Budget().N
			}
			p.mu.Unlock()
			if learned != tt.wantLearnsAtCount {
				t.Errorf("budget learned from two closes at 1 afterwards: %d, want %d", learned, tt.wantLearnsAtCount)
			}
		})
	}
}

// When a host's last connection goes (an idle timeout), a pool kept for
// what it learned waits for the next burst's first answer as a new pool
// does (model.FirstResponseWait): a burst of slow requests is not pipelined at
// once as to a host known fast.
func TestPoolLastConnGoneAwaitsAnswer(t *testing.T) {
	for _, conns := range []int{1, 2} {
		tr := NewTransport(TransportOptions{PipelineDepth: 8})
		p := newHostPool(tr, poolKey{})
		for range conns {
			p.conns = append(p.conns, &pconn{t: tr})
		}
		p.answered, p.graceEnd = true, time.Now().Add(-time.Minute)
		p.removed(p.conns[0])
		p.mu.Lock()
		got, want := p.awaitsAnswerLocked(), conns == 1
		p.mu.Unlock()
		if got != want {
			t.Errorf("%d connections, one removed: awaits an answer %v, want %v", conns, got, want)
		}
		tr.Close()
	}
}
