package pipelined

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gatedDialer dials TCP like net.Dialer, counting dials per address. Dials
// to an address in gated, after the first free ones, block until the
// address's gate is opened (or the dial's context ends).
type gatedDialer struct {
	mu    sync.Mutex
	n     map[string]int
	free  map[string]int           // dials let through before gating
	gates map[string]chan struct{} // closed to let gated dials through
	d     net.Dialer
}

func newGatedDialer() *gatedDialer {
	return &gatedDialer{n: map[string]int{}, free: map[string]int{}, gates: map[string]chan struct{}{}}
}

// gate makes dials to addr after the first free ones wait for open(addr).
func (g *gatedDialer) gate(addr string, free int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.free[addr] = free
	g.gates[addr] = make(chan struct{})
}

func (g *gatedDialer) open(addr string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.gates[addr])
}

func (g *gatedDialer) count(addr string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n[addr]
}

func (g *gatedDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	g.mu.Lock()
	g.n[addr]++
	gate := g.gates[addr]
	if gate != nil && g.n[addr] <= g.free[addr] {
		gate = nil
	}
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.d.DialContext(ctx, network, addr)
}

func hostPort(t *testing.T, rawURL string) string {
	t.Helper()
	return strings.TrimPrefix(strings.TrimPrefix(rawURL, "http://"), "https://")
}

func mustGet(t *testing.T, tr http.RoundTripper, url string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", url, err)
	}
	return string(b)
}

// A slow dial to one host delays nothing else: another host keeps being
// served, the pool's lock stays free (Stats answers), and a request waiting
// on the slow dial takes the host's existing connection when it frees up
// (the dial race). The dial, once through, joins the pool as idle.
func TestSlowDialDelaysNothingElse(t *testing.T) {
	unblock := make(chan struct{})
	seen := make(chan string, 10)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.URL.Path
		if r.URL.Path == "/hold" {
			<-unblock
		}
		io.WriteString(w, r.URL.Path)
	}))
	defer slow.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "other")
	}))
	defer other.Close()

	slowAddr := hostPort(t, slow.URL)
	g := newGatedDialer()
	g.gate(slowAddr, 1) // the first dial to slow is free, later ones hang
	tr := NewTransport(TransportOptions{DialContext: g.DialContext})
	defer tr.Close()

	if got := mustGet(t, tr, slow.URL+"/first"); got != "/first" {
		t.Fatalf("GET /first = %q, want %q", got, "/first")
	}
	<-seen

	// Occupy the only connection.
	held := make(chan string, 1)
	go func() { held <- mustGet(t, tr, slow.URL+"/hold") }()
	<-seen

	// This request finds the connection busy and starts a dial that hangs.
	waiting := make(chan string, 1)
	go func() { waiting <- mustGet(t, tr, slow.URL+"/waiting") }()
	key := "http://" + slowAddr
	waitFor(t, "a dial and a queued request", func() bool {
		s := tr.Stats()[key]
		return s.Dialing == 1 && s.Queued == 1
	})

	// Another host is served meanwhile.
	for i := 0; i < 3; i++ {
		if got := mustGet(t, tr, other.URL); got != "other" {
			t.Fatalf("GET other = %q, want %q", got, "other")
		}
	}

	// The existing connection frees up first: the waiting request takes it.
	close(unblock)
	if got := <-held; got != "/hold" {
		t.Fatalf("GET /hold = %q, want %q", got, "/hold")
	}
	if got := <-waiting; got != "/waiting" {
		t.Fatalf("GET /waiting = %q, want %q", got, "/waiting")
	}
	if s := tr.Stats()[key]; s.Dialing != 1 || s.Open != 1 {
		t.Fatalf("after the race: Stats = %+v, want Dialing 1, Open 1", s)
	}

	// The unneeded dial completes and joins the pool.
	g.open(slowAddr)
	waitFor(t, "the dial to join the pool", func() bool {
		s := tr.Stats()[key]
		return s.Dialing == 0 && s.Open == 2 && s.Idle == 2
	})
	if n := g.count(slowAddr); n != 2 {
		t.Fatalf("dials to slow = %d, want 2", n)
	}
}

