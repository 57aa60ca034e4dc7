package pipelined

// HTTP/2 where the server speaks it (docs/design.md, "HTTP/2").
//
// A host's protocol is learned from its first connection: an https dial
// offers "h2" and "http/1.1" in ALPN (RFC 7301), and a connection on which
// the server chose "h2" is handed to the host's h2Host instead of becoming a
// pipelined connection. From then on the host's requests go to the h2Host,
// which multiplexes them over the standard library's HTTP/2 client
// connections (http.ClientConn, Go 1.26): no HTTP/2 framing is written here.
//
// http.Transport.NewClientConn dials by itself. To keep this Transport's own
// dialing (DialContext, DialTLSContext, TLSClientConfig, proxies, the
// httptrace connect and TLS hooks), each Transport has a private
// http.Transport whose dial functions return the connection we already
// dialed and handshook, carried in the context given to NewClientConn.
// net/http's dialConn makes an HTTP/2 ClientConn of a *tls.Conn whose
// NegotiatedProtocol is "h2" (or, for prior-knowledge h2c, of a plain
// connection when Protocols has UnencryptedHTTP2 and not HTTP1).
//
// A host's HTTP/2 side (h2Host) owns its connections, dials and queue count
// under h2Host.mu, taken after hostPool.mu; the Transport's private
// http.Transport is built once (h2Config, sync.Once).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// ALPN offers (RFC 7301 §3.1: in order of preference).
var (
	alpnHTTP1  = []string{"http/1.1"}
	alpnH2     = []string{"h2", "http/1.1"}
	alpnH2Only = []string{"h2"}
)

// h2Config is what a Transport does with HTTP/2, fixed by init from
// TransportOptions.Protocols; read-only after init, except rt.
type h2Config struct {
	tls     bool // offer "h2" to https targets
	tlsH1   bool // offer "http/1.1" to https targets too
	cleartx bool // prior-knowledge h2c for http targets (not through HTTP proxies)

	rtOnce sync.Once
	rt     *http.Transport // private: makes ClientConns of our connections
}

// init derives the HTTP/2 settings from o, whose defaults are applied.
// Protocols nil means HTTP/1 and HTTP/2 (net/http, whose default depends on
// other fields, has its choice carried by OptionsFrom). An empty set means
// HTTP/1, as in net/http. DisableKeepAlives and GODEBUG=http2client=0 turn
// HTTP/2 off.
func (c *h2Config) init(o *TransportOptions) {
	if o.DisableKeepAlives || http2DisabledByGODEBUG() {
		return
	}
	p := o.Protocols
	if p == nil {
		c.tls, c.tlsH1 = true, true
		return
	}
	c.tls = p.HTTP2()
	c.tlsH1 = p.HTTP1() || !p.HTTP2()
	// net/http's Transport.Protocols: unencrypted HTTP/2 is used for
	// http:// URLs if the set includes UnencryptedHTTP2 and not HTTP1.
	c.cleartx = p.UnencryptedHTTP2() && !p.HTTP1()
}

// http2DisabledByGODEBUG reports whether the GODEBUG environment variable
// has http2client=0, which disables net/http's HTTP/2 client (and so
// NewClientConn's). The last setting wins, as in internal/godebug.
func http2DisabledByGODEBUG() bool {
	off := false
	for _, kv := range strings.Split(os.Getenv("GODEBUG"), ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(kv), "http2client="); ok {
			off = v == "0"
		}
	}
	return off
}

// offersH2 reports whether connections of key's pool may be HTTP/2.
func (t *Transport) offersH2(key poolKey) bool {
	switch key.scheme {
	case "https":
		return t.h2.tls && !key.onlyH1
	case "http":
		return t.h2.cleartx && !key.forwardProxy()
	}
	return false
}

// alpn returns the ALPN protocols offered to key's target.
func (t *Transport) alpn(key poolKey) []string {
	switch {
	case !t.offersH2(key):
		return alpnHTTP1
	case t.h2.tlsH1:
		return alpnH2
	default:
		return alpnH2Only
	}
}

// isH2 reports whether a connection dialed for key, with TLS state state
// (nil for cleartext), is to be spoken to in HTTP/2.
func (t *Transport) isH2(key poolKey, state *tls.ConnectionState) bool {
	if !t.offersH2(key) {
		return false
	}
	if key.scheme == "http" {
		return true // prior knowledge (RFC 9113 §3.3)
	}
	return state != nil && state.NegotiatedProtocol == "h2"
}

// requiresHTTP1 reports whether req cannot be sent over HTTP/2: CONNECT
// (a tunnel in HTTP/1.1 terms; RFC 9113 §8.5 redefines it) and Upgrade
// (RFC 9113 §8.6: HTTP/2 has no 101 Switching Protocols).
func requiresHTTP1(req *http.Request) bool {
	return req.Method == http.MethodConnect ||
		httpguts.HeaderValuesContainsToken(req.Header["Connection"], "upgrade")
}

// h2ConnKey is the context key under which NewClientConn's dial finds the
// connection to adopt.
type h2ConnKey struct{}

// privateTransport returns the Transport's private http.Transport, whose
// only job is NewClientConn over connections we dialed.
func (t *Transport) privateTransport() *http.Transport {
	t.h2.rtOnce.Do(func() {
		adopt := func(ctx context.Context, _, _ string) (net.Conn, error) {
			if c, ok := ctx.Value(h2ConnKey{}).(net.Conn); ok {
				return c, nil
			}
			return nil, errors.New("pipelined: no connection to adopt")
		}
		var p http.Protocols
		p.SetHTTP2(true)
		p.SetUnencryptedHTTP2(true)
		rt := &http.Transport{
			DialContext:            adopt,
			DialTLSContext:         adopt,
			Protocols:              &p,
			DisableCompression:     t.opts.DisableCompression,
			MaxResponseHeaderBytes: t.opts.MaxResponseHeaderBytes,
			// Negative durations mean "none" here, zero in net/http.
			IdleConnTimeout:       max(t.opts.IdleConnTimeout, 0),
			ResponseHeaderTimeout: max(t.opts.ResponseHeaderTimeout, 0),
			ExpectContinueTimeout: max(t.opts.ExpectContinueTimeout, 0),
			ReadBufferSize:        t.opts.ReadBufferSize,
			WriteBufferSize:       t.opts.WriteBufferSize,
		}
		if t.opts.HTTP2 != nil {
			c := *t.opts.HTTP2
			rt.HTTP2 = &c
		}
		t.h2.rt = rt
	})
	return t.h2.rt
}

