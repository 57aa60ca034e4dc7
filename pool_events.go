package pipelined

import (
	"slices"
	"time"

	"github.com/pipelined/pipelined/internal/model"
)

// This file holds the pool's side of connEvents (poolEvents): what a
// connection reports (a response's head and end, a stream, a slow head, a
// hold, its removal and end) and what each report changes in the pool.
// Everything it changes is guarded by hostPool.mu, which each report takes.

// poolEvents is the pool's part that takes a connection's reports
// (connEvents; lateHead is holProtect's). It has no state of its own: each
// report takes hostPool.mu and changes the connection's sched, the
// pool's connections and its model; methods named ...Locked are called
// with hostPool.mu held.
type poolEvents struct {
	pool *hostPool
}

// quickClose is how soon after its first response a connection must close
// for the close to say that its server closes every connection after one
// response (quietClosed): a close a resting connection sees when it is
// watched again (restWatch), give or take the noise of a busy machine
// (model.LateMin). It is far below servers' idle timeouts (seconds).
const quickClose = restWatch + model.LateMin

// quietClosed reports whether a connection that ended with err, with
// requests still awaiting their responses written on it after responses
// read, was closed by its server after a number of responses without notice:
// the number that quietClose counts.
//
// Only a close that came right after a response counts (within quickClose
// of the connection going idle, idle for): a connection whose server
// closed it as it went idle (errIdleClosed: seen before a request was
// written on it, or by its reader), or failed the request written on it
// once idle (headIdle). Such a server (hypercorn 0.13 and tinyproxy after
// one response) closes saying nothing; a request written as the close is on
// its way fails, and net/http retries it without limit. A close later on
// is an idle timeout. A close on a pipelined request is what a server that
// mishandles pipelining does, after however many responses went before
// (gunicorn's gthread worker; uWSGI's --http11-socket responds to the first of
// two requests that came in one read, and closes; on connections that
// begin alike, two in a row may match): the depth fallback deals with it
// (notePipelineFailure), and a server that does close after n responses is
// learned at depth 1 then. Nor does an end within a response (headCut: some
// of it came): such a server responds to n and closes before it begins the
// next, and a network that resets connections after a few bytes (a faulty
// link or middlebox) cuts responses at random, often twice in a row at the
// same count, which made a budget of 1 and a dial per request (363 dials
// where net/http made 21, TestFaultyNetworkDials).
func quietClosed(err error, unanswered, answered int, headIdle, headCut bool, idle time.Duration) bool {
	if answered == 0 || headCut || idle >= quickClose {
		return false
	}
	if err == errIdleClosed {
		return unanswered == 0
	}
	return unanswered > 0 && headIdle && isPipelineFailure(err)
}

func (pe *poolEvents) gotHeaders(c *pconn, a *attempt, closing, bounded bool) {
	p := pe.pool
	p.mu.Lock()
	// A chunked response of a class whose last response was bounded and quick
	// (internal/model) counts as one at its head, as a body of known length
	// read whole does.
	if bounded || a.tentative && a.follow.OK() {
		p.answerLocked()
	} else {
		a.answerAtEnd = true
	}
	p.gotHeadersLocked(c, a, closing)
	switch {
	case a.streamAtHead:
		// Held from its head, not from its first read from the network
		// (streaming): the waiters dispatched now must not go behind it.
		c.s.streaming = true
		p.noteResponseLocked(a, model.Stream)
	case bounded:
		p.noteResponseLocked(a, model.Bounded)
	case a.tentative && !a.follow.OK() && !c.s.streaming:
		// A chunked response of a class not known to be bounded: held
		// from its head as a stream is, until it ends (hostPool.tentative).
		c.s.streaming = true
		a.heldTentative = true
	}
	p.dispatchLocked()
	ch := p.takeModelChangesLocked()
	p.mu.Unlock()
	p.observeModel(ch)
}

// gotHeadersLocked records what a's response head tells about c and its
// host; the caller has counted the response (answerLocked) or will at the
// body's end.
func (pe *poolEvents) gotHeadersLocked(c *pconn, a *attempt, closing bool) {
	p := pe.pool
	s := &c.s
	if a.proves {
		p.model.NoteProven()
	}
	if !p.model.Proven() && s.inflight >= 2 {
		s.probeDrain = true
	}
	if (!a.r.pipelineable || a.alone) && a.writeDone == nil {
		// RFC 9112 §9.3.2: others may follow once the final status of a
		// non-idempotent request is known (and, here, its body written).
		s.exclusive = false
	}
	if closing {
		p.retireLocked(c, closingReason(a))
		if !a.r.closeAfter {
			s.serverClosed = true
			// a.place, not s.served+1: the response before a may not
			// be counted served yet when a's head is read (a direct
			// read hands the read turn on before responseDone).
			// keepAliveLocked counts from a.place too.
			if s.assigned > a.place && !a.noBody {
				// Two connections in a row closed at the same count: a
				// limit per connection (nginx's keepalive_requests). A
				// close one kind of request causes comes at any count:
				// cheroot closes after a HEAD whose response has no length
				// (not counted: a response without a body by rule, as for
				// unannounced closes), others after an error; learned at
				// once, that count closed every connection (2-4 times
				// net/http's dials).
				p.model.Budget().NoteAnnouncedClose(a.place)
			}
		}
	}
	if a.ka != nil {
		p.keepAliveLocked(c, *a.ka, a.place)
	}
	if a.bodyLen >= 0 {
		p.model.NoteBody(a.bodyLen)
	}
}

