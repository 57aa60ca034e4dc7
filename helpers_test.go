package pipelined

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pipelined/pipelined/internal/model"
)

// This file holds the helpers every test file shares: the one scripted raw
// server, the one polling helper, the one leak checker, and small request
// helpers.

// testTimeout bounds every wait in these tests; it only guards against
// hangs and is never a performance assertion.
const testTimeout = 20 * time.Second

// rawServer is a raw TCP server on 127.0.0.1 whose connections are handled
// by a test-supplied function, for misbehaviour httptest cannot produce.
// It is closed, its connections closed and its goroutines waited for, at
// the end of the test (close may also be called earlier, more than once).
type rawServer struct {
	ln    net.Listener
	addr  string
	conns atomic.Int64 // connections accepted
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  map[net.Conn]struct{}
}

// startRawServer runs handle for each accepted connection, with the
// connection's number (from 0); the connection is closed when handle
// returns.
func startRawServer(t *testing.T, handle func(n int, c net.Conn)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, addr: ln.Addr().String(), open: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(s.conns.Add(1) - 1)
			s.mu.Lock()
			s.open[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				handle(n, c)
				s.mu.Lock()
				delete(s.open, c)
				s.mu.Unlock()
				c.Close()
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

// newRawServer is startRawServer for handlers that read the connection
// through a bufio.Reader.
func newRawServer(t *testing.T, handle func(c net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	return startRawServer(t, func(_ int, c net.Conn) { handle(c, bufio.NewReader(c)) })
}

func (s *rawServer) url(path string) string { return "http://" + s.addr + path }

func (s *rawServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// serveEcho answers each request with its path as the body, in order.
func serveEcho(c net.Conn, br *bufio.Reader) {
	serveEchoN(0)(c, br)
}

// serveEchoN returns a raw-server handler that answers up to n requests of
// a connection (all if n <= 0) with their paths, then returns: the server
// closes the connection without saying so.
func serveEchoN(n int) func(net.Conn, *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		for i := 0; n <= 0 || i < n; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		}
	}
}

// serveAfterN returns a raw-server handler that reads n requests before it
// answers any (only a pipelining client gets answers, and no answer comes
// while the client is still writing them), answers them with their paths,
// then echoes the rest of the connection's requests.
func serveAfterN(n int) func(net.Conn, *bufio.Reader) {
	return func(c net.Conn, br *bufio.Reader) {
		var paths []string
		for len(paths) < n {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			paths = append(paths, req.URL.Path)
		}
		for _, p := range paths {
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(p), p)
		}
		serveEcho(c, br)
	}
}

// poolOf returns tr's pool for the plain-HTTP host at addr, or nil if
// there is none: never made, or forgotten once empty with nothing learned
// (removeIfEmpty).
func poolOf(tr *Transport, addr string) *hostPool {
	tr.mu.RLock()
	defer tr.mu.RUnlock()
	return tr.pools[poolKey{scheme: "http", addr: addr}]
}

// soleConn returns the connection of srv's pool in tr while it has
// exactly one, else nil.
func soleConn(tr *Transport, srv *rawServer) *pconn {
	p := poolOf(tr, srv.addr)
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.conns) != 1 {
		return nil
	}
	return p.conns[0]
}

// fifoLen returns how many requests are written (or being written) on c
// and not yet answered.
func fifoLen(c *pconn) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.fifo)
}

// waitFor polls cond until it holds, failing the test after testTimeout (the
// bound only avoids a hang). It must be called from the test's goroutine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v", what, testTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitOrFail waits for wg, failing the test (instead of hanging it) if that
// takes longer than testTimeout.
func waitOrFail(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatalf("%s: not done within %v", what, testTimeout)
	}
}

// verifyNoLeaks fails the test if goroutines started during it are still
// running after its cleanup (Transports closed, servers stopped), after a
// bounded wait. Call it first, so that its cleanup runs last.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	before := goroutineStacks()
	t.Cleanup(func() {
		var leaked []string
		deadline := time.Now().Add(testTimeout)
		for {
			leaked = leaked[:0]
			for id, stack := range goroutineStacks() {
				if _, ok := before[id]; !ok {
					leaked = append(leaked, stack)
				}
			}
			if len(leaked) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		for i, s := range leaked {
			if i == 5 {
				t.Errorf("... and %d more", len(leaked)-5)
				break
			}
			t.Errorf("goroutine leaked:\n%s", s)
		}
	})
}

