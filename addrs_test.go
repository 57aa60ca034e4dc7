package pipelined

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// fakeResolver answers LookupNetIP from a table the test changes, and
// counts the lookups. A host not in the table is not found.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][]netip.Addr
	lookups atomic.Int32
	delay   time.Duration // each lookup takes this long
}

func newFakeResolver(host string, ips ...string) *fakeResolver {
	r := &fakeResolver{answers: map[string][]netip.Addr{}}
	r.set(host, ips...)
	return r
}

func (r *fakeResolver) set(host string, ips ...string) {
	var as []netip.Addr
	for _, ip := range ips {
		as = append(as, netip.MustParseAddr(ip))
	}
	r.mu.Lock()
	r.answers[host] = as
	r.mu.Unlock()
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.lookups.Add(1)
	if r.delay > 0 {
		select {
		case <-time.After(r.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if as, ok := r.answers[host]; ok {
		return slices.Clone(as), nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// backends are HTTP servers listening on one port at several addresses,
// behind one name for a fakeResolver. Each counts the requests it served;
// each holds its requests while its gate is shut (shut).
type backends struct {
	t     *testing.T
	port  int
	ips   []string
	srvs  []*http.Server
	lns   []net.Listener
	count []atomic.Int64
	mu    sync.Mutex
	gates []chan struct{} // an open (closed) channel lets requests through
	conns []map[net.Conn]struct{}
	order []int // the backend of each request served, in order
}

// startBackends listens on each ip (127.0.0.1, 127.0.0.2, ... or ::1) at
// one port; it skips the test if an address cannot be listened on.
func startBackends(t *testing.T, ips ...string) *backends {
	t.Helper()
	b := &backends{t: t, ips: ips, count: make([]atomic.Int64, len(ips))}
	for try := 0; ; try++ {
		lns, err := listenAll(ips)
		if err == nil {
			b.lns = lns
			break
		}
		if try == 10 || !errors.Is(err, errPortTaken) {
			t.Skipf("cannot listen on %v: %v", ips, err)
		}
	}
	b.port = b.lns[0].Addr().(*net.TCPAddr).Port
	for range ips {
		open := make(chan struct{})
		close(open)
		b.gates = append(b.gates, open)
		b.conns = append(b.conns, map[net.Conn]struct{}{})
	}
	for i := range ips {
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b.mu.Lock()
				gate := b.gates[i]
				b.mu.Unlock()
				<-gate
				b.count[i].Add(1)
				b.mu.Lock()
				b.order = append(b.order, i)
				b.mu.Unlock()
				io.WriteString(w, ips[i])
			}),
			ConnState: func(c net.Conn, st http.ConnState) {
				b.mu.Lock()
				defer b.mu.Unlock()
				switch st {
				case http.StateNew:
					b.conns[i][c] = struct{}{}
				case http.StateClosed, http.StateHijacked:
					delete(b.conns[i], c)
				}
			},
		}
		b.srvs = append(b.srvs, srv)
		go srv.Serve(b.lns[i])
	}
	t.Cleanup(b.close)
	return b
}

var errPortTaken = errors.New("port taken")

// listenAll listens on one port at every ip, the port the first listener
// got.
func listenAll(ips []string) ([]net.Listener, error) {
	var lns []net.Listener
	port := 0
	for _, ip := range ips {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			if port != 0 && errors.Is(err, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("%w: %v", errPortTaken, err)
			}
			return nil, err
		}
		lns = append(lns, ln)
		port = ln.Addr().(*net.TCPAddr).Port
	}
	return lns, nil
}

// url returns the URL of path on the backends' name.
func (b *backends) url(path string) string {
	return "http://backends.test:" + strconv.Itoa(b.port) + path
}

// key is the backends' host as Stats names it.
func (b *backends) key() string { return "http://backends.test:" + strconv.Itoa(b.port) }

// shut holds the requests backend i receives until open(i).
func (b *backends) shut(i int) {
	b.mu.Lock()
	b.gates[i] = make(chan struct{})
	b.mu.Unlock()
}

func (b *backends) open(i int) {
	b.mu.Lock()
	select {
	case <-b.gates[i]:
	default:
		close(b.gates[i])
	}
	b.mu.Unlock()
}

// kill stops backend i as a crash would: its listener and every connection
// closed at once.
func (b *backends) kill(i int) {
	b.lns[i].Close()
	b.mu.Lock()
	for c := range b.conns[i] {
		c.Close()
	}
	b.mu.Unlock()
	b.open(i)
}

func (b *backends) close() {
	for i, srv := range b.srvs {
		b.open(i)
		srv.Close()
	}
}

// addrsOf returns the per-address stats of host in tr, by address.
func addrsOf(tr *Transport, host string) map[string]AddrStats {
	m := map[string]AddrStats{}
	for _, a := range tr.Stats()[host].Addrs {
		m[a.Addr.String()] = a
	}
	return m
}

// startLoad runs n callers sending GETs of url through tr until the
// function it returns is called: that stops them, waits for them and
// reports the requests that failed and the first error. A test that ends
// first stops them without waiting (its Transport's Close ends them).
func startLoad(t *testing.T, tr *Transport, url string, n int) func() (failed int64, firstErr error) {
	stop := make(chan struct{})
	var stopOnce sync.Once
	t.Cleanup(func() { stopOnce.Do(func() { close(stop) }) })
	var wg sync.WaitGroup
	var failed atomic.Int64
	var once sync.Once
	var first error
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := getBody(context.Background(), tr, url); err != nil {
					failed.Add(1)
					once.Do(func() { first = err })
				}
			}
		}()
	}
	return func() (int64, error) {
		stopOnce.Do(func() { close(stop) })
		wg.Wait()
		return failed.Load(), first
	}
}

