package pipelined

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"time"
)

// hostPool is the set of connections to one host (scheme, address and
// proxy), and the queue of requests waiting for one.
//
// mu guards every field below it and the scheduling fields of each pconn.
// Requests flow from the pool to a connection (acquire, then pconn.send in
// the caller's goroutine); events flow from a connection to the pool
// (gotHeaders, responseDone, setLarge, connDead). Nothing is called on a
// connection while mu is held, except closing timers.
type hostPool struct {
	t   *Transport
	key poolKey

	mu      sync.Mutex
	conns   []*pconn  // established, not dead (busy, idle or closing)
	dialing int       // dials in progress
	waiters []*waiter // FIFO of requests waiting for a connection
	closed  bool
	dials   map[*dialHandle]struct{} // dials in progress
	tick    uint64                   // logical clock for head ages
	policy  leastWait
	// budget is the number of requests the server answers on one
	// connection before closing it (nginx's keepalive_requests), learned
	// from a "Connection: close" with requests behind it; 0 if unknown.
	// A connection is given no more than budget requests, so that none
	// are written only to be resent.
	budget int
	// Depth fallback (holprotect.go): the times of recent pipeline
	// failures, and until when the host's effective depth is 1.
	pipeFailures  []time.Time
	fallbackUntil time.Time
}

// dialHandle is a dial in progress, guarded by hostPool.mu.
type dialHandle struct {
	cancel    context.CancelFunc
	abandoned bool // cancelled by CloseIdleConnections
}

// waiter is a request waiting for a connection. Whoever removes it from
// hostPool.waiters (under mu) sends it exactly one result on ch.
type waiter struct {
	a  *attempt
	ch chan waitResult // capacity 1
}

type waitResult struct {
	c   *pconn
	err error
}

func newHostPool(t *Transport, key poolKey) *hostPool {
	return &hostPool{t: t, key: key}
}

// roundTrip sends req on one of p's connections, retrying where the rules
// of RFC 9112 §9.3.1-§9.3.2 and RFC 9110 §9.2.2 allow.
func (p *hostPool) roundTrip(req *http.Request) (*http.Response, error) {
	r := newRequest(p.t, req, p.key)
	if p.key.forwardProxy() {
		// An http:// target through an HTTP(S) proxy: RFC 9112 §3.2.2
		// absolute form, with the proxy's credentials. Tunnels (CONNECT,
		// SOCKS5) send origin requests untouched.
		r.absoluteURI = true
		r.proxyAuth = p.key.proxyAuth
	}
	resp, err := p.roundTripAttempts(r)
	if err != nil && !r.bodyUsed {
		closeBody(req)
	}
	return resp, err
}

func (p *hostPool) roundTripAttempts(r *request) (*http.Response, error) {
	if t := r.trace; t != nil && t.GetConn != nil {
		t.GetConn(p.key.dialAddr()) // the proxy's address if proxied, as net/http
	}
	alone := false
	failures := 0 // attempts that failed after being written
	moves := 0    // attempts redirected before an answer: not written, or resent
	for {
		if err := r.ctx.Err(); err != nil {
			return nil, context.Cause(r.ctx)
		}
		a := newAttempt(r, alone)
		c, err := p.acquire(a)
		if err != nil {
			return nil, err
		}
		if err := c.send(a); err != nil {
			p.release(c)
			if err == errNotWritten && moves < maxMoves {
				moves++
				continue // RFC 9112 §9.3.1: nothing was sent; always safe
			}
			if err == errNotWritten {
				err = &ConnError{Err: errTooManyMoves}
			}
			return nil, err
		}
		res := p.await(a)
		if res.err == nil && !res.retry {
			decodeGzip(r, res.resp)
			return res.resp, nil
		}
		if p.isClosed() {
			return nil, ErrTransportClosed
		}
		if res.retry {
			// Resent from behind a response that closed the connection or
			// streams a large body: progress was made on that connection,
			// so this is not a failure.
			if moves < maxMoves {
				moves++
				continue
			}
			res.err = &ConnError{Err: errTooManyMoves, Written: true}
		}
		var ce *ConnError
		if !errors.As(res.err, &ce) {
			return nil, res.err
		}
		if ce.noRetry {
			return nil, ce.Err
		}
		// RFC 9112 §9.3.2: retry unanswered requests only if they are
		// idempotent and replayable; RFC 9110 §9.2.2 asks for a bound.
		failures++
		if r.replayable && failures < maxAttempts && ce.Err != errTooManyMoves {
			alone = true
			continue
		}
		ce.Retryable = false
		return nil, ce
	}
}

