package pipelined

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/pipelined/pipelined/internal/h1"
)

// This file is the read turn of a connection: who reads its responses.
//
// The reader goroutine of a connection (readLoop) reads every response
// that arrives while requests share the connection, and watches an idle
// connection so that a server's close is seen. Handing each response from
// that goroutine to its caller costs a goroutine wake-up per request, and
// with few callers (one caller in a loop, a few at a time) more than the
// rest of the request: the woken caller is often stolen by another
// processor that was started for it, and every request crosses CPUs. So a
// connection with nothing in flight and no recent pipelining rests: its
// reader goroutine waits on a channel, not on the socket, and the caller
// that writes the next request on it reads its own answer, as
// fasthttp.HostClient's callers do (a direct read).
//
// What the reader goroutine watching gave, a direct read keeps:
//   - A connection closed by its server while it rested is not written on:
//     before writing, the caller checks the socket (and what a TLS
//     connection holds) for bytes or an end of stream without reading them
//     (quiet), and a connection that is not quiet ends unwritten: the
//     request goes elsewhere, whatever its method. The look takes the place
//     of the read that would find the socket empty right after the write
//     (writeHeld), so that it costs no system call of its own. (Sparing
//     idempotent requests the look, and retrying them after a close seen
//     only once written, saved a system call each but failed requests in
//     a mass close: an nginx reload closes many idle connections at once,
//     the retries hop from one closed connection to the next, and one
//     that lands as the first request of a fresh connection the old
//     worker closes is not retried, as with net/http.)
//   - A connection that rests for restWatch is watched again by its reader
//     goroutine, so that a close is seen (and the socket closed) soon.
//   - Requests written behind a direct read are read by the reader
//     goroutine: the direct reader hands the turn back when it is done
//     (handBack), and so does a caller whose body is not in the buffer
//     (the reader goroutine reads it, c.pending) or whose context is
//     cancelled before the answer's first byte.
//
// rd changes under c.mu, only where the turn passes (it is read without
// the lock only as a hint); the fifo appends that decide it happen under
// the same lock, so a request is never left with nobody to read its
// answer. The holder of the turn alone reads br, prevEnd, directing's
// attempt and directWatched.

// readTurn says who reads the connection's responses next.
type readTurn = uint32

const (
	rdReader readTurn = iota // the reader goroutine (reading, or watching an idle connection)
	rdFree                   // nobody: the reader goroutine rests; a caller may claim it
	rdDirect                 // a caller reading its own answer
	rdGone                   // the connection was upgraded: the reader goroutine leaves
)

// restWatch is how long a connection rests before its reader goroutine
// watches it again. Requests that come faster find it quiet and read
// their own answers; one that comes later finds it watched, and its
// answer is handed over as before. It is far below the idle timeouts of
// servers (seconds: nginx 75 s, Node and Apache 5 s), so that what a
// server sends when it closes an idle connection (a FIN, Apache's 408) is
// seen by a watching reader, as before, and a closed socket is not kept
// for long. It is the least wait that counts as late (lateMin): a request
// coming sooner than that is part of the same flow of work.
const restWatch = lateMin

// errHandOver: a direct reader leaves the rest of a response to the reader
// goroutine (c.pending).
var errHandOver = errors.New("pipelined: response handed to the reader")

// pendingBody is a response whose head a direct reader read and whose body
// the reader goroutine reads.
type pendingBody struct {
	a       *attempt
	resp    *http.Response
	f       h1.Framing
	closing bool
	// got, if set, holds the body's first n bytes, read by the direct
	// reader (pconn.readNow): a buffer of the body's size.
	got *[]byte
	n   int
}

// restfulLocked reports whether the connection may rest when it has
// nothing in flight: it can be checked without reading (canDirect), takes
// requests, and has not been pipelining lately (requests that share it
// need the reader goroutine anyway).
func (c *pconn) restfulLocked() bool {
	return c.canDirect && !c.noWrite && !c.dead && c.recentBehind == 0 && c.rd.Load() != rdGone
}

