package pipelined

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// These tests check that responses stream as they do through net/http:
// headers at once, body bytes as they arrive, and cancellation reaching
// the server. None measures time: each server waits for the client to
// prove it received something before it sends more, so a transport that
// holds bytes back deadlocks the exchange and fails after testTimeout.

// sseHandler writes an event, then waits for next before writing another,
// n times; it reports on done when it returns.
func sseHandler(n int, next <-chan struct{}, done chan<- error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		var err error
		for i := range n {
			fmt.Fprintf(w, "data: %d\n\n", i)
			if err = rc.Flush(); err != nil {
				break
			}
			select {
			case <-next:
			case <-r.Context().Done():
				err = r.Context().Err()
			case <-time.After(testTimeout):
				err = fmt.Errorf("event %d: client did not confirm", i)
			}
			if err != nil {
				break
			}
		}
		if done != nil {
			done <- err
		}
	}
}

// readEvent reads one "data: ..." event.
func readEvent(br *bufio.Reader) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	if _, err := br.ReadString('\n'); err != nil { // the blank line
		return "", err
	}
	return strings.TrimSpace(line), nil
}

func TestSSEThroughReverseProxy(t *testing.T) {
	verifyNoLeaks(t)
	next := make(chan struct{})
	done := make(chan error, 1)
	backend := httptest.NewServer(sseHandler(3, next, done))
	defer backend.Close()
	u, _ := url.Parse(backend.URL)
	tr := newTestTransport(t, TransportOptions{})
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.Transport = tr
	proxy.FlushInterval = -1
	front := httptest.NewServer(proxy)
	defer front.Close()

	resp, err := http.Get(front.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		ev, err := readEvent(br)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := fmt.Sprintf("data: %d", i); ev != want {
			t.Fatalf("event %d = %q, want %q", i, ev, want)
		}
		next <- struct{}{} // only now does the backend send the next one
	}
	if err := <-done; err != nil {
		t.Errorf("backend: %v", err)
	}
}

// TestHeadersBeforeBody: a 1 KiB body that trickles: the response (its
// headers and first byte) reaches the caller before the rest is sent.
func TestHeadersBeforeBody(t *testing.T) {
	verifyNoLeaks(t)
	gotHeaders := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1024")
		w.Write([]byte{'x'})
		http.NewResponseController(w).Flush()
		select {
		case <-gotHeaders:
		case <-time.After(testTimeout):
		}
		w.Write([]byte(strings.Repeat("y", 1023)))
	}))
	defer srv.Close()
	tr := newTestTransport(t, TransportOptions{})
	resp, err := get(t, tr, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	var first [1]byte
	if _, err := io.ReadFull(resp.Body, first[:]); err != nil {
		t.Fatal(err)
	}
	close(gotHeaders)
	if rest := readBody(t, resp); len(rest) != 1023 {
		t.Errorf("body: %d more bytes, want 1023", len(rest))
	}
}

// TestCancelReachesServer: a caller that leaves a stream (cancels its
// request, or closes the body) closes the connection, so the server's
// handler sees its request's context done.
func TestCancelReachesServer(t *testing.T) {
	for _, how := range []string{"cancel", "close"} {
		t.Run(how, func(t *testing.T) {
			verifyNoLeaks(t)
			done := make(chan error, 1)
			srv := httptest.NewServer(sseHandler(1000, nil, done))
			defer srv.Close()
			tr := newTestTransport(t, TransportOptions{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := readEvent(bufio.NewReader(resp.Body)); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if how == "cancel" {
				cancel()
			} else {
				resp.Body.Close()
			}
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("handler ended without seeing the client leave")
				}
				t.Logf("handler saw the client leave after %v", time.Since(start))
			case <-time.After(testTimeout):
				t.Fatalf("handler still streaming %v after the client left", testTimeout)
			}
			resp.Body.Close()
		})
	}
}

// TestGetBesideOpenStreams: with 8 event streams open to a host, a plain
// GET to it is served while they stay open (it must not be queued behind
// one of them).
func TestGetBesideOpenStreams(t *testing.T) {
	verifyNoLeaks(t)
	stop := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: hello\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "plain") })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defer close(stop)
	tr := newTestTransport(t, TransportOptions{})
	var bodies []io.Closer
	defer func() {
		for _, b := range bodies {
			b.Close()
		}
	}()
	for i := range 8 {
		resp, err := get(t, tr, srv.URL+"/events")
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		bodies = append(bodies, resp.Body)
		if _, err := readEvent(bufio.NewReader(resp.Body)); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/plain", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("GET /plain beside 8 open streams: %v (stats %+v)", err, tr.Stats())
	}
	if got := readBody(t, resp); got != "plain" {
		t.Errorf("GET /plain = %q", got)
	}
}

