package pipelined

import (
	"container/list"
	"errors"
	"sync"
)

// This file applies the idle-connection limits (MaxIdleConnsPerHost,
// MaxIdleConns) and fires httptrace's PutIdleConn when a response
// completes. The limits are the pool's connections' (poolConns, under
// hostPool.mu); the Transport's list of idle connections (idleLRU) is
// guarded by idleLRU.mu, a leaf taken under hostPool.mu.

var (
	errTooManyIdleHost = errors.New("pipelined: too many idle connections for host")
	errTooManyIdle     = errors.New("pipelined: too many idle connections")
)

// keepIdleLocked reports whether c, which has just become idle, may stay
// open under MaxIdleConnsPerHost. p.mu must be held.
func (pc *poolConns) keepIdleLocked(c *pconn) bool {
	p := pc.pool
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

// idleLRU is the Transport's list of connections that became idle after
// carrying requests, least recently used first, for MaxIdleConns (as
// net/http's idleLRU). mu guards the list and each entry's elem; it is a
// leaf, taken under hostPool.mu.
type idleLRU struct {
	mu   sync.Mutex
	list list.List // of *idleEntry
}

// idleEntry is a connection's place in the LRU.
type idleEntry struct {
	p    *hostPool
	c    *pconn
	elem *list.Element // guarded by idleLRU.mu; nil when not listed
}

// pushIdleLocked lists c as the most recently idle connection and returns
// the least recently used ones beyond MaxIdleConns, unlisted, for the
// caller to close once p.mu is released (closeIdleVictims). p.mu is held.
func (pc *poolConns) pushIdleLocked(c *pconn) []*idleEntry {
	p := pc.pool
	max := p.t.opts.MaxIdleConns
	if max <= 0 {
		return nil
	}
	l := &p.t.idle
	l.mu.Lock()
	defer l.mu.Unlock()
	e := &c.idleEntry
	if e.elem != nil {
		l.list.MoveToBack(e.elem)
	} else {
		e.p, e.c = p, c
		e.elem = l.list.PushBack(e)
	}
	var victims []*idleEntry
	for l.list.Len() > max {
		v := l.list.Remove(l.list.Front()).(*idleEntry)
		v.elem = nil
		victims = append(victims, v)
	}
	return victims
}

// unlistIdleLocked takes c off the LRU: it is active, retired or gone. p.mu
// is held.
func (pc *poolConns) unlistIdleLocked(c *pconn) {
	p := pc.pool
	if p.t.opts.MaxIdleConns <= 0 {
		return
	}
	l := &p.t.idle
	l.mu.Lock()
	if e := &c.idleEntry; e.elem != nil {
		l.list.Remove(e.elem)
		e.elem = nil
	}
	l.mu.Unlock()
}

// closeIdleVictims closes the connections pushIdleLocked took off the LRU
// if they are still idle (each pool locked in turn, never two at once).
func closeIdleVictims(victims []*idleEntry) {
	for _, v := range victims {
		v.p.mu.Lock()
		still := v.c.s.idle()
		if still {
			v.p.retireLocked(v.c, CloseIdleLimit)
		}
		v.p.mu.Unlock()
		if still {
			v.c.fail(errTooManyIdle)
		}
	}
}