// rest is the reader goroutine's wait while the connection rests. It
// returns when the reader goroutine holds the turn: handed back (with the
// body a direct reader left it, if any), or after a rest of restWatch. It
// returns errUpgraded if the connection left the pool, and an error when
// the connection is closed.
func (c *pconn) rest() (*pendingBody, error) {
	c.mu.Lock()
	switch c.rd.Load() {
	case rdGone:
		c.mu.Unlock()
		return nil, errUpgraded
	case rdReader:
		if len(c.fifo) > 0 || c.pending != nil || !c.restfulLocked() || c.br.Buffered() > 0 {
			p := c.pending
			c.pending = nil
			c.mu.Unlock()
			return p, nil
		}
		c.rd.Store(rdFree)
		c.mu.Unlock()
		c.armRest()
	case rdFree:
		// A new connection starts at rest (newPconn): its first request
		// may be read by its caller too.
		c.mu.Unlock()
		c.armRest()
	default:
		// A caller claimed the new connection before its reader began.
		c.mu.Unlock()
	}
	for {
		var watch bool
		select {
		case <-c.wake:
		case <-c.restT.C:
			watch = true
		case <-c.closed:
			return nil, net.ErrClosed // closed by fail, whose cause stands
		}
		c.mu.Lock()
		if watch && c.rd.Load() == rdFree {
			c.rd.Store(rdReader)
		}
		rd := c.rd.Load()
		p := c.pending
		if rd == rdReader {
			c.pending = nil
		}
		c.mu.Unlock()
		switch rd {
		case rdReader:
			return p, nil
		case rdGone:
			return nil, errUpgraded
		}
		// rdDirect: a caller reads; it hands the turn back or frees it
		// (and re-arms the rest) when done. rdFree after a stale wake.
	}
}

// armRest starts (or restarts) the rest's end.
func (c *pconn) armRest() {
	c.restT.Reset(c.t.restWatch)
}

