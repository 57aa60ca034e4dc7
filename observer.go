package pipelined

import (
	"net"
	"net/http"
	"time"
)

// Observer receives the events of a [Transport]'s requests and connections,
// for metrics and logs. It is set in TransportOptions.Observer and shared by
// the Transport and its clones; a nil *Observer, or a nil hook, costs one
// comparison per event site, and no event is built for a nil hook.
//
// Observer is a struct of functions, like [net/http/httptrace.ClientTrace],
// rather than an interface: a user sets only the hooks they need, new
// events can be added later without breaking existing observers (adding a
// method to an interface breaks every implementation), and the transport
// skips building an event nobody listens to.
//
// Every hook is called:
//   - outside every lock of the transport, so a hook may call the Transport
//     (Stats, even RoundTrip) without deadlock. A hook told of a request
//     while that request holds its connection (RequestAssigned and
//     ConnActive, before it is written; RequestWritten, for a request whose
//     caller reads its own response; ConnIdle, and ConnClosed for connections
//     closed over MaxIdleConns, from the connection's reader) keeps the
//     connection from new requests until it returns, as do httptrace's
//     hooks in the same places (GotConn, the Wrote* hooks,
//     GotFirstResponseByte, Got1xxResponse, PutIdleConn), and a dial
//     running TLSHandshakeStart or TLSHandshakeDone is waited for by
//     nobody: a request the hook sends to the same host goes to another
//     connection, dialed if need be, instead of waiting behind the hook.
//     Only where MaxConnsPerHost allows no other connection does it wait,
//     as any request does, for one to come free (with net/http's Transport
//     too): there, a hook must not wait for a request it sends;
//   - in the goroutine where the event happens (the caller of RoundTrip, a
//     connection's reader, a dial, a timer), synchronously: a hook must not
//     block, and should do no more than update counters or hand the event
//     to another goroutine;
//   - with the event by value: it may keep the event, but must not modify
//     Request, which belongs to the caller of RoundTrip.
//
// Hooks are called concurrently, from many goroutines. The transitions they
// report are decided under the transport's locks and are consistent (a
// connection is Opened once, then alternately Active and Idle, then Closed
// once), but the calls are made after the locks are released, so the calls
// for one connection or one request may overlap or start out of order:
// counters derived from the events (+1 on Active, -1 on Idle) are exact
// once the calls have returned, not at every instant.
type Observer struct {
	// RequestQueued is called when an attempt enters its host's pool to
	// wait for a connection: once for the first attempt of every request
	// that passed validation, and again for every resend (Resend says
	// why). It is followed by RequestAssigned, or by RequestDone if the
	// request fails or is cancelled while queued. An attempt that finds an
	// idle connection is queued and assigned at once.
	RequestQueued func(RequestEvent)

	// RequestAssigned is called when an attempt has been given a
	// connection (ConnID, Protocol, InFlight and Pipelined are then set).
	// The time between RequestQueued and RequestAssigned, dials included,
	// is the attempt's time in queue.
	RequestAssigned func(RequestEvent)

	// RequestWritten is called when the attempt's request, head and body,
	// has been written and flushed to its connection.
	RequestWritten func(RequestEvent)

	// RequestHeaders is called when the attempt's final response head
	// (not a 1xx) has been read, once it is handed to the caller (as for
	// HTTP/2): in the caller's goroutine, or the goroutine of a copy's
	// (ResendHedge); Status is set. An attempt whose response nobody took
	// (its caller gave up, or its copy's response came first) reports none.
	RequestHeaders func(RequestEvent)

	// RequestDone is called once per request that was queued, just before
	// RoundTrip returns: with the response (Status set, Err nil) or with
	// RoundTrip's error. It carries the totals (Start, QueueTime, Attempt)
	// so that a metric needs no other event. Reading the response body is
	// not part of the request's duration.
	RequestDone func(RequestEvent)

	// ConnOpened is called when a connection has been dialed (TLS and
	// proxy handshakes included) and joins its host's pool. A new
	// connection is idle: ConnActive follows when its first request is
	// assigned to it, usually at once.
	ConnOpened func(ConnEvent)

	// ConnActive is called when a request is assigned to a connection
	// that had nothing in flight. HTTP/2 connections report no ConnActive
	// or ConnIdle: their streams come and go inside the standard library's
	// client connection.
	ConnActive func(ConnEvent)

	// ConnIdle is called when the last request in flight on a connection
	// is finished (its response body read or closed) and the connection
	// stays open (HTTP/1.1 only, as ConnActive).
	ConnIdle func(ConnEvent)

	// ConnClosed is called once when a connection that was opened leaves
	// its pool for good: Reason says why, Active whether requests were in
	// flight on it, Err the error for CloseError.
	ConnClosed func(ConnEvent)

	// RouteLearned is called when a response changed what a host's model
	// holds about the responses to a route class (docs/model.md): whether
	// requests may be written behind its requests, and, if not, why. It
	// is not called under TransportOptions.FixedPolicy.
	RouteLearned func(RouteEvent)

	// HostLearned is called when what a host's model decides for the host
	// as a whole changed (docs/model.md): whether it is pipelined and, if
	// not, why; whether it runs a connection's requests one at a time;
	// whether it is proven to handle pipelining. A change that comes with
	// time alone (a verdict expiring) is reported with the next response or
	// failure that finds it. It is not called under
	// TransportOptions.FixedPolicy, nor for a forward proxy's pool.
	HostLearned func(HostEvent)
}

