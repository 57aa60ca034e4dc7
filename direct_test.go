package pipelined

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// inDirectRead reports whether the calling goroutine is a caller reading
// its own answer (conn_direct.go): httptrace hooks that fire while a response
// is read run in the goroutine that reads it.
func inDirectRead() bool { return inFrame(".(*connReader).readDirect") }

// directTrace returns ctx with a trace that records in direct whether the
// answer's first byte was read by its caller.
func directTrace(ctx context.Context, direct *atomic.Bool) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotFirstResponseByte: func() { direct.Store(inDirectRead()) },
	})
}

// TestDirectReadQuiet: a connection that rests is read by the caller of its
// next request. What arrives while it rests (its server's close, bytes
// nobody asked for) keeps a request that must not be sent twice from being
// written on it, and one that may be is sent again: every request is
// answered, by a fresh connection, and the rested connection receives
// nothing more. Each row runs twice: with a WroteRequest hook (the socket
// is looked at before the request is written) and without (writeHeld:
// the request is held until the look, then written and waited for in one
// pass), the second time with headers larger than the write buffer too.
func TestDirectReadQuiet(t *testing.T) {
	// The TLS rows: the server's certificate, and a client trusting it.
	certs := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(certs.Close)
	tests := []quietCase{
		{"closed, POST", http.MethodPost, false, false},
		{"closed, GET", http.MethodGet, false, false},
		{"bytes, POST", http.MethodPost, true, false},
		// The TLS server's response and close_notify leave in one
		// segment: the close_notify is read with the response, and held
		// by the TLS connection, where the socket shows nothing.
		{"TLS closed, POST", http.MethodPost, false, true},
		{"TLS closed, GET", http.MethodGet, false, true},
		{"TLS bytes, POST", http.MethodPost, true, true},
	}
	for _, tt := range tests {
		for _, hooked := range []bool{true, false} {
			name := tt.name + ", written after the look"
			if !hooked {
				name = tt.name + ", held until the look"
			}
			t.Run(name, func(t *testing.T) { testDirectReadQuiet(t, certs, tt, hooked) })
		}
	}
}

// quietCase is a row of TestDirectReadQuiet.
type quietCase struct {
	name   string
	method string
	// after the first response on a connection: close it, or send an
	// extra response and keep reading.
	extra bool
	tls   bool
}

func testDirectReadQuiet(t *testing.T, certs *httptest.Server, tt quietCase, hooked bool) {
	verifyNoLeaks(t)
	var late atomic.Int32       // bytes a rested first connection received
	sent := make(chan struct{}) // the first connection's close or extra bytes are sent
	srv := startRawServer(t, func(n int, c net.Conn) {
		var hold *holdConn
		if tt.tls {
			hold = &holdConn{Conn: c}
			tc := tls.Server(hold, certs.TLS)
			defer tc.Close() // a close_notify, then the FIN
			c = tc
		}
		rd := &lateReader{r: c, late: &late}
		br := bufio.NewReader(rd)
		for i := 0; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if n == 0 && i == 0 {
				// Any byte from here on is a request written on a
				// rested connection, whole or not.
				late.Add(int32(br.Buffered()))
				rd.armed.Store(true)
			}
			if hold != nil && n == 0 && !tt.extra {
				hold.hold()
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
			if n == 0 && !tt.extra {
				c.Close() // without notice
				close(sent)
				return
			}
			if n == 0 && i == 0 {
				// Apart from the response: the bytes reach the
				// socket while the connection rests.
				time.Sleep(5 * time.Millisecond)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhijack")
				close(sent)
			}
		}
	})
	opts, base := TransportOptions{}, srv.url("")
	if tt.tls {
		opts.TLSClientConfig, base = tlsRoots(certs), "https://"+srv.addr
	}
	setTestHook(t, &testHookRestWatch, time.Hour) // the reader never watches during the test
	tr := newTestTransport(t, opts)
	var direct atomic.Bool
	ctx := directTrace(context.Background(), &direct)

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/first", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); got != "/first" {
		t.Fatalf("first body = %q, want /first", got)
	}
	if !direct.Load() {
		t.Fatal("the first answer was not read by its caller")
	}
	<-sent
	time.Sleep(5 * time.Millisecond) // and reach the client's socket (loopback: at once)

	var writes atomic.Int32
	ctx = context.Background()
	if hooked {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { writes.Add(1) },
		})
	}
	req, _ = http.NewRequestWithContext(ctx, tt.method, base+"/second", strings.NewReader("body"))
	if !hooked {
		// Past the write buffer: held by the connection's writer
		// too, not only by its buffer.
		req.Header.Set("X-Large", strings.Repeat("x", 2*defaultBufferSize))
	}
	resp, err = tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s /second: %v", tt.method, err)
	}
	if got := readBody(t, resp); got != "/second" {
		t.Errorf("%s /second: body = %q, want /second", tt.method, got)
	}
	if n := late.Load(); n != 0 {
		t.Errorf("the rested connection received %d more bytes, want 0", n)
	}
	if n := srv.conns.Load(); n != 2 {
		t.Errorf("connections = %d, want 2", n)
	}
	if n := writes.Load(); hooked && n != 1 {
		t.Errorf("%s /second written %d times, want 1", tt.method, n)
	}
}