func (pe *poolEvents) responseDone(c *pconn, a *attempt, closing, headers, hold bool) error {
	p := pe.pool
	var put error
	p.mu.Lock()
	pe.responseReadLocked(c, a, closing, headers, hold)
	s := &c.s
	if closing {
		p.retireLocked(c, closingReason(a))
		put = errConnClosing
	}
	if s.inflight == 0 {
		if s.atBudget && !s.serverClosed {
			p.model.Budget().NoteUnclosed(s.assigned)
		}
		if put == nil && !p.keepIdleLocked(c) {
			p.retireLocked(c, CloseIdleLimit)
			put = errTooManyIdleHost
		}
		if !s.retired {
			p.startIdleTimerLocked(c)
		}
	}
	done, idle, victims := p.becameIdleLocked(c)
	if done && put == nil && s.kaLimit > 0 && s.assigned >= s.kaLimit {
		put = errKeepAliveMax
	}
	p.dispatchLocked()
	ch := p.takeModelChangesLocked()
	p.mu.Unlock()
	p.observeModel(ch)
	p.observeIdle(c, idle)
	closeIdleVictims(victims)
	if done {
		// Nothing more will be written on it: let it go.
		if put == nil {
			put = errConnClosing
		}
		c.fail(put)
	}
	return put
}

// responseReadLocked records what a's response, read in full on c, tells
// the pool, its model and c's schedulable state (responseDone's first
// part). hostPool.mu is held.
func (pe *poolEvents) responseReadLocked(c *pconn, a *attempt, closing, headers, hold bool) {
	p := pe.pool
	if hold {
		c.s.held++ // before the dispatch below
	}
	if headers || a.answerAtEnd {
		p.answerLocked()
	}
	if headers {
		p.gotHeadersLocked(c, a, closing)
	}
	if a.timed {
		p.model.NoteOrder(a.gap, a.writeGap, a.shadow)
	}
	if a.headWait > 0 { // pipelineable requests only (pconn.send)
		p.model.NoteHeadWait(a.headWait)
	}
	s := &c.s
	s.inflight--
	c.placed.Store(int32(s.inflight))
	if headers {
		p.noteResponseLocked(a, model.Bounded) // a head without a body (HEAD, 204, 304)
	}
	if a.tentative && !a.streamed {
		p.noteResponseLocked(a, model.Bounded)
		// Read whole as one of known length is: its size counts for
		// the host's depth as a declared one does (bytesDepth).
		p.model.NoteBody(a.chunkedLen)
	}
	s.served++
	// A connection that served more than a count at which others
	// closed without notice shows that count is not the server's budget
	// (quietClosed): a server that keeps one closes every connection at
	// it.
	p.model.NoteServed(s.served)
	s.lastNoBody = a.noBody
	if s.inflight == 0 {
		s.probeDrain = false
	}
	if a.toStream && !a.events {
		// Read in full sooner than a request behind it would have
		// waited: its class responds bounded again.
		p.noteResponseLocked(a, model.Bounded)
	}
	if a.streamed || a.heldTentative || a.streamAtHead {
		// Only a's own stream ends here: after a direct read, the turn
		// passes on before responseDone, so the reader may already
		// stream the next response (conn_direct.go, directDone).
		s.streaming = false
	}
	p.tick++
	s.headTick = p.tick
}

func (pe *poolEvents) streaming(c *pconn, a *attempt) {
	p := pe.pool
	p.mu.Lock()
	if a.tentative {
		p.noteResponseLocked(a, model.Stream) // the others are noted at the head
	}
	c.s.streaming = true
	p.dispatchLocked() // waiters may dial now (canDialLocked)
	ch := p.takeModelChangesLocked()
	p.mu.Unlock()
	p.observeModel(ch)
}

// noteResponseLocked tells the host's model what a's response showed of its
// route class. p.mu is held.
func (pe *poolEvents) noteResponseLocked(a *attempt, kind model.Kind) {
	p := pe.pool
	if !a.r.pipelineable {
		return // only requests that others could follow are classed
	}
	if p.model.NoteResponse(a.r.class, int64(monoNow()), kind, a.headWait, p.t.holTimeout()) {
		v := p.model.Follow(a.r.class)
		p.modelChanged = append(p.modelChanged, modelChange{a.r, v})
		p.waiters.learned(a.r.class, v)
	}
}