// HostEvent reports a change in what a host's model decides for the host
// as a whole; HostStats.Model shows the same fields at any time.
type HostEvent struct {
	// Time is when the change was found.
	Time time.Time

	// Host names the pool as [Transport.Stats] keys it.
	Host string

	// Addr is the target server's "host:port", default port filled in.
	Addr string

	// Pipelining reports whether pipelineable requests are written behind
	// others once PipelineConnsPerHost connections are busy; if not,
	// Reason says why: "fallback" (its pipelined connections failed),
	// "late heads" (its responses are late often enough that a request
	// gains more from a connection of its own) or "serial" (it runs a
	// connection's requests one at a time, slowly enough that
	// connections of their own run them in parallel).
	Pipelining bool
	Reason     string

	// Serial reports whether the host is taken to run a connection's
	// requests one at a time.
	Serial bool

	// Proven reports whether the host responded to a pipelined request as
	// only a server that handles pipelining does.
	Proven bool
}

// RouteEvent reports a change in what a host's model holds about one
// route class: the requests of the same method, target host, path shape,
// query parameter names and Accept field.
type RouteEvent struct {
	// Time is when the response that changed it was read.
	Time time.Time

	// Host names the pool as [Transport.Stats] keys it.
	Host string

	// Addr is the target server's "host:port", default port filled in.
	Addr string

	// Request is the request whose response changed the verdict: an example
	// of its class. It must not be modified.
	Request *http.Request

	// Verdict is the class's verdict now: "bounded" (its last response was
	// read whole, its head in time: requests may be written behind its
	// requests), "stream" (its last response was a stream: server-sent
	// events, a watch, a download too large to read ahead) or "late" (its
	// last response held its connection's head late, as a long poll does).
	// A request of a "stream" or "late" class takes a connection of its
	// own, as with net/http, and is never copied.
	Verdict string
}

