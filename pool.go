package pipelined

import (
	"context"
	"net/http/httptrace"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pipelined/pipelined/internal/model"
)

// hostPool is the set of connections to one host (scheme, address and
// proxy) and the queue of requests waiting for one.
//
// mu guards every field below it and the schedulable state (sched) of each
// of its connections: the pool alone decides whether a connection can take
// a request. Requests flow from the pool to a connection (acquire, then
// pconn.send in the caller's goroutine); events flow from a connection to
// the pool (connEvents, below). The pool never calls into a connection
// while holding mu, except to stop timers, and no user callback runs under
// mu.
type hostPool struct {
	t    *Transport
	key  poolKey
	name string // key.String(), as Stats and the Observer name the pool

	mu      sync.Mutex
	conns   []*pconn // established and not removed (busy, idle or retired)
	dialing int      // dials in progress
	// replacing counts the dials in progress (in dialing) that replace a
	// connection past its lifetime (lifetime.go): no waiter counts on
	// them, as the connection they replace still takes requests.
	replacing int
	// ending counts connections removed (removed) whose end is not
	// reported yet (ended): what it teaches (a depth fallback, a budget)
	// must not go with a pool forgotten meanwhile.
	ending  int
	waiters waitQueue // FIFO of requests waiting for a connection
	closed  bool
	gone    bool                     // removed from Transport.pools: requests must get a new pool
	dials   map[*dialHandle]struct{} // dials in progress
	tick    uint64                   // logical clock for head ages
	policy  leastWait
	// model is what the host's answers taught (internal/model): per route
	// class, whether requests may be written behind one; and the
	// host-wide estimates every other decision reads.
	model model.Host
	// modelChanged are the model's verdict changes not yet reported to
	// the Observer (observeModel, after mu is released).
	modelChanged []modelChange
	// decision is the host's decision as last reported to the Observer,
	// and hostChanged its changes not yet reported (noteDecisionLocked).
	decision    model.Decision
	hostChanged []HostEvent
	// retired counts the connections retired and closed, by reason, for
	// Stats (counted when they end, with ConnClosed's reason).
	retired Retirements

	h2      atomic.Pointer[h2Host] // set once a dial negotiated HTTP/2; requests go there
	learned bool                   // a dial succeeded, so the host's protocol is known

	// First answer (see model.FirstResponseWait): until the host has answered a
	// request on this pool, a pipelineable request is not written behind
	// another while it could dial; once graceEnd has passed without an
	// answer, it dials as to a serial host.
	answered   bool
	graceEnd   time.Time   // zero until the first connection is established
	graceTimer *time.Timer // dispatches the waiters at graceEnd, or at a burst's wait's end
	// A burst (see burstWait): a request was given a connection while
	// the answered host had nothing in flight, at burstStart, and no
	// answer has come since. burstTimed: graceTimer is set for its end.
	burst      bool
	burstTimed bool
	burstStart monoTime
}

// sched is a connection's schedulable state. It belongs to the
// connection's pool and is guarded by hostPool.mu; the connection changes
// it only through connEvents.
type sched struct {
	inflight  int  // attempts assigned and not yet answered
	retired   bool // takes no new request (the one place: retireLocked)
	removed   bool // no longer in the pool's conns
	exclusive bool // an attempt that nothing may follow is unanswered
	streaming bool // the head's body is open-ended and being read
	slow      bool // the head has waited past HeadOfLineTimeout (holprotect.go)
	reserved  bool // kept free for a request that needs an idle connection
	// held counts the hooks of the user's that run while a request holds
	// the connection: its place, assigned and not yet written
	// (assignLocked), the write token or the read turn (pconn.hooked).
	// It takes no new request meanwhile and does not count among those
	// that carry pipelined requests (canDialLocked), so that a request a
	// hook sends goes elsewhere instead of waiting for the hook.
	held int
	// probeDrain: the host not proven (model.Host.Proven), an answer
	// came with requests pipelined behind it: the connection takes no more
	// until it is empty, so that the last of them can prove the host.
	probeDrain   bool
	served       int  // responses completed
	assigned     int  // requests assigned, ever
	atBudget     bool // retired because assigned reached its host's budget (connBudget)
	serverClosed bool // the server said it closes the connection
	headTick     uint64
	idleSince    time.Time // when inflight last became 0
	opened       time.Time
	idleTimer    *time.Timer
	lifeTimer    *time.Timer // fires at the end of its lifetime (lifetime.go)
	// due: older than its lifetime, it still takes requests while its
	// replacement is dialed (lifetime.go), and does not count among its
	// address's connections meanwhile.
	due          bool
	retireReason CloseReason // why it was retired (Observer)
	active       bool        // ConnActive was reported last (not ConnIdle)
	// From the server's Keep-Alive header (keepalive.go): how long the
	// connection may stay idle (0: no hint), and the number of
	// assignments after which it takes no more (0: no hint).
	kaIdle     time.Duration
	kaLimit    int
	kaFirstMax int // the first max= seen, plus one (0: none yet)
	// lastNoBody: the last response read in full had no body by rule
	// (HEAD, 204, 304; attempt.noBody).
	lastNoBody bool
}