// h2Host serves one host's requests over HTTP/2 ClientConns.
//
// Scheduling follows the HTTP/1 pool's rules with a connection's capacity
// being its free streams (ClientConn.Available, the server's
// SETTINGS_MAX_CONCURRENT_STREAMS less the streams in use, RFC 9113
// §5.1.2): an idle connection first, else the one with the most free
// streams; a new connection only when no stream is free, one dial at a
// time, within MaxConnsPerHost; otherwise the request waits, cancellable,
// for a connection's state hook or a dial to change something.
//
// Streams are not reserved (ClientConn.Reserve): until a new connection
// has the server's SETTINGS it assumes 100 streams, and if the server then
// allows fewer than are reserved, the request holding the connection's
// header lock waits for a slot that only the requests queued behind that
// lock could free (awaitOpenSlotForStreamLocked counts their reservations:
// a deadlock, Go 1.26). Without reservations a request that finds a free
// stream and loses it to another waits inside RoundTrip for the next one,
// as with net/http's StrictMaxConcurrentRequests.
type h2Host struct {
	t    *Transport
	key  poolKey
	dial func(ctx context.Context) (net.Conn, *tls.ConnectionState, error)

	// mu guards the fields below and the scheduling fields of each
	// h2Conn. It is never held while calling a method of http.ClientConn
	// (the state hook, which takes mu, may run synchronously inside
	// RoundTrip, Reserve, Release, Close and Body.Close: golang/go#80680),
	// a dial, or a user callback. Lock order: hostPool.mu, then mu.
	mu      sync.Mutex
	conns   []*h2Conn // usable or draining, not closed
	dialing int
	dials   map[*h2Dial]struct{}
	queued  int           // requests waiting for a stream
	gen     uint64        // counts the changes that may free a stream
	changed chan struct{} // closed and replaced on a change if queued > 0
	closed  bool
	// answered: a request of the host got a response over HTTP/2, so its
	// server allows streams (h2MaxDials).
	answered bool
	// retired counts the connections retired and closed, by reason, for
	// Stats.
	retired Retirements

	// demoted: the host's latest dial negotiated HTTP/1.1 (another server
	// at the same address, or a configuration changed): its requests go
	// to the HTTP/1 pool, as net/http follows each connection's protocol.
	// Set by this side's dial, under mu; cleared by hostPool.h2Dialed when
	// a dial of the HTTP/1 pool negotiates h2 again; read without a lock.
	demoted atomic.Bool
	// toH1 hands a connection that negotiated HTTP/1.1 to the HTTP/1 pool
	// (hostPool.h1Dialed), with the time its dial took.
	toH1 func(net.Conn, *tls.ConnectionState, time.Duration)
	// onEmpty runs when the host may have nothing left (no connection,
	// dial, waiter or user): Transport.removeIfEmpty of its pool, which
	// forgets both sides and sets gone. users counts the requests that
	// hold the h2Host (speaksH2, a useH2 given) until h2Host.do ends: the
	// host is not gone while one does, and a request that finds it gone
	// does not use it (both atomics, so that one of the two sees the
	// other: goneIfEmpty, speaksH2).
	onEmpty func()
	users   atomic.Int32
	gone    atomic.Bool
}

// h2Conn is one HTTP/2 connection of an h2Host.
type h2Conn struct {
	cc     *http.ClientConn
	conn   net.Conn  // for httptrace.GotConnInfo
	id     uint64    // for the Observer
	opened time.Time // for the Observer

	// Guarded by h2Host.mu.
	claims    int         // requests that chose it and are in RoundTrip
	used      bool        // has carried a request
	busy      bool        // streams in flight as last seen
	closing   bool        // being closed by closeIdle, or retired: takes nothing new
	retired   bool        // older than its lifetime: closes once unused, takes nothing new again (lifetime.go)
	due       bool        // older than its lifetime, its replacement being dialed
	lifeTimer *time.Timer // fires at the end of its lifetime
	why       CloseReason // set before we close it, for the Observer
	idleSince time.Time   // when busy last became false
	idleTimer *time.Timer // armed when it becomes idle (armIdleLocked)
	settled   bool        // has applied the server's SETTINGS (h2Retry, takesLocked)
}

// h2Dial is a dial in progress, guarded by h2Host.mu.
type h2Dial struct {
	cancel    context.CancelFunc
	abandoned bool // cancelled by closeIdle
}

// newH2Host returns the HTTP/2 side of key's pool. dial opens a new
// connection the way the HTTP/1 pool does (Transport.dial).
func newH2Host(t *Transport, key poolKey, dial func(ctx context.Context) (net.Conn, *tls.ConnectionState, error)) *h2Host {
	return &h2Host{t: t, key: key, dial: dial, changed: make(chan struct{}), dials: make(map[*h2Dial]struct{})}
}

// broadcastLocked records a change and wakes every request waiting for a
// stream.
func (h *h2Host) broadcastLocked() {
	h.gen++
	if h.queued > 0 {
		close(h.changed)
		h.changed = make(chan struct{})
	}
}

// beginAdopt counts a connection about to be adopted as a dial in
// progress, so that requests arriving meanwhile wait for it instead of
// dialing; adopt ends it.
func (h *h2Host) beginAdopt() {
	h.mu.Lock()
	h.dialing++
	h.mu.Unlock()
}

// servesLocked reports whether h has a connection that takes requests, or
// one being adopted or dialed; p.mu is held (the lock order allows h.mu
// inside).
func (h *h2Host) servesLocked() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.demoted.Load() || h.closed {
		return false
	}
	if h.dialing > 0 {
		return true
	}
	for _, c := range h.conns {
		if c.takesLocked(false) {
			return true
		}
	}
	return false
}

// adopt takes a connection the HTTP/1 pool dialed and found to be HTTP/2
// (state is nil for h2c), announced by beginAdopt. It closes conn on
// failure.
func (h *h2Host) adopt(conn net.Conn, state *tls.ConnectionState) error {
	c, err := h.newConn(conn)
	if err == nil {
		err = h.add(c)
	}
	h.mu.Lock()
	h.dialing--
	h.broadcastLocked()
	h.mu.Unlock()
	return err
}

// newConn makes an HTTP/2 ClientConn of conn. It closes conn on failure.
func (h *h2Host) newConn(conn net.Conn) (*h2Conn, error) {
	// No httptrace in this context: the dial's hooks have fired already.
	ctx := context.WithValue(h.t.ctx, h2ConnKey{}, conn)
	scheme := h.key.scheme
	if _, ok := conn.(*tls.Conn); !ok {
		// A TLS connection of DialTLSContext's that is not a *tls.Conn
		// (tlsStater) negotiated h2: Go 1.26's net/http would take it for
		// HTTP/1.1 over https, so it is handed over as a connection to
		// speak HTTP/2 on from the start (the private Transport's
		// UnencryptedHTTP2), which it is, TLS being below it already.
		scheme = "http"
	}
	cc, err := h.t.privateTransport().NewClientConn(ctx, scheme, h.key.addr)
	if err != nil {
		conn.Close()
		return nil, err
	}
	now := time.Now()
	return &h2Conn{cc: cc, conn: conn, id: h.t.connIDs.Add(1), opened: now, idleSince: now}, nil
}