// claimDirect gives a's caller the read turn if the connection rests, has
// nothing in flight and a may read its own answer. The caller holds the
// write token, so nothing joins fifo meanwhile. The connection must then
// be found quiet before a is written on it.
func (c *pconn) claimDirect(a *attempt) bool {
	if !c.canDirect || a.continueCh != nil || a.r.upgrade {
		// A request that waits for 100 Continue needs the reader while it
		// writes; one that may upgrade leaves the pool with its reader.
		return false
	}
	if c.rd.Load() != rdFree {
		return false // no lock for the busy connections of a pipeline
	}
	if c.placed.Load() > 1 {
		// A request is placed behind it (a burst's, a probe): written
		// at once on its own, it would not go out together with that
		// one (flushSoon), and a probe would prove nothing.
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rd.Load() != rdFree || len(c.fifo) > 0 || c.dead || c.noWrite {
		return false
	}
	c.rd.Store(rdDirect)
	return true
}

// peerEnded records that something came on the connection while it was
// idle and nobody read it: its server closed it, or said why it will
// (Apache's 408). That is the cause of its end, whoever closes it
// (hostPool.ended, quietClosed), unless something else ended it first.
func (c *pconn) peerEnded() {
	c.mu.Lock()
	if c.cause == nil {
		c.cause = errIdleClosed
	}
	c.mu.Unlock()
}

// quietBuffered is quiet but for the socket: it reports whether nothing
// that arrived is held by the connection's readers.
func (c *pconn) quietBuffered() bool {
	// RFC 9112 §9.2: bytes with no request outstanding are not a
	// response. Those that came with the last response are in br.
	if c.br.Buffered() > 0 {
		return false
	}
	if _, ok := c.conn.(*tls.Conn); ok && !c.tlsQuiet() {
		return false
	}
	return true
}

// socketTells reports whether bytes on c's socket, with nothing in flight,
// mean that the server spoke (an end of stream, an answer to nothing): not
// on a TLS connection that has read no response yet. RFC 8446 §4.6.1: a
// TLS 1.3 server may send NewSessionTicket messages after the handshake
// (OpenSSL's come once the client's Finished has arrived, after Go's
// handshake has returned), and only a read of the connection processes
// them. A fresh connection was not closed for being idle; its first
// request is written without a look (a direct read wrote nothing on
// lighttpd's fresh connections, and moved its request from one to the
// next, while a hook of the user's ran after the handshake).
func (c *pconn) socketTells() bool {
	if c.tls == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered > 0
}

// tlsQuiet reports whether the TLS connection holds no record that is not
// read: a close_notify, or data, that came in the same segment as the
// last response is read from the socket with it and kept by the TLS
// connection, out of sight of the socket. A read with its deadline past
// processes what the TLS connection holds and touches no socket: it ends
// with a timeout if nothing is there (a timeout does not break a TLS
// connection). Data it finds stays in br for the reader goroutine.
func (c *pconn) tlsQuiet() bool {
	c.deadlineMu.Lock()
	defer c.deadlineMu.Unlock()
	c.conn.SetReadDeadline(aLongTimeAgo)
	_, err := c.br.Peek(1)
	c.conn.SetReadDeadline(time.Time{}) // nothing in flight: no header timer is armed
	return isTimeout(err)
}

// handBack ends a direct read: the turn goes to the reader goroutine
// (rdReader), back to rest (rdFree, if the connection may still rest and
// nothing is in flight; otherwise rdReader), or away (rdGone).
func (c *pconn) handBack(to readTurn) {
	// Bytes already buffered with nothing in flight are the reader
	// goroutine's to judge at once (RFC 9112 §9.2), not after a rest.
	buffered := to == rdFree && c.br.Buffered() > 0
	c.mu.Lock()
	if to == rdFree && (buffered || len(c.fifo) > 0 || c.pending != nil || !c.restfulLocked()) {
		to = rdReader
	}
	c.rd.Store(to)
	c.mu.Unlock()
	if to == rdFree {
		c.armRest()
		return
	}
	c.wakeReader()
}

// wakeReader tells the reader goroutine that rd may have changed.
func (c *pconn) wakeReader() {
	select {
	case c.wake <- struct{}{}:
	default: // a wake is already pending; the reader reads rd
	}
}

// readDirect reads the answer to a, written alone on c, in its caller's
// goroutine, and delivers it to a as the reader goroutine would. A
// cancellation of a's context before the first byte of the answer hands
// the turn back (the reader goroutine reads and discards the answer, or
// await closes the connection if nobody waits for it); one later closes
// the connection, as the reader goroutine's context watch does for a
// stream.
func (c *pconn) readDirect(a *attempt) {
	ctx := a.r.ctx
	if c.head() != a {
		// The connection failed while the request was written: its
		// outcome is delivered already.
		c.directing.Store(nil)
		c.endDirectWatch()
		c.handBack(rdReader)
		return
	}
	_, err := c.br.Peek(1)
	if err != nil && c.directWasCancelled() {
		c.directing.Store(nil)
		c.endDirectWatch()
		c.handBack(rdReader)
		return
	}
	err = c.readOne(a, err, true)
	if !c.directing.CompareAndSwap(a, nil) {
		// Read in full: finishResponse handed the turn on (directDone)
		// before the pool could give the connection to a waiter.
		return
	}
	cancelled := c.directWasCancelled()
	c.endDirectWatch()
	switch {
	case err == nil:
		c.handBack(rdFree)
	case err == errHandOver:
		c.handBack(rdReader)
	case err == errUpgraded:
		c.handBack(rdGone)
	default:
		if cancelled && err != errConnClosing {
			err = context.Cause(ctx)
		}
		c.fail(err)
	}
}

// startDirect starts the direct read of a: from here, a cancellation of
// a's context interrupts the wait for its answer (cancelDirect).
//
// The context is watched with context.AfterFunc, which registers with the
// context's parent: under a lock the parent shares with every request
// derived from it, an allocation and a map insertion, and as much to stop
// it, for each request (a fifth of a direct request's own work when its
// callers share one context, as a service's workers often do). So a watch
// may be kept from one direct read to the next: callers that share a
// context (the same Done channel) twice running on the connection keep
// its watch until another context comes or the connection ends
// (endWatch), and it is then only pointed at the attempt being read. A
// watch of a context that each request has its own of (a Client.Timeout,
// a server's request) is stopped after its read, as before, so that it
// never fires for a request that is done.
func (c *pconn) startDirect(a *attempt) {
	c.directing.Store(a)
	ctx := a.r.ctx
	done := ctx.Done()
	c.directWatched = done != nil
	if done == nil {
		return // a context that can never be cancelled needs no watch
	}
	c.deadlineMu.Lock()
	c.directA, c.directCtxDone = a, done
	kept := c.watchStop != nil && c.watchDone == done
	var old func() bool
	if !kept {
		old, c.watchStop, c.watchDone = c.watchStop, nil, nil
	}
	keep := done == c.lastDone
	gone := c.watchGone
	c.deadlineMu.Unlock()
	if kept {
		// The watch fires once, when done closes: if it closed before a
		// was pointed at, the watch is spent.
		select {
		case <-done:
			c.cancelDirect()
		default:
		}
		return
	}
	if old != nil {
		old()
	}
	if gone {
		return // closed: the read ends without a watch
	}
	// Registered outside deadlineMu: AfterFunc calls the context's
	// methods, which may be the user's. The function is the connection's
	// own (newPconn): a closure per watch would cost an allocation per
	// request whose context is its own (a Client.Timeout).
	stop := context.AfterFunc(ctx, c.onCancel)
	c.deadlineMu.Lock()
	if c.watchGone {
		c.deadlineMu.Unlock()
		stop()
		return
	}
	c.watchDone, c.watchStop, c.watchKeep = done, stop, keep
	c.deadlineMu.Unlock()
}

// mayHold reports whether a's request, claimed for a direct read, may be
// written by writeHeld: its body, if any, is in memory and small, it is
// not a CONNECT, and no hook of the user's is told when it is written
// (httptrace's WroteHeaderField, WroteHeaders and WroteRequest would fire
// as it is written into the buffer, before the look, and so for a request
// that the look may then keep from the socket; Observer.RequestWritten
// would fire only once the answer had come).
func (c *pconn) mayHold(a *attempt, body io.ReadCloser) bool {
	r := a.r
	if r.method == http.MethodConnect || body != nil && !smallBody(r) {
		return false
	}
	if t := r.trace; t != nil && (t.WroteHeaderField != nil || t.WroteHeaders != nil || t.WroteRequest != nil) {
		return false
	}
	o := c.t.opts.Observer
	return o == nil || o.RequestWritten == nil
}

// writeHeld writes a's request, claimed for a direct read, in one pass
// with the look at the socket (quiet) and the wait for the answer. A read
// right after writing a request seldom finds its answer there: it finds
// the socket empty, and only then waits for it. Go's poller forgets a
// socket's readiness when a wait is prepared (runtime's pollReset), which
// is why a read cannot wait without trying first; so the look, which must
// come before the write, comes right after that preparation, the write
// after the look, and the wait after the write, all in one RawConn.Read
// (peeker.lookWrite): the look takes the place of the read that finds
// nothing, and a direct request costs the system calls of a minimal
// client. Nothing of the request reaches the socket before the look: it is
// held in bw (and in wc, past bw's size) until then. It returns what send
// returns.
func (c *pconn) writeHeld(a *attempt, h *h1.Head, body io.ReadCloser) error {
	r := a.r
	c.startDirect(a) // the context's watch covers the wait
	c.heldDeadline = false
	if dl, ok := r.ctx.Deadline(); ok {
		// As write: a request head with a small body fits in the socket
		// buffer; the context's deadline bounds the write.
		c.conn.SetWriteDeadline(dl)
		c.heldDeadline = true
	}
	c.wc.mu.Lock()
	c.wc.hold = true
	c.wc.mu.Unlock()
	werr := writeRequest(c.bw, &c.lw, r, h, body, nil)
	quiet := true
	if werr == nil {
		// Written but for the flush: the header timer (a read deadline)
		// must run through the wait.
		c.armHeaderTimeout(a)
		quiet, werr = c.peek.LookWrite()
	} else {
		c.dropHeld() // a partial request never reaches the socket
	}
	switch {
	case werr == nil && !quiet:
		if c.peek.SawPeer() {
			c.peerEnded()
		}
		c.endHeldWrite()
		return c.unsendHeld(a)
	case werr != nil:
		c.endHeldWrite()
		<-c.writeLock
		a.written.Store(false)
		c.writeFailed(a, werr, nil)
	default:
		// Written: flushHeld released the write token, so that requests
		// may be written behind a while it waits (their answers are the
		// reader goroutine's, handBack).
		a.written.Store(true)
	}
	c.readDirect(a)
	return nil
}

// flushHeld ends writeHeld's hold and flushes the request, from within
// the look (peeker.lookWrite). Once it is written, the write token is
// released before the wait for the answer.
func (c *pconn) flushHeld() error {
	err := c.wc.release(true)
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		return err // writeHeld settles it, holding the token
	}
	c.endHeldWrite()
	<-c.writeLock
	return nil
}

