package pipelined

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// This file holds a scriptable fault-injecting HTTP/1.1 server built on a
// raw net.Listener, and property tests of the Transport against it.

// fault is what the fault server does with one request.
type fault int

const (
	faultNone       fault = iota // answer normally
	faultCloseQuiet              // close without answering (this and what follows)
	faultReset                   // send the head and part of the body, then RST (SetLinger(0))
	faultConnClose               // answer with "Connection: close", then close
	faultStall                   // wait a little, then answer normally
	faultGarbage                 // send bytes that are not a response, then close
	faultLongBody                // send more body bytes than Content-Length, then go on
	faultShortBody               // send fewer body bytes than Content-Length, then close
	faultExtra                   // answer, then send an unsolicited extra response
	numFaults
)

var faultNames = [...]string{"none", "close-quiet", "reset", "conn-close", "stall", "garbage", "long-body", "short-body", "extra"}

func (f fault) String() string { return faultNames[f] }

// faultServer answers pipelined requests in order on each connection. Each
// request carries its identity in its path (/get/<id> or /post/<id>); a
// normal answer's body is the id. Every POST id the server reads in full is
// counted. What it does with each request is chosen by script.
type faultServer struct {
	*rawServer
	t     *testing.T
	stall time.Duration // how long faultStall waits

	// script chooses the fault for the reqN-th request (from 0) on the
	// connN-th connection (from 0). It is called from the connections'
	// goroutines and must be safe for concurrent use.
	script func(connN, reqN int, req *http.Request) fault

	reqs atomic.Int64 // requests read

	mu     sync.Mutex // guards posts and faults
	posts  map[string]int
	faults [numFaults]int
}

func newFaultServer(t *testing.T, script func(connN, reqN int, req *http.Request) fault) *faultServer {
	t.Helper()
	s := &faultServer{t: t, stall: 20 * time.Millisecond, script: script, posts: make(map[string]int)}
	s.rawServer = startRawServer(t, s.serve)
	return s
}

// randomFaults returns a script that answers normally with probability
// 1-p and otherwise picks one of faults, from a generator with a fixed seed.
func randomFaults(seed uint64, p float64, faults ...fault) func(int, int, *http.Request) fault {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func(int, int, *http.Request) fault {
		mu.Lock()
		defer mu.Unlock()
		if rng.Float64() >= p {
			return faultNone
		}
		return faults[rng.IntN(len(faults))]
	}
}

// postCounts returns a copy of the POST ids received and how many times.
func (s *faultServer) postCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.posts))
	for k, v := range s.posts {
		m[k] = v
	}
	return m
}

func (s *faultServer) serve(connN int, c net.Conn) {
	br := bufio.NewReader(c)
	bw := bufio.NewWriter(c)
	for reqN := 0; ; reqN++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, err = io.Copy(io.Discard, req.Body)
		req.Body.Close()
		if err != nil {
			return
		}
		s.reqs.Add(1)
		id := strings.TrimPrefix(strings.TrimPrefix(req.URL.Path, "/get/"), "/post/")
		f := s.script(connN, reqN, req)
		s.mu.Lock()
		if req.Method == http.MethodPost {
			s.posts[id]++
		}
		s.faults[f]++
		s.mu.Unlock()
		// Flush what was answered before when the client has nothing more
		// buffered for us, as a server reading one request at a time does.
		head := func(cl int, extra string) {
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Id: %s\r\n%s\r\n", cl, id, extra)
		}
		switch f {
		case faultNone, faultStall:
			if f == faultStall {
				bw.Flush()
				time.Sleep(s.stall)
			}
			head(len(id), "")
			bw.WriteString(id)
		case faultCloseQuiet:
			bw.Flush()
			return
		case faultReset:
			head(len(id)+100, "")
			bw.WriteString(id)
			bw.Flush()
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			return
		case faultConnClose:
			head(len(id), "Connection: close\r\n")
			bw.WriteString(id)
			bw.Flush()
			return
		case faultGarbage:
			bw.WriteString("HTTP/1.1 2x0 nonsense\r\n\r\n")
			bw.Flush()
			return
		case faultLongBody:
			head(len(id), "")
			bw.WriteString(id)
			bw.WriteString("JUNK-AFTER-BODY")
		case faultShortBody:
			head(len(id)+10, "")
			bw.WriteString(id)
			bw.Flush()
			return
		case faultExtra:
			head(len(id), "")
			bw.WriteString(id)
			bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Id: extra\r\n\r\nextra")
		}
		if br.Buffered() == 0 {
			if bw.Flush() != nil {
				return
			}
		}
	}
}

