package pipelined

import (
	"bufio"
	"context"
	"errors"
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
	"syscall"
	"testing"
	"time"
)

func TestCheckRetry(t *testing.T) {
	written := failure{written: true}
	reused := failure{written: true, reused: true}
	tests := []struct {
		name       string
		replayable bool
		alone      bool
		o          outcome
		want       decision
	}{
		{"moved", false, false, outcome{moved: true}, sendAgain},
		{"moved, a retry", true, true, outcome{moved: true}, sendAgain},
		{"not written, POST", false, false, outcome{}, sendAgain},
		{"not written, GET", true, false, outcome{}, sendAgain},
		{"written on a fresh connection, GET", true, false, outcome{err: written}, giveUp},
		{"written on a fresh connection, POST", false, false, outcome{err: written}, giveUp},
		{"written on a reused connection, GET", true, false, outcome{err: reused}, retryAlone},
		{"written on a reused connection, GET retried before", true, true, outcome{err: reused}, retryAlone},
		{"written on a reused connection, POST", false, false, outcome{err: reused}, giveUp},
		{"answered too late", true, false, outcome{err: failure{written: true, reused: true, answered: true}}, giveUp},
		{"answered malformed, GET", true, false, outcome{err: failure{written: true, answered: true, garbled: true}}, retryAlone},
		{"answered malformed, GET retried alone", true, true, outcome{err: failure{written: true, answered: true, garbled: true}}, giveUp},
		{"answered malformed, POST", false, false, outcome{err: failure{written: true, answered: true, garbled: true}}, giveUp},
	}
	for _, tt := range tests {
		if got := checkRetry(tt.replayable, tt.alone, tt.o); got != tt.want {
			t.Errorf("%s: checkRetry(%v, %v, %+v) = %v, want %v", tt.name, tt.replayable, tt.alone, tt.o, got, tt.want)
		}
	}
}

func TestMayDuplicate(t *testing.T) {
	tests := []struct {
		method string
		body   bool
		header string
		want   bool
	}{
		{"GET", false, "", true},
		{"HEAD", false, "", true},
		{"OPTIONS", false, "", true},
		{"TRACE", false, "", true},
		{"GET", true, "", false},
		{"PUT", false, "", false},
		{"DELETE", false, "", false},
		{"POST", false, "Idempotency-Key", false},
		{"POST", false, "", false},
	}
	tr := NewTransport(TransportOptions{})
	defer tr.Close()
	for _, tt := range tests {
		var body io.Reader
		if tt.body {
			body = strings.NewReader("x")
		}
		req, _ := http.NewRequest(tt.method, "http://example.com/", body)
		if tt.header != "" {
			req.Header.Set(tt.header, "1")
		}
		r := newRequest(tr, req, poolKey{})
		if got := mayDuplicate(r); got != tt.want {
			t.Errorf("mayDuplicate(%s, body %v, %q) = %v, want %v", tt.method, tt.body, tt.header, got, tt.want)
		}
		if r.pipelineable && !mayDuplicate(r) {
			t.Errorf("%s: pipelineable but may not be duplicated", tt.method)
		}
	}
}

// TestPutNeverRunsAfterLaterPut is the Elasticsearch reindex case: a
// PUT that sits behind a slow GET must not be executed by the server after
// a later PUT its caller sent once the first was acknowledged.
func TestPutNeverRunsAfterLaterPut(t *testing.T) {
	verifyNoLeaks(t)
	var mu sync.Mutex
	var applied []string // document versions, in the order the server ran them
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			time.Sleep(300 * time.Millisecond) // a slow head
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			applied = append(applied, string(b))
			mu.Unlock()
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 8, HeadOfLineTimeout: 50 * time.Millisecond})
	client := &http.Client{Transport: tr}
	slow := make(chan error, 1)
	go func() {
		resp, err := client.Get(srv.URL + "/slow")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		slow <- err
	}()
	waitFor(t, "the slow GET in flight", func() bool { return tr.Stats()["http://"+srv.Listener.Addr().String()].InFlight == 1 })
	put := func(v string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/doc", strings.NewReader(v))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("PUT %s: %v", v, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	put("v1")
	put("v2")
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(applied, ","); got != "v1,v2" {
		t.Errorf("server applied %s, want v1,v2", got)
	}
}

