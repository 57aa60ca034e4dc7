package pipelined

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// This file tests the behaviours of net/http's Transport that callers rely
// on (see differential_test.go for the side-by-side comparison).

// parReadHead reads one request head and returns its lines.
func parReadHead(br *bufio.Reader) ([]string, error) {
	var lines []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return lines, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			return lines, nil
		}
		lines = append(lines, line)
	}
}

func parCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestRoundTripLeavesRequestUnchanged(t *testing.T) {
	srv := httptest.NewServer(diffHandler())
	defer srv.Close()
	tr := newTestTransport(t, TransportOptions{ExpectContinueTimeout: time.Minute})
	mk := func(method, path string, body string, h http.Header) func(ctx context.Context) *http.Request {
		return func(ctx context.Context) *http.Request {
			var rd io.Reader
			if body != "" {
				rd = strings.NewReader(body)
			}
			req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, rd)
			for k, v := range h {
				req.Header[k] = v
			}
			return req
		}
	}
	tests := []struct {
		name string
		req  func(ctx context.Context) *http.Request
	}{
		{"GET gzip", mk("GET", "/gzip", "", nil)},
		{"GET headers", mk("GET", "/echo", "", http.Header{"X-A": {"1", "2"}, "User-Agent": {"me"}})},
		{"HEAD", mk("HEAD", "/echo", "", nil)},
		{"POST", mk("POST", "/echo", "body", nil)},
		{"PUT expect", mk("PUT", "/echo", "body", http.Header{"Expect": {"100-continue"}})},
		{"close", mk("GET", "/echo", "", http.Header{"Connection": {"close"}})},
		{"trailers", func(ctx context.Context) *http.Request {
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/echo", onlyReader{strings.NewReader("x")})
			req.Trailer = http.Header{"X-T": {"v"}}
			return req
		}},
		{"user info", func(ctx context.Context) *http.Request {
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/echo", nil)
			req.URL.User = url.UserPassword("u", "p")
			return req
		}},
	}
	opts := []cmp.Option{
		cmpopts.IgnoreUnexported(http.Request{}, url.Userinfo{}),
		cmpopts.IgnoreFields(http.Request{}, "Body", "GetBody"),
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := parCtx(t)
			req := tt.req(ctx)
			before := req.Clone(ctx)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip(%s) = %v", tt.name, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.Request != req {
				t.Errorf("resp.Request = %p, want the caller's request %p", resp.Request, req)
			}
			if d := cmp.Diff(before, req, opts...); d != "" {
				t.Errorf("RoundTrip(%s) modified the request (-before +after):\n%s", tt.name, d)
			}
		})
	}
}

func gzipBytes(s string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(s))
	zw.Close()
	return buf.Bytes()
}

func TestGzip(t *testing.T) {
	payload := strings.Repeat("gzip me ", 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Got-Accept-Encoding", r.Header.Get("Accept-Encoding"))
		switch r.URL.Path {
		case "/bad":
			w.Header().Set("Content-Encoding", "gzip")
			io.WriteString(w, "this is not gzip")
		case "/large":
			// A compressed body larger than the read-ahead: it streams.
			w.Header().Set("Content-Encoding", "gzip")
			w.Write(gzipBytes(randomText(200 << 10)))
		default:
			if r.Header.Get("Accept-Encoding") == "gzip" {
				w.Header().Set("Content-Encoding", "gzip")
				w.Write(gzipBytes(payload))
				return
			}
			io.WriteString(w, payload)
		}
	}))
	defer srv.Close()

	tests := []struct {
		name         string
		opts         TransportOptions
		path         string
		header       http.Header
		wantAE       string
		uncompressed bool
		wantBody     string // "" means the payload
		wantReadErr  bool
	}{
		{name: "decoded", path: "/", wantAE: "gzip", uncompressed: true},
		{name: "DisableCompression", opts: TransportOptions{DisableCompression: true}, path: "/", wantAE: ""},
		{name: "caller asked", path: "/", header: http.Header{"Accept-Encoding": {"gzip"}}, wantAE: "gzip",
			wantBody: string(gzipBytes(payload))},
		{name: "range", path: "/", header: http.Header{"Range": {"bytes=0-"}}, wantAE: ""},
		{name: "lazy error", path: "/bad", wantAE: "gzip", uncompressed: true, wantReadErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTestTransport(t, tt.opts)
			req, _ := http.NewRequestWithContext(parCtx(t), "GET", srv.URL+tt.path, nil)
			for k, v := range tt.header {
				req.Header[k] = v
			}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip = %v (an invalid gzip stream must fail on Read, not before)", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if got := resp.Header.Get("X-Got-Accept-Encoding"); got != tt.wantAE {
				t.Errorf("server saw Accept-Encoding %q, want %q", got, tt.wantAE)
			}
			if resp.Uncompressed != tt.uncompressed {
				t.Errorf("Uncompressed = %v, want %v", resp.Uncompressed, tt.uncompressed)
			}
			if tt.wantReadErr {
				if err == nil {
					t.Errorf("reading an invalid gzip body succeeded, want an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadAll = %v", err)
			}
			want := tt.wantBody
			if want == "" {
				want = payload
			}
			if string(body) != want {
				t.Errorf("body = %d bytes, want %d", len(body), len(want))
			}
			if tt.uncompressed && (resp.ContentLength != -1 || resp.Header["Content-Encoding"] != nil || resp.Header["Content-Length"] != nil) {
				t.Errorf("decoded response: ContentLength %d, header %v, want -1 and no Content-Encoding/Length",
					resp.ContentLength, resp.Header)
			}
		})
	}

	t.Run("close releases the connection", func(t *testing.T) {
		tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1})
		for i := range 3 {
			req, _ := http.NewRequestWithContext(parCtx(t), "GET", srv.URL+"/large", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip #%d = %v", i, err)
			}
			if !resp.Uncompressed {
				t.Fatalf("Uncompressed = false, want true")
			}
			var one [1]byte
			io.ReadFull(resp.Body, one[:])
			// Closing early must reach the streaming body underneath, or
			// the single connection would stay lent out and the next
			// request would hang.
			resp.Body.Close()
			if _, err := resp.Body.Read(one[:]); err == nil {
				t.Errorf("Read after Close succeeded, want an error")
			}
		}
	})
}

