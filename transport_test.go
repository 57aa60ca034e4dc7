package pipelined

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// getEchoes sends GETs of /0 ... /n-1 concurrently through tr to an echo
// server and checks that each gets its own path back.
func getEchoes(t *testing.T, tr http.RoundTripper, srv *rawServer, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path := fmt.Sprintf("/%d", i)
			resp, err := get(t, tr, srv.url(path))
			if err != nil {
				t.Errorf("GET %s: %v", path, err)
				return
			}
			if got := readBody(t, resp); got != path {
				t.Errorf("GET %s: body = %q, want %q", path, got, path)
			}
		}()
	}
	waitOrFail(t, &wg, "concurrent GETs")
}

func TestPipelinesOnOneConnection(t *testing.T) {
	verifyNoLeaks(t)
	const depth = 4
	// The server reads all depth requests before answering any: only a
	// pipelining client gets answers.
	srv := newRawServer(t, serveAfterN(depth))
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: depth, HeadOfLineTimeout: -1})
	tr.opts.FixedPolicy = true // the server answers nothing before it has depth requests
	getEchoes(t, tr, srv, depth)
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("connections = %d, want 1", n)
	}
}

// TestFramingInPipeline sends pipelined requests whose responses use every
// framing of RFC 9112 §6.3 and checks each caller gets its own response.
func TestFramingInPipeline(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		response string // for the first request; the second gets an echo
		wantBody string
		wantCL   int64
		wantTE   []string
	}{
		{"content-length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", 5, nil},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;ext=1\r\nlo\r\n0\r\n\r\n", "hello", -1, []string{"chunked"}},
		{"head-with-length", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", "", 1000, nil},
		{"head-chunked", "HEAD", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "", -1, []string{"chunked"}},
		{"204-with-length", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", "", 0, nil},
		{"304", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\n", "", 0, nil},
		{"100-then-200", "GET", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", 2, nil},
		{"duplicate-equal-length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", "ok", 2, nil},
		{"length-list", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok", "ok", 2, nil},
		{"large-length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 100000), strings.Repeat("x", 100000), 100000, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			// The second request is sent once the server has read the
			// first: written, not just assigned, so the order is known.
			first := make(chan struct{})
			var firstOnce sync.Once
			srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
				// Read both requests first so that they are pipelined.
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				firstOnce.Do(func() { close(first) })
				second, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.WriteString(c, tt.response)
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(second.URL.Path), second.URL.Path)
				serveEcho(c, br)
			})
			// The server answers only once both requests are in: no
			// head-of-line resend may take the second one away.
			tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 2, HeadOfLineTimeout: -1, FixedPolicy: true})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-first
				resp, err := get(t, tr, srv.url("/second"))
				if err != nil {
					t.Errorf("second request: %v", err)
					return
				}
				if got := readBody(t, resp); got != "/second" {
					t.Errorf("second request body = %q, want %q", got, "/second")
				}
			}()
			req, _ := http.NewRequest(tt.method, srv.url("/first"), nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			if got := readBody(t, resp); got != tt.wantBody {
				t.Errorf("body = %.40q, want %.40q", got, tt.wantBody)
			}
			if resp.ContentLength != tt.wantCL {
				t.Errorf("ContentLength = %d, want %d", resp.ContentLength, tt.wantCL)
			}
			if fmt.Sprint(resp.TransferEncoding) != fmt.Sprint(tt.wantTE) {
				t.Errorf("TransferEncoding = %v, want %v", resp.TransferEncoding, tt.wantTE)
			}
			wg.Wait()
		})
	}
}

// TestPoisonedResponses checks that a malformed response fails its request,
// closes the connection, and never shifts the queue: the request behind it
// gets its own response on a new connection.
func TestPoisonedResponses(t *testing.T) {
	tests := []struct {
		name     string
		response string
	}{
		{"te-and-cl", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"differing-cl", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"},
		{"negative-cl", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"},
		{"malformed-cl", "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n"},
		{"bad-chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"},
		{"bad-status-line", "HTTP/1.1 OK\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				if req.URL.Path == "/bad" {
					io.WriteString(c, tt.response)
					// Also answer what comes behind, as a desynced server
					// would: it must never reach the caller.
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nwrong")
					io.Copy(io.Discard, br)
					return
				}
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
				serveEcho(c, br)
			})
			tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 4, FixedPolicy: true})
			resp, err := get(t, tr, srv.url("/bad"))
			if err == nil {
				// Headers come first: a bad body fails its reads.
				body, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if rerr != nil && !errors.Is(rerr, ErrFraming) {
					t.Errorf("GET /bad: body read error = %v, want ErrFraming", rerr)
				}
				if rerr == nil && len(body) != 0 && string(body) != "abc" {
					t.Errorf("GET /bad: body = %q, want an error", body)
				}
			} else if !errors.Is(err, ErrFraming) {
				t.Errorf("GET /bad: err = %v, want ErrFraming", err)
			}
			resp, err = get(t, tr, srv.url("/next"))
			if err != nil {
				t.Fatalf("GET /next: %v", err)
			}
			if got := readBody(t, resp); got != "/next" {
				t.Errorf("GET /next: body = %q, want %q", got, "/next")
			}
		})
	}
}

