package pipelined

import (
	"errors"
	"io"
	"sync"
	"syscall"
	"time"
)

// This file protects pipelined requests from head-of-line blocking and
// pipelining-hostile hosts:
//
//   - Slow head. When the oldest request on a connection has waited longer
//     than TransportOptions.HeadOfLineTimeout for its response headers, or
//     its body has been arriving that long (a stream, or a body read ahead
//     whole that trickles), the safe requests written behind it
//     (mayDuplicate) are re-sent on other connections (their late answers
//     are read and discarded), and the connection takes no new requests
//     until the head's headers arrive (or its body ends). Requests that
//     are not safe are never pipelined, so none is ever behind a head: none
//     can run after a later request.
//   - Depth fallback. A host whose connections fail with pipelined requests
//     outstanding (malformed responses, closes or resets mid-pipeline)
//     pipelineFallbackAfter times within pipelineFailureWindow gets an
//     effective depth of 1 for pipelineFallbackFor.

const (
	// DefaultHeadOfLineTimeout is TransportOptions.HeadOfLineTimeout when
	// it is zero. One second is far above a typical response time (so
	// ordinary responses never trigger it and re-sends stay rare: each
	// one costs the server a duplicate request), yet short enough that a
	// request stuck behind a long-polling or slow handler moves on at
	// about the time a user would notice the stall.
	DefaultHeadOfLineTimeout = time.Second

	// pipelineFallbackAfter pipeline failures within pipelineFailureWindow
	// put a host at depth 1 for pipelineFallbackFor.
	pipelineFallbackAfter = 3
	pipelineFailureWindow = 10 * time.Second
	pipelineFallbackFor   = 30 * time.Second
)

// drainWait is how long the rest of a body its caller closed early may
// take to arrive before the connection is closed instead (pconn.drain):
// the head-of-line timeout, or its default when that is disabled.
func (c *pconn) drainWait() time.Duration {
	if d := c.t.holTimeout(); d > 0 {
		return d
	}
	return DefaultHeadOfLineTimeout
}

// holTimeout returns the effective head-of-line threshold; <= 0 disables.
func (t *Transport) holTimeout() time.Duration {
	d := t.opts.HeadOfLineTimeout
	if d == 0 {
		return DefaultHeadOfLineTimeout
	}
	return d
}

// holGuard is the head-of-line timer of one connection. Its mutex guards
// its fields; the timer's callback runs in its own goroutine. One timer
// per connection is reused for every head, so that the guard costs no
// allocation per request.
type holGuard struct {
	mu     sync.Mutex
	head   *attempt // the head whose timer is running
	stream bool     // the timer runs for head's open-ended body, not its headers
	timer  *time.Timer
	slow   bool // setSlow(c, true) was called for the current head
}

// holStart starts a's head-of-line timer: a is fully written and has just
// become the oldest unanswered request on c.
func (c *pconn) holStart(a *attempt) {
	c.holArm(a, false)
}

// holStartStream starts the timer for a's body, whose headers have
// arrived: an open-ended one (a stream), or one read ahead whole that is
// still arriving.
func (c *pconn) holStartStream(a *attempt) {
	c.holArm(a, true)
}

func (c *pconn) holArm(a *attempt, stream bool) {
	d := c.t.holTimeout()
	if d <= 0 || c.t.depth <= 1 {
		return
	}
	if a.holAfter > 0 && !stream {
		d = a.holAfter
	}
	c.mu.Lock()
	head := len(c.fifo) > 0 && c.fifo[0] == a && a.headersRead == stream
	// A head with nothing behind it holds nobody up: its timer starts
	// when a first request is written behind it (pconn.send), so that a
	// connection carrying one request at a time arms no timer. But for a
	// probe: its own wait may be a server leaving it unread.
	alone := !stream && len(c.fifo) < 2
	c.mu.Unlock()
	probe := alone && a.probing()
	if !head || alone && !probe {
		return // answered already, or nothing waits behind it
	}
	if probe {
		d = a.probeAfter
	}
	g := &c.hol
	g.mu.Lock()
	defer g.mu.Unlock()
	g.head = a
	g.stream = stream
	if g.timer == nil {
		g.timer = time.AfterFunc(d, c.holFireCurrent)
	} else {
		g.timer.Reset(d)
	}
}

