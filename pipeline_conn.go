package pipelined

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// A pconn is one HTTP/1.1 connection carrying a pipeline of requests.
//
// Ownership:
//   - Requests are written by the goroutines of their RoundTrip calls, one at
//     a time: holding a token of writeLock means owning bw. Each writer
//     appends its attempt to fifo (under mu) before writing its first byte,
//     so a response can never arrive for a request that is not in fifo.
//   - One reader goroutine (readLoop) owns br and parses responses strictly
//     in fifo order (RFC 9112 §9.2). While a large response body streams to
//     its caller, the body owns br and hands it back through a channel.
//   - The scheduling fields at the end of the struct belong to the host
//     pool and are guarded by hostPool.mu. The connection reports events to
//     its pool (headers read, response done, closing, dead); the pool never
//     calls back into a connection while holding its lock.
//   - Lock order: holGuard.mu before hostPool.mu. pconn.mu, deadlineMu and
//     wdMu are leaves: nothing else is locked while one is held.
type pconn struct {
	p    *hostPool
	conn net.Conn
	tls  *tls.ConnectionState
	br   *bufio.Reader
	bw   *bufio.Writer

	writeLock      chan struct{} // capacity 1: a token held = bw owned
	pendingWriters atomic.Int32  // writers waiting for writeLock; the last one flushes
	wdMu           sync.Mutex    // serialises write-deadline changes on cancellation

	mu      sync.Mutex // guards fifo, dead and noWrite
	fifo    []*attempt // attempts written and not fully answered, in wire order
	dead    bool
	noWrite bool // the connection ends after responses already due: write nothing more

	closeOnce sync.Once
	closed    chan struct{} // closed when conn is closed

	deadlineMu sync.Mutex // guards armed and read-deadline changes
	armed      *attempt   // the attempt whose header timeout is running

	hol holGuard // head-of-line timer (holprotect.go); has its own mutex

	// Scheduling state, guarded by p.mu (see scheduler.go).
	inflight     int       // attempts assigned and not yet answered
	exclusive    bool      // an attempt that nothing may follow is unanswered
	closing      bool      // takes no more requests
	large        bool      // the head response is streaming a large body
	slow         bool      // the head has waited past HeadOfLineTimeout (holprotect.go)
	reserved     bool      // kept for a request that needs an idle connection
	served       int       // responses completed
	assigned     int       // requests assigned, ever
	atBudget     bool      // closing because assigned reached hostPool.budget
	serverClosed bool      // the server said it closes the connection
	headTick     uint64    // logical time the current head became the head
	idleSince    time.Time // when inflight last became 0
	idleTimer    *time.Timer
}

func newPconn(p *hostPool, conn net.Conn, state *tls.ConnectionState) *pconn {
	o := &p.t.opts
	return &pconn{
		p:         p,
		conn:      conn,
		tls:       state,
		br:        bufio.NewReaderSize(conn, o.ReadBufferSize),
		bw:        bufio.NewWriterSize(conn, o.WriteBufferSize),
		writeLock: make(chan struct{}, 1),
		closed:    make(chan struct{}),
		idleSince: time.Now(),
	}
}

var errNotWritten = errors.New("pipelined: request not written")

func noStop() bool { return true }

// aLongTimeAgo is a deadline that makes blocked I/O return at once.
var aLongTimeAgo = time.Unix(1, 0)

