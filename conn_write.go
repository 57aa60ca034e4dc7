// This file holds a connection's writer side (connWriter): the write
// token (writeLock) and what its holder owns, the bufio.Writer (bw) with
// its writers; the write of a request (send, write) and its flush; and
// the count of bytes handed to the socket (wireCounter, under
// wireCounter.mu). The held write of a direct read is in
// conn_write_held.go.

package pipelined

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pipelined/pipelined/internal/h1"
)

// connWriter is a connection's writer side. Holding the token of
// writeLock means owning bw, lw and heldDeadline; wc counts what bw hands
// to the connection (under wc.mu), and wdMu serialises the changes of the
// write deadline that a cancellation makes (watchWrite). c is the
// connection whose writer side it is.
type connWriter struct {
	c  *pconn
	bw *bufio.Writer
	wc wireCounter // counts the bytes bw hands to conn
	lw limitWriter // writeBody's writer for in-memory bodies, owned with bw

	writeLock      chan struct{} // capacity 1: a token held = bw owned
	pendingWriters atomic.Int32  // writers waiting for writeLock; the last one flushes
	wdMu           sync.Mutex    // serialises write-deadline changes on cancellation

	// heldDeadline, owned by the holder of the write token: writeHeld set
	// a write deadline, which the flush within the look undoes before it
	// releases the token.
	heldDeadline bool
}

var errNotWritten = errors.New("pipelined: request not written")

func noStop() bool { return true }

// maxInlineBody is the largest replayable request body written in the
// caller's goroutine; other bodies are written by a goroutine of their own
// while the caller waits for the response (full duplex, as net/http).
const maxInlineBody = 64 << 10

// maxSmallBody is the largest request body written with no watch on the
// request's context (watchWrite): with its head, it fits in any socket
// send buffer that holds no unread requests of ours.
const maxSmallBody = 4 << 10

// smallBody reports whether r's body is replayable, of known length and
// at most maxSmallBody: written from memory, in the caller's goroutine.
func smallBody(r *request) bool {
	return r.req.GetBody != nil && r.req.ContentLength > 0 && r.req.ContentLength <= maxSmallBody
}

// send writes a's request on c. It returns a non-nil error only when
// nothing of the request was written (errNotWritten, the context's error,
// or the request's own: its body could not be had again, or prepareHead
// refused it); otherwise the outcome is delivered to a (attempt.deliver).
//
// In order: the write token (takeWriteToken), the body and the head
// (prepareHead), who reads the response (claimReader), a's place in the
// fifo (enqueue), then the write: inline, held until the look at the
// socket (writeHeld), or by a goroutine of its own while the response is
// read (full duplex). Nothing that can refuse the request comes after
// enqueue but the write itself: a request in the fifo gets a response.
func (wr *connWriter) send(a *attempt) error {
	c := wr.c
	r := a.r
	if err := wr.takeWriteToken(r.ctx); err != nil {
		return wr.tokenError(err)
	}
	body, err := r.body()
	var h h1.Head
	refused := false
	if err == nil {
		if h, err = prepareHead(r, body); err != nil {
			refused = true
			if body != nil {
				body.Close() // as net/http, which closes it on any error
			}
		}
	}
	if err != nil {
		// Nothing of the request was written: c goes on as it was. An
		// earlier writer may have left its request for this one to flush.
		<-wr.writeLock
		wr.flushLeftovers()
		if refused {
			traceRefused(r, &h, err)
		}
		return err
	}
	inline := inlineBody(r, body)
	direct, held := wr.claimReader(a, body, inline)
	if !c.enqueue(a, direct) {
		wr.giveBack(r, body, direct)
		return errNotWritten
	}
	if !inline {
		// Full duplex: the response may come (and be returned) while the
		// body is still being written, as with net/http.
		a.writeDone = make(chan struct{})
		go wr.write(a, h, body, false)
		return nil
	}
	if held {
		return wr.writeHeld(a, &h, body)
	}
	wr.write(a, h, body, direct)
	if direct {
		c.startDirect(a)
		c.readDirect(a)
	}
	return nil
}