// add puts c in the pool and watches its state; it closes c if the host is
// closed.
func (h *h2Host) add(c *h2Conn) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		c.cc.Close()
		return ErrTransportClosed
	}
	h.conns = append(h.conns, c)
	h.armIdleLocked(c) // idle until a request chooses it
	h.startLifeTimerLocked(c)
	h.broadcastLocked()
	h.mu.Unlock()
	h.observeConn(c, true, nil)
	// Outside mu: SetStateHook may run the hook at once.
	c.cc.SetStateHook(func(*http.ClientConn) { h.stateChanged(c) })
	return nil
}

// stateChanged is c's state hook: a stream came free, a request ended, or
// the connection became unusable. It may run inside a ClientConn method
// called by any goroutine, so it takes no lock but mu and calls no user
// code. do also calls it after each RoundTrip, for the streams the hook
// does not report.
func (h *h2Host) stateChanged(c *h2Conn) {
	// Err, InFlight and Available are read one at a time, so no
	// combination of them is a snapshot: only Err decides. A connection
	// that received GOAWAY (RFC 9113 §6.8) has no free stream, so takes
	// nothing new, and closes itself when its last stream ends.
	err := c.cc.Err()
	dead := err != nil
	idle := !dead && c.cc.InFlight() == 0
	h.mu.Lock()
	removed := false
	if dead {
		removed = h.removeLocked(c)
	} else if idle && c.busy {
		c.busy = false
		c.idleSince = time.Now()
		h.armIdleLocked(c)
	}
	why := c.why
	retired := c.retired && idle
	h.broadcastLocked()
	h.mu.Unlock()
	if removed {
		h.observeClosed(c, why, err)
		h.maybeEmpty()
	}
	if retired {
		h.closeRetired(c)
	}
}

// observeConn reports c opened to the Observer. HTTP/2 connections report
// no ConnActive or ConnIdle: streams come and go inside the standard
// library's client connection.
func (h *h2Host) observeConn(c *h2Conn, opened bool, err error) {
	if o := h.t.opts.Observer; o != nil && o.ConnOpened != nil {
		o.ConnOpened(ConnEvent{Time: c.opened, ID: c.id, Host: h.key.String(), Addr: h.key.addr, Protocol: protoHTTP2, RemoteAddr: c.conn.RemoteAddr(), Opened: c.opened})
	}
}

// observeClosed reports c closed: by us for why, or else (why 0) by the
// server, CloseServer. The standard library's ClientConn says only that it
// is closed (Err: "connection closed"), not whether the server sent
// GOAWAY, closed or reset it, nor after what error.
func (h *h2Host) observeClosed(c *h2Conn, why CloseReason, err error) {
	o := h.t.opts.Observer
	if o == nil || o.ConnClosed == nil {
		return
	}
	ev := ConnEvent{Time: time.Now(), ID: c.id, Host: h.key.String(), Addr: h.key.addr, Protocol: protoHTTP2, RemoteAddr: c.conn.RemoteAddr(), Opened: c.opened, Reason: why}
	if why == 0 {
		ev.Reason = CloseServer
	}
	o.ConnClosed(ev)
}

func (h *h2Host) removeLocked(c *h2Conn) bool {
	i := slices.Index(h.conns, c)
	if i < 0 {
		return false
	}
	h.conns = slices.Delete(h.conns, i, i+1)
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	if c.lifeTimer != nil {
		c.lifeTimer.Stop()
	}
	h.retired.count(c.why)
	return true
}

func (h *h2Host) canDialLocked() bool {
	return !h.closed && (h.t.maxConns <= 0 || len(h.conns)+h.dialing < h.t.maxConns)
}

var errNoStream = errors.New("pipelined: no HTTP/2 stream available")

// h2MaxDials bounds the dials one request starts: each dial that succeeds
// without leaving it a stream (a server that allows none) may start another.
// A dial whose stream other requests took, once the server is known to
// allow some (h2Host.answered), does not count.
const h2MaxDials = 4

// acquire chooses a connection with a free stream for a request with
// context ctx, and claims it (see release). dials counts the dials the
// request started. It returns the connection and the httptrace
// GotConnInfo of the choice.
//
// early reports that the connection had not yet applied the server's
// SETTINGS when it was chosen, so that it may take more streams than the
// server allows (h2Retry). With settledOnly (a request such a connection
// refused), the request takes no such connection unless the connection
// has no request, for a server refuses no connection's first stream.
func (h *h2Host) acquire(ctx context.Context, dials *int, settledOnly bool) (c *h2Conn, info httptrace.GotConnInfo, early bool, err error) {
	var buf [8]h2Choice
	var dialRes chan error // the result of the dial this request started
	for {
		conns, gen, err := h.choices(&buf, settledOnly)
		if err != nil {
			return nil, httptrace.GotConnInfo{}, false, err
		}
		// Idle first, then the most free streams. Outside mu.
		best, bestAvail, bestClaims, bestIdle := h2Best(conns)
		clear(buf[:])
		if best != nil {
			info, early, ok := h.claim(best, bestAvail, bestClaims, bestIdle, settledOnly)
			if !ok {
				continue
			}
			return best, info, early, nil
		}

		// No stream is free.
		if err := h.waitStream(ctx, gen, dials, &dialRes); err != nil {
			return nil, httptrace.GotConnInfo{}, false, err // do's release asks maybeEmpty
		}
	}
}

// choices returns, in buf, the connections that may take a request (see
// takesLocked) with the claims on each, and the generation (h.gen) of that
// look; or why no connection of h will (closed, or the host turned back to
// HTTP/1.1). It takes h.mu.
func (h *h2Host) choices(buf *[8]h2Choice, settledOnly bool) ([]h2Choice, uint64, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, 0, ErrTransportClosed
	}
	if h.demoted.Load() {
		h.mu.Unlock()
		return nil, 0, errUseH1
	}
	gen := h.gen
	conns := buf[:0]
	for _, c := range h.conns {
		if c.takesLocked(settledOnly) {
			conns = append(conns, h2Choice{c, c.claims})
		}
	}
	h.mu.Unlock()
	return conns, gen, nil
}

