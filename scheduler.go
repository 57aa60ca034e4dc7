package pipelined

import (
	"context"
	"errors"
	"net/http/httptrace"
	"slices"
	"time"

	"github.com/pipelined/pipelined/internal/model"
)

// This file is the choice of a connection for a request and the queue of
// requests waiting for one (scheduler, with its waitQueue and leastWait);
// when a request that could be pipelined dials instead (the first
// response's wait, a burst's, a host far away, and what the host model
// says it gains) is in response_wait.go. Everything here runs under
// hostPool.mu and reads the connections' schedulable state (sched) only.
//
// The order of preference, for each request:
//  1. an idle connection (nothing in flight), the most recently used;
//  2. a new connection, if the host may have more: for a pipelineable
//     request, up to the pipelining threshold (PipelineConnsPerHost,
//     counting only connections that can carry pipelined requests); for
//     any other, and for any request to a host that gains nothing from
//     pipelining (model.Host.Gains), up to MaxConnsPerHost (0: no
//     limit, as net/http). The request waits for that dial, or for a
//     connection that becomes idle first, whichever comes first;
//  3. for a pipelineable request, the busy connection with the least
//     expected wait (leastWait.pipeline), once the host has responded
//     (model.FirstResponseWait);
//  4. otherwise it waits in FIFO order, cancellable by its context.

// errPoolGone is returned by acquire when the pool was removed from the
// Transport (it had no connection left): the request asks for the host's
// pool again.
var errPoolGone = errors.New("pipelined: pool removed")

// waiter is a request waiting for a connection. Whoever removes it from
// hostPool.waiters (under mu) gives it exactly one result (give).
type waiter struct {
	a   *attempt
	res waitResult // written by give before it signals the request's sig
}

// give hands w its result and wakes its caller.
func (w *waiter) give(wr waitResult) {
	w.res = wr
	w.a.r.sig <- struct{}{}
}

// waitQueue is a pool's FIFO of waiters, guarded by hostPool.mu. It
// counts the waiters whose request is never pipelined (solo), so that a
// dispatch that can place nobody further knows how many of the rest wait
// for an empty connection without scanning them.
type waitQueue struct {
	ws   []*waiter
	solo int // waiters in ws for which solo(w.a) holds
}

// solo reports whether a is never written behind another request, at any
// depth.
func solo(a *attempt) bool { return !a.r.pipelineable || a.alone }

func (q *waitQueue) len() int         { return len(q.ws) }
func (q *waitQueue) at(i int) *waiter { return q.ws[i] }

func (q *waitQueue) push(w *waiter) {
	q.ws = append(q.ws, w)
	if solo(w.a) {
		q.solo++
	}
}

// pushFront queues w ahead of every other waiter.
func (q *waitQueue) pushFront(w *waiter) {
	q.ws = slices.Insert(q.ws, 0, w)
	if solo(w.a) {
		q.solo++
	}
}

// removeAt removes the i-th waiter, keeping the order of the others.
func (q *waitQueue) removeAt(i int) *waiter {
	w := q.ws[i]
	q.ws = slices.Delete(q.ws, i, i+1)
	if solo(w.a) {
		q.solo--
	}
	return w
}

// remove removes w if it is still queued, reporting whether it was.
func (q *waitQueue) remove(w *waiter) bool {
	i := slices.Index(q.ws, w)
	if i < 0 {
		return false
	}
	q.removeAt(i)
	return true
}

// learned gives the waiters of class c queued while it was unseen its
// first verdict v, as if they had come after its response (place): a burst
// to a fresh host waits for one response of each route, then is pipelined.
// Left unseen, each was written alone when its turn came, however its
// route had responded meanwhile: 16 GETs at once over one connection took
// 16 response times instead of 4.
func (q *waitQueue) learned(c model.Class, v model.Verdict) {
	for _, w := range q.ws {
		a := w.a
		if a.follow != model.Unseen || a.r.class != c {
			continue
		}
		a.follow = v
		if v.Alone() && !a.alone {
			a.alone, a.toStream = true, v == model.Streams
			q.solo++
		}
	}
}

// takeAll empties the queue and returns its waiters in order.
func (q *waitQueue) takeAll() []*waiter {
	ws := q.ws
	q.ws, q.solo = nil, 0
	return ws
}

type waitResult struct {
	c    *pconn
	info httptrace.GotConnInfo
	err  error
}