// send writes a's request on c. It returns a non-nil error only when
// nothing of the request was written (errNotWritten, or the context's
// error); otherwise the outcome arrives on a.res.
func (c *pconn) send(a *attempt) error {
	r := a.r
	c.pendingWriters.Add(1)
	select {
	case c.writeLock <- struct{}{}:
		c.pendingWriters.Add(-1)
	case <-c.closed:
		c.pendingWriters.Add(-1)
		return errNotWritten
	case <-r.ctx.Done():
		c.pendingWriters.Add(-1)
		// An earlier writer may have left its request unflushed for us.
		go c.flushLeftovers()
		return context.Cause(r.ctx)
	}
	body, err := r.body()
	if err != nil {
		<-c.writeLock
		c.flushLeftovers()
		a.deliver(result{err: err})
		return nil
	}
	c.mu.Lock()
	if c.dead || c.noWrite {
		c.mu.Unlock()
		<-c.writeLock
		if body != nil {
			if r.req.GetBody != nil {
				body.Close() // the next attempt gets a fresh copy
			} else {
				r.bodyUsed = false // unread: the next attempt reuses it
			}
		}
		return errNotWritten
	}
	c.fifo = append(c.fifo, a)
	head := len(c.fifo) == 1
	c.mu.Unlock()
	if head {
		c.armHeaderTimeout(a)
	}

	var cancelled bool
	stop := noStop
	var deadline bool
	if r.ctx.Done() != nil { // a context that can never be cancelled needs no watch
		if body != nil || r.method == http.MethodConnect {
			stop = context.AfterFunc(r.ctx, func() {
				c.wdMu.Lock()
				cancelled = true
				c.conn.SetWriteDeadline(aLongTimeAgo)
				c.wdMu.Unlock()
			})
		} else if dl, ok := r.ctx.Deadline(); ok {
			// A request head alone fits in the socket buffer unless the
			// server has stopped reading: bound it by the context's
			// deadline rather than watch the context, which costs more
			// than the write (an AfterFunc registers with the parent).
			c.conn.SetWriteDeadline(dl)
			deadline = true
		}
	}
	var tunnel io.ReadCloser
	if r.method == http.MethodConnect && body != nil && r.req.ContentLength <= 0 {
		// A user CONNECT streams both ways (golang/go#17227): the body is
		// copied raw, as written, after the head and while the response is
		// read. Nothing else is ever written on this connection.
		tunnel, body = body, nil
	}
	werr := writeRequest(c.bw, r, body, c.waitForContinue(a))
	if t := r.trace; t != nil && t.WroteRequest != nil {
		// As net/http: once written to the buffer, before the flush, so
		// that it always precedes GotFirstResponseByte.
		t.WroteRequest(httptraceWroteRequest(werr))
	}
	// A pipelineable request is flushed by the last of the writers that
	// queue up behind one another (see flushSoon); others at once.
	deferFlush := r.pipelineable && !a.alone && tunnel == nil && c.p.t.depth > 1
	if werr == nil && !deferFlush {
		werr = c.bw.Flush()
	}
	if deadline {
		c.conn.SetWriteDeadline(time.Time{})
	}
	<-c.writeLock
	if werr == nil && deferFlush {
		werr = c.flushSoon()
	}
	if !stop() {
		c.wdMu.Lock()
		if cancelled && werr == nil {
			c.conn.SetWriteDeadline(time.Time{})
		}
		c.wdMu.Unlock()
	}
	if werr != nil {
		var be *requestBodyError
		if errors.As(werr, &be) {
			// The caller's body failed: report its error, not a
			// connection error. The connection holds a partial request.
			a.deliver(result{err: be.err})
		} else if cerr := context.Cause(r.ctx); cerr != nil && r.ctx.Err() != nil {
			a.deliver(result{err: cerr})
		} else if tunnel == nil && !isTimeout(werr) {
			// The peer closed or reset the connection. Responses it sent
			// before that may still be in our receive buffer: stop writing
			// and let the reader take them, then fail what is left (RFC
			// 9112 §9.6 on the TCP reset problem).
			c.stopWriting()
			return nil
		}
		if tunnel != nil {
			tunnel.Close()
		}
		c.fail(werr)
		return nil
	}
	if tunnel != nil {
		go c.copyTunnel(tunnel)
	}
	c.armHeaderTimeout(a)
	return nil
}

// copyTunnel writes the body of a CONNECT request to the connection
// unbuffered, so that each Write of the caller reaches the server at once.
// It ends when the body ends or the connection fails; like net/http, it
// cannot end a body Read that never returns.
func (c *pconn) copyTunnel(body io.ReadCloser) {
	defer body.Close()
	io.Copy(c.conn, body)
}

// stopWriting makes c take no more requests after a write error, leaving
// the read side open so that responses already received are read.
func (c *pconn) stopWriting() {
	c.mu.Lock()
	c.noWrite = true
	c.mu.Unlock()
	c.p.markClosing(c)
}

// flushSoon makes sure that what the caller has just written is flushed,
// coalescing it with the requests of other writers: if a writer is waiting
// for the write token, that writer will flush; otherwise this goroutine
// yields once, so that callers about to write on this connection (typically
// those woken by the responses the reader has just delivered) can add their
// requests, and then flushes everything buffered in one write.
func (c *pconn) flushSoon() error {
	if c.pendingWriters.Load() > 0 {
		return nil
	}
	runtime.Gosched()
	return c.flushBuffered()
}

// flushLeftovers flushes requests that a writer left buffered expecting a
// writer behind it to flush, when that writer gave up.
func (c *pconn) flushLeftovers() {
	if err := c.flushBuffered(); err != nil && err != net.ErrClosed {
		c.fail(err)
	}
}