// TestPostNotWrittenIsRetried: a POST placed on a connection that the
// server closes before any byte of the POST reaches it is sent again, as
// net/http does for requests it knows it did not write.
func TestPostNotWrittenIsRetried(t *testing.T) {
	verifyNoLeaks(t)
	var posts atomic.Int32
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if req.Method == http.MethodPost {
				posts.Add(1)
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	// A dialer whose connections refuse to write: the first connection
	// fails before the first byte of its request is handed to it.
	var dials atomic.Int32
	d := &net.Dialer{}
	tr := newTestTransport(t, TransportOptions{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err == nil && dials.Add(1) == 1 {
			return &brokenWriteConn{Conn: c}, nil
		}
		return c, err
	}})
	req, _ := http.NewRequest(http.MethodPost, srv.url("/p"), strings.NewReader("payload"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	readBody(t, resp)
	if got := posts.Load(); got != 1 {
		t.Errorf("server ran %d POSTs, want 1", got)
	}
	if got := dials.Load(); got != 2 {
		t.Errorf("dials = %d, want 2", got)
	}
}

// brokenWriteConn fails every write without writing anything, as a
// connection the peer has reset does.
type brokenWriteConn struct{ net.Conn }

func (c *brokenWriteConn) Write([]byte) (int, error) {
	c.Conn.Close()
	return 0, &net.OpError{Op: "write", Net: "tcp", Err: errors.New("connection reset by peer")}
}

// TestTraceConnPairsBalanced: every GetConn is followed by one GotConn
// (otelhttptrace opens a span on GetConn and ends it on GotConn), through
// retries and moves.
func TestTraceConnPairsBalanced(t *testing.T) {
	verifyNoLeaks(t)
	// Close every connection after its third answer, without saying so:
	// requests pipelined behind are moved or retried.
	srv := newRawServer(t, serveEchoN(3))
	tr := newTestTransport(t, TransportOptions{PipelineConnsPerHost: 2, PipelineDepth: 4})
	var get, got atomic.Int32
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var open atomic.Int32
			trace := &httptrace.ClientTrace{
				GetConn: func(string) { get.Add(1); open.Add(1) },
				GotConn: func(httptrace.GotConnInfo) {
					got.Add(1)
					if open.Add(-1) != 0 {
						t.Errorf("GotConn without a GetConn before it")
					}
				},
			}
			ctx := httptrace.WithClientTrace(context.Background(), trace)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.url(fmt.Sprintf("/%d", i)), nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Errorf("GET /%d: %v", i, err)
				return
			}
			if body := readBody(t, resp); body != fmt.Sprintf("/%d", i) {
				t.Errorf("GET /%d: body %q", i, body)
			}
		}()
	}
	waitOrFail(t, &wg, "GETs")
	if g, h := get.Load(), got.Load(); g != h || g < 60 {
		t.Errorf("GetConn %d, GotConn %d: want equal, at least 60", g, h)
	}
}

// TestUnannouncedCloseBudget: a server (or proxy) that drops each
// connection after its nth request without saying so serves every GET, as
// it does through net/http, and the pool learns to give each connection no
// more than n requests. With n = 1 (hypercorn 0.13, tinyproxy) the close
// comes right after the answer, before or after the next request is
// written on the idle connection. Closes on pipelined requests put the
// host at depth 1 (quietClosed), where the count is learned.
func TestUnannouncedCloseBudget(t *testing.T) {
	for _, n := range []int{4, 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			verifyNoLeaks(t)
			srv := newRawServer(t, serveEchoN(n))
			tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 2, PipelineDepth: 8})
			getEchoes(t, tr, srv, 1) // the host has answered: the burst is pipelined
			getEchoes(t, tr, srv, 300)
			budget := func() int {
				p := poolOf(tr, srv.addr)
				if p == nil {
					return 0 // forgotten while empty: nothing learned
				}
				p.mu.Lock()
				defer p.mu.Unlock()
				return p.model.Budget().N
			}
			// A close is seen as late as the next request, or the watch of
			// the resting connection (restWatch).
			for i := 0; i < 20 && budget() != n; i++ {
				time.Sleep(restWatch)
				getEchoes(t, tr, srv, 10)
			}
			if b := budget(); b != n {
				t.Errorf("learned budget = %d, want %d", b, n)
			}
		})
	}
}