// scheduler is a pool's queue of waiting requests and its placement of
// requests on connections. Its fields are guarded by hostPool.mu; its
// methods named ...Locked are called with hostPool.mu held, the others
// take it.
type scheduler struct {
	pool *hostPool

	waiters waitQueue // FIFO of requests waiting for a connection
	tick    uint64    // logical clock for head ages
	policy  leastWait
}

// acquire assigns a connection to a, waiting for one if needed. It fires
// a's GetConn and GotConn hooks, outside every lock.
func (sc *scheduler) acquire(a *attempt) (*pconn, error) {
	p := sc.pool
	if t := a.r.trace; t != nil && t.GetConn != nil && !a.askedConn {
		a.askedConn = true
		t.GetConn(p.key.dialAddr()) // the proxy's address if proxied, as net/http
	}
	c, info, err := p.place(a)
	if err != nil {
		return nil, err
	}
	if t := a.r.trace; t != nil && t.GotConn != nil {
		t.GotConn(info)
	}
	return c, nil
}

func (sc *scheduler) place(a *attempt) (*pconn, httptrace.GotConnInfo, error) {
	p := sc.pool
	ctx := a.r.ctx
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, httptrace.GotConnInfo{}, ErrTransportClosed
	}
	if p.gone {
		p.mu.Unlock()
		return nil, httptrace.GotConnInfo{}, errPoolGone
	}
	if h := p.speaksH2(); h != nil {
		p.mu.Unlock()
		return nil, httptrace.GotConnInfo{}, &useH2{h}
	}
	if a.r.pipelineable {
		// What its class's last response showed (internal/model): whether
		// requests may be written behind it, and whether it is written
		// behind nothing, with its response a stream from its head.
		a.follow = p.model.Follow(a.r.class)
		if a.follow.Alone() {
			a.alone = true
			a.toStream = a.follow == model.Streams
		}
	}
	if p.waiters.len() == 0 {
		c := p.policy.idle(p.conns, !a.r.replayable)
		if c == nil && p.pipelineable(a) && p.mayStackLocked(p.gainsLocked()) {
			c = p.stackOnLocked(p.depthLocked())
		}
		if c != nil {
			info := p.assignLocked(c, a)
			p.mu.Unlock()
			return c, info, nil
		}
	}
	w := &a.wait
	w.a = a
	sig := a.r.sig
	if a.r.copyOf != nil {
		// A copy of a late head: its original has waited longer than
		// anyone in the queue.
		p.waiters.pushFront(w)
	} else {
		p.waiters.push(w)
	}
	p.dispatchLocked()
	p.mu.Unlock()

	select {
	case <-sig:
		return w.res.c, w.res.info, w.res.err
	case <-ctx.Done():
		p.mu.Lock()
		if p.waiters.remove(w) {
			p.mu.Unlock()
			return nil, httptrace.GotConnInfo{}, context.Cause(ctx)
		}
		p.mu.Unlock()
		if <-sig; w.res.c != nil {
			if a.heldAtAssign {
				a.heldAtAssign = false
				p.hold(w.res.c, false)
			}
			p.release(w.res.c)
		} else if u, ok := w.res.err.(*useH2); ok {
			u.h.release() // not taken up
		}
		return nil, httptrace.GotConnInfo{}, context.Cause(ctx)
	}
}

// pipelineable reports whether a may be written behind other requests.
func (sc *scheduler) pipelineable(a *attempt) bool {
	p := sc.pool
	return pipelineableAt(a, p.depthLocked())
}

// pipelineableAt is pipelineable at the host's current depth.
func pipelineableAt(a *attempt, depth int) bool {
	return !solo(a) && depth > 1
}

// canDialLocked reports whether a request may open one more connection:
// any request up to MaxConnsPerHost; a pipelineable one only while fewer
// than PipelineConnsPerHost connections can carry pipelined requests
// (beyond that, it is pipelined). A connection held by an open stream, a
// request nothing may follow, a slow head or a hook of the user's
// (sched.held), nor a dial that runs one (firstHop.hooked), does not
// count: a GET beside open event streams gets a connection of its own, as
// with net/http, and so does one a hook sends.
func (sc *scheduler) canDialLocked(pipelineable bool) bool {
	p := sc.pool
	if p.closed {
		return false
	}
	if h := p.h2.Load(); h != nil && !h.demoted.Load() && !h.gone.Load() {
		return false // the host speaks HTTP/2: the waiters move there (h2Dialed)
	}
	hooked := 0 // dials running a hook of the user's: nobody waits for them
	if p.dialing > 0 {
		hooked = p.hookedDialsLocked()
	}
	if p.dialing > 0 && !p.learned && !p.farLocked() && p.t.offersH2(p.key) && hooked == 0 { // dial one, learn the protocol, then decide
		return false
	}
	n := len(p.conns) + p.dialing
	if p.t.maxConns > 0 && n >= p.t.maxConns {
		return false
	}
	if !pipelineable || n < p.t.pipeConns {
		return true
	}
	usable := p.dialing - p.replacing - hooked // a replacement takes its connection's place
	for _, c := range p.conns {
		if s := &c.s; !s.retired && !s.exclusive && !s.streaming && !s.slow && s.held == 0 {
			usable++
		}
	}
	return usable < p.t.pipeConns
}

