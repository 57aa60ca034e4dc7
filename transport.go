package pipelined

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pipelined/pipelined/internal/model"
	"golang.org/x/net/http/httpguts"
)

// Defaults used when a [TransportOptions] field is zero.
const (
	// DefaultPipelineConnsPerHost is the pipelining threshold when
	// TransportOptions.PipelineConnsPerHost is zero: pipelineable requests
	// open up to 8 connections per host, and are pipelined on them beyond
	// that. Browsers settled on 6 connections per host; pipelining
	// multiplies what each connection carries, so 8 connections of depth 4
	// carry 32 requests at once, more than most clients have outstanding
	// to one host, while staying polite to servers and load balancers that
	// count connections per client.
	DefaultPipelineConnsPerHost = 8

	// DefaultIdleConnTimeout is TransportOptions.IdleConnTimeout when it is
	// zero: http.DefaultTransport's 90 s. Idle connections and, with them,
	// the pools of hosts no longer visited do not outlive it.
	DefaultIdleConnTimeout = 90 * time.Second

	// DefaultMaxConnLifetime is TransportOptions.MaxConnLifetime when it
	// is zero. Behind a layer-4 load balancer, a connection stays with the
	// backend it was placed on, so a backend added to the fleet gets
	// requests only as connections are made again: within this time of
	// its start, which is a scale-up's time scale (autoscalers look every
	// 15 to 60 s and wait minutes between decisions; gRPC servers commonly
	// set MAX_CONNECTION_AGE to minutes). It is well above
	// DefaultIdleConnTimeout, so an idle connection closes for idleness
	// first, and a busy one costs one dial per lifetime, dialed before it
	// retires: 8 busy connections redial once every 37 s or so, a dial
	// that no request waits for.
	DefaultMaxConnLifetime = 5 * time.Minute

	// DefaultPipelineDepth is the number of requests in flight on one
	// connection when TransportOptions.PipelineDepth is zero. Firefox used
	// 4; deeper pipelines add head-of-line blocking against servers that
	// serve pipelined requests one at a time (nginx, net/http).
	DefaultPipelineDepth = 4

	// DefaultMaxResponseHeaderBytes is net/http's limit on response header
	// bytes (including 1xx responses).
	DefaultMaxResponseHeaderBytes = 10 << 20

	defaultBufferSize = 4 << 10

	// maxBufferedBody is the largest response body of known length that
	// the reader of a connection reads whole, into a buffer of its size,
	// before it reads on to the next response (see the package doc). A
	// larger body, or one of unknown length, is a stream.
	maxBufferedBody = 256 << 10

	// maxReadAhead is the largest buffer of a streamed body: the most the
	// reader reads of it ahead of its caller.
	maxReadAhead = 64 << 10

	// maxDrain is the largest remainder of a body that is read and
	// discarded to keep a connection when the body is closed early.
	maxDrain = 256 << 10
)

