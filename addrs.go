package pipelined

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// This file spreads a host's connections over the addresses its name
// resolves to (resolve.go looks them up). A host the Transport dials itself
// has an address set: the addresses of its answer, each active, or set
// aside for a while after a failure (ejected); an address that left the
// answer drains (its connections take no new request and close once
// responded to). A dial goes to the active address with the fewest of the
// host's connections, open or being dialed (ties in turn), and races the
// others as RFC 8305 (Happy Eyeballs v2) says: a failed attempt goes on to
// the next address at once, a slow one is joined by the next after
// fallbackDelay, the families alternating. So a host's connections, and
// with them its pipelined load, spread evenly over its addresses; net/http
// dials them in order, and every connection lands on the first address
// that answers.

// AddrState is the state of one address of a host (AddrStats).
type AddrState uint8

// The states of an address.
const (
	// AddrActive: in the host's answer, and new connections may go to
	// it.
	AddrActive AddrState = iota + 1

	// AddrEjected: a dial to it, or a connection before its first
	// answer, failed: new connections go elsewhere until EjectedUntil
	// (tried still if no other address can be reached).
	AddrEjected

	// AddrDraining: gone from the host's answer: its connections take no
	// new request and close once their requests are responded to.
	AddrDraining
)

// String returns "active", "ejected" or "draining".
func (s AddrState) String() string {
	switch s {
	case AddrActive:
		return "active"
	case AddrEjected:
		return "ejected"
	case AddrDraining:
		return "draining"
	}
	return "unknown"
}

// AddrStats is one address of a host, in [HostStats].Addrs.
type AddrStats struct {
	Addr  netip.Addr // an address of the host's answer, or one its connections drain
	State AddrState  // active, ejected or draining
	// EjectedUntil is when an ejected address is tried again; zero
	// otherwise.
	EjectedUntil time.Time
	Open         int // HTTP/1.1 connections to it (busy, idle or retiring)
	InFlight     int // requests on them, not yet responded to
}

// fallbackDelay is how long an attempt to connect runs before the next
// address is tried beside it (RFC 8305 §5, the Connection Attempt Delay).
// net.Dialer's FallbackDelay default, 300 ms (Chrome's too), within the
// RFC's 100 ms to 2 s (it recommends 250 ms): a working address a long
// round trip away (100-200 ms) connects before it, so is not raced for
// nothing, and an address that accepts nothing costs a dial that long
// once per ejection, not a connect timeout.
const fallbackDelay = 300 * time.Millisecond

// Ejection: an address whose dial failed (refused, unreachable, timed out,
// or outrun by an attempt started after it: slower by fallbackDelay at
// least), or whose connection failed before its first response, is set aside
// for ejectBase, doubled at each ejection in a row up to ejectMax, as
// gRPC's connection backoff (1 s, at most 120 s) and Envoy's outlier
// ejection (an interval growing with the ejections) do. A connection to
// it that responds ends the row. Meanwhile the other addresses take the new
// connections; an ejected address is still dialed, last, if none of them
// connects.
const (
	ejectBase = time.Second
	ejectMax  = 2 * time.Minute
)

// ejectFor is how long an address is set aside at its n-th ejection in a
// row (n ≥ 1).
func ejectFor(n int) time.Duration {
	if n > 7 { // 2^7 s > ejectMax
		return ejectMax
	}
	return min(ejectBase<<(n-1), ejectMax)
}

// addrSet is a host's addresses: its latest answer, in the answer's order.
// mu guards every field but the timer (addrBook.mu); it is a leaf lock.
type addrSet struct {
	host     string
	port     uint16
	hostport string

	mu     sync.Mutex
	addrs  []addrState
	turn   int           // where the next tie is broken: rotates
	err    error         // the last lookup's error while no answer is known
	lookup chan struct{} // closed when the lookup under way ends; nil if none
	timer  *time.Timer   // the next refresh (addrBook.mu)
}