// mayStackLocked reports whether a pipelineable request (held by the
// pipelining threshold or not) may be written behind others: it may not
// dial, and, until the host's first response (model.FirstResponseWait), it
// could not dial even beyond the threshold.
func (sc *scheduler) mayStackLocked(held bool) bool {
	p := sc.pool
	if p.canDialLocked(held) {
		return false
	}
	return !p.awaitsAnswerLocked() || !p.canDialLocked(false)
}

// stackOnLocked returns the busy connection a pipelineable request is
// written on, behind others (policy.pipeline), or nil. While a connection
// being dialed should be up soon (dialSoonLocked), a request that would be
// third or deeper on an open one waits for it instead: that connection
// will carry the request it was dialed for and then this one second. 8
// streams started at once on 4 connections being dialed were otherwise
// stacked 4 deep on the first one up (the last first chunk after three
// streams' time, against net/http's one).
func (sc *scheduler) stackOnLocked(depth int) *pconn {
	p := sc.pool
	if !p.model.Proven() {
		return p.probeLocked(depth)
	}
	c := p.policy.pipeline(p.conns, depth)
	if c != nil && c.s.inflight >= 2 && p.dialing > 0 && p.dialSoonLocked() {
		return nil
	}
	return c
}

// probeLocked returns the connection a pipelineable request is written on
// behind others while the host is not proven to handle pipelining
// (model.Host.Proven), or nil. Until then one request at a time is pipelined,
// behind a head: the probe. The connection that carries it takes no more
// until it is empty (probeDrain). A probe written together with its head
// and responded to before anything came after it proves the host. A server
// that drops what is pipelined stalls the probe, not every connection:
// gunicorn's gthread worker leaves the requests that came with the one it
// responds to until more bytes come or its keep-alive timeout closes the
// connection, 2 s later; at the start of a pool, 32 callers over 4
// connections, each pipelined 4 deep, all waited for those closes (p99
// 2.0 s, against net/http's 0.6). Any request responded to behind another
// proves nothing: gthread responds to one that came in a read of its own. The
// probe's close is a failure before proof, which sets off the depth
// fallback (notePipelineFailure); the host is probed again after it.
func (sc *scheduler) probeLocked(depth int) *pconn {
	p := sc.pool
	if p.model.Fixed() {
		// Learns nothing (TransportOptions.FixedPolicy): pipelined at
		// its full depth from the start, as if proven.
		return p.policy.pipeline(p.conns, depth)
	}
	for _, c := range p.conns {
		if c.s.inflight >= 2 || c.s.probeDrain {
			return nil // the probe is out
		}
	}
	return p.policy.pipeline(p.conns, 2)
}

// dispatchLocked hands connections to waiters in FIFO order: an idle
// connection to anyone; otherwise the first p.dialing waiters wait for those
// dials (or for a connection that becomes idle first); a further waiter
// starts a dial if it may, or is pipelined if it may.
func (sc *scheduler) dispatchLocked() {
	p := sc.pool
	if p.waiters.len() == 0 {
		return
	}
	if sc.toH2Locked() {
		return
	}
	p.farDialLocked()
	needIdle := sc.placeWaitersLocked()
	// A request that needs an empty connection would starve behind a
	// steady stream of pipelined ones: stop feeding one connection per such
	// request so that it drains.
	sc.reserveLocked(needIdle)
}

// toH2Locked sends every waiter to the host's HTTP/2 side if nothing here
// will serve them, and reports whether it did.
func (sc *scheduler) toH2Locked() bool {
	p := sc.pool
	if h := p.h2.Load(); h != nil && len(p.conns) == 0 && p.dialing == 0 && !h.demoted.Load() && !h.gone.Load() {
		// The host speaks HTTP/2, and no HTTP/1.1 connection of its is
		// open or coming: nothing here will serve the waiters, and none
		// dials for them (canDialLocked). They go where the host's
		// requests go, as h2Dialed sends those that waited for its first
		// connection. Without this, a dial that found the h2Host served
		// already (h2Dialed) left its waiters here for ever.
		for _, w := range p.waiters.takeAll() {
			h.users.Add(1) // p is not gone: neither is h
			w.give(waitResult{err: &useH2{h}})
		}
		return true
	}
	return false
}

