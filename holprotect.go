package pipelined

import (
	"errors"
	"io"
	"sync"
	"syscall"
	"time"
)

// This file protects pipelined requests from head-of-line blocking and
// pipelining-hostile hosts:
//
//   - Slow head. When the oldest request on a connection has waited longer
//     than TransportOptions.HeadOfLineTimeout for its response headers, or
//     its body has been arriving that long (a stream, or a body read ahead
//     whole that trickles), the safe requests written behind it
//     (mayDuplicate) are re-sent on other connections (their late responses
//     are read and discarded), and the connection takes no new requests
//     until the head's headers arrive (or its body ends). Requests that
//     are not safe are never pipelined, so none is ever behind a head: none
//     can run after a later request.
//   - Depth fallback. A host whose connections fail with pipelined requests
//     outstanding (malformed responses, closes or resets mid-pipeline)
//     falls back to depth 1 for a while (model.Host.NoteFailure).
//
// The head's timer is the connection's (holGuard, under holGuard.mu); what
// a late head moves and copies, and the failures counted, are the pool's
// (holProtect, under hostPool.mu). Lock order: holGuard.mu, then
// hostPool.mu.

const (
	// DefaultHeadOfLineTimeout is TransportOptions.HeadOfLineTimeout when
	// it is zero. One second is far above a typical response time (so
	// ordinary responses never trigger it and re-sends stay rare: each
	// one costs the server a duplicate request), yet short enough that a
	// request stuck behind a long-polling or slow handler moves on at
	// about the time a user would notice the stall.
	DefaultHeadOfLineTimeout = time.Second
)

// drainWait is how long the rest of a body its caller closed early may
// take to arrive before the connection is closed instead (pconn.drain):
// the head-of-line timeout, or its default when that is disabled.
func (c *pconn) drainWait() time.Duration {
	if d := c.t.holTimeout(); d > 0 {
		return d
	}
	return DefaultHeadOfLineTimeout
}

// holTimeout returns the effective head-of-line threshold; <= 0 disables.
func (t *Transport) holTimeout() time.Duration {
	d := t.opts.HeadOfLineTimeout
	if d == 0 {
		return DefaultHeadOfLineTimeout
	}
	return d
}

// holGuard is the head-of-line timer of one connection. Its mutex guards
// its fields; the timer's callback runs in its own goroutine. One timer
// per connection is reused for every head, so that the guard costs no
// allocation per request.
type holGuard struct {
	mu     sync.Mutex
	head   *attempt // the head whose timer is running
	stream bool     // the timer runs for head's open-ended body, not its headers
	timer  *time.Timer
	slow   bool // setSlow(c, true) was called for the current head
}

// holStart starts a's head-of-line timer: a is fully written and has just
// become the oldest request still awaiting its response on c.
func (c *pconn) holStart(a *attempt) {
	c.holArm(a, false)
}

// holStartStream starts the timer for a's body, whose headers have
// arrived: an open-ended one (a stream), or one read ahead whole that is
// still arriving.
func (c *pconn) holStartStream(a *attempt) {
	c.holArm(a, true)
}

func (c *pconn) holArm(a *attempt, stream bool) {
	d := c.t.holTimeout()
	if d <= 0 || c.t.depth <= 1 {
		return
	}
	if a.holAfter > 0 && !stream {
		d = a.holAfter
	}
	c.mu.Lock()
	head := len(c.fifo) > 0 && c.fifo[0] == a && a.headersRead == stream
	// A head with nothing behind it holds nobody up: its timer starts
	// when a first request is written behind it (pconn.send), so that a
	// connection carrying one request at a time arms no timer. But for a
	// probe: its own wait may be a server leaving it unread.
	alone := !stream && len(c.fifo) < 2
	c.mu.Unlock()
	probe := alone && a.probing()
	if !head || alone && !probe {
		return // responded to already, or nothing waits behind it
	}
	if probe {
		d = a.probeAfter
	}
	g := &c.hol
	g.mu.Lock()
	defer g.mu.Unlock()
	g.head = a
	g.stream = stream
	if g.timer == nil {
		g.timer = time.AfterFunc(d, c.holFireCurrent)
	} else {
		g.timer.Reset(d)
	}
}