// acceptableError reports whether err is an outcome the fault model allows
// for an idempotent request: a clear, typed error.
func acceptableError(err error) bool {
	var ce *ConnError
	return errors.As(err, &ce) || errors.Is(err, ErrFraming) || errors.Is(err, ErrServerClosed)
}

// runFaultLoad sends n mixed GETs and POSTs through tr to s with conc
// concurrent callers and checks the properties of the fault model: a GET
// or POST that succeeds gets its own body (and X-Id), a failure is a clear
// error, no POST reaches the server twice. It returns the number of failed
// GETs and POSTs.
func runFaultLoad(t *testing.T, tr *Transport, s *faultServer, n, conc int, postEvery int) (getErrs, postErrs int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var gErr, pErr atomic.Int64
	var wg sync.WaitGroup
	var next atomic.Int64
	errc := make(chan error, 32)
	report := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				id := strconv.Itoa(i)
				var req *http.Request
				post := postEvery > 0 && i%postEvery == postEvery-1
				if post {
					req, _ = http.NewRequestWithContext(ctx, http.MethodPost, s.url("/post/"+id), strings.NewReader("payload-"+id))
				} else {
					req, _ = http.NewRequestWithContext(ctx, http.MethodGet, s.url("/get/"+id), nil)
				}
				resp, err := tr.RoundTrip(req)
				if err != nil {
					if post {
						pErr.Add(1)
					} else {
						gErr.Add(1)
					}
					if !acceptableError(err) {
						report(fmt.Errorf("%s %s: unexpected error %T: %v", req.Method, id, err, err))
					}
					continue
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					// A body cut short is reported as an error of its own read.
					if post {
						pErr.Add(1)
					} else {
						gErr.Add(1)
					}
					continue
				}
				if string(body) != id || resp.Header.Get("X-Id") != id {
					report(fmt.Errorf("%s %s got body %q X-Id %q: a response for another request",
						req.Method, id, body, resp.Header.Get("X-Id")))
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("load did not finish within its bound")
	}
	for id, k := range s.postCounts() {
		if k > 1 {
			t.Errorf("POST %s reached the server %d times, want at most 1", id, k)
		}
	}
	return int(gErr.Load()), int(pErr.Load())
}

// TestFaultPropertiesRandom runs thousands of mixed requests against a
// server that injects faults at random (fixed seed), and checks the fault
// model's properties: no response goes to the wrong caller, no POST is
// sent twice, failures are clear errors, nothing leaks after Close. The
// second row hedges late heads (HedgeHeadOfLine, with a head-of-line
// timeout below the stall), with faults that do not make the host fall
// back to depth 1, so that copies race their originals amid closes.
func TestFaultPropertiesRandom(t *testing.T) {
	// faultExtra is left out: an unsolicited response that arrives while
	// requests are in flight is indistinguishable from the next request's
	// answer (HTTP/1.1 carries no request ids); it is only detectable on
	// an idle connection, which TestHostileFraming covers.
	tests := []struct {
		name   string
		rate   float64
		faults []fault
		hedge  bool
	}{
		{"every fault", 0.08, []fault{faultCloseQuiet, faultReset, faultConnClose, faultStall, faultGarbage, faultLongBody, faultShortBody}, false},
		{"stalls and closes, hedged", 0.04, []fault{faultStall, faultConnClose}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			s := newFaultServer(t, randomFaults(1, tt.rate, tt.faults...))
			var hedges atomic.Int32
			o := TransportOptions{MaxConnsPerHost: 4, PipelineDepth: 4}
			if tt.hedge {
				o.HedgeHeadOfLine, o.HeadOfLineTimeout = true, 5*time.Millisecond
				o.Observer = &Observer{RequestQueued: func(ev RequestEvent) {
					if ev.Resend == ResendHedge {
						hedges.Add(1)
					}
				}}
			}
			tr := NewTransport(o)
			n := 3000
			if testing.Short() {
				n = 600
			}
			gErr, pErr := runFaultLoad(t, tr, s, n, 32, 10)
			tr.Close()
			s.mu.Lock()
			faults := s.faults
			s.mu.Unlock()
			t.Logf("%d requests, %d connections, faults %v; failed GETs %d, failed POSTs %d; %d copies of late heads",
				s.reqs.Load(), s.conns.Load(), faults, gErr, pErr, hedges.Load())
			// Each fault can cost at most a few idempotent requests their
			// retry budget; most GETs must succeed.
			if gets := n - n/10; gErr > gets/5 {
				t.Errorf("%d of %d GETs failed, want at most %d", gErr, gets, gets/5)
			}
			if tt.hedge && hedges.Load() == 0 {
				t.Error("no late head was copied: the row tests nothing")
			}
		})
	}
}

