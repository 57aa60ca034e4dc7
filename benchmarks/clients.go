package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Client names, in table order.
const (
	clientNetHTTP        = "net/http"
	clientPipelined      = "pipelined"
	clientFastHost       = "fasthttp.HostClient"
	clientFastPipeline   = "fasthttp.PipelineClient"
	clientNetHTTPNoKA    = "net/http no-keepalive"
	clientPipelinedNoKA  = "pipelined no-keepalive"
	defaultClientsString = clientNetHTTP + "," + clientPipelined + "," + clientFastHost + "," + clientFastPipeline

	// A migrated service: http.DefaultTransport's settings (no connection
	// limit, 2 idle connections per host) and pipelined built from them
	// with OptionsFrom(http.DefaultTransport).
	clientNetHTTPDefaults   = "net/http DefaultTransport"
	clientPipelinedDefaults = "pipelined OptionsFrom(DefaultTransport)"

	// The TLS suite's rows. The (h2) ones offer h2 and http/1.1 by ALPN
	// and speak HTTP/2 where the server chooses it; the (h1) ones speak
	// HTTP/1.1 only (pipelined: pipelining).
	clientNetHTTPH2   = "net/http (h2)"
	clientNetHTTPH1   = "net/http (h1)"
	clientPipelinedH2 = "pipelined (h2)"
	clientPipelinedH1 = "pipelined (h1 pipelined)"

	// The slow suite's opt-in row: a late safe head is also sent on
	// another connection (TransportOptions.HedgeHeadOfLine).
	clientPipelinedHedge = "pipelined HedgeHeadOfLine"

	// fasthttp's engines behind the net/http API (roundtripper.go): what
	// a drop-in transport cannot save, measured against the engine.
	clientFastHostRT     = clientFastHost + " " + rtSuffix
	clientFastPipelineRT = clientFastPipeline + " " + rtSuffix
	rtSuffix             = "RoundTripper"

	// The download suite's fasthttp row: a HostClient whose response
	// bodies stream (StreamResponseBody), read as net/http's are, rather
	// than read whole into memory first.
	clientFastHostStream = clientFastHost + " StreamResponseBody"
)

var allClients = []string{
	clientNetHTTP, clientPipelined, clientFastHost, clientFastPipeline, clientNetHTTPNoKA, clientPipelinedNoKA,
	clientNetHTTPDefaults, clientPipelinedDefaults, clientNetHTTPH2, clientNetHTTPH1, clientPipelinedH2, clientPipelinedH1,
	clientPipelinedHedge, clientFastHostRT, clientFastPipelineRT, clientFastHostStream,
}

func isNoKeepAlive(name string) bool {
	return name == clientNetHTTPNoKA || name == clientPipelinedNoKA
}

// isPipelined reports whether a client row is this project's transport
// (the rows the ratio lines compare with their peers).
func isPipelined(name string) bool { return strings.HasPrefix(name, clientPipelined) }

// clientConfig is what every client is built from.
type clientConfig struct {
	Addrs   []string // host:port of the servers, one per host; requests go to them in turn
	URL     string   // instead of Addrs: the one URL to request (-url)
	C       int      // connections per host
	K       int      // pipeline depth
	Timeout time.Duration
	Dialer  *dialCounter
	Method  string      // "" means GET
	ReqBody []byte      // request body (with Content-Length), if any
	TLS     *tls.Config // https to Addrs with this configuration, if non-nil
	// Cell, if not empty, is sent with every request as the query
	// "cell=Cell&id=N" (N unique within the cell), for the server's count
	// of requests that arrived twice.
	Cell string
	// Resolver, if set, resolves the name of Addrs (backendsName) to the
	// addresses of the backends; StatsAddr is then where the tracking
	// server's counts are asked for.
	Resolver  *backendResolver
	StatsAddr string
	// IDs: every request goes to /items/<id>, a fresh random id of 16
	// hex digits each time.
	IDs bool
	// skip, if set, is why the scenario's rows cannot run (its server
	// could not be started): each row is skipped with it.
	skip string
}

// backendsName is the one name of a Backends scenario's servers.
const backendsName = "backends.test"

// backendResolver resolves backendsName to the backends' addresses, in
// their order, for every client of a Backends scenario: as a
// pipelined.Resolver (LookupNetIP), a fasthttp.Resolver (LookupIPAddr),
// and through DialInOrder for net/http.
type backendResolver struct {
	addrs []netip.Addr
}

