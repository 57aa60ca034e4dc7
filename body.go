// This file holds the response body (body): its buffer, filled by the
// holder of the connection's read turn and read by the caller, under
// body.mu, with the stream it lends the caller (source); and the pools of
// body buffers (getBodyBuf, putBodyBuf).

package pipelined

import (
	"context"
	"io"
	"net/http"
	"sync"
)

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Body buffers come from size-classed pools and go back to them when both
// the connection's reader and the caller are done with them, so that a
// response costs no fresh allocation of its size.
var bodyBufClasses = [...]int{1 << 10, 4 << 10, 16 << 10, maxReadAhead, maxBufferedBody}

var bodyBufPools [len(bodyBufClasses)]sync.Pool

// getBodyBuf returns a pooled buffer of at least n bytes (at most
// maxBufferedBody). The pools hold *[]byte, so that putting one back
// allocates nothing.
func getBodyBuf(n int) *[]byte {
	for i, size := range bodyBufClasses {
		if n <= size {
			if b, ok := bodyBufPools[i].Get().(*[]byte); ok {
				return b
			}
			b := make([]byte, size)
			return &b
		}
	}
	b := make([]byte, n)
	return &b
}

func putBodyBuf(b *[]byte) {
	for i, size := range bodyBufClasses {
		if len(*b) == size {
			bodyBufPools[i].Put(b)
			return
		}
	}
}

// body is a response body. The connection's reader goroutine is its only
// writer: it copies the body from the connection into buf as it arrives,
// waiting for room when buf is full, and reports the end (or an error)
// only after the connection has been handed back to its pool. The caller
// reads from buf. So the caller sees the headers at once and the bytes as
// they arrive, and the connection's bufio.Reader never leaves its reader.
//
// mu guards every field below it. The reader fills buf[w:] without holding
// mu (nothing else touches that part); only the reader compacts or grows
// buf, under mu.
type body struct {
	ctx context.Context
	dst *http.Response // receives the trailers at EOF

	mu   sync.Mutex
	cond sync.Cond // signalled on every change below
	bufp *[]byte   // from bodyBufPools
	buf  []byte    // *bufp
	r, w int       // unread data is buf[r:w]
	// The flags pack together (the body fits the allocator's 240-byte
	// class); reading and srcDone are src's (below).
	writing  bool // the reader is filling buf[w:] outside mu
	lent     bool // WriteTo is writing buf[r:w] outside mu
	end      bool // the reader is done: err is final
	closed   bool // the caller closed the body
	recycled bool
	watched  bool // an AfterFunc wakes waiting reads when ctx ends
	reading  bool
	srcDone  bool
	err      error
	limit    int // buf grows up to this size (maxReadAhead unless readAhead)
	trailer  http.Header
	onClose  func() // set by the reader while streaming: the caller closed early
	// gone is closed when the connection the reader fills buf from is
	// closed: the reader waits for room no longer (the caller may never
	// make any, and Transport.Close waits for the reader).
	gone <-chan struct{}
	// broken, once set, is what every read returns: the transport closed
	// the connection under the body (Transport.Close), whatever had
	// arrived.
	broken error
	// src, while the body is a stream, is its bytes on the connection,
	// lent to the caller (lend): a read that finds buf empty takes them
	// from there itself, straight into its own buffer if that is at
	// least as large as buf, else into buf (bufio.Reader's rule). So a
	// stream costs its caller a read from the socket, without the
	// reader's copy through buf and its wake-up of the caller per piece.
	// reading: a caller reads from src outside mu; srcDone: src reached
	// the body's end or failed (srcErr), and the reader takes the
	// connection back.
	src    source
	srcErr error
}

// A source is the rest of a stream on its connection (bodyStream).
type source interface {
	// read reads the body's next bytes into p; done reports that the
	// body ended (err nil) or failed.
	read(p []byte) (n int, done bool, err error)
}

func newBody(ctx context.Context, dst *http.Response, bufp *[]byte) *body {
	b := &body{ctx: ctx, dst: dst, bufp: bufp, buf: *bufp, limit: maxReadAhead}
	b.cond.L = &b.mu
	return b
}

