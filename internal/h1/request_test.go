package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"testing"
)

func TestRequestTarget(t *testing.T) {
	tests := []struct {
		name        string
		method, url string
		host        string // req.Host, if not ""
		opaque      string // req.URL.Opaque, if not ""
		absoluteURI bool
		wantHost    string
		wantTarget  string
		wantErr     string
	}{
		{name: "origin-form", method: "GET", url: "http://example.com/a?b=c", wantHost: "example.com", wantTarget: "/a?b=c"},
		{name: "empty path", method: "GET", url: "http://example.com", wantHost: "example.com", wantTarget: "/"},
		{name: "Host field over URL", method: "GET", url: "http://example.com/", host: "other.test:8080", wantHost: "other.test:8080", wantTarget: "/"},
		{name: "absolute-form to a proxy", method: "GET", url: "http://example.com/a", absoluteURI: true, wantHost: "example.com", wantTarget: "http://example.com/a"},
		{name: "authority-form for CONNECT", method: "CONNECT", url: "http://example.com:443", wantHost: "example.com:443", wantTarget: "example.com:443"},
		{name: "IPv6 zone removed", method: "GET", url: "http://[fe80::1%25en0]:80/", wantHost: "[fe80::1]:80", wantTarget: "/"},
		{name: "punycode", method: "GET", url: "http://bücher.example/", wantHost: "xn--bcher-kva.example", wantTarget: "/"},
		{name: "invalid Host left out", method: "GET", url: "http://example.com/", host: "a b", wantHost: "", wantTarget: "/"},
		{name: "invalid Host to a proxy", method: "GET", url: "http://example.com/", host: "a b", absoluteURI: true, wantErr: "http: invalid Host header"},
		{name: "control character", method: "GET", url: "http://example.com/", opaque: "/a\x7fb", wantErr: "net/http: can't write control character in Request.URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			u.Opaque = tt.opaque
			req := &http.Request{Method: tt.method, URL: u, Host: tt.host, Header: http.Header{}}
			host, target, err := RequestTarget(req, tt.method, tt.absoluteURI)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("RequestTarget: error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || host != tt.wantHost || target != tt.wantTarget {
				t.Fatalf("RequestTarget = %q, %q, %v; want %q, %q", host, target, err, tt.wantHost, tt.wantTarget)
			}
		})
	}
}

