package pipelined

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
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

// wireServer is a raw server that parses requests by hand, as bytes on the
// wire, and records what no sender meant: a request line that is not one,
// an injected field, a body framed twice, another request's bytes inside a
// body. It answers each request with its target as the body after delay,
// so that requests sent together are pipelined.
type wireServer struct {
	*rawServer
	delay time.Duration

	mu      sync.Mutex
	targets []string // request-targets read, in order
	faults  []string // what no sender meant
}

func newWireServer(t *testing.T, delay time.Duration) *wireServer {
	s := &wireServer{delay: delay}
	s.rawServer = newRawServer(t, s.serve)
	return s
}

func (s *wireServer) fault(format string, args ...any) {
	s.mu.Lock()
	s.faults = append(s.faults, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *wireServer) serve(c net.Conn, br *bufio.Reader) {
	for {
		lines, err := parReadHead(br)
		if err != nil {
			if len(lines) > 0 {
				s.fault("a head cut short: %q", lines)
			}
			return
		}
		line := strings.Split(lines[0], " ")
		if len(line) != 3 || line[2] != "HTTP/1.1" {
			s.fault("request line %q", lines[0])
			return
		}
		target := line[1]
		s.mu.Lock()
		s.targets = append(s.targets, target)
		s.mu.Unlock()
		var cl []string
		chunked, host := false, 0
		for _, l := range lines[1:] {
			k, v, ok := strings.Cut(l, ":")
			switch {
			case !ok || strings.ContainsAny(l, "\r\x00"):
				s.fault("field line %q", l)
			case strings.EqualFold(k, "Injected"):
				s.fault("injected field %q", l)
			case strings.EqualFold(k, "Host"):
				if host++; host > 1 {
					s.fault("a second Host field %q", l)
				}
			case strings.EqualFold(k, "Content-Length"):
				cl = append(cl, strings.TrimSpace(v))
			case strings.EqualFold(k, "Transfer-Encoding"):
				chunked = true
			}
		}
		if len(cl) > 1 || len(cl) > 0 && chunked {
			s.fault("%s framed twice: %q", target, lines)
			return
		}
		var body []byte
		switch {
		case chunked:
			body, err = io.ReadAll(httputil.NewChunkedReader(br))
			if err == nil {
				_, err = parReadHead(br) // the trailer section
			}
		case len(cl) == 1:
			n, perr := strconv.Atoi(cl[0])
			if perr != nil {
				s.fault("Content-Length %q", cl[0])
				return
			}
			body = make([]byte, n)
			_, err = io.ReadFull(br, body)
		}
		if bytes.Contains(body, []byte("HTTP/1.1")) {
			s.fault("a request inside the body of %s: %q", target, body)
		}
		if err != nil {
			return // a body cut short: its sender gave up on it
		}
		time.Sleep(s.delay)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(target), target)
	}
}

func (s *wireServer) seen() (targets, faults []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.targets), slices.Clone(s.faults)
}

