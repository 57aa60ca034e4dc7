package pipelined

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hostileServer answers "/hostile..." requests with canned bytes and any
// other request with its path as body and the connection's number in X-Conn.
// It never closes a connection first: closing after hostile bytes is the
// client's job. In pipelined mode it reads the request behind a hostile one
// before answering both, so that the client has written it.
type hostileServer struct {
	*rawServer
	hostile   string
	pipelined bool

	bytes  atomic.Int64 // request bytes read
	read   chan string  // paths of requests read, in order (buffered)
	paired atomic.Bool  // the first hostile answer was paired with the request behind it

	rawMu sync.Mutex
	raw   strings.Builder // every request byte read
}

func newHostileServer(t *testing.T, hostile string, pipelined bool) *hostileServer {
	t.Helper()
	s := &hostileServer{hostile: hostile, pipelined: pipelined, read: make(chan string, 100)}
	s.rawServer = startRawServer(t, func(n int, c net.Conn) { s.serve(int64(n+1), c) })
	return s
}

type recordingReader struct {
	r io.Reader
	s *hostileServer
}

func (r recordingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.s.bytes.Add(int64(n))
	r.s.rawMu.Lock()
	r.s.raw.Write(p[:n])
	r.s.rawMu.Unlock()
	return n, err
}

func (s *hostileServer) serve(connN int64, c net.Conn) {
	br := bufio.NewReader(recordingReader{c, s})
	normal := func(path string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Conn: %d\r\n\r\n%s", len(path), connN, path)
	}
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		s.read <- req.URL.Path
		out := normal(req.URL.Path)
		if strings.HasPrefix(req.URL.Path, "/hostile") {
			out = s.hostile
			if s.pipelined && s.paired.CompareAndSwap(false, true) {
				next, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				s.read <- next.URL.Path
				out += normal(next.URL.Path)
			}
		}
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
	}
}

