package h1

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Fuzz targets of the wire format. Their seed corpora live in
// testdata/fuzz/<Name>/ and run as ordinary tests; see
// docs/reliability.md for bounded fuzzing runs.

// parseOne reads one response (head and body) from br as the connection's
// reader does, returning the head, the body and the bytes consumed, or an
// error. It reads at most maxBody body bytes.
func parseOne(br *bufio.Reader, src *bytes.Reader, total int, method string, limit int64) (*http.Response, []byte, int, error) {
	resp, f, err := ReadResponseHead(br, method, limit, nil)
	if err != nil {
		return nil, nil, 0, err
	}
	var body []byte
	switch f.Kind {
	case BodyNone:
	case BodyLength:
		if f.N > int64(total) {
			return nil, nil, 0, io.ErrUnexpectedEOF
		}
		body = make([]byte, f.N)
		if _, err := io.ReadFull(br, body); err != nil {
			return nil, nil, 0, err
		}
		if resp.ContentLength != f.N {
			panic(fmt.Sprintf("ContentLength %d, framing %d", resp.ContentLength, f.N))
		}
	case BodyChunked:
		cr := NewChunkedReader(br, limit)
		body, err = io.ReadAll(io.LimitReader(cr, int64(total)+1))
		if err != nil {
			return nil, nil, 0, err
		}
		if !cr.done {
			return nil, nil, 0, io.ErrUnexpectedEOF
		}
	case BodyUntilClose:
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

// rawSource is a RawReader over a byte slice that returns at most max
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

func (r *rawSource) Unread(b []byte) { r.pending = bytes.Clone(b) }

// decodeChunked reads a chunked body from in with reads of readSize bytes,
// through a bufio.Reader of brSize bytes, directly from the source when
// raw (ChunkedReader.readRaw); it returns the body, the trailer, whether
// it ended without error, and the bytes of in consumed.
func decodeChunked(in []byte, readSize, brSize, sockMax int, raw bool) (body []byte, trailer http.Header, ok bool, consumed int) {
	src := &rawSource{src: bytes.NewReader(in), max: sockMax}
	br := bufio.NewReaderSize(src, brSize)
	cr := NewChunkedReader(br, 4<<10)
	if raw {
		cr.Raw = src
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