// RequestEvent describes one step of one attempt of a request. An attempt is
// one send of the request on one connection; a request has several when it
// is resent (see [ResendCause]).
type RequestEvent struct {
	// Time is when the event happened.
	Time time.Time

	// Start is when RoundTrip was called for the request.
	Start time.Time

	// Request is the caller's request. It must not be modified.
	Request *http.Request

	// Host names the request's pool as [Transport.Stats] keys it:
	// "scheme://host:port", with " via scheme://proxy:port" for proxied
	// pools; "http://* via ..." for http:// requests through an HTTP(S)
	// proxy, which share the proxy's connections whatever their target.
	Host string

	// Addr is the target server's "host:port", default port filled in (the
	// origin server's, not the proxy's).
	Addr string

	// Attempt is the number of the attempt, 1 for the first send. In
	// RequestDone it is the number of attempts made.
	Attempt int

	// Resend is why this attempt is sent again, ResendNone for the first.
	// In RequestDone it is the cause of the last attempt.
	Resend ResendCause

	// QueueTime is the time the request has spent waiting for a
	// connection, summed over its attempts so far (in RequestDone: over
	// all of them).
	QueueTime time.Duration

	// ConnID identifies the attempt's connection (see ConnEvent.ID); zero
	// before RequestAssigned.
	ConnID uint64

	// Protocol is the connection's protocol, "HTTP/1.1" or "HTTP/2.0";
	// empty before RequestAssigned (and in RequestDone for a request that
	// was never assigned).
	Protocol string

	// InFlight is the number of requests in flight on the connection when
	// the attempt was assigned to it, the attempt included: 1 when it has
	// the connection to itself. Zero before RequestAssigned.
	InFlight int

	// Pipelined reports whether the attempt was sent behind other requests of
	// its connection whose responses had not been read. In RequestAssigned it
	// is InFlight > 1; from RequestWritten on, whether an earlier request was
	// still awaiting its response when the attempt's first byte was written.
	// For HTTP/2, whether other streams were open.
	Pipelined bool

	// Status is the response's status code, from RequestHeaders on; zero
	// if no response was received.
	Status int

	// Err is RoundTrip's error, in RequestDone only.
	Err error
}

// ResendCause says why an attempt of a request is sent again.
type ResendCause uint8

// The causes of a resend. Only idempotent requests with a replayable body
// are ever sent twice once written; see docs/design.md.
const (
	// ResendNone: the first attempt.
	ResendNone ResendCause = iota

	// ResendNotWritten: the previous attempt's connection closed or failed
	// before the request was written; nothing reached the server.
	ResendNotWritten

	// ResendConnFailed: the previous attempt was written, and its
	// connection failed or was closed by the server before its response
	// began.
	ResendConnFailed

	// ResendHeadOfLine: the previous attempt was written behind a
	// response that was slower than HeadOfLineTimeout, streamed a large
	// body, or closed the connection, and was moved to another
	// connection.
	ResendHeadOfLine

	// ResendHedge: a copy of a request whose attempt, at the head of its
	// connection, was late (TransportOptions.HedgeHeadOfLine), or was a
	// host's first pipelined request and got no response in a few round
	// trips (docs/reliability.md, "The probe"), sent while that attempt
	// still runs; the first response wins. A copy's attempts
	// are numbered after the attempt it copies and have no RequestDone of
	// their own: if the copy's response wins, the request's RequestDone
	// reports the copy's last attempt (and adds its QueueTime).
	ResendHedge
)

// String returns the cause in snake case, for metric attributes and logs:
// "none", "not_written", "conn_failed", "head_of_line" or "hedge".
func (c ResendCause) String() string {
	switch c {
	case ResendNone:
		return "none"
	case ResendNotWritten:
		return "not_written"
	case ResendConnFailed:
		return "conn_failed"
	case ResendHeadOfLine:
		return "head_of_line"
	case ResendHedge:
		return "hedge"
	}
	return "unknown"
}

