package pipelined

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// This file is the retry loop of a request: it places each attempt on a
// connection, waits for its outcome, and asks checkRetry whether to send
// the request again.

// maxMoves bounds how many times one request is moved to another
// connection without a failure of its own: not written before its
// connection closed, or moved from behind a response that closed the
// connection, a slow head or an open-ended body. Each move follows an
// event on a distinct connection; a healthy server never comes close.
const maxMoves = 64

// maxRetries bounds the sends of a request after failures of the
// connections it was written on. net/http has no fixed bound: it resends
// an idempotent request after each failure of a reused connection, and
// its next attempt usually lands on a fresh connection, where a failure is
// final. So do we; the bound only guards against a pathological server.
const maxRetries = 8

// failure is what is known about an attempt whose connection failed
// before its response headers arrived.
type failure struct {
	written  bool // some of the request reached the connection
	reused   bool // written behind other requests or after a response on the same connection, or shared it when it failed
	answered bool // the server responded to it, badly (malformed) or too late
	garbled  bool // the response was malformed: the bad bytes may belong to an earlier response
}

// outcome is how an attempt ended without a response for its caller.
type outcome struct {
	moved bool    // told to go elsewhere: it will not be (or need not be) responded to there
	err   failure // otherwise, the connection failed
}

// decision is checkRetry's answer.
type decision uint8

const (
	giveUp     decision = iota // return the error to the caller
	sendAgain                  // not a failure: place the request again
	retryAlone                 // send again, alone on its connection (RFC 9112 §9.3.2)
)

// checkRetry decides whether a request whose attempt ended with o is sent
// again; alone reports whether that attempt was itself a retry. It is a
// pure function (the table in retry_test.go is its specification):
//
//	moved (a "close" ahead, a slow or streaming head)     send again
//	not written (no byte reached the connection)           send again, any method
//	answered, malformed, idempotent, first time           retry alone (the bytes may be an earlier response's)
//	answered otherwise                                    give up
//	written, idempotent and replayable, reused connection retry alone
//	written on a fresh connection, as its first request   give up (net/http does not retry it)
//	written, not idempotent or not replayable             give up: ErrServerClosed
//
// RFC 9112 §9.3.1 allows resending idempotent requests after a failure;
// RFC 9112 §9.3.2 asks that a retry not be pipelined. Bounds on how often
// are the caller's (maxMoves, maxRetries).
func checkRetry(replayable, alone bool, o outcome) decision {
	f := o.err
	switch {
	case o.moved, !f.written:
		return sendAgain
	case f.answered:
		if f.garbled && replayable && !alone {
			return retryAlone
		}
		return giveUp
	case replayable && f.reused:
		return retryAlone
	}
	return giveUp
}

// roundTrip sends req on one of p's connections, retrying where checkRetry
// allows.
func (p *hostPool) roundTrip(req *http.Request) (*http.Response, error) {
	sent := req // what the HTTP/1 pool sends
	var from *useH1
	if h := p.speaksH2(); h != nil {
		resp, err := h.roundTrip(req)
		u, ok := err.(*useH1)
		if !ok {
			return resp, err
		}
		// The host turned back to HTTP/1.1 while req waited for a stream.
		from, sent = u, u.req
	}
	for changes := 0; ; changes++ {
		resp, back, err := p.roundTripH1(req, sent, from, changes)
		if back == nil {
			return resp, err
		}
		from, sent = back, back.req
	}
}

// maxProtocolChanges bounds how often a request follows its host from
// HTTP/1.1 to HTTP/2 and back before it fails: a host that changes faster
// than requests move (a server whose ALPN flaps) is served as long as it
// settles within a few changes.
const maxProtocolChanges = 8