// holStop stops the head-of-line timer (a's headers arrived, or c is
// closing) and lets c take new requests again if the head was slow.
func (c *pconn) holStop() (wasSlow bool) {
	g := &c.hol
	g.mu.Lock()
	if g.timer != nil {
		g.timer.Stop()
	}
	g.head = nil
	wasSlow = g.slow
	if g.slow {
		g.slow = false
		c.ev.setSlow(c, false, false)
	}
	g.mu.Unlock()
	return wasSlow
}

// holFireCurrent is the timer's callback: it checks the head it was
// started for, if that is still the current one.
func (c *pconn) holFireCurrent() {
	g := &c.hol
	g.mu.Lock()
	a := g.head
	g.mu.Unlock()
	if a != nil {
		c.holFire(a)
	}
}

// holFire runs when head a has waited too long for its headers.
func (c *pconn) holFire(a *attempt) {
	g := &c.hol
	g.mu.Lock()
	current, stream := g.head == a, g.stream
	g.mu.Unlock()
	if !current {
		return
	}
	c.mu.Lock()
	stuck := !c.dead && len(c.fifo) > 0 && c.fifo[0] == a && a.headersRead == stream
	behind := len(c.fifo) - 1
	c.mu.Unlock()
	if !stuck {
		return
	}
	// Nothing new goes behind a slow head (a streaming one takes nothing
	// new already); what is already behind it, and safe, is re-sent
	// elsewhere. Its slots stay in fifo: late answers are read and
	// discarded, so the connection stays usable.
	g.mu.Lock()
	if g.head != a {
		g.mu.Unlock()
		return
	}
	// Under g.mu (lock order: holGuard.mu, then hostPool.mu), so that a
	// concurrent holStop cannot clear it first. A stream takes nothing new
	// already (a.streamed, set before its timer was armed); a body read
	// ahead whole did not, until now.
	if !stream || !a.streamed {
		g.slow = true
		c.ev.setSlow(c, true, a.holAfter > 0 && !stream)
	}
	g.mu.Unlock()
	if behind > 0 {
		c.resendBehind(false)
	}
	if !stream && mayDuplicate(a.r) && a.r.copyOf == nil {
		c.ev.lateHead(c, a)
	}
	if behind > 0 {
		c.dropIfUnwanted() // a head nobody waits for, and nothing left behind it
	}
}

// lateHead sends a copy of a, the late head of c, on another connection
// (TransportOptions.HedgeHeadOfLine) if the host's budget of copies allows
// it; or, whatever the option, if a is a stalled probe, the first since
// the host was last proven or fell back (probeWaitLocked). An attempt is
// copied once at most.
func (p *hostPool) lateHead(c *pconn, a *attempt) {
	probe := a.probing()
	if !p.t.opts.HedgeHeadOfLine && !probe || a.state.Load() != attemptWaiting {
		return
	}
	p.mu.Lock()
	ok := !p.closed && !a.hedged
	switch {
	case !ok:
	case probe:
		// Only a probe whose route answered bounded and quickly before:
		// one of a route not seen yet, or slow for its own reasons (a
		// large paged list), would reach the server twice for nothing.
		ok = !p.probeCopied && !p.pipeProven && a.follow == followKnown
		p.probeCopied = p.probeCopied || ok
		if ok {
			p.dupBudget-- // not held back by it: the probe tells a server that drops pipelined requests
		}
	default:
		ok = p.dupBudget >= 1
		if ok {
			p.dupBudget--
		}
	}
	if ok {
		a.hedged = true
		p.t.wg.Add(1) // before Close waits: Close marks p closed first
	}
	p.mu.Unlock()
	if !ok {
		return
	}
	r := a.r
	cp := &request{req: r.req, ctx: r.ctx, method: r.method,
		replayable: r.replayable, safe: r.safe, pipelineable: r.pipelineable,
		addGzip: r.addGzip, proxyAuth: r.proxyAuth, absoluteURI: r.absoluteURI,
		copyOf: a}
	if r.obs != nil {
		cp.obs = &requestObs{start: r.obs.start, host: r.obs.host, addr: r.obs.addr}
		r.obs.copy = cp // read by the caller only once the copy's answer is delivered
	}
	// A probe's timer fired probeAfter after it became the head.
	go p.hedge(c, cp, time.Now().Add(-a.probeAfter))
}

