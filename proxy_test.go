package pipelined

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// origin is a test server that records whether Proxy-Authorization ever
// reached it and the request targets it saw.
type origin struct {
	*httptest.Server
	mu        sync.Mutex
	targets   []string // RequestURI of each request
	proxyAuth int      // requests carrying Proxy-Authorization
}

func newOrigin(t *testing.T, tls bool) *origin {
	o := &origin{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.targets = append(o.targets, r.RequestURI)
		if r.Header.Get("Proxy-Authorization") != "" {
			o.proxyAuth++
		}
		o.mu.Unlock()
		io.WriteString(w, "origin "+r.URL.Path)
	})
	if tls {
		o.Server = httptest.NewTLSServer(h)
	} else {
		o.Server = httptest.NewServer(h)
	}
	t.Cleanup(o.Close)
	return o
}

func (o *origin) seen() (targets []string, proxyAuth int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.targets...), o.proxyAuth
}

// proxyRecord is what a test proxy saw of one request.
type proxyRecord struct {
	method, target, auth, header string
}

// httpProxy is a minimal HTTP proxy on 127.0.0.1: forward (absolute-form)
// requests and CONNECT tunnels. It records each request; with wantAuth set
// it answers 407 to requests without that Proxy-Authorization. With
// connectHold set (before use), it opens a tunnel that long after its
// CONNECT, as to a target far away; holding is how many CONNECTs it holds,
// maxHolding the most at once.
type httpProxy struct {
	*httptest.Server
	wantAuth    string
	mu          sync.Mutex
	seen        []proxyRecord
	conns       atomic.Int32
	fwd         *http.Transport
	connectHold time.Duration
	holding     atomic.Int32
	maxHolding  atomic.Int32
}

func newHTTPProxy(t *testing.T, tls bool, wantAuth string) *httpProxy {
	p := &httpProxy{wantAuth: wantAuth, fwd: &http.Transport{}}
	p.Server = httptest.NewUnstartedServer(p)
	p.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			p.conns.Add(1)
		}
	}
	if tls {
		p.StartTLS()
	} else {
		p.Start()
	}
	t.Cleanup(func() {
		p.Close()
		p.fwd.CloseIdleConnections()
	})
	return p
}

func (p *httpProxy) records() []proxyRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]proxyRecord(nil), p.seen...)
}

