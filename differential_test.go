package pipelined

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
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
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// This file sends the same requests through net/http's Transport and through
// ours, against the same local server, and compares what the caller sees.

// diffHandler serves every case of TestDifferential.
func diffHandler() http.Handler {
	mux := http.NewServeMux()
	// /echo reports what the server received, so that the requests on the
	// wire are compared too.
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s %s\n", r.Method, r.RequestURI, r.Proto)
		fmt.Fprintf(&b, "host=%s cl=%d te=%q close=%v err=%v\n", r.Host, r.ContentLength, r.TransferEncoding, r.Close, err)
		writeSortedHeader(&b, r.Header)
		fmt.Fprintf(&b, "body=%q\n", body)
		writeSortedHeader(&b, r.Trailer)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, b.String())
	})
	mux.HandleFunc("/gzip", func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(bytes.Repeat([]byte("compressed text "), 200))
		zw.Close()
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
		w.Write(buf.Bytes())
	})
	mux.HandleFunc("/gzip-upper", func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write([]byte("hello"))
		zw.Close()
		w.Header().Set("Content-Encoding", "GZIP")
		w.(http.Flusher).Flush() // chunked
		w.Write(buf.Bytes())
	})
	mux.HandleFunc("/chunked-trailers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum, X-Count")
		io.WriteString(w, "part one ")
		w.(http.Flusher).Flush()
		io.WriteString(w, "part two")
		w.Header().Set("X-Sum", "abc")
		w.Header().Set("X-Count", "2")
		w.Header().Set(http.TrailerPrefix+"X-Late", "undeclared")
	})
	mux.HandleFunc("/early-hints", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("X-Final", "yes")
		io.WriteString(w, "final")
	})
	mux.HandleFunc("/204", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-A", "b")
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/304", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", `"v1"`)
		w.WriteHeader(http.StatusNotModified)
	})
	mux.HandleFunc("/close", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "bye")
	})
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		for i := range 100 {
			w.Header().Set(fmt.Sprintf("X-Many-%d", i), strings.Repeat("v", i))
		}
		w.Header().Set("X-Long", strings.Repeat("L", 16<<10))
		w.Header().Add("Set-Cookie", "a=1; Path=/")
		w.Header().Add("Set-Cookie", "b=2; HttpOnly")
		w.Header().Add("Set-Cookie", "c=3, d=4")
		w.Header().Add("Vary", "Accept")
		w.Header().Add("Vary", "Accept-Encoding")
		io.WriteString(w, "headers")
	})
	mux.HandleFunc("/large", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(300<<10))
		w.Write(bytes.Repeat([]byte("x"), 300<<10))
	})
	mux.HandleFunc("/large-chunked", func(w http.ResponseWriter, r *http.Request) {
		for range 10 {
			w.Write(bytes.Repeat([]byte("y"), 20<<10))
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/echo?from=redirect", http.StatusFound)
	})
	mux.HandleFunc("/redirect307", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/echo?from=307", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/status/", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
		w.WriteHeader(code)
		io.WriteString(w, http.StatusText(code))
	})
	mux.HandleFunc("/expect-reject", func(w http.ResponseWriter, r *http.Request) {
		// Answers without reading the body: net/http's server sends no 100
		// and closes the connection after the response.
		w.WriteHeader(http.StatusExpectationFailed)
		io.WriteString(w, "no thanks")
	})
	mux.HandleFunc("/hangup", func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	mux.HandleFunc("/raw-http10", rawAnswer("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nX-Old: yes\r\n\r\nold style body"))
	// A 101 that names no protocol (no Upgrade), to a request that asked
	// for none: the answer, without a body; what follows is nobody's to
	// read.
	mux.HandleFunc("/raw-101", rawAnswer("HTTP/1.1 101 Switching Protocols\r\nX-Odd: yes\r\n\r\nno protocol's bytes"))
	return mux
}

// rawAnswer returns a handler that writes raw on the hijacked connection
// and closes it.
func rawAnswer(raw string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		conn, bw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		bw.WriteString(raw)
		bw.Flush()
	}
}

// hijacked reports whether the server answers path from a hijacked
// connection.
func hijacked(path string) bool {
	return path == "/raw-http10" || path == "/raw-101" || path == "/hangup"
}