// randomText is incompressible enough to stay large once gzipped.
func randomText(n int) string {
	var b strings.Builder
	x := uint32(1)
	for b.Len() < n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b.WriteByte(byte('a' + x%26))
	}
	return b.String()
}

type parCloseRecorder struct {
	io.Reader
	closed bool
}

func (c *parCloseRecorder) Close() error { c.closed = true; return nil }

func TestGzipReaderClosesUnderlying(t *testing.T) {
	under := &parCloseRecorder{Reader: bytes.NewReader(gzipBytes("hi"))}
	resp := &http.Response{Body: under, ContentLength: 10, Header: http.Header{
		"Content-Encoding": {"GZip"}, "Content-Length": {"10"}}}
	decodeGzip(&request{addGzip: true, method: "GET"}, resp)
	if !resp.Uncompressed {
		t.Fatalf("decodeGzip did not decode a Content-Encoding: GZip response")
	}
	if err := resp.Body.Close(); err != nil || !under.closed {
		t.Errorf("Close() = %v, underlying closed = %v, want nil, true", err, under.closed)
	}
}

func TestExpectContinue(t *testing.T) {
	t.Run("100 then body", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body) // reading makes net/http's server send 100
			w.Write(b)
		}))
		defer srv.Close()
		tr := newTestTransport(t, TransportOptions{ExpectContinueTimeout: time.Hour})
		var mu sync.Mutex
		var events []string
		ev := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
		ctx := httptrace.WithClientTrace(parCtx(t), &httptrace.ClientTrace{
			WroteHeaders:    func() { ev("WroteHeaders") },
			Wait100Continue: func() { ev("Wait100Continue") },
			Got100Continue:  func() { ev("Got100Continue") },
			Got1xxResponse:  func(code int, _ textproto.MIMEHeader) error { ev(fmt.Sprint("Got1xx ", code)); return nil },
			WroteRequest:    func(httptrace.WroteRequestInfo) { ev("WroteRequest") },
		})
		req, _ := http.NewRequestWithContext(ctx, "PUT", srv.URL, strings.NewReader("the body"))
		req.Header.Set("Expect", "100-continue")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "the body" {
			t.Errorf("body = %q, want %q", body, "the body")
		}
		mu.Lock()
		defer mu.Unlock()
		// The writer's and the reader's hooks run on different goroutines:
		// only the orders each one guarantees are checked.
		pos := map[string]int{}
		for i, e := range events {
			pos[e] = i + 1
		}
		for _, pair := range [][2]string{
			{"WroteHeaders", "Wait100Continue"}, {"Wait100Continue", "WroteRequest"},
			{"Got100Continue", "Got1xx 100"}, {"Got100Continue", "WroteRequest"},
		} {
			if pos[pair[0]] == 0 || pos[pair[1]] == 0 || pos[pair[0]] > pos[pair[1]] {
				t.Errorf("trace events %q: want %s before %s", events, pair[0], pair[1])
			}
		}
	})

	// expectServer answers the first request head with reply (after
	// waiting for the body if waitBody), then reports what it received
	// after the head.
	type outcome struct {
		afterHead string
	}
	expectServer := func(t *testing.T, reply string, readBodyFirst bool, out chan<- outcome) string {
		return newRawServer(t, func(c net.Conn, br *bufio.Reader) {
			lines, err := parReadHead(br)
			if err != nil {
				return
			}
			n := 0
			for _, l := range lines {
				if v, ok := strings.CutPrefix(strings.ToLower(l), "content-length: "); ok {
					fmt.Sscan(v, &n)
				}
			}
			body := make([]byte, n)
			if readBodyFirst {
				io.ReadFull(br, body)
				io.WriteString(c, reply)
				out <- outcome{string(body)}
				return
			}
			io.WriteString(c, reply)
			c.SetReadDeadline(time.Now().Add(time.Minute))
			rest, _ := io.ReadAll(io.LimitReader(br, int64(n)))
			out <- outcome{string(rest)}
		}).url("")
	}
	tests := []struct {
		name     string
		timeout  time.Duration
		reply    string
		bodyRead bool // the server waits for the body before replying
		wantSent string
		reqClose bool
	}{
		// No 100 ever: the body goes after ExpectContinueTimeout.
		{name: "timeout sends body", timeout: 10 * time.Millisecond, bodyRead: true,
			reply: "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", wantSent: "payload"},
		// Zero: the body goes at once.
		{name: "zero timeout", timeout: 0, bodyRead: true,
			reply: "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", wantSent: "payload"},
		// A final status first, connection kept: the body is sent so the
		// connection stays in sync.
		{name: "final status keeps conn", timeout: time.Hour,
			reply: "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n", wantSent: "payload"},
		// A final status with Connection: close: the body is not sent.
		{name: "final status closes", timeout: time.Hour,
			reply: "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", wantSent: ""},
		{name: "request close", timeout: time.Hour, reqClose: true,
			reply: "HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n", wantSent: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make(chan outcome, 1)
			u := expectServer(t, tt.reply, tt.bodyRead, out)
			tr := newTestTransport(t, TransportOptions{ExpectContinueTimeout: tt.timeout})
			req, _ := http.NewRequestWithContext(parCtx(t), "PUT", u, strings.NewReader("payload"))
			req.Header.Set("Expect", "100-continue")
			req.Close = tt.reqClose
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if tt.wantSent == "" {
				// The connection closes: the server reads EOF.
				tr.CloseIdleConnections()
			}
			select {
			case o := <-out:
				if o.afterHead != tt.wantSent {
					t.Errorf("server received body %q, want %q", o.afterHead, tt.wantSent)
				}
			case <-time.After(time.Minute):
				t.Fatal("server never finished")
			}
		})
	}
}