// TestFaultScripted checks each fault alone, scripted on the second
// request of every connection, with a pipelined load.
func TestFaultScripted(t *testing.T) {
	for f := faultCloseQuiet; f < numFaults; f++ {
		if f == faultExtra {
			continue // see TestFaultPropertiesRandom
		}
		t.Run(f.String(), func(t *testing.T) {
			verifyNoLeaks(t)
			s := newFaultServer(t, func(connN, reqN int, _ *http.Request) fault {
				if reqN == 1 && connN%2 == 0 {
					return f
				}
				return faultNone
			})
			tr := NewTransport(TransportOptions{MaxConnsPerHost: 3, PipelineDepth: 3})
			gErr, pErr := runFaultLoad(t, tr, s, 300, 12, 7)
			tr.Close()
			t.Logf("%d requests, %d connections; failed GETs %d, failed POSTs %d", s.reqs.Load(), s.conns.Load(), gErr, pErr)
		})
	}
}

// TestFaultCloseAfterN: a server that closes every connection after N
// requests without answering the N+1-th (like keepalive_requests, without
// the courtesy of "Connection: close"). Idle connections that served N
// requests look healthy until a request is written to them, so a retried
// request may fail again; nearly every GET must still succeed.
func TestFaultCloseAfterN(t *testing.T) {
	verifyNoLeaks(t)
	s := newFaultServer(t, func(_, reqN int, _ *http.Request) fault {
		if reqN >= 3 {
			return faultCloseQuiet
		}
		return faultNone
	})
	tr := NewTransport(TransportOptions{MaxConnsPerHost: 4, PipelineDepth: 4})
	gErr, _ := runFaultLoad(t, tr, s, 500, 32, 0)
	tr.Close()
	if gErr > 10 {
		t.Errorf("%d of 500 GETs failed against a server closing after 3 requests, want at most 10", gErr)
	}
}

// countingDialer counts the bytes the transport reads from its connections.
type countingDialer struct{ read atomic.Int64 }

type countingReadConn struct {
	net.Conn
	d *countingDialer
}

func (c *countingReadConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.d.read.Add(int64(n))
	return n, err
}

func (d *countingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingReadConn{Conn: c, d: d}, nil
}