// idle reports whether the connection is established, takes requests and
// has none in flight. It is the one definition of "idle".
func (s *sched) idle() bool { return s.inflight == 0 && !s.retired }

// canPipeline reports whether one more request may be written behind those
// in flight, at the given depth.
func (s *sched) canPipeline(depth int) bool {
	return !s.retired && !s.exclusive && !s.streaming && !s.slow && !s.reserved && s.held == 0 && s.inflight < depth
}

// dialHandle is a dial in progress, guarded by hostPool.mu.
type dialHandle struct {
	cancel    context.CancelFunc
	abandoned bool     // cancelled by CloseIdleConnections
	start     monoTime // when the dial started (dialSoonLocked)
	hop       firstHop // the dial's first hop (farDialLocked)
	// pool and addr: the dial's pool, whose connections and dials the
	// choice of an address counts, and the address dialed once chosen
	// (addrs.go, addrSet.next).
	pool *hostPool
	addr netip.Addr
	// replaces is the connection this dial replaces, past its lifetime:
	// it retires when the dial ends (lifetime.go).
	replaces *pconn
}

// firstHop is the time of a dial's way to its target, before TLS with it:
// the TCP connect (DialContext), or, through a proxy, the connect to the
// proxy and the proxy's to the target (SOCKS, CONNECT; through a forward
// proxy, to the proxy only). Each takes a round trip to the target at
// least. It is stamped by the dialing goroutine (Transport.dial, through
// the context key dialKey) and read by the pool. A dial through
// DialTLSContext has none.
type firstHop struct {
	start atomic.Int64 // monoTime when DialContext was first called; 0 before
	done  atomic.Bool  // the way is made, or failed
	// hooked counts the hooks of the user's that run in the dial
	// (dialer.go, handshake): nobody waits for it meanwhile
	// (canDialLocked), so that a request a hook sends dials its own.
	hooked atomic.Int32
}

// dialKey is the context key of a pool dial's *dialHandle.
type dialKey struct{}

// hopOf returns the *firstHop of ctx, nil for a dial not the pool's.
func hopOf(ctx context.Context) *firstHop {
	if d := dialOf(ctx); d != nil {
		return &d.hop
	}
	return nil
}

// begin and end stamp the first hop's start and end; begin keeps the
// first start (a proxy's connect, before the target's).
func (h *firstHop) begin() {
	if h != nil {
		h.start.CompareAndSwap(0, int64(monoNow()))
	}
}

func (h *firstHop) end() {
	if h != nil {
		h.done.Store(true)
	}
}

// hook runs f, a hook of the user's, counted in hooked; h may be nil (a
// dial not the pool's).
func (h *firstHop) hook(f func()) {
	if h == nil {
		f()
		return
	}
	h.hooked.Add(1)
	defer h.hooked.Add(-1)
	f()
}

