package pipelined

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"runtime"
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
//     the token of writeLock means owning bw. Each writer appends its
//     attempt to fifo (under mu) before writing its first byte, so a
//     response can never arrive for a request that is not in fifo.
//   - One reader goroutine (readLoop) owns br for the connection's whole
//     life and parses responses strictly in fifo order (RFC 9112 §9.2). It
//     copies bodies into their response's body buffer (body.go).
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
	br   *bufio.Reader
	nr   netReader // what br reads from
	bw   *bufio.Writer
	wc   wireCounter // counts the bytes bw hands to conn
	lw   limitWriter // writeBody's writer for in-memory bodies, owned with bw

	// chunkHint is the size of the last chunked body read on c (up to
	// maxBufferedBody): the next one's buffer starts at it, so that one
	// of the same size grows no buffer (each growth copies). Only the
	// reader goroutine, which reads bodies, touches it.
	chunkHint int

	writeLock      chan struct{} // capacity 1: a token held = bw owned
	pendingWriters atomic.Int32  // writers waiting for writeLock; the last one flushes
	wdMu           sync.Mutex    // serialises write-deadline changes on cancellation
	// placed mirrors the pool's count of requests placed on c and not yet
	// answered (sched.inflight), stored under hostPool.mu: more than fifo
	// holds means a writer is on its way (pipelining).
	placed atomic.Int32
	// gaveUp: a caller gave up an attempt on c before its answer's head
	// (abandoned); set once, as c then ends.
	gaveUp atomic.Bool

	mu       sync.Mutex // guards the fields below up to closeOnce
	fifo     []*attempt // attempts written and not fully answered, in wire order; nr.pipelined follows it (notePipelinedLocked)
	answered int        // responses read in full
	noWrite  bool       // the connection ends after responses already due
	// recentBehind is 32 when a request was last written behind others,
	// and counts down with each request written alone: the connection has
	// been pipelining recently (pipelining).
	recentBehind int
	lastSent     monoTime // when the last request joined fifo
	dead         bool
	cause        error // the first fail's error: why the connection ends

	// headCut: the head of fifo failed once bytes of its answer had come
	// (readOne), so that the connection ended within an answer, not
	// between two (hostPool.ended, quietClosed). Set by the holder of the
	// read turn, read by fail.
	headCut atomic.Bool

	closeOnce sync.Once
	closed    chan struct{} // closed when conn is closed
	// filling is the body the reader goroutine is filling, if any: fail
	// wakes it if it waits for its caller to make room (body.space).
	filling atomic.Pointer[body]

	deadlineMu sync.Mutex // guards armed and read-deadline changes
	armed      *attempt   // the attempt whose header timeout is running

	hol holGuard // head-of-line timer (holprotect.go); has its own mutex

	// The read turn (direct.go): who reads br next. rd and pending are
	// guarded by mu. The reader goroutine waits on wake and restT while
	// the connection rests; a caller that held the turn signals wake when
	// it hands the turn back, or re-arms restT when it leaves the
	// connection resting.
	rd      atomic.Uint32 // a readTurn; changed under mu, read without it only as a hint
	pending *pendingBody  // a head read by a direct reader, its body not yet
	wake    chan struct{} // capacity 1: rd may have changed
	restT   *time.Timer   // ends a rest: the reader watches the connection
	// canDirect: the connection can be checked for bytes without reading
	// them (quiet), so a caller may read its own answer. Set once.
	canDirect bool
	peek      *socket.Peeker // looks at the socket (quiet); the read turn's. Set with canDirect
	// readsNow: a direct reader may read a body from the socket itself
	// (peeker.readNow): the connection is a plain TCP one, with nothing
	// of its own between it and the socket (no TLS, no wrapper that
	// counts or traces its reads). Set with peek.
	readsNow bool

	// directing is the attempt whose caller reads its own answer, until
	// the turn passes on; directWatched says that its context is watched
	// (directA is set). Both belong to the holder of the read turn
	// (directing is atomic so that the end of a direct read is taken
	// once, by finishResponse or by readDirect).
	directing     atomic.Pointer[attempt]
	directWatched bool
	onCancel      func() // cancelDirect, the function of every watch (startDirect)

	// Guarded by deadlineMu: the attempt a caller reads directly while its
	// context may be cancelled, that context's Done channel, and whether
	// it was cancelled; the watch of a context (direct.go, startDirect):
	// the Done channel it fires on, how to stop it, whether it is kept
	// after the direct read, the Done channel of the last one stopped, and
	// whether the connection is gone (no new watch).
	directA         *attempt
	directCtxDone   <-chan struct{}
	directCancelled bool
	watchDone       <-chan struct{}
	watchStop       func() bool
	watchKeep       bool
	lastDone        <-chan struct{}
	watchGone       bool
	armedUntil      time.Time // the header deadline of armed

	// heldDeadline, owned by the holder of the write token: writeHeld set
	// a write deadline, which the flush within the look undoes before it
	// releases the token.
	heldDeadline bool

	// prevEnd, owned by whoever holds the read turn: when the response
	// ahead of the current head ended, if the head was written behind it.
	prevEnd monoTime

	s         sched     // schedulable state: guarded by hostPool.mu (pool.go)
	idleEntry idleEntry // its place in the Transport's idle LRU (idle.go)
}

// wireCounter is the connection as bw sees it: it counts the bytes handed
// to the connection, so that whether a request may have reached the server
// is known (net/http's persistConn.nwrite). mu is held during each Write:
// the server may answer (or close) before Write returns, so a reader that
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

// netReader is the connection as br sees it. onRead, if set, runs once
// before the next read from the network; only the holder of the read turn
// sets it or reads through it.
type netReader struct {
	conn   net.Conn
	onRead func()
	// ack, if set, acknowledges at once what the socket has received
	// (peeker.ackNow); set once, with the connection. ackT runs it when a
	// read waits longer than ackStall while answers are still due.
	ack  *socket.Peeker
	ackT *time.Timer
	// pipelined: an answer due on the connection was asked for behind
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
	// written before the bytes being parsed came (an answer that counts
	// as a pipelining proof, attempt.proves). Only the goroutine that
	// holds the read turn touches seenWrote.
	wrote     *atomic.Int64
	seenWrote int64
	// pending: bytes read from the network ahead of br and handed back
	// (unread); Read returns them first. chunkedReader.readRaw hands them
	// back and moves them into br at once, so that nothing is pending
	// outside it. Only the goroutine that holds the read turn touches it.
	pending, pbuf []byte
}