// tentative decides whether requests may be placed behind a's chunked
// body while it is read from the network: only if its class's last
// response was bounded and quick (internal/model). Otherwise it holds its
// connection as a stream does, so that nothing waits behind a stream that
// is just starting: a request placed behind one waits for the stream's
// end or HeadOfLineTimeout (bodyStream.checkStream says why it is not
// moved sooner).
func (pe *poolEvents) tentative(c *pconn, a *attempt) {
	p := pe.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	if a.follow.OK() || c.s.streaming {
		return
	}
	c.s.streaming = true
	a.heldTentative = true
	p.dispatchLocked() // waiters may dial now (canDialLocked)
}

// setSlow marks c's head slow or not. A head late before
// HeadOfLineTimeout (early: a serial host's, model.Host.EarlyAfter)
// spends the duplicate budget for each request behind it, which is
// re-sent: those re-sends are optional, the ones at HeadOfLineTimeout are
// not.
func (pe *poolEvents) setSlow(c *pconn, on, early bool) {
	p := pe.pool
	p.mu.Lock()
	if on && early && !c.s.slow && c.s.inflight > 1 {
		p.model.Spend(c.s.inflight - 1) // those behind are re-sent
	}
	c.s.slow = on
	p.dispatchLocked()
	p.mu.Unlock()
}

func (pe *poolEvents) hold(c *pconn, on bool) {
	p := pe.pool
	p.mu.Lock()
	if on {
		c.s.held++
	} else {
		c.s.held--
		p.dispatchLocked() // the connection may take requests again
	}
	p.mu.Unlock()
}

func (pe *poolEvents) retire(c *pconn) {
	p := pe.pool
	p.mu.Lock()
	p.retireLocked(c, CloseError)
	p.mu.Unlock()
}

func (pe *poolEvents) removed(c *pconn) {
	p := pe.pool
	p.mu.Lock()
	if !c.s.removed {
		c.s.removed = true
		p.ending++
		p.retireLocked(c, 0)
		if i := slices.Index(p.conns, c); i >= 0 {
			p.conns = slices.Delete(p.conns, i, i+1)
		}
		if c.s.idleTimer != nil {
			c.s.idleTimer.Stop()
		}
		if c.s.lifeTimer != nil {
			c.s.lifeTimer.Stop()
		}
		if len(p.conns) == 0 && p.dialing == 0 && p.answered {
			// The host's last connection is gone (its idle timeout, or
			// the server's): the next burst waits for its first response
			// as a new pool's does (model.FirstResponseWait). A pool kept for
			// what it learned (learnedLocked) would otherwise pipeline a
			// burst of slow requests at once, as to a host known fast:
			// Jetty's, after its 30 s idle close, 3-4 times net/http's
			// time.
			p.answered, p.graceEnd, p.burst = false, time.Time{}, false
		}
		p.dispatchLocked()
	}
	p.mu.Unlock()
}

func (pe *poolEvents) ended(c *pconn, err error, unanswered, answered int, headIdle, headSlow, headCut bool) {
	p := pe.pool
	if unanswered > 0 {
		p.notePipelineFailure(err, unanswered, headIdle, headSlow)
	}
	p.mu.Lock()
	p.ending--
	p.addrEndLocked(c, err, unanswered, answered)
	var spent []*pconn
	if quietClosed(err, unanswered, answered, headIdle, headCut, time.Since(c.s.idleSince)) && !c.s.lastNoBody {
		// A server (or a proxy) that closes each connection after a
		// fixed number of requests without saying so: seen twice, that
		// number becomes the host's budget for model.VerdictFor, so that
		// the next connections are not given requests they will not
		// respond to. A close right after a response without a body (HEAD,
		// 204, 304) may be the server's reaction to that response
		// (waitress closes after a HEAD whose application wrote no body,
		// which it takes for a short one): not counted.
		if p.model.NoteQuietClose(answered) {
			spent = p.retireSpentLocked()
		}
	}
	empty := len(p.conns) == 0 && p.dialing == 0 && p.waiters.len() == 0 && p.ending == 0
	why := closeReason(err, c.s.retireReason)
	p.retired.count(why)
	var ev ConnEvent
	o := p.t.opts.Observer
	if o != nil && o.ConnClosed != nil {
		ev = p.connEvent(c, time.Now(), c.s.active || unanswered > 0)
		ev.Reason = why
		if ev.Reason == CloseError {
			ev.Err = err
		}
	}
	p.mu.Unlock()
	for _, c := range spent {
		c.fail(errConnClosing)
	}
	if o != nil && o.ConnClosed != nil {
		o.ConnClosed(ev)
	}
	if empty {
		p.t.removeIfEmpty(p)
	}
}