// newBackendResolver resolves backendsName to the addresses of hostports.
func newBackendResolver(hostports []string) *backendResolver {
	r := &backendResolver{}
	for _, hp := range hostports {
		host, _, _ := net.SplitHostPort(hp)
		r.addrs = append(r.addrs, netip.MustParseAddr(host))
	}
	return r
}

func (r *backendResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host != backendsName {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return slices.Clone(r.addrs), nil
}

func (r *backendResolver) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	ips, err := r.LookupNetIP(ctx, "ip", host)
	var out []net.IPAddr
	for _, ip := range ips {
		out = append(out, net.IPAddr{IP: ip.AsSlice()})
	}
	return out, err
}

// DialInOrder returns a DialContext that resolves a name with r and dials
// its addresses with dial, in order, until one connects: what net/http's
// net.Dialer does with an answer of one family.
func (r *backendResolver) DialInOrder(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ips, err := r.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
		var first error
		for _, ip := range ips {
			c, err := dial(ctx, network, net.JoinHostPort(ip.String(), port))
			if err == nil {
				return c, nil
			}
			first = cmp.Or(first, err)
		}
		return nil, first
	}
}

// portOf returns the port of hostport.
func portOf(hostport string) string {
	_, port, _ := net.SplitHostPort(hostport)
	return port
}

// targets hands out the URL of each request: Addrs in turn, with an id
// when the cell is tracked.
type targets struct {
	urls []string
	cell string
	ids  bool
	n    atomic.Uint64
}

func newTargets(cfg clientConfig) *targets {
	t := &targets{cell: cfg.Cell, ids: cfg.IDs}
	if cfg.URL != "" {
		t.urls = []string{cfg.URL}
		return t
	}
	scheme := "http://"
	if cfg.TLS != nil {
		scheme = "https://"
	}
	for _, a := range cfg.Addrs {
		t.urls = append(t.urls, scheme+a+"/")
	}
	return t
}

// base is the first target without its trailing slash: a path goes after it.
func (t *targets) base() string { return strings.TrimSuffix(t.urls[0], "/") }

func (t *targets) next() string {
	i := t.n.Add(1) - 1
	u := t.urls[i%uint64(len(t.urls))]
	if t.ids {
		u = itemURL(u, rand.Uint64())
	}
	if t.cell != "" {
		return u + "?cell=" + t.cell + "&id=" + strconv.FormatUint(i, 10)
	}
	return u
}

// itemURL returns base (ending in "/") followed by "items/" and id in 16
// hex digits: one allocation, the same for every client.
func itemURL(base string, id uint64) string {
	const hexDigits = "0123456789abcdef"
	var hx [16]byte
	for i := len(hx) - 1; i >= 0; i-- {
		hx[i] = hexDigits[id&0xf]
		id >>= 4
	}
	var b strings.Builder
	b.Grow(len(base) + len("items/") + len(hx))
	b.WriteString(base)
	b.WriteString("items/")
	b.Write(hx[:])
	return b.String()
}

// benchClient performs one request at a time per calling goroutine. Do
// reads and closes the whole response body, returns the number of body
// bytes read, and an error for anything but a 2xx response.
type benchClient interface {
	Do(ctx context.Context) (int64, error)
	// PoolStats reports the client's own view of its connection pool, or
	// ok == false if it has none.
	PoolStats() (s poolStats, ok bool)
	Close()
}

// errUnsupported marks a client that cannot run a scenario: its row is
// skipped with the reason.
var errUnsupported = errors.New("not supported")