// h2Best returns the connection of conns a request takes: an idle one
// first, then the one with the most free streams (h2Free); nil if none has
// a free stream. It calls the ClientConns, outside h2Host.mu.
func h2Best(conns []h2Choice) (best *h2Conn, bestAvail, bestClaims int, bestIdle bool) {
	for _, ch := range conns {
		// InFlight first: a stream opened between the two looks then
		// makes the sum smaller than the limit, not larger.
		inFlight := ch.c.cc.InFlight()
		avail, idle := h2Free(ch.c.cc.Available(), inFlight, ch.claims)
		if avail == 0 {
			continue
		}
		if best == nil || (idle && !bestIdle) || (idle == bestIdle && avail > bestAvail) {
			best, bestAvail, bestClaims, bestIdle = ch.c, avail, ch.claims, idle
		}
	}
	return best, bestAvail, bestClaims, bestIdle
}

// claim claims best, chosen by h2Best with bestAvail free streams and
// bestClaims claims, unless it changed since (ok false: look again). It
// returns the httptrace GotConnInfo of the choice, and whether best had not
// applied the server's SETTINGS yet (early). It takes h.mu.
func (h *h2Host) claim(best *h2Conn, bestAvail, bestClaims int, bestIdle, settledOnly bool) (info httptrace.GotConnInfo, early, ok bool) {
	h.mu.Lock()
	// Others may have claimed its free streams since the look.
	if h.closed || !best.takesLocked(settledOnly) || best.claims-bestClaims >= bestAvail {
		h.mu.Unlock()
		return httptrace.GotConnInfo{}, false, false
	}
	info = httptrace.GotConnInfo{Conn: best.conn, Reused: best.used, WasIdle: best.used && bestIdle}
	if info.WasIdle && !best.busy { // else its hook has not run yet
		info.IdleTime = time.Since(best.idleSince)
	}
	best.claims++
	best.used, best.busy = true, true
	early = !best.settled
	h.mu.Unlock()
	return info, early, true
}

// waitStream waits, as no stream was free at the look of generation gen,
// for a change of h, or for the dial it starts (dialRes, the dial of this
// request, within h2MaxDials: dials counts them), or for ctx's end. nil
// means the request looks again. It takes h.mu.
func (h *h2Host) waitStream(ctx context.Context, gen uint64, dials *int, dialRes *chan error) error {
	h.mu.Lock()
	if h.gen != gen {
		h.mu.Unlock()
		return nil // something changed since the look
	}
	if *dialRes == nil && h.dialing == 0 && h.canDialLocked() {
		if *dials >= h2MaxDials {
			h.mu.Unlock()
			return errNoStream
		}
		*dials++
		*dialRes = h.startDialLocked(ctx, nil)
	}
	h.queued++
	changed := h.changed
	h.mu.Unlock()
	var err error
	dialed := false
	select {
	case <-changed:
	case err = <-*dialRes:
		*dialRes = nil
		dialed = err == nil
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	h.mu.Lock()
	h.queued--
	if dialed && h.answered {
		*dials-- // lost to other requests, not to a server allowing none
	}
	h.mu.Unlock()
	return err
}

// h2Choice is a connection as acquire saw it under h2Host.mu.
type h2Choice struct {
	c      *h2Conn
	claims int
}

// h2Free estimates the free streams of a connection whose ClientConn
// reports avail free streams and inFlight streams in use, and which claims
// requests chose (h2Conn.claims, requests inside RoundTrip): idle reports
// that it has no stream and no claim. A request that chose the connection
// opens its stream inside RoundTrip, a moment later, so a burst that went
// by Available alone would choose the same connection until its first
// streams opened: 238 of 300 requests on one connection, the rest waiting
// there for a stream while others stood free. The streams in use are at
// least the claims (each becomes one) and at least inFlight (which also
// counts streams whose requests returned and whose bodies are still
// flowing), so the larger of the two is taken off the connection's limit,
// avail + inFlight. It may count a stream twice for a moment, never a
// claim not at all.
func h2Free(avail, inFlight, claims int) (free int, idle bool) {
	free = max(0, avail-max(0, claims-inFlight))
	return free, inFlight == 0 && claims == 0
}

// takesLocked reports whether c may take one more request: it is not
// closing, and, for a request that a connection refused before it had the
// server's SETTINGS (settledOnly), it has them, or no request: no server
// refuses a connection's first stream (h2Retry). h2Host.mu is held.
func (c *h2Conn) takesLocked(settledOnly bool) bool {
	switch {
	case c.closing:
		return false
	case settledOnly:
		return c.settled || c.claims == 0
	}
	return true
}

// startDialLocked dials a new connection in its own goroutine, as the
// HTTP/1 pool does: with the values of the request that started it but not
// its cancellation (it is cancelled by Transport.Close, and by closeIdle
// when nobody waits). Its outcome is sent on the returned channel; a new
// connection joins the pool whoever is waiting. replaces, if not nil, is
// the connection past its lifetime that the dial replaces: it retires
// when the dial ends (lifetime.go).
func (h *h2Host) startDialLocked(reqCtx context.Context, replaces *h2Conn) chan error {
	t := h.t
	h.dialing++
	res := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.WithoutCancel(reqCtx))
	d := &h2Dial{cancel: cancel}
	h.dials[d] = struct{}{}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		stop := context.AfterFunc(t.ctx, cancel)
		start := time.Now()
		conn, state, err := h.dial(ctx)
		took := time.Since(start)
		stop()
		cancel()
		if err == nil && !t.isH2(h.key, state) {
			// RFC 7301 §3.2: the connection speaks the protocol it
			// negotiated, HTTP/1.1 here. The host turns back to HTTP/1.1,
			// its requests moving to the HTTP/1 pool, which takes the
			// connection.
			h.mu.Lock()
			h.demoted.Store(true)
			h.broadcastLocked()
			h.mu.Unlock()
			h.toH1(conn, state, took)
			err = errUseH1
		}
		var c *h2Conn
		if err == nil {
			c, err = h.newConn(conn)
		}
		if err == nil {
			err = h.add(c)
		}
		h.mu.Lock()
		h.dialing--
		delete(h.dials, d)
		if d.abandoned && err != nil {
			err = nil // cancelled by closeIdle while nobody waited
		}
		h.broadcastLocked()
		h.mu.Unlock()
		res <- err
		if replaces != nil {
			h.retire(replaces)
		}
		if err != nil || c == nil {
			h.maybeEmpty()
		}
	}()
	return res
}

