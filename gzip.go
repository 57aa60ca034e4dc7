package pipelined

import (
	"compress/flate"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
)

// This file holds the transparent gzip decoding net/http's Transport does
// (transport.go, persistConn.readLoop and gzipReader): when the transport
// itself asked for gzip (request.addGzip) and the response says
// "Content-Encoding: gzip", the caller gets the decoded body.

// errConcurrentReadOnResBody is net/http's error for two Reads at once on a
// decoded body.
var errConcurrentReadOnResBody = errors.New("http: concurrent read on response body")

// decodeGzip replaces resp.Body with a lazy gzip decoder when r asked for
// gzip and resp carries a gzip-encoded body, and fixes the headers as
// net/http does: Content-Encoding and Content-Length are removed,
// ContentLength becomes -1 and Uncompressed true. It is called once, where
// the response is handed to the caller (hostPool.roundTripAttempts).
func decodeGzip(r *request, resp *http.Response) {
	if !r.addGzip || resp.Body == nil || resp.Body == http.NoBody ||
		r.method == http.MethodHead || resp.ContentLength == 0 {
		return
	}
	if !strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		return
	}
	resp.Body = &gzipReader{body: resp.Body}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Uncompressed = true
}

// gzipReader decodes a gzip body lazily: the gzip header is read on the
// first Read, not when the response is returned. Close closes the
// underlying body. mu guards zr and zerr; zr is taken out while a Read runs,
// so that a concurrent Read fails instead of racing.
type gzipReader struct {
	body io.ReadCloser
	mu   sync.Mutex
	zr   *gzip.Reader
	zerr error // sticky init error, or a sentinel while a Read runs or after Close
}

var gzipPool = sync.Pool{New: func() any { return new(gzip.Reader) }}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
func (eofReader) ReadByte() (byte, error)  { return 0, io.EOF }

func gzipPoolPut(zr *gzip.Reader) {
	// Reset with a flate.Reader so that Reset allocates no bufio.Reader.
	var r flate.Reader = eofReader{}
	zr.Reset(r)
	gzipPool.Put(zr)
}

func (gz *gzipReader) acquire() (*gzip.Reader, error) {
	gz.mu.Lock()
	defer gz.mu.Unlock()
	if gz.zerr != nil {
		return nil, gz.zerr
	}
	if gz.zr == nil {
		zr := gzipPool.Get().(*gzip.Reader)
		if err := zr.Reset(gz.body); err != nil {
			gzipPoolPut(zr)
			gz.zerr = err
			return nil, err
		}
		gz.zr = zr
	}
	zr := gz.zr
	gz.zr, gz.zerr = nil, errConcurrentReadOnResBody
	return zr, nil
}

func (gz *gzipReader) release(zr *gzip.Reader) {
	gz.mu.Lock()
	defer gz.mu.Unlock()
	if gz.zerr == errConcurrentReadOnResBody {
		gz.zr, gz.zerr = zr, nil
		return
	}
	gzipPoolPut(zr) // closed during the Read
}

func (gz *gzipReader) Read(p []byte) (int, error) {
	zr, err := gz.acquire()
	if err != nil {
		return 0, err
	}
	defer gz.release(zr)
	return zr.Read(p)
}

// Close releases the decoder and closes the underlying body.
func (gz *gzipReader) Close() error {
	gz.mu.Lock()
	if gz.zerr == nil && gz.zr != nil {
		gzipPoolPut(gz.zr)
		gz.zr = nil
	}
	gz.zerr = errReadOnClosedResBody
	gz.mu.Unlock()
	return gz.body.Close()
}