// hedge sends cp, a copy of a late head's request, a safe one, and hands
// its answer to the head's caller if it comes first. The head's answer is
// then not wanted, and c, where it was due, is closed unless another
// request waits on it: that cancels the head on the server (the one way in
// HTTP/1.1) and frees c's place in the pool; for a probe that became the
// head at headAt, only if its answer does not come either meanwhile
// (probeLost). A copy that loses runs to its end; its answer is
// discarded.
func (p *hostPool) hedge(c *pconn, cp *request, headAt time.Time) {
	defer p.t.wg.Done()
	orig := cp.copyOf
	resp, err := p.roundTripAttempts(cp)
	if err != nil {
		if u, ok := err.(*useH2); ok {
			u.h.release() // the host turned to HTTP/2: no copy there
		}
		return // orig goes on
	}
	if !orig.deliver(result{resp: resp, copied: true}) {
		// orig's answer came first, or its caller gave up.
		resp.Body.Close()
		return
	}
	if orig.probing() {
		// The probe's own answer may still come: a server that ran it
		// slowly (a pause, a lock) answers it as late again at most.
		// Until then its connection takes nothing new (it is slow).
		waited := time.Since(headAt)
		time.AfterFunc(waited, func() { p.probeLost(c, orig) })
		return
	}
	// A caller reading its own answer (a direct read, direct.go) is
	// woken by the close and takes the copy's.
	c.dropIfUnwanted()
}

// The probe's wait. A server that leaves what came with the request it
// answers unread (gunicorn's gthread worker) stalls the probe (scheduler.go,
// probeLocked) until it closes the idle connection: 2 s for gthread, with
// the connection taking nothing meanwhile (a quarter of the host's
// connections at MaxConnsPerHost 4). So a probe that is the head of its
// connection with nothing behind it, and has had no answer for
// probeWaitLocked, is copied once on another connection, as a late head
// is (lateHead, hedge): it is safe, as every pipelined request is. If the
// copy's answer comes first and the probe's does not come either while it
// waits as long again (a server that ran it slowly answers it by then: a
// request that is slow once, as the benchmarks' serial server makes one in
// a hundred, lost to its copy and cost a fallback), the server left the
// probe unread, which is a failure before proof: the host falls back
// (probeLost), and the stalled connection is closed. Otherwise the answer
// that comes second is discarded. One copy per time the host is unproven
// (hostPool.probeCopied), so a slow host that handles pipelining pays one
// duplicate request, not one per probe.
const (
	probeWaitMin   = 100 * time.Millisecond
	probeWaitDials = 4 // round trips (dials) a probe's answer may take past its turn
)

// probeWaitLocked returns how long a probe placed now may wait at the head
// of its connection (attempt.probeAfter): a few round trips, at least
// probeWaitMin, at most the head-of-line timeout.
func (p *hostPool) probeWaitLocked() time.Duration {
	d := max(probeWaitDials*p.dialTook, probeWaitMin)
	if hol := p.t.holTimeout(); hol > 0 {
		d = min(d, hol)
	}
	return d
}

// probeLost is called once the copy of probe a, the head of c, was
// answered first and a waited as long again: if a is still unanswered,
// the server left it unread. The host falls back, as for a failure before
// proof (notePipelineFailure), and c, which nothing else waits on, is
// closed.
func (p *hostPool) probeLost(c *pconn, a *attempt) {
	c.mu.Lock()
	unread := !c.dead && len(c.fifo) > 0 && c.fifo[0] == a && !a.headersRead
	c.mu.Unlock()
	if !unread {
		return // answered late, or the connection ended
	}
	now := time.Now()
	p.mu.Lock()
	if !p.pipeProven && !now.Before(p.fallbackUntil) {
		p.fallBackLocked(now)
	}
	p.mu.Unlock()
	c.dropIfUnwanted()
}