// lateReader counts in late the bytes read once armed.
type lateReader struct {
	r     io.Reader
	late  *atomic.Int32
	armed atomic.Bool
}

func (r *lateReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if r.armed.Load() {
		r.late.Add(int32(n))
	}
	return n, err
}

// holdConn is a server's connection whose writes, once hold is called,
// are kept until Close and then written at once: what a TLS server writes
// last (a response, a close_notify) reaches the client in one segment.
type holdConn struct {
	net.Conn
	held atomic.Bool
	buf  []byte // guarded by the connection's single writer
}

func (c *holdConn) hold() { c.held.Store(true) }

func (c *holdConn) Write(p []byte) (int, error) {
	if c.held.Load() {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *holdConn) Close() error {
	if len(c.buf) > 0 {
		c.Conn.SetWriteDeadline(time.Time{}) // tls.Conn.Close leaves one in the past
		c.Conn.Write(c.buf)
	}
	return c.Conn.Close()
}

// TestDirectReadCancel: a caller reading its own answer gives up when its
// context is cancelled, with the context's cause, before the answer's first
// byte or in the middle of its head, and the connection's next request is
// answered.
func TestDirectReadCancel(t *testing.T) {
	tests := []struct {
		name    string
		partial string // what the server sends of the first answer before it stalls
	}{
		{"before the first byte", ""},
		{"in the head", "HTTP/1.1 200 OK\r\nContent-Le"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			stalled := make(chan struct{})
			srv := startRawServer(t, func(n int, c net.Conn) {
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if req.URL.Path == "/stall" {
						io.WriteString(c, tt.partial)
						close(stalled)
						io.Copy(io.Discard, br) // until the client closes
						return
					}
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
				}
			})
			setTestHook(t, &testHookRestWatch, time.Hour)
			tr := newTestTransport(t, TransportOptions{})
			var direct atomic.Bool
			resp, err := get(t, tr, srv.url("/warm"))
			if err != nil {
				t.Fatal(err)
			}
			readBody(t, resp)

			cause := errors.New("caller gave up")
			ctx, cancel := context.WithCancelCause(directTrace(context.Background(), &direct))
			go func() {
				<-stalled
				time.Sleep(10 * time.Millisecond) // the caller waits in its read
				cancel(cause)
			}()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.url("/stall"), nil)
			_, err = tr.RoundTrip(req)
			if err != cause {
				t.Fatalf("cancelled GET: err = %v, want %v", err, cause)
			}
			if tt.partial != "" && !direct.Load() {
				t.Error("the stalled answer was not read by its caller")
			}
			resp, err = get(t, tr, srv.url("/next"))
			if err != nil {
				t.Fatalf("GET /next: %v", err)
			}
			if got := readBody(t, resp); got != "/next" {
				t.Errorf("GET /next: body = %q, want /next", got)
			}
		})
	}
}

// opaqueCtx hides its parent from the context package (the key of a
// cancelCtx is an *int): context.AfterFunc then watches it with a goroutine
// of its own until the watch is stopped, so a watch never stopped shows as
// a leaked goroutine.
type opaqueCtx struct{ context.Context }

func (c opaqueCtx) Value(key any) any {
	if _, ok := key.(*int); ok {
		return nil
	}
	return c.Context.Value(key)
}