func writeSortedHeader(b *strings.Builder, h http.Header) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "%s: %q\n", k, h[k])
	}
}

// observed is what a caller sees of a response, in comparable form.
type observed struct {
	Err              string
	Status           string
	StatusCode       int
	Proto            string
	ProtoMajor       int
	ProtoMinor       int
	Header           http.Header
	Body             string
	BodyErr          string
	Trailer          http.Header
	ContentLength    int64
	Uncompressed     bool
	Close            bool
	TransferEncoding []string
	RequestIsOrig    bool
	RequestURL       string
	TLS              string // version and cipher suite, if TLS
	Interim          []string
	Got100           bool
	// WroteFields are the header fields httptrace's WroteHeaderField
	// reported, sorted (net/http writes some in another order).
	WroteFields []string
	// Trace are the other httptrace hooks that ran, with what they were
	// told, up to the end of the body, sorted: net/http calls some from
	// its write goroutine and some from its read goroutine, whose order
	// races (Wait100Continue and WroteRequest against
	// GotFirstResponseByte). Sequential cases only:
	// TestDifferentialConcurrent clears it.
	Trace []string
}

type diffCase struct {
	name   string
	method string
	path   string
	body   func() io.Reader // nil: no body
	length int64            // ContentLength to set; -1 leaves it unknown
	header http.Header
	// trailer is sent with a chunked request body.
	trailer http.Header
	client  bool // send through an http.Client (redirects)
	// err: compare only whether an error happened, not its text (the two
	// transports word connection errors differently).
	errOnly bool
	// racy: net/http itself gives either outcome, depending on whether
	// the server's answer or the request's write error comes first; an
	// error on either side is not compared.
	racy bool
	// stdWriteErr: the request's write fails with this error, which
	// net/http reports, except when its read loop's error on the
	// connection it closed wins its roundTrip's select ("use of closed
	// network connection", seen over TLS in 1 of 18 runs of the test under
	// -race): then pipelined's error is compared with this text instead.
	stdWriteErr string
	// refused: the request fails before a byte of it is written, and
	// its connection stays where net/http closes it: the idle
	// connections of both are closed after it, so that the next case
	// finds the same pools.
	refused bool
	// racyTrace: the server answers while the body is being written, so
	// whether the write fails (WroteRequest's error) is timing, with both
	// transports; the hooks are not compared.
	racyTrace bool
	// userinfo adds user:pass@ to the URL; host sets Request.Host.
	userinfo bool
	host     string
}

func (dc diffCase) newRequest(ctx context.Context, base string) *http.Request {
	var body io.Reader
	if dc.body != nil {
		body = dc.body()
	}
	req, err := http.NewRequestWithContext(ctx, "GET", base+dc.path, body)
	if err != nil {
		panic(err)
	}
	req.Method = dc.method // NewRequest rejects invalid methods
	if dc.length >= 0 && dc.body != nil {
		req.ContentLength = dc.length
	}
	if dc.length < 0 {
		req.ContentLength = 0 // unknown
		req.GetBody = nil
	}
	for k, v := range dc.header {
		req.Header[k] = slices.Clone(v)
	}
	if dc.trailer != nil {
		req.Trailer = dc.trailer.Clone()
	}
	if dc.userinfo {
		req.URL.User = url.UserPassword("user", "pass")
	}
	if dc.host != "" {
		req.Host = dc.host
	}
	return req
}

// onlyReader hides a body's type so that NewRequest cannot learn its length.
type onlyReader struct{ io.Reader }

