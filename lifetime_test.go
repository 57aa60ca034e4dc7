package pipelined

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// This file tests MaxConnLifetime behind layer-4 load balancers, which
// place connections on their backends, not requests: an in-process one
// (l4Balancer) and HAProxy in mode tcp. Three backends grow to six under
// 40 callers; within 2.5 s of the change, with a lifetime of 1 s, the
// added backends get their share.

// l4Balancer is a TCP round-robin load balancer: it places each connection
// it accepts on its next backend in turn and copies bytes both ways, as a
// Kubernetes Service, a cloud network load balancer or HAProxy in mode tcp
// does.
type l4Balancer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	backends []string
	next     int
	conns    map[net.Conn]struct{}
	closed   bool
}

// startL4Balancer starts a balancer over backends, closed at the end of t.
func startL4Balancer(t *testing.T, backends ...string) *l4Balancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &l4Balancer{ln: ln, backends: backends, conns: make(map[net.Conn]struct{})}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(b.close)
	return b
}

func (b *l4Balancer) addr() string { return b.ln.Addr().String() }

// add makes backends take connections from now on.
func (b *l4Balancer) add(backends ...string) {
	b.mu.Lock()
	b.backends = append(b.backends, backends...)
	b.mu.Unlock()
}

func (b *l4Balancer) serve() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		to := b.backends[b.next%len(b.backends)]
		b.next++
		b.mu.Unlock()
		b.wg.Add(1)
		go b.relay(c, to)
	}
}

// track records c as open (false once the balancer is closed).
func (b *l4Balancer) track(c net.Conn, open bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !open {
		delete(b.conns, c)
		return true
	}
	if b.closed {
		return false
	}
	b.conns[c] = struct{}{}
	return true
}

// relay copies bytes between c and a new connection to backend; a side
// that ends its writes ends the other's (a half close), and the relay
// ends when both have.
func (b *l4Balancer) relay(c net.Conn, backend string) {
	defer b.wg.Done()
	defer c.Close()
	s, err := net.Dial("tcp", backend)
	if err != nil {
		return
	}
	defer s.Close()
	if !b.track(c, true) || !b.track(s, true) {
		return
	}
	defer b.track(c, false)
	defer b.track(s, false)
	done := make(chan struct{}, 2)
	copyHalf := func(dst, src net.Conn) {
		io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go copyHalf(s, c)
	go copyHalf(c, s)
	<-done
	<-done
}

func (b *l4Balancer) close() {
	b.ln.Close()
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// lbBackends are the backends behind a balancer: each answers
// /<kind>/<id> with the id after a millisecond, and counts the requests
// it answered; POSTs are counted by id.
type lbBackends struct {
	srvs   []*httptest.Server
	served []atomic.Int64
	mu     sync.Mutex
	posts  map[string]int
}

// newLBBackends starts n backends, over TLS with HTTP/2 (8 streams per
// connection, so that 40 callers need several) if h2 is set.
func newLBBackends(t *testing.T, n int, h2 bool) *lbBackends {
	b := &lbBackends{served: make([]atomic.Int64, n), posts: make(map[string]int)}
	for i := range n {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			_, id, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
			if r.Method == http.MethodPost {
				b.mu.Lock()
				b.posts[id]++
				b.mu.Unlock()
			}
			b.served[i].Add(1)
			time.Sleep(time.Millisecond)
			io.WriteString(w, id)
		}))
		if h2 {
			srv.EnableHTTP2 = true
			srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 8}
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
		b.srvs = append(b.srvs, srv)
	}
	return b
}

func (b *lbBackends) addr(i int) string { return b.srvs[i].Listener.Addr().String() }

func (b *lbBackends) counts() []int64 {
	out := make([]int64, len(b.served))
	for i := range b.served {
		out[i] = b.served[i].Load()
	}
	return out
}

// duplicatePOSTs returns the ids of the POSTs a backend ran more than once.
func (b *lbBackends) duplicatePOSTs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var dup []string
	for id, n := range b.posts {
		if n > 1 {
			dup = append(dup, id)
		}
	}
	return dup
}

// Bounds of a balancer load: 40 callers for lbWarm with three backends,
// then lbAfter with six, lbMaxRequests in all.
const (
	lbCallers     = 40
	lbWarm        = 1500 * time.Millisecond
	lbAfter       = 2500 * time.Millisecond
	lbLate        = 1250 * time.Millisecond // the window of lbAfter whose shares are checked
	lbMaxRequests = 200_000
)