// ConnEvent describes a change of state of one connection.
type ConnEvent struct {
	// Time is when the event happened.
	Time time.Time

	// ID identifies the connection within its Transport: IDs are unique
	// and never zero.
	ID uint64

	// Host names the connection's pool as [Transport.Stats] keys it.
	Host string

	// Addr is the target server's "host:port" (not the proxy's); empty for
	// a connection to an HTTP(S) proxy that carries http:// requests to
	// any target.
	Addr string

	// Protocol is "HTTP/1.1" or "HTTP/2.0".
	Protocol string

	// RemoteAddr is the address the connection was dialed to, as the
	// connection reports it (net.Conn.RemoteAddr): the IP address and
	// port of the target, or of the proxy for a proxied connection; for a
	// host whose connections are spread over its addresses
	// (TransportOptions.Resolver), the one it went to.
	RemoteAddr net.Addr

	// Opened is when the connection joined its pool (ConnOpened's Time):
	// in ConnClosed, Time - Opened is the connection's lifetime.
	Opened time.Time

	// Active reports whether requests are in flight on the connection
	// after the event: true in ConnActive, false in ConnOpened and
	// ConnIdle; in ConnClosed, whether requests were in flight when it
	// closed (it was counted as active, not idle).
	Active bool

	// Reason says why the connection closed, in ConnClosed only.
	Reason CloseReason

	// Err is the error that closed the connection, for CloseError; nil
	// otherwise.
	Err error
}

// CloseReason says why a connection was closed.
type CloseReason int

// The reasons a connection closes.
const (
	// CloseIdleTimeout: idle for IdleConnTimeout.
	CloseIdleTimeout CloseReason = iota + 1

	// CloseServer: the server closed the connection, or said it would
	// ("Connection: close", HTTP/1.0 without keep-alive, a body delimited
	// by the end of the connection, GOAWAY). Over HTTP/2, every end the
	// client did not cause: the standard library's connection does not
	// say whether the server sent GOAWAY, closed it or reset it.
	CloseServer

	// CloseKeepAliveEnd: the server's "Keep-Alive: timeout=, max=" limit
	// was reached.
	CloseKeepAliveEnd

	// CloseBudget: the connection served as many requests as the pool
	// learned the server allows per connection.
	CloseBudget

	// CloseError: an I/O error, a malformed response, or a timeout
	// (ConnEvent.Err says which).
	CloseError

	// CloseRequest: the client asked for it: "Connection: close" or
	// Request.Close on a request, or DisableKeepAlives.
	CloseRequest

	// CloseCanceled: a request written on the connection was cancelled
	// and nothing else waited on the connection.
	CloseCanceled

	// CloseUpgraded: a 101 Switching Protocols response handed the
	// connection to the caller.
	CloseUpgraded

	// CloseTransportClosed: [Transport.Close].
	CloseTransportClosed

	// CloseIdleConnections: [Transport.CloseIdleConnections].
	CloseIdleConnections

	// CloseIdleLimit: an idle connection beyond MaxIdleConnsPerHost or
	// MaxIdleConns.
	CloseIdleLimit

	// CloseDrained: the connection's address left its host's answer
	// (TransportOptions.Resolver): it took no new request and closed once
	// its requests were responded to.
	CloseDrained

	// CloseLifetime: the connection was older than MaxConnLifetime: it
	// took no new request (its replacement dialed first where the load
	// needed one) and closed once its requests were responded to.
	CloseLifetime
)

// String returns the reason in snake case, for metric attributes and logs:
// "idle_timeout", "server_close", "keep_alive_end", "budget", "error",
// "request", "canceled", "upgraded", "transport_closed",
// "close_idle_connections", "idle_limit", "drained" or "lifetime".
func (r CloseReason) String() string {
	switch r {
	case CloseIdleTimeout:
		return "idle_timeout"
	case CloseServer:
		return "server_close"
	case CloseKeepAliveEnd:
		return "keep_alive_end"
	case CloseBudget:
		return "budget"
	case CloseError:
		return "error"
	case CloseRequest:
		return "request"
	case CloseCanceled:
		return "canceled"
	case CloseUpgraded:
		return "upgraded"
	case CloseTransportClosed:
		return "transport_closed"
	case CloseIdleConnections:
		return "close_idle_connections"
	case CloseIdleLimit:
		return "idle_limit"
	case CloseDrained:
		return "drained"
	case CloseLifetime:
		return "lifetime"
	}
	return "unknown"
}