// TestDirectReadContextWatch: the watch of a direct read's context is kept
// from one read to the next while callers share a context, and stopped
// after each read while each request has its own (it would otherwise fire
// for requests that are done); either way a cancellation ends the read it
// belongs to, with its cause, and no other. A kept watch ends with the
// connection. Each row runs with a context the context package knows and
// with an opaque one, whose watch is a goroutine.
func TestDirectReadContextWatch(t *testing.T) {
	tests := []struct {
		name  string
		seq   string // the contexts of the requests answered: S shared, T another shared, o one of its own, b Background
		kept  bool   // the watch is kept after them
		stall byte   // the context of a stalled request then cancelled (0: none; the connection ends with the test)
	}{
		{"shared", "SSS", true, 'S'},
		{"shared, kept until closed", "SSS", true, 0},
		{"own contexts", "ooo", false, 'o'},
		{"shared, then another", "SSST", false, 'S'},
		{"shared, then its own", "SSo", false, 'S'},
		{"another shared, kept", "SSTT", true, 'T'},
		{"background", "bbb", false, 'o'},
	}
	for _, tt := range tests {
		for _, opaque := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/opaque=%v", tt.name, opaque), func(t *testing.T) {
				// The shared contexts end after the leak check: a
				// watch kept on one must end with the connection.
				var cancels []context.CancelCauseFunc
				t.Cleanup(func() {
					for _, cancel := range cancels {
						cancel(nil)
					}
				})
				verifyNoLeaks(t)
				stalled := make(chan struct{})
				srv := startRawServer(t, func(n int, c net.Conn) {
					br := bufio.NewReader(c)
					for {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						if req.URL.Path == "/stall" {
							close(stalled)
							io.Copy(io.Discard, br) // until the client closes
							return
						}
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
					}
				})
				setTestHook(t, &testHookRestWatch, time.Hour)
				tr := newTestTransport(t, TransportOptions{})
				shared := map[byte]context.CancelCauseFunc{}
				ctxs := map[byte]context.Context{}
				ctxOf := func(k byte) (context.Context, context.CancelCauseFunc) {
					if k == 'b' {
						return context.Background(), func(error) {}
					}
					if ctx, ok := ctxs[k]; ok && k != 'o' {
						return ctx, shared[k]
					}
					ctx, cancel := context.WithCancelCause(context.Background())
					var c context.Context = ctx
					if opaque {
						c = opaqueCtx{ctx}
					}
					if k != 'o' {
						ctxs[k], shared[k] = c, cancel
						cancels = append(cancels, cancel)
					}
					return c, cancel
				}
				for i := range len(tt.seq) {
					k := tt.seq[i]
					ctx, cancel := ctxOf(k)
					var direct atomic.Bool
					path := fmt.Sprintf("/r%d", i)
					req, _ := http.NewRequestWithContext(directTrace(ctx, &direct), http.MethodGet, srv.url(path), nil)
					resp, err := tr.RoundTrip(req)
					if err != nil {
						t.Fatalf("GET %s: %v", path, err)
					}
					if got := readBody(t, resp); got != path {
						t.Fatalf("GET %s: body = %q", path, got)
					}
					if !direct.Load() {
						t.Fatalf("GET %s: not read by its caller", path)
					}
					if k == 'o' {
						cancel(nil) // done with it, as a Client.Timeout's
					}
				}
				c := soleConn(tr, srv)
				if c == nil {
					t.Fatal("not one connection")
				}
				c.deadlineMu.Lock()
				kept := c.watchStop != nil
				c.deadlineMu.Unlock()
				if kept != tt.kept {
					t.Errorf("after %q: watch kept = %v, want %v", tt.seq, kept, tt.kept)
				}
				if tt.stall == 0 {
					return
				}
				ctx, cancel := ctxOf(tt.stall)
				cause := errors.New("caller gave up")
				go func() {
					<-stalled
					time.Sleep(10 * time.Millisecond) // the caller waits in its read
					cancel(cause)
				}()
				errc := make(chan error, 1)
				go func() {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.url("/stall"), nil)
					_, err := tr.RoundTrip(req)
					errc <- err
				}()
				want := cause
				if opaque {
					want = context.Canceled // its cause is out of sight
				}
				select {
				case err := <-errc:
					if err != want {
						t.Fatalf("cancelled GET: err = %v, want %v", err, want)
					}
				case <-time.After(testTimeout):
					t.Fatal("cancelled GET: still waiting")
				}
				resp, err := get(t, tr, srv.url("/next"))
				if err != nil {
					t.Fatalf("GET /next: %v", err)
				}
				if got := readBody(t, resp); got != "/next" {
					t.Errorf("GET /next: body = %q, want /next", got)
				}
			})
		}
	}
}