// TransportOptions configures a [Transport]. Fields that have a twin in
// [net/http.Transport] have the same name and meaning; the zero value of
// every field is a documented default.
type TransportOptions struct {
	// MaxConnsPerHost limits the number of connections per host, counting
	// connections being dialed, busy and idle ones, as with net/http. Zero
	// (or a negative value) means no limit. Requests that are not
	// pipelined (see PipelineConnsPerHost) dial up to this limit, as
	// net/http's would, and then wait.
	//
	// Default: no limit. net/http: Transport.MaxConnsPerHost, same meaning.
	MaxConnsPerHost int

	// PipelineConnsPerHost is the pipelining threshold: the number of
	// connections per host that pipelineable requests (safe methods
	// without a body) open before they are pipelined on the open ones. It
	// is capped by MaxConnsPerHost. Requests that are never pipelined
	// (POST, PUT, requests with a body, Expect: 100-continue, retries)
	// are not held by it: they may dial up to MaxConnsPerHost. Zero means
	// DefaultPipelineConnsPerHost; see docs/design.md.
	//
	// Default: 8. net/http: none (it dials a connection per request, up to
	// MaxConnsPerHost).
	PipelineConnsPerHost int

	// PipelineDepth is the largest number of requests in flight on one
	// connection. 1 disables pipelining; zero means DefaultPipelineDepth.
	//
	// Default: 4. net/http: none (it sends one request at a time per
	// connection, as depth 1 does).
	PipelineDepth int

	// IdleConnTimeout is how long a connection with nothing in flight stays
	// open. Zero means DefaultIdleConnTimeout (90 s, http.DefaultTransport's
	// value); a negative value means no limit. (net/http's zero means no
	// limit; OptionsFrom carries that meaning over.)
	//
	// Default: 90 s. net/http: Transport.IdleConnTimeout, whose zero means
	// no limit.
	IdleConnTimeout time.Duration

	// MaxConnLifetime is how long a connection, HTTP/1.1 or HTTP/2, takes
	// new requests: once it is older than this (give or take 10%, so that
	// connections opened together do not end together), it takes no new
	// request, finishes those it carries (pipelined requests are
	// responded to, streams run to their end: none is cut) and closes. Where
	// the load needs it (the connection is busy, or no other one is idle),
	// its replacement is dialed first and the connection retires once the
	// replacement is up, so that no request waits for a dial it would not
	// have waited for otherwise. Behind a layer-4 load balancer (a
	// Kubernetes Service, a cloud network load balancer, HAProxy in mode
	// tcp), which places connections and not requests, this is how
	// backends added to the fleet get their share (docs/connecting.md).
	// Zero means DefaultMaxConnLifetime (5 minutes); a negative value
	// means no limit. OptionsFrom leaves it zero.
	//
	// Default: 5 minutes. net/http: none (a connection lives until either
	// side closes it, or it is idle for IdleConnTimeout).
	MaxConnLifetime time.Duration

	// ResponseHeaderTimeout, if non-zero, is how long to wait for a response's
	// headers once the request has been fully written and is the oldest
	// request still awaiting its response on its connection. (net/http starts
	// the timer when the request is written; on a pipelined connection that
	// would count the time spent behind earlier responses.) On expiry the
	// connection is closed and RoundTrip fails with [ErrResponseHeaderTimeout]
	// (in a [*ConnError]): a net.Error whose Timeout method reports true,
	// through an http.Client's *url.Error too, as with net/http.
	//
	// Default: none. net/http: Transport.ResponseHeaderTimeout, timed from
	// the write.
	ResponseHeaderTimeout time.Duration

	// HeadOfLineTimeout is how long the oldest request on a connection may
	// wait for its response headers once a request is pipelined behind it
	// (or stream an open-ended body) before
	// the safe requests pipelined behind it are re-sent on other
	// connections (the late responses are read and discarded) and the
	// connection takes no new requests until those headers arrive. Only
	// safe requests (GET, HEAD, OPTIONS, TRACE without a body) are ever
	// pipelined, so no other request is ever sent twice this way. Zero
	// means DefaultHeadOfLineTimeout (1 s); a negative value disables it.
	//
	// Default: 1 s. net/http: none (nothing waits behind another request
	// there).
	HeadOfLineTimeout time.Duration

	// HedgeHeadOfLine, if true, also sends a copy of a late head itself on
	// another connection, if it is safe (GET, HEAD, OPTIONS, TRACE without
	// a body). Late is as for HeadOfLineTimeout (a head with a request
	// pipelined behind it), or earlier against a host that runs a
	// connection's requests one at a time. The first response wins. If the
	// copy's does, the head's connection is closed when nothing else waits
	// on it: closing is the one way to cancel an HTTP/1.1 request (net/http
	// closes the connection of a cancelled one too), and it frees the
	// connection's place under MaxConnsPerHost at once. If the head's
	// response wins, the copy runs to its end, or until the request's context
	// is cancelled, and its response is discarded. Copies are held to the
	// host's one budget of duplicates, about 2% of requests, which early
	// re-sends from behind late heads spend too. A copy fires none of the request's httptrace hooks (a
	// dial it starts carries the request's context values, as every dial
	// does); an Observer sees its attempts with Resend set to ResendHedge.
	//
	// It is off by default: a request that is slow by nature (a report, a
	// long poll) gains nothing from its copy, which costs the server a
	// second run; gRPC and Envoy hedge only when asked to. See
	// docs/reliability.md.
	//
	// Default: off. net/http: none.
	HedgeHeadOfLine bool

	// FixedPolicy turns the host model off (docs/model.md): the transport
	// learns nothing from a host's responses, and the same sequence of
	// requests gets the same placement whatever the host's history, as
	// with fasthttp's PipelineClient. Pipelineable requests take idle
	// connections, then new ones up to PipelineConnsPerHost, then are
	// pipelined up to PipelineDepth behind any request that allows it
	// (a safe one whose response has not shown itself a stream). What a
	// connection shows of itself still counts: a stream or a late head
	// takes nothing new behind it, a Connection: close or a Keep-Alive
	// hint retires it, and a host whose pipelined connections keep failing
	// falls back to depth 1 for a while (docs/reliability.md).
	//
	// It is off by default: by default a request is written behind
	// another only if the other's route class (its method, path shape,
	// query parameter names and Accept field) last responded bounded and
	// quickly on its host, so that nothing waits behind a stream, a long
	// poll or a download nobody foresaw. net/http's Transport has no
	// twin: it never pipelines.
	//
	// Default: off. net/http: none.
	FixedPolicy bool

	// MaxResponseHeaderBytes limits the size of a response's header block,
	// 1xx responses included. Zero means DefaultMaxResponseHeaderBytes.
	//
	// Default: 10 MiB. net/http: Transport.MaxResponseHeaderBytes, same
	// meaning and default.
	MaxResponseHeaderBytes int64

	// DisableKeepAlives, if true, uses each connection for one request only
	// and sends "Connection: close". It disables pipelining.
	//
	// Default: false. net/http: Transport.DisableKeepAlives, same meaning.
	DisableKeepAlives bool

	// DisableCompression, if true, prevents the Transport from requesting
	// gzip with "Accept-Encoding: gzip" and decoding it transparently.
	//
	// Default: false. net/http: Transport.DisableCompression, same meaning.
	DisableCompression bool

	// ReadBufferSize and WriteBufferSize are the sizes of each
	// connection's read and write buffers. Zero means 4 KiB.
	//
	// Default: 4 KiB each. net/http: Transport.ReadBufferSize and
	// WriteBufferSize, same meaning and default.
	ReadBufferSize  int
	WriteBufferSize int

	// DialContext dials the TCP connections, to targets and to proxies. Nil
	// means a net.Dialer with a 30 s timeout and 30 s keep-alive, like
	// http.DefaultTransport's. The context carries the values of the
	// request that started the dial (so its httptrace hooks fire) but not
	// its cancellation: a dial outlives the request that started it and
	// serves another request, or joins the pool as an idle connection. It is
	// cancelled by Close. Each dial runs in its own goroutine and holds no
	// lock. See docs/connecting.md.
	//
	// Default: the dialer above. net/http: Transport.DialContext (and the
	// deprecated Dial, which OptionsFrom wraps); its zero Transport dials
	// with a zero net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// Resolver looks up the addresses of the hosts the Transport dials
	// itself (no proxy; no DialContext, or DialResolved set), whose
	// connections it spreads over those addresses: each new connection of
	// a host goes to the address with the fewest of the host's
	// connections (ties in turn), so that a name with several addresses
	// (DNS round robin, a headless Kubernetes service, a cloud load
	// balancer, "localhost") shares its load among them; net/http dials
	// the addresses in order, so every connection lands on the first that
	// answers. A dial that fails goes on to the next address at once, and
	// one still connecting after 300 ms is joined by the next, alternating
	// families (RFC 8305, Happy Eyeballs v2); an address whose dials or
	// new connections fail is set aside for a growing interval (1 s,
	// doubled up to 2 minutes); an address gone from the answer takes no
	// new request and its connections close once their requests are responded
	// to. Answers are kept per host and looked up again every 30 s while the
	// host has a pool (Go's resolver does not expose TTLs); a request never
	// waits for a lookup once its host's answer is known, and the dials of one
	// moment share one. Nil means net.DefaultResolver. Stats lists each
	// address (HostStats.Addrs). See docs/connecting.md.
	Resolver Resolver

	// DisableAddrSpreading, if true, dials a host by its name, as
	// net/http does (DialContext, or its default net.Dialer, resolves it
	// and tries its addresses in order), and Resolver is not used. The
	// default spreads: pipelining puts a host's load on a few connections,
	// which net/http's order would put on one backend of a fleet.
	DisableAddrSpreading bool

	// DialResolved, if true, spreads the connections of a custom
	// DialContext over the host's addresses as the Transport's own dials
	// are (see Resolver): DialContext is called with "ip:port", an
	// address of the host's answer, instead of "host:port". TLS's
	// ServerName and the Host header stay the host's name. The default
	// (false) calls DialContext with the name, as net/http does: a custom
	// dialer may resolve names its own way (a service mesh, a test
	// harness), which the Transport must not bypass unless asked to.
	DialResolved bool

	// DialTLSContext, if non-nil, dials TLS connections for https targets
	// that are not proxied (and to https proxies), replacing DialContext and
	// the TLS handshake: TLSClientConfig and TLSHandshakeTimeout are then
	// ignored. If it returns a *tls.Conn whose handshake has not completed,
	// the handshake is run (with the httptrace TLS hooks); its connection
	// state becomes resp.TLS. A target connection on which TLS negotiated
	// "h2" is served over HTTP/2 if Protocols allows it; one that
	// negotiated another protocol than "http/1.1" is refused.
	//
	// Default: nil (DialContext, then a TLS handshake). net/http:
	// Transport.DialTLSContext (and the deprecated DialTLS), same meaning.
	DialTLSContext func(ctx context.Context, network, addr string) (net.Conn, error)

	// TLSClientConfig is the TLS configuration for https targets and https
	// proxies. It is cloned for each connection and never modified; in the
	// clone, an empty ServerName becomes the host being dialed (without
	// port), and NextProtos is set by the Transport: ["h2", "http/1.1"]
	// for https targets unless Protocols leaves HTTP/2 out, ["http/1.1"]
	// for proxies (see Protocols). Nil means the zero tls.Config.
	//
	// Default: nil. net/http: Transport.TLSClientConfig, same meaning.
	TLSClientConfig *tls.Config

	// TLSHandshakeTimeout, if non-zero, limits the time spent on a TLS
	// handshake. On expiry the dial fails with [ErrTLSHandshakeTimeout], a
	// net.Error whose Timeout method reports true. Zero means
	// no limit other than DialContext's (http.DefaultTransport uses 10 s).
	//
	// Default: none. net/http: Transport.TLSHandshakeTimeout, same
	// meaning.
	TLSHandshakeTimeout time.Duration

	// Proxy, if non-nil, returns the proxy for a request, or a nil URL for
	// none; it is called for every request. Schemes "http", "https",
	// "socks5" and "socks5h" are supported; user info in the URL is sent as
	// Basic Proxy-Authorization to HTTP(S) proxies, and as RFC 1929
	// username/password to SOCKS5 proxies. An error aborts the request.
	// http.ProxyFromEnvironment and http.ProxyURL work as they are. Each
	// (proxy, target) pair has a pool of its own. See docs/connecting.md.
	//
	// Default: nil, no proxy (as a zero http.Transport; http.DefaultTransport
	// uses http.ProxyFromEnvironment, and OptionsFrom carries it). net/http:
	// Transport.Proxy, same meaning.
	Proxy func(*http.Request) (*url.URL, error)

	// OnProxyConnectResponse, if non-nil, is called with the proxy's
	// response to a CONNECT request, before its status is checked. A
	// non-nil error fails the dial, and the requests waiting for it.
	//
	// Default: nil. net/http: Transport.OnProxyConnectResponse, same
	// meaning.
	OnProxyConnectResponse func(ctx context.Context, proxyURL *url.URL, connectReq *http.Request, connectRes *http.Response) error

	// ProxyConnectHeader holds the headers sent to proxies in CONNECT
	// requests. It is ignored if GetProxyConnectHeader is set.
	//
	// Default: nil. net/http: Transport.ProxyConnectHeader, same meaning.
	ProxyConnectHeader http.Header

	// GetProxyConnectHeader, if non-nil, returns the headers to send to
	// proxyURL in a CONNECT request to target (host:port). A nil header
	// with a nil error sends none; an error fails the dial.
	//
	// Default: nil. net/http: Transport.GetProxyConnectHeader, same
	// meaning.
	GetProxyConnectHeader func(ctx context.Context, proxyURL *url.URL, target string) (http.Header, error)

	// ExpectContinueTimeout, if non-zero, is how long to wait for a server's
	// first response headers after writing the headers of a request that
	// has "Expect: 100-continue". Zero means no timeout: the body is sent at
	// once, without waiting for the server. As with net/http, a final
	// status arriving before any 100 skips the body if the response or the
	// request closes the connection, and sends it otherwise. Such requests
	// are never pipelined.
	//
	// Default: none. net/http: Transport.ExpectContinueTimeout, same
	// meaning.
	ExpectContinueTimeout time.Duration

	// MaxIdleConnsPerHost is the number of idle connections (connections
	// with nothing in flight) kept per host. Zero means all of them, up to
	// MaxConnsPerHost; a negative value means none: a connection is closed
	// as soon as it has nothing in flight. net/http's default is 2: a
	// pipelined pool is small (MaxConnsPerHost) and is meant to stay warm,
	// and closing connections that a burst will want back moments later
	// would bring back the dial churn pipelining avoids.
	//
	// Default: keep every idle connection. net/http:
	// Transport.MaxIdleConnsPerHost, whose zero means 2
	// (http.DefaultMaxIdleConnsPerHost).
	MaxIdleConnsPerHost int

	// Observer, if non-nil, receives the events of the Transport's requests
	// and connections, for metrics (see the otelpipelined module) and
	// logs. Its hooks run outside the Transport's locks. Nil costs nothing
	// measurable.
	//
	// Default: nil. net/http: none (httptrace hooks, which this Transport
	// also fires, are per request).
	Observer *Observer

	// MaxIdleConns caps the idle connections (nothing in flight) across all
	// hosts; when a connection becoming idle exceeds it, the connection idle
	// for the longest time is closed. Zero means no limit.
	//
	// Default: no limit. net/http: Transport.MaxIdleConns, same meaning
	// (http.DefaultTransport sets 100).
	MaxIdleConns int

	// Protocols is the set of protocols the Transport uses, with
	// net/http's meaning: nil means HTTP/1 and HTTP/2, an empty set
	// HTTP/1. With HTTP2, https targets (directly or through a CONNECT or
	// SOCKS5 tunnel) are offered "h2" in ALPN, and a host that chooses it
	// is served over multiplexed HTTP/2 connections (see docs/design.md);
	// with HTTP2 and not HTTP1, only "h2" is offered. UnencryptedHTTP2
	// without HTTP1 speaks prior-knowledge HTTP/2 to http:// targets that
	// are not behind an HTTP proxy. Requests that need HTTP/1.1 (CONNECT,
	// Upgrade) always get it. DisableKeepAlives turns HTTP/2 off.
	// OptionsFrom sets it to the protocols an http.Transport would use.
	//
	// Default: nil, HTTP/1 and HTTP/2. net/http: Transport.Protocols,
	// whose nil means HTTP/1 only unless ForceAttemptHTTP2 or TLSNextProto
	// asks for HTTP/2 (a Transport with no custom dialer or TLS config
	// attempts it too); ForceAttemptHTTP2 and TLSNextProto have no twin here.
	Protocols *http.Protocols

	// HTTP2 configures HTTP/2 connections, as in net/http. Nil means
	// net/http's defaults.
	//
	// Default: nil. net/http: Transport.HTTP2, same meaning.
	HTTP2 *http.HTTP2Config
}

