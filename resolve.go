package pipelined

import (
	"context"
	"net"
	"net/http/httptrace"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"
)

// A Resolver looks up the addresses of a host name, as
// [net.Resolver.LookupNetIP] does: a *net.Resolver is one, and a test or a
// service discovery client can supply its own. network is "ip" (both
// families). See TransportOptions.Resolver.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// resolveEvery is how often the answer of a host whose pool lives is looked
// up again, in the background. Go's resolver does not say how long an
// answer may be kept (its TTL), so the interval is ours. It is how late a
// change of a fleet is followed (an address added gets its share of new
// connections; one removed drains); a failing address needs no lookup to be
// set aside (addrs.go, ejection). 30 s: gRPC's DNS resolver looks up again
// at most every 30 s, the JVM keeps an answer 30 s, and cloud load
// balancers' records live 60 s. Shorter would follow Kubernetes' 5 s
// records sooner, at the cost of connections drained and dialed again at
// every lookup against a DNS server that answers with a rotating subset of
// a larger set (Route 53's multivalue answers).
const resolveEvery = 30 * time.Second

// lookupTimeout bounds one lookup: the default dialer's timeout, which in
// net/http bounds resolution and connect together.
var lookupTimeout = defaultDialer.Timeout

// addrBook holds the address sets (addrs.go) of the hosts a Transport dials
// itself, one per "host:port", and looks their names up: at a host's first
// dial, the dials of that moment sharing the lookup, and again every
// resolveEvery while the host has a pool. A request never waits for a
// lookup once its host's answer is known: only a dial does, and only the
// first.
//
// mu guards sets, closed and each set's timer; each set guards the rest
// of its state. Lock order: hostPool.mu, then mu, then addrSet.mu.
type addrBook struct {
	t *Transport
	r Resolver

	mu     sync.Mutex
	sets   map[string]*addrSet
	closed bool
}

func newAddrBook(t *Transport, r Resolver) *addrBook {
	if r == nil {
		r = net.DefaultResolver
	}
	return &addrBook{t: t, r: r, sets: make(map[string]*addrSet)}
}

// get returns the address set of hostport, or nil if it has none.
func (b *addrBook) get(hostport string) *addrSet {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sets[hostport]
}

// resolve returns the address set of hostport with its answer: at once
// if the answer is known, else after a lookup shared with every dial of
// the host that waits for one meanwhile. ctx's DNSStart and DNSDone hooks
// fire around the wait, as net.Dialer fires them around its lookup.
func (b *addrBook) resolve(ctx context.Context, hostport string) (*addrSet, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrTransportClosed
	}
	s := b.sets[hostport]
	if s == nil {
		var err error
		if s, err = newAddrSet(hostport); err != nil {
			b.mu.Unlock()
			return nil, err
		}
		b.sets[hostport] = s
	}
	b.mu.Unlock()

	s.mu.Lock()
	if len(s.addrs) > 0 {
		s.mu.Unlock()
		return s, nil
	}
	wait, shared := s.lookup, true
	if wait == nil {
		wait, shared = make(chan struct{}), false
		s.lookup = wait
		b.t.wg.Add(1) // a dial's goroutine counts already: never zero here
		go b.first(s, wait)
	}
	s.mu.Unlock()
	trace := httptrace.ContextClientTrace(ctx)
	if trace != nil && trace.DNSStart != nil {
		trace.DNSStart(httptrace.DNSStartInfo{Host: s.host})
	}
	var err error
	select {
	case <-wait:
		s.mu.Lock()
		if err = s.err; len(s.addrs) > 0 {
			err = nil
		}
		s.mu.Unlock()
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	if trace != nil && trace.DNSDone != nil {
		info := httptrace.DNSDoneInfo{Err: err, Coalesced: shared}
		if err == nil {
			for _, ip := range s.answer() {
				info.Addrs = append(info.Addrs, net.IPAddr{IP: ip.AsSlice(), Zone: ip.Zone()})
			}
		}
		trace.DNSDone(info)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// first runs the first lookup of s (or the first since one failed) and
// closes done when it ends; a success starts the refreshes.
func (b *addrBook) first(s *addrSet, done chan struct{}) {
	defer b.t.wg.Done()
	ips, err := b.lookup(s.host)
	s.mu.Lock()
	s.lookup = nil
	s.setAnswerLocked(ips, err)
	s.mu.Unlock()
	close(done)
	if err == nil {
		b.mu.Lock()
		if !b.closed && s.timer == nil {
			s.timer = time.AfterFunc(resolveEvery, func() { b.refresh(s) })
		}
		b.mu.Unlock()
	}
}

// refresh looks the name of s up again, and drains the connections to the
// addresses that left the answer (a failed lookup keeps the answer known:
// a stale address fails its dials and is set aside, where no address
// could not be dialed at all). A host without a pool is forgotten instead:
// its next dial looks it up afresh, as net/http's every dial does.
func (b *addrBook) refresh(s *addrSet) {
	lives := b.t.hasPool(s.hostport)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	if !lives {
		if b.sets[s.hostport] == s {
			delete(b.sets, s.hostport)
		}
		b.mu.Unlock()
		return
	}
	b.t.wg.Add(1) // before Close's Wait: Close sets closed under mu first
	b.mu.Unlock()
	defer b.t.wg.Done()

	ips, err := b.lookup(s.host)
	s.mu.Lock()
	gone := s.setAnswerLocked(ips, err)
	s.mu.Unlock()
	if len(gone) > 0 {
		b.t.drain(s.hostport, gone)
	}
	b.mu.Lock()
	if !b.closed {
		s.timer.Reset(resolveEvery)
	}
	b.mu.Unlock()
}

// lookup asks the Resolver for host's addresses, IPv4-mapped ones as IPv4
// (net.Resolver may return them so), without duplicates, in the answer's
// order.
func (b *addrBook) lookup(host string) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(b.t.ctx, lookupTimeout)
	defer cancel()
	ips, err := b.r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		if ip = ip.Unmap(); ip.IsValid() && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// close stops the refreshes; a lookup under way ends with the
// Transport's context.
func (b *addrBook) close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, s := range b.sets {
		if s.timer != nil {
			s.timer.Stop()
		}
	}
}

// hasPool reports whether the Transport has a pool for hostport that it
// dials itself (not through a proxy).
func (t *Transport) hasPool(hostport string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for k := range t.pools {
		if k.addr == hostport && k.proxyScheme == "" {
			return true
		}
	}
	return false
}

// resolvedHost reports whether hostport names a host by name, which an
// address set spreads over its addresses, rather than by an IP address.
func resolvedHost(hostport string) bool {
	host := hostOf(hostport)
	_, err := netip.ParseAddr(host)
	return err != nil
}

// newAddrSet returns the empty address set of hostport.
func newAddrSet(hostport string) (*addrSet, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, &net.AddrError{Err: "invalid port", Addr: hostport}
	}
	return &addrSet{host: host, port: uint16(n), hostport: hostport, turn: randTurn()}, nil
}
