package pipelined

import (
	"context"
	"net"
	"net/http"
)

// OptionsFrom returns the TransportOptions that carry t's settings, for a
// one-line swap of an existing *http.Transport:
//
//	client.Transport = pipelined.NewTransport(pipelined.OptionsFrom(oldTransport))
//
// Every field of [http.Transport] with a twin is copied: Proxy,
// OnProxyConnectResponse, DialContext (or Dial, wrapped), DialTLSContext (or
// DialTLS, wrapped), TLSClientConfig (cloned), TLSHandshakeTimeout,
// DisableKeepAlives, DisableCompression, MaxIdleConns, MaxIdleConnsPerHost,
// MaxConnsPerHost, IdleConnTimeout, ResponseHeaderTimeout,
// ExpectContinueTimeout, ProxyConnectHeader (cloned), GetProxyConnectHeader,
// MaxResponseHeaderBytes, WriteBufferSize and ReadBufferSize.
//
// MaxConnsPerHost has net/http's meaning (0: no limit); pipelineable
// requests are pipelined beyond PipelineConnsPerHost connections, which
// http.Transport has no twin for. Zero values keep this package's
// defaults, which differ from net/http's in one place: MaxIdleConnsPerHost
// 0 means every connection is kept idle here (2 in net/http; see
// TransportOptions.MaxIdleConnsPerHost).
//
// Fields without a twin are ignored: this transport speaks HTTP/1.1 only,
// so ForceAttemptHTTP2, HTTP2, Protocols and TLSNextProto have no effect
// (servers are offered only "http/1.1" in ALPN), and protocols registered
// with RegisterProtocol are not carried over. DisableKeepAlives disables
// pipelining too.
func OptionsFrom(t *http.Transport) TransportOptions {
	o := TransportOptions{
		Proxy:                  t.Proxy,
		OnProxyConnectResponse: t.OnProxyConnectResponse,
		DialContext:            t.DialContext,
		DialTLSContext:         t.DialTLSContext,
		TLSHandshakeTimeout:    t.TLSHandshakeTimeout,
		DisableKeepAlives:      t.DisableKeepAlives,
		DisableCompression:     t.DisableCompression,
		MaxIdleConns:           t.MaxIdleConns,
		MaxIdleConnsPerHost:    t.MaxIdleConnsPerHost,
		MaxConnsPerHost:        t.MaxConnsPerHost,
		IdleConnTimeout:        t.IdleConnTimeout,
		ResponseHeaderTimeout:  t.ResponseHeaderTimeout,
		ExpectContinueTimeout:  t.ExpectContinueTimeout,
		GetProxyConnectHeader:  t.GetProxyConnectHeader,
		MaxResponseHeaderBytes: t.MaxResponseHeaderBytes,
		WriteBufferSize:        t.WriteBufferSize,
		ReadBufferSize:         t.ReadBufferSize,
	}
	if o.IdleConnTimeout == 0 {
		o.IdleConnTimeout = -1 // net/http's zero: no limit
	}
	if t.TLSClientConfig != nil {
		o.TLSClientConfig = t.TLSClientConfig.Clone()
	}
	if t.ProxyConnectHeader != nil {
		o.ProxyConnectHeader = t.ProxyConnectHeader.Clone()
	}
	//lint:ignore SA1019 Dial and DialTLS are deprecated but still honoured by net/http.
	if dial := t.Dial; o.DialContext == nil && dial != nil {
		o.DialContext = func(_ context.Context, network, addr string) (net.Conn, error) {
			return dial(network, addr)
		}
	}
	//lint:ignore SA1019 see above.
	if dial := t.DialTLS; o.DialTLSContext == nil && dial != nil {
		o.DialTLSContext = func(_ context.Context, network, addr string) (net.Conn, error) {
			return dial(network, addr)
		}
	}
	return o
}

// clone returns a deep copy of o: the TLS configuration and the proxy
// CONNECT header are copied, functions are shared.
func (o TransportOptions) clone() TransportOptions {
	if o.TLSClientConfig != nil {
		o.TLSClientConfig = o.TLSClientConfig.Clone()
	}
	if o.ProxyConnectHeader != nil {
		o.ProxyConnectHeader = o.ProxyConnectHeader.Clone()
	}
	return o
}

// Clone returns a new Transport with a deep copy of t's options (as
// [http.Transport.Clone] does). It shares no connections with t.
func (t *Transport) Clone() *Transport {
	t.initOnce.Do(t.init)
	return NewTransport(t.opts.clone())
}