func TestInterimResponses(t *testing.T) {
	// Three 1xx responses of ~600 bytes each, then a final response; the
	// limit (1000 bytes) holds each head but not their sum.
	big := strings.Repeat("h", 560)
	u := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := parReadHead(br); err != nil {
				return
			}
			for range 3 {
				fmt.Fprintf(c, "HTTP/1.1 103 Early Hints\r\nLink: <%s>\r\n\r\n", big)
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	}).url("")
	tr := newTestTransport(t, TransportOptions{MaxResponseHeaderBytes: 1000})

	var codes []int
	ctx := httptrace.WithClientTrace(parCtx(t), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			if h.Get("Link") != "<"+big+">" {
				t.Errorf("Got1xxResponse header Link = %.20q..., want the hint", h.Get("Link"))
			}
			codes = append(codes, code)
			return nil
		},
	})
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("RoundTrip with Got1xxResponse = %v, want the limit to reset per 1xx", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || len(codes) != 3 {
		t.Errorf("status %d, 1xx seen %v, want 200 and three 103", resp.StatusCode, codes)
	}

	req, _ = http.NewRequestWithContext(parCtx(t), "GET", u, nil)
	if resp, err := tr.RoundTrip(req); err == nil {
		resp.Body.Close()
		t.Errorf("RoundTrip without Got1xxResponse succeeded, want the header limit to cover all 1xx heads")
	}

	// A Got1xxResponse error aborts the request.
	stop := errors.New("stop here")
	ctx = httptrace.WithClientTrace(parCtx(t), &httptrace.ClientTrace{
		Got1xxResponse: func(int, textproto.MIMEHeader) error { return stop },
	})
	req, _ = http.NewRequestWithContext(ctx, "GET", u, nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, stop) {
		t.Errorf("RoundTrip with failing Got1xxResponse = %v, want %v", err, stop)
	}
}

