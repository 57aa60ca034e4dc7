package pipelined

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// chunkedReader decodes a chunked body (RFC 9112 §7.1) strictly from br.
// Chunk sizes are bounded, chunk extensions are skipped within the line
// limit, and the trailer section is parsed like a header block.
type chunkedReader struct {
	br      *bufio.Reader
	n       int64 // bytes left in the current chunk
	started bool  // a chunk's data was begun (so a CRLF is due at its end)
	done    bool
	err     error
	trailer http.Header // received trailer fields, set at EOF
	limit   int64       // bound on one size line and on the trailer section
}

func newChunkedReader(br *bufio.Reader, limit int64) *chunkedReader {
	return &chunkedReader{br: br, limit: limit}
}

func (cr *chunkedReader) Read(p []byte) (int, error) {
	if cr.err != nil {
		return 0, cr.err
	}
	if cr.done {
		return 0, io.EOF
	}
	if cr.n == 0 {
		if err := cr.nextChunk(); err != nil {
			cr.err = err
			return 0, err
		}
		if cr.done {
			return 0, io.EOF
		}
	}
	if int64(len(p)) > cr.n {
		p = p[:cr.n]
	}
	n, err := cr.br.Read(p)
	cr.n -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		cr.err = err
	}
	return n, err
}

// nextChunk consumes the CRLF ending the previous chunk, then the next size
// line, and, for the last chunk, the trailer section.
func (cr *chunkedReader) nextChunk() error {
	if cr.started {
		var crlf [2]byte
		if _, err := io.ReadFull(cr.br, crlf[:]); err != nil {
			return unexpected(err)
		}
		if crlf != [2]byte{'\r', '\n'} {
			return framingErrorf("chunk data not followed by CRLF")
		}
	}
	budget := cr.limit
	line, err := readLine(cr.br, &budget, cr.limit)
	if err != nil {
		return unexpected(err)
	}
	size, err := parseChunkSize(line)
	if err != nil {
		return err
	}
	cr.started = true
	if size > 0 {
		cr.n = size
		return nil
	}
	// RFC 9112 §7.1.2: the trailer section ends with an empty line.
	budget = cr.limit
	for {
		line, err := readLine(cr.br, &budget, cr.limit)
		if err != nil {
			return unexpected(err)
		}
		if len(line) == 0 {
			break
		}
		i := indexColon(line)
		if i <= 0 || line[0] == ' ' || line[0] == '\t' || !validFieldName(line[:i]) {
			return framingErrorf("malformed trailer line %q", truncate(line))
		}
		value := trimOWS(line[i+1:])
		if !validFieldValue(value) {
			return framingErrorf("invalid trailer field value")
		}
		if cr.trailer == nil {
			cr.trailer = make(http.Header)
		}
		key := canonicalKey(line[:i])
		cr.trailer[key] = append(cr.trailer[key], string(value))
	}
	cr.done = true
	return nil
}

// parseChunkSize parses "chunk-size [ chunk-ext ]" (RFC 9112 §7.1).
func parseChunkSize(line []byte) (int64, error) {
	var n int64
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			goto ext
		}
		if i >= 15 {
			return 0, framingErrorf("chunk length too large")
		}
		n = n<<4 | int64(d)
	}
ext:
	if i == 0 {
		return 0, framingErrorf("invalid chunk size line %q", truncate(line))
	}
	rest := trimOWS(line[i:])
	if len(rest) > 0 && rest[0] != ';' {
		return 0, framingErrorf("invalid chunk size line %q", truncate(line))
	}
	if !validFieldValue(rest) {
		return 0, framingErrorf("control character in chunk extension")
	}
	return n, nil
}