// TestFullDuplexBody: the response is returned while the request body is
// still being written, and both stream: a line-by-line echo over io.Pipe.
func TestFullDuplexBody(t *testing.T) {
	verifyNoLeaks(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		echoLines(w, r, "")
	}))
	defer srv.Close()
	tr := newTestTransport(t, TransportOptions{})
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, pr)
	ch := roundTripAsync(tr, req)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.WriteString(pw, "ping 0\n")
	}()
	var res rtResult
	select {
	case res = <-ch:
	case <-time.After(testTimeout):
		pw.Close()
		t.Fatal("RoundTrip did not return while the request body was open")
	}
	wg.Wait()
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.resp.Body.Close()
	br := bufio.NewReader(res.resp.Body)
	for i := range 3 {
		if i > 0 {
			fmt.Fprintf(pw, "ping %d\n", i)
		}
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("echo %d: %v", i, err)
		}
		if want := fmt.Sprintf("echo ping %d\n", i); line != want {
			t.Fatalf("echo %d = %q, want %q", i, line, want)
		}
	}
	pw.Close()
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Errorf("after the body ended: %q", rest)
	}
}

// TestNothingBehindUnforeseenStreams: beside a stream nobody announced (a
// watch, server-sent events without Accept, NDJSON, a long poll, a large
// download), first time and started again, a burst of GETs to the same
// host is never written on the stream's connection: its route is not
// known to answer bounded and quickly (internal/model), so nothing waits behind
// it, and the server receives each request as often as it was sent. The routes of the
// GETs carry ids (/items/<n>) and are known from a few answers before.
func TestNothingBehindUnforeseenStreams(t *testing.T) {
	for _, tt := range []struct {
		name, path string
		serve      func(w http.ResponseWriter, r *http.Request, stop <-chan struct{})
	}{
		{"sse without accept", "/events", func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: 0\n\n")
			http.NewResponseController(w).Flush()
			<-stop
		}},
		{"ndjson watch", "/api/v1/pods?watch=1", func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			io.WriteString(w, "{}\n")
			http.NewResponseController(w).Flush()
			<-stop
		}},
		{"log follow", "/api/v1/namespaces/ns/pods/web-1/log?follow=true", func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
			io.WriteString(w, "line\n")
			http.NewResponseController(w).Flush()
			<-stop
		}},
		{"large download", "/file.iso", func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
			w.Header().Set("Content-Length", fmt.Sprint(4<<20))
			w.Write(make([]byte, 64<<10))
			http.NewResponseController(w).Flush()
			<-stop
		}},
		{"long poll", "/poll?since=0", func(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
			<-stop
			io.WriteString(w, "{}")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]int{}
			stop := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen[r.URL.RequestURI()]++
				mu.Unlock()
				if strings.HasPrefix(r.URL.Path, "/items/") {
					io.WriteString(w, r.URL.Path)
					return
				}
				tt.serve(w, r, stop)
			}))
			defer srv.Close()
			defer close(stop) // before srv.Close: the handlers return
			tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 4, PipelineConnsPerHost: 2, PipelineDepth: 4})
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			getItem := func(i int, conns chan<- net.Conn) error {
				trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { conns <- info.Conn }}
				req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, fmt.Sprintf("%s/items/%d", srv.URL, i), nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				_, err = io.Copy(io.Discard, resp.Body)
				return err
			}
			sink := make(chan net.Conn, 100)
			for i := range 3 {
				if err := getItem(1000+i, sink); err != nil {
					t.Fatal(err)
				}
			}
			for round := range 2 { // the stream's route unseen, then known
				streamConn := make(chan net.Conn, 1)
				trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { streamConn <- info.Conn }}
				sctx, scancel := context.WithCancel(httptrace.WithClientTrace(ctx, trace))
				req, _ := http.NewRequestWithContext(sctx, http.MethodGet, srv.URL+tt.path, nil)
				stream := roundTripAsync(tr, req)
				sc := <-streamConn
				waitFor(t, "the server has the stream's request", func() bool {
					mu.Lock()
					defer mu.Unlock()
					return seen[tt.path] == round+1
				})
				var wg sync.WaitGroup
				conns := make(chan net.Conn, 10)
				errs := make(chan error, 10)
				for i := range 10 {
					wg.Go(func() {
						if err := getItem(round*100+i, conns); err != nil {
							errs <- err
						}
					})
				}
				wg.Wait()
				close(conns)
				close(errs)
				for err := range errs {
					t.Errorf("round %d: GET beside the stream: %v", round, err)
				}
				for c := range conns {
					if c == sc {
						t.Errorf("round %d: a GET was written on the stream's connection", round)
					}
				}
				scancel() // the caller stops the stream
				if r := <-stream; r.err == nil {
					r.resp.Body.Close()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for uri, n := range seen {
				want := 1
				if uri == tt.path {
					want = 2 // once a round
				}
				if n != want {
					t.Errorf("the server received %s %d times, want %d", uri, n, want)
				}
			}
		})
	}
}