// lbLoad runs lbCallers callers through tr to base, a balancer over the
// first three of bs, every tenth request a POST, and calls grow (the other
// three join) after lbWarm. It fails t if a request fails, gets another's
// answer, comes over another protocol than proto, or if a POST ran twice.
// It returns the requests each backend answered within lbAfter of the
// change (all), and within its last lbLate (late).
func lbLoad(t *testing.T, tr http.RoundTripper, base string, bs *lbBackends, proto int, grow func()) (all, late []int64) {
	var n, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range lbCallers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := n.Add(1)
				if i > lbMaxRequests {
					return
				}
				id := fmt.Sprintf("r%d", i)
				method, body := http.MethodGet, io.Reader(nil)
				if i%10 == 0 {
					method, body = http.MethodPost, strings.NewReader(id)
				}
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				req, _ := http.NewRequestWithContext(ctx, method, base+"/k/"+id, body)
				resp, err := tr.RoundTrip(req)
				var got string
				if err == nil {
					b, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					got, err = string(b), rerr
					if err == nil && resp.ProtoMajor != proto {
						err = fmt.Errorf("answered over %s", resp.Proto)
					}
				}
				cancel()
				if err == nil && got != id {
					err = fmt.Errorf("answer %q", got)
				}
				if err != nil && failed.Add(1) <= 5 {
					t.Errorf("%s %s: %v", method, id, err)
				}
			}
		}()
	}
	time.Sleep(lbWarm)
	at := bs.counts()
	grow()
	time.Sleep(lbAfter - lbLate)
	mid := bs.counts()
	time.Sleep(lbLate)
	end := bs.counts()
	close(stop)
	wg.Wait()
	for i := range end {
		all = append(all, end[i]-at[i])
		late = append(late, end[i]-mid[i])
	}
	if f := failed.Load(); f > 0 {
		t.Errorf("%d of %d requests failed", f, min(n.Load(), lbMaxRequests))
	}
	if dup := bs.duplicatePOSTs(); len(dup) > 0 {
		t.Errorf("POSTs run twice: %v", dup)
	}
	t.Logf("requests per backend after the change: %v (last %v: %v)", all, lbLate, late)
	return all, late
}

// checkFairShares fails t unless every backend answered at least half its
// fair share of late.
func checkFairShares(t *testing.T, late []int64) {
	t.Helper()
	var total int64
	for _, n := range late {
		total += n
	}
	fair := total / int64(len(late))
	for i, n := range late {
		if 2*n < fair {
			t.Errorf("backend %d answered %d of %d requests in the last %v, want half its fair share (%d) at least", i+1, n, total, lbLate, fair/2)
		}
	}
}

// TestLifetimeBehindBalancer: three backends behind an in-process TCP
// round-robin balancer grow to six under 40 callers. With MaxConnLifetime
// 1 s, or its default scaled to 1 s (testHookMaxConnLifetime), every
// backend gets half its fair share at least within 2.5 s of the change
// over HTTP/1.1; over HTTP/2 (TLS passed through the balancer), the added
// backends get requests. No request fails, and no POST runs twice.
func TestLifetimeBehindBalancer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		h2       bool
		lifetime time.Duration
		hook     time.Duration // testHookMaxConnLifetime
	}{
		{"http1", false, time.Second, 0},
		{"http1 default", false, 0, time.Second},
		{"h2", true, time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verifyNoLeaks(t)
			if tc.hook > 0 {
				setTestHook(t, &testHookMaxConnLifetime, tc.hook)
			}
			bs := newLBBackends(t, 6, tc.h2)
			lb := startL4Balancer(t, bs.addr(0), bs.addr(1), bs.addr(2))
			opts := TransportOptions{MaxConnLifetime: tc.lifetime}
			base, proto := "http://"+lb.addr(), 1
			if tc.h2 {
				opts.TLSClientConfig = tlsRoots(bs.srvs[0]) // one certificate for all (httptest's)
				base, proto = "https://"+lb.addr(), 2
			}
			tr := newTestTransport(t, opts)
			all, late := lbLoad(t, tr, base, bs, proto, func() { lb.add(bs.addr(3), bs.addr(4), bs.addr(5)) })
			if !tc.h2 {
				checkFairShares(t, late)
				return
			}
			for i := 3; i < 6; i++ {
				if all[i] == 0 {
					t.Errorf("added backend %d answered no request within %v", i+1, lbAfter)
				}
			}
			if s := tr.Stats()["https://"+lb.addr()]; s.Retired.Lifetime == 0 {
				t.Errorf("Stats: Retired.Lifetime = 0, want connections retired for their lifetime")
			}
		})
	}
}

