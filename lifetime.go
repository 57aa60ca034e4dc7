package pipelined

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"
)

// Connection lifetime (TransportOptions.MaxConnLifetime). A layer-4 load
// balancer (a Kubernetes Service, a cloud network load balancer, HAProxy in
// mode tcp) places connections on its backends, not requests: a pool whose
// connections live for ever keeps its load on the backends that were
// there when they were made, and a backend added later gets nothing. So a
// connection older than its lifetime is retired, the way the Keep-Alive
// hints (keepalive.go) and an address leaving its host's answer (addrs.go)
// retire one, for a reason of its own (CloseLifetime): it takes no new
// request (retireLocked), finishes what it carries (pipelined requests are
// responded to, a stream runs to its end), then closes. Where the load needs
// the connection (it is busy, or no other one is idle), its replacement is
// dialed first, and it retires once the replacement is up or its dial
// failed: no request waits for a dial it would not have waited for. The
// replacement is a dial like any other: with address spreading, it goes to
// the address with the fewest of the host's connections (the one it
// replaces no longer counts).
//
// The HTTP/1.1 side is the pool's connections' (poolConns, under
// hostPool.mu); the HTTP/2 side is h2Host's (under h2Host.mu).

// lifeFor returns the lifetime of a new connection: MaxConnLifetime, give
// or take 10% at random, so that connections opened together do not
// retire together; 0 for none.
func (t *Transport) lifeFor() time.Duration {
	d := t.opts.MaxConnLifetime
	if d <= 0 {
		return 0
	}
	if d < 10 {
		return d
	}
	return d - d/10 + rand.N(d/5)
}

// startLifeTimerLocked arms c's lifetime, c having just joined p. p.mu is
// held.
func (pc *poolConns) startLifeTimerLocked(c *pconn) {
	p := pc.pool
	if d := p.t.lifeFor(); d > 0 {
		c.s.lifeTimer = time.AfterFunc(d, func() { p.lifeEnded(c) })
	}
}

// lifeEnded runs when c has lived its lifetime: c retires now, or, if the
// load needs it and a dial is allowed, once its replacement's dial ends
// (replacedLocked).
func (pc *poolConns) lifeEnded(c *pconn) {
	p := pc.pool
	p.mu.Lock()
	s := &c.s
	if p.closed || s.retired || s.due {
		p.mu.Unlock()
		return
	}
	if p.needsReplacementLocked(c) && p.mayReplaceLocked() {
		s.due = true
		p.replacing++
		p.startDialLocked(context.Background()).replaces = c
		p.mu.Unlock()
		return
	}
	idle := p.retireDueLocked(c)
	p.dispatchLocked() // its waiters may dial now
	p.mu.Unlock()
	if idle {
		c.fail(errConnClosing)
	}
}

// needsReplacementLocked reports whether the load needs c once it
// retires: it carries requests, requests wait, or no other connection is
// idle for the next request.
func (pc *poolConns) needsReplacementLocked(c *pconn) bool {
	p := pc.pool
	if c.s.inflight > 0 || p.waiters.len() > 0 {
		return true
	}
	return !slices.ContainsFunc(p.conns, func(o *pconn) bool { return o != c && o.s.idle() && !o.s.due })
}

// mayReplaceLocked reports whether a connection that retires may have
// its replacement dialed before it goes: within MaxConnsPerHost, which
// counts it until it closes, and while the host's requests go over
// HTTP/1.1.
func (pc *poolConns) mayReplaceLocked() bool {
	p := pc.pool
	if h := p.h2.Load(); h != nil && !h.demoted.Load() {
		return false
	}
	return p.t.maxConns <= 0 || len(p.conns)+p.dialing < p.t.maxConns
}

// retireDueLocked retires c for its lifetime, and reports whether it is
// idle, to be closed once p.mu is released.
func (pc *poolConns) retireDueLocked(c *pconn) (idle bool) {
	p := pc.pool
	c.s.due = false
	return p.retireNowLocked(c, CloseLifetime)
}

// replacedLocked retires the connection d was dialed to replace, if any,
// d's dial having ended (connected or not), and returns it if it is idle,
// to be closed once p.mu is released.
func (pc *poolConns) replacedLocked(d *dialHandle) *pconn {
	p := pc.pool
	c := d.replaces
	if c == nil {
		return nil
	}
	p.replacing--
	if !p.retireDueLocked(c) {
		return nil
	}
	return c
}

// HTTP/2.

// startLifeTimerLocked arms c's lifetime, c having just joined h. h.mu is
// held.
func (h *h2Host) startLifeTimerLocked(c *h2Conn) {
	if d := h.t.lifeFor(); d > 0 {
		c.lifeTimer = time.AfterFunc(d, func() { h.lifeEnded(c) })
	}
}

// lifeEnded runs when c has lived its lifetime: c retires now, or, if the
// load needs it and a dial is allowed, once its replacement's dial ends.
func (h *h2Host) lifeEnded(c *h2Conn) {
	h.mu.Lock()
	if h.closed || c.retired || c.due || !slices.Contains(h.conns, c) {
		h.mu.Unlock()
		return
	}
	if h.needsReplacementLocked(c) && h.canDialLocked() && !h.demoted.Load() {
		c.due = true
		h.startDialLocked(context.Background(), c)
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.retire(c)
}

// needsReplacementLocked reports whether the load needs c once it
// retires: it has streams or requests that chose it, requests wait for a
// stream, or no other connection takes requests.
func (h *h2Host) needsReplacementLocked(c *h2Conn) bool {
	if c.busy || c.claims > 0 || h.queued > 0 {
		return true
	}
	return !slices.ContainsFunc(h.conns, func(o *h2Conn) bool { return o != c && o.takesLocked(false) && !o.due })
}

// retire makes c take no new request, for its lifetime, and closes it once
// it has no stream left (stateChanged closes it then if it has one now).
// A connection that closeIdle or its idle timer is closing is retired too:
// if a stream keeps it open, it does not take requests again.
func (h *h2Host) retire(c *h2Conn) {
	h.mu.Lock()
	c.due = false
	if c.retired || !slices.Contains(h.conns, c) {
		h.mu.Unlock()
		return
	}
	c.retired, c.closing, c.why = true, true, CloseLifetime
	h.broadcastLocked()
	h.mu.Unlock()
	h.closeRetired(c)
}

// closeRetired closes c, retired, if no request chose it and it has no
// stream. Neither can come back: a retired connection takes nothing new.
// Without mu; it may run in c's state hook, where Close is allowed (the
// ClientConn runs no hook inside a hook).
func (h *h2Host) closeRetired(c *h2Conn) {
	h.mu.Lock()
	claimed := c.claims > 0
	h.mu.Unlock()
	if claimed || c.cc.InFlight() > 0 {
		return
	}
	c.cc.Close()
	h.mu.Lock()
	removed := h.removeLocked(c)
	why := c.why
	h.mu.Unlock()
	if removed {
		h.observeClosed(c, why, nil)
		h.maybeEmpty()
	}
}