// maybeEmpty asks for the host's pool to be forgotten if the host may
// have nothing left: after a connection left, a dial failed, or a waiter
// gave up. Without mu.
func (h *h2Host) maybeEmpty() {
	h.mu.Lock()
	empty := len(h.conns) == 0 && h.dialing == 0 && h.queued == 0 && !h.closed
	h.mu.Unlock()
	if empty && h.users.Load() == 0 && !h.gone.Load() && h.onEmpty != nil {
		h.onEmpty()
	}
}

// goneIfEmpty marks the host gone if it has no connection, dial, waiter or
// user, and reports whether it did; hostPool.mu is held (removeIfEmpty).
func (h *h2Host) goneIfEmpty() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.conns) > 0 || h.dialing > 0 || h.queued > 0 || h.users.Load() > 0 {
		return false
	}
	h.gone.Store(true)
	if h.users.Load() > 0 { // speaksH2 took it meanwhile
		h.gone.Store(false)
		return false
	}
	return true
}

// release ends a use of h (see users), at the end of h2Host.do or for a
// useH2 its request did not take up.
func (h *h2Host) release() {
	if h.users.Add(-1) == 0 {
		h.maybeEmpty()
	}
}

// Retries, as net/http's HTTP/2 transport (h2_bundle.go, RoundTripOpt and
// shouldRetryRequest): at most 6 retries, the first at once, then after
// 1 s, 2 s, 4 s… with 10% jitter; but only failures that say something is
// wrong count toward the wait (h2Retry).
const h2MaxRetries = 6

// roundTrip sends req over one of the host's HTTP/2 connections.
func (h *h2Host) roundTrip(req *http.Request) (*http.Response, error) {
	return h.do(req, false, nil)
}

// redirect sends over HTTP/2 a request that the HTTP/1 pool queued while
// the host's first connection was being dialed: its httptrace GetConn has
// fired already, and so has its Observer's RequestQueued, whose event
// (with the time spent queued so far) is queued, nil without an Observer.
// The request's other events, RequestDone included, are reported here.
func (h *h2Host) redirect(req *http.Request, queued *RequestEvent) (*http.Response, error) {
	return h.do(req, true, queued)
}

