// Package pipelined implements an [net/http.RoundTripper] that keeps a small
// set of pipelined HTTP/1.1 connections per host, and uses HTTP/2 (the
// standard library's) where an https server negotiates it.
//
// A Transport is a drop-in replacement for [net/http.Transport]:
//
//	client := &http.Client{Transport: pipelined.NewTransport(pipelined.TransportOptions{
//		MaxConnsPerHost: 8,
//		PipelineDepth:   4,
//	})}
//
// # Scheduling
//
// Each host (scheme, address and proxy) has a pool of at most
// [TransportOptions.MaxConnsPerHost] connections. A request takes an idle
// connection if there is one; otherwise, if the pool may grow, it starts a
// dial and takes whichever comes first, that dial or a connection that
// becomes idle; otherwise it is pipelined onto the eligible connection with
// the least expected wait; otherwise it waits in a per-host FIFO queue.
// Requests are stacked on one connection only when every allowed connection
// is busy.
//
// # Safety
//
// Responses are matched to requests strictly in the order the requests were
// written (RFC 9112 §9.3.2). Only safe requests without a body (GET, HEAD,
// OPTIONS, TRACE; RFC 9110 §9.2.1) are written behind requests in flight.
// Any other request waits for a connection with nothing in flight, and
// nothing is written behind it until its final response headers arrive.
// A request that was written but not answered when its connection failed is
// retried on another connection only if it is idempotent and replayable
// (PUT, DELETE and requests carrying an Idempotency-Key or
// X-Idempotency-Key header too, as with net/http); a non-idempotent request
// is never sent twice. A copy of a request is sent while its original may
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
// length (chunked, or until close), streams from the connection through a
// buffer of at most 64 KiB; the connection then takes no new requests until
// that body has been read or closed, and if it is still streaming after
// HeadOfLineTimeout, idempotent requests already written behind it are
// re-sent on another connection (as they are behind a body read ahead whole
// that is still arriving then). The memory the transport reads ahead of its
// callers is therefore bounded by MaxConnsPerHost × PipelineDepth × 256 KiB
// per host; once a host's answers are known to be large, its depth is held
// to about 512 KiB of them per connection (at least 2 requests), which keeps
// the read-ahead near that in practice. A buffered body handed to a caller
// is the caller's: it holds its (at most 256 KiB) buffer until it is read,
// closed or garbage collected, where net/http would hold a connection
// instead.
package pipelined