// holStop stops the head-of-line timer (a's headers arrived, or c is
// closing) and lets c take new requests again if the head was slow.
func (c *pconn) holStop() (wasSlow bool) {
	g := &c.hol
	g.mu.Lock()
	if g.timer != nil {
		g.timer.Stop()
	}
	g.head = nil
	wasSlow = g.slow
	if g.slow {
		g.slow = false
		c.ev.setSlow(c, false, false)
	}
	g.mu.Unlock()
	return wasSlow
}

// holFireCurrent is the timer's callback: it checks the head it was
// started for, if that is still the current one.
func (c *pconn) holFireCurrent() {
	g := &c.hol
	g.mu.Lock()
	a := g.head
	g.mu.Unlock()
	if a != nil {
		c.holFire(a)
	}
}

// holFire runs when head a has waited too long for its headers.
func (c *pconn) holFire(a *attempt) {
	g := &c.hol
	g.mu.Lock()
	current, stream := g.head == a, g.stream
	g.mu.Unlock()
	if !current {
		return
	}
	c.mu.Lock()
	stuck := !c.dead && len(c.fifo) > 0 && c.fifo[0] == a && a.headersRead == stream
	behind := len(c.fifo) - 1
	c.mu.Unlock()
	if !stuck {
		return
	}
	// Nothing new goes behind a slow head (a streaming one takes nothing
	// new already); what is already behind it, and safe, is re-sent
	// elsewhere. Its slots stay in fifo: late responses are read and
	// discarded, so the connection stays usable.
	g.mu.Lock()
	if g.head != a {
		g.mu.Unlock()
		return
	}
	// Under g.mu (lock order: holGuard.mu, then hostPool.mu), so that a
	// concurrent holStop cannot clear it first. A stream takes nothing new
	// already (a.streamed, set before its timer was armed); a body read
	// ahead whole did not, until now.
	if !stream || !a.streamed {
		g.slow = true
		c.ev.setSlow(c, true, a.holAfter > 0 && !stream)
	}
	g.mu.Unlock()
	if behind > 0 {
		c.resendBehind(false)
	}
	if !stream && mayDuplicate(a.r) && a.r.copyOf == nil {
		c.ev.lateHead(c, a)
	}
	if behind > 0 {
		c.dropIfUnwanted() // a head nobody waits for, and nothing left behind it
	}
}

// holProtect is a pool's part that acts on a late head: it copies it
// (lateHead, hedge), gives up on a probe the server left unread
// (probeLost), and counts the failures of pipelined connections towards
// the depth fallback. It has no state of its own: what it reads and
// writes (the host model, each attempt's hedged mark) is guarded by
// hostPool.mu, which its methods take.
type holProtect struct {
	pool *hostPool
}

// lateHead sends a copy of a, the late head of c, on another connection
// (TransportOptions.HedgeHeadOfLine) if the host's budget of copies allows
// it; or, whatever the option, if a is a stalled probe, the first since
// the host was last proven or fell back (model.Host.ProbeWait). An attempt is
// copied once at most.
func (hp *holProtect) lateHead(c *pconn, a *attempt) {
	p := hp.pool
	probe := a.probing()
	if !p.t.opts.HedgeHeadOfLine && !probe || a.state.Load() != attemptWaiting {
		return
	}
	p.mu.Lock()
	ok := !p.closed && !a.hedged
	switch {
	case !ok:
	case probe:
		// Only a probe whose route responded bounded and quickly before:
		// one of a route not seen yet, or slow for its own reasons (a
		// large paged list), would reach the server twice for nothing.
		ok = p.model.CopyProbe(a.follow) // spends a duplicate, not held back by the budget: the probe tells a server that drops pipelined requests
	default:
		ok = p.model.MayDuplicate()
		if ok {
			p.model.Spend(1)
		}
	}
	if ok {
		a.hedged = true
		p.t.wg.Add(1) // before Close waits: Close marks p closed first
	}
	p.mu.Unlock()
	if !ok {
		return
	}
	r := a.r
	cp := &request{req: r.req, ctx: r.ctx, method: r.method,
		replayable: r.replayable, safe: r.safe, pipelineable: r.pipelineable,
		addGzip: r.addGzip, proxyAuth: r.proxyAuth, absoluteURI: r.absoluteURI,
		copyOf: a}
	if r.obs != nil {
		cp.obs = &requestObs{start: r.obs.start, host: r.obs.host, addr: r.obs.addr}
		r.obs.copy = cp // read by the caller only once the copy's response is delivered
	}
	// A probe's timer fired probeAfter after it became the head.
	go p.hedge(c, cp, time.Now().Add(-a.probeAfter))
}

