package model

import (
	"time"
)

// This file holds the duplicate budget (copies of requests sent while
// their original may still run), the early head-of-line wait of a serial
// host and the probe's wait and copy. Its state (Host.dup, probeCopied) is
// a Host's, guarded by hostPool.mu.

// The duplicate budget. Every copy of a request sent while its original
// may still run is a duplicate for the server: safe requests re-sent from
// behind a serial host's late head before HeadOfLineTimeout (EarlyAfter), copies
// of late heads (TransportOptions.HedgeHeadOfLine) and of a stalled probe.
// They are held to one budget, as retry budgets are in Envoy and gRPC:
// each request placed earns hedgeRate of one, up to hedgeBurst, and each
// duplicate spends one; without budget, a head waits HeadOfLineTimeout.
// So the duplicates the transport chooses to send cost a host's server at
// most about 2% more requests, however they came about. Requests moved
// from behind a head at HeadOfLineTimeout are not a choice (a client must
// be ready to send pipelined requests again, RFC 9112 §9.3.2) and spend
// nothing: charged, a late head with several requests behind it left
// nothing for the copies.

// Earn adds what one request placed earns to the duplicate budget.
func (m *Host) Earn() { m.dup = min(m.dup+hedgeRate, hedgeBurst) }

// MayDuplicate reports whether the budget holds one duplicate.
func (m *Host) MayDuplicate() bool { return m.dup >= 1 }

// Spend takes n duplicates from the budget.
func (m *Host) Spend(n int) { m.dup -= float64(n) }

// EarlyAfter returns the head-of-line threshold of a request placed now
// (attempt.holAfter): for a host that runs a connection's requests one at
// a time, lateWaits of its service times (at least margin quick waits)
// while the budget allows a duplicate, so that the safe requests behind a
// late head, which such a server has not begun, are re-sent elsewhere
// then; or 0 for HeadOfLineTimeout (hol), when no budget is left, the host
// is not judged serial, or the early threshold is not sooner. It charges
// nothing: the connection does, if it re-sends. Behind a server that runs
// requests at once, what waits behind a late head has mostly been responded
// to already: re-sent at the late wait, it cost the server 2% more requests
// and the slowest requests a second late head (p99.9 1.6 times as long, 1%
// of responses after 200 ms), for 4-19% more requests per second.
func (m *Host) EarlyAfter(hol time.Duration) time.Duration {
	if m.fixed || hol <= 0 || !m.MayDuplicate() || !m.Serial() {
		return 0
	}
	gap := m.order.serviceGap()
	if gap <= 0 {
		return 0
	}
	if d := max(lateWaits*gap, margin*QuickWait); d < hol {
		return d
	}
	return 0
}

// The probe's wait. A server that leaves what came with the request it
// responds to unread (gunicorn's gthread worker) stalls the probe
// (scheduler.go, probeLocked) until it closes the idle connection: 2 s for
// gthread, with the connection taking nothing meanwhile. So a probe that is
// the head of its connection with nothing behind it, and has had no response
// when a head is late (lateAfter), is copied once on another connection,
// as a late head is (holprotect.go, lateHead): it is safe, as every
// pipelined request is.

// ProbeWait returns how long a probe placed now may wait at the head of
// its connection (attempt.probeAfter): as long as a head may before it is
// late, while the host is not proven; 0 (no probe) once it is, or if the
// model learns nothing. Whether a request is the probe is known only when
// it is written.
func (m *Host) ProbeWait(hol time.Duration) time.Duration {
	if m.proven || m.fixed {
		return 0
	}
	return m.LateAfter(hol)
}

// CopyProbe reports whether a stalled probe of a request whose class's
// verdict is v may be copied on another connection, and if so records the
// copy and spends one duplicate: only a probe whose class responded
// bounded and quickly before (one of a class not seen yet, or slow for its
// own reasons, would reach the server twice for nothing), once per time
// the host is not proven, whatever came of it. It is not held back by the
// budget: the probe tells a server that drops pipelined requests.
func (m *Host) CopyProbe(v Verdict) bool {
	ok := !m.probeCopied && !m.proven && v == Known
	m.probeCopied = m.probeCopied || ok
	if ok {
		m.Spend(1)
	}
	return ok
}