// flushBuffered takes the write token and flushes whatever is buffered. It
// counts as a pending writer while it waits, so that writers finishing
// meanwhile leave their flush to it.
func (c *pconn) flushBuffered() error {
	c.pendingWriters.Add(1)
	select {
	case c.writeLock <- struct{}{}:
		c.pendingWriters.Add(-1)
	case <-c.closed:
		c.pendingWriters.Add(-1)
		return net.ErrClosed
	}
	var err error
	if c.bw.Buffered() > 0 {
		err = c.bw.Flush()
	}
	<-c.writeLock
	return err
}

// armHeaderTimeout is called twice per attempt when ResponseHeaderTimeout is
// set: once when it is fully written and once when it becomes the oldest
// unanswered request on c. The second call starts the timer, as a read
// deadline on the connection.
func (c *pconn) armHeaderTimeout(a *attempt) {
	if a.arm.Add(1) != 2 {
		return
	}
	c.holStart(a)
	d := c.p.t.opts.ResponseHeaderTimeout
	if d <= 0 {
		return
	}
	c.deadlineMu.Lock()
	if !a.disarmed {
		c.armed = a
		c.conn.SetReadDeadline(time.Now().Add(d))
	}
	c.deadlineMu.Unlock()
}

// disarm stops a's header timer, reporting whether it was running.
func (c *pconn) disarm(a *attempt) bool {
	if c.p.t.opts.ResponseHeaderTimeout <= 0 {
		return false
	}
	c.deadlineMu.Lock()
	defer c.deadlineMu.Unlock()
	a.disarmed = true
	if c.armed == a {
		c.armed = nil
		c.conn.SetReadDeadline(time.Time{})
		return true
	}
	return false
}

// readLoop reads responses until the connection fails or closes.
func (c *pconn) readLoop() {
	defer c.p.t.wg.Done()
	err := c.readResponses()
	if err == errUpgraded {
		c.detach()
		return
	}
	c.fail(err)
}

var (
	errUpgraded     = errors.New("pipelined: connection upgraded")
	errConnClosing  = errors.New("pipelined: connection closed after response")
	errIdleClosed   = errors.New("pipelined: server closed idle connection")
	errIdleTimeout  = errors.New("pipelined: idle connection timed out")
	errClosedIdle   = errors.New("pipelined: idle connection closed by CloseIdleConnections")
	errDrainTooLong = errors.New("pipelined: response body closed early")
)

func (c *pconn) head() *attempt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.fifo) == 0 {
		return nil
	}
	return c.fifo[0]
}

