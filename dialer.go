package pipelined

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/idna"
	"golang.org/x/net/proxy"
)

// poolKey identifies the connections that may serve a request: a pool per
// (proxy, target scheme, target address). Nothing is shared between pools,
// so a connection never carries requests for another target or proxy, and
// credentials of one proxy URL never serve a request meant for another.
type poolKey struct {
	scheme      string // target scheme: "http" or "https"
	addr        string // host:port of the target (ASCII host, default port filled in); "" for a forward proxy's pool
	proxyScheme string // "http", "https", "socks5", "socks5h", or "" for no proxy
	proxyAddr   string // host:port of the proxy
	proxyUser   string // the proxy URL's user info, encoded (url.Userinfo.String), or ""
	proxyAuth   string // Proxy-Authorization value for HTTP(S) proxies, or ""
	// onlyH1 marks the pool of an https target for requests that need
	// HTTP/1.1 (CONNECT and Upgrade: RFC 9113 §8.5, §8.6) when the
	// Transport would otherwise offer h2: its connections offer only
	// "http/1.1" in ALPN, as net/http's connectMethodKey.onlyH1.
	onlyH1 bool
}

// String returns the pool's name as Stats reports it: "scheme://host:port",
// followed by " via scheme://proxyhost:port" for proxied pools, or " via
// scheme://user@proxyhost:port" if the proxy URL has a user name; the pool
// of http:// targets through an HTTP(S) proxy, which every such target
// shares, is "http://* via ...". It never contains a password. The pool of
// an https target kept for requests that need HTTP/1.1 while the Transport
// offers h2 (CONNECT, Upgrade) ends with " (HTTP/1.1 only)".
func (k poolKey) String() string {
	s := k.scheme + "://" + k.addr
	if k.addr == "" {
		s += "*"
	}
	if k.proxyScheme != "" {
		s += " via " + k.proxyScheme + "://"
		if k.proxyUser != "" {
			s += k.proxyURL().User.Username() + "@"
		}
		s += k.proxyAddr
	}
	if k.onlyH1 {
		s += " (HTTP/1.1 only)"
	}
	return s
}

// forwardProxy reports whether requests of the pool are sent to an HTTP(S)
// proxy in absolute form, with the proxy's credentials: an http:// target
// through an http:// or https:// proxy. Every other proxied pool tunnels
// (CONNECT or SOCKS5) and sends origin requests untouched.
func (k poolKey) forwardProxy() bool {
	return k.scheme == "http" && (k.proxyScheme == "http" || k.proxyScheme == "https")
}

// dialAddr returns the address dialed for the pool: the proxy's if any,
// else the target's. It is what the httptrace GetConn hook reports, as in
// net/http.
func (k poolKey) dialAddr() string {
	if k.proxyScheme != "" {
		return k.proxyAddr
	}
	return k.addr
}

// proxyURL returns the proxy URL of the pool, credentials included.
func (k poolKey) proxyURL() *url.URL {
	u := &url.URL{Scheme: k.proxyScheme, Host: k.proxyAddr}
	if k.proxyUser != "" {
		// proxyUser came from url.Userinfo.String: parsing it back is
		// lossless.
		if pu, err := url.Parse("x://" + k.proxyUser + "@h"); err == nil {
			u.User = pu.User
		}
	}
	return u
}

// keyFor returns the pool key for req, calling TransportOptions.Proxy.
// An error from Proxy aborts the request, as in net/http.
func (t *Transport) keyFor(req *http.Request) (poolKey, error) {
	addr, err := canonicalAddr(req.URL.Scheme, req.URL.Host)
	if err != nil {
		return poolKey{}, err
	}
	key := poolKey{scheme: req.URL.Scheme, addr: addr}
	key.onlyH1 = key.scheme == "https" && t.h2.tls && requiresHTTP1(req)
	if t.opts.Proxy == nil {
		return key, nil
	}
	u, err := t.opts.Proxy(req)
	if err != nil || u == nil {
		return key, err
	}
	switch u.Scheme {
	case "":
		key.proxyScheme = "http" // as net/http: a bare host:port is an HTTP proxy
	case "http", "https", "socks5", "socks5h":
		key.proxyScheme = u.Scheme
	default:
		return poolKey{}, fmt.Errorf("pipelined: unsupported proxy scheme %q", u.Scheme)
	}
	if u.Host == "" {
		return poolKey{}, fmt.Errorf("pipelined: proxy URL %q has no host", u.Redacted())
	}
	if key.proxyAddr, err = canonicalAddr(key.proxyScheme, u.Host); err != nil {
		return poolKey{}, err
	}
	if u.User != nil {
		key.proxyUser = u.User.String()
		if key.proxyScheme == "http" || key.proxyScheme == "https" {
			// net/http's connectMethod.proxyAuth: Basic, from the user info.
			password, _ := u.User.Password()
			key.proxyAuth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+password))
		}
	}
	if key.forwardProxy() {
		// Each request names its target (absolute form) and the
		// connection goes to the proxy: one pool for every http://
		// target, as net/http's connectMethodKey, so that MaxConnsPerHost
		// bounds the connections to the proxy and a crawler through it
		// reuses them from one target to the next.
		key.addr = ""
	}
	return key, nil
}