func (h *h2Host) do(req *http.Request, gotConnFired bool, queued *RequestEvent) (resp *http.Response, err error) {
	defer h.release() // the use the caller took (speaksH2, useH2)
	ctx := req.Context()
	trace := httptrace.ContextClientTrace(ctx)
	ob := h.obsFor(req, gotConnFired, queued)
	if ob != nil {
		defer func() {
			if _, moved := err.(*useH1); !moved { // the HTTP/1 side reports the rest
				ob.done(resp, err)
			}
		}()
	}
	// The deprecated Request.Cancel, while the request waits for a stream
	// (legacycancel.go); once it has one, the standard library's client
	// watches it.
	wctx, endLegacy := h.t.legacyCancelContext(ctx, req)
	if endLegacy != nil {
		defer endLegacy()
	}
	dials, strikes, settledOnly := 0, 0, false
	cur := req
	for retry := 0; ; retry++ {
		if trace != nil && trace.GetConn != nil && (retry > 0 || !gotConnFired) {
			trace.GetConn(h.key.dialAddr())
		}
		ob.queued(retry)
		c, info, early, err := h.acquire(wctx, &dials, settledOnly)
		if err == errUseH1 {
			// Nothing was sent: cur goes to the HTTP/1 pool as it is.
			return nil, &useH1{req: cur, ev: ob.event()}
		}
		if err != nil {
			closeBody(cur)
			return nil, err
		}
		if trace != nil && trace.GotConn != nil {
			trace.GotConn(info)
		}
		ob.assigned(c)
		resp, err := c.cc.RoundTrip(ob.watchWrite(cur)) // consumes the body
		fail := h2Classify(err)
		h.roundTripped(c, err, fail)
		if err == nil {
			ob.headers(resp.StatusCode)
			resp.Request = req
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if fail == h2Final {
			var final bool
			if err, final = h2FinalLost(c, err, early, cur); final {
				return nil, err
			}
			fail = h2Lost
		}
		if ob != nil {
			ob.lost = fail == h2Lost
		}
		if retry >= h2MaxRetries {
			return nil, err
		}
		next, rerr := h2Rewind(cur, err)
		if rerr != nil {
			return nil, rerr
		}
		cur = next
		var wait time.Duration
		wait, strikes = h2Retry(fail, early, strikes)
		// Refused by a connection that did not know the server's limit,
		// the request waits for one that does rather than meet the same
		// on another new connection.
		settledOnly = settledOnly || fail == h2Refused && early
		if err := h2RetryWait(wctx, wait); err != nil {
			closeBody(cur)
			return nil, err
		}
	}
}

// obsFor returns what the Observer's events of req carry over HTTP/2 (nil
// without an Observer): new, or, for a request the HTTP/1 pool queued
// (gotConnFired, redirect), its queued event continued.
func (h *h2Host) obsFor(req *http.Request, gotConnFired bool, queued *RequestEvent) *h2Obs {
	var ob *h2Obs
	if !gotConnFired {
		ob = h.newObs(req)
	} else if queued != nil {
		ob = &h2Obs{o: h.t.opts.Observer, ev: *queued, first: queued.Attempt, redirected: true}
	}
	return ob
}

// roundTripped records the end of a request's RoundTrip on c, which
// failed with err (nil: a response) as fail says: c's claim is given back,
// and the state hook runs. It takes h.mu.
func (h *h2Host) roundTripped(c *h2Conn, err error, fail h2Failure) {
	h.mu.Lock()
	c.claims--
	if err == nil || fail == h2Refused || fail == h2PeerProtocol {
		// The server's frames about this stream came after its
		// SETTINGS (RFC 9113 §3.4: the first frame it sends), which
		// the connection has applied by now.
		c.settled = true
	}
	if err == nil {
		h.answered = true
	}
	h.mu.Unlock()
	// The state hook does not report a stream that began and ended
	// between two of the ClientConn's looks at its state (it compares
	// the free streams and those in flight with the last look's, and
	// looks at the end of RoundTrip, not at its start): a short
	// stream, over before RoundTrip returned, is never reported, and
	// requests waiting for a stream would wait for ever. So the hook
	// runs here too; a stream still open now ends after that look,
	// and the hook reports it.
	h.stateChanged(c)
}

// h2FinalLost decides on err, a failure of cur's RoundTrip on c that
// h2Classify found final (h2Final): it stays final (final true, with the
// error the request returns) unless c failed under cur (h2ConnLost says
// so), c had applied the server's SETTINGS (not early) and cur may be sent
// again; then it returns c's failure, and the request is sent again as
// for h2Lost.
func h2FinalLost(c *h2Conn, err error, early bool, cur *http.Request) (_ error, final bool) {
	if c.cc.Err() == nil { // the stream failed, not the connection
		return err, true
	}
	lost := h2ConnLost(err)
	if _, gone := lost.(*ConnError); !gone || early || !replayable(cur) {
		return lost, true
	}
	// RFC 9110 §9.2.2: an idempotent request whose connection
	// failed under it may be sent again, as over HTTP/1.1
	// (checkRetry), if the connection had responded before: a
	// server closing an idle connection as a request went out
	// (HAProxy's timeout http-keep-alive) or reset it. A new
	// connection's failure is final, as in net/http. The other
	// streams of a connection whose write failed end "force
	// closed" (the standard library closes it).
	return lost, false
}

// h2RetryWait waits wait before a retry (none if it is 0), with 10%
// jitter, as net/http; or until wctx is done, whose cause it returns.
func h2RetryWait(wctx context.Context, wait time.Duration) error {
	if wait > 0 {
		wait += time.Duration(rand.Int64N(int64(wait / 10))) // 10% jitter, as net/http
		tm := time.NewTimer(wait)
		select {
		case <-tm.C:
		case <-wctx.Done():
			tm.Stop()
			return context.Cause(wctx)
		}
	}
	return nil
}

// Errors of net/http's HTTP/2 client that say a request was not processed
// (h2_bundle.go in Go 1.26, net/http/internal/http2 in Go 1.27, the same
// texts; unexported there, so matched by text).
const (
	h2ErrConnUnusable = "http2: client conn not usable"
	// A new connection that closed before its first stream began (a
	// server's idle timeout that ran out while the connection waited to
	// be used, under load): nothing was sent. net/http's HTTP/2 client
	// ends its own retry loop on it; here it is sent again like the other
	// h2Ended failures, within h2Retry's waits and h2MaxRetries.
	h2ErrConnNotEstablished = "http2: client conn could not be established"
	h2ErrGotGoAway          = "http2: Transport received Server's graceful shutdown GOAWAY"
	h2ErrFromPeer           = "received from peer"

	h2CodeProtocol      = 0x1 // RFC 9113 §7 PROTOCOL_ERROR
	h2CodeRefusedStream = 0x7 // RFC 9113 §7 REFUSED_STREAM
)

// h2StreamError receives net/http's HTTP/2 StreamError through errors.As
// (its As method converts into any struct with the same fields).
type h2StreamError struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

func (e h2StreamError) Error() string {
	return fmt.Sprintf("stream error: stream ID %d; code %#x; %v", e.StreamID, e.Code, e.Cause)
}

// h2Failure is what a failed HTTP/2 attempt says about its request.
type h2Failure int

const (
	h2Final        h2Failure = iota // the request may have been processed, or failed for good
	h2Ended                         // its connection ended before processing it: unusable before it was sent, or a GOAWAY named a lower last stream (RFC 9113 §6.8)
	h2Refused                       // REFUSED_STREAM (RFC 9113 §8.7): not processed
	h2PeerProtocol                  // a PROTOCOL_ERROR reset from the peer (golang/go#47635)
	h2Lost                          // its connection failed under it, which had responded before; the request is replayable (set by do, not h2Classify)
)

// h2Classify sorts err, a RoundTrip's error (nil: h2Final), as net/http's
// canRetryError does: every kind but h2Final may be sent again.
func h2Classify(err error) h2Failure {
	if err == nil {
		return h2Final
	}
	if s := err.Error(); s == h2ErrConnUnusable || s == h2ErrConnNotEstablished || s == h2ErrGotGoAway {
		return h2Ended
	}
	var se h2StreamError
	if errors.As(err, &se) {
		switch {
		case se.Code == h2CodeProtocol && se.Cause != nil && se.Cause.Error() == h2ErrFromPeer:
			return h2PeerProtocol
		case se.Code == h2CodeRefusedStream:
			return h2Refused
		}
	}
	return h2Final
}

// h2ErrGoAwayClosed begins the standard library's error for a connection
// that the server closed after a GOAWAY naming this stream or a later one
// (http2GoAwayError, unexported), and h2ErrConnLost its error for a
// connection that stopped responding to its pings.
const (
	h2ErrGoAwayClosed = "http2: server sent GOAWAY and closed the connection"
	h2ErrConnLost     = "http2: client connection lost"
	h2ErrForceClosed  = "http2: client connection force closed via ClientConn.Close"
)

// h2ConnLost returns err, an attempt's final error on a connection now
// closed, as a *ConnError that matches ErrServerClosed if it says the
// connection failed under the request: closed without a GOAWAY that
// spared it (io.ErrUnexpectedEOF), closed after one that did not, reset,
// lost, or closed by the standard library after a write failed ("force
// closed", which ends the connection's other streams too). The stream
// had begun (an error before it began is h2Ended), so the server may have
// processed the request, as ErrServerClosed says over HTTP/1.1. Other
// errors (a stream reset by the server, a timeout, a cancellation, a
// malformed response) are returned as they are.
func h2ConnLost(err error) error {
	var ne net.Error
	s := err.Error()
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		strings.HasPrefix(s, h2ErrGoAwayClosed), s == h2ErrConnLost, s == h2ErrForceClosed,
		errors.As(err, &ne) && !ne.Timeout():
		return &ConnError{Err: err, Written: true}
	}
	return err
}

// h2Retry decides the wait before a request is sent again after an attempt
// that failed with f, and returns it with the new count of strikes (the
// failures so far that say something may be wrong). early: the connection
// had not applied the server's SETTINGS when the attempt chose it.
//
// net/http waits before every retry but the first (1 s, 2 s, 4 s…), so
// that a server refusing everything is not hammered. A refusal on a
// connection that did not yet know the server's stream limit is the normal
// course of HTTP/2, and counts no strike here: until the SETTINGS arrive a
// client assumes 100 streams (RFC 9113 §6.5.2 recommends no fewer), and a
// server that allows fewer refuses the rest of a burst (HAProxy with
// tune.h2.max-concurrent-streams, lighttpd, Node's maxConcurrentStreams).
// net/http's rule made such a request wait a second when a second new
// connection refused it too. Every other failure is a strike: the first is
// retried at once, later ones after 1 s, 2 s, 4 s…. The end of a
// connection (GOAWAY) is one too: a server that ends its connections every
// few requests ends the next one under the retried requests as well, and
// only the wait spreads them out. At most h2MaxRetries retries either way.
func h2Retry(f h2Failure, early bool, strikes int) (wait time.Duration, _ int) {
	if f == h2Refused && early {
		return 0, strikes
	}
	strikes++
	if strikes == 1 {
		return 0, strikes
	}
	return time.Second << (strikes - 2), strikes
}

