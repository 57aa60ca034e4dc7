package pipelined

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pipelined/pipelined/internal/model"
)

// This file holds the pool of one host (hostPool) and what it owns under
// hostPool.mu: its parts (below), each connection's schedulable state
// (sched) and each dial in progress (dialHandle); a dial's first hop
// (firstHop) is atomics, stamped by the dialing goroutine. The pool's own
// methods here are its whole: Stats, Close, what it learned.

// hostPool is the set of connections to one host (scheme, address and
// proxy) and the queue of requests waiting for one.
//
// mu guards every field below it, those of the parts it embeds, and the
// schedulable state (sched) of each of its connections: the pool alone
// decides whether a connection can take a request. Requests flow from the
// pool to a connection (acquire, then pconn.send in the caller's
// goroutine); events flow from a connection to the pool (connEvents,
// pool_events.go). The pool never calls into a connection while holding
// mu, except to stop timers, and no user callback runs under mu.
//
// Its parts, one concern each, all under mu (their methods are called
// with mu held unless they take it themselves, as the pool's own do):
//   - poolConns (pool_conns.go, idle.go, lifetime.go): the connections and
//     dials, their replacement, the idle limits, lifetime retirement;
//   - scheduler (scheduler.go): the waiting queue and the placement of a
//     request on a connection;
//   - responseWait (response_wait.go): the wait for the host's first
//     response, or a burst's, and whether the host gains from pipelining;
//   - poolEvents (pool_events.go): the events a connection reports;
//   - holProtect (holprotect.go): what a late head moves and copies;
//   - observerReports (observer_report.go): the model's changes not yet
//     told to the Observer.
//
// Each part holds a pointer back to its pool (pool), through which it
// reaches the others: the parts are embedded, so that their fields and
// methods read as the pool's.
type hostPool struct {
	t    *Transport
	key  poolKey
	name string // key.String(), as Stats and the Observer name the pool

	mu     sync.Mutex
	closed bool
	gone   bool // removed from Transport.pools: requests must get a new pool
	// model is what the host's responses taught (internal/model): per route
	// class, whether requests may be written behind one; and the
	// host-wide estimates every other decision reads.
	model model.Host

	h2 atomic.Pointer[h2Host] // set once a dial negotiated HTTP/2; requests go there

	poolConns
	scheduler
	responseWait
	poolEvents
	holProtect
	observerReports
}

// sched is a connection's schedulable state. It belongs to the
// connection's pool and is guarded by hostPool.mu; the connection changes
// it only through connEvents.
type sched struct {
	inflight  int  // attempts assigned and not yet responded to
	retired   bool // takes no new request (the one place: retireLocked)
	removed   bool // no longer in the pool's conns
	exclusive bool // an attempt that nothing may follow awaits its response
	streaming bool // the head's body is open-ended and being read
	slow      bool // the head has waited past HeadOfLineTimeout (holprotect.go)
	reserved  bool // kept free for a request that needs an idle connection
	// held counts the hooks of the user's that run while a request holds
	// the connection: its place, assigned and not yet written
	// (assignLocked), the write token or the read turn (pconn.hooked).
	// It takes no new request meanwhile and does not count among those
	// that carry pipelined requests (canDialLocked), so that a request a
	// hook sends goes elsewhere instead of waiting for the hook.
	held int
	// probeDrain: the host not proven (model.Host.Proven), a response
	// came with requests pipelined behind it: the connection takes no more
	// until it is empty, so that the last of them can prove the host.
	probeDrain   bool
	served       int  // responses completed
	assigned     int  // requests assigned, ever
	atBudget     bool // retired because assigned reached its host's budget (connBudget)
	serverClosed bool // the server said it closes the connection
	headTick     uint64
	idleSince    time.Time // when inflight last became 0
	opened       time.Time
	idleTimer    *time.Timer
	lifeTimer    *time.Timer // fires at the end of its lifetime (lifetime.go)
	// due: older than its lifetime, it still takes requests while its
	// replacement is dialed (lifetime.go), and does not count among its
	// address's connections meanwhile.
	due          bool
	retireReason CloseReason // why it was retired (Observer)
	active       bool        // ConnActive was reported last (not ConnIdle)
	// From the server's Keep-Alive header (keepalive.go): how long the
	// connection may stay idle (0: no hint), and the number of
	// assignments after which it takes no more (0: no hint).
	kaIdle     time.Duration
	kaLimit    int
	kaFirstMax int // the first max= seen, plus one (0: none yet)
	// lastNoBody: the last response read in full had no body by rule
	// (HEAD, 204, 304; attempt.noBody).
	lastNoBody bool
}

// idle reports whether the connection is established, takes requests and
// has none in flight. It is the one definition of "idle".
func (s *sched) idle() bool { return s.inflight == 0 && !s.retired }

// canPipeline reports whether one more request may be written behind those
// in flight, at the given depth.
func (s *sched) canPipeline(depth int) bool {
	return !s.retired && !s.exclusive && !s.streaming && !s.slow && !s.reserved && s.held == 0 && s.inflight < depth
}

// dialHandle is a dial in progress, guarded by hostPool.mu.
type dialHandle struct {
	cancel    context.CancelFunc
	abandoned bool     // cancelled by CloseIdleConnections
	start     monoTime // when the dial started (dialSoonLocked)
	hop       firstHop // the dial's first hop (farDialLocked)
	// pool and addr: the dial's pool, whose connections and dials the
	// choice of an address counts, and the address dialed once chosen
	// (addrs.go, addrSet.next).
	pool *hostPool
	addr netip.Addr
	// replaces is the connection this dial replaces, past its lifetime:
	// it retires when the dial ends (lifetime.go).
	replaces *pconn
}

