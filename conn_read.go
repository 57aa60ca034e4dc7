// This file holds a connection's reader side (connReader): the reader
// goroutine (readLoop), the read of each response's head and body
// (readOne, readBody), the end of a response (finishResponse, popHead),
// and netReader, the connection as the bufio.Reader sees it. What the
// reader owns (br, nr, chunkHint, prevEnd) belongs to the holder of the
// read turn (rd, which changes under pconn.mu; conn_direct.go).

package pipelined

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/pipelined/pipelined/internal/h1"
	"github.com/pipelined/pipelined/internal/socket"
)

// connReader is a connection's reader side: the read turn (rd, changed
// under pconn.mu) and what its holder owns: br and its source nr, the
// body hint (chunkHint), prevEnd, the look at the socket (peek), and the
// direct read under way (directing, directWatched). c is the connection
// whose reader side it is.
type connReader struct {
	c  *pconn
	br *bufio.Reader
	nr netReader // what br reads from

	// chunkHint is the size of the last chunked body read on c (up to
	// maxBufferedBody): the next one's buffer starts at it, so that one
	// of the same size grows no buffer (each growth copies). Only the
	// reader goroutine, which reads bodies, touches it.
	chunkHint int

	// filling is the body the reader goroutine is filling, if any: fail
	// wakes it if it waits for its caller to make room (body.space).
	filling atomic.Pointer[body]

	// The read turn (conn_direct.go): who reads br next. rd and pending
	// are guarded by pconn.mu. The reader goroutine waits on wake and
	// restT while the connection rests; a caller that held the turn
	// signals wake when it hands the turn back, or re-arms restT when it
	// leaves the connection resting.
	rd      atomic.Uint32 // a readTurn; changed under mu, read without it only as a hint
	pending *pendingBody  // a head read by a direct reader, its body not yet
	wake    chan struct{} // capacity 1: rd may have changed
	restT   *time.Timer   // ends a rest: the reader watches the connection
	// canDirect: the connection can be checked for bytes without reading
	// them (quiet), so a caller may read its own response. Set once.
	canDirect bool
	peek      *socket.Peeker // looks at the socket (quiet); the read turn's. Set with canDirect
	// readsNow: a direct reader may read a body from the socket itself
	// (socket.Peeker.ReadNow): the connection is a plain TCP one, with nothing
	// of its own between it and the socket (no TLS, no wrapper that
	// counts or traces its reads). Set with peek.
	readsNow bool

	// directing is the attempt whose caller reads its own response, until
	// the turn passes on; directWatched says that its context is watched
	// (directA is set). Both belong to the holder of the read turn
	// (directing is atomic so that the end of a direct read is taken
	// once, by finishResponse or by readDirect).
	directing     atomic.Pointer[attempt]
	directWatched bool
	onCancel      func() // cancelDirect, the function of every watch (startDirect)

	// prevEnd, owned by whoever holds the read turn: when the response
	// ahead of the current head ended, if the head was written behind it.
	prevEnd monoTime
}

// readLoop reads responses until the connection fails or closes.
func (rr *connReader) readLoop() {
	c := rr.c
	defer c.t.wg.Done()
	err := rr.readResponses()
	c.endWatch()
	if err == errUpgraded {
		return // detached: its caller owns the connection
	}
	c.fail(err)
}

func (rr *connReader) readResponses() error {
	c := rr.c
	held := false // the reader holds the read turn (conn_direct.go)
	for {
		// The read turn (conn_direct.go): a connection with nothing in flight
		// rests, and its next request's caller may read the response itself.
		// A reader that holds the turn with bytes buffered reads on: the
		// pipeline's common case, with no lock taken.
		var p *pendingBody
		if rr.canDirect && !(held && rr.br.Buffered() > 0) {
			var err error
			if p, err = rr.rest(); err != nil {
				return err
			}
			held = true
		}
		if p != nil {
			// A direct reader read this head and left the body to us.
			var err error
			if p.got != nil { // its start read already (readNow)
				err = rr.readBodyFrom(p.a, p.resp, p.f, p.closing, p.got, p.n)
			} else { // a whole body may have come since
				err = rr.readBody(p.a, p.resp, p.f, p.closing, false)
			}
			if err != nil {
				return err
			}
			if p.closing {
				return errConnClosing
			}
			continue
		}
		_, err := rr.br.Peek(1)
		a := c.head()
		if a == nil {
			if err != nil {
				return errIdleClosed
			}
			// RFC 9112 §9.2: data with no outstanding request MUST NOT be
			// treated as a response.
			return ErrUnsolicitedResponse
		}
		if err := rr.readOne(a, err, false); err != nil {
			return err
		}
	}
}