// h2Rewind returns the request to send again after err, as net/http's
// shouldRetryRequest: the same one if it has no body, a copy with a body
// from GetBody, the same one if the connection was unusable before the
// body was read; otherwise an error.
func h2Rewind(req *http.Request, err error) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	if req.GetBody != nil {
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, gerr
		}
		r := *req
		r.Body = body
		return &r, nil
	}
	if err.Error() == h2ErrConnUnusable {
		return req, nil
	}
	return nil, fmt.Errorf("pipelined: cannot retry after %v: the request body was sent; define Request.GetBody to allow it", err)
}

// stats returns the host's HTTP/2 connections (open, dialing, idle),
// streams in use (reservations included) and requests waiting for one.
func (h *h2Host) stats() (open, dialing, idle, inflight, queued int) {
	h.mu.Lock()
	conns := slices.Clone(h.conns)
	dialing, queued = h.dialing, h.queued
	h.mu.Unlock()
	for _, c := range conns {
		n := c.cc.InFlight()
		inflight += n
		if n == 0 {
			idle++
		}
	}
	return len(conns), dialing, idle, inflight, queued
}

// closeIdle closes the connections with no stream in use and, if no
// request waits, cancels dials in progress, as the HTTP/1 pool does.
func (h *h2Host) closeIdle() {
	h.mu.Lock()
	if h.queued == 0 {
		for d := range h.dials {
			d.abandoned = true
			d.cancel()
		}
	}
	var cand []*h2Conn
	for _, c := range h.conns {
		if !c.closing && c.claims == 0 {
			c.closing = true // acquire no longer chooses it
			c.why = CloseIdleConnections
			cand = append(cand, c)
		}
	}
	h.mu.Unlock()
	for _, c := range cand {
		h.closeIfUnused(c, CloseIdleConnections)
	}
}

// closeIfUnused closes c, marked closing for why by the caller, if no
// stream is in flight on it; else it takes requests again. Without mu.
func (h *h2Host) closeIfUnused(c *h2Conn, why CloseReason) {
	if c.cc.InFlight() == 0 {
		c.cc.Close()
		h.mu.Lock()
		removed := h.removeLocked(c)
		h.mu.Unlock()
		if removed {
			h.observeClosed(c, why, nil)
			h.maybeEmpty()
		}
		return
	}
	h.mu.Lock()
	if !c.retired { // retired meanwhile: it stays closing (lifetime.go)
		c.closing = false
		c.why = 0
	}
	h.broadcastLocked()
	h.mu.Unlock()
}

// armIdleLocked arms c's idle timer, c having just become idle: after
// IdleConnTimeout without a stream, it is closed. The standard library's
// ClientConn has an idle timer of its own, but stops it for a request
// that then fails before its stream opens (a connection found too idle,
// a cancellation), and never restarts it: the connection then stays open,
// unusable, for ever. h2Host.mu is held.
func (h *h2Host) armIdleLocked(c *h2Conn) {
	d := h.t.opts.IdleConnTimeout
	if d <= 0 {
		return
	}
	if c.idleTimer == nil {
		c.idleTimer = time.AfterFunc(d, func() { h.idleFired(c) })
		return
	}
	c.idleTimer.Reset(d)
}

// idleFired runs when c's idle timer fires: c is closed if it has been idle
// for IdleConnTimeout, else the timer is armed for the rest.
func (h *h2Host) idleFired(c *h2Conn) {
	h.mu.Lock()
	if c.busy || c.closing || c.claims > 0 || h.closed {
		h.mu.Unlock()
		return // armed again when it next becomes idle
	}
	if left := h.t.opts.IdleConnTimeout - time.Since(c.idleSince); left > 0 {
		c.idleTimer.Reset(left)
		h.mu.Unlock()
		return
	}
	c.closing = true
	c.why = CloseIdleTimeout
	h.mu.Unlock()
	h.closeIfUnused(c, CloseIdleTimeout)
}

// close closes every connection; requests waiting fail with
// ErrTransportClosed, those in flight with the ClientConn's error.
func (h *h2Host) close() {
	h.mu.Lock()
	h.closed = true
	conns := h.conns
	h.conns = nil
	for _, c := range conns {
		c.why = CloseTransportClosed
	}
	for d := range h.dials {
		d.cancel()
	}
	h.broadcastLocked()
	h.mu.Unlock()
	for _, c := range conns {
		c.cc.Close()
		h.observeClosed(c, CloseTransportClosed, nil)
	}
}

// h2Stats completes a host's HostStats with its HTTP/2 side, h (nil if the
// host never negotiated HTTP/2).
func h2Stats(h *h2Host, s *HostStats) {
	if h == nil {
		s.Protocol = "HTTP/1.1"
		return
	}
	open, dialing, idle, inflight, queued := h.stats()
	s.Protocol = "HTTP/2.0"
	if h.demoted.Load() {
		s.Protocol = "HTTP/1.1" // its HTTP/2 connections count until they close
	}
	s.Open += open
	s.Dialing += dialing
	s.Idle += idle
	s.InFlight += inflight
	s.Queued += queued
	s.Streams = inflight
	h.mu.Lock()
	s.Retired.add(h.retired)
	h.mu.Unlock()
}

// ---- Glue with the HTTP/1 pool (scheduler.go) -----------------------------

// useH2 is the error acquire returns to a request of the HTTP/1 pool once
// the host turned out to speak HTTP/2: hostPool.roundTrip sends it on
// through h.redirect, body untouched.
type useH2 struct{ h *h2Host }

func (*useH2) Error() string { return "pipelined: host speaks HTTP/2" }

// errUseH1 is what acquire returns once the host turned back to HTTP/1.1
// (h2Host.demoted); h2Host.do returns it to hostPool.roundTrip as a
// *useH1.
var errUseH1 = errors.New("pipelined: host speaks HTTP/1.1 again")

// useH1 is the error h2Host.do returns for a request that waited for a
// stream while the host turned back to HTTP/1.1: hostPool.roundTrip sends
// req (the caller's, or its rewound copy after a retry) through the
// HTTP/1 pool, body untouched; ev is its latest Observer event, nil
// without an Observer.
type useH1 struct {
	req *http.Request
	ev  *RequestEvent
}

func (*useH1) Error() string { return errUseH1.Error() }

