// This file holds one HTTP/1.1 connection (pconn): its FIFO of requests
// written and whose responses are not yet read in full, its count of
// responses read in full (answered), whether it takes requests
// (noWrite), whether it ended (dead) and why (cause), all under pconn.mu; its failing and closing;
// and what it reports to its pool (connEvents). Its writer side
// (connWriter, conn_write.go), its reader side (connReader, conn_read.go
// and conn_direct.go), its read deadlines (readDeadline,
// conn_deadline.go) and a response body's stream (bodyStream,
// body_stream.go) are types of their own, embedded or pointed at.

package pipelined

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pipelined/pipelined/internal/h1"
	"github.com/pipelined/pipelined/internal/socket"
)

// A pconn is one HTTP/1.1 connection carrying a pipeline of requests.
//
// Ownership:
//   - Requests are written by the goroutines of their RoundTrip calls (or,
//     for a request body, a goroutine of its own), one at a time: holding
//     the token of writeLock means owning bw (connWriter). Each writer
//     appends its attempt to fifo (under mu) before writing its first
//     byte, so a response can never arrive for a request that is not in
//     fifo.
//   - The holder of the read turn owns br (connReader): the reader
//     goroutine (readLoop), or a caller reading its own response on a
//     resting connection (conn_direct.go). Either parses responses strictly
//     in fifo order (RFC 9112 §9.2) and copies bodies into their response's
//     body buffer (body.go).
//   - mu guards fifo, answered, noWrite and dead: the wire-level state.
//   - The schedulable state (sched) belongs to the pool and is guarded by
//     hostPool.mu. The connection changes it only by reporting events
//     (connEvents), and always reports first: it tells the pool that it
//     takes no new request (retire) or is gone (removed) before it refuses
//     a write (noWrite, dead). So the pool never hands out a connection
//     that cannot write.
//   - Lock order: holGuard.mu, then hostPool.mu. pconn.mu, deadlineMu,
//     wdMu, wc.mu and a body's mu are leaves: nothing else is locked while
//     one is held. No user callback runs under any of them.
type pconn struct {
	ev   connEvents // the pool
	t    *Transport
	id   uint64 // unique in the Transport, for the Observer
	conn net.Conn
	addr netip.Addr // the address dialed, if the host has an address set (addrs.go); set before the pool has it
	tls  *tls.ConnectionState

	connWriter   // the writer side: the write token and what its holder owns (conn_write.go)
	connReader   // the reader side: the read turn and what its holder owns (conn_read.go, conn_direct.go)
	readDeadline // the read deadlines, under deadlineMu (conn_deadline.go)

	// placed mirrors the pool's count of requests placed on c and not yet
	// responded to (sched.inflight), stored under hostPool.mu: more than fifo
	// holds means a writer is on its way (pipelining).
	placed atomic.Int32
	// gaveUp: a caller gave up an attempt on c before its response's head
	// (abandoned); set once, as c then ends.
	gaveUp atomic.Bool

	mu       sync.Mutex // guards the fields below up to closeOnce
	fifo     []*attempt // attempts written whose responses are not yet read in full, in wire order; nr.pipelined follows it (notePipelinedLocked)
	answered int        // responses read in full
	noWrite  bool       // the connection ends after responses already due
	// recentBehind is 32 when a request was last written behind others,
	// and counts down with each request written alone: the connection has
	// been pipelining recently (pipelining).
	recentBehind int
	lastSent     monoTime // when the last request joined fifo
	dead         bool
	cause        error // the first fail's error: why the connection ends

	// headCut: the head of fifo failed once bytes of its response had come
	// (readOne), so that the connection ended within a response, not
	// between two (hostPool.ended, quietClosed). Set by the holder of the
	// read turn, read by fail.
	headCut atomic.Bool

	closeOnce sync.Once
	closed    chan struct{} // closed when conn is closed

	hol holGuard // head-of-line timer (holprotect.go); has its own mutex

	s         sched     // schedulable state: guarded by hostPool.mu (pool.go)
	idleEntry idleEntry // its place in the Transport's idle LRU (idle.go)
}