// canonicalAddr returns host:port for a URL host, with the scheme's default
// port and an ASCII (IDNA) host, as net/http dials.
func canonicalAddr(scheme, hostport string) (string, error) {
	if isPlainHostPort(hostport) {
		return hostport, nil // already canonical: the common case, no allocation
	}
	host, port := hostport, ""
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && !strings.Contains(hostport[i:], "]") {
		host, port = hostport[:i], hostport[i+1:]
	}
	if port == "" {
		switch scheme {
		case "https":
			port = "443"
		case "socks5", "socks5h":
			port = "1080"
		default:
			port = "80"
		}
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if !isASCII(host) {
		h, err := idna.Lookup.ToASCII(host)
		if err != nil {
			return "", err
		}
		host = h
	}
	return net.JoinHostPort(host, port), nil
}

// isPlainHostPort reports whether hostport is an ASCII name or IPv4 address
// followed by a non-empty port, which is its own canonical form.
func isPlainHostPort(hostport string) bool {
	i := strings.LastIndexByte(hostport, ':')
	if i <= 0 || i == len(hostport)-1 {
		return false
	}
	for j := 0; j < len(hostport); j++ {
		c := hostport[j]
		if c >= 0x80 || c == '[' || c == ']' || c == '%' || (c == ':' && j != i) {
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}

// defaultDialer dials when TransportOptions has no DialContext: net/http's
// DefaultTransport's dialer (dialTimeout, tcpKeepAlive).
var defaultDialer = &net.Dialer{Timeout: dialTimeout, KeepAlive: tcpKeepAlive}

const (
	dialTimeout  = 30 * time.Second // a connect's bound: net/http's DefaultTransport's
	tcpKeepAlive = 30 * time.Second // TCP keep-alive probes' interval: net/http's DefaultTransport's
)

// connectTimeout bounds a CONNECT exchange with a proxy, as in net/http.
const connectTimeout = time.Minute

// A ProxyConnectError reports that an HTTP proxy responded to a CONNECT request
// with a status other than 200. The request that needed the tunnel fails
// with it; net/http reports the same case with an error whose text is the
// status text alone.
type ProxyConnectError struct {
	StatusCode int    // e.g. 407
	Status     string // e.g. "407 Proxy Authentication Required"
}

// Error returns "pipelined: proxy refused CONNECT: " followed by the status.
func (e *ProxyConnectError) Error() string {
	return "pipelined: proxy refused CONNECT: " + e.Status
}

// dial opens a connection for key, as net/http's dialConn does: TCP (or
// DialTLSContext) to the target or the proxy, TLS to an https proxy, a
// CONNECT or SOCKS5 tunnel, and TLS to an https target. It runs in a dial
// goroutine of the pool and holds no lock. ctx carries the values of the
// request that started the dial (and so its httptrace hooks) and is
// cancelled only by Transport.Close.
func (t *Transport) dial(ctx context.Context, key poolKey) (net.Conn, *tls.ConnectionState, error) {
	hop := hopOf(ctx)
	if key.proxyScheme == "" {
		if key.scheme == "https" && t.opts.DialTLSContext != nil {
			return t.dialTLSHook(ctx, key.addr, t.offersH2(key))
		}
		conn, err := t.dialHost(ctx, key.addr) // over the host's addresses (addrs.go)
		hop.end()
		if err != nil {
			return nil, nil, err
		}
		if key.scheme != "https" {
			return conn, nil, nil
		}
		return t.addTLS(ctx, conn, hostOf(key.addr), t.alpn(key))
	}

	var conn net.Conn
	var state *tls.ConnectionState
	var err error
	if key.proxyScheme == "socks5" || key.proxyScheme == "socks5h" {
		conn, err = t.dialSOCKS(ctx, key) // the proxy connects to the target
		hop.end()
	} else {
		conn, state, err = t.dialHTTPProxy(ctx, key)
	}
	if err != nil {
		hop.end()
		return nil, nil, err
	}
	if key.forwardProxy() {
		hop.end()
		return conn, state, nil
	}
	if key.proxyScheme == "http" || key.proxyScheme == "https" {
		err := t.connectTunnel(ctx, conn, key) // the proxy connects to the target
		hop.end()
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
	}
	if key.scheme != "https" {
		return conn, nil, nil
	}
	// The TLS inside a tunnel is end to end: h2 may be offered.
	return t.addTLS(ctx, conn, hostOf(key.addr), t.alpn(key))
}

// proxyConnectError wraps an error in reaching a proxy as net/http does
// (golang/go#16997), so that it names the proxy rather than the target.
func proxyConnectError(err error) error {
	return &net.OpError{Op: "proxyconnect", Net: "tcp", Err: err}
}

// dialHTTPProxy connects to the HTTP proxy of key: TCP, then TLS for an
// https proxy (DialTLSContext if set, as net/http does for the first TLS
// hop). Errors are wrapped as "proxyconnect".
func (t *Transport) dialHTTPProxy(ctx context.Context, key poolKey) (net.Conn, *tls.ConnectionState, error) {
	if key.proxyScheme == "https" && t.opts.DialTLSContext != nil {
		conn, state, err := t.dialTLSHook(ctx, key.proxyAddr, false)
		if err != nil {
			return nil, nil, proxyConnectError(err)
		}
		return conn, state, nil
	}
	conn, err := t.dialTCP(ctx, key.proxyAddr)
	if err != nil {
		return nil, nil, proxyConnectError(err)
	}
	if key.proxyScheme != "https" {
		return conn, nil, nil
	}
	// Proxies are spoken to in HTTP/1.1 (requests in absolute form, or
	// CONNECT), never offered h2.
	conn, state, err := t.addTLS(ctx, conn, hostOf(key.proxyAddr), alpnHTTP1)
	if err != nil {
		return nil, nil, proxyConnectError(err)
	}
	return conn, state, nil
}

// dialTCP dials addr with DialContext or the default dialer, stamping the
// start of a pool dial's first hop (firstHop).
func (t *Transport) dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	dial := t.opts.DialContext
	if dial == nil {
		dial = defaultDialer.DialContext
	}
	hopOf(ctx).begin()
	conn, err := dial(ctx, "tcp", addr)
	if err == nil && conn == nil {
		err = errors.New("pipelined: DialContext returned (nil, nil)")
	}
	return conn, err
}

// tlsStater is a TLS connection as net/http takes one from DialTLSContext
// (golang/go#21753, Go 1.27): a *tls.Conn, or any connection with its
// ConnectionState method (a wrapper, another TLS implementation), whose
// state says what ALPN chose. tlsHandshaker is one that can be
// handshaken.
type tlsStater interface {
	ConnectionState() tls.ConnectionState
}

type tlsHandshaker interface {
	tlsStater
	HandshakeContext(ctx context.Context) error
}

// dialTLSHook dials addr with DialTLSContext and, if it returns a TLS
// connection (tlsStater) that has not completed its handshake and can
// perform it, performs it (as net/http does); the connection's state then
// says which protocol it speaks. TLSClientConfig and TLSHandshakeTimeout
// do not apply. A negotiated "h2" is accepted only if allowH2.
func (t *Transport) dialTLSHook(ctx context.Context, addr string, allowH2 bool) (net.Conn, *tls.ConnectionState, error) {
	conn, err := t.opts.DialTLSContext(ctx, "tcp", addr)
	if err == nil && conn == nil {
		err = errors.New("pipelined: DialTLSContext returned (nil, nil)")
	}
	if err != nil {
		return nil, nil, err
	}
	tc, ok := conn.(tlsStater)
	if !ok {
		return conn, nil, nil
	}
	if h, ok := conn.(tlsHandshaker); ok && !tc.ConnectionState().HandshakeComplete {
		if err := handshake(ctx, h); err != nil {
			conn.Close()
			return nil, nil, err
		}
	}
	st := tc.ConnectionState()
	if err := checkALPN(&st, allowH2); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, &st, nil
}

// addTLS runs a TLS client handshake over conn for serverName, with a clone
// of TLSClientConfig (never modified) whose ALPN offer is protos (RFC 7301),
// under TLSHandshakeTimeout. It closes conn on failure.
func (t *Transport) addTLS(ctx context.Context, conn net.Conn, serverName string, protos []string) (net.Conn, *tls.ConnectionState, error) {
	var cfg *tls.Config
	if t.opts.TLSClientConfig != nil {
		cfg = t.opts.TLSClientConfig.Clone()
	} else {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = serverName
	}
	// The offer is ours, whatever the caller's config says: "h2" only
	// where this Transport serves it (see alpn).
	cfg.NextProtos = protos
	tc := tls.Client(conn, cfg)

	hctx := ctx
	if d := t.opts.TLSHandshakeTimeout; d > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeoutCause(ctx, d, ErrTLSHandshakeTimeout)
		defer cancel()
	}
	err := handshake(hctx, tc)
	if err != nil && context.Cause(hctx) == ErrTLSHandshakeTimeout {
		err = ErrTLSHandshakeTimeout
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	st := tc.ConnectionState()
	if err := checkALPN(&st, slices.Contains(protos, "h2")); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return tc, &st, nil
}

// handshake runs tc's handshake under ctx, firing the TLSHandshakeStart and
// TLSHandshakeDone hooks of the trace ctx carries.
//
// While a hook runs, nobody waits for the dial (firstHop.hooked): a
// request the hook sends to the host dials its own, as with net/http,
// instead of waiting for the dial that runs the hook.
func handshake(ctx context.Context, tc tlsHandshaker) error {
	trace := httptrace.ContextClientTrace(ctx)
	hop := hopOf(ctx)
	if trace != nil && trace.TLSHandshakeStart != nil {
		hop.hook(trace.TLSHandshakeStart)
	}
	err := tc.HandshakeContext(ctx)
	if trace != nil && trace.TLSHandshakeDone != nil {
		st := tls.ConnectionState{}
		if err == nil {
			st = tc.ConnectionState()
		}
		terr := err
		if terr != nil && context.Cause(ctx) == ErrTLSHandshakeTimeout {
			terr = ErrTLSHandshakeTimeout
		}
		hop.hook(func() { trace.TLSHandshakeDone(st, terr) })
	}
	return err
}

// checkALPN rejects a connection on which TLS negotiated a protocol other
// than HTTP/1.1, or "h2" if allowH2 (another protocol is possible only with
// DialTLSContext, or from a server that ignores RFC 7301 §3.2).
func checkALPN(st *tls.ConnectionState, allowH2 bool) error {
	switch p := st.NegotiatedProtocol; {
	case p == "" || p == "http/1.1":
	case p == "h2" && allowH2:
	case allowH2:
		return fmt.Errorf("pipelined: TLS negotiated protocol %q; only HTTP/1.1 and HTTP/2 are supported", p)
	default:
		return fmt.Errorf("pipelined: TLS negotiated protocol %q; only HTTP/1.1 is supported", p)
	}
	return nil
}

// connectTunnel asks the HTTP proxy at the other end of conn for a tunnel to
// key.addr (RFC 9110 §9.3.6), as net/http does: headers from
// GetProxyConnectHeader or ProxyConnectHeader, Proxy-Authorization from
// the proxy URL, the exchange bounded by one minute and the reply's header
// by MaxResponseHeaderBytes, then OnProxyConnectResponse, then the status.
// A reply other than 200 fails with a *ProxyConnectError, whatever content
// comes with it (or later): that content is never read, as net/http never
// reads it, and the caller closes conn. Only a 200 reply followed by bytes
// the proxy sent before the tunnel's client spoke is an error of its own.
func (t *Transport) connectTunnel(ctx context.Context, conn net.Conn, key poolKey) error {
	pu := key.proxyURL()
	hdr := t.opts.ProxyConnectHeader
	if t.opts.GetProxyConnectHeader != nil {
		h, err := t.opts.GetProxyConnectHeader(ctx, pu, key.addr)
		if err != nil {
			return err
		}
		hdr = h
	}
	hdr = hdr.Clone()
	if hdr == nil {
		hdr = make(http.Header)
	}
	if key.proxyAuth != "" {
		hdr.Set("Proxy-Authorization", key.proxyAuth)
	}
	connectReq := &http.Request{
		Method: http.MethodConnect,
		URL:    &url.URL{Opaque: key.addr},
		Host:   key.addr,
		Header: hdr,
	}
	connectReq = connectReq.WithContext(ctx)

	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	// Unblock the exchange when cctx ends; the caller closes conn.
	stop := context.AfterFunc(cctx, func() { conn.SetDeadline(aLongTimeAgo) })
	var resp *http.Response
	err := connectReq.Write(conn)
	if err == nil {
		lr := &io.LimitedReader{R: conn, N: t.opts.MaxResponseHeaderBytes}
		br := bufio.NewReader(lr)
		resp, err = http.ReadResponse(br, connectReq)
		if err != nil && lr.N <= 0 {
			err = fmt.Errorf("pipelined: proxy's CONNECT response headers exceeded %d bytes", t.opts.MaxResponseHeaderBytes)
		} else if err == nil && resp.StatusCode == http.StatusOK && br.Buffered() > 0 {
			// RFC 9110 §9.3.6: a 2xx reply has no content and the
			// tunnel starts right after its header; the proxy may not
			// speak first for a TLS target. Any other reply may carry
			// content (an error page, often in the same segment as the
			// status line): it is left unread, since the connection is
			// closed, and the status is reported below.
			err = errors.New("pipelined: proxy sent data after its CONNECT reply")
		}
	}
	if !stop() { // cctx ended during the exchange
		if err := cctx.Err(); err != context.DeadlineExceeded {
			return fmt.Errorf("pipelined: CONNECT to proxy %s: %w", key.proxyAddr, err)
		}
		// A timeout, as net/http's (context.DeadlineExceeded, bare): a
		// net.Error itself, so that a *url.Error reports it.
		return &timeoutError{fmt.Sprintf("pipelined: CONNECT to proxy %s: %v", key.proxyAddr, context.DeadlineExceeded)}
	}
	if err != nil {
		return err
	}
	if f := t.opts.OnProxyConnectResponse; f != nil {
		if err := f(ctx, pu, connectReq, resp); err != nil {
			return err
		}
	}
	if resp.StatusCode != http.StatusOK {
		return &ProxyConnectError{StatusCode: resp.StatusCode, Status: resp.Status}
	}
	return nil
}

// socksForward is the forward dialer handed to golang.org/x/net/proxy: it
// dials the SOCKS proxy with the transport's DialContext and remembers the
// error, so that a failure to reach the proxy is reported as such.
type socksForward struct {
	t   *Transport
	err error
}

// Dial implements proxy.Dialer.
func (f *socksForward) Dial(network, addr string) (net.Conn, error) {
	return f.DialContext(context.Background(), network, addr)
}

// DialContext implements proxy.ContextDialer.
func (f *socksForward) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := f.t.dialTCP(ctx, addr)
	f.err = err
	return conn, err
}

// dialSOCKS connects to key.addr through the SOCKS5 proxy of key (RFC 1928,
// with RFC 1929 username/password authentication from the proxy URL). The
// target's host name is sent to the proxy, which resolves it, for both
// socks5 and socks5h, as in net/http. A failure to reach the proxy is
// wrapped as "proxyconnect"; SOCKS5 errors come as golang.org/x/net/proxy
// reports them (a *net.OpError), as net/http returns them.
func (t *Transport) dialSOCKS(ctx context.Context, key poolKey) (net.Conn, error) {
	var auth *proxy.Auth
	if pu := key.proxyURL(); pu.User != nil {
		auth = &proxy.Auth{User: pu.User.Username()}
		auth.Password, _ = pu.User.Password()
	}
	fwd := &socksForward{t: t}
	d, err := proxy.SOCKS5("tcp", key.proxyAddr, auth, fwd)
	if err != nil {
		return nil, err
	}
	conn, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", key.addr)
	if err != nil {
		if fwd.err != nil {
			return nil, proxyConnectError(fwd.err)
		}
		return nil, err
	}
	return conn, nil
}
