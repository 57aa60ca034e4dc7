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

// afterResponse runs on c's reader goroutine once a's response has been
// read in full and reported to the pool (hostPool.responseDone). It closes
// c if keeping it idle would exceed MaxIdleConnsPerHost, reports the
// outcome to a's ClientTrace.PutIdleConn, and enforces MaxIdleConns.
//
// PutIdleConn(nil) means the connection is kept for reuse: on a pipelined
// connection it may still carry requests written behind a. A non-nil error
// means the connection is closed instead: the response closed it, or an
// idle limit did. As in net/http, it is not called with DisableKeepAlives.
func (c *pconn) afterResponse(a *attempt, closing bool) {
	p := c.p
	o := &p.t.opts
	var err error
	if closing {
		err = errConnClosing
	} else if o.MaxIdleConnsPerHost != 0 { // zero keeps them all: nothing to count
		p.mu.Lock()
		if c.inflight == 0 && !c.closing {
			limit := max(o.MaxIdleConnsPerHost, 0)
			idle := 0
			for _, o := range p.conns {
				if o.inflight == 0 && !o.closing {
					idle++
				}
			}
			if idle > limit {
				c.closing = true
				err = errTooManyIdleHost
			}
		}
		p.mu.Unlock()
	}
	if t := a.r.trace; t != nil && t.PutIdleConn != nil && !o.DisableKeepAlives {
		t.PutIdleConn(err)
	}
	if err == errTooManyIdleHost {
		c.fail(err)
		return
	}
	if !closing && o.MaxIdleConns > 0 {
		p.t.trimIdleConns()
	}
}

// trimIdleConns closes the connections idle for the longest time until at
// most MaxIdleConns connections are idle across all hosts. The count is a
// snapshot: pools are locked one at a time, never together.
func (t *Transport) trimIdleConns() {
	max := t.opts.MaxIdleConns
	type idleConn struct {
		c     *pconn
		since time.Time
	}
	var idle []idleConn
	for _, p := range t.poolList() {
		p.mu.Lock()
		for _, c := range p.conns {
			if c.inflight == 0 && !c.closing {
				idle = append(idle, idleConn{c, c.idleSince})
			}
		}
		p.mu.Unlock()
	}
	if len(idle) <= max {
		return
	}
	slices.SortFunc(idle, func(a, b idleConn) int { return a.since.Compare(b.since) })
	for _, ic := range idle[:len(idle)-max] {
		p := ic.c.p
		p.mu.Lock()
		still := ic.c.inflight == 0 && !ic.c.closing
		if still {
			ic.c.closing = true
		}
		p.mu.Unlock()
		if still {
			ic.c.fail(errTooManyIdle)
		}
	}
}
