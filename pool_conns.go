package pipelined

import (
	"context"
	"time"
)

// This file holds the pool's connections and dials (poolConns): dialing a
// connection and its joining the pool, retiring one, and the idle timer.
// Its idle limits are in idle.go, its lifetime and replacement in
// lifetime.go. Everything here is guarded by hostPool.mu.

// poolConns is a pool's connections and dials. Its fields are guarded by
// hostPool.mu; its methods named ...Locked are called with hostPool.mu
// held, the others take it.
type poolConns struct {
	pool *hostPool

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
	dials   map[*dialHandle]struct{} // dials in progress
	learned bool                     // a dial succeeded, so the host's protocol is known
	// retired counts the connections retired and closed, by reason, for
	// Stats (counted when they end, with ConnClosed's reason).
	retired Retirements
}

// retireLocked makes c take no new request, for the given reason (the
// first one given is kept; 0 keeps the one already there). It is the only
// place that retires a connection.
func (pc *poolConns) retireLocked(c *pconn, why CloseReason) {
	p := pc.pool
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
// closes after its last response (becameIdleLocked). Its end is counted in
// Stats by reason (ended, Retirements).
func (pc *poolConns) retireNowLocked(c *pconn, why CloseReason) (idle bool) {
	p := pc.pool
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
func (pc *poolConns) startDialLocked(reqCtx context.Context) *dialHandle {
	p := pc.pool
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
func (pc *poolConns) joinUnlock(c *pconn, took time.Duration) {
	p := pc.pool
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

// release gives back a place reserved on c for an attempt that was never
// written.
func (pc *poolConns) release(c *pconn) {
	p := pc.pool
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
// nothing left to respond to), whether it went from active to idle, and which
// idle connections to close for MaxIdleConns once p.mu is released.
func (pc *poolConns) becameIdleLocked(c *pconn) (done, wentIdle bool, victims []*idleEntry) {
	p := pc.pool
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

// retireSpentLocked retires the connections that were given the host's
// budget of requests before it was learned, as assignLocked retires those
// given it since: otherwise an idle one takes a request its server will not
// respond to (with a budget of 1, every connection that served one
// response). It returns the idle ones, to be closed once p.mu is released;
// the others close after their last response.
func (pc *poolConns) retireSpentLocked() (idle []*pconn) {
	p := pc.pool
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
func (pc *poolConns) idleLimitLocked(c *pconn) time.Duration {
	p := pc.pool
	d := max(p.t.opts.IdleConnTimeout, 0)
	if k := c.s.kaIdle; k > 0 && (d == 0 || k < d) {
		d = k
	}
	return d
}

func (pc *poolConns) startIdleTimerLocked(c *pconn) {
	p := pc.pool
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

func (pc *poolConns) closeIfIdle(c *pconn) {
	p := pc.pool
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

func (pc *poolConns) closeIdle() {
	p := pc.pool
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

// hookedDialsLocked returns how many dials in progress run a hook of the
// user's (firstHop.hooked).
func (pc *poolConns) hookedDialsLocked() int {
	p := pc.pool
	n := 0
	for d := range p.dials {
		if d.hop.hooked.Load() > 0 {
			n++
		}
	}
	return n
}

// dialSoonLocked reports whether a dial in progress started less than
// margin times the host's dial time ago (model.QuickWait at least): one that
// hangs holds nobody back for longer. A request it held back is placed
// at the next dispatch (a response, a dial's end): what it would have
// waited behind meanwhile holds its connection.
func (pc *poolConns) dialSoonLocked() bool {
	p := pc.pool
	soon := p.model.DialSoon()
	now := monoNow()
	for d := range p.dials {
		if d.replaces == nil && time.Duration(now-d.start) < soon { // a replacement's carries nobody's request
			return true
		}
	}
	return false
}

// quietLocked reports whether no connection of p but c has a request in
// flight.
func (pc *poolConns) quietLocked(c *pconn) bool {
	p := pc.pool
	for _, o := range p.conns {
		if o != c && o.s.inflight > 0 {
			return false
		}
	}
	return true
}