// TestDirectReadNotClaimed: a request whose caller does not read its own
// answer (it waits for 100 Continue, or its body is written while the
// answer is read) wakes the reader of a resting connection: it is
// answered at once, not when the rest ends.
func TestDirectReadNotClaimed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%s %d", r.URL.Path, n)
	}))
	t.Cleanup(srv.Close)
	big := strings.Repeat("x", maxInlineBody+1)
	tests := []struct {
		name   string
		header string // Expect, if set
		body   func() io.Reader
		length int64 // ContentLength; -1: unknown (chunked), no GetBody
		want   string
	}{
		{"100-continue", "100-continue", func() io.Reader { return strings.NewReader("abc") }, 3, "/r 3"},
		{"streamed body", "", func() io.Reader { return io.MultiReader(strings.NewReader("abcd")) }, -1, "/r 4"},
		{"large body", "", func() io.Reader { return strings.NewReader(big) }, int64(len(big)), fmt.Sprintf("/r %d", len(big))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			setTestHook(t, &testHookRestWatch, time.Hour) // only a wake-up gets the answer read
			tr := newTestTransport(t, TransportOptions{ExpectContinueTimeout: time.Minute})
			resp, err := get(t, tr, srv.URL+"/warm")
			if err != nil {
				t.Fatal(err)
			}
			readBody(t, resp)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/r", tt.body())
			req.ContentLength = tt.length
			if tt.length < 0 {
				req.GetBody = nil
			}
			if tt.header != "" {
				req.Header.Set("Expect", tt.header)
			}
			resp, err = tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("POST: %v", err)
			}
			if got := readBody(t, resp); got != tt.want {
				t.Errorf("POST: body = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDirectReadHandsOn: a connection freed by a direct read is resting
// before the pool gives it to a waiting request, so that request's caller
// reads its own answer too (a queue of POSTs on few connections), however
// long the first caller's own hooks take.
func TestDirectReadHandsOn(t *testing.T) {
	verifyNoLeaks(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/first" {
			<-release
		}
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	setTestHook(t, &testHookRestWatch, time.Hour)
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1})
	post := func(path string, direct *atomic.Bool) error {
		ctx := directTrace(context.Background(), direct)
		if path == "/first" {
			// A slow hook of the caller, after the pool has the
			// connection back: the turn must not wait for it.
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
				PutIdleConn: func(error) { time.Sleep(20 * time.Millisecond) },
			})
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader("x"))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return err
		}
		if got := readBody(t, resp); got != path {
			return fmt.Errorf("body %q, want %q", got, path)
		}
		return nil
	}
	var first, second atomic.Bool
	errFirst, errSecond := make(chan error, 1), make(chan error, 1)
	go func() { errFirst <- post("/first", &first) }()
	waitFor(t, "InFlight == 1", func() bool { return tr.Stats()[srv.URL].InFlight == 1 })
	go func() { errSecond <- post("/second", &second) }()
	waitFor(t, "Queued == 1", func() bool { return tr.Stats()[srv.URL].Queued == 1 })
	close(release)
	if err := <-errFirst; err != nil {
		t.Fatalf("POST /first: %v", err)
	}
	if err := <-errSecond; err != nil {
		t.Fatalf("POST /second: %v", err)
	}
	if !first.Load() || !second.Load() {
		t.Errorf("answers read by their callers: first %v, second %v; want both", first.Load(), second.Load())
	}
}

// writeWatchConn is a client connection that exposes its socket (so that
// its answers may be read by their callers) and records whether a write
// happened within the look at the socket (socket.Peeker.LookWrite).
type writeWatchConn struct {
	net.Conn
	inLook, outside atomic.Int32
}