func TestUnsolicitedResponseClosesConnection(t *testing.T) {
	verifyNoLeaks(t)
	var accepted atomic.Int32
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		if accepted.Add(1) > 1 {
			serveEcho(c, br)
			return
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		// An extra response nobody asked for.
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhijack")
		io.Copy(io.Discard, br)
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1})
	resp, err := get(t, tr, srv.url("/one"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); got != "/one" {
		t.Fatalf("first body = %q, want /one", got)
	}
	waitFor(t, "Open == 0", func() bool { return tr.Stats()["http://"+srv.addr].Open == 0 })
	resp, err = get(t, tr, srv.url("/two"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readBody(t, resp); got != "/two" {
		t.Errorf("second body = %q, want /two", got)
	}
	if n := srv.conns.Load(); n != 2 {
		t.Errorf("connections = %d, want 2", n)
	}
}

// TestConnectionCloseMidPipeline: a server that answers "Connection: close"
// after every second request (like nginx's keepalive_requests) loses no
// request.
func TestConnectionCloseMidPipeline(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for i := 1; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			hdr := ""
			if i == 2 {
				hdr = "Connection: close\r\n"
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s", hdr, len(req.URL.Path), req.URL.Path)
			if i == 2 {
				return
			}
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 2, PipelineDepth: 8})
	getEchoes(t, tr, srv, 200)
}

// TestNonIdempotentNotPipelined checks that nothing is written behind a POST
// until its response headers arrive, and that a POST is only written on a
// connection with nothing in flight.
func TestNonIdempotentNotPipelined(t *testing.T) {
	verifyNoLeaks(t)
	type seen struct {
		method   string
		inflight int // requests read on this connection and not yet answered
	}
	var mu sync.Mutex
	var log []seen
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		reqs := make(chan *http.Request, 16)
		var pending atomic.Int32
		go func() {
			for req := range reqs {
				time.Sleep(2 * time.Millisecond)
				pending.Add(-1)
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
			}
		}()
		defer close(reqs)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			mu.Lock()
			log = append(log, seen{req.Method, int(pending.Load())})
			mu.Unlock()
			pending.Add(1)
			reqs <- req
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 8})
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			method := "GET"
			var body io.Reader
			if i%5 == 0 {
				method, body = "POST", strings.NewReader("data")
			}
			path := fmt.Sprintf("/%d", i)
			req, _ := http.NewRequest(method, srv.url(path), body)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Errorf("%s %s: %v", method, path, err)
				return
			}
			if got := readBody(t, resp); got != path {
				t.Errorf("%s %s: body = %q", method, path, got)
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i, s := range log {
		if s.method == "POST" && s.inflight != 0 {
			t.Errorf("request %d: POST written with %d requests in flight, want 0", i, s.inflight)
		}
		if i > 0 && log[i-1].method == "POST" && s.inflight != 0 {
			// The POST was answered before this request was read only if
			// inflight is 0... a request read while the POST is pending
			// was written behind it.
			t.Errorf("request %d: written behind a POST (in flight %d)", i, s.inflight)
		}
	}
}

// TestRetrySafety: when the server closes after reading a request without
// answering it, a GET is retried and a POST is not, and fails with
// ErrServerClosed.
// TestRetrySafety checks which requests are sent again after their
// connection closed without answering: as net/http, an idempotent request
// with a replayable body, once, and only on a reused connection (a request
// that makes its server crash on a fresh connection is sent once).
func TestRetrySafety(t *testing.T) {
	tests := []struct {
		method    string
		header    string
		reused    bool // the connection answered a request before
		wantCalls int32
		wantErr   error
	}{
		{"GET", "", true, 2, nil},
		{"PUT", "", true, 2, nil},
		{"POST", "", true, 1, ErrServerClosed},
		{"PATCH", "", true, 1, ErrServerClosed},
		{"POST", "Idempotency-Key", true, 2, nil},
		{"GET", "", false, 1, ErrServerClosed},
		{"PUT", "", false, 1, ErrServerClosed},
		{"POST", "", false, 1, ErrServerClosed},
	}
	for _, tt := range tests {
		name := tt.method + tt.header
		if !tt.reused {
			name += "-fresh"
		}
		t.Run(name, func(t *testing.T) {
			verifyNoLeaks(t)
			var calls atomic.Int32
			srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if req.URL.Path == "/t" && calls.Add(1) == 1 {
						return // close without answering
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			tr := newTestTransport(t, TransportOptions{})
			if tt.reused {
				resp, err := get(t, tr, srv.url("/warm"))
				if err != nil {
					t.Fatal(err)
				}
				readBody(t, resp)
			}
			req, _ := http.NewRequest(tt.method, srv.url("/t"), strings.NewReader("body"))
			if tt.header != "" {
				req.Header.Set(tt.header, "k1")
			}
			resp, err := tr.RoundTrip(req)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("%s: err = %v, want %v", tt.method, err, tt.wantErr)
				}
			} else if err != nil {
				t.Errorf("%s: err = %v, want nil", tt.method, err)
			} else {
				readBody(t, resp)
			}
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("%s: server saw %d requests, want %d", tt.method, got, tt.wantCalls)
			}
		})
	}
}

// holdServer answers /hold/* only when release is closed, everything else
// at once, in order per connection.
func holdServer(t *testing.T, release <-chan struct{}) *rawServer {
	return holdServerCounting(t, release, nil)
}

// holdServerCounting is holdServer, counting in held (if not nil) the
// /hold requests it has read.
func holdServerCounting(t *testing.T, release <-chan struct{}, held *atomic.Int32) *rawServer {
	return newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if strings.HasPrefix(req.URL.Path, "/hold") {
				if held != nil {
					held.Add(1)
				}
				select {
				case <-release:
				case <-time.After(testTimeout):
				}
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		}
	})
}

func TestCancelQueuedRequest(t *testing.T) {
	verifyNoLeaks(t)
	release := make(chan struct{})
	srv := holdServer(t, release)
	defer close(release)
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 1})
	done := make(chan error, 1)
	go func() {
		resp, err := get(t, tr, srv.url("/hold"))
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	key := "http://" + srv.addr
	waitFor(t, "InFlight == 1", func() bool { return tr.Stats()[key].InFlight == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.url("/queued"), nil)
	errc := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		errc <- err
	}()
	waitFor(t, "Queued == 1", func() bool { return tr.Stats()[key].Queued == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("queued request: err = %v, want context.Canceled", err)
	}
	if q := tr.Stats()[key].Queued; q != 0 {
		t.Errorf("Queued = %d after cancel, want 0", q)
	}
	release <- struct{}{}
	if err := <-done; err != nil {
		t.Errorf("held request: %v", err)
	}
}

// TestCancelWrittenRequest: a request cancelled while its response is
// pending returns at once; its connection closes, as net/http's does, and
// the request written behind it gets its own answer on another one
// (pconn.abandoned), not after the cancelled request's answer.
func TestCancelWrittenRequest(t *testing.T) {
	verifyNoLeaks(t)
	release := make(chan struct{})
	var held atomic.Int32
	srv := holdServerCounting(t, release, &held)
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 4, FixedPolicy: true})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.url("/hold"), nil)
	errc := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		errc <- err
	}()
	// Written, not only placed: a request placed after it on the same
	// connection may take the write token first, and be answered first.
	waitFor(t, "the server holds /hold", func() bool { return held.Load() == 1 })
	// Written behind it, not only placed: with nothing written behind a
	// cancelled head, the connection is closed (dropIfUnwanted) and a
	// request placed but not written goes elsewhere.
	behind := getBehind(t, tr, srv, "/behind")
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled request: err = %v, want context.Canceled", err)
	}
	close(release)
	if got := <-behind; got != "/behind" {
		t.Errorf("request behind: got %q, want /behind", got)
	}
	if n := srv.conns.Load(); n != 2 {
		t.Errorf("connections = %d, want 2 (the request behind moves)", n)
	}
}

func TestCancelWhileReadingBody(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		// A large body, half sent.
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
		c.Write(make([]byte, 500000))
		io.Copy(io.Discard, br)
	})
	tr := newTestTransport(t, TransportOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.url("/"), nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err = io.Copy(io.Discard, resp.Body)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Read after cancel: err = %v, want context.Canceled", err)
	}
}