func (p *httpProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.seen = append(p.seen, proxyRecord{
		method: r.Method, target: r.RequestURI,
		auth: r.Header.Get("Proxy-Authorization"), header: r.Header.Get("X-Connect"),
	})
	p.mu.Unlock()
	if p.wantAuth != "" && r.Header.Get("Proxy-Authorization") != p.wantAuth {
		w.Header().Set("Proxy-Authenticate", `Basic realm="test"`)
		w.WriteHeader(http.StatusProxyAuthRequired)
		return
	}
	if r.Method == http.MethodConnect {
		if p.connectHold > 0 {
			n := p.holding.Add(1)
			for m := p.maxHolding.Load(); n > m && !p.maxHolding.CompareAndSwap(m, n); m = p.maxHolding.Load() {
			}
			time.Sleep(p.connectHold)
			p.holding.Add(-1)
		}
		p.tunnel(w, r)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(w, "not a proxy request", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Authorization")
	resp, err := p.fwd.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vv := range resp.Header {
		w.Header()[k] = vv
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

func (p *httpProxy) tunnel(w http.ResponseWriter, r *http.Request) {
	up, err := net.Dial("tcp", r.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return
	}
	brw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	brw.Flush()
	splice(c, brw.Reader, up)
}

// splice copies both ways between a client connection (with its buffered
// reader) and an upstream connection, until either side ends.
func splice(c net.Conn, br io.Reader, up net.Conn) {
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, br); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
}

// socksServer is a minimal SOCKS5 server on 127.0.0.1 (RFC 1928, CONNECT
// only; RFC 1929 username/password when user is set). Domain names listed
// in hosts are resolved to the given addresses; it records what it saw.
type socksServer struct {
	srv        *rawServer
	user, pass string
	hosts      map[string]string
	mu         sync.Mutex
	targets    []string // requested host:port
	logins     []string // "user:pass" offered
}

func newSOCKSServer(t *testing.T, user, pass string, hosts map[string]string) *socksServer {
	s := &socksServer{user: user, pass: pass, hosts: hosts}
	s.srv = startRawServer(t, func(_ int, c net.Conn) { s.serve(c) })
	return s
}

func (s *socksServer) addr() string { return s.srv.addr }

func (s *socksServer) seen() (targets, logins []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.targets...), append([]string(nil), s.logins...)
}

func (s *socksServer) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	readN := func(n int) []byte {
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil
		}
		return b
	}
	// Greeting: VER NMETHODS METHODS.
	h := readN(2)
	if h == nil || h[0] != 5 {
		return
	}
	methods := readN(int(h[1]))
	want := byte(0x00)
	if s.user != "" {
		want = 0x02
	}
	if methods == nil || !strings.ContainsRune(string(methods), rune(want)) {
		c.Write([]byte{5, 0xff})
		return
	}
	c.Write([]byte{5, want})
	if want == 0x02 {
		// RFC 1929: VER ULEN UNAME PLEN PASSWD.
		v := readN(2)
		if v == nil || v[0] != 1 {
			return
		}
		u := readN(int(v[1]))
		pl := readN(1)
		if u == nil || pl == nil {
			return
		}
		p := readN(int(pl[0]))
		s.mu.Lock()
		s.logins = append(s.logins, string(u)+":"+string(p))
		s.mu.Unlock()
		if string(u) != s.user || string(p) != s.pass {
			c.Write([]byte{1, 1})
			return
		}
		c.Write([]byte{1, 0})
	}
	// Request: VER CMD RSV ATYP DST.ADDR DST.PORT.
	r := readN(4)
	if r == nil || r[1] != 1 {
		return
	}
	var host string
	switch r[3] {
	case 1:
		host = net.IP(readN(4)).String()
	case 4:
		host = net.IP(readN(16)).String()
	case 3:
		l := readN(1)
		if l == nil {
			return
		}
		host = string(readN(int(l[0])))
	default:
		return
	}
	pb := readN(2)
	if pb == nil {
		return
	}
	port := fmt.Sprint(int(pb[0])<<8 | int(pb[1]))
	s.mu.Lock()
	s.targets = append(s.targets, net.JoinHostPort(host, port))
	s.mu.Unlock()
	if a, ok := s.hosts[host]; ok {
		host = a
	}
	up, err := net.Dial("tcp", net.JoinHostPort(host, port))
	if err != nil {
		c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0}) // connection refused
		return
	}
	c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	splice(c, br, up)
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func proxyFunc(u string) func(*http.Request) (*url.URL, error) {
	pu, err := url.Parse(u)
	if err != nil {
		panic(err)
	}
	return http.ProxyURL(pu)
}

func statsKeys(tr *Transport) []string {
	var keys []string
	for k := range tr.Stats() {
		keys = append(keys, k)
	}
	return keys
}

// http:// targets through an HTTP proxy: absolute-form requests carrying
// Proxy-Authorization from the proxy URL, which never reaches the origin;
// connections are pooled per (proxy, target) and reused.
func TestHTTPProxyForward(t *testing.T) {
	for _, proxyTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("https proxy %v", proxyTLS), func(t *testing.T) {
			o := newOrigin(t, false)
			p := newHTTPProxy(t, proxyTLS, basic("user", "p@ss"))
			pu, _ := url.Parse(p.URL)
			pu.User = url.UserPassword("user", "p@ss")
			tr := NewTransport(TransportOptions{
				Proxy:           http.ProxyURL(pu),
				TLSClientConfig: tlsRoots(p.Server),
				MaxConnsPerHost: 1,
			})
			defer tr.Close()

			const n = 3
			for i := 0; i < n; i++ {
				if got, want := mustGet(t, tr, o.URL+"/a?b=c"), "origin /a"; got != want {
					t.Fatalf("GET = %q, want %q", got, want)
				}
			}
			for _, r := range p.records() {
				if want := o.URL + "/a?b=c"; r.method != "GET" || r.target != want {
					t.Errorf("proxy saw %s %s, want GET %s (absolute form)", r.method, r.target, want)
				}
				if want := basic("user", "p@ss"); r.auth != want {
					t.Errorf("proxy saw Proxy-Authorization %q, want %q", r.auth, want)
				}
			}
			if got := len(p.records()); got != n {
				t.Errorf("proxy saw %d requests, want %d", got, n)
			}
			if got := p.conns.Load(); got != 1 {
				t.Errorf("connections to the proxy = %d, want 1", got)
			}
			targets, auth := o.seen()
			if auth != 0 || len(targets) != n {
				t.Errorf("origin saw %d requests, %d with Proxy-Authorization; want %d, 0", len(targets), auth, n)
			}
			wantKey := "http://* via " + strings.Replace(p.URL, "://", "://user@", 1)
			if _, ok := tr.Stats()[wantKey]; !ok || len(tr.Stats()) != 1 {
				t.Errorf("Stats keys = %q, want [%q]", statsKeys(tr), wantKey)
			}
		})
	}
}