// endHeldWrite ends writeHeld's write, before the write token is
// released: it undoes the write deadline.
func (c *pconn) endHeldWrite() {
	if c.heldDeadline {
		c.heldDeadline = false
		c.conn.SetWriteDeadline(time.Time{})
	}
}

// dropHeld ends writeHeld's hold and drops what bw and wc hold.
func (c *pconn) dropHeld() {
	c.wc.release(false)
	c.bw.Reset(&c.wc)
}

// unsendHeld undoes writeHeld when the socket was not quiet, or could not
// be looked at (closed, or a's context cancelled): nothing of a's request
// reached it. As in claimReader, the connection takes no more requests and
// its reader goroutine reads what came; a goes elsewhere (errNotWritten), or
// has its outcome already if the connection failed meanwhile.
func (c *pconn) unsendHeld(a *attempt) error {
	c.dropHeld()
	c.disarm(a)
	c.holStop()
	c.mu.Lock()
	settled := c.dead // fail delivered a's outcome
	if !settled && len(c.fifo) == 1 && c.fifo[0] == a {
		c.fifo[0] = nil
		c.fifo = c.fifo[:0]
	}
	c.mu.Unlock()
	c.stopWriting()
	<-c.writeLock
	c.directing.Store(nil)
	c.endDirectWatch()
	c.handBack(rdReader)
	if settled {
		return nil
	}
	return errNotWritten
}