// addrState is one address of an answer.
type addrState struct {
	ip        netip.Addr
	ejections int       // in a row
	until     time.Time // ejected until then
}

// randTurn is where a new set breaks its first tie: at random, so that
// the clients of a fleet, each with fewer connections than the fleet has
// addresses, do not all start on its first address.
func randTurn() int { return rand.IntN(1 << 16) }

// setAnswerLocked makes ips (in their order) the answer, if err is nil,
// and returns the addresses that left it. An address that stays keeps its
// state; a failed lookup keeps the answer known.
func (s *addrSet) setAnswerLocked(ips []netip.Addr, err error) (gone []netip.Addr) {
	if err != nil {
		if len(s.addrs) == 0 {
			s.err = err
		}
		return nil
	}
	s.err = nil
	next := make([]addrState, 0, len(ips))
	for _, ip := range ips {
		st := addrState{ip: ip}
		if i := s.indexLocked(ip); i >= 0 {
			st = s.addrs[i]
		}
		next = append(next, st)
	}
	for _, a := range s.addrs {
		if !slices.Contains(ips, a.ip) {
			gone = append(gone, a.ip)
		}
	}
	s.addrs = next
	return gone
}

func (s *addrSet) indexLocked(ip netip.Addr) int {
	return slices.IndexFunc(s.addrs, func(a addrState) bool { return a.ip == ip })
}

// answer returns the addresses of the answer.
func (s *addrSet) answer() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]netip.Addr, len(s.addrs))
	for i, a := range s.addrs {
		out[i] = a.ip
	}
	return out
}

// failed ejects ip (ejectFor) after a failed dial or connection.
func (s *addrSet) failed(ip netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.indexLocked(ip); i >= 0 {
		a := &s.addrs[i]
		if now := time.Now(); !now.Before(a.until) { // not again for one failure seen twice
			a.ejections++
			a.until = now.Add(ejectFor(a.ejections))
		}
	}
}

// served ends ip's row of ejections: a connection to it responded. (A
// dial that succeeds does not: a backend that accepts connections and
// closes them without a response is set aside as long as one that refuses them.)
func (s *addrSet) served(ip netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.indexLocked(ip); i >= 0 {
		s.addrs[i].ejections = 0
	}
}

// addrView is one address as a dial's plan sees it.
type addrView struct {
	ip      netip.Addr
	load    int       // the host's connections to it, open or being dialed
	ejected bool      // set aside: dialed only after every active one
	until   time.Time // for an ejected one
}

// planAddrs returns the order in which a dial tries the addresses v (those
// it has not tried yet), last being the address it tried last (invalid for
// its first attempt): first the active address with the least load, of the
// other family than last's if one is active (RFC 8305 §4: a family that
// fails is not tried again and again), ties broken in turn (the first at
// or after index turn); then the other active ones by load, alternating
// families; then the ejected ones, the soonest back first.
func planAddrs(v []addrView, turn int, last netip.Addr) []netip.Addr {
	n := len(v)
	first := -1
	for pass := 0; pass < 2 && first < 0; pass++ {
		for k := range n {
			i := (turn + k) % n
			if v[i].ejected || pass == 0 && last.IsValid() && v[i].ip.Is4() == last.Is4() {
				continue
			}
			if first < 0 || v[i].load < v[first].load {
				first = i
			}
		}
	}
	out := make([]netip.Addr, 0, n)
	var same, other, ejected []addrView
	for k := range n {
		i := (turn + k) % n
		switch a := v[i]; {
		case i == first:
		case a.ejected:
			ejected = append(ejected, a)
		case a.ip.Is4() == v[first].ip.Is4():
			same = append(same, a)
		default:
			other = append(other, a)
		}
	}
	byLoad := func(a, b addrView) int { return a.load - b.load }
	slices.SortStableFunc(same, byLoad)
	slices.SortStableFunc(other, byLoad)
	slices.SortStableFunc(ejected, func(a, b addrView) int { return a.until.Compare(b.until) })
	if first >= 0 {
		out = append(out, v[first].ip)
	}
	for len(same) > 0 || len(other) > 0 {
		if len(other) > 0 {
			out, other = append(out, other[0].ip), other[1:]
		}
		if len(same) > 0 {
			out, same = append(out, same[0].ip), same[1:]
		}
	}
	for _, a := range ejected {
		out = append(out, a.ip)
	}
	return out
}