// Read implements io.Reader.
func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if b.closed {
			return 0, errReadOnClosedResBody
		}
		if b.broken != nil {
			return 0, b.broken
		}
		if b.r < b.w {
			if len(p) == 0 {
				return 0, nil
			}
			if err := b.ctxErr(); err != nil {
				return 0, err
			}
			n := copy(p, b.buf[b.r:b.w])
			b.r += n
			if b.r == b.w && !b.writing && b.end && b.err == nil {
				b.atEOFLocked()
				return n, io.EOF
			}
			if b.src == nil { // else the reader waits for the source, not for room
				b.cond.Broadcast()
			}
			return n, nil
		}
		if b.lendsLocked() && len(p) > 0 {
			if err := b.ctxErr(); err != nil {
				return 0, err
			}
			if len(p) < len(b.buf) {
				b.readSrcLocked(nil) // into buf: copied out above
			} else if n := b.readSrcLocked(p); n > 0 {
				return n, nil
			}
			continue
		}
		if b.end {
			if b.err != nil {
				return 0, b.err
			}
			b.atEOFLocked()
			return 0, io.EOF
		}
		if err := b.waitLocked(); err != nil {
			return 0, err
		}
	}
}

// ctxErr returns the cause of the request's context if it has ended.
func (b *body) ctxErr() error {
	if done := b.ctx.Done(); done != nil {
		select {
		case <-done:
			return context.Cause(b.ctx)
		default:
		}
	}
	return nil
}

// lendsLocked reports whether the caller may read from the lent source
// now: buf is empty, and no other read holds the source.
func (b *body) lendsLocked() bool {
	return b.src != nil && !b.reading && !b.srcDone && !b.lent
}

// readSrcLocked reads from the lent source into p, or into buf if p is
// nil, outside mu, and returns the bytes read. The end of the source, or
// its failure, hands the connection back to the reader (lend), which ends
// the body. b.mu is held.
func (b *body) readSrcLocked(p []byte) int {
	into := p
	if p == nil {
		b.r, b.w = 0, 0
		into = b.buf
	}
	b.reading = true
	src := b.src
	b.mu.Unlock()
	n, done, err := src.read(into)
	b.mu.Lock()
	b.reading = false
	if p == nil && !b.closed {
		b.w = n
	}
	if done {
		b.srcDone, b.srcErr = true, err
	}
	if done || b.closed || b.goneLocked() {
		b.cond.Broadcast() // the reader waits for this read to end (lend)
	}
	return n
}

// goneLocked reports whether the connection is closed.
func (b *body) goneLocked() bool {
	select {
	case <-b.gone:
		return true
	default:
		return false
	}
}

// lend lets the caller read the rest of a stream from src itself (see
// body.src), and waits until the caller is done with it: it returns the
// stream's outcome once src ended or failed (ended true, and err), and
// ended false if the caller closed the body first (the reader drains what
// is left, or closes the connection) or the connection was closed (gone:
// open false). It never returns while a caller reads from src. Only the
// connection's reader calls it.
func (b *body) lend(src source) (ended, open bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.src = src
	b.cond.Broadcast() // a read may be waiting for bytes
	defer func() { b.src = nil }()
	for {
		switch {
		case b.reading:
		case b.srcDone:
			return true, true, b.srcErr
		case b.closed:
			return false, true, nil
		case b.goneLocked():
			return false, false, nil
		}
		b.cond.Wait()
	}
}

// waitLocked waits for the reader to change the body, or for the request's
// context to end: its cause is returned, as net/http does.
func (b *body) waitLocked() error {
	if err := b.ctxErr(); err != nil {
		return err
	}
	if b.ctx.Done() != nil && !b.watched {
		b.watched = true
		context.AfterFunc(b.ctx, func() {
			b.mu.Lock()
			b.cond.Broadcast()
			b.mu.Unlock()
		})
	}
	b.cond.Wait()
	return nil
}

