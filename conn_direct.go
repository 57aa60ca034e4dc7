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
// that writes the next request on it reads its own response, as
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
//     cancelled before the response's first byte.
//
// rd changes under c.mu, only where the turn passes (it is read without
// the lock only as a hint); the fifo appends that decide it happen under
// the same lock, so a request is never left with nobody to read its
// response. The holder of the turn alone reads br, prevEnd, directing's
// attempt and directWatched. Its methods are the reader side's
// (connReader).

package pipelined

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/pipelined/pipelined/internal/h1"
	"github.com/pipelined/pipelined/internal/model"
)

// readTurn says who reads the connection's responses next.
type readTurn = uint32

const (
	rdReader readTurn = iota // the reader goroutine (reading, or watching an idle connection)
	rdFree                   // nobody: the reader goroutine rests; a caller may claim it
	rdDirect                 // a caller reading its own response
	rdGone                   // the connection was upgraded: the reader goroutine leaves
)

// restWatch is how long a connection rests before its reader goroutine
// watches it again. Requests that come faster find it quiet and read
// their own responses; one that comes later finds it watched, and its
// response is handed over as before. It is far below the idle timeouts of
// servers (seconds: nginx 75 s, Node and Apache 5 s), so that what a
// server sends when it closes an idle connection (a FIN, Apache's 408) is
// seen by a watching reader, as before, and a closed socket is not kept
// for long. It is the least wait that counts as late (model.LateMin): a request
// coming sooner than that is part of the same flow of work.
const restWatch = model.LateMin

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
func (rr *connReader) restfulLocked() bool {
	c := rr.c
	return rr.canDirect && !c.noWrite && !c.dead && c.recentBehind == 0 && rr.rd.Load() != rdGone
}