// TestCancelWhileBodyTrickles: a caller that cancels its request while
// its body trickles in closes the connection at once, as net/http does,
// whatever the body's framing and whether or not it closes the body: the
// server's handler sees its request's context done long before it would
// have written the whole body (4 s). The transport does not read on, for
// nobody, what its caller has given up.
func TestCancelWhileBodyTrickles(t *testing.T) {
	const pieces, piece = 400, 100 // 4 s of 100 bytes each 10 ms
	for _, tt := range []struct {
		name    string
		chunked bool
		close   bool // the caller closes the body after the cancel
	}{
		{"length", false, false},
		{"length, closed", false, true},
		{"chunked", true, false},
		{"chunked, closed", true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			done := make(chan error, 1) // nil: the handler wrote it all
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !tt.chunked {
					w.Header().Set("Content-Length", strconv.Itoa(pieces*piece))
				}
				rc := http.NewResponseController(w)
				for range pieces {
					w.Write(bytes.Repeat([]byte("x"), piece))
					rc.Flush()
					select {
					case <-r.Context().Done():
						done <- r.Context().Err()
						return
					case <-time.After(10 * time.Millisecond):
					}
				}
				done <- nil
			}))
			defer srv.Close()
			for _, rt := range []http.RoundTripper{&http.Transport{}, newTestTransport(t, TransportOptions{})} {
				ctx, cancel := context.WithCancel(context.Background())
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
					t.Fatal(err)
				}
				cancel()
				start := time.Now()
				if tt.close {
					resp.Body.Close()
				}
				select {
				case err := <-done:
					if err == nil {
						t.Errorf("%T: the handler wrote the whole body after its client cancelled", rt)
					}
					t.Logf("%T: the handler saw its client leave after %v", rt, time.Since(start))
				case <-time.After(testTimeout):
					t.Fatalf("%T: the handler still writes %v after its client cancelled", rt, testTimeout)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err == nil {
					t.Errorf("%T: the body read to its end after the cancel", rt)
				}
				resp.Body.Close()
			}
		})
	}
}

// TestGetBodyErrorFreesConnection: a request sent again whose GetBody
// fails returns GetBody's error, and the connection it was given is free
// again: with MaxConnsPerHost 1, the next request is answered on it.
func TestGetBodyErrorFreesConnection(t *testing.T) {
	verifyNoLeaks(t)
	errRewind := errors.New("no body again")
	srv := startRawServer(t, func(n int, c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if n == 0 && req.Method == http.MethodPut {
				return // closed under the PUT, unanswered: it is sent again
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if got, err := getBody(ctx, tr, srv.url("/warm")); err != nil || got != "/warm" {
		t.Fatalf("GET /warm = %q, %v", got, err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.url("/put"), strings.NewReader("body"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errRewind }
	if _, err := tr.RoundTrip(req); !errors.Is(err, errRewind) {
		t.Errorf("PUT whose GetBody fails = %v, want %v", err, errRewind)
	}
	if got, err := getBody(ctx, tr, srv.url("/next")); err != nil || got != "/next" {
		t.Errorf("GET /next after it = %q, %v, want /next", got, err)
	}
}

// TestUnreadBodyDoesNotBlock checks that an unread 8 MiB body does not
// stop a later request that net/http with the same
// MaxConnsPerHost would serve.
func TestUnreadBodyDoesNotBlock(t *testing.T) {
	verifyNoLeaks(t)
	big := strings.Repeat("x", 8<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			io.WriteString(w, big)
			return
		}
		io.WriteString(w, "small")
	}))
	defer srv.Close()
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 2, PipelineDepth: 4})
	r1, err := get(t, tr, srv.URL+"/big")
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Body.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 3 {
			r2, err := get(t, tr, srv.URL+"/small")
			if err != nil {
				t.Error(err)
				return
			}
			if got := readBody(t, r2); got != "small" {
				t.Errorf("small body = %q", got)
			}
		}
	}()
	waitOrFail(t, &wg, "small requests after an unread 8 MiB body")
	if got := readBody(t, r1); len(got) != len(big) {
		t.Errorf("big body: %d bytes, want %d", len(got), len(big))
	}
}

// TestBufferedBodySizes: a body of known length up to maxBufferedBody is
// read whole ahead of its caller, so that the connection serves the next
// request while the body is unread; a larger one streams, and the
// connection serves nothing else until it has been read.
func TestBufferedBodySizes(t *testing.T) {
	tests := []struct {
		size     int
		buffered bool
	}{
		{maxReadAhead, true},
		{maxReadAhead + 1, true},
		{maxBufferedBody, true},
		{maxBufferedBody + 1, false},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.size), func(t *testing.T) {
			verifyNoLeaks(t)
			big := strings.Repeat("b", tt.size)
			srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body := "small"
					if req.URL.Path == "/big" {
						body = big
					}
					if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
						return
					}
				}
			})
			tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 2})
			r1, err := get(t, tr, srv.url("/big"))
			if err != nil {
				t.Fatal(err)
			}
			defer r1.Body.Close()
			small := memGet(tr, srv.url("/small")) // a full URL: the raw server
			// One connection: the second answer comes while the first body
			// is unread only if that body was read ahead whole.
			wait := testTimeout
			if !tt.buffered {
				wait = 200 * time.Millisecond // long enough to see it come
			}
			select {
			case got := <-small:
				if !tt.buffered {
					t.Errorf("a %d-byte body was read ahead whole: the next answer (%q) came while it was unread", tt.size, got)
				} else if got != "small" {
					t.Errorf("next body = %q, want %q", got, "small")
				}
			case <-time.After(wait):
				if tt.buffered {
					t.Fatalf("a %d-byte body was not read ahead: the next request waited for it", tt.size)
				}
			}
			if got := readBody(t, r1); len(got) != tt.size {
				t.Errorf("big body: %d bytes, want %d", len(got), tt.size)
			}
			if !tt.buffered {
				select {
				case got := <-small:
					if got != "small" {
						t.Errorf("next body after the stream = %q, want %q", got, "small")
					}
				case <-time.After(testTimeout):
					t.Errorf("the next request did not complete once the stream was read")
				}
			}
		})
	}
}