// Cancelling the request that started a dial does not waste the dial: a
// request waiting for it gets it, and with nobody waiting it joins the pool
// as an idle connection.
func TestCancelledDialIsNotWasted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		others int // requests queued behind the cancelled one
	}{
		{"nobody waits", 0},
		{"others wait", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "ok")
			}))
			defer srv.Close()
			addr := hostPort(t, srv.URL)
			g := newGatedDialer()
			g.gate(addr, 0)
			tr := NewTransport(TransportOptions{DialContext: g.DialContext, MaxConnsPerHost: 1})
			defer tr.Close()
			key := "http://" + addr

			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			first := make(chan error, 1)
			go func() {
				_, err := tr.RoundTrip(req)
				first <- err
			}()
			waitFor(t, "the first dial", func() bool { return g.count(addr) == 1 })

			results := make(chan string, tc.others)
			for i := 0; i < tc.others; i++ {
				go func() { results <- mustGet(t, tr, srv.URL) }()
			}
			waitFor(t, "the queue", func() bool { return tr.Stats()[key].Queued == 1+tc.others })

			cancel()
			if err := <-first; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled RoundTrip = %v, want context.Canceled", err)
			}
			g.open(addr)
			for i := 0; i < tc.others; i++ {
				if got := <-results; got != "ok" {
					t.Fatalf("GET = %q, want %q", got, "ok")
				}
			}
			waitFor(t, "an idle connection", func() bool {
				s := tr.Stats()[key]
				return s.Open == 1 && s.Idle == 1 && s.Dialing == 0
			})
			// The pooled connection serves the next request: no new dial.
			mustGet(t, tr, srv.URL)
			if n := g.count(addr); n != 1 {
				t.Fatalf("dials = %d, want 1", n)
			}
		})
	}
}

// Dialing connections count toward MaxConnsPerHost.
func TestDialingCountsTowardMaxConnsPerHost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	addr := hostPort(t, srv.URL)
	g := newGatedDialer()
	g.gate(addr, 0)
	const maxConns, requests = 2, 6
	tr := NewTransport(TransportOptions{DialContext: g.DialContext, MaxConnsPerHost: maxConns})
	defer tr.Close()
	key := "http://" + addr

	results := make(chan string, requests)
	for i := 0; i < requests; i++ {
		go func() { results <- mustGet(t, tr, srv.URL) }()
	}
	waitFor(t, "all requests queued", func() bool { return tr.Stats()[key].Queued == requests })
	if s := tr.Stats()[key]; s.Dialing != maxConns {
		t.Fatalf("Stats = %+v, want Dialing %d", s, maxConns)
	}
	// Stats counts a dial when it starts; the dialer sees it a moment later.
	waitFor(t, "the dials to reach the dialer", func() bool { return g.count(addr) >= maxConns })
	if n := g.count(addr); n != maxConns {
		t.Fatalf("dials = %d, want %d", n, maxConns)
	}
	g.open(addr)
	for i := 0; i < requests; i++ {
		if got := <-results; got != "ok" {
			t.Fatalf("GET = %q, want %q", got, "ok")
		}
	}
	if n := g.count(addr); n != maxConns {
		t.Fatalf("dials after serving = %d, want %d", n, maxConns)
	}
}