func diffCases() []diffCase {
	text := func(s string) func() io.Reader { return func() io.Reader { return strings.NewReader(s) } }
	stream := func(s string) func() io.Reader { return func() io.Reader { return onlyReader{strings.NewReader(s)} } }
	return []diffCase{
		{name: "GET", method: "GET", path: "/echo"},
		{name: "GET query", method: "GET", path: "/echo?a=1&b=%20x"},
		{name: "empty method", method: "", path: "/echo"},
		{name: "HEAD", method: "HEAD", path: "/echo"},
		{name: "HEAD large", method: "HEAD", path: "/large"},
		{name: "POST length", method: "POST", path: "/echo", body: text("hello=world"), length: 11},
		{name: "POST empty", method: "POST", path: "/echo"},
		{name: "POST chunked", method: "POST", path: "/echo", body: stream("streamed body"), length: -1},
		{name: "POST chunked trailers", method: "POST", path: "/echo", body: stream("with trailers"), length: -1,
			trailer: http.Header{"X-Trailer": {"tv"}}},
		{name: "PUT expect", method: "PUT", path: "/echo", body: text("expected body"), length: 13,
			header: http.Header{"Expect": {"100-continue"}}},
		{name: "PUT expect rejected", method: "PUT", path: "/expect-reject", body: text("unwanted body"), length: 13,
			header: http.Header{"Expect": {"100-continue"}}},
		{name: "DELETE", method: "DELETE", path: "/echo"},
		{name: "PATCH", method: "PATCH", path: "/echo", body: text("{}"), length: 2},
		{name: "OPTIONS", method: "OPTIONS", path: "/echo"},
		{name: "custom headers", method: "GET", path: "/echo", header: http.Header{
			"X-Multi": {"1", "2"}, "User-Agent": {"custom/1"}, "Accept": {"*/*"}}},
		{name: "no user agent", method: "GET", path: "/echo", header: http.Header{"User-Agent": {""}}},
		{name: "caller accept-encoding", method: "GET", path: "/gzip", header: http.Header{"Accept-Encoding": {"gzip"}}},
		{name: "gzip", method: "GET", path: "/gzip"},
		{name: "gzip HEAD", method: "HEAD", path: "/gzip"},
		{name: "gzip range", method: "GET", path: "/gzip", header: http.Header{"Range": {"bytes=0-10"}}},
		{name: "gzip upper chunked", method: "GET", path: "/gzip-upper"},
		{name: "chunked trailers", method: "GET", path: "/chunked-trailers"},
		{name: "103 then 200", method: "GET", path: "/early-hints"},
		{name: "204", method: "GET", path: "/204"},
		{name: "304", method: "GET", path: "/304"},
		{name: "connection close", method: "GET", path: "/close"},
		{name: "request close", method: "GET", path: "/echo", header: http.Header{"Connection": {"close"}}},
		{name: "many and long headers", method: "GET", path: "/headers"},
		{name: "large body", method: "GET", path: "/large"},
		{name: "large chunked body", method: "GET", path: "/large-chunked"},
		{name: "404", method: "GET", path: "/status/404"},
		{name: "500", method: "GET", path: "/status/500"},
		{name: "HTTP/1.0 response", method: "GET", path: "/raw-http10"},
		{name: "101 without Upgrade", method: "GET", path: "/raw-101"},
		{name: "redirect", method: "GET", path: "/redirect", client: true},
		{name: "redirect POST 302", method: "POST", path: "/redirect", body: text("dropped"), length: 7, client: true},
		{name: "redirect POST 307", method: "POST", path: "/redirect307", body: text("kept"), length: 4, client: true},
		{name: "client gzip", method: "GET", path: "/gzip", client: true},
		{name: "large body refused early", method: "POST", path: "/expect-reject",
			body: func() io.Reader { return bytes.NewReader(make([]byte, 4<<20)) }, length: 4 << 20, racyTrace: true},
		{name: "server hangs up", method: "POST", path: "/hangup", body: text("x"), length: 1, errOnly: true},
		{name: "body shorter than ContentLength", method: "POST", path: "/echo", body: stream("short"), length: 10,
			stdWriteErr: "http: ContentLength=10 with Body length 5"},
		{name: "body longer than ContentLength", method: "POST", path: "/echo", body: stream("much too long"), length: 4, racy: true},
		{name: "body shorter than ContentLength in memory", method: "POST", path: "/echo", body: text("short"), length: 10,
			stdWriteErr: "http: ContentLength=10 with Body length 5", refused: true},
		{name: "body longer than ContentLength in memory", method: "POST", path: "/echo", body: text("much too long"), length: 4, racy: true, refused: true},
		{name: "POST large in memory", method: "POST", path: "/echo", body: text(strings.Repeat("in memory ", 30<<10)), length: 300 << 10},
		{name: "POST large stream", method: "POST", path: "/echo", body: stream(strings.Repeat("streamed! ", 30<<10)), length: 300 << 10},
		{name: "POST large chunked", method: "POST", path: "/echo", body: stream(strings.Repeat("chunked!! ", 30<<10)), length: -1},
		{name: "GET with body", method: "GET", path: "/echo", body: text("get body"), length: 8},
		{name: "GET empty stream body", method: "GET", path: "/echo", body: stream(""), length: -1},
		{name: "DELETE stream body", method: "DELETE", path: "/echo", body: stream("gone"), length: -1},
		{name: "POST empty stream body", method: "POST", path: "/echo", body: stream(""), length: -1},
		{name: "header spaces", method: "GET", path: "/echo", header: http.Header{"X-Pad": {"  padded  "}}},
		{name: "user info", method: "GET", path: "/echo", userinfo: true},
		{name: "user info client", method: "GET", path: "/echo", userinfo: true, client: true},
		{name: "host override", method: "GET", path: "/echo", host: "other.example:8080"},
		{name: "bad header name", method: "GET", path: "/echo", header: http.Header{"Bad Name": {"v"}}},
		{name: "bad header value", method: "GET", path: "/echo", header: http.Header{"X-V": {"a\nb"}}},
		{name: "bad method", method: "GE T", path: "/echo"},
	}
}