// TestResendBehindTricklingBody: a body read ahead whole (its length is
// known and small enough) that stops arriving holds up the requests behind
// it as a stream would; after HeadOfLineTimeout the safe ones move to the
// other connection and complete while it is still stalled.
func TestResendBehindTricklingBody(t *testing.T) {
	verifyNoLeaks(t)
	release := make(chan struct{})
	behind := make(chan struct{}, 64)
	const size = 100 << 10 // read ahead whole, not a stream
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		paths := make(chan string, 64)
		go func() {
			defer close(paths)
			slow := false
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				if slow {
					behind <- struct{}{} // pipelined behind the stalled body
				}
				slow = slow || req.URL.Path == "/slow"
				paths <- req.URL.Path
			}
		}()
		for path := range paths {
			if path != "/slow" {
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(path), path)
				continue
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", size, strings.Repeat("s", size/10))
			<-release
			io.WriteString(c, strings.Repeat("s", size-size/10))
		}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	// FixedPolicy: requests go behind /slow, whose route the host has
	// not answered before.
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 2, PipelineDepth: 4, HeadOfLineTimeout: time.Second, FixedPolicy: true})
	r1, err := get(t, tr, srv.url("/slow"))
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Body.Close()
	// Send bursts of requests until one is pipelined behind the stalled
	// body (the other connection takes most of them), well before its
	// timer fires (1 s) and the connection takes nothing new.
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	placed := false
	for i := 0; i < 5 && !placed; i++ {
		for j := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				path := fmt.Sprintf("/%d-%d", i, j)
				resp, err := get(t, tr, srv.url(path))
				if err != nil {
					errs <- err.Error()
					return
				}
				if got := readBody(t, resp); got != path {
					errs <- fmt.Sprintf("GET %s: body %q", path, got)
				}
			}()
		}
		select {
		case <-behind:
			placed = true
		case <-time.After(30 * time.Millisecond):
		}
	}
	if !placed {
		t.Fatal("no request was pipelined behind the stalled body")
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("requests behind a stalled body did not move to the other connection")
	}
	close(release)
	<-done
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got := readBody(t, r1); len(got) != size {
		t.Errorf("stalled body: %d bytes, want %d", len(got), size)
	}
}

// TestResendBehindLargeBody: idempotent requests written behind a response
// that turns out to be large are re-sent on another connection, and the
// late answers are discarded.
func TestResendBehindLargeBody(t *testing.T) {
	verifyNoLeaks(t)
	release := make(chan struct{})
	big := strings.Repeat("y", 1<<20)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body := req.URL.Path
			if req.URL.Path == "/big" {
				<-release
				body = big
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 2, PipelineDepth: 4})
	key := "http://" + srv.addr
	// Open two connections, then put /big on one and a request behind it.
	r1c := make(chan *http.Response, 1)
	go func() {
		resp, err := get(t, tr, srv.url("/big"))
		if err != nil {
			t.Error(err)
		}
		r1c <- resp
	}()
	waitFor(t, "InFlight == 1", func() bool { return tr.Stats()[key].InFlight == 1 })
	// A second connection becomes busy and then idle; the third request
	// goes to it. Fill the first connection's pipeline with a request
	// while both are busy by holding the second connection too.
	var wg sync.WaitGroup
	results := make(chan string, 8)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := get(t, tr, srv.url(fmt.Sprintf("/%d", i)))
			if err != nil {
				results <- err.Error()
				return
			}
			results <- readBody(t, resp)
		}()
	}
	time.Sleep(20 * time.Millisecond) // let some be pipelined behind /big
	close(release)
	r1 := <-r1c
	// Do not read r1 yet: the others must complete anyway.
	waitOrFail(t, &wg, "requests behind an unread large body")
	close(results)
	for got := range results {
		if !strings.HasPrefix(got, "/") {
			t.Errorf("request behind big body: %s", got)
		}
	}
	if r1 != nil {
		if got := readBody(t, r1); len(got) != len(big) {
			t.Errorf("big body: %d bytes, want %d", len(got), len(big))
		}
	}
}

func TestEarlyCloseKeepsConnectionWhenSmall(t *testing.T) {
	verifyNoLeaks(t)
	size := maxBufferedBody + 1000 // streams, and the remainder is small
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/huge" {
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", 64<<20)
				c.Write(make([]byte, 64<<20))
				continue
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", size, strings.Repeat("z", size))
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1})
	resp, err := get(t, tr, srv.url("/medium"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 10))
	resp.Body.Close()
	resp, err = get(t, tr, srv.url("/medium"))
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("after closing a small remainder: connections = %d, want 1", n)
	}
	resp, err = get(t, tr, srv.url("/huge"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Read(make([]byte, 10))
	resp.Body.Close()
	resp, err = get(t, tr, srv.url("/medium"))
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	if n := srv.conns.Load(); n != 2 {
		t.Errorf("after closing a huge remainder: connections = %d, want 2", n)
	}
}

// TestEarlyCloseDrainsSmallRemainder: a body closed early with at most
// maxDrain left is read on to its end and its connection kept, of known
// length or chunked, a chunked one also when it grew past maxBufferedBody
// and was read as a stream (Go 1.27's net/http drains a chunked one too,
// golang/go#77370; before, a chunked stream's connection was closed); a
// larger remainder closes the connection.
func TestEarlyCloseDrainsSmallRemainder(t *testing.T) {
	const size = 1 << 20
	tests := []struct {
		name    string
		chunked bool
		read    int
		conns   int64 // connections for this GET and the next
	}{
		{"length, small rest", false, size - 100<<10, 1},
		{"chunked, small rest", true, size - 100<<10, 1},
		{"length, large rest", false, 10, 2},
		{"chunked, large rest", true, 10, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					if !tt.chunked {
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", size, strings.Repeat("z", size))
						continue
					}
					bw := bufio.NewWriter(c)
					bw.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
					for range size / (16 << 10) {
						fmt.Fprintf(bw, "4000\r\n%s\r\n", strings.Repeat("z", 16<<10))
					}
					bw.WriteString("0\r\n\r\n")
					if bw.Flush() != nil {
						return
					}
				}
			})
			tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1})
			resp, err := get(t, tr, srv.url("/"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(resp.Body, make([]byte, tt.read)); err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			resp, err = get(t, tr, srv.url("/")) // waits for the one connection
			if err != nil {
				t.Fatal(err)
			}
			if got := readBody(t, resp); len(got) != size {
				t.Errorf("second body: %d bytes, want %d", len(got), size)
			}
			if n := srv.conns.Load(); n != tt.conns {
				t.Errorf("connections = %d, want %d", n, tt.conns)
			}
		})
	}
}