// TestReadAheadBound checks the memory bound of the package doc: with
// callers holding responses without reading them, the transport reads at
// most MaxConnsPerHost × PipelineDepth × 256 KiB (maxBufferedBody) of
// bodies ahead, plus its read buffers, however large the responses are:
// the small responses are buffered whole (just under maxBufferedBody), the
// large ones (4 MiB) stream.
func TestReadAheadBound(t *testing.T) {
	verifyNoLeaks(t)
	const maxConns, depth = 2, 4
	big := strings.Repeat("x", 4<<20)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body := big[:maxBufferedBody-4<<10]
			if strings.HasPrefix(req.URL.Path, "/big") {
				body = big
			}
			if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
				return
			}
		}
	})

	var d countingDialer
	tr := NewTransport(TransportOptions{MaxConnsPerHost: maxConns, PipelineDepth: depth, DialContext: d.dial})
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Callers hold maxConns × depth responses at once, half of them large,
	// without reading them.
	var resps []*http.Response
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range maxConns * depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := fmt.Sprintf("/small/%d", i)
			if i%2 == 0 {
				path = fmt.Sprintf("/big/%d", i)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.url(path), nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Errorf("GET %s: %v", path, err)
				return
			}
			mu.Lock()
			resps = append(resps, resp)
			mu.Unlock()
		}()
	}
	// Large responses hold their connections, so not every caller gets an
	// answer while the large bodies are unread: wait until the transport
	// stops reading, then check what it read.
	var last int64 = -1
	for i := 0; i < 1000; i++ {
		time.Sleep(20 * time.Millisecond)
		cur := d.read.Load()
		if cur == last {
			break
		}
		last = cur
	}
	bound := int64(maxConns*depth*maxBufferedBody + maxConns*(defaultBufferSize+4096))
	if got := d.read.Load(); got > bound {
		t.Errorf("transport read %d bytes ahead of its callers, want at most %d", got, bound)
	} else {
		t.Logf("transport read %d bytes ahead of its callers (bound %d)", got, bound)
	}
	// Now read everything, so that every caller completes.
	done := make(chan struct{})
	go func() {
		for {
			mu.Lock()
			rs := resps
			resps = nil
			mu.Unlock()
			for _, r := range rs {
				io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	wg.Wait()
	close(done)
	mu.Lock()
	for _, r := range resps {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	mu.Unlock()
	tr.Close()
}

// TestHeadOfLineResend: requests pipelined behind a head whose response
// stalls are re-sent on another connection after HeadOfLineTimeout, and
// complete while the head is still stalled; the late answers on the stalled
// connection are read and discarded, and that connection stays usable.
func TestHeadOfLineResend(t *testing.T) {
	verifyNoLeaks(t)
	releaseA := make(chan struct{})
	releaseB := make(chan struct{})
	s := newFaultServer(t, func(_, _ int, req *http.Request) fault {
		switch {
		case strings.HasSuffix(req.URL.Path, "/slowA"):
			<-releaseA
		case strings.HasSuffix(req.URL.Path, "/slowB"):
			<-releaseB
		}
		return faultNone
	})
	defer func() {
		// Never leave the server blocked, whatever happened.
		select {
		case <-releaseA:
		default:
			close(releaseA)
		}
		select {
		case <-releaseB:
		default:
			close(releaseB)
		}
	}()
	tr := NewTransport(TransportOptions{MaxConnsPerHost: 2, PipelineDepth: 4, HeadOfLineTimeout: 50 * time.Millisecond})
	tr.opts.FixedPolicy = true // pipelined behind the stalled heads before any answer
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	get := func(path string) (string, error) { return getBody(ctx, tr, s.url(path)) }
	type res struct {
		path, body string
		err        error
	}
	results := make(chan res, 16)
	start := func(path string) {
		go func() {
			b, err := get(path)
			results <- res{path, b, err}
		}()
	}
	// Two stalled heads, one per connection.
	start("/get/slowA")
	waitFor(t, "1 request at the server", func() bool { return s.reqs.Load() == 1 })
	start("/get/slowB")
	waitFor(t, "2 requests at the server", func() bool { return s.reqs.Load() == 2 })
	// Pipelined behind them: least-inflight spreads them over both.
	const n = 6
	for i := range n {
		start(fmt.Sprintf("/get/f%d", i))
	}
	waitFor(t, "InFlight >= 2+n", func() bool { return tr.Stats()["http://"+s.addr].InFlight >= 2+n })
	// B answers; whatever is stuck behind A is re-sent (to B's connection)
	// after HeadOfLineTimeout and must complete while A is still stalled.
	close(releaseB)
	for range n + 1 {
		select {
		case r := <-results:
			want := strings.TrimPrefix(r.path, "/get/")
			if r.err != nil || r.body != want {
				t.Errorf("GET %s = %q, %v, want %q", r.path, r.body, r.err, want)
			}
		case <-ctx.Done():
			t.Fatal("requests behind a stalled head did not complete: no head-of-line protection")
		}
	}
	close(releaseA)
	if r := <-results; r.err != nil || r.body != "slowA" {
		t.Errorf("GET /get/slowA = %q, %v, want %q", r.body, r.err, "slowA")
	}
	// Both connections remain usable: the late answers were discarded.
	for i := range 8 {
		path := fmt.Sprintf("/get/after%d", i)
		if b, err := get(path); err != nil || b != fmt.Sprintf("after%d", i) {
			t.Errorf("GET %s = %q, %v", path, b, err)
		}
	}
	if got := s.conns.Load(); got != 2 {
		t.Errorf("server saw %d connections, want 2 (the stalled one kept)", got)
	}
	tr.Close()
}

// TestHedgeHeadOfLine: with HedgeHeadOfLine, a safe head found late is
// also sent on another connection, and the first answer wins. When the
// copy's does, the head's connection is closed (nothing else waits on
// it); when the head's does, the copy's answer is discarded and the
// connection kept. Without the option, or without budget, no copy is sent.
func TestHedgeHeadOfLine(t *testing.T) {
	tests := []struct {
		name       string
		hedge      bool
		warm       int  // requests placed first: each earns 2% of a copy (and of a re-send)
		copyStalls bool // the copy is answered only after the original
		wantCopy   bool // a copy reaches the server
		wantClosed bool // the head's connection is closed
		// pipelined: the head is written behind another request, so that
		// the connection's reader goroutine reads its answer; otherwise
		// its caller does (a direct read, conn_direct.go).
		pipelined bool
	}{
		{name: "copy wins", hedge: true, warm: 60, wantCopy: true, wantClosed: true},
		{name: "copy wins, pipelined head", hedge: true, warm: 60, pipelined: true, wantCopy: true, wantClosed: true},
		{name: "original wins", hedge: true, warm: 60, copyStalls: true, wantCopy: true},
		{name: "off", hedge: false, warm: 60},
		{name: "no budget", hedge: true, warm: 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			releaseOrig, releaseCopy, releaseP := make(chan struct{}), make(chan struct{}), make(chan struct{})
			var slowSeen atomic.Int32
			s := newFaultServer(t, func(_, _ int, req *http.Request) fault {
				if strings.HasSuffix(req.URL.Path, "/p") {
					<-releaseP
				}
				if strings.HasSuffix(req.URL.Path, "/slow") {
					if slowSeen.Add(1) == 1 {
						<-releaseOrig
					} else if tt.copyStalls {
						<-releaseCopy
					}
				}
				return faultNone
			})
			var once1, once2, once3 sync.Once
			unblockOrig := func() { once1.Do(func() { close(releaseOrig) }) }
			unblockCopy := func() { once2.Do(func() { close(releaseCopy) }) }
			unblockP := func() { once3.Do(func() { close(releaseP) }) }
			defer unblockP()
			defer unblockCopy()
			defer unblockOrig()
			var hedges atomic.Int32
			var slowDone atomic.Value // the RequestDone of /get/slow
			tr := NewTransport(TransportOptions{
				MaxConnsPerHost: 3, PipelineConnsPerHost: 1, PipelineDepth: 4,
				HeadOfLineTimeout: 50 * time.Millisecond, HedgeHeadOfLine: tt.hedge,
				Observer: &Observer{
					RequestQueued: func(ev RequestEvent) {
						if ev.Resend == ResendHedge {
							hedges.Add(1)
						}
					},
					RequestDone: func(ev RequestEvent) {
						if strings.HasSuffix(ev.Request.URL.Path, "/slow") {
							slowDone.Store(ev)
						}
					},
				},
			})
			tr.opts.FixedPolicy = true // x is pipelined behind the stalled head, not dialed
			defer tr.Close()
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			get := func(path string) (string, error) { return getBody(ctx, tr, s.url(path)) }
			for i := range tt.warm {
				if _, err := get(fmt.Sprintf("/get/w%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			type res struct {
				body string
				err  error
			}
			slow, behind, first := make(chan res, 1), make(chan res, 1), make(chan res, 1)
			host := "http://" + s.addr
			if tt.pipelined {
				go func() { b, err := get("/get/p"); first <- res{b, err} }()
				waitFor(t, "/get/p at the server", func() bool { return s.reqs.Load() == int64(tt.warm+1) })
			}
			go func() { b, err := get("/get/slow"); slow <- res{b, err} }()
			if tt.pipelined {
				waitFor(t, "/get/slow behind /get/p", func() bool { return tr.Stats()[host].InFlight == 2 })
				unblockP()
				if r := <-first; r.err != nil || r.body != "p" {
					t.Fatalf("GET /get/p = %q, %v", r.body, r.err)
				}
			}
			waitFor(t, "the head at the server", func() bool { return slowSeen.Load() == 1 })
			go func() { b, err := get("/get/x"); behind <- res{b, err} }()
			// x waits behind the stalled head, then moves.
			if r := <-behind; r.err != nil || r.body != "x" {
				t.Fatalf("GET /get/x = %q, %v", r.body, r.err)
			}
			if tt.wantCopy {
				waitFor(t, "the copy at the server", func() bool { return slowSeen.Load() == 2 })
			}
			if !tt.wantCopy || tt.copyStalls {
				time.Sleep(20 * time.Millisecond) // no answer may come before the head's
				select {
				case r := <-slow:
					t.Fatalf("GET /get/slow answered before its original: %q, %v", r.body, r.err)
				default:
				}
				unblockOrig()
			}
			if r := <-slow; r.err != nil || r.body != "slow" {
				t.Fatalf("GET /get/slow = %q, %v", r.body, r.err)
			}
			unblockCopy()
			if got, want := slowSeen.Load(), map[bool]int32{false: 1, true: 2}[tt.wantCopy]; got != want {
				t.Errorf("the server got /get/slow %d times, want %d", got, want)
			}
			if got, want := hedges.Load(), map[bool]int32{false: 0, true: 1}[tt.wantCopy]; got != want {
				t.Errorf("%d attempts with ResendHedge, want %d", got, want)
			}
			// RequestDone reports the attempt whose answer the caller got.
			wantDone := RequestEvent{Attempt: 1, Resend: ResendNone}
			if tt.wantClosed {
				wantDone = RequestEvent{Attempt: 2, Resend: ResendHedge}
			}
			if ev, _ := slowDone.Load().(RequestEvent); ev.Attempt != wantDone.Attempt || ev.Resend != wantDone.Resend || ev.Status != 200 {
				t.Errorf("RequestDone of /get/slow: Attempt %d, Resend %v, Status %d; want %d, %v, 200",
					ev.Attempt, ev.Resend, ev.Status, wantDone.Attempt, wantDone.Resend)
			}
			// The copy, x and the head each had a connection (x and the
			// copy are never written behind the head, nor x behind the
			// copy); the head's is closed if the copy won.
			// The server's count is read each time: it may count a
			// connection accepted after the answers came (1 run in about
			// 100 before).
			closed := 0
			if tt.wantClosed {
				closed = 1
			}
			waitFor(t, "Open == the connections the server accepted, less the head's if closed", func() bool {
				st := tr.Stats()[host]
				return st.Open == int(s.conns.Load())-closed && st.InFlight == 0
			})
			// The pool serves on.
			for i := range 4 {
				if b, err := get(fmt.Sprintf("/get/after%d", i)); err != nil || b != fmt.Sprintf("after%d", i) {
					t.Errorf("GET /get/after%d = %q, %v", i, b, err)
				}
			}
		})
	}
}

// TestHeadOfLineDisabled: with a negative HeadOfLineTimeout nothing is
// re-sent, however long the head stalls.
func TestHeadOfLineDisabled(t *testing.T) {
	release := make(chan struct{})
	gotSlow := make(chan struct{})
	s := newFaultServer(t, func(_, _ int, req *http.Request) fault {
		if strings.HasSuffix(req.URL.Path, "/slow") {
			close(gotSlow)
			<-release
		}
		return faultNone
	})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock()
	tr := NewTransport(TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 4, HeadOfLineTimeout: -1})
	tr.opts.FixedPolicy = true // pipelined behind the stalled head before any answer
	defer tr.Close()
	var wg sync.WaitGroup
	for _, p := range []string{"/get/slow", "/get/x", "/get/y"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, s.url(p), nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Errorf("GET %s: %v", p, err)
				return
			}
			resp.Body.Close()
		}()
		if p == "/get/slow" {
			// The slow request heads the connection before the others
			// are sent: placed first is not written first.
			<-gotSlow
		}
	}
	waitFor(t, "InFlight == 3", func() bool { return tr.Stats()["http://"+s.addr].InFlight == 3 })
	if n := tr.Stats()["http://"+s.addr].Open; n != 1 {
		t.Errorf("Open = %d, want 1", n)
	}
	time.Sleep(20 * time.Millisecond) // a disabled timer must not fire anyway
	unblock()
	wg.Wait()
	if got := s.reqs.Load(); got != 3 {
		t.Errorf("server read %d requests, want 3 (nothing re-sent)", got)
	}
}

// TestPipelineFallback: a host whose connections are closed whenever
// requests are pipelined on them (a middlebox that cannot pipeline) falls
// back to depth 1, which Stats reports, and then serves every request.
func TestPipelineFallback(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			time.Sleep(time.Millisecond) // let pipelined bytes arrive
			if br.Buffered() > 0 {
				return // pipelined: drop the connection unanswered
			}
			p := req.URL.Path
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(p), p)
		}
	})
	tr := NewTransport(TransportOptions{MaxConnsPerHost: 2, PipelineDepth: 4})
	defer tr.Close()
	key := srv.url("")
	var wg sync.WaitGroup
	var errs atomic.Int64
	load := func(round, n int) {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				path := fmt.Sprintf("/r%d/%d", round, i)
				req, _ := http.NewRequest(http.MethodGet, srv.url(path), nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					errs.Add(1)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != path {
					t.Errorf("GET %s = %q", path, b)
				}
			}()
		}
		wg.Wait()
	}
	for round := 0; round < 20 && tr.Stats()[key].PipelineDepth != 1; round++ {
		load(round, 16)
	}
	if d := tr.Stats()[key].PipelineDepth; d != 1 {
		t.Fatalf("Stats().PipelineDepth = %d after repeated pipeline failures, want 1", d)
	}
	errs.Store(0)
	load(100, 32)
	if n := errs.Load(); n != 0 {
		t.Errorf("%d of 32 requests failed at depth 1, want 0", n)
	}
	tr.Close()
}