// Requests to an HTTP forward proxy are never pipelined (depthLocked): a
// proxy relays what follows a request to the origin, and one that closes
// each connection after its answer without saying so (tinyproxy) cuts
// that answer short. The raw proxy here answers each request itself and
// notes any that came while one was unanswered; concurrent GETs to 32
// targets dial up to MaxConnsPerHost and share the connections, as
// net/http's do (keyFor: one pool for every http:// target).
func TestHTTPProxyForwardNotPipelined(t *testing.T) {
	verifyNoLeaks(t)
	var pipelined, served atomic.Int32
	p := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond) // let a pipelined request arrive
			if br.Buffered() > 0 {
				pipelined.Add(1)
			}
			served.Add(1)
			body := req.URL.String()
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	})
	pu, _ := url.Parse(p.url(""))
	tr := newTestTransport(t, TransportOptions{Proxy: http.ProxyURL(pu), MaxConnsPerHost: 2, PipelineDepth: 8})
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			target := fmt.Sprintf("http://origin%d.test/", i)
			if got := mustGet(t, tr, target); got != target {
				t.Errorf("GET %s = %q", target, got)
			}
		})
	}
	waitOrFail(t, &wg, "GETs")
	if n := pipelined.Load(); n != 0 {
		t.Errorf("the proxy got %d requests pipelined behind another, want none", n)
	}
	if d := tr.Stats()["http://* via "+p.url("")].PipelineDepth; d != 1 {
		t.Errorf("Stats().PipelineDepth = %d, want 1; Stats: %+v", d, tr.Stats())
	}
	if n := p.conns.Load(); n > 2 {
		t.Errorf("connections to the proxy = %d, want at most 2 (MaxConnsPerHost)", n)
	}
}

// https:// targets through an HTTP proxy: a CONNECT tunnel carrying the
// proxy's credentials and ProxyConnectHeader, then TLS to the origin, which
// sees origin-form requests and no Proxy-Authorization.
func TestHTTPProxyConnect(t *testing.T) {
	for _, proxyTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("https proxy %v", proxyTLS), func(t *testing.T) {
			o := newOrigin(t, true)
			p := newHTTPProxy(t, proxyTLS, basic("u", "pw"))
			pu, _ := url.Parse(p.URL)
			pu.User = url.UserPassword("u", "pw")
			var hookCalls atomic.Int32
			tr := NewTransport(TransportOptions{
				Proxy: http.ProxyURL(pu),
				// httptest servers share a certificate: one pool trusts both.
				TLSClientConfig:    tlsRoots(o.Server),
				ProxyConnectHeader: http.Header{"X-Connect": {"static"}},
				OnProxyConnectResponse: func(ctx context.Context, u *url.URL, req *http.Request, resp *http.Response) error {
					hookCalls.Add(1)
					if u.User.Username() != "u" || req.Method != "CONNECT" || resp.StatusCode != 200 {
						t.Errorf("OnProxyConnectResponse(%v, %s, %d)", u.Redacted(), req.Method, resp.StatusCode)
					}
					return nil
				},
				MaxConnsPerHost: 1,
			})
			defer tr.Close()

			const n = 3
			for i := 0; i < n; i++ {
				req, _ := http.NewRequest("GET", o.URL+"/x", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatalf("RoundTrip: %v", err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "origin /x" {
					t.Fatalf("body = %q, want %q", b, "origin /x")
				}
				if resp.TLS == nil || !resp.TLS.HandshakeComplete {
					t.Fatalf("resp.TLS = %v, want the origin's TLS state", resp.TLS)
				}
			}
			recs := p.records()
			want := proxyRecord{"CONNECT", hostPort(t, o.URL), basic("u", "pw"), "static"}
			if len(recs) != 1 || recs[0] != want {
				t.Errorf("proxy saw %+v, want [%+v]", recs, want)
			}
			if hookCalls.Load() != 1 {
				t.Errorf("OnProxyConnectResponse calls = %d, want 1", hookCalls.Load())
			}
			targets, auth := o.seen()
			if auth != 0 || len(targets) != n || targets[0] != "/x" {
				t.Errorf("origin saw %q, %d with Proxy-Authorization; want %d × /x, 0", targets, auth, n)
			}
		})
	}
}