var goroutineHeader = regexp.MustCompile(`^goroutine (\d+) `)

// goroutineStacks returns the stack of every goroutine, by id.
func goroutineStacks() map[int]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	m := make(map[int]string)
	for _, g := range strings.Split(string(buf), "\n\n") {
		if sm := goroutineHeader.FindStringSubmatch(g); sm != nil {
			id, _ := strconv.Atoi(sm[1])
			m[id] = g
		}
	}
	return m
}

// newTestTransport returns a Transport closed at the end of the test.
func newTestTransport(t *testing.T, opts TransportOptions) *Transport {
	t.Helper()
	tr := NewTransport(opts)
	t.Cleanup(func() { tr.Close() })
	return tr
}

// rtResult is what a RoundTrip returned.
type rtResult struct {
	resp *http.Response
	err  error
}

// roundTripAsync runs rt.RoundTrip(req) in a goroutine of its own and
// sends what it returns on the channel.
func roundTripAsync(rt http.RoundTripper, req *http.Request) <-chan rtResult {
	ch := make(chan rtResult, 1)
	go func() {
		resp, err := rt.RoundTrip(req)
		ch <- rtResult{resp, err}
	}()
	return ch
}

func get(t *testing.T, tr http.RoundTripper, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr.RoundTrip(req)
}

// getBehind sends a GET of path through tr from another goroutine and
// waits until it is written behind the request in flight on srv's one
// connection. The body it gets (or its error) arrives on the channel.
func getBehind(t *testing.T, tr *Transport, srv *rawServer, path string) <-chan string {
	t.Helper()
	behind := make(chan string, 1)
	go func() {
		resp, err := get(t, tr, srv.url(path))
		if err != nil {
			behind <- err.Error()
			return
		}
		behind <- readBody(t, resp)
	}()
	waitFor(t, path+" written behind the head", func() bool {
		c := soleConn(tr, srv)
		return c != nil && fifoLen(c) == 2
	})
	return behind
}

// getBody sends a GET for url through rt with ctx and returns the body
// read in full.
func getBody(ctx context.Context, rt http.RoundTripper, url string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// getAt sends a GET of url from another goroutine and sends on the channel
// when its body has been read in full, failing the test on an error.
func getAt(t *testing.T, tr *Transport, url string) <-chan time.Time {
	done := make(chan time.Time, 1)
	go func() {
		if _, err := getBody(context.Background(), tr, url); err != nil {
			t.Errorf("GET %s: %v", url, err)
		}
		done <- time.Now()
	}()
	return done
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}

// memServer serves every connection the transport dials with handle, over
// memPipe. It counts the dials. With oneWay set, a dial takes a round trip
// (twice oneWay) and bytes take oneWay to cross in each direction: a
// server far away. With tls set, connections speak TLS (memTLS), and one
// that negotiates h2 is served by h2 (x/net/http2's server).
type memServer struct {
	handle func(n int, c net.Conn, br *bufio.Reader)
	dials  atomic.Int32
	oneWay time.Duration
	tls    *tls.Config
	h2     http.Handler
	// handshakes counts the TLS handshakes completed.
	handshakes atomic.Int32
}

func (s *memServer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	client, server := memPipe()
	if s.oneWay > 0 {
		time.Sleep(2 * s.oneWay)
		client.(*memConn).r.latency = s.oneWay
		client.(*memConn).w.latency = s.oneWay
	}
	n := int(s.dials.Add(1))
	go func() {
		defer server.Close()
		if s.tls != nil {
			tc := tls.Server(server, s.tls)
			if tc.Handshake() != nil {
				return
			}
			s.handshakes.Add(1)
			if tc.ConnectionState().NegotiatedProtocol == "h2" {
				serveOneConn(tc, s.h2)
				return
			}
			server = tc
		}
		s.handle(n, server, bufio.NewReader(server))
	}()
	return client, nil
}

// serveOneConn serves c, a TLS connection that negotiated h2, with an
// http.Server until c is closed.
func serveOneConn(c *tls.Conn, h http.Handler) {
	l := &oneConnListener{c: c, done: make(chan struct{})}
	srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed || st == http.StateHijacked {
			l.Close()
		}
	}}
	srv.Serve(l)
}