// roundTrip sends dc through rt and records what the caller sees.
func (dc diffCase) roundTrip(t *testing.T, rt http.RoundTripper, base string) (o observed) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The hooks may run on other goroutines, and WroteRequest after the
	// response (net/http calls it when its write goroutine is done): the
	// trace is taken once every request written (a redirect makes more
	// than one) has reported WroteRequest.
	var mu sync.Mutex
	var events []string
	heads, wrote := 0, 0
	ev := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, s)
		switch {
		case s == "WroteHeaders":
			heads++
		case strings.HasPrefix(s, "WroteRequest"):
			wrote++
		}
	}
	defer func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			mu.Lock()
			done := wrote >= heads
			mu.Unlock()
			if done {
				break
			}
		}
		mu.Lock()
		o.Trace = slices.Sorted(slices.Values(events))
		mu.Unlock()
	}()
	trace := &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			o.Interim = append(o.Interim, fmt.Sprintf("%d %v", code, h))
			return nil
		},
		Got100Continue: func() { o.Got100 = true },
		WroteHeaderField: func(k string, v []string) {
			o.WroteFields = append(o.WroteFields, fmt.Sprintf("%s: %q", k, v))
		},
		GetConn:              func(string) { ev("GetConn") },
		GotConn:              func(i httptrace.GotConnInfo) { ev(fmt.Sprintf("GotConn reused=%v idle=%v", i.Reused, i.WasIdle)) },
		DNSStart:             func(httptrace.DNSStartInfo) { ev("DNSStart") },
		DNSDone:              func(httptrace.DNSDoneInfo) { ev("DNSDone") },
		ConnectStart:         func(string, string) { ev("ConnectStart") },
		ConnectDone:          func(_, _ string, err error) { ev(fmt.Sprintf("ConnectDone err=%v", err != nil)) },
		TLSHandshakeStart:    func() { ev("TLSHandshakeStart") },
		TLSHandshakeDone:     func(_ tls.ConnectionState, err error) { ev(fmt.Sprintf("TLSHandshakeDone err=%v", err != nil)) },
		WroteHeaders:         func() { ev("WroteHeaders") },
		Wait100Continue:      func() { ev("Wait100Continue") },
		WroteRequest:         func(i httptrace.WroteRequestInfo) { ev(fmt.Sprintf("WroteRequest err=%v", i.Err != nil)) },
		GotFirstResponseByte: func() { ev("GotFirstResponseByte") },
	}
	ctx = httptrace.WithClientTrace(ctx, trace)
	req := dc.newRequest(ctx, base)
	var resp *http.Response
	var err error
	if dc.client {
		resp, err = (&http.Client{Transport: rt}).Do(req)
	} else {
		resp, err = rt.RoundTrip(req)
	}
	slices.Sort(o.WroteFields)
	if err != nil {
		// net/http adds this prefix or not depending on whether bytes of
		// the request reached the connection before the error, which
		// varies with timing (mapRoundTripError).
		o.Err = strings.TrimPrefix(err.Error(), "net/http: HTTP/1.x transport connection broken: ")
		if dc.errOnly {
			o.Err = "error"
		}
		return o
	}
	defer resp.Body.Close()
	body, berr := io.ReadAll(resp.Body)
	if berr != nil {
		o.BodyErr = berr.Error()
	}
	h := resp.Header.Clone()
	h.Del("Date")
	o.Status, o.StatusCode = resp.Status, resp.StatusCode
	o.Proto, o.ProtoMajor, o.ProtoMinor = resp.Proto, resp.ProtoMajor, resp.ProtoMinor
	o.Header, o.Body, o.Trailer = h, string(body), resp.Trailer
	if len(body) > 1024 {
		o.Body = fmt.Sprintf("%d bytes, sha256 %x", len(body), sha256.Sum256(body))
	}
	o.ContentLength, o.Uncompressed, o.Close = resp.ContentLength, resp.Uncompressed, resp.Close
	o.TransferEncoding = resp.TransferEncoding
	o.RequestIsOrig = resp.Request == req
	if resp.TLS != nil {
		// Not the ALPN protocol: over HTTP/1.1 we offer "h2" and
		// "http/1.1", net/http with a custom TLSClientConfig nothing.
		o.TLS = fmt.Sprintf("%x %x", resp.TLS.Version, resp.TLS.CipherSuite)
	}
	if dc.client && resp.Request != nil {
		o.RequestURL = resp.Request.URL.String()
	}
	return o
}