// GetProxyConnectHeader overrides ProxyConnectHeader; its error, an
// OnProxyConnectResponse error and a refusal from the proxy fail the
// request, and the next request dials afresh.
func TestHTTPProxyConnectFailures(t *testing.T) {
	errHook := errors.New("hook says no")
	for _, tc := range []struct {
		name     string
		wantAuth string
		opts     TransportOptions
		check    func(err error) bool
		connects int // CONNECTs the proxy sees over 2 requests
	}{
		{
			name:     "refused",
			wantAuth: basic("a", "b"),
			check: func(err error) bool {
				var pe *ProxyConnectError
				return errors.As(err, &pe) && pe.StatusCode == 407 &&
					strings.Contains(err.Error(), "Proxy Authentication Required")
			},
			connects: 2,
		},
		{
			name: "GetProxyConnectHeader error",
			opts: TransportOptions{GetProxyConnectHeader: func(context.Context, *url.URL, string) (http.Header, error) {
				return nil, errHook
			}},
			check:    func(err error) bool { return errors.Is(err, errHook) },
			connects: 0,
		},
		{
			name: "OnProxyConnectResponse error",
			opts: TransportOptions{OnProxyConnectResponse: func(context.Context, *url.URL, *http.Request, *http.Response) error {
				return errHook
			}},
			check:    func(err error) bool { return errors.Is(err, errHook) },
			connects: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOrigin(t, true)
			p := newHTTPProxy(t, false, tc.wantAuth)
			opts := tc.opts
			opts.Proxy = proxyFunc(p.URL)
			opts.TLSClientConfig = tlsRoots(o.Server)
			tr := NewTransport(opts)
			defer tr.Close()
			for i := 0; i < 2; i++ {
				req, _ := http.NewRequest("GET", o.URL, nil)
				_, err := tr.RoundTrip(req)
				if !tc.check(err) {
					t.Fatalf("RoundTrip error = %v (%T), unexpected", err, err)
				}
			}
			if got := len(p.records()); got != tc.connects {
				t.Errorf("proxy saw %d CONNECTs, want %d", got, tc.connects)
			}
		})
	}
}

func TestGetProxyConnectHeader(t *testing.T) {
	o := newOrigin(t, true)
	p := newHTTPProxy(t, false, "")
	var gotTarget string
	tr := NewTransport(TransportOptions{
		Proxy:              proxyFunc(p.URL),
		TLSClientConfig:    tlsRoots(o.Server),
		ProxyConnectHeader: http.Header{"X-Connect": {"static"}},
		GetProxyConnectHeader: func(ctx context.Context, u *url.URL, target string) (http.Header, error) {
			gotTarget = target
			return http.Header{"X-Connect": {"dynamic"}}, nil
		},
	})
	defer tr.Close()
	mustGet(t, tr, o.URL)
	if recs := p.records(); len(recs) != 1 || recs[0].header != "dynamic" {
		t.Errorf("proxy saw %+v, want X-Connect: dynamic", recs)
	}
	if want := hostPort(t, o.URL); gotTarget != want {
		t.Errorf("GetProxyConnectHeader target = %q, want %q", gotTarget, want)
	}
}

// Failing to reach a proxy is reported as net/http does: a *net.OpError
// with Op "proxyconnect".
func TestProxyUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	for _, scheme := range []string{"http", "https", "socks5", "socks5h"} {
		for _, target := range []string{"http", "https"} {
			t.Run(scheme+"→"+target, func(t *testing.T) {
				tr := NewTransport(TransportOptions{Proxy: proxyFunc(scheme + "://" + dead)})
				defer tr.Close()
				req, _ := http.NewRequest("GET", target+"://example.com/", nil)
				_, err := tr.RoundTrip(req)
				var oe *net.OpError
				if !errors.As(err, &oe) || oe.Op != "proxyconnect" {
					t.Fatalf("RoundTrip error = %v, want a *net.OpError with Op proxyconnect", err)
				}
			})
		}
	}
}