// TestHostileFraming sends hostile responses and checks that each is
// rejected or handled as RFC 9112 says, that the connection it came on is
// not used again when it must be closed, and that the next request gets its
// own response, both sequentially and when pipelined behind it.
func TestHostileFraming(t *testing.T) {
	isFraming := func(err error) bool { return errors.Is(err, ErrFraming) }
	tests := []struct {
		name    string
		method  string // of the hostile request; GET if empty
		resp    string
		wantErr func(error) bool // nil: the hostile request succeeds
		body    string           // wanted body when it succeeds
		keep    bool             // the connection may be reused afterwards
		seqOnly bool             // undetectable when pipelined
	}{
		{name: "CL and TE", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
		{name: "TE and CL", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 50\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
		{name: "differing Content-Length", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"},
		{name: "differing Content-Length list", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nContent-Length: 3, 4\r\n\r\nabcd"},
		{name: "identical Content-Length", body: "abc", keep: true,
			resp: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "signed Content-Length", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nContent-Length: +3\r\n\r\nabc"},
		{name: "obs-fold", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "space before first field", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\n X-A: a\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "bare LF", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\nContent-Length: 3\n\nabc"},
		{name: "bare CR", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nX-A: a\rb\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "NUL in value", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "NUL in name", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nX\x00A: ab\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "space before colon", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nContent-Length : 3\r\n\r\nabc"},
		{name: "header block too large",
			wantErr: func(err error) bool { return strings.Contains(fmt.Sprint(err), "exceeded") },
			resp:    "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 8<<10) + "\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "many 1xx too large",
			wantErr: func(err error) bool { return strings.Contains(fmt.Sprint(err), "exceeded") },
			resp:    strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n", 200) + "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "absurd chunk size", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffffff\r\nabc\r\n0\r\n\r\n"},
		{name: "chunk size not hex", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"},
		{name: "chunk data too long", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n"},
		{name: "gzip transfer coding", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc"},
		{name: "gzip, chunked transfer coding", wantErr: isFraming,
			resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
		{name: "TE in HTTP/1.0", wantErr: isFraming,
			resp: "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
		{name: "malformed status line", wantErr: isFraming,
			resp: "HTTP/1.1 2OO OK\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "HTTP/2 status line", wantErr: isFraming,
			resp: "HTTP/2 200 OK\r\nContent-Length: 3\r\n\r\nabc"},
		// RFC 9112 §6.3 ¶1: a response to HEAD ends with its header block,
		// whatever its Content-Length says. A server that sends the body
		// anyway puts bytes where the next response must start: they must
		// not become the next request's response (fasthttp's bug).
		{name: "HEAD with body", method: http.MethodHead, body: "",
			resp: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"},
		{name: "HEAD with chunked body", method: http.MethodHead, body: "",
			resp: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		{name: "HEAD without body", method: http.MethodHead, body: "", keep: true,
			resp: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"},
		{name: "103 then 200", body: "abc", keep: true,
			resp: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "100 then 200", body: "abc", keep: true,
			resp: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "204 with body bytes", body: "",
			resp: "HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\nabc"},
		{name: "304 with body bytes", body: "",
			resp: "HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\nabc"},
		// An extra response is detectable only on an idle connection:
		// while a request is in flight it is indistinguishable from that
		// request's answer (HTTP/1.1 carries no request ids).
		{name: "unsolicited extra response", body: "abc", seqOnly: true,
			resp: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra"},
		{name: "body longer than Content-Length", body: "abc",
			resp: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdefgh"},
		{name: "garbage", wantErr: isFraming,
			resp: "\x00\x01\x02garbage\r\n\r\n"},
		{name: "connection close", body: "abc",
			resp: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc"},
	}
	for _, tc := range tests {
		for _, pipelined := range []bool{false, true} {
			if pipelined && tc.seqOnly {
				continue
			}
			name := tc.name + "/sequential"
			if pipelined {
				name = tc.name + "/pipelined"
			}
			t.Run(name, func(t *testing.T) {
				s := newHostileServer(t, tc.resp, pipelined)
				// FixedPolicy: /behind is written behind /hostile, whose
				// class the host has not answered yet.
				tr := NewTransport(TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 2, MaxResponseHeaderBytes: 4 << 10, FixedPolicy: pipelined})
				defer tr.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				method := tc.method
				if method == "" {
					method = http.MethodGet
				}
				roundTrip := func(method, path string) (string, http.Header, error) {
					req, _ := http.NewRequestWithContext(ctx, method, s.url(path), nil)
					resp, err := tr.RoundTrip(req)
					if err != nil {
						return "", nil, err
					}
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					return string(b), resp.Header, err
				}
				check := func(body string, err error) {
					t.Helper()
					switch {
					case tc.wantErr == nil && err != nil:
						t.Errorf("%s /hostile: %v, want body %q", method, err, tc.body)
					case tc.wantErr == nil && body != tc.body:
						t.Errorf("%s /hostile = %q, want %q", method, body, tc.body)
					case tc.wantErr != nil && err == nil:
						t.Errorf("%s /hostile = %q, want an error", method, body)
					case tc.wantErr != nil && !tc.wantErr(err):
						t.Errorf("%s /hostile: error %v is not the one wanted", method, err)
					}
				}
				if !pipelined {
					body, _, err := roundTrip(method, "/hostile")
					check(body, err)
					if !tc.keep {
						// The connection must be closed: wait for it (the
						// reader may notice stray bytes just after the
						// response was delivered).
						waitFor(t, "Open == 0", func() bool { return tr.Stats()[("http://"+s.addr)].Open == 0 })
					}
					body, h, err := roundTrip(http.MethodGet, "/next")
					if err != nil || body != "/next" {
						t.Fatalf("GET /next after hostile = %q, %v, want %q", body, err, "/next")
					}
					if !tc.keep && h.Get("X-Conn") == "1" {
						t.Errorf("GET /next reused the connection that received the hostile response")
					}
					return
				}
				// Pipelined: /behind is written behind /hostile on the one
				// connection, and must get its own response.
				var wg sync.WaitGroup
				var hBody string
				var hErr error
				wg.Add(1)
				go func() {
					defer wg.Done()
					hBody, _, hErr = roundTrip(method, "/hostile")
				}()
				select {
				case <-s.read:
				case <-ctx.Done():
					t.Fatal("server never read /hostile")
				}
				body, _, err := roundTrip(http.MethodGet, "/behind")
				wg.Wait()
				check(hBody, hErr)
				if err != nil || body != "/behind" {
					t.Errorf("GET /behind pipelined behind hostile = %q, %v, want %q", body, err, "/behind")
				}
			})
		}
	}
}

// TestHostileRequestHeaders checks that header fields that would let a
// caller inject protocol (CR, LF, NUL, invalid names) are refused before
// anything is dialed or written.
func TestHostileRequestHeaders(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*http.Request)
	}{
		{"CRLF in value", func(r *http.Request) { r.Header["X-A"] = []string{"a\r\nInjected: 1"} }},
		{"LF in value", func(r *http.Request) { r.Header["X-A"] = []string{"a\nInjected: 1"} }},
		{"CR in value", func(r *http.Request) { r.Header["X-A"] = []string{"a\rb"} }},
		{"NUL in value", func(r *http.Request) { r.Header["X-A"] = []string{"a\x00b"} }},
		{"CRLF in name", func(r *http.Request) { r.Header["X-A\r\nInjected"] = []string{"1"} }},
		{"colon in name", func(r *http.Request) { r.Header["X-A:"] = []string{"1"} }},
		{"space in name", func(r *http.Request) { r.Header["X A"] = []string{"1"} }},
		{"CRLF in trailer", func(r *http.Request) { r.Trailer = http.Header{"X-T": {"a\r\nb"}} }},
		{"space in method", func(r *http.Request) { r.Method = "GET /x HTTP/1.1\r\n" }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newHostileServer(t, "", false)
			tr := NewTransport(TransportOptions{})
			defer tr.Close()
			req, _ := http.NewRequest(http.MethodGet, s.url("/x"), nil)
			tc.mod(req)
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
				t.Errorf("RoundTrip(%s) succeeded, want an error", tc.name)
			}
			if n, b := s.conns.Load(), s.bytes.Load(); n != 0 || b != 0 {
				t.Errorf("RoundTrip(%s): server saw %d connections, %d bytes, want none", tc.name, n, b)
			}
		})
	}
}

// TestHostileRequestHost checks that an invalid Host is never sent altered:
// like net/http (golang/go#61431), the transport sends an empty Host rather
// than a truncated one, so a CRLF in it cannot inject a header.
func TestHostileRequestHost(t *testing.T) {
	s := newHostileServer(t, "", false)
	tr := NewTransport(TransportOptions{})
	defer tr.Close()
	req, _ := http.NewRequest(http.MethodGet, s.url("/x"), nil)
	req.Host = "a\r\nInjected: 1"
	if resp, err := tr.RoundTrip(req); err == nil {
		resp.Body.Close()
	}
	s.rawMu.Lock()
	raw := s.raw.String()
	s.rawMu.Unlock()
	if strings.Contains(raw, "Injected") {
		t.Errorf("server received an injected header: %q", raw)
	}
}