// unraced returns net/http's outcome with the write error it reports when
// its race goes the usual way (stdWriteErr). In those cases the server may
// also answer the request its body cut short before the client closes the
// connection, and net/http then reports GotFirstResponseByte (1.5% of runs
// over TLS): that hook is left out (see racyFirstByte).
func (dc diffCase) unraced(want observed) observed {
	if dc.stdWriteErr != "" && strings.Contains(want.Err, "use of closed network connection") {
		want.Err = dc.stdWriteErr
	}
	return dc.racyFirstByte(want)
}

// racyFirstByte returns o without GotFirstResponseByte in its trace for
// the cases whose body write fails (stdWriteErr), where it depends on a
// race with the server's answer.
func (dc diffCase) racyFirstByte(o observed) observed {
	if dc.stdWriteErr != "" {
		o.Trace = slices.DeleteFunc(slices.Clone(o.Trace), func(s string) bool { return s == "GotFirstResponseByte" })
	}
	return o
}

func TestDifferential(t *testing.T) {
	srv := httptest.NewServer(diffHandler())
	defer srv.Close()
	std := &http.Transport{ExpectContinueTimeout: 30 * time.Second}
	defer std.CloseIdleConnections()
	ours := NewTransport(TransportOptions{ExpectContinueTimeout: 30 * time.Second})
	defer ours.Close()

	for _, dc := range diffCases() {
		t.Run(dc.name, func(t *testing.T) {
			want := dc.roundTrip(t, std, srv.URL)
			got := dc.roundTrip(t, ours, srv.URL)
			if dc.refused {
				std.CloseIdleConnections()
				ours.CloseIdleConnections()
			}
			if dc.racy && (want.Err != "" || got.Err != "") {
				return
			}
			want, got = dc.unraced(want), dc.racyFirstByte(got)
			if dc.racyTrace {
				want.Trace, got.Trace = nil, nil
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s %s: response differs from net/http's (-net/http +pipelined):\n%s", dc.method, dc.path, d)
			}
		})
	}
}