// directDone ends the direct read of a once its response is read in full
// and the connection is kept, from finishResponse: after the answer left
// fifo and before the pool, told that the connection is free, hands it to
// a waiter, so that the waiter finds it resting and reads its own answer
// too (a queue of POSTs), instead of finding it still held and leaving its
// answer to the reader goroutine. It does nothing for the reader
// goroutine's responses. It reports whether it passed the turn on.
func (c *pconn) directDone(a *attempt) bool {
	if c.directing.Load() != a || !c.directing.CompareAndSwap(a, nil) {
		return false
	}
	c.endDirectWatch()
	c.handBack(rdFree)
	return true
}

// cancelDirect interrupts the direct read under way if its context was
// cancelled (its Done channel is closed). It runs in a watch's goroutine
// (startDirect); a watch of another context, stopped too late, finds the
// read's own context alive and does nothing.
func (c *pconn) cancelDirect() {
	c.deadlineMu.Lock()
	if c.directA != nil {
		select {
		case <-c.directCtxDone:
			c.directCancelled = true
			c.conn.SetReadDeadline(aLongTimeAgo)
		default:
		}
	}
	c.deadlineMu.Unlock()
}

func (c *pconn) directWasCancelled() bool {
	c.deadlineMu.Lock()
	defer c.deadlineMu.Unlock()
	return c.directCancelled
}

// endDirectWatch ends the context watch of a direct read (stopping it
// unless it is kept, startDirect) and undoes what a cancellation did to
// the read deadline, before the turn passes on.
func (c *pconn) endDirectWatch() {
	if !c.directWatched {
		return
	}
	c.directWatched = false
	var stop func() bool
	c.deadlineMu.Lock()
	c.directA, c.directCtxDone = nil, nil
	if !c.watchKeep && c.watchStop != nil {
		stop, c.lastDone = c.watchStop, c.watchDone
		c.watchStop, c.watchDone = nil, nil
	}
	if c.directCancelled {
		c.directCancelled = false
		var d time.Time // the header deadline of the new head, if armed
		if c.armed != nil {
			d = c.armedUntil
		}
		c.conn.SetReadDeadline(d)
	}
	c.deadlineMu.Unlock()
	if stop != nil {
		stop()
	}
}

// endWatch stops a kept watch when the connection ends or leaves the pool
// (the reader goroutine's end), so that a long-lived context does not hold
// the connection, and lets no new watch start.
func (c *pconn) endWatch() {
	c.deadlineMu.Lock()
	c.watchGone = true
	stop := c.watchStop
	c.watchStop, c.watchDone, c.lastDone = nil, nil, nil
	c.deadlineMu.Unlock()
	if stop != nil {
		stop()
	}
}
