package pipelined

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Fuzz targets. Their seed corpora live in testdata/fuzz/<Name>/ and run
// as ordinary tests; see docs/reliability.md for bounded fuzzing runs.

// parseOne reads one response (head and body) from br as the connection's
// reader does, returning the head, the body and the bytes consumed, or an
// error. It reads at most maxBody body bytes.
func parseOne(br *bufio.Reader, src *bytes.Reader, total int, method string, limit int64) (*http.Response, []byte, int, error) {
	resp, f, err := readResponseHead(br, method, limit, nil)
	if err != nil {
		return nil, nil, 0, err
	}
	var body []byte
	switch f.kind {
	case bodyNone:
	case bodyLength:
		if f.n > int64(total) {
			return nil, nil, 0, io.ErrUnexpectedEOF
		}
		body = make([]byte, f.n)
		if _, err := io.ReadFull(br, body); err != nil {
			return nil, nil, 0, err
		}
		if resp.ContentLength != f.n {
			panic(fmt.Sprintf("ContentLength %d, framing %d", resp.ContentLength, f.n))
		}
	case bodyChunked:
		cr := newChunkedReader(br, limit)
		body, err = io.ReadAll(io.LimitReader(cr, int64(total)+1))
		if err != nil {
			return nil, nil, 0, err
		}
		if !cr.done {
			return nil, nil, 0, io.ErrUnexpectedEOF
		}
	case bodyUntilClose:
		body, err = io.ReadAll(br)
		if err != nil {
			return nil, nil, 0, err
		}
	}
	consumed := total - src.Len() - br.Buffered()
	return resp, body, consumed, nil
}

// FuzzReadResponse feeds arbitrary bytes to the response reader. It must
// never panic, and a message's end must not depend on the bytes after it:
// parsing data alone and data followed by more bytes consumes the same
// prefix with the same head and body (no reading past the framing).
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n1;ext=1\r\na\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		const limit = 4 << 10
		parse := func(in []byte) (*http.Response, []byte, int, error) {
			src := bytes.NewReader(in)
			br := bufio.NewReaderSize(src, 64) // small: exercise refills
			return parseOne(br, src, len(in), method, limit)
		}
		resp, body, n, err := parse(data)
		if err != nil {
			return
		}
		if n < 0 || n > len(data) {
			t.Fatalf("consumed %d of %d bytes", n, len(data))
		}
		if resp.ContentLength >= 0 && !bytes.Equal(body, nil) && int64(len(body)) != resp.ContentLength && method != http.MethodHead {
			t.Fatalf("body of %d bytes, ContentLength %d", len(body), resp.ContentLength)
		}
		if resp.ContentLength == -1 && resp.Close && resp.TransferEncoding == nil {
			return // read until close: the suffix is part of the body
		}
		suffix := []byte("HTTP/1.1 299 Next\r\nContent-Length: 4\r\n\r\nnext")
		resp2, body2, n2, err := parse(append(bytes.Clone(data), suffix...))
		if err != nil {
			t.Fatalf("data parsed alone but not followed by a response: %v", err)
		}
		if n2 != n || resp2.StatusCode != resp.StatusCode || !bytes.Equal(body2, body) {
			t.Fatalf("parse(data) = %d %d bytes %q; parse(data+next) = %d %d bytes %q",
				resp.StatusCode, n, body, resp2.StatusCode, n2, body2)
		}
	})
}

// fuzzConn is one connection of FuzzPipelineMatch's server: the requests it
// read, in order, and the bytes it wrote.
type fuzzConn struct {
	methods []string
	ids     []string
}