// Transport is an [http.RoundTripper] that pipelines HTTP/1.1 requests over
// a bounded set of connections per host, and multiplexes them over HTTP/2
// where an https server negotiates it (see TransportOptions.Protocols). It
// is safe for concurrent use.
//
// The zero value is a Transport with the default options, like
// NewTransport(TransportOptions{}).
type Transport struct {
	initOnce  sync.Once
	opts      TransportOptions // normalised by init, read-only after it
	depth     int
	maxConns  int // 0: no limit
	pipeConns int // pipelining threshold, at most maxConns

	connIDs atomic.Uint64 // the last connection ID given out
	idle    idleLRU       // connections idle after use, for MaxIdleConns

	ctx    context.Context // cancelled by Close; parent of dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // connection readers and dials

	mu     sync.RWMutex // guards pools and closed
	pools  map[poolKey]*hostPool
	closed bool

	h2 h2Config // HTTP/2 settings, fixed by init (h2.go)

	// addrs holds the address sets of the hosts the Transport dials
	// itself (resolve.go, addrs.go); nil if it spreads no host's
	// connections (DisableAddrSpreading, or a DialContext without
	// DialResolved).
	addrs *addrBook

	// restWatch is how long a connection rests before its reader watches
	// it again (conn_direct.go): the constant restWatch, or testHookRestWatch.
	restWatch time.Duration
	// handOvers counts the bodies that callers reading their own responses
	// left to the reader goroutine (conn_direct.go, errHandOver): tests count
	// them.
	handOvers atomic.Int64
	// farHop is how long a host's first dial's first hop takes before the
	// host counts as far away (response_wait.go, farDialLocked): the constant
	// model.FarHop, or testHookFarHop.
	farHop time.Duration
}