func TestProxyFuncErrors(t *testing.T) {
	errProxy := errors.New("no proxy for you")
	for _, tc := range []struct {
		name  string
		proxy func(*http.Request) (*url.URL, error)
		want  string
	}{
		{"error", func(*http.Request) (*url.URL, error) { return nil, errProxy }, "no proxy for you"},
		{"scheme", proxyFunc("ftp://127.0.0.1:21"), `pipelined: unsupported proxy scheme "ftp"`},
		{"no host", func(*http.Request) (*url.URL, error) { return &url.URL{Scheme: "http"}, nil }, "has no host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dials atomic.Int32
			tr := NewTransport(TransportOptions{
				Proxy: tc.proxy,
				DialContext: func(context.Context, string, string) (net.Conn, error) {
					dials.Add(1)
					return nil, errors.New("no dial expected")
				},
			})
			defer tr.Close()
			req, _ := http.NewRequest("GET", "http://example.com/", nil)
			_, err := tr.RoundTrip(req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RoundTrip error = %v, want one containing %q", err, tc.want)
			}
			if dials.Load() != 0 || len(tr.Stats()) != 0 {
				t.Errorf("dials = %d, pools = %q; want none", dials.Load(), statsKeys(tr))
			}
		})
	}
	// ProxyFromEnvironment never proxies loopback addresses: it plugs in
	// as is.
	o := newOrigin(t, false)
	tr := NewTransport(TransportOptions{Proxy: http.ProxyFromEnvironment})
	defer tr.Close()
	mustGet(t, tr, o.URL)
}

// SOCKS5 through golang.org/x/net/proxy: with and without authentication,
// to http and https targets; the proxy resolves host names; origin
// requests are untouched (origin form, no Proxy-Authorization).
func TestSOCKS5(t *testing.T) {
	for _, tc := range []struct {
		scheme     string
		user, pass string
		tls        bool
	}{
		{"socks5", "", "", false},
		{"socks5", "", "", true},
		{"socks5h", "alice", "s3cret", false},
		{"socks5h", "alice", "s3cret", true},
	} {
		t.Run(fmt.Sprintf("%s user=%q tls=%v", tc.scheme, tc.user, tc.tls), func(t *testing.T) {
			o := newOrigin(t, tc.tls)
			_, port, _ := net.SplitHostPort(hostPort(t, o.URL))
			// example.com is in httptest's certificate; only the proxy
			// knows where it is.
			s := newSOCKSServer(t, tc.user, tc.pass, map[string]string{"example.com": "127.0.0.1"})
			pu := &url.URL{Scheme: tc.scheme, Host: s.addr()}
			if tc.user != "" {
				pu.User = url.UserPassword(tc.user, tc.pass)
			}
			tr := NewTransport(TransportOptions{
				Proxy:           http.ProxyURL(pu),
				TLSClientConfig: tlsRoots(o.Server),
				MaxConnsPerHost: 1,
			})
			defer tr.Close()
			scheme := "http"
			if tc.tls {
				scheme = "https"
			}
			target := net.JoinHostPort("example.com", port)
			const n = 3
			for i := 0; i < n; i++ {
				if got, want := mustGet(t, tr, scheme+"://"+target+"/s"), "origin /s"; got != want {
					t.Fatalf("GET = %q, want %q", got, want)
				}
			}
			targets, logins := s.seen()
			if len(targets) != 1 || targets[0] != target {
				t.Errorf("SOCKS server saw targets %q, want [%q] (one pooled connection)", targets, target)
			}
			if tc.user != "" && (len(logins) != 1 || logins[0] != tc.user+":"+tc.pass) {
				t.Errorf("SOCKS server saw logins %q, want [%q]", logins, tc.user+":"+tc.pass)
			}
			otargets, auth := o.seen()
			if auth != 0 || len(otargets) != n || otargets[0] != "/s" {
				t.Errorf("origin saw %q, %d with Proxy-Authorization; want %d × /s, 0", otargets, auth, n)
			}
			wantKey := scheme + "://" + target + " via " + tc.scheme + "://" + s.addr()
			if tc.user != "" {
				wantKey = scheme + "://" + target + " via " + tc.scheme + "://" + tc.user + "@" + s.addr()
			}
			if keys := statsKeys(tr); len(keys) != 1 || keys[0] != wantKey {
				t.Errorf("Stats keys = %q, want [%q]", keys, wantKey)
			}
		})
	}
}