// FuzzPipelineMatch drives a real Transport (one connection, depth 4)
// against a server that answers whatever requests arrive with the fuzzed
// bytes. Whatever the bytes, every response delivered to a caller must be
// the one a strict sequential parse of the bytes assigns to that caller's
// position on its connection: same status, same X-Id, same body. No
// response is ever given to a request it does not belong to.
func FuzzPipelineMatch(f *testing.F) {
	resp := func(id string) string {
		return "HTTP/1.1 200 OK\r\nX-Id: " + id + "\r\nContent-Length: " + strconv.Itoa(len(id)) + "\r\n\r\n" + id
	}
	f.Add([]byte(resp("0")+resp("1")+resp("2")), uint8(3), uint8(0))
	f.Add([]byte(resp("0")+"HTTP/1.1 200 OK\r\nX-Id: 1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n1\r\n0\r\n\r\n"+resp("2")), uint8(3), uint8(0))
	f.Add([]byte("HTTP/1.1 200 OK\r\nX-Id: 0\r\nContent-Length: 5\r\n\r\n"+resp("1")), uint8(2), uint8(1))
	f.Add([]byte("HTTP/1.1 200 OK\r\nX-Id: 0\r\nContent-Length: 5\r\n\r\nhello"+resp("1")), uint8(2), uint8(1))
	f.Add([]byte(resp("0")+"HTTP/1.1 200 OK\r\nX-Id: 1\r\nConnection: close\r\nContent-Length: 1\r\n\r\n1"+resp("2")), uint8(3), uint8(0))
	f.Add([]byte("HTTP/1.1 100 Continue\r\n\r\n"+resp("0")+"HTTP/1.1 204 No Content\r\nX-Id: 1\r\n\r\n"+resp("2")), uint8(3), uint8(0))
	f.Fuzz(func(t *testing.T, blob []byte, n, headMask uint8) {
		if len(blob) > 4<<10 {
			return
		}
		n = n%4 + 1
		var mu sync.Mutex
		var conns []*fuzzConn
		var swg sync.WaitGroup
		dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
			cc, sc := net.Pipe()
			fc := &fuzzConn{}
			mu.Lock()
			conns = append(conns, fc)
			mu.Unlock()
			swg.Add(2)
			first := make(chan struct{})
			go func() { // reader: record requests in order
				defer swg.Done()
				br := bufio.NewReader(sc)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						sc.Close()
						return
					}
					mu.Lock()
					fc.methods = append(fc.methods, req.Method)
					fc.ids = append(fc.ids, strings.TrimPrefix(req.URL.Path, "/r/"))
					mu.Unlock()
					if i == 0 {
						close(first)
					}
				}
			}()
			go func() { // writer: the fuzzed bytes, then close
				defer swg.Done()
				select {
				case <-first:
				case <-time.After(5 * time.Second):
				}
				sc.SetWriteDeadline(time.Now().Add(5 * time.Second))
				sc.Write(blob)
				time.Sleep(time.Millisecond) // let pipelined requests arrive
				sc.Close()
			}()
			return cc, nil
		}
		tr := NewTransport(TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 4, DialContext: dial,
			MaxResponseHeaderBytes: 4 << 10, DisableCompression: true})
		type got struct {
			status int
			xid    string
			body   []byte
			ok     bool
		}
		results := make([]got, n)
		methods := make([]string, n)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var wg sync.WaitGroup
		for i := range int(n) {
			methods[i] = http.MethodGet
			if headMask&(1<<i) != 0 {
				methods[i] = http.MethodHead
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(ctx, methods[i], "http://fuzz.test/r/"+strconv.Itoa(i), nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				results[i] = got{resp.StatusCode, resp.Header.Get("X-Id"), body, err == nil}
			}()
		}
		wg.Wait()
		cancel()
		tr.Close()
		swg.Wait()

		// Reference: the strict sequential parse of blob, for the
		// methods of the requests in the order each connection read them.
		type ref struct {
			status int
			xid    string
			body   []byte
		}
		for i, g := range results {
			if !g.ok {
				continue
			}
			id := strconv.Itoa(i)
			matched := false
			var tried []string
			for _, fc := range conns {
				src := bytes.NewReader(blob)
				br := bufio.NewReader(src)
				for pos := range fc.ids {
					resp, body, _, err := parseOne(br, src, len(blob), fc.methods[pos], 4<<10)
					if err != nil {
						break
					}
					if fc.ids[pos] != id {
						if resp.Close {
							break
						}
						continue
					}
					r := ref{resp.StatusCode, resp.Header.Get("X-Id"), body}
					if r.status == g.status && r.xid == g.xid && bytes.Equal(r.body, g.body) {
						matched = true
					}
					tried = append(tried, fmt.Sprintf("%d %q %q", r.status, r.xid, r.body))
					break
				}
			}
			if !matched && len(tried) == 0 {
				// The server closed before it recorded this request (it
				// still received it): its position is unknown.
				continue
			}
			if !matched {
				t.Errorf("request %s got %d X-Id %q body %q; the stream assigns it %v", id, g.status, g.xid, g.body, tried)
			}
		}
	})
}

