package pipelined

import "testing"

func TestResendCauseString(t *testing.T) {
	for _, tc := range []struct {
		c    ResendCause
		want string
	}{
		{ResendNone, "none"},
		{ResendNotWritten, "not_written"},
		{ResendConnFailed, "conn_failed"},
		{ResendHeadOfLine, "head_of_line"},
		{ResendHedge, "hedge"},
		{ResendCause(99), "unknown"},
	} {
		if got := tc.c.String(); got != tc.want {
			t.Errorf("ResendCause(%d).String() = %q, want %q", int(tc.c), got, tc.want)
		}
	}
}

func TestCloseReasonString(t *testing.T) {
	for _, tc := range []struct {
		r    CloseReason
		want string
	}{
		{CloseIdleTimeout, "idle_timeout"},
		{CloseServer, "server_close"},
		{CloseKeepAliveEnd, "keep_alive_end"},
		{CloseBudget, "budget"},
		{CloseError, "error"},
		{CloseRequest, "request"},
		{CloseCanceled, "canceled"},
		{CloseUpgraded, "upgraded"},
		{CloseTransportClosed, "transport_closed"},
		{CloseIdleConnections, "close_idle_connections"},
		{CloseIdleLimit, "idle_limit"},
		{CloseReason(0), "unknown"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("CloseReason(%d).String() = %q, want %q", int(tc.r), got, tc.want)
		}
	}
}