// TestFixedPolicyPlacement: under FixedPolicy the same sequence of
// requests gets the same placement (the number of requests in flight on
// its connection when it was assigned) whatever the host answered before:
// streams, long polls and quick answers alike teach nothing.
func TestFixedPolicyPlacement(t *testing.T) {
	placements := func(history string) []int {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold/1" {
				<-release
			}
			io.WriteString(w, r.URL.Path)
		}))
		defer srv.Close()
		var mu sync.Mutex
		var got []int
		obs := &Observer{RequestAssigned: func(e RequestEvent) {
			if e.Request.URL.Path == "/hold/1" {
				mu.Lock()
				got = append(got, e.InFlight)
				mu.Unlock()
			}
		}}
		tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 2, PipelineDepth: 4, FixedPolicy: true, Observer: obs})
		for _, path := range strings.Fields(history) {
			if _, err := getBody(context.Background(), tr, srv.URL+path); err != nil {
				t.Fatal(err)
			}
		}
		// Two connections busy with held heads, then six more requests,
		// one at a time, each assigned before the next is sent.
		var wg sync.WaitGroup
		defer func() { close(release); wg.Wait() }()
		for i := range 8 {
			n := len(got)
			wg.Go(func() {
				if _, err := getBody(context.Background(), tr, srv.URL+"/hold/1"); err != nil {
					t.Error(err)
				}
			})
			waitFor(t, fmt.Sprintf("request %d assigned", i), func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(got) > n
			})
		}
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
	want := placements("")
	for _, history := range []string{"/a /b /c", "/hold/2 /x?watch=1 /y"} {
		if got := placements(history); !slices.Equal(got, want) {
			t.Errorf("after %q: placements %v, want %v (as on a fresh host)", history, got, want)
		}
	}
	if !slices.Equal(want, []int{1, 1, 2, 2, 3, 3, 4, 4}) {
		t.Errorf("placements %v, want two connections filled to depth 4 in turn", want)
	}
}

// TestFullDuplexBodyWrittenLater: a request body that is a stream its
// caller writes only after reading the first bytes of the response (a
// full-duplex echo, a client stream over HTTP/1.1) starts at once, as with
// net/http: the request head reaches the server before the body is
// copied, on a new connection and on a reused one, chunked or of a
// declared length. net/http's Transport runs the same rows.
func TestFullDuplexBodyWrittenLater(t *testing.T) {
	verifyNoLeaks(t)
	const ping = "ping\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, "warm")
			return
		}
		echoLines(w, r, "hello\n")
	}))
	defer srv.Close()
	tests := []struct {
		name   string
		warm   string // a request sent first on the connection: "", "GET" or "POST"
		length int64  // the body's declared length; 0: chunked
	}{
		{"new connection, chunked", "", 0},
		{"new connection, declared length", "", int64(len(ping))},
		{"reused after a GET, chunked", "GET", 0},
		{"reused after a GET, declared length", "GET", int64(len(ping))},
		{"reused after a POST, chunked", "POST", 0},
	}
	for _, rt := range []struct {
		name string
		new  func() http.RoundTripper
	}{
		{"pipelined", func() http.RoundTripper { return NewTransport(TransportOptions{}) }},
		{"net/http", func() http.RoundTripper { return &http.Transport{} }},
	} {
		for _, tt := range tests {
			t.Run(rt.name+"/"+tt.name, func(t *testing.T) {
				tr := rt.new()
				defer tr.(interface{ CloseIdleConnections() }).CloseIdleConnections()
				if c, ok := tr.(*Transport); ok {
					defer c.Close()
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				switch tt.warm {
				case "GET":
					if _, err := getBody(ctx, tr, srv.URL); err != nil {
						t.Fatal(err)
					}
				case "POST":
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(ping))
					resp, err := tr.RoundTrip(req)
					if err != nil {
						t.Fatal(err)
					}
					if got := readBody(t, resp); got != "hello\necho "+ping {
						t.Fatalf("warm-up POST = %q", got)
					}
				}
				pr, pw := io.Pipe()
				defer pw.Close()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, pr)
				req.ContentLength = tt.length
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatalf("RoundTrip with the body unwritten: %v", err)
				}
				defer resp.Body.Close()
				br := bufio.NewReader(resp.Body)
				if line, err := br.ReadString('\n'); line != "hello\n" {
					t.Fatalf("first line = %q, %v; want %q", line, err, "hello\n")
				}
				io.WriteString(pw, ping)
				if line, err := br.ReadString('\n'); line != "echo "+ping {
					t.Fatalf("echo = %q, %v; want %q", line, err, "echo "+ping)
				}
				pw.Close()
				if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
					t.Errorf("after the body ended: %q, %v", rest, err)
				}
			})
		}
	}
}

