package pipelined

import (
	"errors"
	"slices"
	"time"
)

// This file applies the idle-connection limits (MaxIdleConnsPerHost,
// MaxIdleConns) and fires httptrace's PutIdleConn when a response
// completes.

var (
	errTooManyIdleHost = errors.New("pipelined: too many idle connections for host")
	errTooManyIdle     = errors.New("pipelined: too many idle connections")
)

// keepIdleLocked reports whether c, which has just become idle, may stay
// open under MaxIdleConnsPerHost. p.mu must be held.
func (p *hostPool) keepIdleLocked(c *pconn) bool {
	limit := p.t.opts.MaxIdleConnsPerHost
	if limit == 0 { // zero keeps them all: nothing to count
		return true
	}
	idle := 0
	for _, o := range p.conns {
		if o.s.idle() {
			idle++
		}
	}
	return idle <= max(limit, 0)
}

// putIdleTrace reports to a's ClientTrace.PutIdleConn what became of c
// once a's response was read in full: nil means the connection is kept for
// reuse (on a pipelined connection it may still carry requests written
// behind a); an error means it is closed (the response closed it, or an
// idle limit did). As in net/http, it is not called with
// DisableKeepAlives.
func (c *pconn) putIdleTrace(a *attempt, err error) {
	if t := a.r.trace; t != nil && t.PutIdleConn != nil && !c.t.opts.DisableKeepAlives {
		t.PutIdleConn(err)
	}
}

// trimIdleConns closes the connections idle for the longest time until at
// most MaxIdleConns connections are idle across all hosts. The count is a
// snapshot: pools are locked one at a time, never together.
func (t *Transport) trimIdleConns() {
	max := t.opts.MaxIdleConns
	type idleConn struct {
		p     *hostPool
		c     *pconn
		since time.Time
	}
	var idle []idleConn
	for _, p := range t.poolList() {
		p.mu.Lock()
		for _, c := range p.conns {
			if c.s.idle() {
				idle = append(idle, idleConn{p, c, c.s.idleSince})
			}
		}
		p.mu.Unlock()
	}
	if len(idle) <= max {
		return
	}
	slices.SortFunc(idle, func(a, b idleConn) int { return a.since.Compare(b.since) })
	for _, ic := range idle[:len(idle)-max] {
		p := ic.p
		p.mu.Lock()
		still := ic.c.s.idle()
		if still {
			p.retireLocked(ic.c, CloseIdleLimit)
		}
		p.mu.Unlock()
		if still {
			ic.c.fail(errTooManyIdle)
		}
	}
}