// pending returns how long the first hop has been under way at now, or 0
// (not begun, or returned).
func (h *firstHop) pending(now monoTime) time.Duration {
	s := h.start.Load()
	if s == 0 || h.done.Load() {
		return 0
	}
	return time.Duration(now - monoTime(s))
}

func newHostPool(t *Transport, key poolKey) *hostPool {
	p := &hostPool{t: t, key: key, name: key.String()}
	if t != nil {
		p.model = model.New(t.opts.FixedPolicy, maxBufferedBody)
	}
	return p
}

// retireLocked makes c take no new request, for the given reason (the
// first one given is kept; 0 keeps the one already there). It is the only
// place that retires a connection.
func (p *hostPool) retireLocked(c *pconn, why CloseReason) {
	p.unlistIdleLocked(c)
	c.s.retired = true
	c.s.reserved = false
	if c.s.retireReason == 0 {
		c.s.retireReason = why
	}
}

// retireNowLocked retires c for why, as the Keep-Alive hints, an address
// gone from the host's answer and the connection's lifetime do, and
// reports whether c is to be closed now: it has nothing in flight (the
// caller closes it once p.mu is released, with errConnClosing). A busy one
// closes after its last answer (becameIdleLocked). Its end is counted in
// Stats by reason (ended, Retirements).
func (p *hostPool) retireNowLocked(c *pconn, why CloseReason) (idle bool) {
	if c.s.retired || c.s.removed {
		return false
	}
	p.retireLocked(c, why)
	return c.s.inflight == 0
}

// startDialLocked dials a new connection in its own goroutine, and
// returns the dial. The dial carries the values of the request that
// started it but not its cancellation: if that request gives up, the
// connection joins the pool.
func (p *hostPool) startDialLocked(reqCtx context.Context) *dialHandle {
	p.dialing++
	t := p.t
	ctx, cancel := context.WithCancel(context.WithoutCancel(reqCtx))
	d := &dialHandle{cancel: cancel, start: monoNow(), pool: p}
	ctx = context.WithValue(ctx, dialKey{}, d)
	if p.dials == nil {
		p.dials = make(map[*dialHandle]struct{})
	}
	p.dials[d] = struct{}{}
	if !p.learned && len(p.dials) == 1 && p.graceEnd.IsZero() {
		p.armGraceLocked(p.t.farHop) // farDialLocked's first look
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		stop := context.AfterFunc(t.ctx, cancel)
		start := time.Now()
		conn, state, err := t.dial(ctx, p.key)
		took := time.Since(start)
		stop()
		cancel()
		if err == nil && t.isH2(p.key, state) {
			p.h2Dialed(d, conn, state)
			return
		}
		var c *pconn
		if err == nil {
			c = newPconn(t, p, conn, state)
			c.addr = d.addr
		}
		p.mu.Lock()
		p.dialing--
		delete(p.dials, d)
		if old := p.replacedLocked(d); old != nil {
			defer old.fail(errConnClosing) // once p.mu is released
		}
		if err != nil && d.abandoned {
			// Cancelled by CloseIdleConnections while nobody waited: fail
			// no one (a request that came since dials afresh).
			p.dispatchLocked()
			p.mu.Unlock()
			return
		}
		if err != nil {
			// Fail the request that has waited longest (it was waiting on
			// this dial); the next one dials afresh. A replacement's dial
			// was nobody's: its failure is nobody's either.
			if p.waiters.len() > 0 && d.replaces == nil {
				p.waiters.removeAt(0).give(waitResult{err: err})
			}
			p.dispatchLocked()
			empty := len(p.conns) == 0 && p.dialing == 0 && p.waiters.len() == 0
			p.mu.Unlock()
			if empty {
				t.removeIfEmpty(p)
			}
			return
		}
		p.joinUnlock(c, took)
	}()
	return d
}