// TestRealHAProxyTCPLifetime: the same growth behind HAProxy in mode tcp
// (balance roundrobin), whose three more servers are enabled through its
// runtime API while the load runs, over HTTP/1.1 with MaxConnLifetime 1 s.
func TestRealHAProxyTCPLifetime(t *testing.T) {
	verifyNoLeaks(t)
	haproxy := requireProgram(t, "haproxy", "haproxy", "/usr/sbin/haproxy")
	bs := newLBBackends(t, 6, false)
	sock := t.TempDir() + "/admin.sock"
	addr := startWithConfig(t, haproxy, "haproxy.cfg", func(addr string) string {
		servers := ""
		for i := range 6 {
			state := ""
			if i >= 3 {
				state = " disabled"
			}
			servers += fmt.Sprintf("\tserver s%d %s%s\n", i+1, bs.addr(i), state)
		}
		return fmt.Sprintf(`global
	maxconn 1000
	stats socket %s level admin
defaults
	mode tcp
	timeout connect 1s
	timeout client 10s
	timeout server 10s
frontend fe
	bind %s
	default_backend be
backend be
	balance roundrobin
%s`, sock, addr, servers)
	}, "-db", "-f")
	tr := newTestTransport(t, TransportOptions{MaxConnLifetime: time.Second})
	_, late := lbLoad(t, tr, "http://"+addr, bs, 1, func() {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Errorf("HAProxy's runtime API: %v", err)
			return
		}
		defer c.Close()
		io.WriteString(c, "set server be/s4 state ready;set server be/s5 state ready;set server be/s6 state ready\n")
		out, _ := io.ReadAll(c)
		if s := strings.TrimSpace(string(out)); s != "" {
			t.Logf("HAProxy's runtime API: %s", s)
		}
	})
	checkFairShares(t, late)
}

// TestDefaultMaxConnLifetime: with default options, a connection kept busy
// takes requests until DefaultMaxConnLifetime (less 10%), then its
// replacement is dialed before it retires, within DefaultMaxConnLifetime
// plus 10%: no request waits for that dial (each one finds a connection),
// the old connection closes with CloseLifetime, and HostStats counts it.
// A negative MaxConnLifetime keeps the connection.
func TestDefaultMaxConnLifetime(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lifetime time.Duration
		dials    int32 // within DefaultMaxConnLifetime plus 10%
	}{
		{"default", 0, 2},
		{"never", -1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &memServer{handle: memServeSerial(nil)}
				var mu sync.Mutex
				var closed []CloseReason
				var waitedDial atomic.Int32
				obs := &Observer{ConnClosed: func(ev ConnEvent) {
					mu.Lock()
					closed = append(closed, ev.Reason)
					mu.Unlock()
				}}
				tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnLifetime: tc.lifetime, Observer: obs})
				defer tr.Close()
				start := time.Now()
				for i := 0; time.Since(start) < DefaultMaxConnLifetime*11/10+time.Second; i++ {
					before := srv.dials.Load()
					if got := <-memGet(tr, "/x"); got != "/x" {
						t.Fatalf("GET at %v: %q", time.Since(start), got)
					}
					if srv.dials.Load() > before && i > 0 {
						waitedDial.Add(1)
					}
					if time.Since(start) < DefaultMaxConnLifetime*9/10 && srv.dials.Load() != 1 {
						t.Fatalf("%d dials at %v, want 1 until %v", srv.dials.Load(), time.Since(start), DefaultMaxConnLifetime*9/10)
					}
					time.Sleep(10 * time.Second)
				}
				synctest.Wait()
				if got := srv.dials.Load(); got != tc.dials {
					t.Errorf("%d dials within %v, want %d", got, time.Since(start), tc.dials)
				}
				if got := waitedDial.Load(); got != 0 {
					t.Errorf("%d requests waited for a dial after the first", got)
				}
				mu.Lock()
				defer mu.Unlock()
				want := int(tc.dials) - 1
				if len(closed) != want || want > 0 && closed[0] != CloseLifetime {
					t.Errorf("ConnClosed reasons %v, want %d of %v", closed, want, CloseLifetime)
				}
				if got := tr.Stats()["http://mem.test:80"].Retired.Lifetime; got != want {
					t.Errorf("Stats: Retired.Lifetime = %d, want %d", got, want)
				}
			})
		})
	}
}