// depthLocked returns the host's effective pipeline depth: 1 through an
// HTTP forward proxy and while it is in fallback after pipeline failures,
// fewer behind a serial server's head (serialDepth), and fewer when its
// answers are large (bytesDepth). p.mu must be held.
func (p *hostPool) depthLocked() int {
	if p.key.forwardProxy() {
		// Requests to an HTTP proxy in absolute form are not pipelined,
		// as no browser pipelined through proxies: the proxy relays
		// what follows a request to the origin whatever it makes of it,
		// and one that ends each connection after one answer without
		// saying so (tinyproxy 1.11) hands a pipelined request to an
		// origin that has closed, whose reset cuts the answer before
		// it short. The caller has its head by then, so the request
		// cannot be sent again; net/http, which never pipelines, gets
		// it whole. Tunnels (CONNECT, SOCKS5) carry the origin's
		// requests untouched and are pipelined as a direct connection.
		return 1
	}
	if p.t.depth > 1 && !p.fallbackUntil.IsZero() && time.Now().Before(p.fallbackUntil) {
		return 1
	}
	d := p.t.depth
	if p.model.fixed {
		return d // learns nothing (TransportOptions.FixedPolicy)
	}
	if d > 1 && p.serialLocked() {
		d = serialDepth(d, p.dialTook, p.serviceGapLocked(), p.serialMixed)
	}
	return bytesDepth(d, p.bodyAvg)
}

// Pipelining large answers. Every answer in flight on a connection is
// read ahead into a buffer of its own (up to maxBufferedBody), so a
// connection K deep holds K bodies at once: 2.5 MiB at 256 KiB and depth
// 10, and the host's connections together more than the processor's
// caches, through which the kernel copies each body and the caller then
// reads it. The depth then costs more than it saves: one request behind
// the head is enough to keep a connection busy when a body takes longer to
// send than a round trip. So answers on a connection are held to about
// pipelineBytes in flight (at least 2 requests): depth 8 at 64 KiB, 2 from
// 256 KiB. Measured alone at 256 KiB (5 connections, 50 callers): depth 1
// read 5.5 GB/s, 2 6.2, 10 4.0; budgets of 256 KiB (slower at 64 and
// 128 KiB bodies) and 1 MiB (no better) were tried.
const (
	pipelineBytes = 512 << 10
	bodyAvgWeight = 1.0 / 8 // of a new body in the host's moving average
)

// bytesDepth is depth held to pipelineBytes of answers whose bodies
// average avg bytes (0: none seen yet), and never below 2 unless depth is.
func bytesDepth(depth int, avg float64) int {
	if depth <= 2 || avg <= 0 {
		return depth
	}
	return max(2, min(depth, int(pipelineBytes/avg)))
}

// noteBodyLocked adds a body of n bytes to the host's moving average: one
// of declared length at its head, a chunked one read whole at its end.
// p.mu must be held.
func (p *hostPool) noteBodyLocked(n int64) {
	if p.bodyAvg == 0 {
		p.bodyAvg = max(float64(n), 1)
		return
	}
	p.bodyAvg += (float64(n) - p.bodyAvg) * bodyAvgWeight
}

// Early re-sends for hosts that run requests one at a time. Against such
// a host (pool.go, noteOrderLocked) the service time is known (the gap
// between pipelined answers), so a head that has waited serialHOLGaps
// service times is late, whatever HeadOfLineTimeout says: the safe
// requests behind it (at most serialDepth-1, usually one) are re-sent
// elsewhere then. Each costs the server a duplicate, so early re-sends
// are held to a budget, as retry budgets are in Envoy and gRPC: each
// request placed earns hedgeRate of one, up to hedgeBurst, and each
// request re-sent from behind a late head spends one. Without budget, the
// head waits HeadOfLineTimeout.
//
// It is the host's one budget of duplicates (hostPool.dupBudget): copies
// of late heads (TransportOptions.HedgeHeadOfLine) and of a stalled probe
// spend it too, so that the duplicates the transport chooses to send cost
// a host's server at most about 2% more requests, however they came about
// (with a budget of their own, copies of late heads added theirs to the
// re-sends'). Requests moved from behind a head at HeadOfLineTimeout are
// not a choice (a client must be ready to send pipelined requests again,
// RFC 9112 §9.3.2) and spend nothing: charged, a late head with several
// requests behind it left nothing for the copies.
const (
	serialHOLGaps = 20
	serialHOLMin  = 10 * time.Millisecond
	hedgeRate     = 0.02
	hedgeBurst    = 10
)

// holAfterLocked returns the head-of-line threshold of a request placed
// now (attempt.holAfter): 0 for HeadOfLineTimeout, or an earlier one for
// a serial host while the budget lasts. It charges nothing: setSlow does.
func (p *hostPool) holAfterLocked() time.Duration {
	p.dupBudget = min(p.dupBudget+hedgeRate, hedgeBurst)
	if p.dupBudget < 1 || p.serialGap <= 0 || p.model.fixed || !p.serialLocked() {
		return 0
	}
	d := max(serialHOLGaps*p.serialGap, serialHOLMin)
	if d >= p.t.holTimeout() {
		return 0
	}
	return d
}