// A failed dial fails the request waiting on it with the dial's error,
// frees its slot, and is not retried in a loop: every request costs at most
// one dial.
func TestDialErrorFailsWaiterWithoutLoop(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // dials to addr are refused

	for _, tc := range []struct {
		name       string
		maxConns   int
		concurrent bool
	}{
		{"sequential", 1, false},
		{"concurrent, one slot", 1, true},
		{"concurrent, many slots", 8, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dials atomic.Int32
			var d net.Dialer
			tr := NewTransport(TransportOptions{
				MaxConnsPerHost: tc.maxConns,
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					return d.DialContext(ctx, network, addr)
				},
			})
			defer tr.Close()
			const requests = 5
			errs := make(chan error, requests)
			do := func() {
				req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
				resp, err := tr.RoundTrip(req)
				if resp != nil {
					resp.Body.Close()
				}
				errs <- err
			}
			for i := 0; i < requests; i++ {
				if tc.concurrent {
					go do()
				} else {
					do()
				}
			}
			for i := 0; i < requests; i++ {
				err := <-errs
				var oe *net.OpError
				if !errors.As(err, &oe) || oe.Op != "dial" {
					t.Fatalf("RoundTrip error = %v (%T), want a *net.OpError from dial", err, err)
				}
			}
			s := tr.Stats()["http://"+addr]
			if s.Dialing != 0 || s.Queued != 0 || s.Open != 0 {
				t.Fatalf("Stats = %+v, want an empty pool", s)
			}
			if n := dials.Load(); n < 1 || n > requests {
				t.Fatalf("dials = %d, want 1..%d", n, requests)
			}
			if !tc.concurrent && dials.Load() != requests {
				t.Fatalf("dials = %d, want %d", dials.Load(), requests)
			}
		})
	}
}

func TestDialReturnsNilNil(t *testing.T) {
	tr := NewTransport(TransportOptions{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) { return nil, nil },
	})
	defer tr.Close()
	req, _ := http.NewRequest("GET", "http://127.0.0.1:1/", nil)
	_, err := tr.RoundTrip(req)
	if err == nil || !strings.Contains(err.Error(), "(nil, nil)") {
		t.Fatalf("RoundTrip error = %v, want one about (nil, nil)", err)
	}
}

// tlsRoots returns a config trusting srv's certificate.
func tlsRoots(srv *httptest.Server) *tls.Config {
	pool := x509.NewCertPool()
	if c := srv.Certificate(); c != nil {
		pool.AddCert(c)
	}
	return &tls.Config{RootCAs: pool}
}

// redirectDialer dials to before dialing everything else in to, so that
// URLs may name hosts (such as example.com, which httptest's certificate
// covers) that resolve nowhere.
func redirectDialer(to string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, to)
	}
}

type tlsTrace struct {
	mu     sync.Mutex
	starts int
	dones  []error
	states []tls.ConnectionState
}

func (tt *tlsTrace) ctx() context.Context {
	return httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		TLSHandshakeStart: func() {
			tt.mu.Lock()
			tt.starts++
			tt.mu.Unlock()
		},
		TLSHandshakeDone: func(st tls.ConnectionState, err error) {
			tt.mu.Lock()
			tt.dones = append(tt.dones, err)
			tt.states = append(tt.states, st)
			tt.mu.Unlock()
		},
	})
}

func TestTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Host)
	}))
	defer srv.Close()
	addr := hostPort(t, srv.URL)

	cfg := tlsRoots(srv)
	tr := NewTransport(TransportOptions{TLSClientConfig: cfg, DialContext: redirectDialer(addr)})
	defer tr.Close()

	for _, host := range []string{"example.com", "127.0.0.1"} {
		t.Run(host, func(t *testing.T) {
			var tt tlsTrace
			req, _ := http.NewRequestWithContext(tt.ctx(), "GET", "https://"+host+"/", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != host {
				t.Errorf("body = %q, want %q", b, host)
			}
			if resp.TLS == nil || !resp.TLS.HandshakeComplete {
				t.Fatalf("resp.TLS = %+v, want a completed handshake", resp.TLS)
			}
			// Verification succeeded against the host's name; SNI carries
			// names, not IP addresses (RFC 6066 §3).
			if want := host; net.ParseIP(host) == nil && resp.TLS.ServerName != want {
				t.Errorf("resp.TLS.ServerName = %q, want %q (defaulted from the host)", resp.TLS.ServerName, want)
			}
			if p := resp.TLS.NegotiatedProtocol; p != "http/1.1" {
				t.Errorf("NegotiatedProtocol = %q, want %q", p, "http/1.1")
			}
			tt.mu.Lock()
			defer tt.mu.Unlock()
			if tt.starts != 1 || len(tt.dones) != 1 || tt.dones[0] != nil || !tt.states[0].HandshakeComplete {
				t.Errorf("trace: %d starts, dones %v, want 1 start and 1 successful done", tt.starts, tt.dones)
			}
		})
	}
	if cfg.ServerName != "" || cfg.NextProtos != nil {
		t.Errorf("TLSClientConfig modified: ServerName %q, NextProtos %q", cfg.ServerName, cfg.NextProtos)
	}
}