func TestSwitchingProtocols(t *testing.T) {
	u := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		lines, err := parReadHead(br)
		if err != nil {
			return
		}
		if !containsLine(lines, "Upgrade: echo") {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		io.Copy(c, br) // echo until the client closes
	}).url("")
	tr := newTestTransport(t, TransportOptions{})
	req, _ := http.NewRequestWithContext(parCtx(t), "GET", u, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status = %d, want 101", resp.StatusCode)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatalf("101 body is %T, want an io.ReadWriteCloser", resp.Body)
	}
	defer rwc.Close()
	for _, msg := range []string{"hello", "again"} {
		if _, err := io.WriteString(rwc, msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(rwc, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo = %q, %v, want %q", buf, err, msg)
		}
	}
	for k, s := range tr.Stats() {
		if s.Open != 0 || s.InFlight != 0 {
			t.Errorf("Stats()[%s] = %+v, want the upgraded connection out of the pool", k, s)
		}
	}
}

func containsLine(lines []string, want string) bool {
	for _, l := range lines {
		if strings.EqualFold(l, want) {
			return true
		}
	}
	return false
}

func TestCONNECTStreams(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "CONNECT" {
			http.Error(w, "want CONNECT", 400)
			return
		}
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 200 OK\r\n\r\n")
		// Echo line by line: each answer needs the client's line to have
		// been sent as written, not buffered until the body ends.
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			io.WriteString(c, "echo: "+line)
		}
	}))
	defer srv.Close()
	tr := newTestTransport(t, TransportOptions{})
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(parCtx(t), "CONNECT", srv.URL, pr)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT status = %d, want 200", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	for _, msg := range []string{"one\n", "two\n"} {
		if _, err := io.WriteString(pw, msg); err != nil {
			t.Fatal(err)
		}
		got, err := br.ReadString('\n')
		if err != nil || got != "echo: "+msg {
			t.Fatalf("tunnel read = %q, %v, want %q", got, err, "echo: "+msg)
		}
	}
	pw.Close()
}

// holdServer answers every request once release is closed.
func parHoldServer(t *testing.T) (string, chan struct{}) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "done")
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return srv.URL, release
}

func TestErrorsMatchNetHTTP(t *testing.T) {
	u, _ := parHoldServer(t)
	tr := newTestTransport(t, TransportOptions{})

	t.Run("cancel cause", func(t *testing.T) {
		cause := errors.New("my cause")
		ctx, cancel := context.WithCancelCause(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		errc := make(chan error, 1)
		go func() {
			_, err := tr.RoundTrip(req)
			errc <- err
		}()
		cancel(cause)
		if err := <-errc; !errors.Is(err, cause) {
			t.Errorf("RoundTrip after cancel(cause) = %v, want %v", err, cause)
		}
	})
	t.Run("context deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
		_, err := tr.RoundTrip(req)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("RoundTrip past deadline = %v, want context.DeadlineExceeded", err)
		}
	})
	t.Run("client timeout", func(t *testing.T) {
		c := &http.Client{Transport: tr, Timeout: 20 * time.Millisecond}
		_, err := c.Get(u)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("Client.Get past Client.Timeout = %v, want a net.Error with Timeout() true", err)
		}
	})
	t.Run("response header timeout", func(t *testing.T) {
		tr := newTestTransport(t, TransportOptions{ResponseHeaderTimeout: 20 * time.Millisecond})
		req, _ := http.NewRequestWithContext(parCtx(t), "GET", u, nil)
		_, err := tr.RoundTrip(req)
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("RoundTrip past ResponseHeaderTimeout = %v, want a timeout net.Error matching DeadlineExceeded", err)
		}
	})
	t.Run("validation", func(t *testing.T) {
		for _, tc := range []struct {
			mod  func(r *http.Request)
			want string
		}{
			{func(r *http.Request) { r.URL.Scheme = "ftp" }, `unsupported protocol scheme "ftp"`},
			{func(r *http.Request) { r.URL.Host = "" }, "http: no Host in request URL"},
			{func(r *http.Request) { r.Header = nil }, "http: nil Request.Header"},
			{func(r *http.Request) { r.URL = nil }, "http: nil Request.URL"},
			{func(r *http.Request) { r.Header.Set("X", "a\x00b") }, `net/http: invalid header field value for "X"`},
			{func(r *http.Request) { r.Method = "BAD METHOD" }, `net/http: invalid method "BAD METHOD"`},
		} {
			for _, rt := range []http.RoundTripper{&http.Transport{}, tr} {
				req, _ := http.NewRequest("GET", u, nil)
				tc.mod(req)
				_, err := rt.RoundTrip(req)
				if err == nil || err.Error() != tc.want {
					t.Errorf("%T.RoundTrip = %v, want %q", rt, err, tc.want)
				}
			}
		}
	})
}