// serialLocked reports whether the host's "runs requests one at a time"
// verdict is in force.
func (p *hostPool) serialLocked() bool {
	return !p.serialUntil.IsZero() && time.Now().Before(p.serialUntil)
}

// serialAloneGaps is how many round trips a mixed serial host's service
// time must span for it not to be pipelined (serialDepth).
const serialAloneGaps = 10

// serialDepth is the depth for a host that runs a connection's requests
// one at a time (pool.go, noteOrderLocked), whose service time is about
// gap and whose dial took dial (one round trip, or a few with TLS). Such a
// server gains from pipelining only that the next request is already there
// when it ends one: a request written as an answer arrives must reach it
// within its service time of the request in progress. One request behind
// the head does that when a round trip is shorter than a service time;
// more requests behind add nothing but head-of-line waits (each slow
// answer delays every request behind it). So the depth is one plus the
// service times a round trip spans, at least 2 and at most the configured
// depth.
//
// Where service times are mixed (the verdict came from mixedOrder), even
// the one request behind costs more than it gains once a round trip is
// under a tenth of the service time: it saves the server a round trip's
// idle time, a few per cent, and waits out whatever the head takes, where
// a request left in the queue takes the first connection to come free
// (net/http's tail). Such a host is not pipelined (depth 1). Where service
// times are alike (a 1 ms server, slow once in a hundred), the request
// behind loses nothing to its head on most answers, and is kept: depth 1
// there measured 0.71-0.73x net/http's rate against 0.98-1.22x.
func serialDepth(depth int, dial, gap time.Duration, mixed bool) int {
	if gap <= 0 {
		return depth
	}
	if mixed && dial > 0 && gap >= serialAloneGaps*dial {
		return 1
	}
	d := 1 + int((dial+gap-1)/gap)
	return min(max(d, 2), depth)
}

// notePipelineFailure is called when c failed with err while unanswered
// requests were outstanding on it, the oldest written while nothing was
// in flight (headIdle) or pipelined, and late (headSlow) or not. Failures with more than one request
// outstanding, or whose oldest was pipelined (those behind it may have
// been re-sent from behind it already), count towards the depth fallback:
// three within pipelineFailureWindow; or the first one while the host is
// not proven to handle pipelining since its last fallback (pipeProven;
// scheduler.go, probeLocked), or
// whose oldest request, pipelined, had waited past the head-of-line
// timeout (headSlow). A server that drops what is pipelined (gunicorn's
// gthread worker leaves the requests that came in the same read as the
// one it answers unanswered until it closes the connection, seconds later)
// thus costs one stall, not three; and the fallbacks it earns in a row
// last longer and longer (fallBackLocked).
func (p *hostPool) notePipelineFailure(err error, unanswered int, headIdle, headSlow bool) {
	if unanswered < 2 && headIdle || p.t.depth <= 1 || !isPipelineFailure(err) {
		return
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if now.Before(p.fallbackUntil) {
		return // pipelined before the fallback began
	}
	if !p.pipeProven || !headIdle && headSlow {
		// Not proven to handle pipelining; or left a request unanswered
		// past the head-of-line timeout and then closed: it dropped
		// it (gthread), for no server closes on a request it runs.
		p.fallBackLocked(now)
		return
	}
	// Keep the times of the last pipelineFallbackAfter failures.
	p.pipeFailures = append(p.pipeFailures, now)
	if len(p.pipeFailures) > pipelineFallbackAfter {
		p.pipeFailures = p.pipeFailures[len(p.pipeFailures)-pipelineFallbackAfter:]
	}
	if len(p.pipeFailures) == pipelineFallbackAfter && now.Sub(p.pipeFailures[0]) <= pipelineFailureWindow {
		p.fallBackLocked(now)
	}
}

// maxFallbackFor bounds the length of a depth fallback.
const maxFallbackFor = 16 * pipelineFallbackFor

// fallbackFor is the length of a host's depth fallback after n others in a
// row: pipelineFallbackFor, doubled for each, up to maxFallbackFor.
func fallbackFor(n int) time.Duration {
	return min(pipelineFallbackFor<<min(n, 8), maxFallbackFor)
}

// fallBackLocked puts the host at depth 1 from now, for fallbackFor of the
// fallbacks in a row before it. Fallbacks are in a row unless the host
// went without one, after the last ended, for as long as that one lasted:
// a server that answers some pipelined requests and drops others (gthread)
// earns longer and longer ones, a host with a bad minute (a restart) does
// not. p.mu is held.
func (p *hostPool) fallBackLocked(now time.Time) {
	if p.fallbacks > 0 && now.Sub(p.fallbackUntil) >= fallbackFor(p.fallbacks-1) {
		p.fallbacks = 0
	}
	p.fallbackUntil = now.Add(fallbackFor(p.fallbacks))
	p.fallbacks++
	p.pipeProven, p.probeCopied = false, false
	p.pipeFailures = p.pipeFailures[:0]
}

// isPipelineFailure reports whether a connection that failed with err
// suggests that the host (or a middlebox) mishandles pipelining: a
// malformed response, or a close or reset the server did not announce.
// Closes the client caused, announced closes and timeouts do not count.
func isPipelineFailure(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrTransportClosed), err == errConnClosing, err == errIdleClosed,
		err == errIdleTimeout, err == errClosedIdle, err == errDrainTooLong, err == errUpgraded,
		err == ErrResponseHeaderTimeout, isTimeout(err):
		return false
	}
	var fe *FramingError
	if errors.As(err, &fe) || errors.Is(err, ErrUnsolicitedResponse) {
		return true
	}
	// An unannounced close or reset mid-pipeline.
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isConnReset(err)
}

func isConnReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// Late heads. A request written behind another waits, whatever its own
// service time, until the answer ahead of it is read; against a server
// whose answers mostly come at once and now and then late (one in a
// hundred after 200 ms, the rest after 1 ms), every request behind a late
// head waits out the late answer, where net/http, which writes each
// request on a connection of its own, waits only for its own. So a host
// keeps a moving average of how long its answers hold their connection's
// head (the usual wait, late ones left out), and another, over every
// answer, of the time spent in late ones: what a request written behind
// a head can expect to wait for it beyond the usual. While that is as
// long as the usual wait itself, pipelining costs the requests behind
// more than it saves them, and the pipelining threshold no longer holds
// back the dials of pipelineable requests (hostPool.gainsLocked): up to
// MaxConnsPerHost (no limit by default, as net/http), a request takes a
// connection of its own rather than a place behind a head. A limit that
// is reached still pipelines, as before.
//
// Measured: a migrated service (OptionsFrom(http.DefaultTransport))
// against a server that runs pipelined requests at once, 1% of its
// answers after 200 ms, ran at 0.23x net/http's requests per second at
// 50 callers before this rule and 1.20x after (benchmarks suite "slow").
const (
	lateHeadWaits   = 20                    // a head is late after this many of the host's usual waits
	lateHeadMin     = 50 * time.Millisecond // and never sooner
	usualWaitWeight = 1.0 / 16              // of a new wait in the usual one
	lateWaitWeight  = 1.0 / 128             // of a new answer in the late average: one rare late answer turns nothing
)

// headWaits is a host's record of how long its answers hold their
// connections' heads, guarded by hostPool.mu.
type headWaits struct {
	usual time.Duration // moving average of the waits that were not late
	late  float64       // moving average over all answers of their late waits (0 if not late), in ns
	mixed bool          // late >= usual: requests written behind a head lose by it
}

// lateAfter is how long a head may wait before it is late.
func (h *headWaits) lateAfter() time.Duration {
	return max(lateHeadWaits*h.usual, lateHeadMin)
}

// note adds an answer that came wait after its request became the head
// of its connection. The verdict turns on once the late average reaches
// the usual wait, and off once it falls below half of it.
func (h *headWaits) note(wait time.Duration) {
	if h.usual == 0 {
		h.usual = wait // the first answer is the usual one, late or not: nothing is known before it
	}
	lateWait := 0.0
	if wait >= h.lateAfter() {
		lateWait = float64(wait)
	} else {
		h.usual += time.Duration(float64(wait-h.usual) * usualWaitWeight)
		h.usual = max(h.usual, 1)
	}
	h.late += (lateWait - h.late) * lateWaitWeight
	switch {
	case h.late >= float64(h.usual):
		h.mixed = true
	case h.late < float64(h.usual)/2:
		h.mixed = false
	}
}