var errTooManyMoves = errors.New("pipelined: request moved between connections too many times")

// await waits for a's outcome or for its caller to give up.
func (p *hostPool) await(a *attempt) result {
	select {
	case res := <-a.res:
		return res
	case <-a.r.ctx.Done():
		if a.abandon() {
			// The connection reads and discards the answer when it comes,
			// for the sake of the requests behind it; with none, it is
			// closed, as net/http does (the answer may never come).
			a.c.dropIfUnwanted()
			return result{err: context.Cause(a.r.ctx)}
		}
		return <-a.res // delivered just now: use it, as net/http does
	}
}

func (p *hostPool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// acquire assigns a connection to a, following the policy in the package
// doc, and waits for one if needed.
func (p *hostPool) acquire(a *attempt) (*pconn, error) {
	ctx := a.r.ctx
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrTransportClosed
	}
	if len(p.waiters) == 0 {
		c := p.policy.idle(p.conns)
		if c == nil && !p.canDialLocked() && p.pipelineable(a) {
			c = p.policy.pipeline(p.conns, p.depthLocked())
		}
		if c != nil {
			p.assignLocked(c, a)
			p.mu.Unlock()
			return c, nil
		}
	}
	w := &waiter{a: a, ch: make(chan waitResult, 1)}
	p.waiters = append(p.waiters, w)
	p.dispatchLocked()
	p.mu.Unlock()

	select {
	case wr := <-w.ch:
		return wr.c, wr.err
	case <-ctx.Done():
		p.mu.Lock()
		i := slices.Index(p.waiters, w)
		if i >= 0 {
			p.waiters = slices.Delete(p.waiters, i, i+1)
			p.mu.Unlock()
			return nil, context.Cause(ctx)
		}
		p.mu.Unlock()
		if wr := <-w.ch; wr.c != nil {
			p.release(wr.c)
		}
		return nil, context.Cause(ctx)
	}
}

func (p *hostPool) pipelineable(a *attempt) bool {
	return a.r.pipelineable && !a.alone && p.depthLocked() > 1
}

func (p *hostPool) canDialLocked() bool {
	return !p.closed && (p.t.maxCon < 0 || len(p.conns)+p.dialing < p.t.maxCon)
}

// assignLocked reserves a place for a on c.
func (p *hostPool) assignLocked(c *pconn, a *attempt) {
	a.c = c
	wasIdle := c.inflight == 0
	c.inflight++
	c.assigned++
	if p.budget > 0 && c.assigned >= p.budget {
		c.closing = true
		c.atBudget = true
	}
	if wasIdle {
		p.tick++
		c.headTick = p.tick
		if c.reserved {
			c.reserved = false
		}
	}
	if !a.r.pipelineable || a.alone {
		c.exclusive = true
	}
	if a.r.closeAfter || a.r.upgrade {
		// Nothing may follow: the connection ends, or leaves the pool.
		c.closing = true
	}
	if t := a.r.trace; t != nil && t.GotConn != nil {
		// Pipelined behind requests in flight: the connection is reused
		// but was not idle (docs/parity.md).
		info := httptrace.GotConnInfo{Conn: c.conn, Reused: c.served > 0 || !wasIdle, WasIdle: wasIdle && c.served > 0}
		if info.WasIdle {
			info.IdleTime = time.Since(c.idleSince)
		}
		t.GotConn(info)
	}
}