func TestClientTraceHooks(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	tr := newTestTransport(t, TransportOptions{})

	type rec struct {
		mu     sync.Mutex
		events []string
		got    httptrace.GotConnInfo
		put    chan error
	}
	run := func() *rec {
		r := &rec{put: make(chan error, 1)}
		ev := func(s string) { r.mu.Lock(); r.events = append(r.events, s); r.mu.Unlock() }
		ctx := httptrace.WithClientTrace(parCtx(t), &httptrace.ClientTrace{
			GetConn:              func(string) { ev("GetConn") },
			ConnectStart:         func(string, string) { ev("ConnectStart") },
			ConnectDone:          func(string, string, error) { ev("ConnectDone") },
			GotConn:              func(i httptrace.GotConnInfo) { ev("GotConn"); r.got = i },
			WroteHeaders:         func() { ev("WroteHeaders") },
			WroteRequest:         func(httptrace.WroteRequestInfo) { ev("WroteRequest") },
			GotFirstResponseByte: func() { ev("GotFirstResponseByte") },
			PutIdleConn:          func(err error) { r.put <- err },
		})
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		select {
		case err := <-r.put:
			if err != nil {
				t.Errorf("PutIdleConn(%v), want nil", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("PutIdleConn never called")
		}
		return r
	}
	first := run()
	want := []string{"GetConn", "ConnectStart", "ConnectDone", "GotConn", "WroteHeaders", "WroteRequest", "GotFirstResponseByte"}
	if d := cmp.Diff(want, first.events); d != "" {
		t.Errorf("first request's trace (-want +got):\n%s", d)
	}
	if first.got.Reused || first.got.WasIdle || first.got.Conn == nil {
		t.Errorf("first GotConn = %+v, want a new connection", first.got)
	}
	second := run()
	want = []string{"GetConn", "GotConn", "WroteHeaders", "WroteRequest", "GotFirstResponseByte"}
	if d := cmp.Diff(want, second.events); d != "" {
		t.Errorf("second request's trace (-want +got):\n%s", d)
	}
	if !second.got.Reused || !second.got.WasIdle {
		t.Errorf("second GotConn = %+v, want Reused and WasIdle", second.got)
	}
}

func TestIdleLimits(t *testing.T) {
	open := func(tr *Transport) int {
		n := 0
		for _, s := range tr.Stats() {
			n += s.Open
		}
		return n
	}
	// burst opens n connections to u at once (PipelineDepth 1) and
	// completes them.
	burst := func(t *testing.T, tr *Transport, u string, release chan struct{}, n int) {
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(parCtx(t), "GET", u, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.ReadAll(resp.Body)
				resp.Body.Close()
			}()
		}
		waitFor(t, "all connections open", func() bool {
			for _, s := range tr.Stats() {
				if s.InFlight == n {
					return true
				}
			}
			return false
		})
		close(release)
		wg.Wait()
	}
	tests := []struct {
		name     string
		perHost  int
		wantOpen int
	}{
		{"zero keeps all", 0, 3},
		{"one per host", 1, 1},
		{"negative keeps none", -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, release := parHoldServer(t)
			tr := newTestTransport(t, TransportOptions{PipelineDepth: 1, MaxConnsPerHost: 3, MaxIdleConnsPerHost: tt.perHost})
			burst(t, tr, u, release, 3)
			waitFor(t, fmt.Sprintf("open connections = %d", tt.wantOpen), func() bool { return open(tr) == tt.wantOpen })
		})
	}
	t.Run("MaxIdleConns across hosts", func(t *testing.T) {
		u1, r1 := parHoldServer(t)
		u2, r2 := parHoldServer(t)
		tr := newTestTransport(t, TransportOptions{PipelineDepth: 1, MaxConnsPerHost: 2, MaxIdleConns: 3})
		burst(t, tr, u1, r1, 2)
		burst(t, tr, u2, r2, 2)
		waitFor(t, "3 idle connections in all", func() bool { return open(tr) == 3 })
		// The oldest idle connection went: host 1 keeps one.
		for k, s := range tr.Stats() {
			if strings.Contains(u2, strings.TrimPrefix(k, "http://")) && s.Open != 2 {
				t.Errorf("Stats()[%s].Open = %d, want the newest 2 kept", k, s.Open)
			}
		}
	})
}