func indexColon(b []byte) int {
	for i, c := range b {
		if c == ':' {
			return i
		}
	}
	return -1
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// bufferedBody is a response body the connection's reader has read in full.
// It owns nothing on the connection.
type bufferedBody struct {
	ctx     context.Context
	buf     []byte
	off     int
	trailer http.Header // received trailers, copied into dst at EOF
	dst     *http.Response
	mu      sync.Mutex
	closed  bool
}

func (b *bufferedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, ErrBodyReadAfterClose
	}
	if done := b.ctx.Done(); done != nil {
		select {
		case <-done:
			return 0, context.Cause(b.ctx)
		default:
		}
	}
	if b.off >= len(b.buf) {
		b.finish()
		return 0, io.EOF
	}
	n := copy(p, b.buf[b.off:])
	b.off += n
	if b.off >= len(b.buf) {
		b.finish()
		return n, io.EOF
	}
	return n, nil
}

func (b *bufferedBody) finish() {
	if b.trailer != nil {
		mergeTrailer(b.dst, b.trailer)
		b.trailer = nil
	}
}

func (b *bufferedBody) Close() error {
	b.mu.Lock()
	b.closed = true
	b.buf = nil
	b.mu.Unlock()
	return nil
}

// WriteTo lets io.Copy skip an intermediate buffer.
func (b *bufferedBody) WriteTo(w io.Writer) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, ErrBodyReadAfterClose
	}
	n, err := w.Write(b.buf[b.off:])
	b.off += n
	if err == nil {
		b.finish()
	}
	return int64(n), err
}

func mergeTrailer(resp *http.Response, tr http.Header) {
	if resp.Trailer == nil {
		resp.Trailer = tr
		return
	}
	for k, vv := range tr {
		resp.Trailer[k] = vv
	}
}

// bodyEvent is what a streaming body tells the connection's reader when it
// gives the connection back.
type bodyEvent uint8

const (
	bodyEOF       bodyEvent = iota // read to the end: the connection is reusable
	bodyClosed                     // closed early: drain what remains, or close
	bodyFailed                     // a read failed: the connection is dead
	bodyAbandoned                  // nobody will ever read it (request cancelled)
)

// streamBody is a response body read from the connection by the caller. While
// it is live it owns the connection's bufio.Reader; it hands it back to the
// connection's reader goroutine through done, exactly once.
type streamBody struct {
	c       *pconn
	ctx     context.Context
	r       io.Reader // framed reader over c.br: prefix, then limited/chunked/until-close
	remain  func() int64
	chunked *chunkedReader
	dst     *http.Response
	done    chan bodyEvent // capacity 1

	mu       sync.Mutex // held by Read; guards the fields below
	closed   bool
	finished bool
	readErr  error

	sent    atomic.Bool
	stopCtx func() bool
	// Guarded by c.deadlineMu: once gone, a cancellation no longer sets a
	// read deadline; deadlineSet tells the reader to clear one.
	gone        bool
	deadlineSet bool
}

// signal gives the connection back to its reader goroutine, once.
func (b *streamBody) signal(ev bodyEvent) {
	if b.sent.CompareAndSwap(false, true) {
		b.c.deadlineMu.Lock()
		b.gone = true
		b.c.deadlineMu.Unlock()
		if b.stopCtx != nil {
			b.stopCtx()
		}
		b.done <- ev
	}
}

func (b *streamBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, ErrBodyReadAfterClose
	}
	if b.finished {
		if b.readErr != nil {
			return 0, b.readErr
		}
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.finished = true
		if b.chunked != nil && b.chunked.trailer != nil {
			mergeTrailer(b.dst, b.chunked.trailer)
		}
		b.signal(bodyEOF)
		return n, io.EOF
	}
	if err != nil {
		if cerr := context.Cause(b.ctx); cerr != nil && b.ctx.Err() != nil {
			err = cerr
		}
		b.finished = true
		b.readErr = err
		b.signal(bodyFailed)
	}
	return n, err
}

func (b *streamBody) Close() error {
	if !b.mu.TryLock() {
		// A Read is blocked on the connection: unblock it by closing the
		// connection, then wait for it to return.
		b.c.closeConn()
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	if !b.finished {
		b.finished = true
		b.signal(bodyClosed)
	}
	return nil
}