// Unread hands b back, to be read again first.
func (r *netReader) Unread(b []byte) {
	r.pbuf = append(r.pbuf[:0], b...)
	r.pending = r.pbuf
}

// ackStall is how long a read waits, with answers still due, before the
// connection acknowledges what it has received.
//
// A server that writes without TCP_NODELAY holds a small response until
// the last one it sent is acknowledged (Nagle's algorithm, RFC 1122
// §4.2.3.4), and a client acknowledges late when it has nothing to send
// (delayed ACKs, RFC 1122 §4.2.3.2: 40 ms on Linux). net/http's next
// request carries the ACK; a pipelined request was sent already, so each
// answer behind a small one would wait out the client's timer (Puma).
// Acknowledging after every read would cost a system call and a packet
// per read under load, when the requests written carry the ACKs; a wait
// this long is where a stall shows, and only a wait after bytes came
// with nothing written since can be one (netReader.unacked). At 1 ms the
// timer fired for most answers of a server that takes a millisecond (0.3
// to 0.5 per request, a goroutine and a system call each); at 2 ms, for
// 1 in 50 to 1 in 150, and a stall costs Puma's mixed load 1-2%. The
// timer asks for the ACK even if the connection wrote since it was armed:
// skipping the call then left half of the rounds of
// TestNagleServerPipelinedAnswersNotDelayed waiting out the kernel's
// timer (ackNow also ends the socket's interactive mode).
const ackStall = 2 * time.Millisecond

// notePipelinedLocked sets nr.pipelined from fifo. c.mu is held.
func (c *pconn) notePipelinedLocked() {
	c.nr.pipelined.Store(len(c.fifo) > 1 || len(c.fifo) == 1 && c.fifo[0].behind)
}

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
	// ended: the last event of a connection, once it is marked dead: it
	// ended with err, with unanswered requests written on it after
	// answered responses; headIdle: the oldest of them was written on
	// the connection while nothing was in flight (not pipelined);
	// headSlow: it had waited past the head-of-line timeout; headCut: its
	// answer had begun to arrive (the connection ended within an answer,
	// not between two).
	ended(c *pconn, err error, unanswered, answered int, headIdle, headSlow, headCut bool)
}

func newPconn(t *Transport, ev connEvents, conn net.Conn, state *tls.ConnectionState) *pconn {
	o := &t.opts
	c := &pconn{
		ev:        ev,
		t:         t,
		conn:      conn,
		tls:       state,
		writeLock: make(chan struct{}, 1),
		closed:    make(chan struct{}),
	}
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
		c.rd.Store(rdFree)          // the reader goroutine starts at rest (direct.go)
	}
	c.s.idleSince = time.Now()
	c.s.opened = c.s.idleSince
	return c
}

var errNotWritten = errors.New("pipelined: request not written")

func noStop() bool { return true }