func (c *pconn) readResponses() error {
	limit := c.p.t.opts.MaxResponseHeaderBytes
	for {
		_, err := c.br.Peek(1)
		a := c.head()
		if a == nil {
			if err != nil {
				return errIdleClosed
			}
			// RFC 9112 §9.2: data with no outstanding request MUST NOT be
			// treated as a response.
			return ErrUnsolicitedResponse
		}
		if err != nil {
			if c.disarm(a) && isTimeout(err) {
				return errResponseHeaderTimeout
			}
			return err
		}
		if t := a.r.trace; t != nil && t.GotFirstResponseByte != nil && a.state.Load() == attemptWaiting {
			t.GotFirstResponseByte()
		}
		resp, f, err := readResponseHead(c.br, a.r.method, limit, interimHook(a))
		armed := c.disarm(a)
		c.holStop()
		if err != nil {
			if armed && isTimeout(err) {
				return errResponseHeaderTimeout
			}
			return err
		}
		c.mu.Lock()
		a.headersRead = true
		c.mu.Unlock()
		resp.Request = a.r.req
		resp.TLS = c.tls
		a.finalContinue(resp)
		closing := resp.Close || a.r.closeAfter
		// A response read ahead in full reports its headers to the pool
		// together with its end (finishResponse), a moment later.
		readAhead := f.kind == bodyNone || (f.kind == bodyLength && f.n <= maxReadAhead)
		if !readAhead {
			c.p.gotHeaders(c, a, closing)
		}
		if closing {
			// RFC 9112 §9.6: requests written behind a response that closes
			// the connection will not be answered; send them elsewhere, and
			// write nothing more (writers already assigned go elsewhere).
			c.mu.Lock()
			c.noWrite = true
			c.mu.Unlock()
			c.resendBehind()
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			resp.Body = &upgradeBody{br: c.br, conn: c.conn}
			c.popHead()
			if !a.deliver(result{resp: resp}) {
				return errConnClosing
			}
			return errUpgraded
		}
		done, err := c.readBody(a, resp, f, closing)
		if err != nil {
			return err
		}
		if !done {
			c.finishResponse(a, closing, false)
		}
		if closing {
			return errConnClosing
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// readBody hands resp to a's caller with a body framed by f, and returns
// when the connection is positioned at the next response. Bodies up to
// maxReadAhead are read here so that the pipeline moves on whether or not the
// caller reads them; larger ones stream from the connection.
func (c *pconn) readBody(a *attempt, resp *http.Response, f framing, closing bool) (done bool, err error) {
	ctx := a.r.ctx
	switch f.kind {
	case bodyNone:
		resp.Body = http.NoBody
		c.finishResponse(a, closing, true)
		a.deliver(result{resp: resp})
		return true, nil
	case bodyLength:
		if f.n <= maxReadAhead {
			buf := make([]byte, f.n)
			if _, err := io.ReadFull(c.br, buf); err != nil {
				a.deliver(result{err: &ConnError{Err: unexpected(err), Written: true}})
				return false, unexpected(err)
			}
			resp.Body = &bufferedBody{ctx: ctx, buf: buf, dst: resp}
			c.finishResponse(a, closing, true)
			a.deliver(result{resp: resp})
			return true, nil
		}
		lr := &io.LimitedReader{R: c.br, N: f.n}
		return false, c.stream(a, resp, lr, nil, func() int64 { return lr.N })
	case bodyChunked:
		cr := newChunkedReader(c.br, c.p.t.opts.MaxResponseHeaderBytes)
		var buf bytes.Buffer
		n, err := io.Copy(&buf, io.LimitReader(cr, maxReadAhead+1))
		if err != nil {
			a.deliver(result{err: &ConnError{Err: err, Written: true}})
			return false, err
		}
		if n <= maxReadAhead && cr.done {
			resp.Body = &bufferedBody{ctx: ctx, buf: buf.Bytes(), dst: resp, trailer: cr.trailer}
			c.finishResponse(a, closing, false)
			a.deliver(result{resp: resp})
			return true, nil
		}
		r := io.MultiReader(bytes.NewReader(buf.Bytes()), cr)
		return false, c.stream(a, resp, r, cr, func() int64 { return -1 })
	default: // bodyUntilClose
		return false, c.stream(a, resp, c.br, nil, func() int64 { return -1 })
	}
}

// finishResponse records that a's response has been read from the
// connection in full. For bodies read ahead it runs before the response is
// handed over, so that the connection is free again (and counted so) by the
// time the caller sees its response, as net/http does for bodyless ones.
func (c *pconn) finishResponse(a *attempt, closing, headers bool) {
	c.popHead()
	c.p.responseDone(c, a, closing, headers)
	c.afterResponse(a, closing)
}

// stream lends the connection to a's caller for a large body and waits for
// it back.
func (c *pconn) stream(a *attempt, resp *http.Response, r io.Reader, cr *chunkedReader, remain func() int64) error {
	// Nothing new goes behind a large body. What is already behind it is
	// sent elsewhere (its late answers are read and discarded) if the body
	// is still being read after the head-of-line timeout: a body that is
	// read promptly costs the requests behind it less than resending them
	// costs the server, and an unread one must not hold them forever.
	c.p.setLarge(c, true)
	var resend *time.Timer
	if d := c.p.t.holTimeout(); d > 0 {
		resend = time.AfterFunc(d, c.resendBehind)
	} else if d <= 0 {
		c.resendBehind()
	}
	if resend != nil {
		defer resend.Stop()
	}
	sb := &streamBody{c: c, ctx: a.r.ctx, r: r, chunked: cr, dst: resp, done: make(chan bodyEvent, 1)}
	sb.stopCtx = context.AfterFunc(a.r.ctx, func() {
		c.deadlineMu.Lock()
		if !sb.gone {
			sb.deadlineSet = true
			c.conn.SetReadDeadline(aLongTimeAgo)
		}
		c.deadlineMu.Unlock()
	})
	resp.Body = sb
	if !a.deliver(result{resp: resp}) {
		sb.signal(bodyAbandoned)
	}
	var ev bodyEvent
	select {
	case ev = <-sb.done:
	case <-c.closed:
		return net.ErrClosed
	}
	c.deadlineMu.Lock()
	if sb.deadlineSet {
		c.conn.SetReadDeadline(time.Time{})
	}
	c.deadlineMu.Unlock()
	switch ev {
	case bodyEOF:
	case bodyClosed, bodyAbandoned:
		// RFC 9112 §9.3: the connection is reusable only once the whole
		// body is read. Drain a small remainder; close on a large one.
		n := remain()
		if cr != nil {
			n, _ = io.Copy(io.Discard, io.LimitReader(r, maxDrain+1))
			if n > maxDrain || !cr.done {
				return errDrainTooLong
			}
		} else if n < 0 || n > maxDrain {
			return errDrainTooLong
		} else if _, err := io.CopyN(io.Discard, r, n); err != nil {
			return err
		}
	default:
		return errDrainTooLong
	}
	c.p.setLarge(c, false)
	return nil
}

// popHead removes the answered head of fifo and starts the header timer of
// the next one.
func (c *pconn) popHead() {
	c.mu.Lock()
	if len(c.fifo) == 0 {
		c.mu.Unlock()
		return
	}
	copy(c.fifo, c.fifo[1:])
	c.fifo[len(c.fifo)-1] = nil
	c.fifo = c.fifo[:len(c.fifo)-1]
	var next *attempt
	if len(c.fifo) > 0 {
		next = c.fifo[0]
	}
	c.mu.Unlock()
	if next != nil {
		c.armHeaderTimeout(next)
	}
}

// dropIfUnwanted closes c if the response it waits for is wanted by
// nobody: every unanswered request on it was abandoned by its caller or
// moved to another connection. Waiting for such an answer would hold a
// connection, perhaps forever (a long poll the caller cancelled), for
// nothing.
func (c *pconn) dropIfUnwanted() {
	c.mu.Lock()
	unwanted := len(c.fifo) > 0 && !c.fifo[0].headersRead
	for _, x := range c.fifo {
		if x.state.Load() == attemptWaiting {
			unwanted = false
			break
		}
	}
	c.mu.Unlock()
	if unwanted {
		c.fail(errUnwanted)
	}
}

var errUnwanted = errors.New("pipelined: no request waits for the pending response")

// resendBehind tells the callers of every attempt written behind the head
// to send their requests elsewhere. Only replayable requests are ever
// written behind another (RFC 9112 §9.3.2), so this never sends a
// non-idempotent request twice. Their slots stay in fifo: if their answers
// arrive, they are read and discarded.
func (c *pconn) resendBehind() {
	c.mu.Lock()
	var behind []*attempt
	if len(c.fifo) > 1 {
		behind = append(behind, c.fifo[1:]...)
	}
	c.mu.Unlock()
	for _, b := range behind {
		if b.r.replayable {
			b.deliver(result{retry: true})
		}
	}
}

func interimHook(a *attempt) func(int, http.Header) error {
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
				t.Got100Continue()
			}
			a.signalContinue(true)
		}
		if t != nil && t.Got1xxResponse != nil {
			if err := t.Got1xxResponse(code, textprotoHeader(h)); err != nil {
				return err
			}
			return errResetHeaderLimit
		}
		return nil
	}
}