// faultyProxy is a TCP proxy to a backend that makes the network between
// them faulty, as toxiproxy's toxics do: every piece of data it passes on,
// in either direction, waits 0-20 ms and then goes out one byte per write,
// and a connection, with probability reset, is reset (an RST to the
// client) after a few bytes, 1 to 300, of what one side sends: the
// backend's answers, or with toServer the client's requests. It counts
// the connections it accepts.
type faultyProxy struct {
	ln       net.Listener
	addr     string
	conns    atomic.Int64
	reset    float64
	toServer bool
	wg       sync.WaitGroup
	mu       sync.Mutex
	open     map[net.Conn]struct{} // nil once closed
}

func newFaultyProxy(t *testing.T, backend string, reset float64, toServer bool, seed uint64) *faultyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultyProxy{ln: ln, addr: ln.Addr().String(), reset: reset, toServer: toServer, open: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := p.conns.Add(1)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.serve(c, backend, rand.New(rand.NewPCG(seed, uint64(n))))
			}()
		}
	}()
	t.Cleanup(p.close)
	return p
}

// track adds c to the open connections (on) or removes it; it reports
// false if the proxy is closed.
func (p *faultyProxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open == nil {
		return false
	}
	if on {
		p.open[c] = struct{}{}
	} else {
		delete(p.open, c)
	}
	return true
}