// rest is the reader goroutine's wait while the connection rests. It
// returns when the reader goroutine holds the turn: handed back (with the
// body a direct reader left it, if any), or after a rest of restWatch. It
// returns errUpgraded if the connection left the pool, and an error when
// the connection is closed.
func (rr *connReader) rest() (*pendingBody, error) {
	c := rr.c
	c.mu.Lock()
	switch rr.rd.Load() {
	case rdGone:
		c.mu.Unlock()
		return nil, errUpgraded
	case rdReader:
		if len(c.fifo) > 0 || rr.pending != nil || !rr.restfulLocked() || rr.br.Buffered() > 0 {
			p := rr.pending
			rr.pending = nil
			c.mu.Unlock()
			return p, nil
		}
		rr.rd.Store(rdFree)
		c.mu.Unlock()
		rr.armRest()
	case rdFree:
		// A new connection starts at rest (newPconn): its first request
		// may be read by its caller too.
		c.mu.Unlock()
		rr.armRest()
	default:
		// A caller claimed the new connection before its reader began.
		c.mu.Unlock()
	}
	for {
		var watch bool
		select {
		case <-rr.wake:
		case <-rr.restT.C:
			watch = true
		case <-c.closed:
			return nil, net.ErrClosed // closed by fail, whose cause stands
		}
		c.mu.Lock()
		if watch && rr.rd.Load() == rdFree {
			rr.rd.Store(rdReader)
		}
		rd := rr.rd.Load()
		p := rr.pending
		if rd == rdReader {
			rr.pending = nil
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
func (rr *connReader) armRest() {
	c := rr.c
	rr.restT.Reset(c.t.restWatch)
}

// claimDirect gives a's caller the read turn if the connection rests, has
// nothing in flight and a may read its own response. The caller holds the
// write token, so nothing joins fifo meanwhile. The connection must then
// be found quiet before a is written on it.
func (rr *connReader) claimDirect(a *attempt) bool {
	c := rr.c
	if !rr.canDirect || a.continueCh != nil || a.r.upgrade {
		// A request that waits for 100 Continue needs the reader while it
		// writes; one that may upgrade leaves the pool with its reader.
		return false
	}
	if rr.rd.Load() != rdFree {
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
	if rr.rd.Load() != rdFree || len(c.fifo) > 0 || c.dead || c.noWrite {
		return false
	}
	rr.rd.Store(rdDirect)
	return true
}

// quietBuffered is quiet but for the socket: it reports whether nothing
// that arrived is held by the connection's readers.
func (rr *connReader) quietBuffered() bool {
	c := rr.c
	// RFC 9112 §9.2: bytes with no request outstanding are not a
	// response. Those that came with the last response are in br.
	if rr.br.Buffered() > 0 {
		return false
	}
	if _, ok := c.conn.(*tls.Conn); ok && !rr.tlsQuiet() {
		return false
	}
	return true
}

// socketTells reports whether bytes on c's socket, with nothing in flight,
// mean that the server spoke (an end of stream, a response to nothing): not
// on a TLS connection that has read no response yet. RFC 8446 §4.6.1: a
// TLS 1.3 server may send NewSessionTicket messages after the handshake
// (OpenSSL's come once the client's Finished has arrived, after Go's
// handshake has returned), and only a read of the connection processes
// them. A fresh connection was not closed for being idle; its first
// request is written without a look (a direct read wrote nothing on
// lighttpd's fresh connections, and moved its request from one to the
// next, while a hook of the user's ran after the handshake).
func (rr *connReader) socketTells() bool {
	c := rr.c
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
func (rr *connReader) tlsQuiet() bool {
	c := rr.c
	c.deadlineMu.Lock()
	defer c.deadlineMu.Unlock()
	c.conn.SetReadDeadline(aLongTimeAgo)
	_, err := rr.br.Peek(1)
	c.conn.SetReadDeadline(time.Time{}) // nothing in flight: no header timer is armed
	return isTimeout(err)
}

// handBack ends a direct read: the turn goes to the reader goroutine
// (rdReader), back to rest (rdFree, if the connection may still rest and
// nothing is in flight; otherwise rdReader), or away (rdGone).
func (rr *connReader) handBack(to readTurn) {
	c := rr.c
	// Bytes already buffered with nothing in flight are the reader
	// goroutine's to judge at once (RFC 9112 §9.2), not after a rest.
	buffered := to == rdFree && rr.br.Buffered() > 0
	c.mu.Lock()
	if to == rdFree && (buffered || len(c.fifo) > 0 || rr.pending != nil || !rr.restfulLocked()) {
		to = rdReader
	}
	rr.rd.Store(to)
	c.mu.Unlock()
	if to == rdFree {
		rr.armRest()
		return
	}
	rr.wakeReader()
}

// wakeReader tells the reader goroutine that rd may have changed.
func (rr *connReader) wakeReader() {
	select {
	case rr.wake <- struct{}{}:
	default: // a wake is already pending; the reader reads rd
	}
}

// readDirect reads the response to a, written alone on c, in its caller's
// goroutine, and delivers it to a as the reader goroutine would. A
// cancellation of a's context before the first byte of the response hands
// the turn back (the reader goroutine reads and discards the response, or
// await closes the connection if nobody waits for it); one later closes
// the connection, as the reader goroutine's context watch does for a
// stream.
func (rr *connReader) readDirect(a *attempt) {
	c := rr.c
	ctx := a.r.ctx
	if c.head() != a {
		// The connection failed while the request was written: its
		// outcome is delivered already.
		rr.directing.Store(nil)
		c.endDirectWatch()
		rr.handBack(rdReader)
		return
	}
	_, err := rr.br.Peek(1)
	if err != nil && c.directWasCancelled() {
		rr.directing.Store(nil)
		c.endDirectWatch()
		rr.handBack(rdReader)
		return
	}
	err = rr.readOne(a, err, true)
	if !rr.directing.CompareAndSwap(a, nil) {
		// Read in full: finishResponse handed the turn on (directDone)
		// before the pool could give the connection to a waiter.
		return
	}
	cancelled := c.directWasCancelled()
	c.endDirectWatch()
	switch {
	case err == nil:
		rr.handBack(rdFree)
	case err == errHandOver:
		rr.handBack(rdReader)
	case err == errUpgraded:
		rr.handBack(rdGone)
	default:
		if cancelled && err != errConnClosing {
			err = context.Cause(ctx)
		}
		c.fail(err)
	}
}

// directDone ends the direct read of a once its response is read in full
// and the connection is kept, from finishResponse: after the response left
// fifo and before the pool, told that the connection is free, hands it to
// a waiter, so that the waiter finds it resting and reads its own response
// too (a queue of POSTs), instead of finding it still held and leaving its
// response to the reader goroutine. It does nothing for the reader
// goroutine's responses. It reports whether it passed the turn on.
func (rr *connReader) directDone(a *attempt) bool {
	c := rr.c
	if rr.directing.Load() != a || !rr.directing.CompareAndSwap(a, nil) {
		return false
	}
	c.endDirectWatch()
	rr.handBack(rdFree)
	return true
}