// connEvents is what a connection reports to its pool: the one direction
// in which state flows from a connection. Each method takes the pool's
// lock; a connection calls them holding none of its own.
type connEvents interface {
	// gotHeaders: a's final response head arrived and its body is being
	// read; closing: the connection ends after it; bounded: the body is
	// of a known length that is read whole (not a stream in the making).
	gotHeaders(c *pconn, a *attempt, closing, bounded bool)
	// responseDone: a's response was read in full (with its headers, if
	// headers is true). It returns why the connection is closed after it,
	// or nil if the connection is kept. hold: the connection is held
	// (hold) from then on, until the caller releases it.
	responseDone(c *pconn, a *attempt, closing, headers, hold bool) error
	// streaming: the head's body, a's, has no end in sight; nothing new
	// may be placed behind it until responseDone.
	streaming(c *pconn, a *attempt)
	// tentative: the head's body, a's, is chunked and has to be read from
	// the network (bodyStream.tentative): the pool decides whether
	// requests may be placed behind it meanwhile.
	tentative(c *pconn, a *attempt)
	// setSlow: the head has waited past the head-of-line timeout (or no
	// longer does).
	setSlow(c *pconn, on, early bool)
	// lateHead: a, c's head, is late and safe: a copy of it may be sent
	// elsewhere (TransportOptions.HedgeHeadOfLine).
	lateHead(c *pconn, a *attempt)
	// retire: the connection takes no new request.
	retire(c *pconn)
	// hold: a hook of the user's runs while the connection's read turn or
	// write token is held (on), or has returned (off): meanwhile the
	// connection takes no new request (sched.held), so that a request the
	// hook sends does not wait for the hook (pconn.hooked).
	hold(c *pconn, on bool)
	// removed: the connection is closed or detached: it leaves the
	// pool's list at once.
	removed(c *pconn)
	// ended: the last event of a connection, once it is marked dead: it ended
	// with err, with requests still awaiting their responses written on it
	// after responses read; headIdle: the oldest of them was written on the
	// connection while nothing was in flight (not pipelined); headSlow: it had
	// waited past the head-of-line timeout; headCut: its response had begun to
	// arrive (the connection ended within a response, not between two).
	ended(c *pconn, err error, unanswered, answered int, headIdle, headSlow, headCut bool)
}

func newPconn(t *Transport, ev connEvents, conn net.Conn, state *tls.ConnectionState) *pconn {
	o := &t.opts
	c := &pconn{
		ev:     ev,
		t:      t,
		conn:   conn,
		tls:    state,
		closed: make(chan struct{}),
	}
	c.connWriter.c, c.connReader.c, c.readDeadline.c = c, c, c
	c.writeLock = make(chan struct{}, 1)
	c.id = t.connIDs.Add(1)
	c.nr.conn = conn
	c.br = bufio.NewReaderSize(&c.nr, o.ReadBufferSize)
	c.wc.conn = conn
	c.wc.unacked = &c.nr.unacked
	c.nr.wrote = &c.wc.n
	c.bw = bufio.NewWriterSize(&c.wc, o.WriteBufferSize)
	if c.peek = socket.NewPeeker(conn); c.peek != nil {
		_, c.readsNow = conn.(*net.TCPConn)
		c.peek.Write = c.flushHeld
		c.nr.ack = c.peek
		c.canDirect = true
		c.wake = make(chan struct{}, 1)
		c.restT = time.NewTimer(restWatch)
		c.restT.Stop()
		c.onCancel = c.cancelDirect // made once: a closure per watch would cost an allocation per request
		c.rd.Store(rdFree)          // the reader goroutine starts at rest (conn_direct.go)
	}
	c.s.idleSince = time.Now()
	c.s.opened = c.s.idleSince
	return c
}

// aLongTimeAgo is a deadline that makes blocked I/O return at once.
var aLongTimeAgo = time.Unix(1, 0)

var (
	errUpgraded     = errors.New("pipelined: connection upgraded")
	errConnClosing  = errors.New("pipelined: connection closed after response")
	errIdleClosed   = errors.New("pipelined: server closed idle connection")
	errIdleTimeout  = errors.New("pipelined: idle connection timed out")
	errClosedIdle   = errors.New("pipelined: idle connection closed by CloseIdleConnections")
	errDrainTooLong = errors.New("pipelined: response body closed early")
)

// notePipelinedLocked sets nr.pipelined from fifo. c.mu is held.
func (c *pconn) notePipelinedLocked() {
	c.nr.pipelined.Store(len(c.fifo) > 1 || len(c.fifo) == 1 && c.fifo[0].behind)
}