// next returns the address a dial of s tries next, given those it tried
// (the last one last), or false if none is left: the first of planAddrs,
// the load counted from d's pool at this moment (d nil: a dial of the
// HTTP/2 side, which takes the addresses in turn). It records the address
// in d, so that the pool's other dials count it.
func (s *addrSet) next(d *dialHandle, tried []netip.Addr) (netip.Addr, bool) {
	if d != nil {
		d.pool.mu.Lock()
		defer d.pool.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	v := make([]addrView, 0, len(s.addrs))
	for _, a := range s.addrs {
		if !slices.Contains(tried, a.ip) {
			v = append(v, addrView{ip: a.ip, ejected: now.Before(a.until), until: a.until})
		}
	}
	if len(v) == 0 {
		return netip.Addr{}, false
	}
	if d != nil {
		count := func(ip netip.Addr) {
			if i := slices.IndexFunc(v, func(a addrView) bool { return a.ip == ip }); i >= 0 {
				v[i].load++
			}
		}
		for _, c := range d.pool.conns {
			if !c.s.retired && !c.s.due { // one due is being replaced
				count(c.addr)
			}
		}
		for o := range d.pool.dials {
			if o != d {
				count(o.addr)
			}
		}
	}
	var last netip.Addr
	if len(tried) > 0 {
		last = tried[len(tried)-1]
	}
	ip := planAddrs(v, s.turn, last)[0]
	s.turn++
	if d != nil {
		d.addr = ip
	}
	return ip, true
}

// dialOf returns the pool's dial that ctx belongs to, or nil.
func dialOf(ctx context.Context) *dialHandle {
	d, _ := ctx.Value(dialKey{}).(*dialHandle)
	return d
}

// dialed records that d's connection is to ip (the first address it tried
// may have lost the race).
func (d *dialHandle) dialed(ip netip.Addr) {
	if d != nil {
		d.pool.mu.Lock()
		d.addr = ip
		d.pool.mu.Unlock()
	}
}

// dialHost dials hostport, a target reached without a proxy: over its
// address set if it has one (a name, and a Transport that spreads), else
// as net/http does (DialContext with the name).
func (t *Transport) dialHost(ctx context.Context, hostport string) (net.Conn, error) {
	if t.addrs == nil || !resolvedHost(hostport) {
		return t.dialTCP(ctx, hostport)
	}
	hopOf(ctx).begin() // the lookup is on the way to the host, as in net.Dialer's dial
	s, err := t.addrs.resolve(ctx, hostport)
	if err != nil {
		// As net.Dialer reports a failed lookup (a *net.DNSError within).
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: err}
	}
	return t.race(ctx, s, dialOf(ctx))
}