var _ http.RoundTripper = (*Transport)(nil)

// Test hooks, as net/http has them: a test sets one (setTestHook) before it
// makes a Transport, which takes its value then.
var (
	// testHookRestWatch, if positive, replaces restWatch: tests that need
	// a resting connection never watched, or watched at once.
	testHookRestWatch time.Duration
	// testHookFarHop, if positive, replaces farHop: tests that count the
	// dials of a burst to a host near by, where a loopback connect under
	// the race detector has taken 20 ms.
	testHookFarHop time.Duration
	// testHookMaxConnLifetime, if positive, replaces DefaultMaxConnLifetime
	// for a MaxConnLifetime left zero: tests of the default behind a load
	// balancer that run in seconds, not minutes.
	testHookMaxConnLifetime time.Duration
)

// NewTransport returns a Transport configured by opts.
func NewTransport(opts TransportOptions) *Transport {
	t := &Transport{opts: opts}
	t.initOnce.Do(t.init)
	return t
}

// init applies the defaults to t.opts; it runs once, from NewTransport or
// from the first use of a zero Transport.
func (t *Transport) init() {
	opts := t.opts
	t.pools = make(map[poolKey]*hostPool)
	t.restWatch, t.farHop = restWatch, model.FarHop
	if testHookRestWatch > 0 {
		t.restWatch = testHookRestWatch
	}
	if testHookFarHop > 0 {
		t.farHop = testHookFarHop
	}
	t.depth = opts.PipelineDepth
	if t.depth <= 0 {
		t.depth = DefaultPipelineDepth
	}
	if opts.DisableKeepAlives {
		t.depth = 1
	}
	t.maxConns = max(opts.MaxConnsPerHost, 0)
	t.pipeConns = opts.PipelineConnsPerHost
	if t.pipeConns <= 0 {
		t.pipeConns = DefaultPipelineConnsPerHost
	}
	if t.maxConns > 0 {
		t.pipeConns = min(t.pipeConns, t.maxConns)
	}
	if t.opts.IdleConnTimeout == 0 {
		t.opts.IdleConnTimeout = DefaultIdleConnTimeout
	}
	if t.opts.MaxConnLifetime == 0 {
		t.opts.MaxConnLifetime = DefaultMaxConnLifetime
		if testHookMaxConnLifetime > 0 {
			t.opts.MaxConnLifetime = testHookMaxConnLifetime
		}
	}
	if t.opts.MaxResponseHeaderBytes <= 0 {
		t.opts.MaxResponseHeaderBytes = DefaultMaxResponseHeaderBytes
	}
	if t.opts.ReadBufferSize <= 0 {
		t.opts.ReadBufferSize = defaultBufferSize
	}
	if t.opts.WriteBufferSize <= 0 {
		t.opts.WriteBufferSize = defaultBufferSize
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.h2.init(&t.opts)
	if !opts.DisableAddrSpreading && (opts.DialContext == nil || opts.DialResolved) {
		t.addrs = newAddrBook(t, opts.Resolver)
	}
}

// RoundTrip implements [http.RoundTripper]. It never modifies req and always
// closes its body.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.initOnce.Do(t.init)
	if err := validateRequest(req); err != nil {
		closeBody(req)
		return nil, err
	}
	key, err := t.keyFor(req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	p, err := t.pool(key)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	return p.roundTrip(req)
}

// pool returns the pool for key, creating it.
func (t *Transport) pool(key poolKey) (*hostPool, error) {
	t.mu.RLock()
	p, closed := t.pools[key], t.closed
	t.mu.RUnlock()
	if closed {
		return nil, ErrTransportClosed
	}
	if p != nil {
		return p, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrTransportClosed
	}
	p = t.pools[key]
	if p == nil {
		p = newHostPool(t, key)
		t.pools[key] = p
	}
	return p, nil
}

// removeIfEmpty forgets p if it has no connection, dial or waiter (its
// HTTP/2 side included), and has learned nothing about its host that is
// still in force, so that a client visiting many hosts keeps no pool for a
// host it no longer talks to. A request that got p just before sees
// errPoolGone and asks for the host's pool again. Lock order:
// Transport.mu, then hostPool.mu, then h2Host.mu.
func (t *Transport) removeIfEmpty(p *hostPool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.gone || len(p.conns) > 0 || p.dialing > 0 || p.waiters.len() > 0 || p.ending > 0 || p.learnedLocked() {
		return
	}
	if h := p.h2.Load(); h != nil && !h.goneIfEmpty() {
		return
	}
	p.gone = true
	if t.pools[p.key] == p {
		delete(t.pools, p.key)
	}
}

// CloseIdleConnections closes every connection that has no request in flight.
// Busy connections are left alone.
func (t *Transport) CloseIdleConnections() {
	t.initOnce.Do(t.init)
	for _, p := range t.poolList() {
		p.closeIdle()
		if h := p.h2.Load(); h != nil {
			h.closeIdle()
		}
	}
}

// Close closes every connection and waits for the transport's goroutines to
// exit, whatever callers do with the response bodies they hold. Requests in
// flight or queued fail with [ErrTransportClosed], as do later calls to
// RoundTrip. Response bodies already returned fail on their next Read (over
// HTTP/1.1 with [ErrTransportClosed]; over HTTP/2, once the bytes that had
// arrived are read), but for one that had arrived whole, which reads to its
// end. Close is idempotent.
func (t *Transport) Close() error {
	t.initOnce.Do(t.init)
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.cancel()
	t.addrs.close()
	for _, p := range t.poolList() {
		p.close()
		if h := p.h2.Load(); h != nil {
			h.close()
		}
	}
	t.wg.Wait()
	return nil
}

func (t *Transport) poolList() []*hostPool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps := make([]*hostPool, 0, len(t.pools))
	for _, p := range t.pools {
		ps = append(ps, p)
	}
	return ps
}