func TestSOCKS5Refused(t *testing.T) {
	o := newOrigin(t, false)
	s := newSOCKSServer(t, "alice", "right", nil)
	tr := NewTransport(TransportOptions{Proxy: proxyFunc("socks5://alice:wrong@" + s.addr())})
	defer tr.Close()
	req, _ := http.NewRequest("GET", o.URL, nil)
	_, err := tr.RoundTrip(req)
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op == "proxyconnect" {
		t.Fatalf("RoundTrip error = %v, want the SOCKS dialer's *net.OpError", err)
	}
	if targets, _ := o.seen(); len(targets) != 0 {
		t.Errorf("origin saw %q, want nothing", targets)
	}
}

// Pools are keyed by (proxy, scheme, target): the same target direct,
// through two proxies and with two sets of credentials gets separate
// pools, and no credentials show in Stats.
func TestProxyPoolsSeparate(t *testing.T) {
	o := newOrigin(t, false)
	p1 := newHTTPProxy(t, false, "")
	p2 := newHTTPProxy(t, false, "")
	s := newSOCKSServer(t, "", "", nil)
	p1u, _ := url.Parse(p1.URL)
	p2u, _ := url.Parse(p2.URL)
	route := func(r *http.Request) (*url.URL, error) {
		switch r.Header.Get("Route") {
		case "p1":
			return p1u, nil
		case "p1-alice":
			return &url.URL{Scheme: "http", Host: p1u.Host, User: url.UserPassword("alice", "secret-a")}, nil
		case "p1-bob":
			return &url.URL{Scheme: "http", Host: p1u.Host, User: url.UserPassword("bob", "secret-b")}, nil
		case "p2":
			return p2u, nil
		case "socks":
			return &url.URL{Scheme: "socks5", Host: s.addr()}, nil
		}
		return nil, nil
	}
	tr := NewTransport(TransportOptions{Proxy: route})
	defer tr.Close()
	routes := []string{"", "p1", "p1-alice", "p1-bob", "p2", "socks"}
	for _, r := range routes {
		req, _ := http.NewRequest("GET", o.URL, nil)
		req.Header.Set("Route", r)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatalf("route %q: %v", r, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	stats := tr.Stats()
	hp1 := strings.TrimPrefix(p1.URL, "http://")
	for _, want := range []string{
		o.URL,
		"http://* via " + p1.URL,
		"http://* via http://alice@" + hp1,
		"http://* via http://bob@" + hp1,
		"http://* via " + p2.URL,
		o.URL + " via socks5://" + s.addr(),
	} {
		if _, ok := stats[want]; !ok {
			t.Errorf("Stats has no key %q", want)
		}
	}
	if len(stats) != len(routes) {
		t.Errorf("Stats keys = %q, want %d", statsKeys(tr), len(routes))
	}
	if n := p1.conns.Load(); n != 3 {
		t.Errorf("connections to p1 = %d, want 3 (one per set of credentials)", n)
	}
	for k := range stats {
		if strings.Contains(k, "secret") {
			t.Errorf("Stats key %q shows a password", k)
		}
	}
	var sum int
	for _, st := range stats {
		sum += st.Open
	}
	if sum != len(routes) {
		t.Errorf("open connections = %d, want %d (one per pool)", sum, len(routes))
	}
}

// The CONNECT reply is bounded by MaxResponseHeaderBytes, and a proxy that
// speaks before the tunnel's client is refused.
func TestHTTPProxyConnectBadReplies(t *testing.T) {
	for _, tc := range []struct {
		name, reply string
		want        string // the error contains it
	}{
		{"huge header", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 4096) + "\r\n\r\n", "exceeded 1024 bytes"},
		{"data after reply", "HTTP/1.1 200 OK\r\n\r\nHTTP/1.1 200 OK\r\n", "data after its CONNECT reply"},
		{"garbage", "SSH-2.0-OpenSSH\r\n\r\n", "malformed HTTP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				io.WriteString(c, tc.reply)
				io.Copy(io.Discard, br)
			})
			tr := NewTransport(TransportOptions{
				Proxy:                  proxyFunc(proxy.url("")),
				MaxResponseHeaderBytes: 1024,
			})
			defer tr.Close()
			req, _ := http.NewRequest("GET", "https://example.com/", nil)
			_, err := tr.RoundTrip(req)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				// The reply is one small write: it arrives in one read. If
				// it did not, the TLS handshake fails on the extra bytes.
				if !(tc.name == "data after reply" && err != nil && strings.Contains(err.Error(), "tls:")) {
					t.Fatalf("RoundTrip error = %v, want one containing %q", err, tc.want)
				}
			}
		})
	}
}