// TestDifferentialConcurrent sends the cacheable cases many times at once,
// so that they are pipelined, and compares each with net/http's answer.
func TestDifferentialConcurrent(t *testing.T) {
	srv := httptest.NewServer(diffHandler())
	defer srv.Close()
	std := &http.Transport{}
	defer std.CloseIdleConnections()
	ours := NewTransport(TransportOptions{MaxConnsPerHost: 2, PipelineDepth: 8})
	defer ours.Close()

	var cases []diffCase
	for _, dc := range diffCases() {
		// Left out: responses after which the server closes the connection
		// abruptly. net/http's server, answering "Connection: close" (and
		// a hijacked handler closing), closes without a half-close
		// (server.go, conn.serve calls closeWriteAndWait only after an
		// unread request body). With requests pipelined behind, unread in
		// its receive buffer, the close sends a RST, and the RST destroys
		// earlier responses still queued in the client's receive buffer
		// (RFC 9112 §9.6 asks servers to close gracefully for this reason).
		// Sequentially these cases are compared in TestDifferential.
		if dc.method == "GET" && dc.body == nil && !dc.errOnly && !dc.client &&
			!hijacked(dc.path) && dc.path != "/close" {
			cases = append(cases, dc)
		}
	}
	want := make([]observed, len(cases))
	for i, dc := range cases {
		want[i] = dc.roundTrip(t, std, srv.URL)
	}
	const rounds = 4
	got := make([]observed, len(cases)*rounds)
	done := make(chan struct{})
	for i := range got {
		go func() {
			defer func() { done <- struct{}{} }()
			got[i] = cases[i%len(cases)].roundTrip(t, ours, srv.URL)
		}()
	}
	for range got {
		<-done
	}
	for i, o := range got {
		dc := cases[i%len(cases)]
		w := want[i%len(cases)]
		w.Trace, o.Trace = nil, nil // connections are shared: their hooks differ
		if d := cmp.Diff(w, o); d != "" {
			t.Errorf("%s %s (concurrent): response differs (-net/http +pipelined):\n%s", dc.method, dc.path, d)
		}
	}
}

// TestDifferentialDial checks that dial errors surface like net/http's: as a
// *net.OpError.
func TestDifferentialDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ours := NewTransport(TransportOptions{})
	defer ours.Close()
	for _, rt := range []http.RoundTripper{&http.Transport{}, ours} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		_, err := rt.RoundTrip(req)
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "dial" {
			t.Errorf("%T.RoundTrip(closed port) = %v, want a dial *net.OpError", rt, err)
		}
	}
}

// TestDifferentialTLS runs the cases over TLS.
func TestDifferentialTLS(t *testing.T) {
	srv := httptest.NewTLSServer(diffHandler())
	defer srv.Close()
	cfg := srv.Client().Transport.(*http.Transport).TLSClientConfig
	std := &http.Transport{TLSClientConfig: cfg.Clone(), ExpectContinueTimeout: 30 * time.Second}
	defer std.CloseIdleConnections()
	ours := NewTransport(TransportOptions{TLSClientConfig: cfg.Clone(), ExpectContinueTimeout: 30 * time.Second})
	defer ours.Close()
	for _, dc := range diffCases() {
		if hijacked(dc.path) {
			continue // not meaningful over TLS
		}
		t.Run(dc.name, func(t *testing.T) {
			want := dc.roundTrip(t, std, srv.URL)
			got := dc.roundTrip(t, ours, srv.URL)
			if dc.refused {
				std.CloseIdleConnections()
				ours.CloseIdleConnections()
			}
			if dc.racy && (want.Err != "" || got.Err != "") {
				return
			}
			want, got = dc.unraced(want), dc.racyFirstByte(got)
			if dc.racyTrace {
				want.Trace, got.Trace = nil, nil
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s %s over TLS: response differs from net/http's (-net/http +pipelined):\n%s", dc.method, dc.path, d)
			}
		})
	}
}