// speaksH2 returns p's h2Host if the host speaks HTTP/2, else nil. The
// caller holds a use of it (h2Host.users), which h2Host.do ends.
func (p *hostPool) speaksH2() *h2Host {
	h := p.h2.Load()
	if h == nil || h.demoted.Load() {
		return nil
	}
	h.users.Add(1)
	if h.gone.Load() {
		// Forgotten with its pool: the HTTP/1 path finds the host's
		// current pool (errPoolGone). No maybeEmpty: it is gone already,
		// and p.mu may be held.
		h.users.Add(-1)
		return nil
	}
	return h
}

// h1Dialed takes a connection that p's h2Host dialed in took and that
// negotiated HTTP/1.1 (h2Host.demoted is set): it joins p.
func (p *hostPool) h1Dialed(conn net.Conn, state *tls.ConnectionState, took time.Duration) {
	c := newPconn(p.t, p, conn, state)
	p.mu.Lock()
	p.joinUnlock(c, took)
}

// h2Host returns p's h2Host, creating it; p.mu is held.
func (p *hostPool) h2HostLocked() *h2Host {
	h := p.h2.Load()
	if h == nil {
		t, key := p.t, p.key
		h = newH2Host(t, key, func(ctx context.Context) (net.Conn, *tls.ConnectionState, error) {
			return t.dial(ctx, key)
		})
		h.toH1 = p.h1Dialed
		h.onEmpty = func() { t.removeIfEmpty(p) }
		p.h2.Store(h)
	}
	return h
}

// h2Dialed takes a connection dialed by p that negotiated HTTP/2 (in place
// of the end of startDialLocked): the host is marked HTTP/2, the connection
// goes to its h2Host, and every request waiting in p is redirected there.
func (p *hostPool) h2Dialed(d *dialHandle, conn net.Conn, state *tls.ConnectionState) {
	p.mu.Lock()
	p.dialing--
	delete(p.dials, d)
	if old := p.replacedLocked(d); old != nil {
		defer old.fail(errConnClosing) // once p.mu is released
	}
	p.learned = true
	if p.closed {
		p.mu.Unlock()
		conn.Close()
		return
	}
	h := p.h2HostLocked()
	if h.servesLocked() {
		// One of the dials a far host's waiters started (farDialLocked)
		// while another's connection serves: extra, closed, as net/http's
		// HTTP/2 pool closes one (it would only spread streams).
		p.dispatchLocked()
		p.mu.Unlock()
		conn.Close()
		return
	}
	h.demoted.Store(false) // if it had turned back to HTTP/1.1
	h.beginAdopt()         // requests that find p.h2 set wait for this connection
	for o := range p.dials {
		// Another dial of a far host's first burst (farDialLocked): its
		// connection would be closed on arrival (above), and its
		// handshake costs both ends CPU meanwhile.
		o.abandoned = true
		o.cancel()
	}
	p.mu.Unlock()
	// Before the waiters move, so that they find it rather than dial.
	h.adopt(conn, state) // on failure, the waiters dial over there
	p.mu.Lock()
	ws := p.waiters.takeAll()
	for _, w := range ws {
		h.users.Add(1) // p is not gone (this was its dial): neither is h
		w.give(waitResult{err: &useH2{h}})
	}
	p.dispatchLocked()
	p.mu.Unlock()
}

const protoHTTP2 = "HTTP/2.0"

// h2Obs carries the Observer's events of one request over HTTP/2 (a nil
// *h2Obs reports nothing).
type h2Obs struct {
	o        *Observer
	ev       RequestEvent
	queuedAt time.Time
	first    int // the number of the first attempt
	// redirected: the first attempt was queued, and reported, by the
	// HTTP/1 pool (hostPool.roundTrip).
	redirected bool
	lost       bool // the last attempt's connection failed under it (h2Lost)
}

// event is the request's latest event, with the time queued since, for
// the HTTP/1 side to go on from (nil without an Observer).
func (b *h2Obs) event() *RequestEvent {
	if b == nil {
		return nil
	}
	ev := b.ev
	ev.QueueTime += time.Since(b.queuedAt)
	return &ev
}

func (h *h2Host) newObs(req *http.Request) *h2Obs {
	o := h.t.opts.Observer
	if o == nil {
		return nil
	}
	return &h2Obs{o: o, ev: RequestEvent{Start: time.Now(), Request: req, Host: h.key.String(), Addr: h.key.addr}, first: 1}
}

func (b *h2Obs) queued(retry int) {
	if b == nil {
		return
	}
	b.queuedAt = time.Now()
	b.ev.ConnID, b.ev.Protocol, b.ev.InFlight, b.ev.Pipelined = 0, "", 0, false
	if retry == 0 && b.redirected {
		return // queued since the HTTP/1 pool's RequestQueued
	}
	b.ev.Time, b.ev.Attempt = b.queuedAt, b.first+retry
	if retry > 0 {
		b.ev.Resend = ResendNotWritten // h2Classify: the server did not process it
		if b.lost {
			b.ev.Resend = ResendConnFailed // it may have
		}
	}
	if b.o.RequestQueued != nil {
		b.o.RequestQueued(b.ev)
	}
}

func (b *h2Obs) assigned(c *h2Conn) {
	if b == nil {
		return
	}
	now := time.Now()
	b.ev.QueueTime += now.Sub(b.queuedAt)
	b.ev.Time, b.ev.ConnID, b.ev.Protocol = now, c.id, protoHTTP2
	b.ev.InFlight = c.cc.InFlight() + 1
	b.ev.Pipelined = b.ev.InFlight > 1
	if b.o.RequestAssigned != nil {
		b.o.RequestAssigned(b.ev)
	}
}

// watchWrite returns req, or a copy of it whose context reports the end of
// its write as RequestWritten: the standard library's client writes the
// request, and says when through httptrace (WroteRequest, composed with
// the caller's own trace, which still runs). A write cut short (an error,
// or a body the server responded to before reading it) reports nothing, as over
// HTTP/1.
func (b *h2Obs) watchWrite(req *http.Request) *http.Request {
	if b == nil || b.o.RequestWritten == nil {
		return req
	}
	ev, hook := b.ev, b.o.RequestWritten // the attempt's, as assigned
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			ev.Time = time.Now()
			hook(ev)
		}
	}}
	return req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
}

// headers reports the final response head, once RoundTrip returned it.
func (b *h2Obs) headers(status int) {
	if b == nil || b.o.RequestHeaders == nil {
		return
	}
	ev := b.ev
	ev.Time, ev.Status = time.Now(), status
	b.o.RequestHeaders(ev)
}

func (b *h2Obs) done(resp *http.Response, err error) {
	if b.o.RequestDone == nil {
		return
	}
	ev := b.ev
	ev.Time, ev.Err = time.Now(), err
	if resp != nil {
		ev.Status = resp.StatusCode
	}
	b.o.RequestDone(ev)
}