// WriteTo lets io.Copy skip an intermediate buffer. It writes unread data
// straight from buf, outside mu; meanwhile (lent) the reader may append
// to buf but neither compacts nor replaces it.
func (b *body) WriteTo(w io.Writer) (int64, error) {
	var total int64
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if b.closed {
			return total, errReadOnClosedResBody
		}
		if b.broken != nil {
			return total, b.broken
		}
		if b.r < b.w {
			if err := b.ctxErr(); err != nil {
				return total, err
			}
			chunk := b.buf[b.r:b.w]
			b.lent = true
			b.mu.Unlock()
			n, err := w.Write(chunk)
			b.mu.Lock()
			b.lent = false
			if !b.closed {
				b.r += n
			}
			total += int64(n)
			if b.src == nil { // else the reader waits for the source, not for room
				b.cond.Broadcast()
			}
			if err != nil {
				return total, err
			}
			continue
		}
		if b.lendsLocked() {
			if err := b.ctxErr(); err != nil {
				return total, err
			}
			b.readSrcLocked(nil) // into buf: written from there above
			continue
		}
		if b.end {
			if b.err != nil {
				return total, b.err
			}
			b.atEOFLocked()
			return total, nil
		}
		if err := b.waitLocked(); err != nil {
			return total, err
		}
	}
}

// atEOFLocked delivers the trailers and recycles the buffer once the
// caller has read the whole body.
func (b *body) atEOFLocked() {
	if b.trailer != nil {
		mergeTrailer(b.dst, b.trailer)
		b.trailer = nil
	}
	b.recycleLocked()
}

func (b *body) recycleLocked() {
	if b.recycled || b.writing || b.lent || !b.end {
		return
	}
	b.recycled = true
	putBodyBuf(b.bufp)
	b.bufp, b.buf = nil, nil
	b.r, b.w = 0, 0
}

// Close implements io.Closer. Closing a body before its end tells the
// connection's reader, which drains a small known remainder or closes the
// connection (so the server learns at once, as with net/http).
func (b *body) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	early := !b.end || b.r < b.w
	onClose := b.onClose
	b.r = b.w
	if b.end {
		b.recycleLocked()
	}
	b.cond.Broadcast()
	b.mu.Unlock()
	if early && onClose != nil {
		onClose()
	}
	return nil
}

// space waits until buf has room for the reader and returns it, growing
// buf up to its limit first; it returns nil once the caller has closed
// the body, and nil and false once the connection is closed (gone). Only
// the connection's reader calls it.
func (b *body) space() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		if b.closed {
			return nil, true
		}
		if b.goneLocked() {
			return nil, false
		}
		if b.r == b.w && !b.lent {
			b.r, b.w = 0, 0
		}
		if b.w < len(b.buf) {
			b.writing = true
			return b.buf[b.w:], true
		}
		if b.lent {
			b.cond.Wait()
			continue
		}
		if b.r > 0 {
			b.w = copy(b.buf, b.buf[b.r:b.w])
			b.r = 0
			continue
		}
		if len(b.buf) < b.limit {
			nb := getBodyBuf(2 * len(b.buf))
			copy(*nb, b.buf[:b.w])
			putBodyBuf(b.bufp)
			b.bufp, b.buf = nb, *nb
			continue
		}
		b.cond.Wait()
	}
}

// connClosed wakes the reader if it waits for room (space): the
// connection is closed (gone). With err, a body that has not ended fails
// every read from now on with err.
func (b *body) connClosed(err error) {
	b.mu.Lock()
	if err != nil && !b.end && b.broken == nil {
		b.broken = err
	}
	b.cond.Broadcast()
	b.mu.Unlock()
}

// readAhead lets buf grow up to n bytes: a body whose length is not known
// is read ahead whole while it may be a bounded one (bodyStream.tentative),
// so that its reader does not wait for the caller to make room.
func (b *body) readAhead(n int) {
	b.mu.Lock()
	b.limit = n
	b.mu.Unlock()
}

// commit makes n more bytes of buf readable.
func (b *body) commit(n int) {
	b.mu.Lock()
	b.writing = false
	b.w += n
	b.cond.Broadcast()
	b.mu.Unlock()
}

// finish ends the body: err nil means the whole body arrived. It runs
// after the connection was handed back to its pool, so that a caller that
// sees EOF finds the connection free.
func (b *body) finish(err error, trailer http.Header) {
	b.mu.Lock()
	b.writing = false
	b.end = true
	b.err = err
	b.trailer = trailer
	b.onClose = nil
	if b.closed {
		b.recycleLocked()
	}
	b.cond.Broadcast()
	b.mu.Unlock()
}

// setOnClose installs the function Close calls for an early close; it
// reports false if the caller has already closed the body.
func (b *body) setOnClose(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.onClose = f
	return true
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