// closeConn closes the network connection once.
func (c *pconn) closeConn() {
	c.closeOnce.Do(func() {
		c.conn.Close()
		close(c.closed)
	})
}

// fail closes the connection and settles every attempt on it that has no
// response yet. It may be called more than once, from any goroutine.
func (c *pconn) fail(err error) {
	c.closeConn()
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	// headersRead is guarded by c.mu: pick the unanswered attempts here.
	var unanswered []*attempt
	headUnanswered := false
	for i, a := range c.fifo {
		if !a.headersRead {
			unanswered = append(unanswered, a)
			headUnanswered = headUnanswered || i == 0
		}
	}
	c.fifo = nil
	c.mu.Unlock()
	c.holStop()
	c.p.notePipelineFailure(err, len(unanswered))
	c.p.connDead(c)
	final := isFinalError(err)
	for i, a := range unanswered {
		noRetry := i == 0 && headUnanswered && final
		if noRetry && !a.alone && a.r.replayable && isMalformed(err) {
			// The bad bytes may belong to an earlier response (a body
			// after a HEAD, 204 or 304 response, or longer than its
			// Content-Length). An idempotent request gets one more
			// chance, alone on another connection (RFC 9112 §9.3.2); if
			// that answer is malformed too, it is final.
			noRetry = false
		}
		a.deliver(result{err: &ConnError{Err: err, Written: true, noRetry: noRetry}})
	}
}

// isMalformed reports whether err says a response could not be parsed.
func isMalformed(err error) bool {
	var fe *FramingError
	var he *headerTooLargeError
	return errors.As(err, &fe) || errors.As(err, &he)
}

// detach removes an upgraded connection from the pool without closing it:
// its caller owns it now.
func (c *pconn) detach() {
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	c.p.connDead(c)
}

// isFinalError reports whether a request whose response failed with err
// must not be retried: the server answered, badly or too slowly.
func isFinalError(err error) bool {
	var fe *FramingError
	var he *headerTooLargeError
	return errors.As(err, &fe) || errors.As(err, &he) || err == errResponseHeaderTimeout ||
		errors.Is(err, ErrTransportClosed)
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