func TestTLSVerificationError(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshake
	srv.StartTLS()
	defer srv.Close()
	tr := NewTransport(TransportOptions{}) // system roots: the test certificate is untrusted
	defer tr.Close()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	_, err := tr.RoundTrip(req)
	var ve *tls.CertificateVerificationError
	if !errors.As(err, &ve) {
		t.Fatalf("RoundTrip error = %v (%T), want a *tls.CertificateVerificationError", err, err)
	}
}

// DialTLSContext replaces DialContext and the handshake; a *tls.Conn it
// returns without a handshake is handshaken, with the trace hooks.
func TestDialTLSContext(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	addr := hostPort(t, srv.URL)

	for _, tc := range []struct {
		name      string
		handshake bool // the hook handshakes itself
		starts    int  // TLSHandshakeStart calls wanted
	}{
		{"not handshaken", false, 1},
		{"handshaken", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dials atomic.Int32
			tr := NewTransport(TransportOptions{
				// Ignored with DialTLSContext: it would fail verification.
				TLSClientConfig: &tls.Config{ServerName: "wrong.invalid"},
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					return nil, errors.New("DialContext must not be called")
				},
				DialTLSContext: func(ctx context.Context, network, a string) (net.Conn, error) {
					dials.Add(1)
					if a != addr {
						t.Errorf("DialTLSContext addr = %q, want %q", a, addr)
					}
					var d net.Dialer
					c, err := d.DialContext(ctx, network, a)
					if err != nil {
						return nil, err
					}
					cfg := tlsRoots(srv)
					cfg.ServerName = "example.com"
					tc2 := tls.Client(c, cfg)
					if tc.handshake {
						if err := tc2.HandshakeContext(ctx); err != nil {
							c.Close()
							return nil, err
						}
					}
					return tc2, nil
				},
			})
			defer tr.Close()
			var tt tlsTrace
			req, _ := http.NewRequestWithContext(tt.ctx(), "GET", srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			resp.Body.Close()
			if resp.TLS == nil || resp.TLS.ServerName != "example.com" {
				t.Fatalf("resp.TLS = %+v, want the hook's connection state", resp.TLS)
			}
			if dials.Load() != 1 {
				t.Errorf("DialTLSContext calls = %d, want 1", dials.Load())
			}
			tt.mu.Lock()
			defer tt.mu.Unlock()
			if tt.starts != tc.starts || len(tt.dones) != tc.starts {
				t.Errorf("trace: %d starts, %d dones, want %d", tt.starts, len(tt.dones), tc.starts)
			}
		})
	}
}

// silentListener accepts connections and never writes to them.
func silentListener(t *testing.T) (addr string, stop func()) {
	s := newRawServer(t, func(_ net.Conn, br *bufio.Reader) { io.Copy(io.Discard, br) })
	return s.addr, s.close
}