// oneConnListener accepts c once, then nothing until it is closed.
type oneConnListener struct {
	c    net.Conn
	done chan struct{}
	once sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if c := l.c; c != nil {
		l.c = nil
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return memAddr{} }

// memTLS returns a server certificate for example.com (httptest's) and a
// client configuration that trusts it, for memServer.tls. Call it outside
// a synctest bubble: it starts and closes an httptest server.
func memTLS(t *testing.T) (tls.Certificate, *tls.Config) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.StartTLS()
	defer srv.Close()
	return srv.TLS.Certificates[0], tlsRoots(srv)
}

// memServeSerial returns a memServer handler that answers the requests of
// a connection one at a time, each after delay(its path) (nil: at once).
func memServeSerial(delay func(path string) time.Duration) func(int, net.Conn, *bufio.Reader) {
	return func(_ int, c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if delay != nil {
				time.Sleep(delay(req.URL.Path))
			}
			answer(c, req)
		}
	}
}

// memServeConcurrent returns a memServer handler that runs a connection's
// requests at once, as a server in front of a pool does: each is answered
// delay(its method, path) after it was read, in the order they came. What
// is due when the connection ends is not answered.
func memServeConcurrent(delay func(method, path string) time.Duration) func(int, net.Conn, *bufio.Reader) {
	return func(_ int, c net.Conn, br *bufio.Reader) {
		type due struct {
			at  time.Time
			req *http.Request
		}
		q := make(chan due, 64)
		ended := make(chan struct{})
		defer close(ended)
		defer close(q)
		go func() {
			for d := range q {
				select {
				case <-time.After(time.Until(d.at)):
				case <-ended:
					return
				}
				if d.req.Method == http.MethodHead {
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(d.req.URL.Path))
					continue
				}
				answer(c, d.req)
			}
		}()
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			q <- due{time.Now().Add(delay(req.Method, req.URL.Path)), req}
		}
	}
}

// memEach returns a memServer handler that reads a connection's requests
// one at a time, each with its body read, and hands each to serve, which
// writes its answer (or none) on c. It ends at the first read error.
func memEach(serve func(c net.Conn, req *http.Request)) func(int, net.Conn, *bufio.Reader) {
	return func(_ int, c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			serve(c, req)
		}
	}
}

// memBurst sends GET /0 … /n-1 through tr at once, fails t unless each
// gets its own path back, and returns how long the burst took.
func memBurst(t *testing.T, tr *Transport, n int) time.Duration {
	t.Helper()
	return memBurstTo(t, tr, "", n)
}

// memBurstTo is memBurst to origin ("https://example.com"; "": memGet's).
func memBurstTo(t *testing.T, tr *Transport, origin string, n int) time.Duration {
	t.Helper()
	start := time.Now()
	var answers []<-chan string
	for i := range n {
		answers = append(answers, memGet(tr, fmt.Sprintf("%s/%d", origin, i)))
	}
	for i, ch := range answers {
		if got, want := <-ch, fmt.Sprintf("/%d", i); got != want {
			t.Fatalf("answer %d = %q, want %q", i, got, want)
		}
	}
	return time.Since(start)
}

// answer writes a response whose body is the request's path.
func answer(c net.Conn, req *http.Request) {
	fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
}

// memGet sends a GET through tr in its own goroutine and returns a channel
// with the body or the error. A path is sent to http://mem.test; a full
// URL as it is.
func memGet(tr *Transport, path string) <-chan string {
	ch := make(chan string, 1)
	url := path
	if strings.HasPrefix(path, "/") {
		url = "http://mem.test" + path
	}
	go func() {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			ch <- "error: " + err.Error()
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			ch <- "error: " + err.Error()
			return
		}
		ch <- string(b)
	}()
	return ch
}

// memPipe returns the two ends of an in-memory connection. Unlike
// net.Pipe, writes are buffered (as a socket's are), so a server that
// does not read yet does not block the writer; reads honour deadlines.
// Its waits are sync.Cond waits, which testing/synctest treats as durable.
func memPipe() (net.Conn, net.Conn) {
	a, b := newMemBuf(), newMemBuf()
	return &memConn{r: a, w: b}, &memConn{r: b, w: a}
}