// A proxy that never answers a CONNECT holds only the dial: the request
// that started it can give up, and Close ends the dial.
func TestHTTPProxyConnectHangs(t *testing.T) {
	addr, stop := silentListener(t)
	defer stop()
	tr := NewTransport(TransportOptions{Proxy: proxyFunc("http://" + addr)})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://example.com/", nil)
	errc := make(chan error, 1)
	go func() {
		_, err := tr.RoundTrip(req)
		errc <- err
	}()
	key := "https://example.com:443 via http://" + addr
	waitFor(t, "the dial", func() bool { return tr.Stats()[key].Dialing == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("RoundTrip error = %v, want context.Canceled", err)
	}
	if s := tr.Stats()[key]; s.Dialing != 1 {
		t.Fatalf("Stats = %+v, want the dial still running", s)
	}
	tr.Close() // returns once the dial has ended
	if s := tr.Stats()[key]; s.Dialing != 0 {
		t.Fatalf("after Close: Stats = %+v, want no dial", s)
	}
}

// A proxy's refusal of a CONNECT comes with an error page, often in the
// same segment as its status line (squid, tinyproxy): whatever its framing
// and however it arrives, the request fails with a *ProxyConnectError
// carrying the status, OnProxyConnectResponse sees the reply once, the body
// is not waited for, and the connection is closed. Only a 200 reply
// followed by bytes is refused as such.
func TestHTTPProxyConnectRefusalBodies(t *testing.T) {
	const page = "<html><body><h1>ERROR</h1><p>The requested URL could not be retrieved</p></body></html>\n"
	for _, tc := range []struct {
		name       string
		writes     []string // the reply, one write each, a short delay apart
		close      bool     // the proxy closes after its reply, else it waits for the client to
		status     string   // the refusal's status, or "" for a 200
		wantErr    string   // for a 200: the error contains it
		wantClosed bool     // the client must close the connection
	}{
		{
			name: "407 Content-Length body in the same write",
			writes: []string{"HTTP/1.1 407 Proxy Authentication Required\r\n" +
				"Proxy-Authenticate: Basic realm=\"squid\"\r\nContent-Type: text/html\r\n" +
				fmt.Sprintf("Content-Length: %d\r\n\r\n", len(page)) + page},
			status:     "407 Proxy Authentication Required",
			wantClosed: true,
		},
		{
			name: "503 body in a second write",
			writes: []string{
				"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html\r\n" +
					fmt.Sprintf("Content-Length: %d\r\n\r\n", len(page)),
				page,
			},
			status:     "503 Service Unavailable",
			wantClosed: true,
		},
		{
			name: "403 chunked body",
			writes: []string{"HTTP/1.1 403 Forbidden\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n" +
				fmt.Sprintf("%x\r\n%s\r\n", len(page), page) + "0\r\n\r\n"},
			status:     "403 Forbidden",
			wantClosed: true,
		},
		{
			name:   "500 close-delimited body",
			writes: []string{"HTTP/1.0 500 Internal Server Error\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n" + page},
			close:  true,
			status: "500 Internal Server Error",
		},
		{
			// More than MaxResponseHeaderBytes, and only half of it sent:
			// the body is neither read nor waited for.
			name: "407 body larger than the header limit, never completed",
			writes: []string{"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 100000\r\n\r\n" +
				strings.Repeat("x", 50000)},
			status:     "407 Proxy Authentication Required",
			wantClosed: true,
		},
		{
			name:    "200 followed by stray bytes",
			writes:  []string{"HTTP/1.1 200 Connection established\r\n\r\nSSH-2.0-OpenSSH\r\n"},
			wantErr: "data after its CONNECT reply",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closed := make(chan struct{})
			proxy := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				for i, w := range tc.writes {
					if i > 0 {
						time.Sleep(20 * time.Millisecond)
					}
					if _, err := io.WriteString(c, w); err != nil {
						break // the client has given up on the body
					}
				}
				if tc.close {
					return
				}
				io.Copy(io.Discard, br)
				close(closed)
			})
			var (
				hookCalls  atomic.Int32
				hookStatus atomic.Value
			)
			tr := NewTransport(TransportOptions{
				Proxy:                  proxyFunc(proxy.url("")),
				MaxResponseHeaderBytes: 1024,
				OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, resp *http.Response) error {
					hookCalls.Add(1)
					hookStatus.Store(resp.Status)
					return nil
				},
			})
			defer tr.Close()
			req, _ := http.NewRequest("GET", "https://example.com/", nil)
			_, err := tr.RoundTrip(req)

			if tc.status == "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					// As in TestHTTPProxyConnectBadReplies: should the
					// stray bytes come in a read of their own, the TLS
					// handshake fails on them.
					if err == nil || !strings.Contains(err.Error(), "tls:") {
						t.Fatalf("RoundTrip error = %v, want one containing %q", err, tc.wantErr)
					}
				} else if n := hookCalls.Load(); n != 0 {
					t.Errorf("OnProxyConnectResponse calls = %d, want 0 (the reply is rejected first)", n)
				}
				return
			}
			var pe *ProxyConnectError
			if !errors.As(err, &pe) {
				t.Fatalf("RoundTrip error = %v (%T), want a *ProxyConnectError", err, err)
			}
			code, _, _ := strings.Cut(tc.status, " ")
			if fmt.Sprint(pe.StatusCode) != code || pe.Status != tc.status {
				t.Errorf("ProxyConnectError = %+v, want status %q", *pe, tc.status)
			}
			if want := "pipelined: proxy refused CONNECT: " + tc.status; err.Error() != want {
				t.Errorf("error text = %q, want %q", err.Error(), want)
			}
			if n := hookCalls.Load(); n != 1 {
				t.Errorf("OnProxyConnectResponse calls = %d, want 1", n)
			} else if got := hookStatus.Load(); got != tc.status {
				t.Errorf("OnProxyConnectResponse saw status %v, want %q", got, tc.status)
			}
			if tc.wantClosed {
				select {
				case <-closed:
				case <-time.After(testTimeout):
					t.Errorf("the connection to the proxy is still open %v after the refusal", testTimeout)
				}
			}
		})
	}
}