// roundTripH1 is one pass of roundTrip through the HTTP/1 pool, and on to
// the HTTP/2 side if the host turns out to speak it. If the host turned
// back to HTTP/1.1 before the request had a stream, and the request has
// not met maxProtocolChanges changes yet, it returns the useH1 to go round
// again with, and no outcome.
func (p *hostPool) roundTripH1(req, sent *http.Request, from *useH1, changes int) (*http.Response, *useH1, error) {
	r := newRequest(p.t, sent, p.key)
	if p.key.forwardProxy() {
		// An http:// target through an HTTP(S) proxy: RFC 9112 §3.2.2
		// absolute form, with the proxy's credentials. Tunnels (CONNECT,
		// SOCKS5) send origin requests untouched.
		r.absoluteURI = true
		r.proxyAuth = p.key.proxyAuth
	}
	o := p.t.opts.Observer
	if o != nil {
		addr := p.key.addr
		if addr == "" { // a forward proxy's pool: the target is the request's
			addr, _ = canonicalAddr(sent.URL.Scheme, sent.URL.Host)
		}
		r.obs = &requestObs{start: time.Now(), host: p.name, addr: addr}
		if from != nil && from.ev != nil { // the request goes on from its HTTP/2 attempt
			r.obs.start, r.obs.queueTime, r.obs.moved = from.ev.Start, from.ev.QueueTime, from.ev
		}
	}
	endLegacy := p.t.watchLegacyCancel(r)
	var resp *http.Response
	err := r.checkTarget()
	if err == nil {
		resp, err = p.roundTripAttempts(r)
	}
	redirected := false
	if u, ok := err.(*useH2); ok && r.bodyUsed {
		// An attempt here took sent's body, which may be read already:
		// written (checkRetry let the request go again), or read into a
		// write held and not sent (conn_direct.go). The HTTP/2 side gets a
		// fresh one, as net/http rewinds a body before each retry, or
		// the request fails: an empty body is never sent for it.
		var rerr error
		if sent, rerr = r.rewound(); rerr != nil {
			u.h.release() // the use the useH2 held
			err = rerr
		}
	}
	if u, ok := err.(*useH2); ok { // the host turned out to speak HTTP/2
		resp, err = u.h.redirect(sent, redirectEvent(o, r))
		r.bodyUsed = true // the HTTP/2 side owns the body and reports the rest
		redirected = true
		if back, ok := err.(*useH1); ok {
			// And back to HTTP/1.1 meanwhile, before the request had a
			// stream: nothing was sent, and its body is as it was, so it
			// goes round again. The HTTP/2 side reported no RequestDone:
			// this side does, in the next pass or here.
			if changes+1 < maxProtocolChanges {
				if endLegacy != nil {
					endLegacy()
				}
				return nil, back, nil
			}
			closeBody(back.req)
			err = fmt.Errorf("pipelined: %s changed protocol too often while a request waited: %w", p.key.addr, errUseH1)
			redirected = false
		}
	}
	if sent != req && resp != nil {
		resp.Request = req // not the rewound copy
	}
	if err != nil && !r.bodyUsed {
		closeBody(req)
	}
	if endLegacy != nil {
		endLegacyCancel(resp, endLegacy)
	}
	if o != nil && o.RequestDone != nil && r.obs.last != nil && !redirected {
		observeDone(o, r, resp, err)
	}
	return resp, nil, err
}

// observeDone reports RequestDone. It is kept out of roundTrip so that
// the event's construction does not enlarge the frame of every waiting
// caller (memory per request in flight).
//
//go:noinline
func observeDone(o *Observer, r *request, resp *http.Response, err error) {
	ev := requestEvent(r.obs.last, time.Now())
	ev.Err = err
	if resp != nil {
		ev.Status = resp.StatusCode
	}
	o.RequestDone(ev)
}

// redirectEvent is the RequestQueued event of r's last attempt, with the
// time it has been queued, for the HTTP/2 side to go on from; nil without
// an Observer.
//
//go:noinline
func redirectEvent(o *Observer, r *request) *RequestEvent {
	if o == nil || r.obs.last == nil {
		return nil
	}
	a := r.obs.last
	ev := requestEvent(a, time.Now())
	ev.QueueTime += time.Duration(monoNow() - a.queuedAt)
	return &ev
}

// observeQueued reports RequestQueued, out of roundTripAttempts' frame.
//
//go:noinline
func observeQueued(o *Observer, a *attempt) {
	o.RequestQueued(requestEvent(a, time.Now()))
}

var errTooManyMoves = errors.New("pipelined: request moved between connections too many times")