// enqueue appends a to c's fifo before the first byte of its request is
// written (RFC 9112 §9.2: responses come in the order of the requests),
// wakes a resting reader goroutine if a's caller does not read the response
// itself (direct), and starts the timers a's place calls for: a's header
// timer if it is the head, the head-of-line timer of the head it is the
// first behind. It reports false, with a not queued, if c takes no more
// requests, or if the last request written on c may not be followed
// (followable) and has had no response: a was placed before that request and
// came to the write token after it, and goes elsewhere. The caller holds
// the write token.
func (c *pconn) enqueue(a *attempt, direct bool) bool {
	c.mu.Lock()
	if n := len(c.fifo); c.dead || c.noWrite || n > 0 && !followable(c.fifo[n-1]) && !c.fifo[n-1].headersRead {
		c.mu.Unlock()
		return false
	}
	c.joinLocked(a)
	head := len(c.fifo) == 1
	var first *attempt // the head, if a is the first request behind it
	if len(c.fifo) == 2 {
		first = c.fifo[0]
	}
	// A request its caller does not read (conn_direct.go) wakes a resting
	// reader goroutine: its response is the reader's to read.
	wakeReader := !direct && c.rd.Load() == rdFree
	if wakeReader {
		c.rd.Store(rdReader)
	}
	c.mu.Unlock()
	if wakeReader {
		c.wakeReader()
	}
	if head {
		c.armHeaderTimeout(a)
	} else if first != nil && first.arm.Load() >= 2 {
		c.holStart(first) // something waits behind the head now
	}
	return true
}

// followable reports whether requests may be written behind a before its
// response, as the pool places them (assignLocked): a pipelineable request
// neither alone nor of a route not known to respond bounded and quickly
// (internal/model). Requests go out in the order they take the write token, not
// that of their places: one placed before a restarted watch, its route
// unseen, but written after it, waited behind the watch until
// HeadOfLineTimeout.
func followable(a *attempt) bool {
	return a.r.pipelineable && !a.alone && a.follow.OK()
}

// joinLocked records what a's place on c tells the pool and the reader
// (the bytes handed to c before it, whether it is pipelined, the timing
// of its write for the order of responses, when it became the head), and
// appends a to the fifo. c.mu is held, and the write token: bw is still.
func (c *pconn) joinLocked(a *attempt) {
	a.wireOff = c.wc.written() + int64(c.bw.Buffered())
	a.reused = c.answered > 0 || len(c.fifo) > 0
	a.behind = len(c.fifo) > 0
	// Written together with the request ahead: its bytes wait in bw, to go
	// out in the same write (the writer holds the token: bw is still).
	a.together = a.behind && c.bw.Buffered() > 0
	if a.behind {
		c.recentBehind = 32
	} else if c.recentBehind > 0 {
		c.recentBehind--
	}
	now := monoNow()
	if a.behind {
		// Sample the order of responses (internal/model, serviceOrder).
		a.sentAt = now // under mu: the reader reads it
		a.writeGap = time.Duration(now - c.lastSent)
	}
	c.lastSent = now
	c.fifo = append(c.fifo, a)
	c.notePipelinedLocked()
	if len(c.fifo) == 1 && a.r.pipelineable {
		// Only a request others may be written behind says what they
		// would wait for (hostPool.heads): a POST's wait holds its
		// upload, and nothing follows it before its response anyway. A
		// request behind another is pipelineable, and gets its headAt
		// when it becomes the head (popHead).
		a.headAt = now
	}
}

// stopWriting makes c take no more requests, leaving the read side open so
// that responses already due are read. The pool learns it first.
func (c *pconn) stopWriting() {
	c.ev.retire(c)
	c.mu.Lock()
	c.noWrite = true
	c.mu.Unlock()
}

// behind reports whether requests wait behind the connection's head.
func (c *pconn) behind() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.fifo) > 1
}

func (c *pconn) head() *attempt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.fifo) == 0 {
		return nil
	}
	return c.fifo[0]
}