// TestDifferentialH2 runs the cases against a server that prefers HTTP/2:
// net/http (HTTP/2 forced on despite its custom TLS config) and ours (HTTP/2
// by default) must both speak h2 and agree.
func TestDifferentialH2(t *testing.T) {
	srv := httptest.NewUnstartedServer(diffHandler())
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
	srv.StartTLS()
	defer srv.Close()
	cfg := srv.Client().Transport.(*http.Transport).TLSClientConfig
	std := &http.Transport{TLSClientConfig: cfg.Clone(), ForceAttemptHTTP2: true, ExpectContinueTimeout: 30 * time.Second}
	defer std.CloseIdleConnections()
	ours := NewTransport(TransportOptions{TLSClientConfig: cfg.Clone(), ExpectContinueTimeout: 30 * time.Second})
	defer ours.Close()
	for _, dc := range diffCases() {
		if hijacked(dc.path) {
			continue // not possible over HTTP/2
		}
		if dc.name == "bad method" {
			// net/http checks the method only after handing the request
			// to HTTP/2 (transport.go, roundTrip), which sends "GE T";
			// we refuse it over both protocols.
			continue
		}
		t.Run(dc.name, func(t *testing.T) {
			want := dc.roundTrip(t, std, srv.URL)
			got := dc.roundTrip(t, ours, srv.URL)
			if want.Err == "" && want.Proto != "HTTP/2.0" {
				t.Fatalf("net/http spoke %s", want.Proto)
			}
			// net/http over HTTP/2 returns a copy of a request with a
			// body as resp.Request; we return the caller's, as both do
			// over HTTP/1.1.
			want.RequestIsOrig, got.RequestIsOrig = false, false
			// Both speak HTTP/2 through the standard library, whose hooks
			// race: its answer may come before WroteRequest, and net/http
			// retries on a connection it closed itself (GetConn again).
			want.Trace, got.Trace = nil, nil
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("%s %s over HTTP/2: response differs from net/http's (-net/http +pipelined):\n%s", dc.method, dc.path, d)
			}
		})
	}
}

// TestDifferentialBodyUse reads and closes response bodies of every kind
// the way careless and careful callers do, through net/http and through
// ours, and compares what each step returns: an empty read first, the
// whole body (or 8 bytes of it), reads past the end, Close twice, and a
// read after Close.
func TestDifferentialBodyUse(t *testing.T) {
	srv := httptest.NewServer(diffHandler())
	defer srv.Close()
	std := &http.Transport{}
	defer std.CloseIdleConnections()
	ours := newTestTransport(t, TransportOptions{})
	use := func(rt http.RoundTripper, method, path string, partial bool) []string {
		req, _ := http.NewRequestWithContext(parCtx(t), method, srv.URL+path, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return []string{"RoundTrip: " + err.Error()}
		}
		var steps []string
		step := func(what string, n int, err error) {
			steps = append(steps, fmt.Sprintf("%s: %d, %v", what, n, err))
		}
		n, err := resp.Body.Read(nil)
		step("empty read", n, err)
		if partial {
			n, err = io.ReadFull(resp.Body, make([]byte, 8))
			step("8 bytes", n, err)
			steps = append(steps, fmt.Sprintf("Close: %v", resp.Body.Close()))
			n, err = resp.Body.Read(make([]byte, 8))
			step("read after Close", n, err)
			return steps
		}
		b, err := io.ReadAll(resp.Body)
		if len(b) > 64 {
			b = b[:64]
		}
		steps = append(steps, fmt.Sprintf("ReadAll: %q, %v", b, err))
		n, err = resp.Body.Read(make([]byte, 8))
		step("read at the end", n, err)
		n, err = resp.Body.Read(make([]byte, 8))
		step("read at the end again", n, err)
		steps = append(steps, fmt.Sprintf("Close: %v", resp.Body.Close()))
		steps = append(steps, fmt.Sprintf("Close again: %v", resp.Body.Close()))
		n, err = resp.Body.Read(make([]byte, 8))
		step("read after Close", n, err)
		return steps
	}
	for _, tt := range []struct{ method, path string }{
		{"GET", "/echo"},
		{"GET", "/large"},
		{"GET", "/large-chunked"},
		{"GET", "/chunked-trailers"},
		{"GET", "/gzip"},
		{"GET", "/gzip-upper"},
		{"GET", "/204"},
		{"GET", "/304"},
		{"HEAD", "/echo"},
		{"HEAD", "/gzip"},
		{"GET", "/status/404"},
		{"GET", "/raw-http10"},
	} {
		for _, partial := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s %s partial=%v", tt.method, tt.path, partial), func(t *testing.T) {
				want, got := use(std, tt.method, tt.path, partial), use(ours, tt.method, tt.path, partial)
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("%s %s: body use differs from net/http's (-net/http +pipelined):\n%s", tt.method, tt.path, d)
				}
			})
		}
	}
}