// HostStats is a snapshot of one host's pool, as returned by
// [Transport.Stats].
type HostStats struct {
	Open     int // connections established and usable (busy or idle)
	Dialing  int // connections being dialed
	Idle     int // established connections with no request in flight
	InFlight int // requests written or assigned to a connection, not yet responded to
	Queued   int // requests waiting for a connection

	// Retired counts the host's connections that the transport retired,
	// by reason: they took no new request, finished what they carried and
	// closed (ConnClosed reports each with the same reason).
	Retired Retirements

	// PipelineDepth is the host's effective pipeline depth: the
	// Transport's; fewer when the host's responses are large (about 512 KiB
	// of them in flight on a connection, at least 2) or when it runs a
	// connection's requests one at a time; or 1 while the host is in
	// fallback after its connections repeatedly failed with pipelined
	// requests outstanding (see docs/reliability.md).
	PipelineDepth int

	// Protocol is "HTTP/2.0" once the host negotiated HTTP/2 (its
	// requests then go over HTTP/2), else "HTTP/1.1". Over HTTP/2, Open,
	// Dialing, Idle, InFlight and Queued count the HTTP/2 connections and
	// requests as well.
	Protocol string

	// Streams is the number of HTTP/2 streams in use (requests in flight
	// or about to be sent on the host's HTTP/2 connections); 0 over
	// HTTP/1.1.
	Streams int

	// Model is what the transport has learned about the host over
	// HTTP/1.1, and what it decides from it (docs/model.md).
	Model HostModel

	// Addrs lists the addresses of a host the Transport spreads over
	// (TransportOptions.Resolver): those of its latest answer, in the
	// answer's order, then those its connections drain. Nil for a host
	// named by its IP address, reached through a proxy, or dialed by
	// name (DisableAddrSpreading, DialContext without DialResolved).
	// HTTP/2 connections are not counted in it.
	Addrs []AddrStats
}