// newClient builds the named client.
func newClient(name string, cfg clientConfig) (benchClient, error) {
	method := cmp.Or(cfg.Method, http.MethodGet)
	switch name {
	case clientNetHTTP, clientNetHTTPNoKA, clientNetHTTPH1, clientNetHTTPH2, clientNetHTTPDefaults:
		var tr *http.Transport
		if name == clientNetHTTPDefaults {
			tr = http.DefaultTransport.(*http.Transport).Clone()
			tr.DialContext = cfg.Dialer.DialContext
		} else {
			tr = &http.Transport{
				DialContext:         cfg.Dialer.DialContext,
				MaxConnsPerHost:     cfg.C,
				MaxIdleConnsPerHost: cfg.C,
				MaxIdleConns:        0, // no limit
				DisableKeepAlives:   name == clientNetHTTPNoKA,
				ForceAttemptHTTP2:   name == clientNetHTTPH2,
			}
		}
		if cfg.Resolver != nil {
			tr.DialContext = cfg.Resolver.DialInOrder(tr.DialContext)
		}
		if cfg.TLS != nil {
			tr.TLSClientConfig = cfg.TLS.Clone()
		}
		if name == clientNetHTTPH1 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/2 off
		}
		return &httpClient{
			// No Client.Timeout: the run's context bounds every request. For a
			// RoundTripper other than *http.Transport, http.Client implements
			// Timeout with a goroutine and a timer per request, which would
			// measure http.Client rather than the transport.
			client:    newHTTPClient(tr),
			targets:   newTargets(cfg),
			method:    method,
			reqBody:   cfg.ReqBody,
			close:     tr.CloseIdleConnections,
			poolStats: func() (poolStats, bool) { return poolStats{}, false },
		}, nil
	case clientPipelined, clientPipelinedNoKA, clientPipelinedDefaults, clientPipelinedH1, clientPipelinedH2, clientPipelinedHedge:
		return newPipelinedClient(name, cfg)
	case clientFastHostRT:
		return newFastRoundTripper(name, clientFastHost, cfg)
	case clientFastPipelineRT:
		return newFastRoundTripper(name, clientFastPipeline, cfg)
	case clientFastHost, clientFastPipeline, clientFastHostStream:
		if cfg.URL != "" {
			return nil, fmt.Errorf("%w with -url", errUnsupported)
		}
		fc := &fastClient{targets: newTargets(cfg), method: method, reqBody: cfg.ReqBody, close: func() {}}
		switch {
		case name == clientFastHostStream && len(cfg.Addrs) > 1:
			return nil, fmt.Errorf("%w: one host only", errUnsupported)
		case name == clientFastHost && len(cfg.Addrs) > 1:
			// Many hosts: fasthttp.Client keeps a HostClient per host.
			c := &fasthttp.Client{
				MaxConnsPerHost:    cfg.C,
				MaxConnWaitTimeout: cfg.Timeout,
				ReadTimeout:        cfg.Timeout,
				WriteTimeout:       cfg.Timeout,
				Dial:               cfg.Dialer.Dial,
				TLSConfig:          cfg.TLS,
			}
			fc.do, fc.close = c.Do, c.CloseIdleConnections
		case name == clientFastHost && cfg.Resolver != nil:
			// One name: fasthttp's dialer resolves it (cached for a
			// minute) and starts each dial at the next address.
			d := &fasthttp.TCPDialer{Resolver: cfg.Resolver}
			hc := &fasthttp.HostClient{
				Addr:               cfg.Addrs[0],
				MaxConns:           cfg.C,
				MaxConnWaitTimeout: cfg.Timeout,
				ReadTimeout:        cfg.Timeout,
				WriteTimeout:       cfg.Timeout,
				Dial: func(addr string) (net.Conn, error) {
					c, err := d.Dial(addr)
					if err != nil {
						return nil, err
					}
					return cfg.Dialer.counted(c), nil
				},
			}
			fc.do, fc.close = hc.Do, hc.CloseIdleConnections
		case name == clientFastHost || name == clientFastHostStream:
			hc := &fasthttp.HostClient{
				StreamResponseBody: name == clientFastHostStream,
				Addr:               cfg.Addrs[0],
				MaxConns:           cfg.C,
				MaxConnWaitTimeout: cfg.Timeout,
				ReadTimeout:        cfg.Timeout,
				WriteTimeout:       cfg.Timeout,
				Dial:               cfg.Dialer.Dial,
				IsTLS:              cfg.TLS != nil,
				TLSConfig:          cfg.TLS,
			}
			fc.do, fc.close = hc.Do, hc.CloseIdleConnections
		case len(cfg.Addrs) > 1:
			return nil, fmt.Errorf("%w: fasthttp.PipelineClient talks to one host", errUnsupported)
		default:
			pc := &fasthttp.PipelineClient{
				Addr:                cfg.Addrs[0],
				MaxConns:            cfg.C,
				MaxPendingRequests:  cfg.K,
				ReadTimeout:         cfg.Timeout,
				WriteTimeout:        cfg.Timeout,
				MaxIdleConnDuration: time.Second, // no Close method: let it go soon
				Dial:                cfg.Dialer.Dial,
				IsTLS:               cfg.TLS != nil,
				TLSConfig:           cfg.TLS,
			}
			fc.do = pc.Do
		}
		return fc, nil
	}
	return nil, fmt.Errorf("unknown client %q", name)
}