// release gives back a place reserved on c for an attempt that was never
// written.
func (p *hostPool) release(c *pconn) {
	p.mu.Lock()
	c.inflight--
	done := false
	if c.inflight == 0 {
		c.exclusive = false
		c.idleSince = time.Now()
		// A connection that takes no more requests (marked for a
		// request that was never written, say) and has nothing in
		// flight is finished.
		done = c.closing
	}
	p.dispatchLocked()
	p.mu.Unlock()
	if done {
		c.fail(errConnClosing)
	}
}

// dispatchLocked hands connections to waiters in FIFO order: an idle
// connection to anyone; otherwise the first p.dialing waiters wait for those
// dials (or for a connection that becomes idle first); a further waiter
// starts a dial if the host may have more connections, or is pipelined.
func (p *hostPool) dispatchLocked() {
	if len(p.waiters) == 0 {
		return
	}
	covered := p.dialing
	needIdle := 0   // waiters that can only take an idle connection
	noIdle := false // no connection is idle: assignments never make one
	for i := 0; i < len(p.waiters); {
		w := p.waiters[i]
		if p.closed {
			w.ch <- waitResult{err: ErrTransportClosed}
			p.waiters = slices.Delete(p.waiters, i, i+1)
			continue
		}
		var c *pconn
		if !noIdle {
			c = p.policy.idle(p.conns)
			noIdle = c == nil
		}
		if c == nil && covered == 0 && !p.canDialLocked() && p.pipelineable(w.a) {
			c = p.policy.pipeline(p.conns, p.depthLocked())
			if c == nil {
				break // nothing behind it can be placed either
			}
		}
		if c != nil {
			p.assignLocked(c, w.a)
			w.ch <- waitResult{c: c}
			p.waiters = slices.Delete(p.waiters, i, i+1)
			continue
		}
		switch {
		case covered > 0:
			covered--
		case p.canDialLocked():
			p.startDialLocked(w.a.r.ctx)
		default:
			needIdle++
			if p.depthLocked() <= 1 {
				// No idle connection, no dial, no pipelining: nobody
				// further in the queue can be placed either.
				i = len(p.waiters)
				continue
			}
		}
		i++
	}
	// A request that needs an empty connection would starve behind a
	// steady stream of pipelined ones: stop feeding one connection per such
	// request so that it drains.
	reserved := 0
	for _, c := range p.conns {
		if c.reserved {
			reserved++
		}
	}
	for reserved < needIdle {
		c := p.policy.drainCandidate(p.conns)
		if c == nil {
			break
		}
		c.reserved = true
		reserved++
	}
}

// startDialLocked dials a new connection in its own goroutine. The dial
// carries the values of the request that started it but not its
// cancellation: if that request gives up, the connection joins the pool.
func (p *hostPool) startDialLocked(reqCtx context.Context) {
	p.dialing++
	t := p.t
	ctx, cancel := context.WithCancel(context.WithoutCancel(reqCtx))
	d := &dialHandle{cancel: cancel}
	if p.dials == nil {
		p.dials = make(map[*dialHandle]struct{})
	}
	p.dials[d] = struct{}{}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		stop := context.AfterFunc(t.ctx, cancel)
		conn, state, err := t.dial(ctx, p.key)
		stop()
		cancel()
		var c *pconn
		if err == nil {
			c = newPconn(p, conn, state)
		}
		p.mu.Lock()
		p.dialing--
		delete(p.dials, d)
		if err != nil && d.abandoned {
			// Cancelled by CloseIdleConnections while nobody waited: fail
			// no one (a request that came since dials afresh).
			p.dispatchLocked()
			p.mu.Unlock()
			return
		}
		if err != nil {
			// Fail the request that has waited longest (it was waiting on
			// this dial); the next one dials afresh.
			if len(p.waiters) > 0 {
				w := p.waiters[0]
				p.waiters = p.waiters[1:]
				w.ch <- waitResult{err: err}
			}
			p.dispatchLocked()
			p.mu.Unlock()
			return
		}
		if p.closed {
			p.mu.Unlock()
			conn.Close()
			return
		}
		p.conns = append(p.conns, c)
		p.startIdleTimerLocked(c)
		t.wg.Add(1)
		go c.readLoop()
		p.dispatchLocked()
		p.mu.Unlock()
	}()
}