// Retirements counts a host's retired connections by reason, in
// [HostStats]. One mechanism retires them all: the connection takes no new
// request, finishes what it carries, and closes.
type Retirements struct {
	// KeepAlive: retired before the end their server announced in a
	// Keep-Alive header (timeout= or max=), so that no request met a
	// connection the server was closing (CloseKeepAliveEnd).
	KeepAlive int

	// Drained: their address left the host's answer (Resolver;
	// CloseDrained).
	Drained int

	// Lifetime: older than MaxConnLifetime (CloseLifetime).
	Lifetime int
}

// count adds a connection closed for why, if why is a retirement's reason.
func (r *Retirements) count(why CloseReason) {
	switch why {
	case CloseKeepAliveEnd:
		r.KeepAlive++
	case CloseDrained:
		r.Drained++
	case CloseLifetime:
		r.Lifetime++
	}
}

// add adds o's counts to r's.
func (r *Retirements) add(o Retirements) {
	r.KeepAlive += o.KeepAlive
	r.Drained += o.Drained
	r.Lifetime += o.Lifetime
}

// HostModel is what a [Transport] has learned about one host and what it
// decides from it: the host model (docs/model.md). Under
// TransportOptions.FixedPolicy, Learning is false, no route is learned and
// Pipelining is true but during a fallback.
type HostModel struct {
	// Learning is false under TransportOptions.FixedPolicy.
	Learning bool

	// Routes is the number of route classes the model holds (requests of
	// the same method, host, path shape, query parameter names and Accept
	// field; at most 64, the least recently responded to forgotten first).
	// Requests may be written behind a request of a route whose last
	// response was bounded and quick; StreamRoutes last responded with a
	// stream (server-sent events, a watch, a download too large to read
	// ahead) and LateRoutes held their connection's head late (a long
	// poll): requests of those take a connection of their own, as with
	// net/http, and nothing is written behind them. Nothing is written
	// behind a request of a route not seen yet either.
	Routes, StreamRoutes, LateRoutes int

	// RoundTrip is the host's shortest successful dial, which stands for
	// a round trip; 0 until one.
	RoundTrip time.Duration

	// UsualHeadWait is an estimate of how long the host's responses hold
	// their connection's head (late ones left out); LateAfter is how long
	// a head may wait before it is late: 20 usual waits, at least 50 ms,
	// at most HeadOfLineTimeout.
	UsualHeadWait, LateAfter time.Duration

	// Pipelining reports whether pipelineable requests are written behind
	// others once PipelineConnsPerHost connections are busy. If not,
	// Reason says why: "fallback" (the host's pipelined connections
	// failed; until FallbackUntil), "forward proxy" (requests in absolute
	// form are never pipelined), "late heads" (its responses are late often
	// enough that a request gains more from a connection of its own),
	// "serial" (it runs a connection's requests one at a time, slowly
	// enough that connections of their own run them in parallel) or
	// "awaiting answer" (a burst waits for its first response while it could
	// dial). Requests dial instead, up to MaxConnsPerHost.
	Pipelining bool
	Reason     string

	// Serial reports whether the host is taken to run a connection's
	// requests one at a time; its depth is then held to what it gains.
	// ServiceTime is then its service time as its responses show it.
	Serial      bool
	ServiceTime time.Duration

	// ConnBudget is the number of requests the host's server serves on
	// one connection before it closes it (nginx's keepalive_requests), as
	// learned from its closes; 0 if none is known. A connection is given
	// no more.
	ConnBudget int

	// Proven reports whether the host responded to a pipelined request as only
	// a server that handles pipelining does; until then one request at a
	// time is pipelined (the probe, docs/reliability.md).
	Proven bool

	// FallbackUntil is when the host's depth-1 fallback ends; zero if
	// none is in force.
	FallbackUntil time.Time

	// DuplicateBudget is how many safe requests may be sent again early
	// from behind a late head now (docs/reliability.md); each request
	// placed earns 2% of one, up to 10.
	DuplicateBudget float64
}