func (p *faultyProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.open {
		c.Close()
	}
	p.open = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *faultyProxy) serve(c net.Conn, backend string, rng *rand.Rand) {
	defer c.Close()
	if !p.track(c, true) {
		return
	}
	defer p.track(c, false)
	b, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer b.Close()
	if !p.track(b, true) {
		return
	}
	defer p.track(b, false)
	up, down := int64(-1), int64(-1)
	if rng.Float64() < p.reset {
		if p.toServer {
			up = 1 + rng.Int64N(300)
		} else {
			down = 1 + rng.Int64N(300)
		}
	}
	resetClient := func() {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
	upSeed, downSeed := rng.Uint64(), rng.Uint64()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if faultyPass(b, c, up, upSeed) {
			resetClient()
		}
		b.Close()
	}()
	if faultyPass(c, b, down, downSeed) {
		resetClient()
	}
	c.Close()
	wg.Wait()
}

// faultyPass copies src to dst a byte per write, each piece read from src
// delayed 0-20 ms. With limit >= 0, it stops after limit bytes and reports
// true.
func faultyPass(dst, src net.Conn, limit int64, seed uint64) bool {
	rng := rand.New(rand.NewPCG(seed, seed^1))
	buf := make([]byte, 4096)
	var n int64
	for {
		m, err := src.Read(buf)
		if m > 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
			for i := range m {
				if n == limit {
					return true
				}
				if _, err := dst.Write(buf[i : i+1]); err != nil {
					return false
				}
				n++
			}
		}
		if err != nil {
			return false
		}
	}
}