// TestEarlyCloseStalledRemainder closes a response body early whose rest
// the server never sends: the connection must not wait for it for ever. A
// request cancelled before the close gives its connection up at once, as
// with net/http; otherwise the rest may take up to the head-of-line
// timeout.
func TestEarlyCloseStalledRemainder(t *testing.T) {
	tests := []struct {
		name   string
		size   int           // the body's Content-Length; half is sent
		hol    time.Duration // HeadOfLineTimeout
		cancel bool          // the request's context is cancelled before Close
	}{
		{"read ahead, closed", 1000, 50 * time.Millisecond, false},
		{"streamed, closed", maxBufferedBody + 2000, 50 * time.Millisecond, false},
		// With an hour's timeout, only the cancellation can close it.
		{"read ahead, cancelled", 1000, time.Hour, true},
		{"streamed, cancelled", maxBufferedBody + 2000, time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			closed := make(chan struct{})
			srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", tt.size, strings.Repeat("h", tt.size/2))
				io.Copy(io.Discard, br) // until the client closes
				close(closed)
			})
			tr := newTestTransport(t, TransportOptions{HeadOfLineTimeout: tt.hol})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.url("/"), nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := resp.Body.Read(make([]byte, 10)); err != nil {
				t.Fatal(err)
			}
			if tt.cancel {
				cancel()
			}
			resp.Body.Close()
			select {
			case <-closed:
			case <-time.After(testTimeout):
				t.Fatalf("the connection is still open %v after the body's early close", testTimeout)
			}
		})
	}
}

// TestCancelledHeadClosesForRequestsBehind cancels a head whose body is
// still arriving, with a request pipelined behind it: the connection
// closes at once, as net/http closes the connection of a cancelled
// request (the server learns that nobody reads on), and the request
// behind, a safe one not yet answered, is sent again on another
// connection, where it is answered while the head's rest never comes.
func TestCancelledHeadClosesForRequestsBehind(t *testing.T) {
	verifyNoLeaks(t)
	headGone := make(chan struct{}) // the client closed /head's connection
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/head" {
				// Half of /head's body, and never its rest, nor an
				// answer to what comes behind it.
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"+strings.Repeat("h", 500))
				io.Copy(io.Discard, br)
				close(headGone)
				return
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 4, HeadOfLineTimeout: time.Hour, FixedPolicy: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.url("/head"), nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	behind := getBehind(t, tr, srv, "/behind")
	cancel()
	select {
	case got := <-behind:
		if got != "/behind" {
			t.Errorf("request behind: got %q, want /behind", got)
		}
	case <-time.After(testTimeout):
		t.Fatalf("the request behind a cancelled head still waits after %v", testTimeout)
	}
	<-headGone
	if n := srv.conns.Load(); n != 2 {
		t.Errorf("connections = %d, want 2 (the head's closed, the request behind sent again)", n)
	}
	if _, err := io.Copy(io.Discard, resp.Body); !errors.Is(err, context.Canceled) {
		t.Errorf("the head's body after the cancel: %v, want context.Canceled", err)
	}
}

func TestResponseHeaderTimeout(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		http.ReadRequest(br)
		io.Copy(io.Discard, br) // never answer
	})
	tr := newTestTransport(t, TransportOptions{ResponseHeaderTimeout: 50 * time.Millisecond})
	_, err := get(t, tr, srv.url("/"))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err = %v, want a net.Error with Timeout() true", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false, want true", err)
	}
}

// TestResponseHeaderTimeoutCountsFromHead: a request pipelined behind a slow
// response is not timed out while it waits behind it.
func TestResponseHeaderTimeoutCountsFromHead(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: 400\r\n\r\n")
			if req.URL.Path == "/slow" {
				// Headers at once, body slowly: the head is "answered".
				for range 4 {
					time.Sleep(400 * time.Millisecond) // 1.6 s in all: longer than the timeout
					c.Write(make([]byte, 100))
				}
				continue
			}
			c.Write(make([]byte, 400))
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 2, ResponseHeaderTimeout: time.Second})
	key := "http://" + srv.addr
	errc := make(chan error, 1)
	go func() {
		resp, err := get(t, tr, srv.url("/slow"))
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, "InFlight == 1", func() bool { return tr.Stats()[key].InFlight == 1 })
	resp, err := get(t, tr, srv.url("/fast"))
	if err != nil {
		t.Fatalf("request behind a slow body: %v", err)
	}
	readBody(t, resp)
	if err := <-errc; err != nil {
		t.Errorf("slow request: %v", err)
	}
}

type closeRecorder struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