// hooked runs f, a hook of the user's, while the read turn or the write
// token of c is held, with c held (connEvents.hold): a request the hook
// sends to the host goes elsewhere instead of waiting, behind the
// request the hook reports on, for the hook to return.
func (c *pconn) hooked(f func()) {
	c.ev.hold(c, true)
	defer c.ev.hold(c, false)
	f()
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

// dropIfUnwanted closes c if the response it waits for is wanted by
// nobody: every request on it still awaiting its response was abandoned by its caller or
// moved to another connection. Waiting for such a response would hold a
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

// abandoned is called once the caller of a, an attempt on c, gave it up
// before its response's head came. As net/http closes a connection whose
// request was cancelled before its response, c takes nothing new (what was
// placed on it and not yet written goes elsewhere), and it closes once a
// is its oldest request still awaiting its response (cutAbandoned): a request written
// behind a would wait out a's whole response, which nobody reads, and a
// request placed behind it later too. Held until that response came, 1 request
// in 20 with a 10 ms deadline to a route responding in 30 ms cost the other
// callers more than half their requests against net/http's.
func (c *pconn) abandoned() {
	c.gaveUp.Store(true)
	c.stopWriting()
	c.dropIfUnwanted()
	c.cutAbandoned()
}

// cutAbandoned closes c if its oldest request still awaiting its response
// was abandoned by its caller before its head came (abandoned), sending the
// requests written behind it again elsewhere: they were pipelined, so safe,
// and a client sends pipelined requests again when their connection closes
// before their responses (RFC 9112 §9.3.2). It reports whether it closed c.
func (c *pconn) cutAbandoned() bool {
	c.mu.Lock()
	cut := !c.dead && len(c.fifo) > 0 && !c.fifo[0].headersRead && c.fifo[0].state.Load() == attemptAbandoned
	c.mu.Unlock()
	if !cut {
		return false
	}
	c.resendBehind(true)
	c.fail(errUnwanted)
	return true
}

// resendBehind tells the callers of attempts written behind the head to
// send their requests elsewhere. With all, every one of them: the server
// announced that it processes nothing after the head (RFC 9112 §9.6).
// Otherwise only those that may run twice (mayDuplicate): their originals
// stay in fifo and may still be executed by the server; their late
// responses are read and discarded.
func (c *pconn) resendBehind(all bool) {
	c.mu.Lock()
	var behind []*attempt
	if len(c.fifo) > 1 {
		behind = append(behind, c.fifo[1:]...)
	}
	c.mu.Unlock()
	for _, b := range behind {
		if all || mayDuplicate(b.r) {
			b.deliver(result{retry: true})
		}
	}
}

// closedBy returns why the connection was closed (the first fail's
// error), or nil while it is open.
func (c *pconn) closedBy() error {
	select {
	case <-c.closed:
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cause
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
	// The first caller's error is the cause: closing the connection makes
	// the reader fail too, with an error that is only a consequence (an
	// idle connection would look closed by its server).
	c.mu.Lock()
	if c.cause == nil {
		c.cause = err
	}
	err = c.cause
	c.mu.Unlock()
	if b := c.filling.Load(); b != nil && errors.Is(err, ErrTransportClosed) {
		// A body the transport closes fails at once, as Transport.Close
		// says: before its reader meets the closed connection and ends
		// it after what had arrived.
		b.connClosed(err)
	}
	c.closeConn()
	if b := c.filling.Load(); b != nil {
		b.connClosed(nil) // its reader may wait for a caller who never reads on
	}
	c.ev.removed(c) // the pool first: it must not hand c out any more
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return
	}
	c.dead = true
	// headersRead is guarded by c.mu: pick the attempts still awaiting their responses here.
	var unanswered []*attempt
	headUnanswered := false
	for i, a := range c.fifo {
		if !a.headersRead {
			unanswered = append(unanswered, a)
			headUnanswered = headUnanswered || i == 0
		}
	}
	answered := c.answered
	// shared: other requests were in flight with them. Which one made the
	// server fail the connection is unknown: a server that runs pipelined
	// requests at once (Node) may have dropped it for a request behind.
	// This is the pipelining case of RFC 9112 §9.3.2, where even the head
	// of a fresh connection may be retried.
	shared := len(c.fifo) > 1
	c.fifo = nil
	c.nr.pipelined.Store(false)
	c.mu.Unlock()
	headSlow := c.holStop()
	written := c.wc.writtenAfterClose()
	inFlight := len(unanswered)
	if shared {
		inFlight = max(inFlight, 2)
	}
	headIdle := len(unanswered) > 0 && !unanswered[0].behind
	headCut := headUnanswered && c.headCut.Load()
	c.ev.ended(c, err, inFlight, answered, headIdle, headSlow, headCut)
	for i, a := range unanswered {
		a.deliver(result{err: &ConnError{
			Err:     err,
			Written: written > a.wireOff,
			fail: failure{
				written:  written > a.wireOff,
				reused:   a.reused || shared,
				answered: i == 0 && headUnanswered && isFinalError(err),
				garbled:  i == 0 && headUnanswered && isMalformed(err),
			},
		}})
	}
}

// isMalformed reports whether err says a response could not be parsed.
func isMalformed(err error) bool {
	var fe *FramingError
	var he *h1.HeaderTooLargeError
	return errors.As(err, &fe) || errors.As(err, &he)
}

// detach removes an upgraded connection from the pool without closing it:
// its caller owns it now.
func (c *pconn) detach() {
	c.ev.removed(c)
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
	c.ev.ended(c, errUpgraded, 0, 0, false, false, false)
}

// isFinalError reports whether a request whose response failed with err
// must not be retried: the server responded, badly or too slowly.
func isFinalError(err error) bool {
	var fe *FramingError
	var he *h1.HeaderTooLargeError
	return errors.As(err, &fe) || errors.As(err, &he) || err == ErrResponseHeaderTimeout ||
		errors.Is(err, ErrTransportClosed)
}