// readOne reads the response to a, the head of fifo, whose first byte has
// arrived (or failed to: peekErr). It returns nil when the connection is
// positioned at the next response. A direct reader (conn_direct.go) reads only
// a body already in the buffer; it leaves any other to the reader
// goroutine (errHandOver, with c.pending set).
func (rr *connReader) readOne(a *attempt, peekErr error, direct bool) error {
	c := rr.c
	if peekErr != nil {
		if c.disarm(a) && isTimeout(peekErr) {
			return ErrResponseHeaderTimeout
		}
		return peekErr
	}
	if t := a.r.trace; t != nil && t.GotFirstResponseByte != nil && a.state.Load() == attemptWaiting {
		c.hooked(t.GotFirstResponseByte)
	}
	resp, f, err := h1.ReadResponseHead(rr.br, a.r.method, c.t.opts.MaxResponseHeaderBytes, rr.interimHook(a))
	armed := c.disarm(a)
	c.holStop()
	if err != nil {
		if armed && isTimeout(err) {
			return ErrResponseHeaderTimeout
		}
		c.headCut.Store(true) // bytes of the response came: an end now cuts it
		return err
	}
	c.mu.Lock()
	a.headersRead = true
	a.place = c.answered + 1
	// RFC 9112 §9.3.2: a server responds to pipelined requests in the order
	// received. gunicorn's gthread worker reads one sent with the request
	// ahead and then leaves it without a response until more bytes come: a
	// response to a request sent together with the one ahead, before anything
	// sent after it, is one such a server does not give (probeLocked).
	a.proves = a.together && rr.nr.seenWrote <= a.wireEnd.Load()
	behind, sentAt, headAt := a.behind, a.sentAt, a.headAt
	c.mu.Unlock()
	if headAt != 0 {
		now := monoNow()
		a.headWait = max(time.Duration(now-headAt), 1)
		if behind && sentAt != 0 && rr.prevEnd != 0 {
			a.gap, a.timed = time.Duration(now-rr.prevEnd), true
			a.shadow = time.Duration(rr.prevEnd - sentAt)
		}
	}
	if _, ok := resp.Header["Keep-Alive"]; ok {
		ka := h1.ParseKeepAlive(resp.Header)
		a.ka = &ka
	}
	resp.Request = a.r.req
	resp.TLS = c.tls
	a.finalContinue(resp)
	// RFC 9110 §15.2.2: a 101 names the protocol it switches to
	// (Upgrade). One that names none, or no Connection: upgrade, switches
	// to nothing anyone could read: as with net/http, it is the response,
	// without a body, and the connection ends with it.
	switched := resp.StatusCode == http.StatusSwitchingProtocols && h1.IsProtocolSwitch(resp.Header)
	closing := resp.Close || a.r.closeAfter || resp.StatusCode == http.StatusSwitchingProtocols && !switched
	if closing {
		// RFC 9112 §9.6: a server that sends "close" processes no
		// further request on the connection. Write nothing more, and
		// send what is already written behind this response elsewhere:
		// it will not run here.
		c.stopWriting()
		c.resendBehind(true)
	}
	if switched {
		resp.Body = &upgradeBody{br: rr.br, conn: c.conn}
		rr.popHead()
		// Out of the pool before the caller has it: the connection
		// is the caller's now.
		c.detach()
		if !a.deliver(result{resp: resp}) {
			c.closeConn() // nobody took it
		}
		return errUpgraded
	}
	if err := rr.readBody(a, resp, f, closing, direct); err != nil {
		return err
	}
	if closing {
		return errConnClosing
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// readBody hands resp to a's caller and reads its body framed by f into the
// response's body buffer, returning when the connection is positioned at
// the next response. A body already in the read buffer is handed over
// whole; any other is handed over as it arrives, the headers first.
func (rr *connReader) readBody(a *attempt, resp *http.Response, f h1.Framing, closing, direct bool) error {
	c := rr.c
	a.bodyLen = -1
	if f.Kind == h1.BodyLength {
		a.bodyLen = f.N // before the pool hears of the head (gotHeaders, finishResponse)
	}
	if f.Kind == h1.BodyNone {
		resp.Body = http.NoBody
		a.noBody = true
		rr.finishResponse(a, closing, true)
		a.deliver(result{resp: resp})
		return nil
	}
	var got *[]byte // the body's first n bytes, read by a direct reader
	var n int
	if f.Kind == h1.BodyLength && f.N <= maxBufferedBody {
		whole := f.N <= int64(rr.br.Buffered())
		if !whole && direct && f.N <= maxReadAhead && rr.readsNow {
			got, n = rr.readNow(int(f.N))
			whole = n == int(f.N)
		}
		if whole {
			// The whole body is here: the connection is free again (and
			// counted so) by the time the caller sees its response.
			if got == nil {
				got = getBodyBuf(int(f.N))
				n, _ = io.ReadFull(rr.br, (*got)[:f.N])
			}
			b := newBody(a.r.ctx, resp, got)
			b.w, b.end = n, true
			resp.Body = b
			rr.finishResponse(a, closing, true)
			a.deliver(result{resp: resp})
			return nil
		}
	}
	if direct {
		// The rest of the body is the reader goroutine's to read: the
		// caller returns with the headers, as from any other response.
		c.mu.Lock()
		rr.pending = &pendingBody{a: a, resp: resp, f: f, closing: closing, got: got, n: n}
		c.mu.Unlock()
		c.t.handOvers.Add(1)
		return errHandOver
	}
	return rr.readBodyFrom(a, resp, f, closing, nil, 0)
}

// readNow reads a body of known length up to maxReadAhead as far as it has
// arrived, without waiting: what br holds, then what the socket holds
// (socket.Peeker.ReadNow). A direct reader that read the head only, with 4 KiB
// of br, handed even a 4 KiB body to the reader goroutine, a goroutine's
// wake-up and hand-over per response (24.6 µs of CPU per 4 KiB GET at P=5,
// against 18.7 at 128 B). It returns the body's buffer and the bytes in
// it.
func (rr *connReader) readNow(size int) (*[]byte, int) {
	buf := getBodyBuf(size)
	b := (*buf)[:size]
	n, _ := io.ReadFull(rr.br, b[:rr.br.Buffered()])
	for n < size {
		m := rr.peek.ReadNow(b[n:])
		if m == 0 {
			break
		}
		n += m
		if rr.nr.ack != nil {
			rr.nr.unacked.Store(true) // as netReader.read notes bytes received
		}
	}
	return buf, n
}

// readBodyFrom is readBody's reader goroutine: it reads a's body into its
// buffer as it arrives, the first n bytes of which may be in got already.
func (rr *connReader) readBodyFrom(a *attempt, resp *http.Response, f h1.Framing, closing bool, got *[]byte, n int) error {
	c := rr.c
	s, size := rr.bodyFraming(a, resp, f, n)
	open, tentative, cr := s.open, s.tentative, s.cr
	// A tentative body may be a stream: the pool counts it as a response
	// at its end, unless the host's chunked responses proved bounded
	// (gotHeaders, answerLocked).
	c.ev.gotHeaders(c, a, closing, !open && !tentative)
	if got == nil {
		got = getBodyBuf(size)
	}
	b := newBody(a.r.ctx, resp, got)
	b.w = n
	if tentative {
		b.limit = maxBufferedBody // not yet seen by anyone else
	}
	b.gone = c.closed
	rr.filling.Store(b) // before the caller may hold it unread
	resp.Body = b
	held := a.deliver(result{resp: resp})
	if !held {
		b.Close() // abandoned: nobody reads it
	}
	s.b, s.held = b, held
	var start monoTime
	if a.toStream {
		start = monoNow()
	}
	err := s.pump()
	rr.filling.Store(nil)
	s.stop()
	if a.toStream && time.Duration(monoNow()-start) < c.drainWait() {
		// Read in full sooner than a request behind it would have
		// waited: no stream (or one taken for a stream by mistake); the
		// pool forgets its path (responseDone).
		a.events = false
	}
	if tentative {
		a.chunkedLen = s.got.Load()
		rr.chunkHint = int(min(a.chunkedLen, maxBufferedBody))
	}
	if err != nil {
		if cause := c.closedBy(); cause != nil {
			err = cause // closed under the body: not the read's own error
		}
		if cerr := context.Cause(a.r.ctx); a.r.ctx.Err() != nil && cerr != nil {
			err = cerr
		}
		b.finish(err, nil)
		return err
	}
	rr.finishResponse(a, closing, false)
	var trailer http.Header
	if cr != nil {
		trailer = cr.Trailer()
	}
	b.finish(nil, trailer)
	return nil
}

// bodyFraming is readBodyFrom's start: a's body framed by f, of which n
// bytes are read, as the source its stream reads (s: the connection, a,
// src, lr, cr, open, tentative), and the size of its first buffer. It
// marks a as the pool must see it at the head (events, tentative,
// streamAtHead).
func (rr *connReader) bodyFraming(a *attempt, resp *http.Response, f h1.Framing, n int) (s *bodyStream, size int) {
	c := rr.c
	var (
		src io.Reader = rr.br
		lr  *io.LimitedReader
		cr  *h1.ChunkedReader
		// open: the end is not in sight (a large or open-ended body):
		// nothing new goes behind it while it is read (streaming). A body
		// of known length up to maxBufferedBody is read whole into a
		// buffer of its size, so that the reader never waits for its
		// caller to make room before it goes on to the next response.
		open = true
		// tentative: a chunked body, read ahead whole as if it were
		// bounded until it shows itself a stream (bodyStream.tentative).
		tentative bool
	)
	size = 4 << 10
	switch f.Kind {
	case h1.BodyLength:
		lr = &io.LimitedReader{R: rr.br, N: f.N - int64(n)}
		src = lr
		open = f.N > maxBufferedBody
		size = int(f.N)
		if open {
			size = maxReadAhead
		}
	case h1.BodyChunked:
		cr = h1.NewChunkedReader(rr.br, c.t.opts.MaxResponseHeaderBytes)
		cr.Raw = &rr.nr
		src = cr
		if ct := resp.Header["Content-Type"]; a.toStream || len(ct) > 0 && isEventStream(ct[0]) {
			// Server-sent events, or a response on a path whose responses
			// were streams of events: open, a stream from its head, which
			// says nothing of the host's other chunked responses.
			a.events = true
			break
		}
		size = max(size, rr.chunkHint)
		open, tentative = false, true
		a.tentative = true // before the pool hears of the head
	}
	if open {
		// A stream from its head (before the pool hears of it): between
		// the head and the body's first read from the network
		// (startWaiting), the pool placed the waiters it dispatched at
		// the head behind it, where they waited HeadOfLineTimeout.
		a.streamAtHead = true
	}
	return &bodyStream{c: c, a: a, src: src, lr: lr, cr: cr, open: open, tentative: tentative}, size
}

// drain reads what remains of a body its caller closed early, if that is
// at most maxDrain, so that the connection can be reused (RFC 9112 §9.3);
// its early close bounds the time it may take (earlyClose). Otherwise the
// connection is closed.
func (rr *connReader) drain(lr *io.LimitedReader, cr *h1.ChunkedReader) error {
	switch {
	case lr != nil && lr.N <= maxDrain:
		_, err := io.Copy(io.Discard, lr)
		if err == nil && lr.N > 0 {
			err = io.ErrUnexpectedEOF
		}
		return err
	case cr != nil:
		switch _, err := io.CopyN(io.Discard, cr, maxDrain+1); err {
		case io.EOF:
			return nil
		case nil: // more than maxDrain
		default:
			return unexpected(err)
		}
	}
	return errDrainTooLong
}

// writeWaitBeforeReuse is how long a connection whose response came
// before its request's body was written waits for that write to end
// before it is closed instead: net/http's maxWriteWaitBeforeConnReuse.
const writeWaitBeforeReuse = 50 * time.Millisecond

// finishResponse records that a's response has been read from the
// connection in full, before its caller can see the end of it. If a's
// request body is still being written (the server responded early), the
// connection is kept only if the write ends within writeWaitBeforeReuse.
func (rr *connReader) finishResponse(a *attempt, closing, headers bool) {
	c := rr.c
	if !closing && a.writeDone != nil && !a.written.Load() {
		t := time.NewTimer(writeWaitBeforeReuse)
		select {
		case <-a.writeDone:
		case <-t.C:
		}
		t.Stop()
		if !a.written.Load() {
			closing = true
			c.stopWriting()
		}
	}
	rr.popHead()
	// The hooks that follow (ConnIdle, ConnClosed of connections over
	// MaxIdleConns, PutIdleConn) run with the read turn held unless a
	// direct read passed it on: the connection is held meanwhile.
	hold := !closing && !rr.directDone(a) && rr.hooksAtDone(a)
	put := c.ev.responseDone(c, a, closing, headers, hold)
	c.putIdleTrace(a, put)
	if hold {
		c.ev.hold(c, false)
	}
	if !closing && c.gaveUp.Load() {
		c.cutAbandoned() // the next head's caller may have given it up
	}
}

// hooksAtDone reports whether a hook of the user's may run once a's
// response is done (finishResponse).
func (rr *connReader) hooksAtDone(a *attempt) bool {
	c := rr.c
	if t := a.r.trace; t != nil && t.PutIdleConn != nil {
		return true
	}
	o := c.t.opts.Observer
	return o != nil && (o.ConnIdle != nil || o.ConnClosed != nil && c.t.opts.MaxIdleConns > 0)
}

// popHead removes the head of fifo, its response read, and starts the timers
// of the next one.
func (rr *connReader) popHead() {
	c := rr.c
	c.mu.Lock()
	if len(c.fifo) == 0 {
		c.mu.Unlock()
		return
	}
	copy(c.fifo, c.fifo[1:])
	c.fifo[len(c.fifo)-1] = nil
	c.fifo = c.fifo[:len(c.fifo)-1]
	c.notePipelinedLocked()
	c.answered++
	var next *attempt
	var now monoTime
	if len(c.fifo) > 0 {
		next = c.fifo[0]
		now = monoNow()
		next.headAt = now
	}
	c.mu.Unlock()
	if next != nil {
		rr.prevEnd = 0
		if next.behind && next.sentAt != 0 { // read after mu: written under it
			rr.prevEnd = now
		}
		c.armHeaderTimeout(next)
	}
}

func (rr *connReader) interimHook(a *attempt) func(int, http.Header) error {
	c := rr.c
	t := a.r.trace
	if a.continueCh == nil && (t == nil || t.Got1xxResponse == nil) {
		return nil
	}
	return func(code int, h http.Header) error {
		if a.state.Load() != attemptWaiting {
			// Moved elsewhere or abandoned: the caller's hooks belong to
			// another attempt now.
			return nil
		}
		if code == http.StatusContinue && a.continueCh != nil {
			// As net/http: Got100Continue only for a request that expects it.
			if t != nil && t.Got100Continue != nil {
				c.hooked(t.Got100Continue)
			}
			a.signalContinue(true)
		}
		if t != nil && t.Got1xxResponse != nil {
			var err error
			c.hooked(func() { err = t.Got1xxResponse(code, textprotoHeader(h)) })
			if err != nil {
				return err
			}
			return errResetHeaderLimit
		}
		return nil
	}
}

// upgradeBody is the body of a 101 Switching Protocols response: the
// connection itself, with any bytes already buffered served first.
type upgradeBody struct {
	br   *bufio.Reader
	conn net.Conn
}

func (b *upgradeBody) Read(p []byte) (int, error)  { return b.br.Read(p) }
func (b *upgradeBody) Write(p []byte) (int, error) { return b.conn.Write(p) }
func (b *upgradeBody) Close() error                { return b.conn.Close() }

// CloseWrite shuts down the writing side, if the connection supports it.
func (b *upgradeBody) CloseWrite() error {
	if cw, ok := b.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("pipelined: CloseWrite not supported")
}

// netReader is the connection as br sees it. onRead, if set, runs once
// before the next read from the network; only the holder of the read turn
// sets it or reads through it.
type netReader struct {
	conn   net.Conn
	onRead func()
	// ack, if set, acknowledges at once what the socket has received
	// (socket.AckNow); set once, with the connection. ackT runs it when a
	// read waits longer than ackStall while responses are still due.
	ack  *socket.Peeker
	ackT *time.Timer
	// pipelined: a response due on the connection was asked for behind
	// another (the first of fifo was written behind one, or fifo holds
	// more than one). Stored under pconn.mu with each change of fifo
	// (notePipelinedLocked); read here without it, as a hint.
	pipelined atomic.Bool
	// unacked: bytes were received since the connection last wrote, so
	// the kernel may be holding their acknowledgement back; a write
	// (wireCounter) clears it.
	unacked atomic.Bool
	// wrote is the connection's wireCounter.n; seenWrote, what it held
	// when the last read from the network returned bytes: what had been
	// written before the bytes being parsed came (a response that counts
	// as a pipelining proof, attempt.proves). Only the goroutine that
	// holds the read turn touches seenWrote.
	wrote     *atomic.Int64
	seenWrote int64
	// pending: bytes read from the network ahead of br and handed back
	// (Unread); Read returns them first. h1.ChunkedReader hands them
	// back and moves them into br at once, so that nothing is pending
	// outside it. Only the goroutine that holds the read turn touches it.
	pending, pbuf []byte
}

// Unread hands b back, to be read again first.
func (r *netReader) Unread(b []byte) {
	r.pbuf = append(r.pbuf[:0], b...)
	r.pending = r.pbuf
}

// ackStall is how long a read waits, with responses still due, before the
// connection acknowledges what it has received.
//
// A server that writes without TCP_NODELAY holds a small response until
// the last one it sent is acknowledged (Nagle's algorithm, RFC 1122
// §4.2.3.4), and a client acknowledges late when it has nothing to send
// (delayed ACKs, RFC 1122 §4.2.3.2: 40 ms on Linux). net/http's next
// request carries the ACK; a pipelined request was sent already, so each
// response behind a small one would wait out the client's timer (Puma).
// Acknowledging after every read would cost a system call and a packet
// per read under load, when the requests written carry the ACKs; a wait
// this long is where a stall shows, and only a wait after bytes came
// with nothing written since can be one (netReader.unacked). At 1 ms the
// timer fired for most responses of a server that takes a millisecond (0.3
// to 0.5 per request, a goroutine and a system call each); at 2 ms, for
// 1 in 50 to 1 in 150, and a stall costs Puma's mixed load 1-2%. The
// timer asks for the ACK even if the connection wrote since it was armed:
// skipping the call then left half of the rounds of
// TestNagleServerPipelinedAnswersNotDelayed waiting out the kernel's
// timer (ackNow also ends the socket's interactive mode).
const ackStall = 2 * time.Millisecond

func (r *netReader) Read(p []byte) (int, error) {
	if len(r.pending) > 0 { // seenWrote was taken when they came
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	n, err := r.read(p)
	if n > 0 && r.wrote != nil {
		r.seenWrote = r.wrote.Load()
	}
	return n, err
}

func (r *netReader) read(p []byte) (int, error) {
	if f := r.onRead; f != nil {
		r.onRead = nil
		f()
	}
	if r.ack == nil || !r.pipelined.Load() {
		n, err := r.conn.Read(p)
		if n > 0 && r.ack != nil && !r.unacked.Load() {
			r.unacked.Store(true)
		}
		return n, err
	}
	if !r.unacked.Load() { // nothing came since the last write: no ACK held back
		n, err := r.conn.Read(p)
		if n > 0 {
			r.unacked.Store(true)
		}
		return n, err
	}
	if r.ackT == nil {
		r.ackT = time.AfterFunc(ackStall, r.ack.AckNow)
	} else {
		r.ackT.Reset(ackStall)
	}
	n, err := r.conn.Read(p)
	r.ackT.Stop()
	return n, err
}