// joinUnlock adds c, just dialed in took, to p and starts its reader (or
// closes it if p is closed), and unlocks p.mu, which the caller holds;
// then it reports ConnOpened.
func (p *hostPool) joinUnlock(c *pconn, took time.Duration) {
	if p.closed {
		p.mu.Unlock()
		c.conn.Close()
		return
	}
	p.conns = append(p.conns, c)
	p.learned = true
	p.model.NoteRoundTrip(took)
	p.startGraceLocked(took)
	p.startIdleTimerLocked(c)
	p.startLifeTimerLocked(c)
	p.t.wg.Add(1)
	go c.readLoop()
	ev := p.connEvent(c, c.s.opened, false)
	p.dispatchLocked()
	p.mu.Unlock()
	if o := p.t.opts.Observer; o != nil && o.ConnOpened != nil {
		o.ConnOpened(ev)
	}
}

// assignLocked reserves a place for a on c and returns what the GotConn
// hook reports, for the caller to fire once mu is released.
func (p *hostPool) assignLocked(c *pconn, a *attempt) httptrace.GotConnInfo {
	s := &c.s
	a.c = c
	wasIdle := s.inflight == 0
	s.inflight++
	c.placed.Store(int32(s.inflight))
	s.assigned++
	a.inflightAtAssign = int32(s.inflight)
	a.activated = !s.active
	s.active = true
	if assignHooked(a, p.t.opts.Observer) {
		s.held++
		a.heldAtAssign = true
	}
	if wasIdle {
		p.unlistIdleLocked(c)
		p.tick++
		s.headTick = p.tick
		s.reserved = false
		if p.answered && !p.burst && !p.model.Fixed() && p.quietLocked(c) {
			p.burst, p.burstTimed, p.burstStart = true, false, monoNow()
		}
	}
	if b := p.model.ConnBudget(); b > 0 && s.assigned >= b {
		p.retireLocked(c, CloseBudget)
		s.atBudget = true
	}
	if s.kaLimit > 0 && s.assigned >= s.kaLimit {
		p.retireLocked(c, CloseKeepAliveEnd) // the server accepts no more on it (Keep-Alive max)
	}
	if !a.r.pipelineable || a.alone || !a.follow.OK() {
		// Nothing is written behind it: a request that is not safe
		// until its final status (gotHeadersLocked), one alone or of a
		// route not known to answer bounded and quickly (internal/model) until
		// its answer is read.
		s.exclusive = true
	}
	if a.r.closeAfter || a.r.upgrade {
		// Nothing may follow: the connection ends, or leaves the pool.
		p.retireLocked(c, closeReasonOf(a.r))
	}
	m := &p.model
	m.Earn()
	hol := p.t.holTimeout()
	a.holAfter = m.EarlyAfter(hol)
	a.streamGap = m.StreamGap()
	// Whether a is the probe is known when it joins the fifo
	// (attempt.probing): requests go out in the order they take the
	// write token, not that of their places.
	a.probeAfter = m.ProbeWait(hol)
	if a.r.trace == nil || a.r.trace.GotConn == nil {
		return httptrace.GotConnInfo{}
	}
	// Pipelined behind requests in flight: the connection is reused but
	// was not idle (docs/parity.md).
	info := httptrace.GotConnInfo{Conn: c.conn, Reused: s.served > 0 || !wasIdle, WasIdle: wasIdle && s.served > 0}
	if info.WasIdle {
		info.IdleTime = time.Since(s.idleSince)
	}
	return info
}

// assignHooked reports whether a hook of the user's is told of a's
// assignment: GotConn, ConnActive (if it made its connection active) or
// RequestAssigned.
func assignHooked(a *attempt, o *Observer) bool {
	if t := a.r.trace; t != nil && t.GotConn != nil {
		return true
	}
	return o != nil && (o.RequestAssigned != nil || o.ConnActive != nil && a.activated)
}

// release gives back a place reserved on c for an attempt that was never
// written.
func (p *hostPool) release(c *pconn) {
	p.mu.Lock()
	c.s.inflight--
	c.placed.Store(int32(c.s.inflight))
	done, idle, victims := p.becameIdleLocked(c)
	p.dispatchLocked()
	p.mu.Unlock()
	p.observeIdle(c, idle)
	closeIdleVictims(victims)
	if done {
		c.fail(errConnClosing)
	}
}