func TestInvalidRequests(t *testing.T) {
	tr := newTestTransport(t, TransportOptions{})
	tests := []struct {
		name    string
		modify  func(r *http.Request)
		wantErr string
	}{
		{"nil-url", func(r *http.Request) { r.URL = nil }, "http: nil Request.URL"},
		{"nil-header", func(r *http.Request) { r.Header = nil }, "http: nil Request.Header"},
		{"bad-scheme", func(r *http.Request) { r.URL.Scheme = "ftp" }, `unsupported protocol scheme "ftp"`},
		{"no-host", func(r *http.Request) { r.URL.Host = "" }, "http: no Host in request URL"},
		{"bad-header-name", func(r *http.Request) { r.Header["Bad Name"] = []string{"v"} }, `net/http: invalid header field name "Bad Name"`},
		{"bad-header-value", func(r *http.Request) { r.Header.Set("X", "a\r\nInjected: 1") }, `net/http: invalid header field value for "X"`},
		{"bad-method", func(r *http.Request) { r.Method = "GE T" }, `net/http: invalid method "GE T"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := &closeRecorder{Reader: strings.NewReader("x")}
			req, _ := http.NewRequest("POST", "http://127.0.0.1:1/", nil)
			req.Body = body
			req.ContentLength = 1
			tt.modify(req)
			_, err := tr.RoundTrip(req)
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("RoundTrip(%s) = %v, want %q", tt.name, err, tt.wantErr)
			}
			if !body.closed.Load() {
				t.Errorf("RoundTrip(%s) did not close the request body", tt.name)
			}
		})
	}
}

func TestCloseFailsInFlightAndLaterRequests(t *testing.T) {
	verifyNoLeaks(t)
	release := make(chan struct{})
	defer close(release)
	srv := holdServer(t, release)
	tr := NewTransport(TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 2, FixedPolicy: true})
	key := "http://" + srv.addr
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := get(t, tr, srv.url("/hold"))
			errs <- err
		}()
	}
	waitFor(t, "InFlight == 2 and Queued == 1", func() bool { s := tr.Stats()[key]; return s.InFlight == 2 && s.Queued == 1 })
	tr.Close()
	for range 3 {
		if err := <-errs; !errors.Is(err, ErrTransportClosed) {
			t.Errorf("request in flight at Close: err = %v, want ErrTransportClosed", err)
		}
	}
	if _, err := get(t, tr, srv.url("/")); !errors.Is(err, ErrTransportClosed) {
		t.Errorf("request after Close: err = %v, want ErrTransportClosed", err)
	}
}

// TestCloseWithBodyHeld: Close returns while a caller holds a streamed body
// unread (4 MiB, 1000 bytes read; an nginx static file's shape) with a
// dozen other GETs in flight, however the body is framed and whether or
// not the caller's io.Copy is stuck in its writer; the held body's next
// Read then fails. Before, the connection's reader waited for the caller
// to make room in the body's buffer, and Close waited for the reader.
func TestCloseWithBodyHeld(t *testing.T) {
	const size = 4 << 20
	data := strings.Repeat("x", size)
	big := func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", strconv.Itoa(size))
			io.WriteString(w, data)
		case "/chunked":
			for i := 0; i < size; i += 16 << 10 {
				io.WriteString(w, data[i:i+16<<10])
				http.NewResponseController(w).Flush()
			}
		case "/close": // no length: the body ends with the connection
			c, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			bw.WriteString("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
			bw.WriteString(data)
			bw.Flush()
		case "/large": // more than an HTTP/2 stream's window (4 MiB)
			w.Header().Set("Content-Length", strconv.Itoa(16*size))
			for range 16 {
				io.WriteString(w, data)
			}
		case "/hold":
			<-r.Context().Done()
		}
	}
	tests := []struct {
		name, path string
		h2         bool
		copyStuck  bool // the caller copies the body into a writer that never returns
		// want is what the held body's next Read returns; nil: its
		// reads fail after what had arrived (the standard library's
		// HTTP/2 client).
		want error
	}{
		{name: "length", path: "/length", want: ErrTransportClosed},
		{name: "chunked", path: "/chunked", want: ErrTransportClosed},
		{name: "until close", path: "/close", want: ErrTransportClosed},
		{name: "copy stuck", path: "/length", copyStuck: true},
		{name: "h2", path: "/large", h2: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			var srv *httptest.Server
			var opts TransportOptions
			if tt.h2 {
				srv, _ = h2TestServer(t, h2Prefer, http.HandlerFunc(big), nil)
				opts.TLSClientConfig = tlsRoots(srv)
			} else {
				srv = httptest.NewServer(http.HandlerFunc(big))
				t.Cleanup(srv.Close)
			}
			tr := NewTransport(opts)
			t.Cleanup(func() { tr.Close() })
			resp, err := get(t, tr, srv.URL+tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
				t.Fatal(err)
			}
			copied := make(chan error, 1)
			if tt.copyStuck {
				pr, pw := io.Pipe() // nobody reads pr until the end
				defer pr.Close()
				go func() { _, err := io.Copy(pw, resp.Body); copied <- err }()
			}
			errs := make(chan error, 12)
			for range 12 {
				go func() {
					r, err := get(t, tr, srv.URL+"/hold")
					if err == nil {
						r.Body.Close()
					}
					errs <- err
				}()
			}
			waitFor(t, "12 GETs in flight", func() bool {
				n := 0
				for _, s := range tr.Stats() {
					n += s.InFlight + s.Queued
				}
				return n >= 13 // with the held body's
			})
			closed := make(chan struct{})
			go func() { tr.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(testTimeout):
				t.Fatalf("Close did not return within %v", testTimeout)
			}
			for range 12 {
				if err := <-errs; err == nil {
					t.Error("a GET in flight at Close succeeded")
				}
			}
			if tt.copyStuck {
				return // the body is its io.Copy's
			}
			if tt.want == nil {
				if _, err := io.Copy(io.Discard, resp.Body); err == nil {
					t.Error("the body held at Close was read to its end")
				}
				return
			}
			if _, err := resp.Body.Read(make([]byte, 1000)); !errors.Is(err, tt.want) {
				t.Errorf("Read after Close = %v, want %v", err, tt.want)
			}
		})
	}
}

// countingConn counts the Write calls that reach the network.
type countingConn struct {
	net.Conn
	writes atomic.Int32
	count  *atomic.Int32 // if not nil, counted too (over all connections)
	gate   chan struct{} // if not nil, the first Write waits for it
	once   sync.Once
}

func (c *countingConn) Write(p []byte) (int, error) {
	if c.gate != nil {
		c.once.Do(func() { <-c.gate })
	}
	c.writes.Add(1)
	if c.count != nil {
		c.count.Add(1)
	}
	return c.Conn.Write(p)
}

// TestWritesCoalesce: requests queued behind a write in progress go out in
// one flush.
func TestWritesCoalesce(t *testing.T) {
	verifyNoLeaks(t)
	// No answer before all 8 are written: an early one would empty the
	// FIFO, and a writer that finds the connection not pipelining flushes
	// at once (27 of 1800 stressed runs took 4-8 writes with an echo
	// server).
	srv := newRawServer(t, serveAfterN(8))
	cc := make(chan *countingConn, 1)
	gate := make(chan struct{})
	tr := newTestTransport(t, TransportOptions{
		MaxConnsPerHost: 1, PipelineDepth: 8,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			w := &countingConn{Conn: c, gate: gate}
			cc <- w
			return w, nil
		},
	})
	tr.opts.FixedPolicy = true // the server answers nothing before it has 8 requests
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := get(t, tr, srv.url(fmt.Sprintf("/%d", i)))
			if err != nil {
				t.Error(err)
				return
			}
			readBody(t, resp)
		}()
	}
	c := <-cc
	waitFor(t, "every request written or waiting to write", func() bool {
		// Every request is written into the buffer (in the FIFO) or
		// waiting to write; the first write is held by the gate.
		pc := soleConn(tr, srv)
		if pc == nil {
			return false
		}
		// A writer waiting to flush is counted twice, hence >=.
		return fifoLen(pc)+int(pc.pendingWriters.Load()) >= 8
	})
	close(gate)
	wg.Wait()
	// Without coalescing each request is one write. With it: the held
	// write, at most one flush by a writer that queued during it, and the
	// last writer's.
	if n := c.writes.Load(); n > 3 {
		t.Errorf("8 queued requests took %d writes, want at most 3", n)
	}
}

func TestLoadSpreadsBeforePipelining(t *testing.T) {
	verifyNoLeaks(t)
	release := make(chan struct{})
	srv := holdServer(t, release)
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 5, PipelineDepth: 10})
	key := "http://" + srv.addr
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := get(t, tr, srv.url("/hold")); err == nil {
				readBody(t, resp)
			}
		}()
	}
	waitFor(t, "InFlight == 5", func() bool { s := tr.Stats()[key]; return s.InFlight == 5 })
	if s := tr.Stats()[key]; s.Open != 5 {
		t.Errorf("5 parallel requests with 5 connections allowed: Open = %d, want 5", s.Open)
	}
	close(release)
	wg.Wait()
}

// TestCloseIdleConnectionsCancelsUnwantedDials: as net/http, dials that no
// request waits for are cancelled by CloseIdleConnections, and a request
// that comes later dials afresh.
func TestCloseIdleConnectionsCancelsUnwantedDials(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, serveEcho)
	var slow atomic.Bool
	slow.Store(true)
	dialCancelled := make(chan struct{})
	tr := newTestTransport(t, TransportOptions{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if slow.Load() {
				<-ctx.Done()
				close(dialCancelled)
				return nil, ctx.Err()
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.url("/a"), nil)
	errc := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		errc <- err
	}()
	key := "http://" + srv.addr
	waitFor(t, "Dialing == 1", func() bool { return tr.Stats()[key].Dialing == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled request: err = %v, want context.Canceled", err)
	}
	if d := tr.Stats()[key].Dialing; d != 1 {
		t.Fatalf("after the request gave up: Dialing = %d, want 1 (the dial goes on)", d)
	}
	tr.CloseIdleConnections()
	select {
	case <-dialCancelled:
	case <-time.After(testTimeout):
		t.Fatal("CloseIdleConnections did not cancel a dial nobody waits for")
	}
	slow.Store(false)
	resp, err := get(t, tr, srv.url("/b"))
	if err != nil {
		t.Fatalf("request after CloseIdleConnections: %v", err)
	}
	if got := readBody(t, resp); got != "/b" {
		t.Errorf("body = %q, want /b", got)
	}
}

// TestCancelledRequestAloneClosesConnection: a request cancelled while its
// response is pending, with nothing behind it, closes its connection, as
// net/http does, rather than hold a connection slot until an answer that
// may never come (a long poll).
func TestCancelledRequestAloneClosesConnection(t *testing.T) {
	verifyNoLeaks(t)
	written := make(chan struct{})
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/never" {
				close(written)
				io.Copy(io.Discard, br) // never answer
				return
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1})
	key := "http://" + srv.addr
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.url("/never"), nil)
	errc := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		errc <- err
	}()
	// Cancelled once written: a request cancelled before its write
	// leaves its connection idle, and open.
	<-written
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	waitFor(t, "Open == 0", func() bool { return tr.Stats()[key].Open == 0 })
	// The only connection slot is free again.
	resp, err := get(t, tr, srv.url("/next"))
	if err != nil {
		t.Fatalf("next request: %v", err)
	}
	if got := readBody(t, resp); got != "/next" {
		t.Errorf("next body = %q, want /next", got)
	}
}

// TestZeroTransport: the zero Transport works with the default options, as
// a zero http.Transport does.
func TestZeroTransport(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, serveEcho)
	var tr Transport
	defer tr.Close()
	resp, err := get(t, &tr, srv.url("/zero"))
	if err != nil {
		t.Fatalf("RoundTrip on a zero Transport: %v", err)
	}
	if got := readBody(t, resp); got != "/zero" {
		t.Errorf("body = %q, want /zero", got)
	}
	if s := tr.Stats()["http://"+srv.addr]; s.PipelineDepth != DefaultPipelineDepth {
		t.Errorf("zero Transport: PipelineDepth = %d, want %d", s.PipelineDepth, DefaultPipelineDepth)
	}
}

// TestLearnsRequestsPerConnection: against a server that closes every
// connection after 3 responses (nginx's keepalive_requests), the pool
// learns the budget and stops writing requests that would only be resent.
func TestLearnsRequestsPerConnection(t *testing.T) {
	verifyNoLeaks(t)
	var reads atomic.Int32
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for i := 1; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			reads.Add(1)
			hdr := ""
			if i == 3 {
				hdr = "Connection: close\r\n"
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s", hdr, len(req.URL.Path), req.URL.Path)
			if i == 3 {
				// Count what was written behind the close until the
				// client closes its side, as nginx would read and drop it.
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					reads.Add(1)
				}
			}
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 2, PipelineDepth: 8, HeadOfLineTimeout: -1})
	const n = 300
	getEchoes(t, tr, srv, n)
	// Without the budget, each connection would be given up to 8 requests
	// for 3 answers: about 5 extra reads per connection, 100 connections.
	extra := int(reads.Load()) - n
	t.Logf("server received %d requests for %d GETs", reads.Load(), n)
	if extra > 60 {
		t.Errorf("server received %d requests for %d GETs: %d resent, want the budget learned (at most 60)", reads.Load(), n, extra)
	}
}

// TestRequestBodyWrites: a large request body reaches the connection in
// few writes, as with net/http, not in pieces of the write buffer's size
// (4 KiB: 257 writes for 1 MiB), and arrives whole.
func TestRequestBodyWrites(t *testing.T) {
	verifyNoLeaks(t)
	const size = 1<<20 + 1
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%d %x %v", len(b), crc32.ChecksumIEEE(b), err)
	}))
	defer srv.Close()
	want := fmt.Sprintf("%d %x <nil>", size, crc32.ChecksumIEEE(payload))
	file := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(file, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		body      func() io.Reader
		maxWrites int32
	}{
		// The head and the body's start fill the write buffer; the rest
		// is handed over from the body's memory in pieces of maxBodyWrite.
		{"in memory", func() io.Reader { return bytes.NewReader(payload) }, 2 + size/maxBodyWrite},
		// Read and written in pieces of bodyCopySize.
		{"stream", func() io.Reader { return onlyReader{bytes.NewReader(payload)} }, 2 + size/bodyCopySize + 1},
		// *os.File writes itself with io.Copy, which takes limitWriter's
		// ReadFrom: its pooled buffer, not one of 32 KiB per request.
		{"file", func() io.Reader {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}, 2 + size/bodyCopySize + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var writes atomic.Int32
			tr := newTestTransport(t, TransportOptions{
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					return &countingConn{Conn: c, count: &writes}, nil
				},
			})
			req, _ := http.NewRequest(http.MethodPost, srv.URL, tt.body())
			req.ContentLength = size
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := readBody(t, resp); got != want {
				t.Errorf("server read %q, want %q", got, want)
			}
			if n := writes.Load(); n > tt.maxWrites {
				t.Errorf("%d writes for a %d-byte body, want at most %d", n, size, tt.maxWrites)
			}
		})
	}
}

// TestRequestBodyNothingPastLength: of a body longer than its
// ContentLength, nothing past the length reaches the server (it would be
// read as the next request), whatever the body's kind. The body is longer
// than the write buffer, so that what is past the length would be written.
func TestRequestBodyNothingPastLength(t *testing.T) {
	verifyNoLeaks(t)
	body := "abcd" + strings.Repeat("GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", 300)
	tests := []struct {
		name string
		body func() io.Reader
		// held: a small replayable body is written in one pass with the
		// look at the socket (writeHeld), and held until then.
		held bool
	}{
		{"in memory", func() io.Reader { return strings.NewReader(body) }, false},
		{"in memory held", func() io.Reader { return strings.NewReader(body) }, true},
		{"stream", func() io.Reader { return onlyReader{strings.NewReader(body)} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			extra := make(chan string, 1)
			srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				req, err := http.ReadRequest(br)
				if err == io.EOF {
					extra <- "" // nothing came: the request failed unflushed
					return
				}
				if err != nil {
					extra <- "bad request: " + err.Error()
					return
				}
				io.Copy(io.Discard, req.Body)
				rest, _ := io.ReadAll(br) // until the client closes
				extra <- string(rest)
			})
			tr := newTestTransport(t, TransportOptions{})
			req, _ := http.NewRequest(http.MethodPost, srv.url("/"), tt.body())
			req.ContentLength = 4
			if !tt.held {
				req.GetBody = nil
			}
			_, err := tr.RoundTrip(req)
			// A body in memory fails before a byte is written, and
			// its connection stays: closing it ends the server's read.
			tr.CloseIdleConnections()
			want := fmt.Sprintf("ContentLength=4 with Body length %d", len(body))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want one with %q", err, want)
			}
			if got := <-extra; got != "" {
				t.Errorf("the server got %d bytes past the body: %.40q...", len(got), got)
			}
		})
	}
}

// failingBody yields n zero bytes, then err, through Read or WriteTo.
type failingBody struct {
	n   int
	err error
}

func (f *failingBody) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	m := min(len(p), f.n)
	clear(p[:m])
	f.n -= m
	return m, nil
}

func (f *failingBody) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(make([]byte, f.n))
	f.n -= n
	if err != nil {
		return int64(n), err
	}
	return int64(n), f.err
}

// TestRequestBodyError: a request body that fails midway fails its
// request with the body's own error, as with net/http, whether it is read
// or writes itself (WriteTo); its connection, which holds a partial
// request, is not used again.
func TestRequestBodyError(t *testing.T) {
	verifyNoLeaks(t)
	errBody := errors.New("body failed")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	tests := []struct {
		name string
		body func() io.Reader
	}{
		{"read", func() io.Reader { return onlyReader{&failingBody{n: 100 << 10, err: errBody}} }},
		{"write to", func() io.Reader { return &failingBody{n: 100 << 10, err: errBody} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1})
			// A body error taken for the connection's would wait for an
			// answer the server, which waits for the body, never sends.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, tt.body())
			req.ContentLength = 1 << 20
			if _, err := tr.RoundTrip(req); !errors.Is(err, errBody) {
				t.Errorf("err = %v, want %v", err, errBody)
			}
			resp, err := get(t, tr, srv.URL)
			if err != nil {
				t.Fatalf("GET after the failed body: %v", err)
			}
			readBody(t, resp)
		})
	}
}

// TestAcceptsEventStream: which Accept values ask for server-sent events
// (such a request is not pipelined).
func TestAcceptsEventStream(t *testing.T) {
	tests := []struct {
		values []string
		want   bool
	}{
		{nil, false},
		{[]string{"text/event-stream"}, true},
		{[]string{"Text/Event-Stream"}, true},
		{[]string{"application/json, text/event-stream;q=0.9"}, true},
		{[]string{"application/json", " text/event-stream "}, true},
		{[]string{"text/event-streams"}, false},
		{[]string{"text/*"}, false},
		{[]string{"application/json"}, false},
	}
	for _, tt := range tests {
		if got := acceptsEventStream(tt.values); got != tt.want {
			t.Errorf("acceptsEventStream(%q) = %v, want %v", tt.values, got, tt.want)
		}
	}
}

func TestHeadNearLimits(t *testing.T) {
	fields := func(n, values int) http.Header {
		h := http.Header{}
		for i := range n {
			for range values {
				h.Add(fmt.Sprintf("X-Field-%d", i), "v")
			}
		}
		return h
	}
	tests := []struct {
		name   string
		target string
		header http.Header
		want   bool
	}{
		{"plain", "/", nil, false},
		{"10 fields", "/", fields(10, 1), false},
		{"48 fields", "/", fields(riskyHeadFields, 1), false},
		{"49 fields", "/", fields(riskyHeadFields+1, 1), true},
		{"30 fields of 2 lines", "/", fields(30, 2), true},
		{"a 4 KiB cookie", "/", http.Header{"Cookie": {strings.Repeat("c", 4<<10)}}, false},
		{"a 7 KiB cookie", "/", http.Header{"Cookie": {strings.Repeat("c", 7<<10)}}, true},
		{"a 7 KiB query", "/?q=" + strings.Repeat("q", 7<<10), nil, true},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("GET", "http://example.test"+tt.target, nil)
		if tt.header != nil {
			req.Header = tt.header
		}
		if got := headNearLimits(req); got != tt.want {
			t.Errorf("headNearLimits(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A server that refuses a head it finds too large and closes at once,
// without reading what followed (Varnish's 400 for more than 64 fields),
// resets the connection if a request came behind: the reset can destroy
// the refusal before it is read (RFC 9112 §9.6). Nothing is written behind
// a request whose head comes near such limits (headNearLimits): its caller
// gets the 400, as with net/http, and the GETs around it their answers.
func TestRiskyHeadNotPipelined(t *testing.T) {
	verifyNoLeaks(t)
	var behind atomic.Int32
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if len(req.Header) > riskyHeadFields {
				time.Sleep(2 * time.Millisecond) // let a pipelined request arrive
				if br.Buffered() > 0 {
					behind.Add(1)
				}
				io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
				return // closed, unread bytes and all
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 2, PipelineDepth: 8})
	mustGet(t, tr, srv.url("/first")) // pipelining starts after the first answer
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			path := fmt.Sprintf("/%d", i)
			req, _ := http.NewRequest("GET", srv.url(path), nil)
			big := i%6 == 0
			if big {
				for j := range riskyHeadFields + 10 {
					req.Header.Set(fmt.Sprintf("X-Field-%d", j), "v")
				}
			}
			resp, err := tr.RoundTrip(req)
			switch {
			case err != nil:
				t.Errorf("GET %s (many fields %v): %v", path, big, err)
			case big && resp.StatusCode != http.StatusBadRequest:
				t.Errorf("GET %s with many fields: status %d, want 400", path, resp.StatusCode)
			case !big && resp.StatusCode != http.StatusOK:
				t.Errorf("GET %s: status %d, want 200", path, resp.StatusCode)
			}
			if err == nil {
				readBody(t, resp)
			}
		})
	}
	waitOrFail(t, &wg, "GETs")
	if n := behind.Load(); n != 0 {
		t.Errorf("%d requests were written behind one with many fields, want none", n)
	}
}