// tokenError is send's error when the write token could not be taken
// (takeWriteToken's err): errNotWritten if c closed, else the context's
// cause. An earlier writer may then have left its request unflushed for
// the one that gave up: it is flushed in the background.
func (wr *connWriter) tokenError(err error) error {
	if err == net.ErrClosed {
		return errNotWritten
	}
	go wr.flushLeftovers()
	return err
}

// inlineBody reports whether r's body (nil: none) is written in the
// caller's goroutine: none, or a replayable one of known length up to
// maxInlineBody. Any other is written by a goroutine of its own.
func inlineBody(r *request, body io.ReadCloser) bool {
	return body == nil || r.req.GetBody != nil && r.req.ContentLength > 0 && r.req.ContentLength <= maxInlineBody
}

// claimReader decides who reads the response to a's request: its caller
// (direct, conn_direct.go) or c's reader goroutine; and whether the request is
// held until the look at the socket (held, writeHeld). A caller about to
// read its own response first checks that nothing came while c rested: if
// something did (a close, or a response to nothing), c takes nothing more,
// so that a is not written (enqueue), and the reader goroutine reads what
// came and ends the connection. The caller holds the write token.
func (wr *connWriter) claimReader(a *attempt, body io.ReadCloser, inline bool) (direct, held bool) {
	c := wr.c
	direct = inline && c.claimDirect(a)
	// A direct request written in one pass with the look at the socket
	// and the wait for its response (writeHeld) is looked at there; here,
	// only what is already read is.
	tells := direct && c.socketTells()
	held = tells && wr.mayHold(a, body)
	spoke := held && !c.quietBuffered()
	if direct && !held {
		switch {
		case !c.quietBuffered():
			spoke = true
		case tells && !c.peek.SocketQuiet():
			spoke = true
			c.peerEnded() // at the socket: a close, or a response to nothing
		}
	}
	if spoke {
		// Something came while nobody was reading: the server closed the
		// connection, or sent what nobody asked for. Write nothing; the
		// reader goroutine reads it and ends the connection.
		c.stopWriting()
		c.handBack(rdReader)
		return false, false
	}
	return direct, held
}

// giveBack undoes what send took for a request c will not write: the
// read turn (direct), the write token, and the body, left for the next
// attempt (a fresh copy if replayable, else the same body, unread).
func (wr *connWriter) giveBack(r *request, body io.ReadCloser, direct bool) {
	c := wr.c
	if direct {
		c.handBack(rdReader)
	}
	<-wr.writeLock
	if body != nil {
		if r.req.GetBody != nil {
			body.Close() // the next attempt gets a fresh copy
		} else {
			r.bodyUsed = false // unread: the next attempt reuses it
		}
	}
}

// write writes a's request, holding the write token, and releases it.
// direct: a's caller holds the read turn (conn_direct.go), to read the response
// once the request is written.
func (wr *connWriter) write(a *attempt, h h1.Head, body io.ReadCloser, direct bool) {
	c := wr.c
	stop, cancelled, deadline := wr.watchWrite(a.r, body)
	tunnel, body := tunnelBody(a.r, body)
	werr, deferFlush := wr.writeOut(a, &h, body, tunnel != nil)
	if deadline {
		c.conn.SetWriteDeadline(time.Time{})
	}
	<-wr.writeLock
	if werr == nil && deferFlush {
		werr = wr.flushSoon()
	}
	wr.stopWriteWatch(stop, cancelled, werr)
	a.written.Store(werr == nil)
	if a.writeDone != nil {
		close(a.writeDone)
	}
	if werr != nil {
		wr.writeFailed(a, werr, tunnel)
		return
	}
	if tunnel != nil {
		go wr.copyTunnel(tunnel)
	}
	c.observeWritten(a, direct)
	c.armHeaderTimeout(a)
}

