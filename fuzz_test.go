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

	"github.com/pipelined/pipelined/internal/h1"
)

// Fuzz targets. Their seed corpora live in testdata/fuzz/<Name>/ and run
// as ordinary tests; see docs/reliability.md for bounded fuzzing runs.

// parseOne reads one response (head and body) from br as the connection's
// reader does, returning the head, the body and the bytes consumed, or an
// error. It reads at most maxBody body bytes.
func parseOne(br *bufio.Reader, src *bytes.Reader, total int, method string, limit int64) (*http.Response, []byte, int, error) {
	resp, f, err := h1.ReadResponseHead(br, method, limit, nil)
	if err != nil {
		return nil, nil, 0, err
	}
	var body []byte
	switch f.Kind {
	case h1.BodyNone:
	case h1.BodyLength:
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
	case h1.BodyChunked:
		cr := h1.NewChunkedReader(br, limit)
		body, err = io.ReadAll(io.LimitReader(cr, int64(total)+1))
		if err != nil {
			return nil, nil, 0, err
		}
		if more, err := cr.More(); more || err != nil {
			return nil, nil, 0, io.ErrUnexpectedEOF
		}
	case h1.BodyUntilClose:
		body, err = io.ReadAll(br)
		if err != nil {
			return nil, nil, 0, err
		}
	}
	consumed := total - src.Len() - br.Buffered()
	return resp, body, consumed, nil
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