// TestLifetimeStreamNotCut: a connection that reaches its lifetime while
// it streams a body for three lifetimes takes no new request (the next
// one goes to another connection) but is not cut: the stream is read to
// its end, and the connection closes after it with CloseLifetime. Over
// HTTP/1.1 and HTTP/2.
func TestLifetimeStreamNotCut(t *testing.T) {
	cert, roots := memTLS(t)
	for _, tc := range []struct {
		name string
		alpn []string
	}{
		{"http1", []string{"http/1.1"}},
		{"h2", []string{"h2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const life, chunks, piece = time.Second, 30, "0123456789"
				stream := func(write func()) {
					for range chunks {
						write()
						time.Sleep(3 * life / chunks)
					}
				}
				srv := &memServer{
					tls: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: tc.alpn},
					h2: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if r.URL.Path != "/stream" {
							io.WriteString(w, r.URL.Path)
							return
						}
						stream(func() {
							io.WriteString(w, piece)
							w.(http.Flusher).Flush()
						})
					}),
					handle: memEach(func(c net.Conn, req *http.Request) {
						if req.URL.Path != "/stream" {
							answer(c, req)
							return
						}
						io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
						stream(func() { fmt.Fprintf(c, "%x\r\n%s\r\n", len(piece), piece) })
						io.WriteString(c, "0\r\n\r\n")
					}),
				}
				var mu sync.Mutex
				connOf := make(map[string]uint64) // path: its connection
				closed := make(map[uint64]CloseReason)
				obs := &Observer{
					RequestAssigned: func(ev RequestEvent) {
						mu.Lock()
						connOf[ev.Request.URL.Path] = ev.ConnID
						mu.Unlock()
					},
					ConnClosed: func(ev ConnEvent) {
						mu.Lock()
						closed[ev.ID] = ev.Reason
						mu.Unlock()
					},
				}
				tr := NewTransport(TransportOptions{DialContext: srv.dial, TLSClientConfig: roots, MaxConnLifetime: life, Observer: obs})
				defer tr.Close()
				body := memGet(tr, "https://example.com/stream")
				time.Sleep(3 * life / 2) // past the stream's connection's lifetime
				if got := <-memGet(tr, "https://example.com/x"); got != "/x" {
					t.Fatalf("GET /x: %q", got)
				}
				if got, want := <-body, strings.Repeat(piece, chunks); got != want {
					t.Fatalf("stream: %q, want %d bytes", got, len(want))
				}
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				s, x := connOf["/stream"], connOf["/x"]
				if s == x {
					t.Errorf("GET /x went to the stream's connection %d, past its lifetime", s)
				}
				if why, ok := closed[s]; !ok || why != CloseLifetime {
					t.Errorf("the stream's connection closed: %v (reason %v), want closed with %v", ok, why, CloseLifetime)
				}
			})
		})
	}
}

// TestLifetimeNobodyWaitsForReplacement: 16 callers in a closed loop over
// 2 pipelined connections 10 ms away (FixedPolicy: pipelined from the
// start) for 4 lifetimes of 1 s. Each connection's replacement is dialed
// before it retires, and that dial is nobody's: no request waits for it,
// so every request once the pool is up is answered within a round trip
// and a half (20 ms, answers being immediate); one that waited for a dial
// would take two.
func TestLifetimeNobodyWaitsForReplacement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// warm: the pool's second connection is dialed for the first
		// requests, which wait for it.
		const oneWay, life, warm = 10 * time.Millisecond, time.Second, 100 * time.Millisecond
		srv := &memServer{handle: memServeSerial(nil), oneWay: oneWay}
		tr := NewTransport(TransportOptions{DialContext: srv.dial, PipelineConnsPerHost: 2, PipelineDepth: 8, FixedPolicy: true, MaxConnLifetime: life})
		defer tr.Close()
		if got := <-memGet(tr, "/warm"); got != "/warm" {
			t.Fatalf("GET /warm: %q", got)
		}
		start := time.Now()
		var wg sync.WaitGroup
		var worst atomic.Int64
		var n atomic.Int32
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < 4*life {
					path := fmt.Sprintf("/%d", n.Add(1))
					t0 := time.Now()
					if got := <-memGet(tr, path); got != path {
						t.Errorf("GET %s: %q", path, got)
						return
					}
					if d := int64(time.Since(t0)); t0.Sub(start) > warm && d > worst.Load() {
						worst.Store(d)
					}
				}
			}()
		}
		wg.Wait()
		if got := tr.Stats()["http://mem.test:80"].Retired.Lifetime; got < 4 {
			t.Errorf("Retired.Lifetime = %d, want 4 at least (2 connections, 4 lifetimes)", got)
		}
		if w := time.Duration(worst.Load()); w > 3*oneWay {
			t.Errorf("slowest of %d requests: %v, want a round trip (%v) at most: a request waited for a replacement's dial", n.Load(), w, 2*oneWay)
		}
	})
}