// gotHeaders records that a's final response headers arrived on c.
func (p *hostPool) gotHeaders(c *pconn, a *attempt, closing bool) {
	p.mu.Lock()
	p.gotHeadersLocked(c, a, closing)
	p.dispatchLocked()
	p.mu.Unlock()
}

func (p *hostPool) gotHeadersLocked(c *pconn, a *attempt, closing bool) {
	if !a.r.pipelineable || a.alone {
		// RFC 9112 §9.3.2: others may follow once the final status of a
		// non-idempotent request is known.
		c.exclusive = false
	}
	if closing {
		c.closing = true
		if !a.r.closeAfter {
			c.serverClosed = true
			if c.assigned > c.served+1 {
				p.budget = c.served + 1
			}
		}
	}
}

// responseDone records that a response on c has been read in full, and,
// if headers is true, that its headers arrived (see gotHeaders): for a
// response read ahead in full, both are reported under one lock.
func (p *hostPool) responseDone(c *pconn, a *attempt, closing, headers bool) {
	p.mu.Lock()
	if headers {
		p.gotHeadersLocked(c, a, closing)
	}
	c.inflight--
	c.served++
	p.tick++
	c.headTick = p.tick
	var done bool
	if c.inflight == 0 {
		c.exclusive = false
		c.idleSince = time.Now()
		p.startIdleTimerLocked(c)
		if c.atBudget && !c.serverClosed {
			// The server would have answered more: forget the budget
			// and learn it again from the next close.
			p.budget = 0
		}
		done = c.closing
	}
	p.dispatchLocked()
	p.mu.Unlock()
	if done {
		// Nothing more will be written on it: let it go.
		c.fail(errConnClosing)
	}
}

// markClosing stops new requests from being assigned to c.
func (p *hostPool) markClosing(c *pconn) {
	p.mu.Lock()
	c.closing = true
	p.mu.Unlock()
}

func (p *hostPool) setLarge(c *pconn, on bool) {
	p.mu.Lock()
	c.large = on
	if !on {
		p.dispatchLocked()
	}
	p.mu.Unlock()
}

// connDead removes c from the pool.
func (p *hostPool) connDead(c *pconn) {
	p.mu.Lock()
	if i := slices.Index(p.conns, c); i >= 0 {
		p.conns = slices.Delete(p.conns, i, i+1)
	}
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	p.dispatchLocked()
	p.mu.Unlock()
}

func (p *hostPool) startIdleTimerLocked(c *pconn) {
	d := p.t.opts.IdleConnTimeout
	if d <= 0 {
		return
	}
	if c.idleTimer == nil {
		c.idleTimer = time.AfterFunc(d, func() { p.closeIfIdle(c) })
		return
	}
	c.idleTimer.Reset(d)
}

func (p *hostPool) closeIfIdle(c *pconn) {
	p.mu.Lock()
	idle := c.inflight == 0 && !c.closing
	if idle {
		c.closing = true
	}
	p.mu.Unlock()
	if idle {
		c.fail(errIdleTimeout)
	}
}

func (p *hostPool) closeIdle() {
	p.mu.Lock()
	if len(p.waiters) == 0 {
		// As net/http: dials that no request waits for are cancelled.
		for d := range p.dials {
			d.abandoned = true
			d.cancel()
		}
	}
	var idle []*pconn
	for _, c := range p.conns {
		if c.inflight == 0 && !c.closing {
			c.closing = true
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
	conns := slices.Clone(p.conns)
	p.dispatchLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.fail(ErrTransportClosed)
	}
}

func (p *hostPool) stats() HostStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := HostStats{Open: len(p.conns), Dialing: p.dialing, Queued: len(p.waiters), PipelineDepth: p.depthLocked()}
	for _, c := range p.conns {
		s.InFlight += c.inflight
		if c.inflight == 0 {
			s.Idle++
		}
	}
	return s
}