func TestTLSHandshakeTimeout(t *testing.T) {
	addr, stop := silentListener(t)
	defer stop()
	tr := NewTransport(TransportOptions{TLSHandshakeTimeout: 50 * time.Millisecond})
	defer tr.Close()
	var tt tlsTrace
	req, _ := http.NewRequestWithContext(tt.ctx(), "GET", "https://"+addr+"/", nil)
	_, err := tr.RoundTrip(req)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("RoundTrip error = %v (%T), want a net.Error with Timeout()", err, err)
	}
	if want := "pipelined: TLS handshake timeout"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false, want true", err)
	}
	tt.mu.Lock()
	if len(tt.dones) != 1 || tt.dones[0] != ErrTLSHandshakeTimeout {
		t.Errorf("TLSHandshakeDone errors = %v, want [%v]", tt.dones, ErrTLSHandshakeTimeout)
	}
	tt.mu.Unlock()
	if s := tr.Stats()["https://"+addr]; s.Dialing != 0 || s.Open != 0 {
		t.Errorf("Stats = %+v, want an empty pool", s)
	}
}

// DisableKeepAlives: one request per connection, each with Connection:
// close, each connection dialed on its own.
func TestDisableKeepAlives(t *testing.T) {
	var conns atomic.Int32
	var closeHeaders atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Close && r.Header.Get("Connection") == "close" {
			closeHeaders.Add(1)
		}
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	addr := hostPort(t, srv.URL)
	g := newGatedDialer()
	tr := NewTransport(TransportOptions{DisableKeepAlives: true, DialContext: g.DialContext, MaxConnsPerHost: 3})
	defer tr.Close()

	const sequential, concurrent = 3, 6
	for i := 0; i < sequential; i++ {
		mustGet(t, tr, srv.URL)
	}
	var wg sync.WaitGroup
	for i := 0; i < concurrent; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mustGet(t, tr, srv.URL)
		}()
	}
	wg.Wait()
	const total = sequential + concurrent
	if n := g.count(addr); n != total {
		t.Errorf("dials = %d, want %d", n, total)
	}
	if n := conns.Load(); n != total {
		t.Errorf("server connections = %d, want %d", n, total)
	}
	if n := closeHeaders.Load(); n != total {
		t.Errorf("requests with Connection: close = %d, want %d", n, total)
	}
	waitFor(t, "no connection left", func() bool {
		s := tr.Stats()["http://"+addr]
		return s.Open == 0 && s.Dialing == 0
	})
}

// The dial's context carries the values of the request that started it:
// net.Dialer's ConnectStart/ConnectDone reach its trace. GetConn reports
// the address dialed: the proxy's when proxied, as in net/http.
func TestDialCarriesTrace(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	p := newHTTPProxy(t, false, "")
	for _, tc := range []struct {
		name  string
		proxy string
		want  string // address of GetConn and ConnectDone
	}{
		{"direct", "", hostPort(t, srv.URL)},
		{"proxied", p.URL, hostPort(t, p.URL)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := TransportOptions{}
			if tc.proxy != "" {
				opts.Proxy = proxyFunc(tc.proxy)
			}
			tr := NewTransport(opts)
			defer tr.Close()
			var mu sync.Mutex
			var getConn, connectDone []string
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				GetConn: func(hostPort string) {
					mu.Lock()
					getConn = append(getConn, hostPort)
					mu.Unlock()
				},
				ConnectDone: func(network, addr string, err error) {
					mu.Lock()
					connectDone = append(connectDone, addr)
					mu.Unlock()
				},
			})
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if len(getConn) != 1 || getConn[0] != tc.want {
				t.Errorf("GetConn calls = %q, want [%q]", getConn, tc.want)
			}
			if len(connectDone) != 1 || connectDone[0] != tc.want {
				t.Errorf("ConnectDone calls = %q, want [%q]", connectDone, tc.want)
			}
		})
	}
}

