package pipelined

import (
	"context"
	"errors"
	"time"

	"github.com/pipelined/pipelined/internal/model"
)

// This file reports the engine's events to TransportOptions.Observer
// (observer.go). Every report is made after the locks that decided it are
// released; with no Observer, each site costs one nil comparison. The
// model's changes not yet reported are the pool's (observerReports, under
// hostPool.mu); a request's events are its RoundTrip goroutine's
// (requestObs).

const protoHTTP11 = "HTTP/1.1"

// requestObs is what the Observer's events of one request carry across its
// attempts. It is owned by the request's RoundTrip goroutine.
type requestObs struct {
	start      time.Time
	host, addr string
	queueTime  time.Duration
	// moved is the last event of the request's attempt on the HTTP/2 side
	// when it moved to the HTTP/1 pool unsent (useH1): the HTTP/1 pool's
	// first attempt continues it, unreported as queued again.
	moved *RequestEvent
	last  *attempt // the latest attempt
	// copy is the request's copy, if one was sent (hostPool.lateHead,
	// before the copy starts): RequestDone reports its attempt if its
	// response won.
	copy *request
}

// monoTime is a monotonic instant in nanoseconds since the process's
// first use of it: 8 bytes where a time.Time takes 24, for timestamps kept
// per request.
type monoTime int64

var monoEpoch = time.Now()

func monoNow() monoTime { return monoTime(time.Since(monoEpoch)) }

// closeReasonOf is why a connection ends with request r: the request asked
// for it, or takes the connection out of the pool.
func closeReasonOf(r *request) CloseReason {
	if r.upgrade {
		return CloseUpgraded
	}
	return CloseRequest
}

// closingReason is why a connection ends after a's response, which said
// "close" or followed a request that did.
func closingReason(a *attempt) CloseReason {
	if a.r.closeAfter {
		return CloseRequest
	}
	return CloseServer
}

// closeReason is why a connection that ended with err closed; retired is
// the reason it was retired for, if it was.
func closeReason(err error, retired CloseReason) CloseReason {
	switch {
	case errors.Is(err, ErrTransportClosed):
		return CloseTransportClosed
	case err == errUpgraded:
		return CloseUpgraded
	case err == ErrResponseHeaderTimeout:
		return CloseError // it matches context.DeadlineExceeded too
	case err == errUnwanted, err == errDrainTooLong, err == errRequestCanceled,
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return CloseCanceled
	case err == errIdleClosed:
		return CloseServer
	case err == errIdleTimeout:
		return CloseIdleTimeout
	case err == errKeepAliveTimeout, err == errKeepAliveMax:
		return CloseKeepAliveEnd
	case err == errClosedIdle:
		return CloseIdleConnections
	case err == errTooManyIdle, err == errTooManyIdleHost:
		return CloseIdleLimit
	case err == errConnClosing:
		if retired != 0 && retired != CloseError {
			return retired
		}
		return CloseServer
	}
	return CloseError
}

// requestEvent describes a's request at time now.
func requestEvent(a *attempt, now time.Time) RequestEvent {
	r, ro := a.r, a.r.obs
	ev := RequestEvent{
		Time: now, Start: ro.start, Request: r.req, Host: ro.host, Addr: ro.addr,
		Attempt: int(a.n), Resend: a.cause, QueueTime: ro.queueTime,
	}
	if c := a.c; c != nil {
		ev.ConnID, ev.Protocol = c.id, protoHTTP11
		ev.InFlight, ev.Pipelined = int(a.inflightAtAssign), a.inflightAtAssign > 1
	}
	return ev
}

// connEvent describes c at time now.
func (rep *observerReports) connEvent(c *pconn, now time.Time, active bool) ConnEvent {
	p := rep.pool
	return ConnEvent{Time: now, ID: c.id, Host: p.name, Addr: p.key.addr, Protocol: protoHTTP11, RemoteAddr: c.conn.RemoteAddr(), Opened: c.s.opened, Active: active}
}

// observeAssigned reports that a was given its connection, in the
// caller's goroutine once acquire returned.
func (rep *observerReports) observeAssigned(a *attempt) {
	p := rep.pool
	o := p.t.opts.Observer
	if o == nil {
		return
	}
	now := time.Now()
	a.r.obs.queueTime += time.Duration(monoNow() - a.queuedAt)
	if a.activated && o.ConnActive != nil {
		o.ConnActive(p.connEvent(a.c, now, true))
	}
	if o.RequestAssigned != nil {
		o.RequestAssigned(requestEvent(a, now))
	}
}