// TestFaultyNetworkDials: through a network that resets connections after
// a few bytes, splits writes into single bytes and delays them (a
// faultyProxy), the transport dials about as many connections as net/http
// does for the same mixed GETs and POSTs, whether the resets cut answers
// or requests. Such resets come at random counts of answers, often twice
// in a row at the same one, and were taken for a server that closes every
// connection after that many (quietClosed): a budget of 1 request per
// connection, a dial per request (some 400 dials where net/http made 21).
// The bound allows net/http's count twice over, and one connection per
// caller more: the connections retired when such a budget is learned
// before an answer disproves it.
func TestFaultyNetworkDials(t *testing.T) {
	verifyNoLeaks(t)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, r.URL.Path)
	}))
	defer backend.Close()
	const n, postEvery, conc = 330, 11, 16 // 300 GETs, 30 POSTs
	run := func(t *testing.T, rt http.RoundTripper, toServer bool) (dials int64) {
		proxy := newFaultyProxy(t, backend.Listener.Addr().String(), 0.3, toServer, 1)
		defer proxy.close()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= n || ctx.Err() != nil {
						return
					}
					path := "/" + strconv.Itoa(i)
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+proxy.addr+path, nil)
					if i%postEvery == 0 {
						req, _ = http.NewRequestWithContext(ctx, http.MethodPost, "http://"+proxy.addr+path, strings.NewReader("payload"))
					}
					resp, err := rt.RoundTrip(req)
					if err != nil {
						continue // the faults fail some requests, with either transport
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && string(body) != path {
						t.Errorf("%s %s: body %q", req.Method, path, body)
					}
				}
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			t.Fatal("load did not finish within its bound")
		}
		return proxy.conns.Load()
	}
	for _, toServer := range []bool{false, true} {
		t.Run(fmt.Sprintf("resets cut requests %v", toServer), func(t *testing.T) {
			ht := &http.Transport{MaxIdleConnsPerHost: conc} // no dials for its idle limit
			want := run(t, ht, toServer)
			ht.CloseIdleConnections()
			tr := NewTransport(TransportOptions{})
			got := run(t, tr, toServer)
			tr.Close()
			t.Logf("dials: net/http %d, pipelined %d", want, got)
			if got > 2*want+conc {
				t.Errorf("pipelined dialed %d connections, net/http %d: want at most %d", got, want, 2*want+conc)
			}
		})
	}
}