func TestFrameRequest(t *testing.T) {
	body := strings.NewReader("abc")
	tests := []struct {
		name   string
		method string
		cl     int64
		te     []string
		body   io.Reader
		want   RequestFraming
	}{
		{name: "no body", method: "GET", want: RequestFraming{}},
		{name: "no body, length declared", method: "POST", cl: 3, want: RequestFraming{}},
		{name: "known length", method: "POST", cl: 3, body: body, want: RequestFraming{Body: body, CL: 3}},
		{name: "unknown length", method: "POST", body: body, want: RequestFraming{Body: body, CL: -1, Chunked: true}},
		{name: "chunked asked for", method: "POST", cl: 3, te: []string{"chunked"}, body: body, want: RequestFraming{Body: body, CL: 3, Chunked: true}},
		{name: "CONNECT is raw", method: "CONNECT", body: body, want: RequestFraming{Body: body, CL: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &http.Request{Method: tt.method, ContentLength: tt.cl, TransferEncoding: tt.te}
			if got := FrameRequest(req, tt.method, tt.body, false); got != tt.want {
				t.Errorf("FrameRequest = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCheckTrailer(t *testing.T) {
	for _, tt := range []struct {
		trailer http.Header
		wantErr string
	}{
		{nil, ""},
		{http.Header{"X-Sum": nil}, ""},
		{http.Header{"content-length": nil}, `invalid Trailer key "Content-Length"`},
		{http.Header{"Transfer-Encoding": nil}, `invalid Trailer key "Transfer-Encoding"`},
		{http.Header{"Trailer": nil}, `invalid Trailer key "Trailer"`},
	} {
		err := CheckTrailer(tt.trailer)
		if (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
			t.Errorf("CheckTrailer(%v) = %v, want %q", tt.trailer, err, tt.wantErr)
		}
	}
}

// TestWriteHead writes heads and reads them back with net/http's server
// reader: the fields the transport writes itself appear once, the
// caller's are kept, and the trace hears of every field.
func TestWriteHead(t *testing.T) {
	tests := []struct {
		name    string
		header  http.Header
		trailer http.Header
		head    Head
		want    http.Header // fields read back (Host is req.Host)
	}{
		{name: "GET", head: Head{Method: "GET"},
			want: http.Header{"User-Agent": {defaultUserAgent}}},
		{name: "User-Agent set empty", header: http.Header{"User-Agent": {}}, head: Head{Method: "GET"},
			want: http.Header{}},
		{name: "own User-Agent", header: http.Header{"User-Agent": {" ua/1 "}}, head: Head{Method: "GET"},
			want: http.Header{"User-Agent": {"ua/1"}}},
		{name: "POST without a body", head: Head{Method: "POST"},
			want: http.Header{"User-Agent": {defaultUserAgent}, "Content-Length": {"0"}}},
		{name: "known length", head: Head{Method: "PUT", Framing: RequestFraming{Body: strings.NewReader(""), CL: 42}},
			want: http.Header{"User-Agent": {defaultUserAgent}, "Content-Length": {"42"}}},
		{name: "chunked with trailer", trailer: http.Header{"X-B": nil, "x-a": nil},
			head: Head{Method: "POST", Framing: RequestFraming{Body: strings.NewReader(""), CL: -1, Chunked: true}},
			want: http.Header{"User-Agent": {defaultUserAgent}, "Transfer-Encoding": {"chunked"}, "Trailer": {"X-A,X-B"}}},
		{name: "framing fields of the caller's skipped in any case",
			header: http.Header{"host": {"evil"}, "content-length": {"9"}, "Transfer-Encoding": {"gzip"}, "X-A": {"1", "2"}},
			head:   Head{Method: "GET"},
			want:   http.Header{"User-Agent": {defaultUserAgent}, "X-A": {"1", "2"}}},
		{name: "transport's own fields", header: http.Header{"Connection": {"close"}},
			head: Head{Method: "GET", Close: true, Gzip: true, ProxyAuth: "Basic eDp5"},
			want: http.Header{"User-Agent": {defaultUserAgent}, "Connection": {"close"}, "Accept-Encoding": {"gzip"}, "Proxy-Authorization": {"Basic eDp5"}}},
		{name: "Connection: close added", head: Head{Method: "GET", Close: true},
			want: http.Header{"User-Agent": {defaultUserAgent}, "Connection": {"close"}}},
	}
	for _, tt := range tests {
		for _, traced := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/traced=%v", tt.name, traced), func(t *testing.T) {
				h := tt.head
				h.Host, h.Target = "example.com", "/p"
				header := tt.header
				if header == nil {
					header = http.Header{}
				}
				req := &http.Request{Header: header, Trailer: tt.trailer}
				var trace *httptrace.ClientTrace
				heard := http.Header{}
				wroteHeaders := false
				if traced {
					trace = &httptrace.ClientTrace{
						WroteHeaderField: func(k string, v []string) { heard[k] = append(heard[k], v...) },
						WroteHeaders:     func() { wroteHeaders = true },
					}
				}
				var buf bytes.Buffer
				w := bufio.NewWriter(&buf)
				if err := WriteHead(w, req, trace, &h); err != nil {
					t.Fatal(err)
				}
				w.Flush()
				got, err := http.ReadRequest(bufio.NewReader(strings.NewReader(buf.String())))
				if err != nil {
					t.Fatalf("%q: %v", buf.String(), err)
				}
				if got.Method != h.Method || got.RequestURI != "/p" || got.Host != "example.com" {
					t.Errorf("request line and Host: %s %s %s", got.Method, got.RequestURI, got.Host)
				}
				want := tt.want
				if h.Framing.Chunked {
					// net/http's reader takes these out of the header.
					want = want.Clone()
					delete(want, "Transfer-Encoding")
					delete(want, "Trailer")
				}
				if !equalHeader(got.Header, want) {
					t.Errorf("%q: header %v, want %v", buf.String(), got.Header, want)
				}
				if traced {
					want := tt.want.Clone()
					want["Host"] = []string{"example.com"}
					if !equalHeader(heard, want) || !wroteHeaders {
						t.Errorf("trace heard %v (WroteHeaders %v), want %v", heard, wroteHeaders, want)
					}
				}
			})
		}
	}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}

// TestChunkedRequestBody: what ChunkWriter and WriteLastChunk write is
// read back by net/http's server reader, body and trailer.
func TestChunkedRequestBody(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	h := Head{Method: "POST", Host: "example.com", Target: "/", Framing: RequestFraming{Body: strings.NewReader(""), CL: -1, Chunked: true}}
	trailer := http.Header{"X-Sum": {"7"}}
	req := &http.Request{Header: http.Header{}, Trailer: http.Header{"X-Sum": nil}}
	if err := WriteHead(w, req, nil, &h); err != nil {
		t.Fatal(err)
	}
	cw := NewChunkWriter(w)
	for _, p := range []string{"hello", "", ", world"} {
		if n, err := cw.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if err := WriteLastChunk(w, trailer); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	got, err := http.ReadRequest(bufio.NewReader(&buf))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(got.Body)
	if err != nil || string(body) != "hello, world" {
		t.Fatalf("body %q, %v", body, err)
	}
	if got.Trailer.Get("X-Sum") != "7" {
		t.Errorf("trailer %v", got.Trailer)
	}
}