// TestCloseNotBudget: closes that are not a count of requests per
// connection teach no budget, and the host's connections go on carrying
// many requests each. uWSGI's --http11-socket answers the first of two
// requests that came in one read and closes (after however many answers
// went before: two in a row may match); waitress closes, without notice,
// after a HEAD whose application wrote no body.
func TestCloseNotBudget(t *testing.T) {
	tests := []struct {
		name   string
		handle func(net.Conn, *bufio.Reader)
		heads  bool // every tenth request is a HEAD
		// errs: /5, /15, ... get a 500 and a close. Two such closes in a
		// row may come at the same count, and a budget learned then lasts
		// until a connection reaches it unclosed: only the connections
		// are counted.
		errs bool
	}{
		{"closes on a pipelined request", func(c net.Conn, br *bufio.Reader) {
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				p := req.URL.Path
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(p), p)
				if br.Buffered() > 0 {
					return
				}
			}
		}, false, false},
		{"closes after a HEAD", func(c net.Conn, br *bufio.Reader) {
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				p := req.URL.Path
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(p))
				if req.Method == http.MethodHead {
					return
				}
				io.WriteString(c, p)
			}
		}, true, false},
		{"announces a close after a HEAD", func(c net.Conn, br *bufio.Reader) {
			// cheroot 9, for a HEAD whose answer has no length.
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				p := req.URL.Path
				if req.Method == http.MethodHead {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
					return
				}
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(p), p)
			}
		}, true, false},
		{"announces a close after an error", func(c net.Conn, br *bufio.Reader) {
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				p := req.URL.Path
				if n, _ := strconv.Atoi(p[1:]); n%10 == 5 {
					io.WriteString(c, "HTTP/1.1 500 Internal Server Error\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
					return
				}
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(p), p)
			}
		}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			srv := newRawServer(t, tt.handle)
			tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 4, PipelineDepth: 8})
			getEchoes(t, tr, srv, 1)
			const n = 600
			var wg sync.WaitGroup
			var next atomic.Int32
			for range 16 {
				wg.Go(func() {
					for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
						method := http.MethodGet
						if tt.heads && i%10 == 0 {
							method = http.MethodHead
						}
						path := fmt.Sprintf("/%d", i)
						req, _ := http.NewRequest(method, srv.url(path), nil)
						resp, err := tr.RoundTrip(req)
						if err != nil {
							t.Errorf("%s %s: %v", method, path, err)
							continue
						}
						want := path
						if tt.errs && i%10 == 5 {
							want = ""
						}
						if got := readBody(t, resp); method == http.MethodGet && got != want {
							t.Errorf("GET %s: body %q", path, got)
						}
					}
				})
			}
			waitOrFail(t, &wg, "requests")
			// A pool forgotten once its last connection closed had learned
			// nothing (removeIfEmpty).
			budget := 0
			if p := poolOf(tr, srv.addr); p != nil {
				p.mu.Lock()
				budget = p.model.Budget().N
				p.mu.Unlock()
			}
			if budget != 0 && !tt.errs {
				t.Errorf("learned budget = %d, want none", budget)
			}
			if d := srv.conns.Load(); d > n/4 {
				t.Errorf("%d connections for %d requests, want at most %d", d, n, n/4)
			}
		})
	}
}

