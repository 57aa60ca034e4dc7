package pipelined

import (
	"errors"
	"io"
	"testing"
)

// TestConnErrorMessage: a ConnError names the server's close only when the
// server closed or failed the connection; the transport's own verdicts
// read as themselves, and all keep their matches.
func TestConnErrorMessage(t *testing.T) {
	tests := []struct {
		err        *ConnError
		want       string
		wantClosed bool // errors.Is(err, ErrServerClosed)
	}{
		{&ConnError{Err: io.EOF, Written: true}, "pipelined: server closed connection before answering: EOF", true},
		{&ConnError{Err: io.EOF}, "pipelined: connection failed: EOF", false},
		{&ConnError{Err: errResponseHeaderTimeout, Written: true}, "pipelined: timeout awaiting response headers", true},
		{&ConnError{Err: framingErrorf("bad status line"), Written: true}, "pipelined: malformed response: bad status line", true},
		{&ConnError{Err: ErrTransportClosed, Written: true}, "pipelined: transport closed", true},
		{&ConnError{Err: ErrTransportClosed}, "pipelined: transport closed", false},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("ConnError{%v, Written: %v}.Error() = %q, want %q", tt.err.Err, tt.err.Written, got, tt.want)
		}
		if got := errors.Is(tt.err, ErrServerClosed); got != tt.wantClosed {
			t.Errorf("errors.Is(ConnError{%v, Written: %v}, ErrServerClosed) = %v, want %v", tt.err.Err, tt.err.Written, got, tt.wantClosed)
		}
		if !errors.Is(tt.err, tt.err.Err) {
			t.Errorf("errors.Is(ConnError{%v}, its cause) = false, want true", tt.err.Err)
		}
	}
}