// observeWritten reports that a's request was written; Pipelined says
// whether an earlier request was still awaiting its response when it was.
// direct: a's caller holds the read turn (conn_direct.go), and c is held
// meanwhile (pconn.hooked).
func (c *pconn) observeWritten(a *attempt, direct bool) {
	if o := c.t.opts.Observer; o != nil && o.RequestWritten != nil {
		ev := requestEvent(a, time.Now())
		ev.Pipelined = a.behind
		if direct {
			c.hooked(func() { o.RequestWritten(ev) })
		} else {
			o.RequestWritten(ev)
		}
	}
}

// observeHeaders reports that a's final response head arrived, in the
// caller's goroutine once the response was handed over, as on the HTTP/2
// side: the connection's reader (or a caller reading its own response)
// holds the read turn when it reads the head, and a request the hook sent
// to the host could wait behind the hook for it.
//
//go:noinline
func observeHeaders(o *Observer, a *attempt, status int) {
	ev := requestEvent(a, time.Now())
	ev.Pipelined = a.behind
	ev.Status = status
	o.RequestHeaders(ev)
}

// observeIdle reports that c has nothing in flight any more and stays
// open, if the pool decided so (went is true).
// modelChange is a change of a route class's verdict, reported to the
// Observer once hostPool.mu is released (observeModel).
type modelChange struct {
	r *request
	v model.Verdict
}

// modelChanges are what a host's model changed and the Observer has not
// been told yet: routes' verdicts, and the host's decisions.
type modelChanges struct {
	routes []modelChange
	host   []HostEvent
}

// observerReports is what a pool has to tell the Observer of its model
// once hostPool.mu is released. Its fields are guarded by hostPool.mu.
type observerReports struct {
	pool *hostPool

	// modelChanged are the model's verdict changes not yet reported to
	// the Observer (observeModel, after mu is released).
	modelChanged []modelChange
	// decision is the host's decision as last reported to the Observer,
	// and hostChanged its changes not yet reported (noteDecisionLocked).
	decision    model.Decision
	hostChanged []HostEvent
}

// takeModelChangesLocked returns the changes not yet reported, the host's
// decision included if it changed (noteDecisionLocked). p.mu is held.
func (rep *observerReports) takeModelChangesLocked() modelChanges {
	p := rep.pool
	p.noteDecisionLocked()
	ch := modelChanges{routes: p.modelChanged, host: p.hostChanged}
	p.modelChanged, p.hostChanged = nil, nil
	return ch
}

// noteDecisionLocked compares the host's decision with the one last
// reported, and queues a HostEvent if it changed; only while an Observer
// wants them. p.mu is held.
func (rep *observerReports) noteDecisionLocked() {
	p := rep.pool
	o := p.t.opts.Observer
	if o == nil || o.HostLearned == nil || p.model.Fixed() || p.key.forwardProxy() {
		return
	}
	d := p.model.Decide(p.t.depth)
	if d == p.decision {
		return
	}
	p.decision = d
	p.hostChanged = append(p.hostChanged, HostEvent{Time: p.model.Now(), Host: p.name, Addr: p.key.addr,
		Pipelining: d.Reason == model.Pipelined, Reason: d.Reason.String(), Serial: d.Serial, Proven: d.Proven})
}

// observeModel reports the model's changes to the Observer.
func (rep *observerReports) observeModel(ch modelChanges) {
	p := rep.pool
	if len(ch.routes) == 0 && len(ch.host) == 0 {
		return
	}
	o := p.t.opts.Observer
	if o != nil && o.RouteLearned != nil {
		now := time.Now()
		for _, m := range ch.routes {
			addr, _ := canonicalAddr(m.r.req.URL.Scheme, m.r.req.URL.Host)
			o.RouteLearned(RouteEvent{Time: now, Host: p.name, Addr: addr, Request: m.r.req, Verdict: m.v.String()})
		}
	}
	if o != nil && o.HostLearned != nil {
		for _, e := range ch.host {
			o.HostLearned(e)
		}
	}
}

func (rep *observerReports) observeIdle(c *pconn, went bool) {
	p := rep.pool
	if !went {
		return
	}
	if o := p.t.opts.Observer; o != nil && o.ConnIdle != nil {
		o.ConnIdle(p.connEvent(c, time.Now(), false))
	}
}