// watchWrite bounds the write of r's request (body: its body, nil for
// none) by r's context, if that can end. A body that is not small, or a
// CONNECT, is watched (context.AfterFunc): a cancellation sets *cancelled
// and a past write deadline, under wdMu (cancelled is nil, and allocates
// nothing, for a write that is not watched). A request head, alone or
// with a small body, has the context's deadline, if any, as its write
// deadline instead (deadline: to be cleared once written). stop stops
// the watch.
func (wr *connWriter) watchWrite(r *request, body io.ReadCloser) (stop func() bool, cancelled *bool, deadline bool) {
	c := wr.c
	if r.ctx.Done() == nil { // a context that can never be cancelled needs no watch
		return noStop, nil, false
	}
	if body != nil && !smallBody(r) || r.method == http.MethodConnect {
		flag := new(bool)
		return context.AfterFunc(r.ctx, func() {
			wr.wdMu.Lock()
			*flag = true
			c.conn.SetWriteDeadline(aLongTimeAgo)
			wr.wdMu.Unlock()
		}), flag, false
	}
	if dl, ok := r.ctx.Deadline(); ok {
		// A request head, alone or with a small body, fits in the
		// socket buffer unless the server has stopped reading: bound
		// it by the context's deadline rather than watch the context,
		// which costs more than the write (an AfterFunc registers with
		// the parent). A cancellation meanwhile is seen by await,
		// which closes the connection if nobody wants its response.
		c.conn.SetWriteDeadline(dl)
		return noStop, nil, true
	}
	return noStop, nil, false
}

// stopWriteWatch stops watchWrite's watch (stop; cancelled is not nil
// where stop can report false). A cancellation that came while a write
// went through anyway leaves no past deadline behind: the request is
// written, and its response is read.
func (wr *connWriter) stopWriteWatch(stop func() bool, cancelled *bool, werr error) {
	c := wr.c
	if !stop() {
		wr.wdMu.Lock()
		if *cancelled && werr == nil {
			c.conn.SetWriteDeadline(time.Time{})
		}
		wr.wdMu.Unlock()
	}
}

// tunnelBody splits off the body of a user CONNECT (tunnel), which
// streams both ways (golang/go#17227): it is copied raw, as written,
// after the head and while the response is read (copyTunnel), and
// nothing else is ever written on the connection. Any other body is
// returned as rest.
func tunnelBody(r *request, body io.ReadCloser) (tunnel, rest io.ReadCloser) {
	if r.method == http.MethodConnect && body != nil && r.req.ContentLength <= 0 {
		return body, nil
	}
	return nil, body
}

// writeOut writes a's request into bw, running the hooks told of the
// write with c held (hooked), and flushes it at once unless it is to be
// flushed with the requests of the writers queued behind it (deferFlush:
// flushSoon, once the write token is released). tunnel: a CONNECT's
// body follows (tunnelBody). The write token is held.
func (wr *connWriter) writeOut(a *attempt, h *h1.Head, body io.ReadCloser, tunnel bool) (werr error, deferFlush bool) {
	c := wr.c
	r := a.r
	// The hooks told of the write run with the write token held: the
	// connection is held meanwhile (hooked).
	hold := writeHooked(r.trace)
	if hold {
		c.ev.hold(c, true)
	}
	werr = writeRequest(wr.bw, &wr.lw, r, h, body, wr.waitForContinue(a))
	if a.together {
		a.wireEnd.Store(wr.wc.written() + int64(wr.bw.Buffered()))
	}
	if t := r.trace; t != nil && t.WroteRequest != nil {
		// As net/http: once written to the buffer, before the flush, so
		// that it always precedes GotFirstResponseByte.
		t.WroteRequest(httptraceWroteRequest(werr))
	}
	if hold {
		c.ev.hold(c, false)
	}
	// A pipelineable request is flushed by the last of the writers that
	// queue up behind one another (see flushSoon); others at once.
	// A connection that is not pipelining has nothing to coalesce: flush
	// now, under the token already held.
	deferFlush = r.pipelineable && !a.alone && !tunnel && c.t.depth > 1 && wr.pipelining()
	if werr == nil && !deferFlush {
		werr = wr.bw.Flush()
	}
	return werr, deferFlush
}