// rawSource is a rawReader over a byte slice that returns at most max
// bytes per read (0: no bound), as a socket returns what has arrived.
type rawSource struct {
	src     *bytes.Reader
	max     int
	pending []byte
}

func (r *rawSource) Read(p []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	if r.max > 0 && len(p) > r.max {
		p = p[:r.max]
	}
	return r.src.Read(p)
}

func (r *rawSource) unread(b []byte) { r.pending = bytes.Clone(b) }

// decodeChunked reads a chunked body from in with reads of readSize bytes,
// through a bufio.Reader of brSize bytes, directly from the source when
// raw (chunkedReader.readRaw); it returns the body, the trailer, whether
// it ended without error, and the bytes of in consumed.
func decodeChunked(in []byte, readSize, brSize, sockMax int, raw bool) (body []byte, trailer http.Header, ok bool, consumed int) {
	src := &rawSource{src: bytes.NewReader(in), max: sockMax}
	br := bufio.NewReaderSize(src, brSize)
	cr := newChunkedReader(br, 4<<10)
	if raw {
		cr.raw = src
	}
	buf := make([]byte, readSize)
	for len(body) <= len(in) {
		n, err := cr.Read(buf)
		body = append(body, buf[:n]...)
		if err == io.EOF {
			ok = true
			break
		}
		if err != nil {
			break
		}
	}
	return body, cr.trailer, ok, len(in) - src.src.Len() - len(src.pending) - br.Buffered()
}

// FuzzChunkedRaw: decoding chunk data straight from the source, with what
// follows it decoded in place or handed back (readRaw), gives the body,
// trailer, verdict and consumed length of decoding through the
// bufio.Reader alone, whatever the bytes, read sizes and buffer sizes.
func FuzzChunkedRaw(f *testing.F) {
	chunked := func(body string, size int) string {
		var b strings.Builder
		for len(body) > 0 {
			n := min(size, len(body))
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
			body = body[n:]
		}
		return b.String() + "0\r\n\r\n"
	}
	long := strings.Repeat("abcdefghij", 300)
	for _, s := range []string{
		chunked(long, 1000) + "HTTP/1.1 200 OK\r\n",
		chunked(long, 7),
		chunked(long, 4096) + strings.Repeat("n", 5000),
		"3\r\nabc\r\n0\r\nX-T: 1\r\n\r\nnext",
		"400\r\n" + long[:1024] + "\r\n5;ext\r\nhello\r\n0\r\n\r\n",
		"400\r\n" + long[:1024] + "\r\nA\r\n0123456789\r\n0\r\n\r\n",
		"400\r\n" + long[:1024] + "\r\n0000000000000010\r\n0123456789abcdef\r\n0\r\n\r\n",
		"400\r\n" + long[:1024] + "\r\n10 \r\n0123456789abcdef\r\n0\r\n\r\n",
		"400\r\n" + long[:1024] + "\n10\r\n0123456789abcdef\r\n0\r\n\r\n",
		"400\r\n" + long[:1024] + "\r\n20\r\n0123",
	} {
		f.Add([]byte(s), uint16(4096), uint16(0), uint8(16))
		f.Add([]byte(s), uint16(100), uint16(33), uint8(64))
	}
	f.Fuzz(func(t *testing.T, in []byte, readSize, sockMax uint16, brSize uint8) {
		rs, bs := max(1, int(readSize)), max(16, int(brSize))
		body, tr, ok, n := decodeChunked(in, rs, bs, int(sockMax), false)
		rbody, rtr, rok, rn := decodeChunked(in, rs, bs, int(sockMax), true)
		if !bytes.Equal(rbody, body) || rok != ok || rn != n || fmt.Sprint(rtr) != fmt.Sprint(tr) {
			t.Fatalf("raw: %d bytes, ok %v, consumed %d, trailer %v; through br: %d bytes, ok %v, consumed %d, trailer %v",
				len(rbody), rok, rn, rtr, len(body), ok, n, tr)
		}
	})
}