// TestOptionsFrom sets every field of http.Transport and checks that each
// one with a twin in TransportOptions is carried over, so that a new twin
// cannot be forgotten.
func TestOptionsFrom(t *testing.T) {
	var ht http.Transport
	hv := reflect.ValueOf(&ht).Elem()
	for i := range hv.NumField() {
		f := hv.Field(i)
		if !hv.Type().Field(i).IsExported() {
			continue
		}
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int, reflect.Int64:
			f.SetInt(7)
		case reflect.Func:
			f.Set(reflect.MakeFunc(f.Type(), func(args []reflect.Value) []reflect.Value {
				out := make([]reflect.Value, f.Type().NumOut())
				for j := range out {
					out[j] = reflect.Zero(f.Type().Out(j))
				}
				return out
			}))
		case reflect.Map:
			f.Set(reflect.MakeMap(f.Type()))
			if f.Type() == reflect.TypeOf(http.Header{}) {
				f.Set(reflect.ValueOf(http.Header{"X-A": {"b"}}))
			}
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		}
	}
	ht.TLSClientConfig.ServerName = "example.com"

	o := OptionsFrom(&ht)
	ov := reflect.ValueOf(o)
	var noTwin []string
	for i := range hv.NumField() {
		name := hv.Type().Field(i).Name
		if !hv.Type().Field(i).IsExported() {
			continue
		}
		of := ov.FieldByName(name)
		if !of.IsValid() {
			noTwin = append(noTwin, name)
			continue
		}
		if of.IsZero() {
			t.Errorf("OptionsFrom: %s not carried over", name)
		}
	}
	// Dial and DialTLS are carried through DialContext and DialTLSContext.
	// ForceAttemptHTTP2 and TLSNextProto are folded into Protocols.
	want := []string{"Dial", "DialTLS", "ForceAttemptHTTP2", "TLSNextProto"}
	slices.Sort(noTwin)
	if d := cmp.Diff(want, noTwin); d != "" {
		t.Errorf("http.Transport fields without a twin (-documented +actual):\n%s", d)
	}
	if o.TLSClientConfig == ht.TLSClientConfig || o.TLSClientConfig.ServerName != "example.com" {
		t.Errorf("OptionsFrom: TLSClientConfig = %p, want a clone of %p", o.TLSClientConfig, ht.TLSClientConfig)
	}
	if o.ProxyConnectHeader.Get("X-A") != "b" {
		t.Errorf("OptionsFrom: ProxyConnectHeader = %v, want a copy", o.ProxyConnectHeader)
	}
	o.ProxyConnectHeader.Set("X-A", "changed")
	if ht.ProxyConnectHeader.Get("X-A") != "b" {
		t.Errorf("OptionsFrom: ProxyConnectHeader shares its map with the http.Transport")
	}

	// The deprecated dialers are wrapped when the context ones are nil.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	dialed := 0
	//lint:ignore SA1019 OptionsFrom must carry the deprecated Dial too.
	old := &http.Transport{Dial: func(network, addr string) (net.Conn, error) {
		dialed++
		return net.Dial(network, addr)
	}}
	tr := newTestTransport(t, OptionsFrom(old))
	req, _ := http.NewRequestWithContext(parCtx(t), "GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if dialed != 1 {
		t.Errorf("http.Transport.Dial called %d times through OptionsFrom, want 1", dialed)
	}

	// The default transport converts and works.
	tr = newTestTransport(t, OptionsFrom(http.DefaultTransport.(*http.Transport)))
	req, _ = http.NewRequestWithContext(parCtx(t), "GET", srv.URL, nil)
	if resp, err := tr.RoundTrip(req); err != nil {
		t.Errorf("RoundTrip with OptionsFrom(http.DefaultTransport) = %v", err)
	} else {
		resp.Body.Close()
	}
}

func TestClone(t *testing.T) {
	o := TransportOptions{
		PipelineDepth:      3,
		TLSClientConfig:    &tls.Config{ServerName: "a"},
		ProxyConnectHeader: http.Header{"X": {"1"}},
	}
	tr := newTestTransport(t, o)
	c := tr.Clone()
	defer c.Close()
	if c == tr || c.opts.PipelineDepth != 3 {
		t.Fatalf("Clone() = %p with depth %d, want a new Transport with depth 3", c, c.opts.PipelineDepth)
	}
	if c.opts.TLSClientConfig == tr.opts.TLSClientConfig || c.opts.TLSClientConfig.ServerName != "a" {
		t.Errorf("Clone: TLSClientConfig not deep-copied")
	}
	c.opts.ProxyConnectHeader.Set("X", "2")
	if tr.opts.ProxyConnectHeader.Get("X") != "1" {
		t.Errorf("Clone: ProxyConnectHeader shared with the original")
	}
}