// writeHooked reports whether trace has a hook told of a request's write
// (WroteHeaderField, WroteHeaders, Wait100Continue, WroteRequest).
func writeHooked(t *httptrace.ClientTrace) bool {
	return t != nil && (t.WroteHeaderField != nil || t.WroteHeaders != nil || t.Wait100Continue != nil || t.WroteRequest != nil)
}

// writeFailed settles a failed write of a's request.
func (wr *connWriter) writeFailed(a *attempt, werr error, tunnel io.ReadCloser) {
	c := wr.c
	r := a.r
	var be *requestBodyError
	if errors.As(werr, &be) {
		// The caller's body failed: report its error, not a connection
		// error. The connection holds a partial request.
		a.deliver(result{err: be.err})
	} else if cerr := context.Cause(r.ctx); cerr != nil && r.ctx.Err() != nil {
		a.deliver(result{err: cerr})
	} else if tunnel == nil && !isTimeout(werr) {
		// The peer closed or reset the connection. Responses it sent
		// before that may still be in our receive buffer: stop writing and
		// let the reader take them, then fail what is left (RFC 9112 §9.6
		// on the TCP reset problem).
		c.stopWriting()
		return
	}
	if tunnel != nil {
		tunnel.Close()
	}
	c.fail(werr)
}

// copyTunnel writes the body of a CONNECT request to the connection
// unbuffered, so that each Write of the caller reaches the server at once.
// It ends when the body ends or the connection fails; like net/http, it
// cannot end a body Read that never returns.
func (wr *connWriter) copyTunnel(body io.ReadCloser) {
	c := wr.c
	defer body.Close()
	io.Copy(c.conn, body)
}

// flushSoon makes sure that what the caller has just written is flushed,
// coalescing it with the requests of other writers: if a writer is waiting
// for the write token, that writer will flush; otherwise this goroutine
// yields once, so that callers about to write on this connection (those
// woken by the responses just delivered) can add their requests, and then
// flushes everything buffered in one write. It is used only while the
// connection is pipelining (pipelining): one that carries one request at a
// time has nothing to coalesce, and its writer flushes at once.
func (wr *connWriter) flushSoon() error {
	if wr.pendingWriters.Load() > 0 {
		return nil
	}
	runtime.Gosched()
	return wr.flushBuffered()
}

// pipelining reports whether requests share c at the moment, or did among
// the last few written, or one was placed behind the writer's and is on
// its way: then callers woken by the responses just read, or given a
// place, are likely to write on c in a moment, and a flush should wait
// for them.
func (wr *connWriter) pipelining() bool {
	c := wr.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.fifo) > 1 || c.recentBehind > 0 || int(c.placed.Load()) > len(c.fifo)
}

// flushLeftovers flushes requests that a writer left buffered expecting a
// writer behind it to flush, when that writer gave up.
func (wr *connWriter) flushLeftovers() {
	c := wr.c
	// A flush on a closed connection (its token free, so taken without a
	// look at c.closed) fails with net.ErrClosed wrapped: not a new cause.
	if err := wr.flushBuffered(); err != nil && !errors.Is(err, net.ErrClosed) {
		c.fail(err)
	}
}

// flushBuffered takes the write token and flushes whatever is buffered. It
// counts as a pending writer while it waits, so that writers finishing
// meanwhile leave their flush to it.
func (wr *connWriter) flushBuffered() error {
	if err := wr.takeWriteToken(context.Background()); err != nil {
		return err
	}
	var err error
	if wr.bw.Buffered() > 0 {
		err = wr.bw.Flush()
	}
	<-wr.writeLock
	return err
}