// hedge sends cp, a copy of a late head's request, a safe one, and hands
// its response to the head's caller if it comes first. The head's response is
// then not wanted, and c, where it was due, is closed unless another
// request waits on it: that cancels the head on the server (the one way in
// HTTP/1.1) and frees c's place in the pool; for a probe that became the
// head at headAt, only if its response does not come either meanwhile
// (probeLost). A copy that loses runs to its end; its response is
// discarded.
func (hp *holProtect) hedge(c *pconn, cp *request, headAt time.Time) {
	p := hp.pool
	defer p.t.wg.Done()
	orig := cp.copyOf
	resp, err := p.roundTripAttempts(cp)
	if err != nil {
		if u, ok := err.(*useH2); ok {
			u.h.release() // the host turned to HTTP/2: no copy there
		}
		return // orig goes on
	}
	if !orig.deliver(result{resp: resp, copied: true}) {
		// orig's response came first, or its caller gave up.
		resp.Body.Close()
		return
	}
	if orig.probing() {
		// The probe's own response may still come: a server that ran it
		// slowly (a pause, a lock) responds to it as late again at most.
		// Until then its connection takes nothing new (it is slow).
		waited := time.Since(headAt)
		time.AfterFunc(waited, func() { p.probeLost(c, orig) })
		return
	}
	// A caller reading its own response (a direct read, conn_direct.go) is
	// woken by the close and takes the copy's.
	c.dropIfUnwanted()
}

// probeLost is called once the copy of probe a, the head of c, was
// responded to first and a waited as long again: if a still has no response,
// the server left it unread. The host falls back, as for a failure before
// proof (notePipelineFailure), and c, which nothing else waits on, is
// closed.
func (hp *holProtect) probeLost(c *pconn, a *attempt) {
	p := hp.pool
	c.mu.Lock()
	unread := !c.dead && len(c.fifo) > 0 && c.fifo[0] == a && !a.headersRead
	c.mu.Unlock()
	if !unread {
		return // responded to late, or the connection ended
	}
	p.mu.Lock()
	p.model.NoteStalledProbe()
	ch := p.takeModelChangesLocked()
	p.mu.Unlock()
	p.observeModel(ch)
	c.dropIfUnwanted()
}

// notePipelineFailure is called when c failed with err while requests
// awaiting their responses were outstanding on it, the oldest written while
// nothing was in flight (headIdle) or pipelined, and late (headSlow) or not.
// Failures with more than one request outstanding, or whose oldest was
// pipelined (those behind it may have been re-sent from behind it already),
// count towards the depth fallback (model.Host.NoteFailure); a late head
// counts only if it was pipelined.
func (hp *holProtect) notePipelineFailure(err error, unanswered int, headIdle, headSlow bool) {
	p := hp.pool
	if unanswered < 2 && headIdle || p.t.depth <= 1 || !isPipelineFailure(err) {
		return
	}
	p.mu.Lock()
	p.model.NoteFailure(!headIdle && headSlow)
	ch := p.takeModelChangesLocked()
	p.mu.Unlock()
	p.observeModel(ch)
}

// isPipelineFailure reports whether a connection that failed with err
// suggests that the host (or a middlebox) mishandles pipelining: a
// malformed response, or a close or reset the server did not announce.
// Closes the client caused, announced closes and timeouts do not count.
func isPipelineFailure(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrTransportClosed), err == errConnClosing, err == errIdleClosed,
		err == errIdleTimeout, err == errClosedIdle, err == errDrainTooLong, err == errUpgraded,
		err == ErrResponseHeaderTimeout, isTimeout(err):
		return false
	}
	var fe *FramingError
	if errors.As(err, &fe) || errors.Is(err, ErrUnsolicitedResponse) {
		return true
	}
	// An unannounced close or reset mid-pipeline.
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isConnReset(err)
}

func isConnReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