// aLongTimeAgo is a deadline that makes blocked I/O return at once.
var aLongTimeAgo = time.Unix(1, 0)

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
// (prepareHead), who reads the answer (claimReader), a's place in the
// fifo (enqueue), then the write: inline, held until the look at the
// socket (writeHeld), or by a goroutine of its own while the answer is
// read (full duplex). Nothing that can refuse the request comes after
// enqueue but the write itself: a request in the fifo is answered.
func (c *pconn) send(a *attempt) error {
	r := a.r
	if err := c.takeWriteToken(r.ctx); err != nil {
		return c.tokenError(err)
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
		<-c.writeLock
		c.flushLeftovers()
		if refused {
			traceRefused(r, &h, err)
		}
		return err
	}
	inline := inlineBody(r, body)
	direct, held := c.claimReader(a, body, inline)
	if !c.enqueue(a, direct) {
		c.giveBack(r, body, direct)
		return errNotWritten
	}
	if !inline {
		// Full duplex: the response may come (and be returned) while the
		// body is still being written, as with net/http.
		a.writeDone = make(chan struct{})
		go c.write(a, h, body, false)
		return nil
	}
	if held {
		return c.writeHeld(a, &h, body)
	}
	c.write(a, h, body, direct)
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
func (c *pconn) tokenError(err error) error {
	if err == net.ErrClosed {
		return errNotWritten
	}
	go c.flushLeftovers()
	return err
}

// inlineBody reports whether r's body (nil: none) is written in the
// caller's goroutine: none, or a replayable one of known length up to
// maxInlineBody. Any other is written by a goroutine of its own.
func inlineBody(r *request, body io.ReadCloser) bool {
	return body == nil || r.req.GetBody != nil && r.req.ContentLength > 0 && r.req.ContentLength <= maxInlineBody
}

// claimReader decides who reads the answer to a's request: its caller
// (direct, direct.go) or c's reader goroutine; and whether the request is
// held until the look at the socket (held, writeHeld). A caller about to
// read its own answer first checks that nothing came while c rested: if
// something did (a close, or an answer to nothing), c takes nothing more,
// so that a is not written (enqueue), and the reader goroutine reads what
// came and ends the connection. The caller holds the write token.
func (c *pconn) claimReader(a *attempt, body io.ReadCloser, inline bool) (direct, held bool) {
	direct = inline && c.claimDirect(a)
	// A direct request written in one pass with the look at the socket
	// and the wait for its answer (writeHeld) is looked at there; here,
	// only what is already read is.
	tells := direct && c.socketTells()
	held = tells && c.mayHold(a, body)
	spoke := held && !c.quietBuffered()
	if direct && !held {
		switch {
		case !c.quietBuffered():
			spoke = true
		case tells && !c.peek.SocketQuiet():
			spoke = true
			c.peerEnded() // at the socket: a close, or an answer to nothing
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

// enqueue appends a to c's fifo before the first byte of its request is
// written (RFC 9112 §9.2: responses come in the order of the requests),
// wakes a resting reader goroutine if a's caller does not read the answer
// itself (direct), and starts the timers a's place calls for: a's header
// timer if it is the head, the head-of-line timer of the head it is the
// first behind. It reports false, with a not queued, if c takes no more
// requests, or if the last request written on c may not be followed
// (followable) and has had no answer: a was placed before that request and
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
	// A request its caller does not read (direct.go) wakes a resting
	// reader goroutine: its answer is the reader's to read.
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
// answer, as the pool places them (assignLocked): a pipelineable request
// neither alone nor of a route not known to answer bounded and quickly
// (model.go). Requests go out in the order they take the write token, not
// that of their places: one placed before a restarted watch, its route
// unseen, but written after it, waited behind the watch until
// HeadOfLineTimeout.
func followable(a *attempt) bool {
	return a.r.pipelineable && !a.alone && a.follow.ok()
}

// joinLocked records what a's place on c tells the pool and the reader
// (the bytes handed to c before it, whether it is pipelined, the timing
// of its write for the order of answers, when it became the head), and
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
		// Sample the order of answers (model.go, serviceOrder).
		a.sentAt = now // under mu: the reader reads it
		a.writeGap = time.Duration(now - c.lastSent)
	}
	c.lastSent = now
	c.fifo = append(c.fifo, a)
	c.notePipelinedLocked()
	if len(c.fifo) == 1 && a.r.pipelineable {
		// Only a request others may be written behind says what they
		// would wait for (hostPool.heads): a POST's wait holds its
		// upload, and nothing follows it before its answer anyway. A
		// request behind another is pipelineable, and gets its headAt
		// when it becomes the head (popHead).
		a.headAt = now
	}
}

// giveBack undoes what send took for a request c will not write: the
// read turn (direct), the write token, and the body, left for the next
// attempt (a fresh copy if replayable, else the same body, unread).
func (c *pconn) giveBack(r *request, body io.ReadCloser, direct bool) {
	if direct {
		c.handBack(rdReader)
	}
	<-c.writeLock
	if body != nil {
		if r.req.GetBody != nil {
			body.Close() // the next attempt gets a fresh copy
		} else {
			r.bodyUsed = false // unread: the next attempt reuses it
		}
	}
}

// write writes a's request, holding the write token, and releases it.
// direct: a's caller holds the read turn (direct.go), to read the answer
// once the request is written.
func (c *pconn) write(a *attempt, h h1.Head, body io.ReadCloser, direct bool) {
	stop, cancelled, deadline := c.watchWrite(a.r, body)
	tunnel, body := tunnelBody(a.r, body)
	werr, deferFlush := c.writeOut(a, &h, body, tunnel != nil)
	if deadline {
		c.conn.SetWriteDeadline(time.Time{})
	}
	<-c.writeLock
	if werr == nil && deferFlush {
		werr = c.flushSoon()
	}
	c.stopWriteWatch(stop, cancelled, werr)
	a.written.Store(werr == nil)
	if a.writeDone != nil {
		close(a.writeDone)
	}
	if werr != nil {
		c.writeFailed(a, werr, tunnel)
		return
	}
	if tunnel != nil {
		go c.copyTunnel(tunnel)
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
func (c *pconn) watchWrite(r *request, body io.ReadCloser) (stop func() bool, cancelled *bool, deadline bool) {
	if r.ctx.Done() == nil { // a context that can never be cancelled needs no watch
		return noStop, nil, false
	}
	if body != nil && !smallBody(r) || r.method == http.MethodConnect {
		flag := new(bool)
		return context.AfterFunc(r.ctx, func() {
			c.wdMu.Lock()
			*flag = true
			c.conn.SetWriteDeadline(aLongTimeAgo)
			c.wdMu.Unlock()
		}), flag, false
	}
	if dl, ok := r.ctx.Deadline(); ok {
		// A request head, alone or with a small body, fits in the
		// socket buffer unless the server has stopped reading: bound
		// it by the context's deadline rather than watch the context,
		// which costs more than the write (an AfterFunc registers with
		// the parent). A cancellation meanwhile is seen by await,
		// which closes the connection if nobody wants its answer.
		c.conn.SetWriteDeadline(dl)
		return noStop, nil, true
	}
	return noStop, nil, false
}

// stopWriteWatch stops watchWrite's watch (stop; cancelled is not nil
// where stop can report false). A cancellation that came while a write
// went through anyway leaves no past deadline behind: the request is
// written, and its answer is read.
func (c *pconn) stopWriteWatch(stop func() bool, cancelled *bool, werr error) {
	if !stop() {
		c.wdMu.Lock()
		if *cancelled && werr == nil {
			c.conn.SetWriteDeadline(time.Time{})
		}
		c.wdMu.Unlock()
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
func (c *pconn) writeOut(a *attempt, h *h1.Head, body io.ReadCloser, tunnel bool) (werr error, deferFlush bool) {
	r := a.r
	// The hooks told of the write run with the write token held: the
	// connection is held meanwhile (hooked).
	hold := writeHooked(r.trace)
	if hold {
		c.ev.hold(c, true)
	}
	werr = writeRequest(c.bw, &c.lw, r, h, body, c.waitForContinue(a))
	if a.together {
		a.wireEnd.Store(c.wc.written() + int64(c.bw.Buffered()))
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
	deferFlush = r.pipelineable && !a.alone && !tunnel && c.t.depth > 1 && c.pipelining()
	if werr == nil && !deferFlush {
		werr = c.bw.Flush()
	}
	return werr, deferFlush
}

// writeHooked reports whether trace has a hook told of a request's write
// (WroteHeaderField, WroteHeaders, Wait100Continue, WroteRequest).
func writeHooked(t *httptrace.ClientTrace) bool {
	return t != nil && (t.WroteHeaderField != nil || t.WroteHeaders != nil || t.Wait100Continue != nil || t.WroteRequest != nil)
}

// writeFailed settles a failed write of a's request.
func (c *pconn) writeFailed(a *attempt, werr error, tunnel io.ReadCloser) {
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
func (c *pconn) copyTunnel(body io.ReadCloser) {
	defer body.Close()
	io.Copy(c.conn, body)
}

// stopWriting makes c take no more requests, leaving the read side open so
// that responses already due are read. The pool learns it first.
func (c *pconn) stopWriting() {
	c.ev.retire(c)
	c.mu.Lock()
	c.noWrite = true
	c.mu.Unlock()
}

// flushSoon makes sure that what the caller has just written is flushed,
// coalescing it with the requests of other writers: if a writer is waiting
// for the write token, that writer will flush; otherwise this goroutine
// yields once, so that callers about to write on this connection (those
// woken by the responses just delivered) can add their requests, and then
// flushes everything buffered in one write. It is used only while the
// connection is pipelining (pipelining): one that carries one request at a
// time has nothing to coalesce, and its writer flushes at once.
func (c *pconn) flushSoon() error {
	if c.pendingWriters.Load() > 0 {
		return nil
	}
	runtime.Gosched()
	return c.flushBuffered()
}

// pipelining reports whether requests share c at the moment, or did among
// the last few written, or one was placed behind the writer's and is on
// its way: then callers woken by the responses just read, or given a
// place, are likely to write on c in a moment, and a flush should wait
// for them.
func (c *pconn) pipelining() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.fifo) > 1 || c.recentBehind > 0 || int(c.placed.Load()) > len(c.fifo)
}

// flushLeftovers flushes requests that a writer left buffered expecting a
// writer behind it to flush, when that writer gave up.
func (c *pconn) flushLeftovers() {
	// A flush on a closed connection (its token free, so taken without a
	// look at c.closed) fails with net.ErrClosed wrapped: not a new cause.
	if err := c.flushBuffered(); err != nil && !errors.Is(err, net.ErrClosed) {
		c.fail(err)
	}
}

// flushBuffered takes the write token and flushes whatever is buffered. It
// counts as a pending writer while it waits, so that writers finishing
// meanwhile leave their flush to it.
func (c *pconn) flushBuffered() error {
	if err := c.takeWriteToken(context.Background()); err != nil {
		return err
	}
	var err error
	if c.bw.Buffered() > 0 {
		err = c.bw.Flush()
	}
	<-c.writeLock
	return err
}

// takeWriteToken takes the write token, counting as a pending writer
// while it waits (flushSoon). It returns net.ErrClosed if the connection
// closes first, or ctx's cause if ctx ends first. A free token is taken
// without a select over those (a closed connection is then seen by the
// holder, under mu).
func (c *pconn) takeWriteToken(ctx context.Context) error {
	select {
	case c.writeLock <- struct{}{}:
		return nil
	default:
	}
	c.pendingWriters.Add(1)
	defer c.pendingWriters.Add(-1)
	select {
	case c.writeLock <- struct{}{}:
		return nil
	case <-c.closed:
		return net.ErrClosed
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// armHeaderTimeout is called twice per attempt: once when it is fully
// written and once when it becomes the oldest unanswered request on c. The
// second call starts the head-of-line timer and, if ResponseHeaderTimeout
// is set, the header timer, as a read deadline on the connection.
func (c *pconn) armHeaderTimeout(a *attempt) {
	if a.arm.Add(1) != 2 {
		return
	}
	c.holStart(a)
	d := c.t.opts.ResponseHeaderTimeout
	if d <= 0 {
		return
	}
	c.deadlineMu.Lock()
	if !a.disarmed {
		c.armed = a
		c.armedUntil = time.Now().Add(d)
		if !c.directCancelled {
			c.conn.SetReadDeadline(c.armedUntil)
		}
	}
	c.deadlineMu.Unlock()
}

// disarm stops a's header timer, reporting whether it was running.
func (c *pconn) disarm(a *attempt) bool {
	if c.t.opts.ResponseHeaderTimeout <= 0 {
		return false
	}
	c.deadlineMu.Lock()
	defer c.deadlineMu.Unlock()
	a.disarmed = true
	if c.armed == a {
		c.armed = nil
		if !c.directCancelled {
			c.conn.SetReadDeadline(time.Time{})
		}
		return true
	}
	return false
}

// readLoop reads responses until the connection fails or closes.
func (c *pconn) readLoop() {
	defer c.t.wg.Done()
	err := c.readResponses()
	c.endWatch()
	if err == errUpgraded {
		return // detached: its caller owns the connection
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

func (c *pconn) readResponses() error {
	held := false // the reader holds the read turn (direct.go)
	for {
		// The read turn (direct.go): a connection with nothing in flight
		// rests, and its next request's caller may read the answer itself.
		// A reader that holds the turn with bytes buffered reads on: the
		// pipeline's common case, with no lock taken.
		var p *pendingBody
		if c.canDirect && !(held && c.br.Buffered() > 0) {
			var err error
			if p, err = c.rest(); err != nil {
				return err
			}
			held = true
		}
		if p != nil {
			// A direct reader read this head and left the body to us.
			var err error
			if p.got != nil { // its start read already (readNow)
				err = c.readBodyFrom(p.a, p.resp, p.f, p.closing, p.got, p.n)
			} else { // a whole body may have come since
				err = c.readBody(p.a, p.resp, p.f, p.closing, false)
			}
			if err != nil {
				return err
			}
			if p.closing {
				return errConnClosing
			}
			continue
		}
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
		if err := c.readOne(a, err, false); err != nil {
			return err
		}
	}
}

// readOne reads the response to a, the head of fifo, whose first byte has
// arrived (or failed to: peekErr). It returns nil when the connection is
// positioned at the next response. A direct reader (direct.go) reads only
// a body already in the buffer; it leaves any other to the reader
// goroutine (errHandOver, with c.pending set).
func (c *pconn) readOne(a *attempt, peekErr error, direct bool) error {
	if peekErr != nil {
		if c.disarm(a) && isTimeout(peekErr) {
			return ErrResponseHeaderTimeout
		}
		return peekErr
	}
	if t := a.r.trace; t != nil && t.GotFirstResponseByte != nil && a.state.Load() == attemptWaiting {
		c.hooked(t.GotFirstResponseByte)
	}
	resp, f, err := h1.ReadResponseHead(c.br, a.r.method, c.t.opts.MaxResponseHeaderBytes, c.interimHook(a))
	armed := c.disarm(a)
	c.holStop()
	if err != nil {
		if armed && isTimeout(err) {
			return ErrResponseHeaderTimeout
		}
		c.headCut.Store(true) // bytes of the answer came: an end now cuts it
		return err
	}
	c.mu.Lock()
	a.headersRead = true
	a.place = c.answered + 1
	// RFC 9112 §9.3.2: a server answers pipelined requests in the order
	// received. gunicorn's gthread worker reads one sent with the request
	// ahead and then leaves it, unanswered until more bytes come: an answer
	// to a request sent together with the one ahead, before anything sent
	// after it, is one such a server does not give (probeLocked).
	a.proves = a.together && c.nr.seenWrote <= a.wireEnd.Load()
	behind, sentAt, headAt := a.behind, a.sentAt, a.headAt
	c.mu.Unlock()
	if headAt != 0 {
		now := monoNow()
		a.headWait = max(time.Duration(now-headAt), 1)
		if behind && sentAt != 0 && c.prevEnd != 0 {
			a.gap, a.timed = time.Duration(now-c.prevEnd), true
			a.shadow = time.Duration(c.prevEnd - sentAt)
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
	// to nothing anyone could read: as with net/http, it is the answer,
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
		resp.Body = &upgradeBody{br: c.br, conn: c.conn}
		c.popHead()
		// Out of the pool before the caller has it: the connection
		// is the caller's now.
		c.detach()
		if !a.deliver(result{resp: resp}) {
			c.closeConn() // nobody took it
		}
		return errUpgraded
	}
	if err := c.readBody(a, resp, f, closing, direct); err != nil {
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
func (c *pconn) readBody(a *attempt, resp *http.Response, f h1.Framing, closing, direct bool) error {
	a.bodyLen = -1
	if f.Kind == h1.BodyLength {
		a.bodyLen = f.N // before the pool hears of the head (gotHeaders, finishResponse)
	}
	if f.Kind == h1.BodyNone {
		resp.Body = http.NoBody
		a.noBody = true
		c.finishResponse(a, closing, true)
		a.deliver(result{resp: resp})
		return nil
	}
	var got *[]byte // the body's first n bytes, read by a direct reader
	var n int
	if f.Kind == h1.BodyLength && f.N <= maxBufferedBody {
		whole := f.N <= int64(c.br.Buffered())
		if !whole && direct && f.N <= maxReadAhead && c.readsNow {
			got, n = c.readNow(int(f.N))
			whole = n == int(f.N)
		}
		if whole {
			// The whole body is here: the connection is free again (and
			// counted so) by the time the caller sees its response.
			if got == nil {
				got = getBodyBuf(int(f.N))
				n, _ = io.ReadFull(c.br, (*got)[:f.N])
			}
			b := newBody(a.r.ctx, resp, got)
			b.w, b.end = n, true
			resp.Body = b
			c.finishResponse(a, closing, true)
			a.deliver(result{resp: resp})
			return nil
		}
	}
	if direct {
		// The rest of the body is the reader goroutine's to read: the
		// caller returns with the headers, as from any other response.
		c.mu.Lock()
		c.pending = &pendingBody{a: a, resp: resp, f: f, closing: closing, got: got, n: n}
		c.mu.Unlock()
		c.t.handOvers.Add(1)
		return errHandOver
	}
	return c.readBodyFrom(a, resp, f, closing, nil, 0)
}

// readNow reads a body of known length up to maxReadAhead as far as it has
// arrived, without waiting: what br holds, then what the socket holds
// (peeker.readNow). A direct reader that read the head only, with 4 KiB
// of br, handed even a 4 KiB body to the reader goroutine, a goroutine's
// wake-up and hand-over per answer (24.6 µs of CPU per 4 KiB GET at P=5,
// against 18.7 at 128 B). It returns the body's buffer and the bytes in
// it.
func (c *pconn) readNow(size int) (*[]byte, int) {
	buf := getBodyBuf(size)
	b := (*buf)[:size]
	n, _ := io.ReadFull(c.br, b[:c.br.Buffered()])
	for n < size {
		m := c.peek.ReadNow(b[n:])
		if m == 0 {
			break
		}
		n += m
		if c.nr.ack != nil {
			c.nr.unacked.Store(true) // as netReader.read notes bytes received
		}
	}
	return buf, n
}

// readBodyFrom is readBody's reader goroutine: it reads a's body into its
// buffer as it arrives, the first n bytes of which may be in got already.
func (c *pconn) readBodyFrom(a *attempt, resp *http.Response, f h1.Framing, closing bool, got *[]byte, n int) error {
	var (
		src io.Reader = c.br
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
		size      = 4 << 10
	)
	switch f.Kind {
	case h1.BodyLength:
		lr = &io.LimitedReader{R: c.br, N: f.N - int64(n)}
		src = lr
		open = f.N > maxBufferedBody
		size = int(f.N)
		if open {
			size = maxReadAhead
		}
	case h1.BodyChunked:
		cr = h1.NewChunkedReader(c.br, c.t.opts.MaxResponseHeaderBytes)
		cr.Raw = &c.nr
		src = cr
		if ct := resp.Header["Content-Type"]; a.toStream || len(ct) > 0 && isEventStream(ct[0]) {
			// Server-sent events, or an answer on a path whose answers
			// were streams of events: open, a stream from its head, which
			// says nothing of the host's other chunked answers.
			a.events = true
			break
		}
		size = max(size, c.chunkHint)
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
	// A tentative body may be a stream: the pool counts it as an answer
	// at its end, unless the host's chunked answers proved bounded
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
	c.filling.Store(b) // before the caller may hold it unread
	resp.Body = b
	held := a.deliver(result{resp: resp})
	if !held {
		b.Close() // abandoned: nobody reads it
	}
	s := &bodyStream{c: c, a: a, b: b, src: src, lr: lr, cr: cr, open: open, tentative: tentative, held: held}
	var start monoTime
	if a.toStream {
		start = monoNow()
	}
	err := s.pump()
	c.filling.Store(nil)
	s.stop()
	if a.toStream && time.Duration(monoNow()-start) < c.drainWait() {
		// Read in full sooner than a request behind it would have
		// waited: no stream (or one taken for a stream by mistake); the
		// pool forgets its path (responseDone).
		a.events = false
	}
	if tentative {
		a.chunkedLen = s.got.Load()
		c.chunkHint = int(min(a.chunkedLen, maxBufferedBody))
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
	c.finishResponse(a, closing, false)
	var trailer http.Header
	if cr != nil {
		trailer = cr.Trailer()
	}
	b.finish(nil, trailer)
	return nil
}

// bodyStream copies one response body from the connection into its body
// buffer.
//
// A chunked body may be a stream (server-sent events, a watch) or a
// bounded answer that its server did not measure first (net/http's server
// chunks any body over 2 KiB written without a Content-Length, and so do
// Node's res.write and nginx's gzip). Taken for a stream at its first read
// from the network, as an open body is, every such answer held its
// connection while it arrived: nothing was pipelined behind it, and at 16
// and 64 KiB from a Go server pipelined ran level with net/http, where the
// same bodies with a Content-Length ran 1.7-1.9 times faster. So a chunked
// body is tentative: it is read ahead whole, as a body of known length up
// to maxBufferedBody is, and requests may go behind it, until it shows
// itself a stream (becomeStream): it grows past maxBufferedBody, or
// nothing of it arrives for gap (attempt.streamGap, a few round trips:
// what a bulk transfer's segments never leave between them). Requests go
// behind it only once the host's chunked answers have proven bounded
// (hostPool.tentative); what is behind it when it turns out a stream
// waits for its end or HeadOfLineTimeout, as behind any stream.
//
// mu guards waiting, ended and stopCtx, which the stream verdict (its
// timer's goroutine) and the reader share; lock order: bodyStream.mu,
// then holGuard.mu, then hostPool.mu (docs/design.md).
type bodyStream struct {
	c *pconn
	a *attempt
	b *body
	// src is the body on the connection: lr of known length, cr chunked,
	// or c.br itself until the connection closes. Whoever holds the read
	// turn reads it: the reader, or once the body is a stream, its caller
	// (read).
	src io.Reader
	lr  *io.LimitedReader
	cr  *h1.ChunkedReader
	// open: the end is not in sight (chunked, until close, or longer than
	// maxBufferedBody). Its first read from the network makes it a stream.
	open bool
	// tentative: a chunked body read ahead until it shows itself a stream
	// (see above); its first read from the network starts its timers.
	tentative bool
	timed     bool         // startTimer ran
	early     *earlyClose  // a known remainder's wait, once it comes from the network
	got       atomic.Int64 // bytes of a tentative body read so far
	seen      int64        // got at the verdict timer's last run (its goroutine only)
	verdict   *time.Timer  // a tentative body's stream verdict (checkStream)
	// held: the caller has the response (its attempt was not abandoned
	// before the answer came): a cancellation is the caller leaving it.
	held bool

	mu      sync.Mutex
	waiting bool        // the body is a stream (startWaiting or becomeStream ran)
	ended   bool        // stop ran
	stopCtx func() bool // stops the context watch
}

// earlyClose bounds the wait for the rest of a body that must come from
// the network, once its caller has closed it: we read and discard the
// rest (drain, up to maxDrain) so that the connection stays, but only if
// it comes within wait, as Go 1.27's net/http does (golang/go#77370; it
// waits 50 ms for any body). Ours waits drainWait for a body read ahead
// as bounded, or grown too long to be, whose connection may carry
// requests behind it, and lateMin for a stream of events, whose server
// should learn soon that nobody reads it. A request whose caller had its
// response and cancelled it gives its connection up at once, as with
// net/http (its watch, bodyStream.watch, may not have run yet); so does
// one abandoned before its answer came, with nothing behind it (with
// requests behind, the rest is read for their sake): a server that stalls
// mid-body would otherwise hold the connection, and its reader, for ever.
type earlyClose struct {
	c    *pconn
	a    *attempt
	wait time.Duration              // set before it is installed
	held bool                       // the caller has the response (bodyStream.held)
	done atomic.Bool                // the body ended (bodyStream.stop)
	t    atomic.Pointer[time.Timer] // armed by closed
}

// closed runs in the caller's Close, before the body's end.
func (e *earlyClose) closed() {
	if ctx := e.a.r.ctx; ctx.Err() != nil && (e.held || !e.c.behind()) {
		e.c.resendBehind(false)
		e.c.fail(context.Cause(ctx))
		return
	}
	e.t.Store(time.AfterFunc(e.wait, func() {
		if !e.done.Load() {
			e.c.fail(errDrainTooLong)
		}
	}))
	if e.done.Load() { // ended meanwhile: stop may have missed the timer
		e.t.Load().Stop()
	}
}

// watch installs e as the body's early close; if the caller has closed it
// already, the read the reader is about to make may never return.
func (e *earlyClose) watch(b *body) {
	if !b.setOnClose(e.closed) {
		e.closed()
	}
}

// end runs when the body has ended, read in full or not.
func (e *earlyClose) end() {
	e.done.Store(true)
	if t := e.t.Load(); t != nil {
		t.Stop()
	}
}

// pump copies the body until its end. Once the body is a stream, it
// lends the rest to the caller (body.lend), who reads it from the
// connection itself: the reader's copy through the body's buffer, and its
// wake-up of the caller per piece, cost a large download a sixth more CPU
// than net/http's reads, and twice its time beside other requests.
func (s *bodyStream) pump() error {
	c, src, lr, cr := s.c, s.src, s.lr, s.cr
	switch {
	case s.open:
		c.nr.onRead = s.startWaiting
	case s.tentative:
		c.nr.onRead = s.startTentative
	default:
		c.nr.onRead = s.startTimer
	}
	defer func() { c.nr.onRead = nil }()
	for {
		if cr != nil {
			// The next chunk's size line first: a body that has just
			// filled its buffer may have ended, and needs no room to
			// say so.
			more, err := cr.More()
			if err != nil {
				return unexpected(err)
			}
			if !more {
				return nil
			}
		}
		var sp []byte
		open := true
		if s.isStream() {
			var err error
			var ended bool
			if ended, open, err = s.b.lend(s); ended {
				return err
			}
		} else {
			sp, open = s.b.space()
		}
		if !open {
			return net.ErrClosed // closed under the body (fail): its cause stands
		}
		if sp == nil {
			return c.drain(lr, cr) // closed early by the caller
		}
		n, err := src.Read(sp)
		s.b.commit(n)
		if s.tentative && s.got.Add(int64(n)) > maxBufferedBody && !s.isStream() {
			// Larger than any body read whole: read on as a stream, as
			// one of known length this large is.
			s.becomeStream(false)
		}
		if done, err := s.took(err); done {
			return err
		}
	}
}

// read is the stream's source for its caller (body.lend): it reads the
// body's next bytes from the connection into p.
func (s *bodyStream) read(p []byte) (int, bool, error) {
	n, err := s.src.Read(p)
	done, err := s.took(err)
	return n, done, err
}

// took judges a read of the body that returned err: whether the body
// ended, and if so with which outcome.
func (s *bodyStream) took(err error) (bool, error) {
	lr := s.lr
	switch {
	case err == io.EOF:
		if lr != nil && lr.N > 0 {
			return true, io.ErrUnexpectedEOF
		}
		return true, nil
	case err != nil:
		return true, unexpected(err)
	}
	return lr != nil && lr.N == 0, nil
}

// startWaiting runs before the first read from the network of an open
// body: the body is a stream now. It holds its connection (nothing new is
// placed behind it; what is behind it and safe moves after the
// head-of-line timeout), and its request's cancellation closes the
// connection, as with net/http, so that the server learns at once.
func (s *bodyStream) startWaiting() {
	s.watch()
	s.mu.Lock()
	s.streamLocked()
	s.c.holStartStream(s.a)
	closed := s.onCloseLocked()
	s.mu.Unlock()
	if closed != nil {
		// Closed while the reader was on its way to the network: the
		// read it is about to make may never return.
		closed()
	}
}

// streamLocked makes the body a stream: its connection takes nothing new
// until it ends, and its request's cancellation closes the connection
// (since the body's first read from the network if its caller has it:
// watch). s.mu is held.
func (s *bodyStream) streamLocked() {
	s.waiting = true
	c, a := s.c, s.a
	g := &c.hol
	g.mu.Lock() // holFire reads streamed under it
	a.streamed = true
	g.mu.Unlock()
	c.ev.streaming(c, a)
	if ctx := a.r.ctx; s.stopCtx == nil && ctx.Done() != nil {
		s.stopCtx = context.AfterFunc(ctx, func() { c.fail(context.Cause(ctx)) })
	}
}

// watch makes the cancellation of the body's request close the
// connection from the body's first read from the network until its end,
// if its caller has the response (held), as net/http closes it (its
// readLoop watches the request's context until the body's EOF): the
// server learns at once that nobody reads on, and nothing is read for
// nobody. A rest already in hand (the body read to its end) keeps the
// connection; the drain of a body closed early and nearly read
// (earlyClose) is for Close, not for a cancellation. It runs once, in the
// reader goroutine, at the body's first read from the network
// (startTimer, startWaiting; stop runs in the same goroutine, later), and
// registers the watch outside s.mu: AfterFunc calls the context's
// methods, which may be the user's.
func (s *bodyStream) watch() {
	ctx := s.a.r.ctx
	if !s.held || ctx.Done() == nil {
		return
	}
	stop := context.AfterFunc(ctx, s.cancelled)
	s.mu.Lock()
	s.stopCtx = stop
	s.mu.Unlock()
}

// cancelled closes the connection of a body whose request was cancelled
// before its end (watch). The safe requests pipelined behind it are sent
// again elsewhere (resendBehind), their answers not yet read; others fail
// with the connection, sent again only as retry.go allows.
func (s *bodyStream) cancelled() {
	s.mu.Lock()
	ended := s.ended
	s.mu.Unlock()
	if ended {
		return // the rest was in hand
	}
	s.c.resendBehind(false)
	s.c.fail(context.Cause(s.a.r.ctx))
}

// onCloseLocked installs what the caller's early Close of a stream does.
// If the caller has closed the body already, it returns what the close
// does now, to be run outside s.mu (fail reports to the pool); a tentative
// body's early close, set at its first read, has armed its own wait then.
// s.mu is held.
func (s *bodyStream) onCloseLocked() (closed func()) {
	c, a := s.c, s.a
	if s.lr == nil && s.cr == nil {
		// RFC 9112 §6.3: a body delimited by the connection's close
		// leaves nothing to reuse; closing it early closes the
		// connection at once.
		fail := func() { c.fail(errDrainTooLong) }
		if !s.b.setOnClose(fail) {
			return fail
		}
		return nil
	}
	wait := c.drainWait()
	if a.events {
		wait = lateMin // its end is not near; its server should learn soon
	}
	e := &earlyClose{c: c, a: a, wait: wait, held: s.held}
	switch {
	case s.b.setOnClose(e.closed):
		if s.early != nil {
			s.early.end() // replaced before its caller closed the body
		}
	case s.early != nil:
		return nil
	default:
		closed = e.closed
	}
	s.early = e
	return closed
}

// isStream reports whether the body became a stream.
func (s *bodyStream) isStream() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// startTentative runs before the first read from the network of a
// tentative body: the same timer as for a body read ahead whole (it may
// trickle), the same wait for the rest of it if its caller closes it
// early, and the stream verdict.
func (s *bodyStream) startTentative() {
	s.c.ev.tentative(s.c, s.a)
	s.startTimer()
	s.mu.Lock() // checkStream reads verdict under it
	s.verdict = time.AfterFunc(s.gap(), s.checkStream)
	s.mu.Unlock()
}

// gap is how long nothing of a tentative body may arrive before it is
// taken for a stream: margin round trips of its host (attempt.streamGap),
// at least quickWait. The segments of a bulk transfer come microseconds
// apart over a loopback or a LAN, and about a round trip apart at worst
// over a far link (TCP's slow start).
func (s *bodyStream) gap() time.Duration {
	return max(s.a.streamGap, quickWait)
}

// checkStream is the stream verdict's timer: a tentative body that
// arrived on since its last run is given as long again; one of which
// nothing arrived is a stream. What is behind it already waits, as behind
// any stream, for its end or HeadOfLineTimeout (holFire): moved at once,
// a request's original still reaches a server that runs a connection's
// requests one at a time, which serves it after the stream, so that the
// copy waits a stream's time more for a connection (TestTimerStreamBurst:
// 1.8 s where net/http's first chunk came after 0.9 s).
func (s *bodyStream) checkStream() {
	if got := s.got.Load(); got != s.seen {
		s.seen = got
		s.mu.Lock()
		if !s.ended && !s.waiting {
			s.verdict.Reset(s.gap())
		}
		s.mu.Unlock()
		return
	}
	s.becomeStream(true)
}

// becomeStream makes a tentative body a stream, unless it ended or is one
// already; quiet: nothing of it came for its gap (a stream of events),
// rather than it grew too long to be read whole.
func (s *bodyStream) becomeStream(quiet bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.waiting {
		return
	}
	s.a.events = quiet // under s.mu, before the pool hears of the stream
	s.streamLocked()
	s.b.readAhead(maxReadAhead) // a stream's buffer, from now on
	// A tentative body closed early already has its early close armed
	// (startTimer): nothing to run.
	s.onCloseLocked()
}

// startTimer runs before the first read from the network of a body that
// is read ahead whole: it comes from the network, so it may trickle.
// Requests may be placed behind it meanwhile; if it is still arriving
// after HeadOfLineTimeout, as with a stream, the connection takes nothing
// new and the safe requests behind it move (holFire).
func (s *bodyStream) startTimer() {
	s.timed = true
	s.c.holStartStream(s.a)
	s.watch()
	s.early = &earlyClose{c: s.c, a: s.a, wait: s.c.drainWait(), held: s.held}
	s.early.watch(s.b)
}

func (s *bodyStream) stop() {
	s.mu.Lock()
	s.ended = true
	if s.stopCtx != nil {
		s.stopCtx()
	}
	waiting := s.waiting
	s.mu.Unlock()
	if s.verdict != nil {
		s.verdict.Stop()
	}
	if s.early != nil {
		s.early.end()
	}
	if waiting || s.timed {
		s.c.holStop()
	}
}

// drain reads what remains of a body its caller closed early, if that is
// at most maxDrain, so that the connection can be reused (RFC 9112 §9.3);
// its early close bounds the time it may take (earlyClose). Otherwise the
// connection is closed.
func (c *pconn) drain(lr *io.LimitedReader, cr *h1.ChunkedReader) error {
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

// finishResponse records that a's response has been read from the
// connection in full, before its caller can see the end of it. If a's
// request body is still being written (the server answered early), the
// connection is kept only if the write ends within 50 ms, as with
// net/http's maxWriteWaitBeforeConnReuse.
func (c *pconn) finishResponse(a *attempt, closing, headers bool) {
	if !closing && a.writeDone != nil && !a.written.Load() {
		t := time.NewTimer(50 * time.Millisecond)
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
	c.popHead()
	// The hooks that follow (ConnIdle, ConnClosed of connections over
	// MaxIdleConns, PutIdleConn) run with the read turn held unless a
	// direct read passed it on: the connection is held meanwhile.
	hold := !closing && !c.directDone(a) && c.hooksAtDone(a)
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
func (c *pconn) hooksAtDone(a *attempt) bool {
	if t := a.r.trace; t != nil && t.PutIdleConn != nil {
		return true
	}
	o := c.t.opts.Observer
	return o != nil && (o.ConnIdle != nil || o.ConnClosed != nil && c.t.opts.MaxIdleConns > 0)
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

// popHead removes the answered head of fifo and starts the timers of the
// next one.
func (c *pconn) popHead() {
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
		c.prevEnd = 0
		if next.behind && next.sentAt != 0 { // read after mu: written under it
			c.prevEnd = now
		}
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

// abandoned is called once the caller of a, an attempt on c, gave it up
// before its answer's head came. As net/http closes a connection whose
// request was cancelled before its answer, c takes nothing new (what was
// placed on it and not yet written goes elsewhere), and it closes once a
// is its oldest unanswered request (cutAbandoned): a request written
// behind a would wait out a's whole answer, which nobody reads, and a
// request placed behind it later too. Held until that answer came, 1 request
// in 20 with a 10 ms deadline to a route answering in 30 ms cost the other
// callers more than half their requests against net/http's.
func (c *pconn) abandoned() {
	c.gaveUp.Store(true)
	c.stopWriting()
	c.dropIfUnwanted()
	c.cutAbandoned()
}

// cutAbandoned closes c if its oldest unanswered request was abandoned by
// its caller before its head came (abandoned), sending the requests
// written behind it again elsewhere: they were pipelined, so safe, and a
// client sends pipelined requests again when their connection closes
// before their answers (RFC 9112 §9.3.2). It reports whether it closed c.
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
// answers are read and discarded.
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

func (c *pconn) interimHook(a *attempt) func(int, http.Header) error {
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
	// headersRead is guarded by c.mu: pick the unanswered attempts here.
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
// must not be retried: the server answered, badly or too slowly.
func isFinalError(err error) bool {
	var fe *FramingError
	var he *h1.HeaderTooLargeError
	return errors.As(err, &fe) || errors.As(err, &he) || err == ErrResponseHeaderTimeout ||
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
