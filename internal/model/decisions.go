package model

import (
	"time"
)

// This file holds the decisions for the host as a whole: its pipeline
// depth (serial and large responses), whether it gains from pipelining,
// and why it is not pipelined (Reason), computed once here for the
// scheduler, Stats and the Observer. It owns no state of its own: it reads
// a Host, guarded by hostPool.mu.

// Pipelining large responses. Every response in flight on a connection is
// read ahead into a buffer of its own (up to the read-ahead size New is
// given: the transport's maxBufferedBody, 256 KiB), so a
// connection K deep holds K bodies at once: 2.5 MiB at 256 KiB and depth
// 10, and the host's connections together more than the processor's
// caches, through which the kernel copies each body and the caller then
// reads it. The depth then costs more than it saves: one request behind
// the head is enough to keep a connection busy when a body takes longer to
// send than a round trip. So responses on a connection are held to about
// two read-ahead buffers in flight (Host.pipelineBytes: margin of them,
// 512 KiB; at least 2 requests):
// depth 8 at 64 KiB, 2 from 256 KiB. Measured alone at 256 KiB (5
// connections, 50 callers): depth 1 read 5.5 GB/s, 2 6.2, 10 4.0; budgets
// of 256 KiB (slower at 64 and 128 KiB bodies) and 1 MiB (no better) were
// tried.

// bytesDepth is depth held to pipelineBytes of responses whose bodies
// average avg bytes (0: none seen yet), and never below 2 unless depth is.
func bytesDepth(depth int, avg float64, pipelineBytes int) int {
	if depth <= 2 || avg <= 0 {
		return depth
	}
	return max(2, min(depth, int(float64(pipelineBytes)/avg)))
}

// Depth is the host's effective pipeline depth at now, of the configured
// one: 1 while it is in fallback after pipeline failures, fewer behind a
// serial server's head (serialDepth), and fewer when its responses are
// large (bytesDepth).
func (m *Host) Depth(configured int) int {
	if configured > 1 && m.InFallback() {
		return 1
	}
	if m.fixed || configured <= 1 {
		return configured
	}
	d := configured
	if m.Serial() {
		d = serialDepth(d, m.rtt, m.order.serviceGap(), m.order.mixed)
	}
	return bytesDepth(d, m.body.v, m.pipelineBytes)
}

// Gains reports whether the host gains from pipelining as far as its
// responses show, so that the pipelining threshold holds back the dials of
// pipelineable requests: not while what waits behind its heads waits out
// late ones, nor while it runs requests one at a time with service times
// of serialDialGap or more (lossReason).
func (m *Host) Gains() bool {
	if m.fixed {
		return true
	}
	return m.lossReason(m.Serial()) == Pipelined
}

// A Reason says why a host is not pipelined: its pipelineable requests
// dial rather than wait behind heads, up to MaxConnsPerHost. It is
// computed here once, and read by the scheduler (Gains), Stats and the
// Observer (Decide, Stats), each in its own words (String).
type Reason uint8

const (
	Pipelined  Reason = iota // no reason: the host is pipelined
	Fallback                 // its pipelined connections failed (the depth fallback)
	LateHeads                // its heads are late often enough that a request gains more from a connection of its own
	SerialSlow               // it runs a connection's requests one at a time, serialDialGap or slower
)

// String is the reason as HostModel.Reason and HostEvent.Reason give it.
func (r Reason) String() string {
	switch r {
	case Fallback:
		return "fallback"
	case LateHeads:
		return "late heads"
	case SerialSlow:
		return "serial"
	}
	return ""
}

// lossReason returns why the host loses by pipelining as far as its
// responses show, given whether the serial verdict is in force: late
// heads, or a serial server whose service time is serialDialGap or more;
// Pipelined if neither, or if the model learns nothing.
func (m *Host) lossReason(serial bool) Reason {
	switch {
	case m.fixed:
	case m.heads.mixed:
		return LateHeads
	case serial && m.order.serviceGap() >= serialDialGap:
		return SerialSlow
	}
	return Pipelined
}

// reason returns why the host is not pipelined at the configured depth:
// the depth fallback (where the depth is above 1), else lossReason.
func (m *Host) reason(configured int, inFallback, serial bool) Reason {
	if configured > 1 && inFallback {
		return Fallback
	}
	return m.lossReason(serial)
}

// A Decision is what the model decides for its host as a whole, as the
// Observer reports it (HostEvent): why it is not pipelined, whether it is
// taken to be serial and whether it is proven to handle pipelining.
type Decision struct {
	Reason         Reason
	Serial, Proven bool
}

// Decide returns the host's decision at the configured depth.
func (m *Host) Decide(configured int) Decision {
	d := Decision{Serial: m.Serial(), Proven: m.fixed || m.proven}
	d.Reason = m.reason(configured, m.InFallback(), d.Serial)
	return d
}

// Stats is what the model shows of its host (the transport's HostModel).
type Stats struct {
	Learning                 bool
	Routes                   int // route classes held
	StreamRoutes, LateRoutes int
	RoundTrip                time.Duration
	ConnBudget               int
	UsualHeadWait, LateAfter time.Duration
	Serial, Proven           bool
	ServiceTime              time.Duration // while Serial
	FallbackUntil            time.Time     // while in fallback
	DuplicateBudget          float64       // while learning
	Reason                   Reason        // at the configured depth
}

// Stats returns what the model shows of its host, hol being the
// Transport's HeadOfLineTimeout and configured its pipeline depth.
func (m *Host) Stats(hol time.Duration, configured int) Stats {
	s := Stats{
		Learning:      !m.fixed,
		Routes:        len(m.classes),
		StreamRoutes:  m.streams,
		LateRoutes:    m.lates,
		RoundTrip:     m.rtt,
		ConnBudget:    m.ConnBudget(),
		UsualHeadWait: m.heads.usualWait(),
		LateAfter:     m.LateAfter(hol),
		Serial:        !m.fixed && m.Serial(),
		Proven:        m.fixed || m.proven,
	}
	if s.Serial {
		s.ServiceTime = m.order.serviceGap()
	}
	inFallback := m.InFallback()
	if inFallback {
		s.FallbackUntil = m.fallbackUntil
	}
	if !m.fixed {
		s.DuplicateBudget = m.dup
	}
	s.Reason = m.reason(configured, inFallback, s.Serial)
	return s
}

// NoteBody adds a response's body of n bytes: one of declared length at
// its head, a chunked one read whole at its end.
func (m *Host) NoteBody(n int64) {
	if !m.fixed {
		m.body.add(max(float64(n), 1))
	}
}
