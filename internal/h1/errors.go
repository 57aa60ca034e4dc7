package h1

import (
	"errors"
	"fmt"
)

// This file holds the errors of reading a response head and body. They
// are values: no state, no lock.

// ErrFraming reports a response whose framing is malformed or ambiguous
// (RFC 9112 §6.3). The transport exports it as pipelined.ErrFraming.
var ErrFraming = errors.New("pipelined: malformed response")

// A FramingError describes a response that violates RFC 9112 message
// framing. It matches [ErrFraming] with [errors.Is]. The transport exports
// it as pipelined.FramingError.
type FramingError struct {
	Reason string // what was wrong, e.g. "both Content-Length and Transfer-Encoding"
}

// Error says what was wrong, after ErrFraming's text.
func (e *FramingError) Error() string { return "pipelined: malformed response: " + e.Reason }

// Is reports whether target is [ErrFraming].
func (e *FramingError) Is(target error) bool { return target == ErrFraming }

func framingErrorf(format string, args ...any) error {
	return &FramingError{Reason: fmt.Sprintf(format, args...)}
}

// A HeaderTooLargeError is returned when a response head exceeds the
// limit given to ReadResponseHead (the transport's MaxResponseHeaderBytes).
type HeaderTooLargeError struct{ limit int64 }

// Error gives the limit, worded as net/http's error is.
func (e *HeaderTooLargeError) Error() string {
	return fmt.Sprintf("pipelined: server response headers exceeded %d bytes; aborted", e.limit)
}

// ErrResetHeaderLimit is returned by the interim hook of ReadResponseHead
// to have it reset its header budget: as net/http, once 1xx responses are
// delivered to a caller's hook, the caller bounds their number, and the
// limit applies to each head alone.
var ErrResetHeaderLimit = errors.New("pipelined: reset header limit")