// dispatchScan is what one pass of dispatchLocked over the queue has found
// so far, so that a waiter further on does not look again for what one
// before it did not find. It lives on the dispatching goroutine's stack,
// under hostPool.mu.
type dispatchScan struct {
	covered  int  // waiters count on the dials of their own
	depth    int  // the host's depth (depthLocked)
	gains    bool // the host gains from pipelining (gainsLocked)
	needIdle int  // waiters that can only take an idle connection
	keptSolo int  // solo waiters left in the queue so far
	// noIdle: no connection is idle (assignments never make one);
	// noIdleFragile: none is idle for a request that cannot be retried
	// (noIdle implies it; the converse fails for a connection near its
	// server's Keep-Alive end, which only retryable requests take).
	noIdle, noIdleFragile, settled bool
	noPipe                         bool // no connection can take one more pipelined request
}

// placeWaitersLocked is dispatchLocked's pass over the queue, in FIFO
// order. It returns how many waiters left in the queue can only take an
// idle connection.
func (sc *scheduler) placeWaitersLocked() (needIdle int) {
	p := sc.pool
	var d dispatchScan
	d.covered = p.dialing - p.replacing // waiters count on the dials of their own
	d.depth = p.depthLocked()
	d.gains = p.gainsLocked()
	for i := 0; i < p.waiters.len(); {
		w := p.waiters.at(i)
		if p.closed {
			p.waiters.removeAt(i)
			w.give(waitResult{err: ErrTransportClosed})
			continue
		}
		pipe := pipelineableAt(w.a, d.depth)
		held := pipe && d.gains // held back by the pipelining threshold
		if c := sc.connForLocked(&d, w.a, pipe, held); c != nil {
			info := p.assignLocked(c, w.a)
			p.waiters.removeAt(i)
			w.give(waitResult{c: c, info: info})
			continue
		}
		if solo(w.a) {
			d.keptSolo++
		}
		if sc.keepWaitingLocked(&d, w.a, pipe, held, i) {
			break
		}
		i++
	}
	return d.needIdle
}

// connForLocked returns the connection waiting request a takes now, an
// idle one or a busy one it is pipelined on, or nil. pipe: a may be
// pipelined; held: held back by the pipelining threshold.
func (sc *scheduler) connForLocked(d *dispatchScan, a *attempt, pipe, held bool) *pconn {
	p := sc.pool
	fragile := !a.r.replayable
	var c *pconn
	if !d.noIdle && !(fragile && d.noIdleFragile) {
		c = p.policy.idle(p.conns, fragile)
		if c == nil {
			d.noIdleFragile = true
			d.noIdle = !fragile
		}
	}
	if c == nil && pipe && !d.noPipe && d.covered == 0 && p.mayStackLocked(held) {
		c = p.stackOnLocked(d.depth)
		d.noPipe = c == nil
	}
	return c
}

// keepWaitingLocked deals with a, the i-th waiter, which found no
// connection (connForLocked): it counts on a dial in progress, starts one,
// or waits. It reports whether nobody further in the queue can be placed
// either, which ends the pass.
func (sc *scheduler) keepWaitingLocked(d *dispatchScan, a *attempt, pipe, held bool, i int) (end bool) {
	p := sc.pool
	switch {
	case d.covered > 0:
		d.covered--
	case p.canDialLocked(held):
		p.startDialLocked(a.r.ctx)
	default:
		if !pipe {
			d.needIdle++
		}
		if !d.noIdle && d.noIdleFragile && !d.settled {
			// Only fragile requests have found no idle connection so far.
			d.settled = true
			d.noIdle = p.policy.idle(p.conns, false) == nil
		}
		if d.noIdle && !p.canDialLocked(false) {
			d.noPipe = d.noPipe || d.depth <= 1 || !p.policy.anyPipeline(p.conns, d.depth)
			if d.noPipe {
				// No idle connection, no dial, no pipelining: nobody
				// further in the queue can be placed either, and those
				// that are never pipelined need an idle connection.
				rest := p.waiters.len() - i - 1
				if d.depth > 1 {
					rest = p.waiters.solo - d.keptSolo
				}
				d.needIdle += rest
				return true
			}
		}
	}
	return false
}