// TestFarOriginThroughConnectProxy sends a burst to an https origin behind
// a CONNECT proxy that opens each tunnel 300 ms after its CONNECT, as a
// proxy does for a target far away. The burst's requests must dial while
// the first tunnel opens, as net/http's do, not once it is open and its
// TLS has said which protocol the origin speaks (farDialLocked: the first
// hop spans the proxy's connect to the origin); before, the proxy never
// held two CONNECTs at once. An HTTP/2 origin keeps one connection.
func TestFarOriginThroughConnectProxy(t *testing.T) {
	tests := []struct {
		kind      string
		wantProto string
		wantOpen  int
	}{
		{h1Only, "HTTP/1.1", 6},
		{h2Prefer, "HTTP/2.0", 1},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			verifyNoLeaks(t)
			srv, _ := h2TestServer(t, tt.kind, protoHandler(), nil)
			p := newHTTPProxy(t, false, "")
			p.connectHold = 300 * time.Millisecond
			pu, _ := url.Parse(p.URL)
			tr := newTestTransport(t, TransportOptions{Proxy: http.ProxyURL(pu), TLSClientConfig: tlsRoots(srv)})
			var wg sync.WaitGroup
			for range 6 {
				wg.Go(func() {
					if resp, err := get(t, tr, srv.URL); err != nil {
						t.Error(err)
					} else {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			if n := p.maxHolding.Load(); n < 2 {
				t.Errorf("the proxy held at most %d CONNECTs at once, want 2 or more", n)
			}
			waitFor(t, "the dials' end", func() bool {
				for _, s := range tr.Stats() {
					if s.Dialing > 0 {
						return false
					}
				}
				return true
			})
			for k, s := range tr.Stats() {
				if s.Protocol != tt.wantProto || s.Open != tt.wantOpen {
					t.Errorf("Stats()[%s]: protocol %s, %d open; want %s, %d", k, s.Protocol, s.Open, tt.wantProto, tt.wantOpen)
				}
			}
		})
	}
}