// memBuf is one direction of a memPipe. mu guards every field.
type memBuf struct {
	mu       sync.Mutex
	cond     sync.Cond
	data     []byte
	closed   bool      // no more writes: reads drain, then EOF
	deadline time.Time // read deadline
	timer    *time.Timer

	// latency, set before use: how long written bytes take to become
	// readable; inFlight holds them meanwhile, in order.
	latency  time.Duration
	inFlight []memChunk
}

type memChunk struct {
	b   []byte
	due time.Time
}

// arrive makes the bytes in flight that are due readable, in order.
func (b *memBuf) arrive() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for len(b.inFlight) > 0 && !b.inFlight[0].due.After(now) {
		b.data = append(b.data, b.inFlight[0].b...)
		b.inFlight = b.inFlight[1:]
	}
	b.cond.Broadcast()
}

func newMemBuf() *memBuf {
	b := &memBuf{}
	b.cond.L = &b.mu
	return b
}

type memConn struct{ r, w *memBuf }

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "mem" }

func (c *memConn) Read(p []byte) (int, error) {
	b := c.r
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if len(b.data) > 0 {
			n := copy(p, b.data)
			b.data = b.data[n:]
			return n, nil
		}
		if b.closed && len(b.inFlight) == 0 {
			return 0, io.EOF
		}
		if !b.deadline.IsZero() && !time.Now().Before(b.deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		b.cond.Wait()
	}
}

// unread returns the bytes written to c's reading side not read yet.
func (c *memConn) unread() int {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	return len(c.r.data)
}

func (c *memConn) Write(p []byte) (int, error) {
	b := c.w
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, syscall.EPIPE
	}
	if b.latency > 0 {
		b.inFlight = append(b.inFlight, memChunk{slices.Clone(p), time.Now().Add(b.latency)})
		time.AfterFunc(b.latency, b.arrive)
		return len(p), nil
	}
	b.data = append(b.data, p...)
	b.cond.Broadcast()
	return len(p), nil
}

func (c *memConn) Close() error {
	for _, b := range []*memBuf{c.r, c.w} {
		b.mu.Lock()
		b.closed = true
		if b.timer != nil {
			b.timer.Stop()
		}
		b.cond.Broadcast()
		b.mu.Unlock()
	}
	return nil
}

func (c *memConn) SetReadDeadline(t time.Time) error {
	b := c.r
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deadline = t
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if !t.IsZero() {
		b.timer = time.AfterFunc(time.Until(t), func() {
			b.mu.Lock()
			b.cond.Broadcast()
			b.mu.Unlock()
		})
	}
	b.cond.Broadcast()
	return nil
}

func (c *memConn) SetWriteDeadline(time.Time) error { return nil } // writes never block
func (c *memConn) SetDeadline(t time.Time) error    { return c.SetReadDeadline(t) }
func (c *memConn) LocalAddr() net.Addr              { return memAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return memAddr{} }

// inFrame reports whether the calling goroutine runs within a function
// whose name ends with suffix.
func inFrame(suffix string) bool {
	pc := make([]uintptr, 64)
	frames := runtime.CallersFrames(pc[:runtime.Callers(2, pc)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, suffix) {
			return true
		}
		if !more {
			return false
		}
	}
}

// routeVerdict returns what tr's pool for the request's host holds about
// the request's route class (internal/model); model.Unseen if there is no pool.
func routeVerdict(tr *Transport, method, url string) model.Verdict {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		panic(err)
	}
	tr.mu.RLock()
	addr, _ := canonicalAddr(req.URL.Scheme, req.URL.Host)
	p := tr.pools[poolKey{scheme: req.URL.Scheme, addr: addr}]
	tr.mu.RUnlock()
	if p == nil {
		return model.Unseen
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.model.Follow(model.ClassOf(req, method))
}

// setTestHook sets a test hook (transport.go) to v for the rest of t: the
// Transports t makes after take it.
func setTestHook(t testing.TB, hook *time.Duration, v time.Duration) {
	old := *hook
	*hook = v
	t.Cleanup(func() { *hook = old })
}

// markProven marks the host at addr proven to handle pipelining, so that
// a test's burst is not held to the one probe the scheduling of two
// callers decides.
func markProven(tr *Transport, addr string) {
	p := poolOf(tr, addr)
	p.mu.Lock()
	p.model.NoteProven()
	p.mu.Unlock()
}