// reserveLocked keeps needIdle connections, reserved already or draining
// (leastWait.drainCandidate), free of new requests for the waiters that
// need an empty connection.
func (sc *scheduler) reserveLocked(needIdle int) {
	p := sc.pool
	reserved := 0
	for _, c := range p.conns {
		if c.s.reserved {
			reserved++
		}
	}
	for reserved < needIdle {
		c := p.policy.drainCandidate(p.conns)
		if c == nil {
			break
		}
		c.s.reserved = true
		reserved++
	}
}

// leastWait chooses the connection with the least expected wait. It reads
// only the connections' sched (under hostPool.mu), costs O(connections)
// and allocates nothing.
//
//   - idle: an idle connection beats any queue (join-idle-queue); among
//     idle ones, the most recently used, which is the least likely to have
//     been closed by the server meanwhile.
//   - pipeline: among connections that may take one more request, the one
//     with the fewest requests in flight; ties go to the one whose oldest
//     request became the head most recently (a head that has been
//     outstanding long is likely to stay so), then round robin.
type leastWait struct {
	next uint // rotates the scan's starting point so that ties are shared
}

// idle returns the most recently used idle connection, or nil. A
// connection past its server's announced Keep-Alive end is never
// returned; for a request that cannot be retried (fragile), neither is one
// near it.
func (leastWait) idle(conns []*pconn, fragile bool) *pconn {
	var best *pconn
	for _, c := range conns {
		if !c.s.idle() || c.s.held > 0 {
			continue
		}
		if c.s.kaIdle > 0 && (c.s.pastKeepAliveEnd() || fragile && c.s.nearKeepAliveEnd()) {
			continue
		}
		if best == nil || c.s.idleSince.After(best.s.idleSince) {
			best = c
		}
	}
	return best
}

// pipeline returns the busy connection that may take one more request
// (sched.canPipeline) with the least expected wait, or nil.
func (lw *leastWait) pipeline(conns []*pconn, depth int) *pconn {
	n := uint(len(conns))
	if n == 0 {
		return nil
	}
	start := lw.next % n
	lw.next++
	var best *pconn
	for i := uint(0); i < n; i++ {
		j := start + i
		if j >= n {
			j -= n
		}
		c := conns[j]
		if !c.s.canPipeline(depth) {
			continue
		}
		if best == nil || c.s.inflight < best.s.inflight ||
			(c.s.inflight == best.s.inflight && c.s.headTick > best.s.headTick) {
			best = c
		}
	}
	return best
}

// anyPipeline reports whether some connection may take one more request
// (sched.canPipeline). Unlike pipeline, it changes nothing.
func (leastWait) anyPipeline(conns []*pconn, depth int) bool {
	for _, c := range conns {
		if c.s.canPipeline(depth) {
			return true
		}
	}
	return false
}

// drainCandidate returns the busy connection that will be empty soonest,
// to be kept free of new requests for one that needs an empty connection.
func (leastWait) drainCandidate(conns []*pconn) *pconn {
	var best *pconn
	for _, c := range conns {
		if c.s.retired || c.s.reserved || c.s.streaming {
			continue
		}
		if best == nil || c.s.inflight < best.s.inflight {
			best = c
		}
	}
	return best
}

// assignLocked reserves a place for a on c and returns what the GotConn
// hook reports, for the caller to fire once mu is released.
func (sc *scheduler) assignLocked(c *pconn, a *attempt) httptrace.GotConnInfo {
	p := sc.pool
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
		// route not known to respond bounded and quickly (internal/model) until
		// its response is read.
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

// depthLocked returns the host's effective pipeline depth: 1 through an
// HTTP forward proxy, else what its model allows (model.Host.Depth). p.mu
// must be held.
func (sc *scheduler) depthLocked() int {
	p := sc.pool
	if p.key.forwardProxy() {
		// Requests to an HTTP proxy in absolute form are not pipelined,
		// as no browser pipelined through proxies: the proxy relays
		// what follows a request to the origin whatever it makes of it,
		// and one that ends each connection after one response without
		// saying so (tinyproxy 1.11) hands a pipelined request to an
		// origin that has closed, whose reset cuts the response before
		// it short. The caller has its head by then, so the request
		// cannot be sent again; net/http, which never pipelines, gets
		// it whole. Tunnels (CONNECT, SOCKS5) carry the origin's
		// requests untouched and are pipelined as a direct connection.
		return 1
	}
	return p.model.Depth(p.t.depth)
}
