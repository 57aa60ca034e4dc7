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
// MaxResponseHeaderBytes, WriteBufferSize, ReadBufferSize and HTTP2 (copied).
//
// Protocols is set to the protocols t uses, following net/http: t's
// Protocols if set; otherwise HTTP/1, plus HTTP/2 unless TLSNextProto is
// non-nil without an "h2" entry (the documented way to disable HTTP/2), or
// a custom dialer (Dial, DialContext, DialTLS, DialTLSContext) or
// TLSClientConfig is set without ForceAttemptHTTP2. So
// http.DefaultTransport and its clones give HTTP/2 where the server speaks
// it.
//
// MaxConnsPerHost has net/http's meaning (0: no limit); pipelineable
// requests are pipelined beyond PipelineConnsPerHost connections, which
// http.Transport has no twin for. Zero values keep this package's
// defaults, which differ from net/http's in one place: MaxIdleConnsPerHost
// 0 means every connection is kept idle here (2 in net/http; see
// TransportOptions.MaxIdleConnsPerHost).
//
// ForceAttemptHTTP2 and TLSNextProto have no twin: they are folded into
// Protocols (an HTTP/2 implementation installed in TLSNextProto is replaced
// by the standard library's). Protocols registered with RegisterProtocol
// are not carried over. DisableKeepAlives disables pipelining, and HTTP/2,
// too.
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
	p := protocolsOf(t)
	o.Protocols = &p
	if t.HTTP2 != nil {
		c := *t.HTTP2
		o.HTTP2 = &c
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

// protocolsOf returns the protocols t uses, as net/http's
// Transport.protocols (transport.go) computes them. GODEBUG=http2client=0
// is applied by NewTransport.
func protocolsOf(t *http.Transport) http.Protocols {
	if t.Protocols != nil {
		return *t.Protocols
	}
	var p http.Protocols
	p.SetHTTP1(true)
	//lint:ignore SA1019 Dial and DialTLS are deprecated but still count in net/http's choice.
	customDial := t.Dial != nil || t.DialTLS != nil
	switch {
	case t.TLSNextProto != nil:
		// An empty map is the documented way to disable HTTP/2.
		p.SetHTTP2(t.TLSNextProto["h2"] != nil)
	case !t.ForceAttemptHTTP2 && (t.TLSClientConfig != nil || t.DialContext != nil || t.DialTLSContext != nil || customDial):
		// net/http does not enable HTTP/2 by itself for custom dialers
		// or TLS configurations (golang/go#14275).
	default:
		p.SetHTTP2(true)
	}
	return p
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
	if o.Protocols != nil {
		p := *o.Protocols
		o.Protocols = &p
	}
	if o.HTTP2 != nil {
		c := *o.HTTP2
		o.HTTP2 = &c
	}
	return o
}

// Clone returns a new Transport with a deep copy of t's options (as
// [http.Transport.Clone] does). It shares no connections with t.
func (t *Transport) Clone() *Transport {
	t.initOnce.Do(t.init)
	return NewTransport(t.opts.clone())
}