// firstHop is the time of a dial's way to its target, before TLS with it:
// the TCP connect (DialContext), or, through a proxy, the connect to the
// proxy and the proxy's to the target (SOCKS, CONNECT; through a forward
// proxy, to the proxy only). Each takes a round trip to the target at
// least. It is stamped by the dialing goroutine (Transport.dial, through
// the context key dialKey) and read by the pool. A dial through
// DialTLSContext has none.
type firstHop struct {
	start atomic.Int64 // monoTime when DialContext was first called; 0 before
	done  atomic.Bool  // the way is made, or failed
	// hooked counts the hooks of the user's that run in the dial
	// (dialer.go, handshake): nobody waits for it meanwhile
	// (canDialLocked), so that a request a hook sends dials its own.
	hooked atomic.Int32
}

// dialKey is the context key of a pool dial's *dialHandle.
type dialKey struct{}

// hopOf returns the *firstHop of ctx, nil for a dial not the pool's.
func hopOf(ctx context.Context) *firstHop {
	if d := dialOf(ctx); d != nil {
		return &d.hop
	}
	return nil
}

// begin and end stamp the first hop's start and end; begin keeps the
// first start (a proxy's connect, before the target's).
func (h *firstHop) begin() {
	if h != nil {
		h.start.CompareAndSwap(0, int64(monoNow()))
	}
}

func (h *firstHop) end() {
	if h != nil {
		h.done.Store(true)
	}
}

// hook runs f, a hook of the user's, counted in hooked; h may be nil (a
// dial not the pool's).
func (h *firstHop) hook(f func()) {
	if h == nil {
		f()
		return
	}
	h.hooked.Add(1)
	defer h.hooked.Add(-1)
	f()
}

// pending returns how long the first hop has been under way at now, or 0
// (not begun, or returned).
func (h *firstHop) pending(now monoTime) time.Duration {
	s := h.start.Load()
	if s == 0 || h.done.Load() {
		return 0
	}
	return time.Duration(now - monoTime(s))
}

func newHostPool(t *Transport, key poolKey) *hostPool {
	p := &hostPool{t: t, key: key, name: key.String()}
	p.poolConns.pool = p
	p.scheduler.pool = p
	p.responseWait.pool = p
	p.poolEvents.pool = p
	p.holProtect.pool = p
	p.observerReports.pool = p
	if t != nil {
		p.model = model.New(t.opts.FixedPolicy, maxBufferedBody)
	}
	return p
}

func (p *hostPool) close() {
	p.mu.Lock()
	p.closed = true
	if p.graceTimer != nil {
		p.graceTimer.Stop()
	}
	conns := slices.Clone(p.conns)
	p.dispatchLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.fail(ErrTransportClosed)
	}
}

func (p *hostPool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *hostPool) stats() HostStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := HostStats{Open: len(p.conns), Dialing: p.dialing, Queued: p.waiters.len(), PipelineDepth: p.depthLocked(), Retired: p.retired}
	s.Model = p.modelStatsLocked(s.PipelineDepth)
	for _, c := range p.conns {
		s.InFlight += c.s.inflight
		if c.s.idle() {
			s.Idle++
		}
	}
	s.Addrs = p.addrStatsLocked()
	return s
}

// learnedLocked reports whether p holds something learned about its host
// that a new pool would have to learn again at a cost to requests: a
// per-connection budget, recent pipeline failures or a depth fallback, or
// a verdict on pipelining. Such a pool is not forgotten when it empties.
func (p *hostPool) learnedLocked() bool {
	// That a host speaks HTTP/2 costs a new pool one dial at a time until
	// its first connection says so, as for any host not known yet: not
	// kept for it.
	return p.model.Learned()
}

// modelStatsLocked returns what Stats shows of the host's model, at the
// host's current depth. p.mu is held.
func (p *hostPool) modelStatsLocked(depth int) HostModel {
	m := p.model.Stats(p.t.holTimeout(), p.t.depth)
	s := HostModel{
		Learning:        m.Learning,
		Routes:          m.Routes,
		StreamRoutes:    m.StreamRoutes,
		LateRoutes:      m.LateRoutes,
		RoundTrip:       m.RoundTrip,
		ConnBudget:      m.ConnBudget,
		UsualHeadWait:   m.UsualHeadWait,
		LateAfter:       m.LateAfter,
		Serial:          m.Serial,
		Proven:          m.Proven,
		Pipelining:      true,
		ServiceTime:     m.ServiceTime,
		FallbackUntil:   m.FallbackUntil,
		DuplicateBudget: m.DuplicateBudget,
	}
	switch {
	case p.key.forwardProxy():
		s.Pipelining, s.Reason = false, "forward proxy"
	case depth <= 1 && m.Reason == model.Fallback:
		s.Pipelining, s.Reason = false, m.Reason.String()
	case depth <= 1:
		s.Pipelining = false // PipelineDepth 1, or DisableKeepAlives
	case m.Reason != model.Pipelined:
		s.Pipelining, s.Reason = false, m.Reason.String()
	case p.awaitsAnswerLocked() && !p.gainsLocked():
		s.Pipelining, s.Reason = false, "awaiting answer"
	}
	return s
}