// A connection on which TLS negotiated h2 (possible only through
// DialTLSContext) is refused when HTTP/2 is off.
func TestDialTLSContextRefusesH2(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	var h1 http.Protocols
	h1.SetHTTP1(true)
	tr := NewTransport(TransportOptions{
		Protocols: &h1,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			cfg := tlsRoots(srv)
			cfg.NextProtos = []string{"h2"}
			return tls.Dial(network, addr, cfg)
		},
	})
	defer tr.Close()
	req, _ := http.NewRequest("GET", srv.URL, nil)
	_, err := tr.RoundTrip(req)
	if err == nil || !strings.Contains(err.Error(), `negotiated protocol "h2"`) {
		t.Fatalf("RoundTrip error = %v, want a refusal of h2", err)
	}
}

// stateConn is a TLS connection that is not a *tls.Conn: a wrapper with
// the ConnectionState and HandshakeContext methods, as another TLS
// implementation or an instrumented connection has.
type stateConn struct {
	net.Conn
	tc *tls.Conn
}

func (c stateConn) ConnectionState() tls.ConnectionState       { return c.tc.ConnectionState() }
func (c stateConn) HandshakeContext(ctx context.Context) error { return c.tc.HandshakeContext(ctx) }

// A TLS connection from DialTLSContext that is not a *tls.Conn but has
// ConnectionState (golang/go#21753: net/http reads ALPN's choice from it
// since Go 1.27) speaks what ALPN chose, HTTP/2 included, is handshaken if
// it has not been (with the trace hooks), and is resp.TLS; an h2 it
// negotiated is refused when HTTP/2 is off. Before, it was taken for
// HTTP/1.1 whatever it negotiated, with no resp.TLS.
func TestDialTLSContextConnectionState(t *testing.T) {
	var h1 http.Protocols
	h1.SetHTTP1(true)
	tests := []struct {
		name      string
		server    string
		offer     []string
		handshake bool // the hook handshakes itself
		protocols *http.Protocols
		want      string // resp.Proto, or the error
	}{
		{"h2", h2Prefer, []string{"h2", "http/1.1"}, true, nil, "HTTP/2.0"},
		{"h2 not handshaken", h2Prefer, []string{"h2", "http/1.1"}, false, nil, "HTTP/2.0"},
		{"http/1.1", h2Prefer, []string{"http/1.1"}, true, nil, "HTTP/1.1"},
		{"no ALPN", h1Only, nil, false, nil, "HTTP/1.1"},
		{"h2 refused", h2Prefer, []string{"h2"}, true, &h1, `negotiated protocol "h2"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verifyNoLeaks(t)
			srv, _ := h2TestServer(t, tt.server, protoHandler(), nil)
			tr := newTestTransport(t, TransportOptions{
				Protocols: tt.protocols,
				DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					var d net.Dialer
					c, err := d.DialContext(ctx, network, addr)
					if err != nil {
						return nil, err
					}
					cfg := tlsRoots(srv)
					cfg.ServerName = "example.com"
					cfg.NextProtos = tt.offer
					tc := tls.Client(c, cfg)
					if tt.handshake {
						if err := tc.HandshakeContext(ctx); err != nil {
							c.Close()
							return nil, err
						}
					}
					return stateConn{tc, tc}, nil
				},
			})
			var trace tlsTrace
			req, _ := http.NewRequestWithContext(trace.ctx(), "GET", srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if strings.HasPrefix(tt.want, "HTTP/") {
				if err != nil {
					t.Fatalf("RoundTrip: %v", err)
				}
				body := readBody(t, resp)
				if resp.Proto != tt.want || body != tt.want {
					t.Errorf("Proto %s, the server heard %q; want %s", resp.Proto, body, tt.want)
				}
				if resp.TLS == nil || !resp.TLS.HandshakeComplete {
					t.Errorf("resp.TLS = %+v, want the connection's state", resp.TLS)
				}
			} else if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("RoundTrip error = %v, want %q", err, tt.want)
			}
			trace.mu.Lock()
			defer trace.mu.Unlock()
			if want := map[bool]int{false: 1, true: 0}[tt.handshake]; trace.starts != want || len(trace.dones) != want {
				t.Errorf("trace: %d starts, %d dones, want %d", trace.starts, len(trace.dones), want)
			}
		})
	}
}