// quietClosed(err, unanswered, answered, headIdle, headCut, idle) = want.
func TestQuietClosed(t *testing.T) {
	eof := io.EOF
	for _, tc := range []struct {
		err                  error
		unanswered, answered int
		headIdle, headCut    bool
		idle                 time.Duration
		want                 bool
	}{
		{err: eof, unanswered: 1, answered: 4, headIdle: true, want: true},                   // after n answers, written as the close came
		{err: eof, unanswered: 1, answered: 4, headIdle: true, idle: time.Hour, want: false}, // an idle timeout
		{err: eof, unanswered: 3, answered: 4, want: false},                                  // pipelined: the depth fallback's (uWSGI)
		{err: errIdleClosed, answered: 4, idle: time.Millisecond, want: true},                // closed right after its nth answer
		{err: errIdleClosed, answered: 4, idle: 2 * time.Second, want: false},                // an idle timeout
		{err: errConnClosing, unanswered: 1, answered: 4, headIdle: true, want: false},       // announced
		{err: errIdleClosed, answered: 1, idle: time.Millisecond, want: true},                // closed right after its one answer
		{err: errIdleClosed, answered: 1, idle: 2 * time.Second, want: false},                // an idle timeout
		{err: eof, unanswered: 1, answered: 1, headIdle: true, want: true},                   // written as the close came
		{err: eof, unanswered: 2, answered: 1, headIdle: false, want: false},                 // pipelined: the depth fallback's
		{err: eof, unanswered: 1, answered: 1, headIdle: true, idle: time.Second, want: false},
		{err: ErrResponseHeaderTimeout, unanswered: 1, answered: 1, headIdle: true, want: false},
		{err: errIdleClosed, answered: 0, want: false}, // closed before its first request
		{err: eof, unanswered: 1, answered: 0, headIdle: true, want: false},
		{err: io.ErrUnexpectedEOF, unanswered: 1, answered: 1, headIdle: true, headCut: true, want: false},              // within an answer
		{err: syscall.ECONNRESET, unanswered: 1, answered: 2, headIdle: true, headCut: true, want: false},               // reset within an answer
		{err: syscall.ECONNRESET, unanswered: 1, answered: 2, headIdle: true, want: true},                               // reset before the answer began
		{err: framingErrorf("bad status line"), unanswered: 1, answered: 2, headIdle: true, headCut: true, want: false}, // garbage
	} {
		if got := quietClosed(tc.err, tc.unanswered, tc.answered, tc.headIdle, tc.headCut, tc.idle); got != tc.want {
			t.Errorf("quietClosed(%v, %d, %d, %v, %v, %v) = %v, want %v", tc.err, tc.unanswered, tc.answered, tc.headIdle, tc.headCut, tc.idle, got, tc.want)
		}
	}
}

// TestWrittenAsServerClosesNotResent: a request whose bytes reached a
// server that read it and closed the connection before the Write that
// carried them returned was written: one that may not be sent again fails
// with ErrServerClosed, sent once. The connection's failure read the count
// of bytes written without waiting for that Write, took the request for
// unwritten, and sent it again: a POST ran twice (TestDifferentialALPNFlap).
// lateWriteConn's Write returns only once the connection's close has been
// reported (ConnClosed, after that count was read), or 50 ms after the
// close, which the count now waits for.
func TestWrittenAsServerClosesNotResent(t *testing.T) {
	verifyNoLeaks(t)
	var got sync.Map // method -> *atomic.Int32, the requests the server read
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		n, _ := got.LoadOrStore(req.Method, new(atomic.Int32))
		n.(*atomic.Int32).Add(1) // read, not answered: the connection closes
	})
	for _, method := range []string{http.MethodPost, http.MethodPatch, http.MethodPut} {
		reported := make(chan struct{})
		var once sync.Once
		obs := &Observer{ConnClosed: func(ConnEvent) { once.Do(func() { close(reported) }) }}
		var d net.Dialer
		tr := newTestTransport(t, TransportOptions{Observer: obs, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &lateWriteConn{Conn: c, closed: make(chan struct{}), reported: reported}, nil
		}})
		req, _ := http.NewRequestWithContext(parCtx(t), method, srv.url("/"), strings.NewReader("payload"))
		req.ContentLength = -1 // chunked: written by a goroutine of its own, not read by its caller (conn_direct.go)
		_, err := tr.RoundTrip(req)
		var sent int32
		if n, ok := got.Load(method); ok {
			sent = n.(*atomic.Int32).Load()
		}
		if !errors.Is(err, ErrServerClosed) || sent != 1 {
			t.Errorf("%s: error %v, sent %d times; want ErrServerClosed, sent once", method, err, sent)
		}
		tr.Close()
	}
}

// lateWriteConn is a connection whose Writes return only after it was
// closed and reported closed, or 50 ms after it was closed.
type lateWriteConn struct {
	net.Conn
	closeOnce sync.Once
	closed    chan struct{}
	reported  <-chan struct{}
}

func (c *lateWriteConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	<-c.closed
	tm := time.NewTimer(50 * time.Millisecond)
	defer tm.Stop()
	select {
	case <-c.reported:
	case <-tm.C:
	}
	return n, err
}

func (c *lateWriteConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