// roundTripAttempts sends r on p's connections, one attempt after another,
// until one brings r's response or checkRetry (nextCause) gives up.
func (p *hostPool) roundTripAttempts(r *request) (*http.Response, error) {
	// A copy of a late head (hostPool.hedge) may be as slow as its
	// original: it is written alone, so that nothing waits behind it.
	alone := r.copyOf != nil
	moves, retries := 0, 0
	o := p.t.opts.Observer
	var n int32
	cause := ResendNone
	continued := false
	if r.obs != nil && r.obs.moved != nil {
		// Moved from the HTTP/2 side, where its attempt was queued (and
		// reported so), not sent: the first attempt here continues it.
		n, cause, continued = int32(r.obs.moved.Attempt)-1, r.obs.moved.Resend, true
	}
	if r.copyOf != nil {
		n, cause = r.copyOf.n, ResendHedge // numbered after the attempt it copies
	}
	for {
		if err := r.ctx.Err(); err != nil {
			return nil, context.Cause(r.ctx)
		}
		n++
		a := queueAttempt(o, r, alone, n, cause, continued)
		continued = false
		var c *pconn
		var err error
		if p, c, err = p.placeAttempt(a); err != nil {
			return nil, err
		}
		var res result
		if err := c.send(a); err != nil {
			p.release(c)
			if err != errNotWritten {
				return nil, err
			}
			res.err = &ConnError{Err: err}
		} else {
			res = p.await(a)
			if res.err == nil && !res.retry {
				if res.copied && r.obs != nil {
					// The copy's response: RequestDone reports its attempt
					// (and the copy reported its headers).
					cp := r.obs.copy
					r.obs.last = cp.obs.last
					r.obs.queueTime += cp.obs.queueTime
				} else if o != nil && o.RequestHeaders != nil {
					observeHeaders(o, a, res.resp.StatusCode)
				}
				decodeGzip(r, res.resp) // a copy's is decoded already: a no-op
				return res.resp, nil
			}
			if p.isClosed() {
				return nil, ErrTransportClosed
			}
			if res.err != nil && r.ctx.Err() != nil {
				// Failed as its caller gave up (a direct read that the
				// cancellation interrupted, conn_direct.go): the caller's
				// reason is the error, as net/http reports it.
				return nil, context.Cause(r.ctx)
			}
		}
		if cause, err = nextCause(r, res, &alone, &moves, &retries); err != nil {
			return nil, err
		}
	}
}

// queueAttempt makes r's attempt number n, sent for cause, and, with an
// Observer (o), reports it queued unless it continues one already
// reported (continued: moved from the HTTP/2 side).
func queueAttempt(o *Observer, r *request, alone bool, n int32, cause ResendCause, continued bool) *attempt {
	a := newAttempt(r, alone)
	a.n, a.cause = n, cause
	if o != nil {
		r.obs.last = a
		a.queuedAt = monoNow()
		if o.RequestQueued != nil && !continued {
			observeQueued(o, a)
		}
	}
	return a
}

// placeAttempt acquires a connection for a, and returns it with the pool
// it belongs to: p, or the host's current pool if p emptied and was
// forgotten since the request got it.
func (p *hostPool) placeAttempt(a *attempt) (*hostPool, *pconn, error) {
	c, err := p.acquire(a)
	for err == errPoolGone {
		// The pool emptied and was forgotten since this request got
		// it: place the attempt on the host's current pool.
		if p, err = p.t.pool(p.key); err != nil {
			return nil, nil, err
		}
		c, err = p.acquire(a)
	}
	if err != nil {
		return nil, nil, err
	}
	p.observeAssigned(a)
	if a.heldAtAssign {
		a.heldAtAssign = false
		p.hold(c, false)
	}
	return p, c, nil
}

// nextCause decides, by checkRetry, whether r goes again after an attempt
// that ended with res and no response: it returns the cause of the next
// attempt, or the error r fails with. alone (whether the next attempt is
// sent alone), moves and retries are r's, updated.
func nextCause(r *request, res result, alone *bool, moves, retries *int) (ResendCause, error) {
	var out outcome
	out.moved = res.retry
	var ce *ConnError
	if !out.moved {
		if !errors.As(res.err, &ce) {
			return ResendNone, res.err
		}
		out.err = ce.fail
	}
	switch checkRetry(r.replayable, *alone, out) {
	case sendAgain:
		if *moves++; *moves > maxMoves {
			return ResendNone, &ConnError{Err: errTooManyMoves, Written: out.moved || out.err.written}
		}
		if out.moved {
			return ResendHeadOfLine, nil
		}
		return ResendNotWritten, nil
	case retryAlone:
		if *retries++; *retries > maxRetries {
			return ResendNone, ce
		}
		*alone = true
		return ResendConnFailed, nil
	default:
		return ResendNone, ce
	}
}

// await waits for a's outcome or for its caller to give up.
func (p *hostPool) await(a *attempt) result {
	done := a.r.ctx.Done()
	if done == nil {
		return a.result() // a context that is never cancelled: no select
	}
	select {
	case <-a.r.sig:
		return a.out // delivered already (a direct read): no select either
	default:
	}
	select {
	case <-a.r.sig:
		return a.out
	case <-done:
		if a.abandon() {
			// The connection takes nothing more, and closes once a is its oldest
			// request still awaiting its response, as net/http closes it (the
			// response may never come); the requests behind a go elsewhere.
			a.c.abandoned()
			return result{err: context.Cause(a.r.ctx)}
		}
		return a.result() // delivered just now: use it, as net/http does
	}
}