// becameIdleLocked updates c when it may have nothing in flight any more,
// and reports whether it must be closed (it takes no new request and has
// nothing left to answer), whether it went from active to idle, and which
// idle connections to close for MaxIdleConns once p.mu is released.
func (p *hostPool) becameIdleLocked(c *pconn) (done, wentIdle bool, victims []*idleEntry) {
	s := &c.s
	if s.inflight != 0 {
		return false, false, nil
	}
	s.exclusive = false
	s.idleSince = time.Now()
	if s.retired {
		return !s.removed, false, nil
	}
	wentIdle = s.active
	s.active = false
	return false, wentIdle, p.pushIdleLocked(c)
}

// quickClose is how soon after its first answer a connection must close
// for the close to say that its server closes every connection after one
// response (quietClosed): a close a resting connection sees when it is
// watched again (restWatch), give or take the noise of a busy machine
// (model.LateMin). It is far below servers' idle timeouts (seconds).
const quickClose = restWatch + model.LateMin

// quietClosed reports whether a connection that ended with err, with
// unanswered requests written on it after answered responses, was closed
// by its server after a number of responses without notice: the number
// that quietClose counts.
//
// Only a close that came right after an answer counts (within quickClose
// of the connection going idle, idle for): a connection whose server
// closed it as it went idle (errIdleClosed: seen before a request was
// written on it, or by its reader), or failed the request written on it
// once idle (headIdle). Such a server (hypercorn 0.13 and tinyproxy after
// one answer) closes saying nothing; a request written as the close is on
// its way fails, and net/http retries it without limit. A close later on
// is an idle timeout. A close on a pipelined request is what a server that
// mishandles pipelining does, after however many answers went before
// (gunicorn's gthread worker; uWSGI's --http11-socket answers the first of
// two requests that came in one read, and closes; on connections that
// begin alike, two in a row may match): the depth fallback deals with it
// (notePipelineFailure), and a server that does close after n answers is
// learned at depth 1 then. Nor does an end within an answer (headCut: some
// of it came): such a server answers n and closes before it begins the
// next, and a network that resets connections after a few bytes (a faulty
// link or middlebox) cuts answers at random, often twice in a row at the
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

// The connEvents of a hostPool.

func (p *hostPool) gotHeaders(c *pconn, a *attempt, closing, bounded bool) {
	p.mu.Lock()
	// A chunked answer of a class whose last answer was bounded and quick
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
		p.noteAnswerLocked(a, model.Stream)
	case bounded:
		p.noteAnswerLocked(a, model.Bounded)
	case a.tentative && !a.follow.OK() && !c.s.streaming:
		// A chunked answer of a class not known to be bounded: held
		// from its head as a stream is, until it ends (hostPool.tentative).
		c.s.streaming = true
		a.heldTentative = true
	}
	p.dispatchLocked()
	ch := p.takeModelChangesLocked()
	p.mu.Unlock()
	p.observeModel(ch)
}

// answerLocked records an answer of the host: the end of the wait for its
// first answer, or for a burst's (model.FirstResponseWait, burstWaitLocked). A
// head whose body is chunked, of unknown length or long counts only once
// that body has ended: its connection is taken until then, and a stream
// does so for as long as it runs. Counted at its head, it let the
// requests of a burst of streams, waiting for an answer while they could
// dial, be pipelined behind the streams of the first connections (16
// streams at once: a second wave after the first, where net/http dials 16
// connections).
func (p *hostPool) answerLocked() {
	if !p.answered {
		p.answered = true
		if p.graceTimer != nil {
			p.graceTimer.Stop()
		}
	}
	p.burst = false
}