// TestGotConnPipelined checks GotConn for a request written behind another
// on the same connection: Reused, not WasIdle.
func TestGotConnPipelined(t *testing.T) {
	u, release := parHoldServer(t)
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 2, FixedPolicy: true})
	infos := make(chan httptrace.GotConnInfo, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := httptrace.WithClientTrace(parCtx(t), &httptrace.ClientTrace{
				GotConn: func(i httptrace.GotConnInfo) { infos <- i },
			})
			req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
		}()
		if i == 0 {
			<-infos // the first one owns the fresh connection
		}
	}
	second := <-infos
	close(release)
	wg.Wait()
	if !second.Reused || second.WasIdle {
		t.Errorf("GotConn for a pipelined request = %+v, want Reused and not WasIdle", second)
	}
}

// TestChunkedBodyStreams checks that each chunk of a request body of unknown
// length is flushed as the body yields it, as net/http does: the server gets
// the first part while the caller still holds the rest.
func TestChunkedBodyStreams(t *testing.T) {
	gotFirst := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil || string(buf) != "first" {
			http.Error(w, "bad first chunk", 400)
			return
		}
		close(gotFirst)
		rest, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s+%s", buf, rest)
	}))
	defer srv.Close()
	tr := newTestTransport(t, TransportOptions{})
	pr, pw := io.Pipe()
	go func() {
		io.WriteString(pw, "first")
		select {
		case <-gotFirst:
			io.WriteString(pw, "second")
			pw.Close()
		case <-time.After(time.Minute):
			pw.CloseWithError(errors.New("the first chunk never reached the server"))
		}
	}()
	req, _ := http.NewRequestWithContext(parCtx(t), "POST", srv.URL, pr)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "first+second" {
		t.Errorf("body = %q, want %q", body, "first+second")
	}
}

func TestPutIdleConn(t *testing.T) {
	srv := httptest.NewServer(diffHandler())
	defer srv.Close()
	tests := []struct {
		name    string
		opts    TransportOptions
		path    string
		wantErr bool
		called  bool
	}{
		{"kept", TransportOptions{}, "/echo", false, true},
		{"no body", TransportOptions{}, "/204", false, true},
		{"large body", TransportOptions{}, "/large", false, true},
		{"response closes", TransportOptions{}, "/close", true, true},
		{"idle limit", TransportOptions{MaxIdleConnsPerHost: -1}, "/echo", true, true},
		{"keep-alives disabled", TransportOptions{DisableKeepAlives: true}, "/echo", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTransport(tt.opts)
			var mu sync.Mutex
			var calls []error
			ctx := httptrace.WithClientTrace(parCtx(t), &httptrace.ClientTrace{
				PutIdleConn: func(err error) { mu.Lock(); calls = append(calls, err); mu.Unlock() },
			})
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+tt.path, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if tt.called {
				waitFor(t, "PutIdleConn called", func() bool { mu.Lock(); defer mu.Unlock(); return len(calls) > 0 })
			}
			tr.Close() // waits for the connection's goroutines: no later call
			mu.Lock()
			defer mu.Unlock()
			if !tt.called {
				if len(calls) != 0 {
					t.Errorf("PutIdleConn called %v, want no call", calls)
				}
				return
			}
			if len(calls) != 1 || (calls[0] != nil) != tt.wantErr {
				t.Errorf("PutIdleConn calls = %v, want one call, error %v", calls, tt.wantErr)
			}
		})
	}
}

// TestProbeLateBody: a GET body of unknown length whose first byte is not
// ready within net/http's 200 ms probe is sent chunked, and the head is
// flushed first, so a server may answer a body that only comes once the
// server has seen the head (golang/go#14315).
func TestProbeLateBody(t *testing.T) {
	started := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %q %q", r.Method, r.TransferEncoding, b)
	}))
	defer srv.Close()
	tr := newTestTransport(t, TransportOptions{})
	pr, pw := io.Pipe()
	go func() {
		select {
		case <-started:
			io.WriteString(pw, "late")
			pw.Close()
		case <-time.After(time.Minute):
			pw.CloseWithError(errors.New("the head never reached the server"))
		}
	}()
	req, _ := http.NewRequestWithContext(parCtx(t), "GET", srv.URL, pr)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := `GET ["chunked"] "late"`; string(body) != want {
		t.Errorf("server saw %s, want %s", body, want)
	}
}