// race dials the addresses of s as RFC 8305 §5 says: one at a time, in
// the order addrSet.next gives, the next at once when one fails and after
// fallbackDelay when it is slow, the first connection winning (the others
// are cancelled, or closed if they connect meanwhile). An attempt that
// failed, or was outrun by one started after it, ejects its address. If
// every attempt fails, the first error is returned, as net.Dialer returns
// it.
func (t *Transport) race(ctx context.Context, s *addrSet, d *dialHandle) (net.Conn, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		i    int
		conn net.Conn
		err  error
	}
	results := make(chan outcome)
	returned := make(chan struct{})
	defer close(returned)
	var tried []netip.Addr
	var running []bool
	pending := 0
	start := func() bool {
		ip, ok := s.next(d, tried)
		if !ok {
			return false
		}
		i := len(tried)
		tried, running = append(tried, ip), append(running, true)
		pending++
		t.wg.Add(1) // the dial's goroutine counts already
		go func() {
			defer t.wg.Done()
			conn, err := t.dialTCP(rctx, netip.AddrPortFrom(ip, s.port).String())
			select {
			case results <- outcome{i, conn, err}:
			case <-returned:
				if conn != nil {
					conn.Close()
				}
			}
		}()
		return true
	}
	start()
	timer := time.NewTimer(fallbackDelay)
	defer timer.Stop()
	more := true // addresses may be left to try
	var firstErr error
	for {
		var slow <-chan time.Time
		if more {
			slow = timer.C
		}
		select {
		case r := <-results:
			pending--
			running[r.i] = false
			if r.err == nil {
				for j := range r.i {
					if running[j] {
						s.failed(tried[j]) // outrun
					}
				}
				d.dialed(tried[r.i])
				return r.conn, nil
			}
			if ctx.Err() != nil {
				return nil, r.err // cancelled (Transport.Close): no one's fault
			}
			s.failed(tried[r.i])
			if firstErr == nil {
				firstErr = r.err
			}
			if more = more && start(); more {
				timer.Reset(fallbackDelay)
			} else if pending == 0 {
				return nil, firstErr
			}
		case <-slow:
			if more = start(); more {
				timer.Reset(fallbackDelay)
			}
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// drain retires the connections of hostport's pools (those the Transport
// dials itself) to the addresses gone: they take no new request and close
// once their requests are responded to; idle ones close now.
func (t *Transport) drain(hostport string, gone []netip.Addr) {
	for _, p := range t.poolList() {
		if p.key.addr == hostport && p.key.proxyScheme == "" {
			p.drain(gone)
		}
	}
}

func (p *hostPool) drain(gone []netip.Addr) {
	p.mu.Lock()
	var idle []*pconn
	for _, c := range p.conns {
		if slices.Contains(gone, c.addr) && p.retireNowLocked(c, CloseDrained) {
			idle = append(idle, c)
		}
	}
	p.dispatchLocked()
	p.mu.Unlock()
	for _, c := range idle {
		c.fail(errConnClosing)
	}
}

// addrEndLocked tells c's address how c ended: having served a response (its row of
// ejections ends), or failed before its first response (it is ejected: the
// address accepts connections and serves nothing). p.mu is held.
func (p *hostPool) addrEndLocked(c *pconn, err error, unanswered, answered int) {
	if !c.addr.IsValid() {
		return
	}
	s := p.addrSetLocked()
	switch {
	case s == nil:
	case answered > 0:
		s.served(c.addr)
	case unanswered > 0 && closeReason(err, c.s.retireReason) == CloseError:
		s.failed(c.addr)
	}
}

// addrSetLocked returns the address set of p's host, or nil if it has
// none (an IP address, a proxy, a Transport that does not spread).
func (p *hostPool) addrSetLocked() *addrSet {
	if p.t.addrs == nil || p.key.proxyScheme != "" {
		return nil
	}
	return p.t.addrs.get(p.key.addr)
}

// addrStatsLocked lists p's host's addresses for Stats: those of its
// answer, then those its connections drain.
func (p *hostPool) addrStatsLocked() []AddrStats {
	s := p.addrSetLocked()
	if s == nil {
		return nil
	}
	now := time.Now()
	s.mu.Lock()
	out := make([]AddrStats, len(s.addrs))
	for i, a := range s.addrs {
		out[i] = AddrStats{Addr: a.ip, State: AddrActive}
		if now.Before(a.until) {
			out[i].State, out[i].EjectedUntil = AddrEjected, a.until
		}
	}
	s.mu.Unlock()
	for _, c := range p.conns {
		if !c.addr.IsValid() {
			continue
		}
		i := slices.IndexFunc(out, func(a AddrStats) bool { return a.Addr == c.addr })
		if i < 0 {
			out = append(out, AddrStats{Addr: c.addr, State: AddrDraining})
			i = len(out) - 1
		}
		out[i].Open++
		out[i].InFlight += c.s.inflight
	}
	return out
}