func (c *writeWatchConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

func (c *writeWatchConn) Write(p []byte) (int, error) {
	if inFrame(".(*Peeker).lookThenWrite") {
		c.inLook.Add(1)
	} else {
		c.outside.Add(1)
	}
	return c.Conn.Write(p)
}

// TestDirectReadHeld: a request read by its caller is written within the
// look at the socket (writeHeld), in one pass with the wait for its
// answer, unless a hook of the caller's is told when it is written, or its
// body is not small and in memory.
func TestDirectReadHeld(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%s %d", r.URL.Path, n)
	}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name   string
		method string
		body   string
		trace  *httptrace.ClientTrace
		inLook bool
	}{
		{"GET", http.MethodGet, "", nil, true},
		{"POST, small body", http.MethodPost, "abc", nil, true},
		{"GET, other hooks", http.MethodGet, "", &httptrace.ClientTrace{GotFirstResponseByte: func() {}}, true},
		{"GET, WroteRequest hook", http.MethodGet, "", &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {}}, false},
		{"GET, WroteHeaders hook", http.MethodGet, "", &httptrace.ClientTrace{WroteHeaders: func() {}}, false},
		{"POST, large body", http.MethodPost, strings.Repeat("x", maxSmallBody+1), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			var conn *writeWatchConn
			var d net.Dialer
			setTestHook(t, &testHookRestWatch, time.Hour)
			tr := newTestTransport(t, TransportOptions{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				conn = &writeWatchConn{Conn: c}
				return conn, nil
			}})
			resp, err := get(t, tr, srv.URL+"/warm")
			if err != nil {
				t.Fatal(err)
			}
			readBody(t, resp)
			conn.inLook.Store(0)
			conn.outside.Store(0)
			ctx := context.Background()
			if tt.trace != nil {
				ctx = httptrace.WithClientTrace(ctx, tt.trace)
			}
			var body io.Reader
			if tt.body != "" {
				body = strings.NewReader(tt.body)
			}
			req, _ := http.NewRequestWithContext(ctx, tt.method, srv.URL+"/r", body)
			resp, err = tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := readBody(t, resp), fmt.Sprintf("/r %d", len(tt.body)); got != want {
				t.Errorf("body = %q, want %q", got, want)
			}
			in, out := conn.inLook.Load(), conn.outside.Load()
			if got := in > 0 && out == 0; got != tt.inLook || in+out == 0 {
				t.Errorf("writes within the look %d, outside %d; want all within: %v", in, out, tt.inLook)
			}
		})
	}
}

// TestDirectReadNow: a caller that reads its own answer reads a body of
// known length up to 64 KiB itself, as far as it has arrived (readNow):
// whole when it came with its head (nothing handed to the reader
// goroutine), and otherwise the rest by the reader goroutine after what
// the caller read. The bodies' bytes count (i % 251), so that a byte out
// of place shows.
func TestDirectReadNow(t *testing.T) {
	tests := []struct {
		size  int
		split int // body bytes written with the head, then a pause; -1: all at once
	}{
		{5000, -1},
		{20000, -1},
		{48 << 10, -1}, // well within a fresh connection's receive window
		{20000, 3000},
		{64 << 10, 10000},
		{64<<10 + 1, -1}, // beyond readNow: the reader goroutine's
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d split %d", tt.size, tt.split), func(t *testing.T) {
			verifyNoLeaks(t)
			// The connection rests between requests: after restWatch
			// (50 ms) its reader would watch it again, and a poll of a
			// loaded machine could miss the rest (20 s, then a failure).
			setTestHook(t, &testHookRestWatch, time.Hour)
			want := make([]byte, tt.size)
			for i := range want {
				want[i] = byte(i % 251)
			}
			srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", tt.size)
					if tt.split < 0 {
						c.Write(append([]byte(head), want...))
						continue
					}
					c.Write(append([]byte(head), want[:tt.split]...))
					time.Sleep(20 * time.Millisecond)
					c.Write(want[tt.split:])
				}
			})
			tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1})
			for i := range 3 {
				if i > 0 {
					// A caller reads its own answer on a connection
					// that rests: wait until the reader goroutine,
					// which read the last answer's rest, has let the
					// turn go (a GET sent before that is handed to it,
					// which is not what this test checks).
					waitFor(t, "the connection rests", func() bool {
						c := soleConn(tr, srv)
						return c != nil && c.rd.Load() == rdFree
					})
				}
				var direct atomic.Bool
				req, _ := http.NewRequestWithContext(directTrace(context.Background(), &direct), http.MethodGet, srv.url("/"), nil)
				before := tr.handOvers.Load()
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatalf("GET %d: %v", i, err)
				}
				handedOver := tr.handOvers.Load() > before
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("GET %d: %d bytes (%v), want the %d sent", i, len(got), err, len(want))
				}
				if i == 0 {
					continue // a new connection's first answer may be the reader goroutine's
				}
				if !direct.Load() {
					t.Errorf("GET %d: not read by its caller", i)
				}
				if wantHandOver := tt.split >= 0 || tt.size > maxReadAhead; handedOver != wantHandOver {
					t.Errorf("GET %d: body handed to the reader goroutine: %v, want %v", i, handedOver, wantHandOver)
				}
			}
		})
	}
}