// Stats returns a snapshot of every host's pool, keyed by
// "scheme://host:port" (with " via proxy" appended for proxied pools; the
// pool of http:// URLs through an HTTP(S) proxy, shared by their targets,
// is "http://* via proxy"). It is safe to call at any time.
func (t *Transport) Stats() map[string]HostStats {
	t.initOnce.Do(t.init)
	ps := t.poolList()
	m := make(map[string]HostStats, len(ps))
	for _, p := range ps {
		s := p.stats()
		h2Stats(p.h2.Load(), &s)
		m[p.key.String()] = s
	}
	return m
}

// validateRequest reports the errors net/http's Transport reports before
// touching the network, with the same wording.
func validateRequest(req *http.Request) error {
	if req.URL == nil {
		return errors.New("http: nil Request.URL")
	}
	if req.Header == nil {
		return errors.New("http: nil Request.Header")
	}
	scheme := req.URL.Scheme
	if scheme != "http" && scheme != "https" {
		return fmt.Errorf("unsupported protocol scheme %q", scheme)
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("net/http: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				// Don't include the value in the error, as net/http doesn't:
				// it may be sensitive.
				return fmt.Errorf("net/http: invalid header field value for %q", k)
			}
		}
	}
	for k, vv := range req.Trailer {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("net/http: invalid trailer field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("net/http: invalid trailer field value for %q", k)
			}
		}
	}
	if req.Method != "" && !validMethod(req.Method) {
		return fmt.Errorf("net/http: invalid method %q", req.Method)
	}
	if req.URL.Host == "" {
		return errors.New("http: no Host in request URL")
	}
	if req.ContentLength != 0 && req.Body == nil {
		return fmt.Errorf("http: Request.ContentLength=%d with nil Body", req.ContentLength)
	}
	return nil
}

func validMethod(m string) bool {
	// RFC 9110 §9.1: method = token.
	return len(m) > 0 && strings.IndexFunc(m, func(r rune) bool { return !httpguts.IsTokenRune(r) }) < 0
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