// TestInMemory: the request bodies whose head goes out with them are
// those net/http's isKnownInMemoryReader knows, bare or through
// io.NopCloser; any other may block, and its head is flushed first.
func TestInMemory(t *testing.T) {
	pr, pw := io.Pipe()
	defer pw.Close()
	tests := []struct {
		name string
		r    io.Reader
		want bool
	}{
		{"bytes.Reader", bytes.NewReader(nil), true},
		{"bytes.Buffer", new(bytes.Buffer), true},
		{"strings.Reader", strings.NewReader(""), true},
		{"NopCloser(bytes.Reader)", io.NopCloser(bytes.NewReader(nil)), true},
		{"NopCloser(bytes.Buffer)", io.NopCloser(new(bytes.Buffer)), true},
		{"NopCloser(strings.Reader)", io.NopCloser(strings.NewReader("")), true},
		{"NopCloser(NopCloser(strings.Reader))", io.NopCloser(io.NopCloser(strings.NewReader(""))), true},
		{"pipe", pr, false},
		{"NopCloser(pipe)", io.NopCloser(pr), false},
		{"a wrapper", onlyReader{strings.NewReader("")}, false},
	}
	for _, tt := range tests {
		if got := inMemory(tt.r); got != tt.want {
			t.Errorf("inMemory(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestLegacyRequestCancel closes the deprecated Request.Cancel channel of
// requests sent with a context that is never cancelled, at each stage, and
// compares the errors with net/http's; the watch of the channel ends with
// the response body.
func TestLegacyRequestCancel(t *testing.T) {
	verifyNoLeaks(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/head": // no answer until the client gives up
			<-r.Context().Done()
		case "/body": // half a body, then nothing more
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "half!")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			io.WriteString(w, "whole body")
		}
	}))
	t.Cleanup(srv.Close) // after the transports' Close: a request left waiting holds a handler
	std := &http.Transport{}
	defer std.CloseIdleConnections()
	ours := newTestTransport(t, TransportOptions{})
	watching := func() int {
		n := 0
		for _, s := range goroutineStacks() {
			if strings.Contains(s, "legacyCancelContext") {
				n++
			}
		}
		return n
	}

	// outcome sends a GET of path through rt, closing its Cancel channel
	// once the stage is reached, and reports RoundTrip's error, or the
	// body's, or the body.
	outcome := func(rt http.RoundTripper, path string, cancelAfterHead bool) string {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		cancel := make(chan struct{})
		//lint:ignore SA1019 the deprecated field is what is tested.
		req.Cancel = cancel
		if !cancelAfterHead && path == "/head" {
			time.AfterFunc(20*time.Millisecond, func() { close(cancel) })
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return "RoundTrip: " + err.Error()
		}
		defer resp.Body.Close()
		if cancelAfterHead {
			close(cancel)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			// Not what was read before the error: net/http hands out the
			// bytes it holds before it reports the cancellation, our body
			// reports it first (its Read checks the context), so what
			// precedes it depends on when the channel's watch runs.
			return "body: " + err.Error()
		}
		return fmt.Sprintf("body %q", b)
	}
	tests := []struct {
		name            string
		path            string
		cancelAfterHead bool
	}{
		{"before the answer", "/head", false},
		{"while the body streams", "/body", true},
		{"never", "/whole", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := outcome(std, tt.path, tt.cancelAfterHead)
			ch := make(chan string, 1)
			go func() { ch <- outcome(ours, tt.path, tt.cancelAfterHead) }()
			select {
			case got := <-ch:
				if got != want {
					t.Errorf("GET %s = %s, want (net/http's) %s", tt.path, got, want)
				}
			case <-time.After(testTimeout):
				t.Fatalf("GET %s: no outcome within %v, want (net/http's) %s", tt.path, testTimeout, want)
			}
			waitFor(t, "no Request.Cancel watch left", func() bool { return watching() == 0 })
		})
	}

	t.Run("101", func(t *testing.T) {
		// The body of a 101 is the connection, a writer too: no wrapper
		// hides that, and nothing is left to watch.
		up := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
			io.Copy(io.Discard, br)
		})
		req, _ := http.NewRequest(http.MethodGet, up.url("/"), nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "x")
		//lint:ignore SA1019 the deprecated field is what is tested.
		req.Cancel = make(chan struct{})
		resp, err := ours.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if _, ok := resp.Body.(io.Writer); !ok {
			t.Errorf("101's body is a %T, want an io.Writer", resp.Body)
		}
		waitFor(t, "no Request.Cancel watch left", func() bool { return watching() == 0 })
	})

	t.Run("context with a deadline", func(t *testing.T) {
		// Both set: Request.Cancel's documentation leaves it undefined
		// whether Cancel is respected; here it is not watched.
		req, _ := http.NewRequestWithContext(parCtx(t), http.MethodGet, srv.URL+"/whole", nil)
		//lint:ignore SA1019 the deprecated field is what is tested.
		req.Cancel = make(chan struct{})
		resp, err := ours.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if n := watching(); n != 0 {
			t.Errorf("%d Request.Cancel watches with a context that can be cancelled, want 0", n)
		}
		resp.Body.Close()
	})
}