// TestRequestWriteChecks sends requests that the checks on the write
// path refuse, or that must reach the server unaltered, each beside plain
// GETs pipelined to the same host, through net/http's Transport and
// ours. Ours fails as net/http does, with its error, and at once (a
// refused request never waited on a connection for an answer to nothing);
// where net/http succeeds, ours succeeds as it does. The server never
// reads a request nobody sent, an injected field, two lengths, or another
// request's bytes inside a body, and the GETs beside it are all answered.
func TestRequestWriteChecks(t *testing.T) {
	verifyNoLeaks(t)
	errBody := errors.New("body failed")
	const inject = "/t HTTP/1.1\r\nInjected: 1\r\n\r\nGET /smuggled"
	type row struct {
		name string
		mod  func(r *http.Request)
		// body, if not nil, makes the request a POST with this body.
		body func() io.Reader
		// answered: net/http writes a second framing or Host field
		// for a field of the header map spelled in lower case, which
		// the server refuses; we write neither, and the request is
		// answered.
		answered bool
	}
	withBody := func(cl int64, trailer http.Header, h http.Header) func(r *http.Request) {
		return func(r *http.Request) {
			r.ContentLength = cl
			r.Trailer = trailer
			for k, v := range h {
				r.Header[k] = v
			}
		}
	}
	str := func(s string) func() io.Reader { return func() io.Reader { return strings.NewReader(s) } }
	stream := func(s string) func() io.Reader { return func() io.Reader { return onlyReader{strings.NewReader(s)} } }
	rows := []row{
		{name: "opaque CRLF", mod: func(r *http.Request) { r.URL.Opaque = inject }},
		{name: "opaque LF", mod: func(r *http.Request) { r.URL.Opaque = "/t\nInjected: 1" }},
		{name: "opaque CR", mod: func(r *http.Request) { r.URL.Opaque = "/t\rx" }},
		{name: "opaque NUL", mod: func(r *http.Request) { r.URL.Opaque = "/t\x00" }},
		{name: "opaque DEL", mod: func(r *http.Request) { r.URL.Opaque = "/t\x7f" }},
		{name: "query CRLF", mod: func(r *http.Request) { r.URL.RawQuery = "a=1 HTTP/1.1\r\nInjected: 1\r\n\r\n" }},
		{name: "path CRLF", mod: func(r *http.Request) { r.URL.Path = inject }}, // escaped
		{name: "opaque CRLF POST", mod: func(r *http.Request) { r.URL.Opaque = inject }, body: str("abc")},
		{name: "opaque DEL HEAD", mod: func(r *http.Request) { r.Method = http.MethodHead; r.URL.Opaque = "/t\x7f" }},
		{name: "method CRLF", mod: func(r *http.Request) { r.Method = "GET /t HTTP/1.1\r\nInjected: 1\r\n\r\nGET" }},
		{name: "method space", mod: func(r *http.Request) { r.Method = "GET /x" }},
		{name: "name CRLF", mod: func(r *http.Request) { r.Header["X-A\r\nInjected"] = []string{"1"} }},
		{name: "name LF", mod: func(r *http.Request) { r.Header["X-A\nInjected"] = []string{"1"} }},
		{name: "value CRLF", mod: func(r *http.Request) { r.Header["X-A"] = []string{"a\r\nInjected: 1"} }},
		{name: "value CR", mod: func(r *http.Request) { r.Header["X-A"] = []string{"a\rInjected: 1"} }},
		{name: "value bare LF", mod: func(r *http.Request) { r.Header["X-A"] = []string{"a\nInjected: 1"} }},
		{name: "value NUL", mod: func(r *http.Request) { r.Header["X-A"] = []string{"a\x00"} }},
		{name: "Host CRLF", mod: func(r *http.Request) { r.Host = "h\r\nInjected: 1" }},
		{name: "Host LF", mod: func(r *http.Request) { r.Host = "h\nInjected: 1" }},
		{name: "Host space", mod: func(r *http.Request) { r.Host = "h x" }},
		{name: "Host in header CRLF", mod: func(r *http.Request) { r.Header["Host"] = []string{"h\r\nInjected: 1"} }},
		{name: "Host in header", mod: func(r *http.Request) { r.Header["Host"] = []string{"other"} }},
		{name: "User-Agent CRLF", mod: func(r *http.Request) { r.Header["User-Agent"] = []string{"a\r\nInjected: 1"} }},
		{name: "Content-Length in header", mod: withBody(3, nil, http.Header{"Content-Length": {"100"}}), body: str("abc")},
		{name: "Content-Length in header GET", mod: func(r *http.Request) { r.Header["Content-Length"] = []string{"100"} }},
		{name: "Transfer-Encoding in header", mod: withBody(3, nil, http.Header{"Transfer-Encoding": {"chunked"}}), body: str("abc")},
		{name: "Transfer-Encoding in header GET", mod: func(r *http.Request) { r.Header["Transfer-Encoding"] = []string{"chunked"} }},
		{name: "content-length in header", mod: withBody(3, nil, http.Header{"content-length": {"100"}}), body: str("abc"), answered: true},
		{name: "transfer-encoding in header", mod: withBody(3, nil, http.Header{"transfer-encoding": {"chunked"}}), body: str("abc"), answered: true},
		{name: "host in header", mod: func(r *http.Request) { r.Header["host"] = []string{"other"} }},
		{name: "Trailer in header", mod: withBody(3, nil, http.Header{"Trailer": {"X-T"}}), body: str("abc")},
		{name: "trailer", mod: withBody(-1, http.Header{"X-T": {"v"}}, nil), body: stream("abc")},
		{name: "trailer value CRLF", mod: withBody(-1, http.Header{"X-T": {"v\r\nInjected: 1"}}, nil), body: stream("abc")},
		{name: "trailer name CRLF", mod: withBody(-1, http.Header{"X-T\r\nInjected": {"v"}}, nil), body: stream("abc")},
		{name: "trailer Content-Length", mod: withBody(-1, http.Header{"Content-Length": {"3"}}, nil), body: stream("abc")},
		{name: "trailer Transfer-Encoding", mod: withBody(-1, http.Header{"Transfer-Encoding": {"chunked"}}, nil), body: stream("abc")},
		{name: "trailer Trailer", mod: withBody(-1, http.Header{"trailer": {"x"}}, nil), body: stream("abc")},
		{name: "trailer known length", mod: withBody(3, http.Header{"Content-Length": {"3"}}, nil), body: str("abc")},
		{name: "body shorter", mod: withBody(10, nil, nil), body: str("abc")},
		{name: "body longer", mod: withBody(3, nil, nil), body: str("abcGET /smuggled HTTP/1.1\r\n\r\n")},
		{name: "body shorter streamed", mod: withBody(10, nil, nil), body: stream("abc")},
		{name: "body longer streamed", mod: withBody(3, nil, nil), body: stream("abcGET /smuggled HTTP/1.1\r\n\r\n")},
		{name: "body fails", mod: withBody(10, nil, nil), body: func() io.Reader { return onlyReader{&failingBody{n: 3, err: errBody}} }},
		{name: "body fails at once", mod: withBody(10, nil, nil), body: func() io.Reader { return onlyReader{&failingBody{err: errBody}} }},
		{name: "body fails chunked", mod: withBody(-1, nil, nil), body: func() io.Reader { return onlyReader{&failingBody{n: 3, err: errBody}} }},
	}
	type outcome struct {
		status int
		body   string
		err    string
	}
	run := func(t *testing.T, rt http.RoundTripper, tc row) (outcome, *wireServer) {
		s := newWireServer(t, 5*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		var wg sync.WaitGroup
		gets := func(from, to int) {
			for i := from; i < to; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					path := fmt.Sprintf("/g%d", i)
					if got, err := getBody(ctx, rt, s.url(path)); err != nil || got != path {
						t.Errorf("%T: GET %s beside %s = %q, %v", rt, path, tc.name, got, err)
					}
				}()
			}
		}
		gets(0, 4)
		waitFor(t, "the first GETs to arrive", func() bool { ts, _ := s.seen(); return len(ts) > 0 })
		var body io.Reader
		method := http.MethodGet
		if tc.body != nil {
			method, body = http.MethodPost, tc.body()
		}
		req, err := http.NewRequestWithContext(ctx, method, s.url("/t"), body)
		if err != nil {
			t.Fatal(err)
		}
		tc.mod(req)
		gets(4, 8)
		var o outcome
		resp, err := rt.RoundTrip(req)
		if err != nil {
			o.err = err.Error()
			if errors.Is(err, errBody) {
				// net/http's names its socket when its buffer's
				// ReadFrom read the body: the body's error is the one
				// to match.
				o.err = errBody.Error()
			}
			if ctx.Err() != nil {
				t.Errorf("%T: RoundTrip(%s) returned only as its context ended: %v", rt, tc.name, err)
			}
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			o.status, o.body = resp.StatusCode, string(b)
		}
		wg.Wait()
		return o, s
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			want, std := run(t, &http.Transport{}, tc)
			tr := newTestTransport(t, TransportOptions{FixedPolicy: true, PipelineConnsPerHost: 1, PipelineDepth: 8})
			got, ours := run(t, tr, tc)
			if tc.answered {
				want = outcome{status: http.StatusOK, body: "/t"}
			}
			if got != want {
				t.Errorf("RoundTrip(%s) = %+v, want net/http's %+v", tc.name, got, want)
			}
			stdTargets, stdFaults := std.seen()
			for _, f := range stdFaults {
				t.Logf("RoundTrip(%s) through net/http: the server read %s", tc.name, f)
			}
			targets, faults := ours.seen()
			for _, f := range faults {
				t.Errorf("RoundTrip(%s): the server read %s", tc.name, f)
			}
			for _, target := range slices.Concat(stdTargets, targets) {
				if strings.HasPrefix(target, "/smuggled") || !strings.HasPrefix(target, "/g") && !slices.Contains(stdTargets, target) {
					t.Errorf("RoundTrip(%s): the server read a request for %q", tc.name, target)
				}
			}
		})
	}
}