// takeWriteToken takes the write token, counting as a pending writer
// while it waits (flushSoon). It returns net.ErrClosed if the connection
// closes first, or ctx's cause if ctx ends first. A free token is taken
// without a select over those (a closed connection is then seen by the
// holder, under mu).
func (wr *connWriter) takeWriteToken(ctx context.Context) error {
	c := wr.c
	select {
	case wr.writeLock <- struct{}{}:
		return nil
	default:
	}
	wr.pendingWriters.Add(1)
	defer wr.pendingWriters.Add(-1)
	select {
	case wr.writeLock <- struct{}{}:
		return nil
	case <-c.closed:
		return net.ErrClosed
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// wireCounter is the connection as bw sees it: it counts the bytes handed
// to the connection, so that whether a request may have reached the server
// is known (net/http's persistConn.nwrite). mu is held during each Write:
// the server may respond (or close) before Write returns, so a reader that
// must know the count (fail) closes the connection, which ends any Write,
// and then takes mu (written).
type wireCounter struct {
	conn net.Conn
	mu   sync.Mutex   // held during conn.Write; a leaf
	n    atomic.Int64 // bytes written; stored under mu, loaded without it
	// hold, guarded by mu, keeps what bw writes in held instead of
	// writing it, until release (pconn.writeHeld): a request larger than
	// bw reaches the socket only once the socket has been looked at.
	hold bool
	held []byte
	// unacked is the connection's netReader.unacked: a write carries the
	// acknowledgement of what was received before it.
	unacked *atomic.Bool
}

func (w *wireCounter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hold {
		w.held = append(w.held, p...)
		return len(p), nil
	}
	n, err := w.conn.Write(p)
	w.n.Add(int64(n))
	if w.unacked.Load() {
		w.unacked.Store(false)
	}
	return n, err
}

// bodyCopySize is the size of the pooled buffer a request body is read
// into when it is not written from its own memory (wireCounter.ReadFrom,
// limitWriter.ReadFrom, chunked bodies): the largest piece written at once.
const bodyCopySize = maxReadAhead

// ReadFrom writes a request body to the connection in pieces of up to
// bodyCopySize, as net/http's connection writer does (persistConnWriter
// hands the body to the socket's ReadFrom): bw calls it once its own
// buffer is written out, so that a large body does not reach the socket
// in pieces of bw's size (WriteBufferSize, 4 KiB by default), a system
// call each. The body is read outside mu, so that one that blocks (a
// pipe) holds up nobody who must learn what was written (written).
func (w *wireCounter) ReadFrom(r io.Reader) (int64, error) {
	return copyPooled(w, r)
}

// copyPooled copies src to dst through a pooled buffer of bodyCopySize
// (io.Copy would make one per call), never through dst's ReadFrom.
func copyPooled(dst io.Writer, src io.Reader) (int64, error) {
	bufp := getBodyBuf(bodyCopySize)
	defer putBodyBuf(bufp)
	return io.CopyBuffer(writeOnly{dst}, src, *bufp)
}

// writeOnly hides its writer's ReadFrom from io.CopyBuffer.
type writeOnly struct{ w io.Writer }

func (o writeOnly) Write(p []byte) (int, error) { return o.w.Write(p) }

// release ends a hold: it writes what was held if write is true, and
// drops it otherwise.
func (w *wireCounter) release(write bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hold = false
	held := w.held
	w.held = nil
	if !write || len(held) == 0 {
		return nil
	}
	n, err := w.conn.Write(held)
	if w.unacked.Load() {
		w.unacked.Store(false)
	}
	w.n.Add(int64(n))
	return err
}

// written returns the bytes handed to the connection so far. Only the
// writer holding the write token may call it; anyone else, writtenAfterClose.
func (w *wireCounter) written() int64 { return w.n.Load() }

// writtenAfterClose returns the bytes handed to the connection, once it is
// closed: it waits for a Write still running, whose bytes may have reached
// the server (which may have closed the connection on them before the
// Write returned), and which the close ends (net.Conn: Close unblocks
// Write). net/http likewise waits for its writeLoop before it says that
// nothing was written (mapRoundTripError). Read without that wait, a POST
// whose server read it and closed was taken for unwritten and sent again.
func (w *wireCounter) writtenAfterClose() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n.Load()
}