// gotHeadersLocked records what a's response head tells about c and its
// host; the caller has counted the answer (answerLocked) or will at the
// body's end.
func (p *hostPool) gotHeadersLocked(c *pconn, a *attempt, closing bool) {
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
				// cheroot closes after a HEAD whose answer has no length
				// (not counted: an answer without a body by rule, as for
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

func (p *hostPool) responseDone(c *pconn, a *attempt, closing, headers, hold bool) error {
	var put error
	p.mu.Lock()
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
		p.noteAnswerLocked(a, model.Bounded) // a head without a body (HEAD, 204, 304)
	}
	if a.tentative && !a.streamed {
		p.noteAnswerLocked(a, model.Bounded)
		// Read whole as one of known length is: its size counts for
		// the host's depth as a declared one does (bytesDepth).
		p.model.NoteBody(a.chunkedLen)
	}
	s.served++
	// A connection that answered more than a count at which others
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
		// waited: its class answers bounded again.
		p.noteAnswerLocked(a, model.Bounded)
	}
	if a.streamed || a.heldTentative || a.streamAtHead {
		// Only a's own stream ends here: after a direct read, the turn
		// passes on before responseDone, so the reader may already
		// stream the next answer (direct.go, directDone).
		s.streaming = false
	}
	p.tick++
	s.headTick = p.tick
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

func (p *hostPool) streaming(c *pconn, a *attempt) {
	p.mu.Lock()
	if a.tentative {
		p.noteAnswerLocked(a, model.Stream) // the others are noted at the head
	}
	c.s.streaming = true
	p.dispatchLocked() // waiters may dial now (canDialLocked)
	ch := p.takeModelChangesLocked()
	p.mu.Unlock()
	p.observeModel(ch)
}