// readSizeConn records the largest buffer a Read of the connection was
// given.
type readSizeConn struct {
	net.Conn
	largest atomic.Int64
}

func (c *readSizeConn) Read(p []byte) (int, error) {
	for {
		m := c.largest.Load()
		if int64(len(p)) <= m || c.largest.CompareAndSwap(m, int64(len(p))) {
			break
		}
	}
	return c.Conn.Read(p)
}

// TestStreamReadsIntoCallerBuffer: a stream (a body longer than
// maxBufferedBody, or one that ends with its connection) read with a
// buffer at least as large as the body's own is read from the connection
// straight into the caller's buffer, not copied through the body's 64 KiB
// by the connection's reader; the bytes arrive whole and in order through
// a mix of small reads (through the body's buffer) and large ones, for
// chunked streams too (with their trailers).
func TestStreamReadsIntoCallerBuffer(t *testing.T) {
	const size = 4 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i % 251)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", strconv.Itoa(size))
			w.Write(data)
		case "/chunked": // 100 KiB chunks, and a trailer
			w.Header().Set("Trailer", "X-End")
			for b := data; len(b) > 0; b = b[min(len(b), 100<<10):] {
				w.Write(b[:min(len(b), 100<<10)])
				http.NewResponseController(w).Flush()
			}
			w.Header().Set("X-End", "yes")
		case "/close":
			c, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			bw.WriteString("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
			bw.Write(data)
			bw.Flush()
		}
	}))
	defer srv.Close()
	const large = 4 * maxReadAhead
	tests := []struct {
		path   string
		direct bool // reads from the connection take the caller's whole buffer
	}{
		{"/length", true},
		{"/close", true},
		{"/chunked", false}, // a read takes at most a chunk (readRaw)
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			verifyNoLeaks(t)
			var conn *readSizeConn
			tr := newTestTransport(t, TransportOptions{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var d net.Dialer
				c, err := d.DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				conn = &readSizeConn{Conn: c}
				return conn, nil
			}})
			resp, err := get(t, tr, srv.URL+tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got := make([]byte, 0, size)
			buf := make([]byte, large)
			for i := 0; ; i++ {
				p := buf
				if i%3 == 1 {
					p = buf[:1000] // through the body's buffer
				}
				n, err := resp.Body.Read(p)
				got = append(got, p[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("after %d bytes: %v", len(got), err)
				}
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("read %d bytes, not the %d sent", len(got), size)
			}
			if tt.path == "/chunked" && resp.Trailer.Get("X-End") != "yes" {
				t.Errorf("trailer %v, want X-End: yes", resp.Trailer)
			}
			if l := conn.largest.Load(); tt.direct && l < large {
				t.Errorf("largest read from the connection: %d bytes, want the caller's %d", l, large)
			}
		})
	}
}

// echoLines answers a full-duplex request: greeting (or, if empty, the
// status alone) at once, then "echo " and each line of the request body
// as it arrives.
func echoLines(w http.ResponseWriter, r *http.Request, greeting string) {
	rc := http.NewResponseController(w)
	rc.EnableFullDuplex()
	if greeting == "" {
		w.WriteHeader(http.StatusOK)
	} else {
		io.WriteString(w, greeting)
	}
	rc.Flush()
	br := bufio.NewReader(r.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		io.WriteString(w, "echo "+line)
		rc.Flush()
	}
}
