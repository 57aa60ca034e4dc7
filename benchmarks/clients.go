package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
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
)

var allClients = []string{clientNetHTTP, clientPipelined, clientFastHost, clientFastPipeline, clientNetHTTPNoKA, clientPipelinedNoKA}

func isNoKeepAlive(name string) bool {
	return name == clientNetHTTPNoKA || name == clientPipelinedNoKA
}

// clientConfig is what every client is built from.
type clientConfig struct {
	Addr    string // host:port of the server
	C       int    // connections per host
	K       int    // pipeline depth
	Timeout time.Duration
	Dialer  *dialCounter
}

// benchClient performs one GET at a time per calling goroutine. Do reads
// and closes the whole response body and returns an error for anything but
// a 200 response.
type benchClient interface {
	Do(ctx context.Context) error
	// PoolStats reports the client's own view of its connection pool, or
	// ok == false if it has none.
	PoolStats() (s poolStats, ok bool)
	Close()
}

// newClient builds the named client.
func newClient(name string, cfg clientConfig) (benchClient, error) {
	switch name {
	case clientNetHTTP, clientNetHTTPNoKA:
		tr := &http.Transport{
			DialContext:         cfg.Dialer.DialContext,
			MaxConnsPerHost:     cfg.C,
			MaxIdleConnsPerHost: cfg.C,
			MaxIdleConns:        0, // no limit
			DisableKeepAlives:   name == clientNetHTTPNoKA,
			ForceAttemptHTTP2:   false,
		}
		return &httpClient{
			// No Client.Timeout: the run's context bounds every request. For a
			// RoundTripper other than *http.Transport, http.Client implements
			// Timeout with a goroutine and a timer per request, which would
			// measure http.Client rather than the transport.
			client:    &http.Client{Transport: tr},
			url:       "http://" + cfg.Addr + "/",
			close:     tr.CloseIdleConnections,
			poolStats: func() (poolStats, bool) { return poolStats{}, false },
		}, nil
	case clientPipelined, clientPipelinedNoKA:
		return newPipelinedClient(cfg, name == clientPipelinedNoKA)
	case clientFastHost:
		hc := &fasthttp.HostClient{
			Addr:               cfg.Addr,
			MaxConns:           cfg.C,
			MaxConnWaitTimeout: cfg.Timeout,
			ReadTimeout:        cfg.Timeout,
			WriteTimeout:       cfg.Timeout,
			Dial:               cfg.Dialer.Dial,
		}
		return &fastClient{do: hc.Do, url: "http://" + cfg.Addr + "/", close: hc.CloseIdleConnections}, nil
	case clientFastPipeline:
		pc := &fasthttp.PipelineClient{
			Addr:                cfg.Addr,
			MaxConns:            cfg.C,
			MaxPendingRequests:  cfg.K,
			ReadTimeout:         cfg.Timeout,
			WriteTimeout:        cfg.Timeout,
			MaxIdleConnDuration: time.Second, // no Close method: let it go soon
			Dial:                cfg.Dialer.Dial,
		}
		return &fastClient{do: pc.Do, url: "http://" + cfg.Addr + "/", close: func() {}}, nil
	}
	return nil, fmt.Errorf("unknown client %q", name)
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
	url       string
	close     func()
	poolStats func() (poolStats, bool)
}

func (c *httpClient) Do(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	return err
}

func (c *httpClient) PoolStats() (poolStats, bool) { return c.poolStats() }
func (c *httpClient) Close()                       { c.close() }

// fastClient drives a fasthttp.HostClient or fasthttp.PipelineClient. The
// request and response objects are pooled, as fasthttp users do.
type fastClient struct {
	do    func(*fasthttp.Request, *fasthttp.Response) error
	url   string
	close func()
}

func (c *fastClient) Do(ctx context.Context) error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(c.url)
	if err := c.do(req, resp); err != nil {
		return err
	}
	if sc := resp.StatusCode(); sc != fasthttp.StatusOK {
		return fmt.Errorf("status %d", sc)
	}
	_ = resp.Body() // already read in full by fasthttp
	return nil
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
	dc.dials.Add(1)
	n := dc.open.Add(1)
	for {
		m := dc.maxOpen.Load()
		if n <= m || dc.maxOpen.CompareAndSwap(m, n) {
			break
		}
	}
	return &countedConn{Conn: c, dc: dc}, nil
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

func (c *countedConn) Close() error {
	c.once.Do(func() { c.dc.open.Add(-1) })
	return c.Conn.Close()
}