// noteAnswerLocked tells the host's model what a's answer showed of its
// route class. p.mu is held.
func (p *hostPool) noteAnswerLocked(a *attempt, kind model.Kind) {
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
// answer was bounded and quick (internal/model). Otherwise it holds its
// connection as a stream does, so that nothing waits behind a stream that
// is just starting: a request placed behind one waits for the stream's
// end or HeadOfLineTimeout (bodyStream.checkStream says why it is not
// moved sooner).
func (p *hostPool) tentative(c *pconn, a *attempt) {
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
func (p *hostPool) setSlow(c *pconn, on, early bool) {
	p.mu.Lock()
	if on && early && !c.s.slow && c.s.inflight > 1 {
		p.model.Spend(c.s.inflight - 1) // those behind are re-sent
	}
	c.s.slow = on
	p.dispatchLocked()
	p.mu.Unlock()
}

func (p *hostPool) hold(c *pconn, on bool) {
	p.mu.Lock()
	if on {
		c.s.held++
	} else {
		c.s.held--
		p.dispatchLocked() // the connection may take requests again
	}
	p.mu.Unlock()
}

func (p *hostPool) retire(c *pconn) {
	p.mu.Lock()
	p.retireLocked(c, CloseError)
	p.mu.Unlock()
}

func (p *hostPool) removed(c *pconn) {
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
			// the server's): the next burst waits for its first answer
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

func (p *hostPool) ended(c *pconn, err error, unanswered, answered int, headIdle, headSlow, headCut bool) {
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
		// answer. A close right after an answer without a body (HEAD,
		// 204, 304) may be the server's response to that answer
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

// retireSpentLocked retires the connections that were given the host's
// budget of requests before it was learned, as assignLocked retires those
// given it since: otherwise an idle one takes a request its server will
// not answer (with a budget of 1, every connection that answered once). It
// returns the idle ones, to be closed once p.mu is released; the others
// close after their last answer.
func (p *hostPool) retireSpentLocked() (idle []*pconn) {
	for _, c := range p.conns {
		s := &c.s
		if s.retired || s.assigned < p.model.Budget().N {
			continue
		}
		p.retireLocked(c, CloseBudget)
		s.atBudget = true
		if s.inflight == 0 {
			idle = append(idle, c)
		}
	}
	return idle
}

// idleLimitLocked is how long c may stay idle: IdleConnTimeout, or less
// if its server announced a shorter Keep-Alive timeout (keepalive.go).
// Zero means no limit.
func (p *hostPool) idleLimitLocked(c *pconn) time.Duration {
	d := max(p.t.opts.IdleConnTimeout, 0)
	if k := c.s.kaIdle; k > 0 && (d == 0 || k < d) {
		d = k
	}
	return d
}

func (p *hostPool) startIdleTimerLocked(c *pconn) {
	d := p.idleLimitLocked(c)
	if d <= 0 {
		return
	}
	if c.s.idleTimer == nil {
		c.s.idleTimer = time.AfterFunc(d, func() { p.closeIfIdle(c) })
		return
	}
	c.s.idleTimer.Reset(d)
}

func (p *hostPool) closeIfIdle(c *pconn) {
	p.mu.Lock()
	d := p.idleLimitLocked(c)
	idle := c.s.idle() && time.Since(c.s.idleSince) >= d
	err := errIdleTimeout
	if idle {
		p.retireLocked(c, CloseIdleTimeout)
		if c.s.kaIdle == d {
			err = errKeepAliveTimeout
			c.s.retireReason = CloseKeepAliveEnd
		}
	}
	p.mu.Unlock()
	if idle {
		c.fail(err)
	}
}

func (p *hostPool) closeIdle() {
	p.mu.Lock()
	if p.waiters.len() == 0 {
		// As net/http: dials that no request waits for are cancelled.
		for d := range p.dials {
			d.abandoned = true
			d.cancel()
		}
	}
	var idle []*pconn
	for _, c := range p.conns {
		if c.s.idle() {
			p.retireLocked(c, CloseIdleConnections)
			idle = append(idle, c)
		}
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.fail(errClosedIdle)
	}
}

func (p *hostPool) close() {
	p.mu.Lock()
	p.closed = true
	if p.graceTimer != nil {
		p.graceTimer.Stop()
	}
	conns := slices.Clone(p.conns)
	p.dispatchLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.fail(ErrTransportClosed)
	}
}

func (p *hostPool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *hostPool) stats() HostStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := HostStats{Open: len(p.conns), Dialing: p.dialing, Queued: p.waiters.len(), PipelineDepth: p.depthLocked(), Retired: p.retired}
	s.Model = p.modelStatsLocked(s.PipelineDepth)
	for _, c := range p.conns {
		s.InFlight += c.s.inflight
		if c.s.idle() {
			s.Idle++
		}
	}
	s.Addrs = p.addrStatsLocked()
	return s
}

// learnedLocked reports whether p holds something learned about its host
// that a new pool would have to learn again at a cost to requests: a
// per-connection budget, recent pipeline failures or a depth fallback, or
// a verdict on pipelining. Such a pool is not forgotten when it empties.
func (p *hostPool) learnedLocked() bool {
	// That a host speaks HTTP/2 costs a new pool one dial at a time until
	// its first connection says so, as for any host not known yet: not
	// kept for it.
	return p.model.Learned()
}

// modelStatsLocked returns what Stats shows of the host's model, at the
// host's current depth. p.mu is held.
func (p *hostPool) modelStatsLocked(depth int) HostModel {
	m := p.model.Stats(p.t.holTimeout(), p.t.depth)
	s := HostModel{
		Learning:        m.Learning,
		Routes:          m.Routes,
		StreamRoutes:    m.StreamRoutes,
		LateRoutes:      m.LateRoutes,
		RoundTrip:       m.RoundTrip,
		ConnBudget:      m.ConnBudget,
		UsualHeadWait:   m.UsualHeadWait,
		LateAfter:       m.LateAfter,
		Serial:          m.Serial,
		Proven:          m.Proven,
		Pipelining:      true,
		ServiceTime:     m.ServiceTime,
		FallbackUntil:   m.FallbackUntil,
		DuplicateBudget: m.DuplicateBudget,
	}
	switch {
	case p.key.forwardProxy():
		s.Pipelining, s.Reason = false, "forward proxy"
	case depth <= 1 && m.Reason == model.Fallback:
		s.Pipelining, s.Reason = false, m.Reason.String()
	case depth <= 1:
		s.Pipelining = false // PipelineDepth 1, or DisableKeepAlives
	case m.Reason != model.Pipelined:
		s.Pipelining, s.Reason = false, m.Reason.String()
	case p.awaitsAnswerLocked() && !p.gainsLocked():
		s.Pipelining, s.Reason = false, "awaiting answer"
	}
	return s
}
