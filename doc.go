// Package pipelined implements a [net/http.RoundTripper] that keeps a small
// set of pipelined HTTP/1.1 connections per host, and uses HTTP/2 (the
// standard library's) where an https server negotiates it.
//
// A [Transport] goes where a [net/http.Transport] would, in
// [net/http.Client.Transport]; everything http.Client does (redirects,
// cookies, Timeout) works on top of it. Options that twin an http.Transport
// field keep its name and meaning, and [OptionsFrom] copies them from an
// existing one:
//
//	// go get github.com/pipelined/pipelined
//	client := &http.Client{Transport: pipelined.NewTransport(pipelined.TransportOptions{})}
//
//	// or, keeping an *http.Transport's settings:
//	client := &http.Client{Transport: pipelined.NewTransport(pipelined.OptionsFrom(old))}
//
// Install it per client; never assign it to [net/http.DefaultTransport],
// which much code asserts to be an *http.Transport.
//
// # When it helps
//
// Many concurrent requests to few HTTP/1.1 hosts: a service calling its
// backends, a crawler of one site, an API client under load. Pipelining
// carries several requests per connection, so the same number of
// connections serves more requests, with fewer dials, system calls and
// goroutine hand-offs per request. Where requests cannot gain from it
// (one caller at a time, POSTs, a host that responds over HTTP/2, a server
// that runs a connection's requests one at a time with slow responses) the
// Transport uses connections as net/http does. It does not help against a
// server that mishandles pipelining (it falls back to one request per
// connection, see below) or one that speaks HTTP/2 anyway.
//
// # Scheduling
//
// Each host (scheme, address and proxy) has a pool of at most
// [TransportOptions.MaxConnsPerHost] connections (no limit by default). A
// request takes an idle connection if there is one; otherwise, if the pool
// may grow, it starts a dial and takes whichever comes first, that dial or
// a connection that becomes idle; otherwise it is pipelined onto the
// eligible connection with the least expected wait; otherwise it waits in a
// per-host FIFO queue. Pipelineable requests stop dialing at
// [TransportOptions.PipelineConnsPerHost] connections (8) and pipeline up
// to [TransportOptions.PipelineDepth] (4) on them; every other request
// dials up to MaxConnsPerHost, as with net/http. A connection older than
// [TransportOptions.MaxConnLifetime] (5 minutes) takes no new request and
// closes once it has served what it carries, its replacement dialed
// first: behind a layer-4 load balancer, which places connections, not
// requests, backends added later get their share.
//
// # What it learns
//
// Each host is judged from its responses. A request is written behind
// another only if the other's route class (its method, path shape with
// identifiers folded, query parameter names and Accept field) last
// responded bounded and quickly on that host: nothing waits behind a class
// not seen there yet, nor behind one whose last response was a stream or held
// its connection's head late (a long poll). A class known to stream or to
// be late is written behind nothing either (it takes a connection of its
// own, as with net/http) and is never copied. The host's pool also learns what its connections show: how many
// requests the server serves per connection, when it announces it will
// close one (Keep-Alive: timeout=, max=), whether pipelining gains anything
// there, and, when connections keep failing with pipelined requests
// outstanding, to fall back to one request per connection for a while (30
// s, doubled for each fallback in a row). [TransportOptions.FixedPolicy]
// turns the learning off; [Transport.Stats] shows each host's effective
// pipeline depth, and [Observer] reports each change of a verdict
// (RouteLearned). docs/design.md in the repository says what is learned
// from what.
//
// # Safety
//
// Responses are matched to requests strictly in the order the requests were
// written (RFC 9112 §9.3.2). Only safe requests without a body (GET, HEAD,
// OPTIONS, TRACE; RFC 9110 §9.2.1) are written behind requests in flight.
// Any other request waits for a connection with nothing in flight, and
// nothing is written behind it until its final response headers arrive.
// A request that was written but not responded to when its connection failed
// is retried on another connection only if it is idempotent and replayable
// (PUT, DELETE and requests carrying an Idempotency-Key or X-Idempotency-Key
// header too, as with net/http); a non-idempotent request is never sent
// twice. A copy of a request is sent while its original may
// still run only if the request is safe: the requests pipelined behind a
// late head are re-sent elsewhere (HeadOfLineTimeout), and with
// [TransportOptions.HedgeHeadOfLine] the late head itself is copied.
//
// Framing is strict (RFC 9112 §6.3): a malformed, ambiguous or unsolicited
// response closes the connection and is never matched to a later request.
//
// # Memory
//
// The reader of each connection reads ahead at most one response body of up
// to 256 KiB (of known length) per request in flight, so that responses
// behind an unread body do not stall. A larger body, or one of unknown
// length (chunked, or until close), streams from the connection as the
// caller reads it, through a buffer of at most 64 KiB (straight into the
// caller's buffer when that is larger); the connection then takes no new
// requests until
// that body has been read or closed, and if it is still streaming after
// HeadOfLineTimeout, the safe requests already written behind it are
// re-sent on another connection (as they are behind a body read ahead whole
// that is still arriving then). The memory the transport reads ahead of its
// callers is therefore bounded by MaxConnsPerHost × PipelineDepth × 256 KiB
// per host; once a host's responses are known to be large, its depth is held
// to about 512 KiB of them per connection (at least 2 requests), which keeps
// the read-ahead near that in practice. A buffered body handed to a caller
// is the caller's: it holds its (at most 256 KiB) buffer until it is read,
// closed or garbage collected, where net/http would hold a connection
// instead.
//
// # Errors and observability
//
// Requests fail with net/http's errors where net/http would fail (the same
// texts for invalid requests, the context's error on cancellation), with
// [ErrTransportClosed] after [Transport.Close], and with a [*ConnError]
// when a connection fails under a request that is not sent again:
// errors.Is finds its cause, and [ErrServerClosed] if the request reached
// the server. [Transport.Stats] is a snapshot of every host's pool;
// [TransportOptions.Observer] receives every request's and connection's
// events outside the Transport's locks (the otelpipelined module turns them
// into OpenTelemetry metrics); httptrace hooks fire as with net/http.
//
// # Further reading
//
// In the repository: README.md (install, migrating, the differences from
// net/http that a user can act on), docs/design.md (a request's path, who
// owns what, the protocol rules with their sources), docs/reliability.md
// (failure model, retries, head-of-line protection), docs/parity.md
// (httptrace under pipelining), docs/connecting.md (dialing, TLS, proxies)
// and docs/benchmarks.md (measurements, regenerated by the benchmarks
// program).
package pipelined