func TestPlanAddrs(t *testing.T) {
	v4a, v4b, v4c := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	v6a, v6b := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	later, sooner := time.Unix(200, 0), time.Unix(100, 0)
	none := netip.Addr{}
	tests := []struct {
		name string
		v    []addrView
		turn int
		last netip.Addr
		want []netip.Addr
	}{
		{"fewest first", []addrView{{ip: v4a, load: 2}, {ip: v4b, load: 1}, {ip: v4c, load: 2}}, 0, none, []netip.Addr{v4b, v4a, v4c}},
		{"ties in turn", []addrView{{ip: v4a}, {ip: v4b}, {ip: v4c}}, 1, none, []netip.Addr{v4b, v4c, v4a}},
		{"ties in turn, wrapped", []addrView{{ip: v4a}, {ip: v4b}, {ip: v4c}}, 5, none, []netip.Addr{v4c, v4a, v4b}},
		{"rest by load", []addrView{{ip: v4a, load: 3}, {ip: v4b, load: 1}, {ip: v4c}}, 0, none, []netip.Addr{v4c, v4b, v4a}},
		{"families alternate", []addrView{{ip: v6a}, {ip: v6b}, {ip: v4a}, {ip: v4b}}, 0, none, []netip.Addr{v6a, v4a, v6b, v4b}},
		{"families alternate from the first's", []addrView{{ip: v6a, load: 1}, {ip: v6b, load: 1}, {ip: v4a}, {ip: v4b, load: 1}}, 0, none, []netip.Addr{v4a, v6a, v4b, v6b}},
		{"after an IPv6 attempt, IPv4", []addrView{{ip: v6b}, {ip: v4a, load: 3}, {ip: v4b, load: 1}}, 0, v6a, []netip.Addr{v4b, v6b, v4a}},
		{"after an IPv4 attempt, IPv4 if no IPv6 is left", []addrView{{ip: v4b, load: 1}, {ip: v4c}}, 0, v4a, []netip.Addr{v4c, v4b}},
		{"after an IPv4 attempt, no ejected IPv6 first", []addrView{{ip: v6a, ejected: true, until: later}, {ip: v4b}}, 0, v4a, []netip.Addr{v4b, v6a}},
		{"ejected last", []addrView{{ip: v4a, ejected: true, until: later}, {ip: v4b, load: 5}, {ip: v4c, ejected: true, until: sooner}}, 0, none, []netip.Addr{v4b, v4c, v4a}},
		{"all ejected, soonest back first", []addrView{{ip: v4a, ejected: true, until: later}, {ip: v4b, ejected: true, until: sooner}}, 0, none, []netip.Addr{v4b, v4a}},
		{"one address", []addrView{{ip: v4a, load: 7}}, 3, none, []netip.Addr{v4a}},
	}
	for _, tt := range tests {
		if got := planAddrs(tt.v, tt.turn, tt.last); !slices.Equal(got, tt.want) {
			t.Errorf("%s: planAddrs = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestAddrStateString(t *testing.T) {
	for _, tt := range []struct {
		s    AddrState
		want string
	}{{AddrActive, "active"}, {AddrEjected, "ejected"}, {AddrDraining, "draining"}, {AddrState(0), "unknown"}} {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("AddrState(%d).String() = %q, want %q", tt.s, got, tt.want)
		}
	}
}

func TestEjectFor(t *testing.T) {
	tests := []struct {
		n    int
		want time.Duration
	}{
		{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {7, 64 * time.Second},
		{8, 2 * time.Minute}, {100, 2 * time.Minute},
	}
	for _, tt := range tests {
		if got := ejectFor(tt.n); got != tt.want {
			t.Errorf("ejectFor(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

// TestAddrsSpread: a name with three addresses gets its connections
// spread evenly over them, and each serves requests; the Observer's
// connection events say which address each went to.
func TestAddrsSpread(t *testing.T) {
	verifyNoLeaks(t)
	b := startBackends(t, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	res := newFakeResolver("backends.test", "127.0.0.1", "127.0.0.2", "127.0.0.3")
	var mu sync.Mutex
	remotes := map[string]int{}
	tr := newTestTransport(t, TransportOptions{Resolver: res, MaxConnsPerHost: 6, PipelineConnsPerHost: 6,
		Observer: &Observer{ConnOpened: func(ev ConnEvent) {
			mu.Lock()
			remotes[ev.RemoteAddr.String()]++
			mu.Unlock()
		}}})
	stop := startLoad(t, tr, b.url("/"), 24)
	waitFor(t, "6 connections", func() bool { return tr.Stats()[b.key()].Open == 6 })
	waitFor(t, "every backend serving", func() bool {
		return b.count[0].Load() > 100 && b.count[1].Load() > 100 && b.count[2].Load() > 100
	})
	if failed, err := stop(); failed > 0 {
		t.Fatalf("%d requests failed, the first with %v", failed, err)
	}
	for _, ip := range b.ips {
		if a := addrsOf(tr, b.key())[ip]; a.Open != 2 || a.State != AddrActive {
			t.Errorf("%s: %d open (%v), want 2 (active)", ip, a.Open, a.State)
		}
		if got, want := remotes[net.JoinHostPort(ip, strconv.Itoa(b.port))], 2; got != want {
			t.Errorf("ConnOpened with RemoteAddr %s: %d, want %d (all: %v)", ip, got, want, remotes)
		}
	}
	if got := res.lookups.Load(); got != 1 {
		t.Errorf("%d lookups, want 1", got)
	}
}

// TestAddrsBackendKilled: a backend killed under load loses no GET (those
// in flight on its connections are sent again elsewhere) and serves no
// more; its address is set aside after one refused dial, and the others
// take its connections.
func TestAddrsBackendKilled(t *testing.T) {
	verifyNoLeaks(t)
	b := startBackends(t, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	res := newFakeResolver("backends.test", "127.0.0.1", "127.0.0.2", "127.0.0.3")
	tr := newTestTransport(t, TransportOptions{Resolver: res, MaxConnsPerHost: 6, PipelineConnsPerHost: 6})
	stop := startLoad(t, tr, b.url("/"), 24)
	waitFor(t, "6 connections", func() bool { return tr.Stats()[b.key()].Open == 6 })
	waitFor(t, "every backend serving", func() bool { return b.count[1].Load() > 100 })
	b.kill(1)
	before := b.count[0].Load() + b.count[2].Load()
	waitFor(t, "the others serving on", func() bool { return b.count[0].Load()+b.count[2].Load() > before+2000 })
	waitFor(t, "6 connections again", func() bool { return tr.Stats()[b.key()].Open == 6 })
	if failed, err := stop(); failed > 0 {
		t.Fatalf("%d requests failed, the first with %v", failed, err)
	}
	as := addrsOf(tr, b.key())
	if a := as["127.0.0.2"]; a.Open != 0 {
		t.Errorf("127.0.0.2 (killed): %d open, want 0", a.Open)
	}
	// Ejected (its ejection may have run out since: 1 s).
	s := tr.addrs.get("backends.test:" + strconv.Itoa(b.port))
	s.mu.Lock()
	if s.addrs[1].until.IsZero() {
		t.Errorf("127.0.0.2 (killed) was never ejected")
	}
	s.mu.Unlock()
	if a, c := as["127.0.0.1"], as["127.0.0.3"]; a.Open != 3 || c.Open != 3 {
		t.Errorf("127.0.0.1 and 127.0.0.3: %d and %d open, want 3 and 3", a.Open, c.Open)
	}
}

// TestAddrsAnswerChanges: an address gone from the answer drains (the
// requests in flight on its connections are answered, then they close
// with CloseDrained) and one added takes the new connections, after the
// next lookup.
func TestAddrsAnswerChanges(t *testing.T) {
	verifyNoLeaks(t)
	b := startBackends(t, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	res := newFakeResolver("backends.test", "127.0.0.1", "127.0.0.2")
	closed := make(chan ConnEvent, 16)
	tr := newTestTransport(t, TransportOptions{Resolver: res, MaxConnsPerHost: 4, PipelineConnsPerHost: 4,
		Observer: &Observer{ConnClosed: func(ev ConnEvent) { closed <- ev }}})
	stop := startLoad(t, tr, b.url("/"), 12)
	waitFor(t, "4 connections", func() bool { return tr.Stats()[b.key()].Open == 4 })
	if failed, err := stop(); failed > 0 {
		t.Fatalf("warm-up: %d requests failed, the first with %v", failed, err)
	}
	if a := addrsOf(tr, b.key())["127.0.0.1"]; a.Open != 2 {
		t.Fatalf("127.0.0.1: %d open before the change, want 2", a.Open)
	}

	// Requests held in flight by 127.0.0.1 while the answer changes.
	b.shut(0)
	stop = startLoad(t, tr, b.url("/"), 12)
	waitFor(t, "requests held on 127.0.0.1", func() bool { return addrsOf(tr, b.key())["127.0.0.1"].InFlight > 0 })
	res.set("backends.test", "127.0.0.2", "127.0.0.3")
	tr.addrs.refresh(tr.addrs.get("backends.test:" + strconv.Itoa(b.port)))
	if a := addrsOf(tr, b.key())["127.0.0.1"]; a.State != AddrDraining || a.InFlight == 0 {
		t.Errorf("127.0.0.1 after the change: %v with %d in flight, want draining with requests", a.State, a.InFlight)
	}
	// Draining connections still count under MaxConnsPerHost: the new
	// address takes connections once they close.
	b.open(0)
	waitFor(t, "127.0.0.1 drained", func() bool { _, ok := addrsOf(tr, b.key())["127.0.0.1"]; return !ok })
	waitFor(t, "127.0.0.3 taking connections", func() bool { return addrsOf(tr, b.key())["127.0.0.3"].Open > 0 })
	served := b.count[0].Load()
	waitFor(t, "the new answer serving", func() bool { return b.count[2].Load() > 200 })
	waitFor(t, "4 connections again", func() bool {
		as := addrsOf(tr, b.key())
		return as["127.0.0.2"].Open+as["127.0.0.3"].Open == 4
	})
	if failed, err := stop(); failed > 0 {
		t.Fatalf("%d requests failed, the first with %v", failed, err)
	}
	if got := b.count[0].Load(); got != served {
		t.Errorf("127.0.0.1 served %d requests after it drained", got-served)
	}
	as := addrsOf(tr, b.key())
	if a, c := as["127.0.0.2"], as["127.0.0.3"]; a.Open+c.Open != 4 || c.Open < 2 {
		t.Errorf("127.0.0.2 and 127.0.0.3: %d and %d open, want 4 in all, 2 at least on the new one", a.Open, c.Open)
	}
	for range 2 {
		select {
		case ev := <-closed:
			if ev.Reason != CloseDrained || ev.RemoteAddr.(*net.TCPAddr).IP.String() != "127.0.0.1" {
				t.Errorf("ConnClosed %v from %v, want %v from 127.0.0.1", ev.Reason, ev.RemoteAddr, CloseDrained)
			}
		default:
			t.Errorf("fewer than 2 connections closed")
		}
	}
}

// TestAddrsFamilies: where a name has an IPv6 and an IPv4 address, new
// connections alternate between them (here every request has one of its
// own: DisableKeepAlives).
func TestAddrsFamilies(t *testing.T) {
	verifyNoLeaks(t)
	b := startBackends(t, "::1", "127.0.0.1")
	res := newFakeResolver("backends.test", "::1", "127.0.0.1")
	tr := newTestTransport(t, TransportOptions{Resolver: res, DisableKeepAlives: true})
	for i := range 8 {
		if _, err := getBody(context.Background(), tr, b.url("/")); err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := 1; i < len(b.order); i++ {
		if b.order[i] == b.order[i-1] {
			t.Fatalf("backends of the requests in order (0: ::1, 1: 127.0.0.1): %v, want them alternating", b.order)
		}
	}
}

// memHosts dials in-memory connections by address ("ip:port", as
// DialContext gets them with DialResolved), each served by memEach(answer)
// unless the address is black-holed (a dial to it waits until cancelled)
// or broken (its connections read a request and close unanswered).
type memHosts struct {
	mu        sync.Mutex
	dials     map[string]int // by ip
	blackHole map[string]bool
	broken    map[string]bool
}

func (h *memHosts) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	ip := hostOf(addr)
	h.mu.Lock()
	if h.dials == nil {
		h.dials = map[string]int{}
	}
	h.dials[ip]++
	hole, broken := h.blackHole[ip], h.broken[ip]
	h.mu.Unlock()
	if hole {
		<-ctx.Done()
		return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
	}
	client, server := memPipe()
	go func() {
		defer server.Close()
		if broken {
			http.ReadRequest(bufio.NewReader(server))
			return
		}
		memEach(func(c net.Conn, req *http.Request) { answer(c, req) })(0, server, bufio.NewReader(server))
	}()
	return client, nil
}

func (h *memHosts) dialsTo(ip string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dials[ip]
}

// TestTimerBlackHole: an address that accepts nothing costs a dial the
// fallback delay once per ejection (1 s, then 2 s, 4 s ...), not every
// request: every request dials here (DisableKeepAlives), half of them to
// it if it were not set aside.
func TestTimerBlackHole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hosts := &memHosts{blackHole: map[string]bool{"10.0.0.2": true}}
		res := newFakeResolver("mem.test", "10.0.0.1", "10.0.0.2")
		tr := NewTransport(TransportOptions{Resolver: res, DialContext: hosts.dial, DialResolved: true, DisableKeepAlives: true})
		defer tr.Close()
		slow := 0
		start := time.Now()
		for i := range 60 { // a request every 100 ms for 6 s
			t0 := time.Now()
			if got := <-memGet(tr, "/"+strconv.Itoa(i)); got != "/"+strconv.Itoa(i) {
				t.Fatalf("GET %d = %q", i, got)
			}
			if took := time.Since(t0); took >= fallbackDelay {
				slow++
				if took > fallbackDelay {
					t.Errorf("GET %d took %v, more than the fallback delay", i, took)
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Tried at the start, after 1 s of ejection and after 2 s more,
		// at most: 3 times in the 6+ s (a fourth would come 4 s later).
		holes := hosts.dialsTo("10.0.0.2")
		if holes < 1 || holes > 3 {
			t.Errorf("%d dials to the black hole in %v, want 1 to 3", holes, time.Since(start))
		}
		if slow != holes {
			t.Errorf("%d requests waited the fallback delay, want %d (one per dial to the black hole)", slow, holes)
		}
		if got := hosts.dialsTo("10.0.0.1"); got != 60 {
			t.Errorf("%d connections to 10.0.0.1, want 60", got)
		}
		s := tr.addrs.get("mem.test:80")
		s.mu.Lock()
		if !time.Now().Before(s.addrs[1].until) {
			t.Errorf("10.0.0.2 not ejected")
		}
		s.mu.Unlock()
	})
}

// TestTimerBrokenAddr: an address whose connections close before their
// first answer is set aside as one whose dials fail: a GET on a new
// connection that fails so is not sent again (as with net/http: the
// connection was not reused), so each costs a request, once per ejection
// rather than every other request.
func TestTimerBrokenAddr(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hosts := &memHosts{broken: map[string]bool{"10.0.0.2": true}}
		res := newFakeResolver("mem.test", "10.0.0.1", "10.0.0.2")
		tr := NewTransport(TransportOptions{Resolver: res, DialContext: hosts.dial, DialResolved: true, DisableKeepAlives: true})
		defer tr.Close()
		failed := 0
		for i := range 60 { // a request every 100 ms for 6 s
			if got := <-memGet(tr, "/"+strconv.Itoa(i)); got != "/"+strconv.Itoa(i) {
				failed++
			}
			time.Sleep(100 * time.Millisecond)
			synctest.Wait() // the broken connection's end is reported
		}
		if n := hosts.dialsTo("10.0.0.2"); failed < 1 || failed > 3 || failed != n {
			t.Errorf("%d requests failed, %d connections to the broken address; want the same, 1 to 3", failed, n)
		}
	})
}

// TestTimerResolverCache: the dials of a burst to a new host share one
// lookup, later requests none, and the answer is looked up again every
// resolveEvery while the host has a pool; once the pool is gone, no more.
// The DNS trace hooks fire around the lookup a dial waits for.
func TestTimerResolverCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hosts := &memHosts{}
		res := newFakeResolver("mem.test", "10.0.0.1", "10.0.0.2")
		res.delay = 10 * time.Millisecond
		tr := NewTransport(TransportOptions{Resolver: res, DialContext: hosts.dial, DialResolved: true,
			MaxConnsPerHost: 8, PipelineConnsPerHost: 8, IdleConnTimeout: 45 * time.Second})
		defer tr.Close()
		var dnsMu sync.Mutex
		var dnsDone []httptrace.DNSDoneInfo
		trace := &httptrace.ClientTrace{DNSDone: func(info httptrace.DNSDoneInfo) {
			dnsMu.Lock()
			dnsDone = append(dnsDone, info)
			dnsMu.Unlock()
		}}
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := httptrace.WithClientTrace(context.Background(), trace)
				if got, err := getBody(ctx, tr, "http://mem.test/"+strconv.Itoa(i)); err != nil || got != "/"+strconv.Itoa(i) {
					t.Errorf("GET %d = %q, %v", i, got, err)
				}
			}()
		}
		wg.Wait()
		synctest.Wait() // the burst's dials are done
		if got := res.lookups.Load(); got != 1 {
			t.Errorf("burst: %d lookups, want 1", got)
		}
		dnsMu.Lock()
		if len(dnsDone) == 0 {
			t.Errorf("no DNSDone")
		}
		for _, info := range dnsDone {
			if info.Err != nil || len(info.Addrs) != 2 {
				t.Errorf("DNSDone %+v, want the two addresses", info)
			}
		}
		dnsMu.Unlock()
		if a, b := hosts.dialsTo("10.0.0.1"), hosts.dialsTo("10.0.0.2"); a+b < 2 || a-b > 1 || b-a > 1 {
			t.Errorf("dials: %d to 10.0.0.1, %d to 10.0.0.2; want them even", a, b)
		}
		for i := range 50 {
			if got := <-memGet(tr, "/"); got != "/" {
				t.Fatalf("GET %d = %q", i, got)
			}
		}
		if got := res.lookups.Load(); got != 1 {
			t.Errorf("after 50 more requests: %d lookups, want 1", got)
		}
		time.Sleep(resolveEvery + time.Second)
		if got := res.lookups.Load(); got != 2 {
			t.Errorf("after %v: %d lookups, want 2", resolveEvery, got)
		}
		// The idle connections close at 45 s, and the pool is forgotten:
		// the refresh at 60 s forgets the host, and none follows.
		time.Sleep(resolveEvery)
		synctest.Wait()
		if tr.Stats()["http://mem.test:80"].Open != 0 {
			t.Fatalf("connections still open: %+v", tr.Stats())
		}
		n := res.lookups.Load()
		time.Sleep(3 * resolveEvery)
		if got := res.lookups.Load(); got != n {
			t.Errorf("with no pool: %d lookups more", got-n)
		}
	})
}

// TestDialResolved: a custom DialContext gets the host's name, as with
// net/http, unless DialResolved is set: then an address of the host's
// answer, while TLS verifies the name and the Host header is the name.
// Proxies and IP addresses are dialed as they are, and
// DisableAddrSpreading dials names.
func TestDialResolved(t *testing.T) {
	cert, roots := memTLS(t)
	tests := []struct {
		name        string
		url         string
		resolved    bool // DialResolved
		noSpreading bool // DisableAddrSpreading
		proxy       string
		wantDial    string
		wantLookups int32
	}{
		{"custom dialer", "https://example.com/", false, false, "", "example.com:443", 0},
		{"custom dialer, DialResolved", "https://example.com/", true, false, "", "10.0.0.7:443", 1},
		{"DialResolved, DisableAddrSpreading", "https://example.com/", true, true, "", "example.com:443", 0},
		{"DialResolved, an IP address", "http://10.1.1.1/", true, false, "", "10.1.1.1:80", 0},
		{"DialResolved, through a proxy", "http://example.com/", true, false, "http://proxy.test:3128", "proxy.test:3128", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			srv := &memServer{
				tls: &tls.Config{Certificates: []tls.Certificate{cert}},
				handle: memEach(func(c net.Conn, req *http.Request) {
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.Host), req.Host)
				}),
			}
			if !strings.HasPrefix(tt.url, "https") {
				srv.tls = nil
			}
			var mu sync.Mutex
			var dialed []string
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				mu.Lock()
				dialed = append(dialed, addr)
				mu.Unlock()
				return srv.dial(ctx, network, addr)
			}
			res := newFakeResolver("example.com", "10.0.0.7")
			opts := TransportOptions{Resolver: res, DialContext: dial, DialResolved: tt.resolved,
				DisableAddrSpreading: tt.noSpreading, TLSClientConfig: roots}
			if tt.proxy != "" {
				u, _ := url.Parse(tt.proxy)
				opts.Proxy = http.ProxyURL(u)
			}
			tr := newTestTransport(t, opts)
			host, err := getBody(context.Background(), tr, tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(tt.url, "https://"), "http://"), "/"); host != want {
				t.Errorf("Host %q, want %q", host, want)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(dialed, []string{tt.wantDial}) {
				t.Errorf("DialContext got %q, want %q", dialed, tt.wantDial)
			}
			if got := res.lookups.Load(); got != tt.wantLookups {
				t.Errorf("%d lookups, want %d", got, tt.wantLookups)
			}
			for host, hs := range tr.Stats() {
				if want := tt.wantLookups; len(hs.Addrs) != int(want) {
					t.Errorf("Stats()[%q].Addrs = %+v, want %d addresses", host, hs.Addrs, want)
				}
			}
		})
	}
}

// TestAddrsLookupFails: a name the resolver does not know fails the
// request as net.Dialer's failed lookup does (a *net.DNSError in a
// *net.OpError), dialing nothing; the failure is not kept, so the next
// dial looks the name up again.
func TestAddrsLookupFails(t *testing.T) {
	verifyNoLeaks(t)
	hosts := &memHosts{}
	res := newFakeResolver("other.test", "10.0.0.1")
	tr := newTestTransport(t, TransportOptions{Resolver: res, DialContext: hosts.dial, DialResolved: true})
	_, err := getBody(context.Background(), tr, "http://mem.test/")
	var dnsErr *net.DNSError
	var opErr *net.OpError
	if !errors.As(err, &opErr) || !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("error %v (%T), want a *net.DNSError, not found, in a *net.OpError", err, err)
	}
	if n := hosts.dialsTo("10.0.0.1"); n != 0 {
		t.Errorf("%d dials", n)
	}
	res.set("mem.test", "10.0.0.1")
	if got, err := getBody(context.Background(), tr, "http://mem.test/x"); err != nil || got != "/x" {
		t.Errorf("once the name is known: %q, %v", got, err)
	}
}