// newHTTPClient wraps a RoundTripper in an http.Client that does not follow
// redirects: a benchmark sends its load to the URL it names and nowhere
// else (a redirect is counted as an error).
func newHTTPClient(rt http.RoundTripper) *http.Client {
	return &http.Client{
		Transport:     rt,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// poolStats is a client's connection pool at one moment (summed over
// hosts).
type poolStats struct {
	Open     int // connections established
	InFlight int // requests on connections
	Queued   int // requests waiting for a connection
}

// httpClient drives an *http.Client.
type httpClient struct {
	client    *http.Client
	targets   *targets
	method    string
	reqBody   []byte
	close     func()
	poolStats func() (poolStats, bool)
}

func (c *httpClient) Do(ctx context.Context) (int64, error) {
	var body io.Reader
	if len(c.reqBody) > 0 {
		body = bytes.NewReader(c.reqBody) // sets ContentLength and GetBody
	}
	req, err := http.NewRequestWithContext(ctx, c.method, c.targets.next(), body)
	if err != nil {
		return 0, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err == nil && resp.StatusCode/100 != 2 {
		err = fmt.Errorf("status %s", resp.Status)
	}
	return n, err
}

func (c *httpClient) PoolStats() (poolStats, bool) { return c.poolStats() }
func (c *httpClient) Close()                       { c.close() }

// fastClient drives a fasthttp.HostClient, fasthttp.Client or
// fasthttp.PipelineClient. The request and response objects are pooled, as
// fasthttp users do.
type fastClient struct {
	do      func(*fasthttp.Request, *fasthttp.Response) error
	targets *targets
	method  string
	reqBody []byte
	close   func()
}

func (c *fastClient) Do(ctx context.Context) (int64, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(c.targets.next())
	req.Header.SetMethod(c.method)
	if len(c.reqBody) > 0 {
		req.SetBody(c.reqBody)
	}
	if err := c.do(req, resp); err != nil {
		return 0, err
	}
	if sc := resp.StatusCode(); sc/100 != 2 {
		return 0, fmt.Errorf("status %d", sc)
	}
	return int64(len(resp.Body())), nil // already read in full by fasthttp
}

func (c *fastClient) PoolStats() (poolStats, bool) { return poolStats{}, false }
func (c *fastClient) Close()                       { c.close() }

// dialCounter dials TCP connections and counts them: dials, and the largest
// number open at once.
type dialCounter struct {
	d       net.Dialer
	dials   atomic.Int64
	open    atomic.Int64
	maxOpen atomic.Int64
}

func newDialCounter() *dialCounter {
	return &dialCounter{d: net.Dialer{Timeout: 10 * time.Second}}
}

func (dc *dialCounter) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := dc.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return dc.counted(c), nil
}

// counted counts c, dialed, and wraps it to count its close.
func (dc *dialCounter) counted(c net.Conn) net.Conn {
	dc.dials.Add(1)
	n := dc.open.Add(1)
	for {
		m := dc.maxOpen.Load()
		if n <= m || dc.maxOpen.CompareAndSwap(m, n) {
			break
		}
	}
	return &countedConn{Conn: c, dc: dc}
}

// DialPlain dials and counts a connection without wrapping it, for a
// client whose own statistics count the connections it has open
// (pipelined's Stats): a default pipelined Transport dials plain
// *net.TCPConn connections, and treats any other as a wrapper that may
// count its reads (its direct reads from the socket are for plain TCP
// connections only). The wrapper would measure a configuration that a
// default user does not have.
func (dc *dialCounter) DialPlain(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := dc.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	dc.dials.Add(1)
	return c, nil
}

func (dc *dialCounter) Dial(addr string) (net.Conn, error) {
	return dc.DialContext(context.Background(), "tcp", addr)
}

// reset starts a new measurement: dials from zero, maximum from the
// connections open now.
func (dc *dialCounter) reset() {
	dc.dials.Store(0)
	dc.maxOpen.Store(dc.open.Load())
}

type countedConn struct {
	net.Conn
	dc   *dialCounter
	once sync.Once
}

// SyscallConn exposes the socket of the connection it counts: the wrapper
// buffers nothing, so a client that looks at the socket without reading
// it (pipelined's direct reads) sees this connection as the plain TCP
// connection it is.
func (c *countedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.dc.open.Add(-1) })
	return c.Conn.Close()
}
