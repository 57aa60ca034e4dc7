package pipelined

import (
	"context"
	"errors"
	"fmt"

	"github.com/pipelined/pipelined/internal/h1"
)

// ErrTransportClosed is returned by RoundTrip for requests in flight or
// queued when [Transport.Close] is called, and for every later call.
var ErrTransportClosed = errors.New("pipelined: transport closed")

// ErrServerClosed reports that the connection a request was written to
// closed (or failed) before the request's response arrived, and that the
// request was not sent again, because it is not idempotent, its body cannot
// be replayed, or it was the first request on a fresh connection (which
// net/http does not retry either: the request itself may have made the
// server fail). Some or all of the request reached the server: it may or
// may not have been processed. It is matched through a [*ConnError] whose
// Written field is true.
var ErrServerClosed = errors.New("pipelined: server closed connection before answering")

// ErrFraming reports a response whose framing is malformed or ambiguous
// (RFC 9112 §6.3): the connection it arrived on has been closed.
var ErrFraming = h1.ErrFraming

// ErrUnsolicitedResponse reports bytes received on a connection with no
// request in flight (RFC 9112 §9.2). The connection has been closed.
var ErrUnsolicitedResponse = errors.New("pipelined: unsolicited response on idle connection")

// errReadOnClosedResBody is returned by a response body's Read after
// Close, with net/http's text (its errReadOnClosedResBody is unexported
// too: callers match neither).
var errReadOnClosedResBody = errors.New("http: read on closed response body")

// errRequestCanceled ends a request whose deprecated Request.Cancel
// channel was closed (legacycancel.go), with net/http's text (its
// errRequestCanceled is unexported too).
var errRequestCanceled = errors.New("net/http: request canceled")

// A FramingError describes a response that violates RFC 9112 message framing.
// It matches [ErrFraming] with [errors.Is]. Its Reason field says what was
// wrong, e.g. "both Content-Length and Transfer-Encoding".
type FramingError = h1.FramingError

func framingErrorf(format string, args ...any) error {
	return &FramingError{Reason: fmt.Sprintf(format, args...)}
}

// A ConnError is returned when the connection a request was sent on failed
// before the request's response headers arrived, and the transport did not
// (or could no longer) send it again (docs/reliability.md lists when it
// does). Err is the underlying cause. If Written is true, some of the
// request reached the connection and the error also matches
// [ErrServerClosed]: the server may have processed it. When the cause is
// the transport's own verdict (ResponseHeaderTimeout, a malformed or too
// large response head, [Transport.Close]), the message is the cause's.
type ConnError struct {
	Err     error
	Written bool

	fail failure // what happened, for the retry decision (retry.go)
}

func (e *ConnError) Error() string {
	if isFinalError(e.Err) {
		// The transport's own verdict on the response (too slow,
		// malformed, too large) or its Close: the server closed
		// nothing, and the cause says all.
		return e.Err.Error()
	}
	if e.Written {
		return fmt.Sprintf("%v: %v", ErrServerClosed, e.Err)
	}
	return "pipelined: connection failed: " + e.Err.Error()
}

// Timeout reports whether the cause is a time limit that expired (a
// net.Error whose Timeout reports true, such as
// [ErrResponseHeaderTimeout]). With Temporary, it makes a ConnError a
// net.Error, so that an http.Client's *url.Error, which asks only the
// error it wraps, reports a timeout as it does with net/http.
func (e *ConnError) Timeout() bool { return isTimeout(e.Err) }

// Temporary reports what the cause's Temporary method does, false if it
// has none. Like net.Error's, it is deprecated: use Timeout.
func (e *ConnError) Temporary() bool {
	var t interface{ Temporary() bool }
	return errors.As(e.Err, &t) && t.Temporary()
}

// Unwrap returns the underlying cause and, for a request that was written,
// [ErrServerClosed].
func (e *ConnError) Unwrap() []error {
	if e.Written {
		return []error{ErrServerClosed, e.Err}
	}
	return []error{e.Err}
}

// ErrResponseHeaderTimeout is the cause of a request's failure when
// ResponseHeaderTimeout expired before its response headers arrived. Like
// net/http's, it is a net.Error whose Timeout method reports true, and it
// matches context.DeadlineExceeded. RoundTrip returns it in a
// [*ConnError], which reports the same Timeout.
var ErrResponseHeaderTimeout error = &timeoutError{"pipelined: timeout awaiting response headers"}

// ErrTLSHandshakeTimeout is returned when TLSHandshakeTimeout expires
// before a dial's TLS handshake ends. Like net/http's, it is a net.Error
// whose Timeout method reports true; it also matches
// context.DeadlineExceeded.
var ErrTLSHandshakeTimeout error = &timeoutError{"pipelined: TLS handshake timeout"}

// timeoutError is a time limit of the transport that expired: a net.Error
// whose Timeout method reports true, which matches
// context.DeadlineExceeded.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string   { return e.msg }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return true }
func (e *timeoutError) Is(err error) bool {
	return err == context.DeadlineExceeded
}
