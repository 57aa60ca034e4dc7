package model

import "time"

// This file holds the host's round trip (its shortest dial) and the waits
// derived from it: how long a chunked body may go silent before it is a
// stream, how long a dial in progress is worth waiting for, and how long
// a request that could dial waits for a first response. The round trip
// (Host.rtt) is a Host's, guarded by hostPool.mu.

// NoteRoundTrip records a successful dial that took d: the shortest is
// about a round trip.
func (m *Host) NoteRoundTrip(d time.Duration) {
	if m.rtt == 0 || d < m.rtt {
		m.rtt = d
	}
}

// StreamGap is how long nothing of a chunked body may arrive before it is
// taken for a stream: margin round trips of the host, at least QuickWait.
// The segments of a bulk transfer come microseconds apart over a loopback
// or a LAN, and about a round trip apart at worst over a far link (TCP's
// slow start).
func (m *Host) StreamGap() time.Duration {
	return max(margin*m.rtt, QuickWait)
}

// DialSoon is how long a dial in progress may have been under way and
// still be worth waiting for: margin times the host's dial time, at least
// QuickWait. One that hangs holds nobody back for longer.
func (m *Host) DialSoon() time.Duration {
	return max(margin*m.rtt, QuickWait)
}

// FirstResponseWait returns how long a request that could dial waits for
// a response (the host's first, or its burst's) from the start of that
// wait (the host's first connection, or the burst's start), given the
// host's dial time (0: none yet). The wait is the latency traded for
// connections, and no more than QuickWait. A response comes a round trip
// after its request's write at the soonest, and a dial takes about one
// (TCP's handshake; TLS adds more): when the host's dial takes QuickWait
// or longer, no response can come within the wait, and waiting would only
// add to the dial that follows. A burst of 20 GETs over a 50 ms round trip
// (20 ms responses, a Go server) took 1.6-2 times net/http's time when it
// waited up to twice the dial time (the wait's earlier rule): the response
// came after 70 ms, and the rest were then pipelined or dialed.
func FirstResponseWait(dial time.Duration) time.Duration {
	if dial >= QuickWait {
		return 0
	}
	return QuickWait
}

// BurstWait is how long a burst's requests that could dial wait for its
// first response: FirstResponseWait of the host's round trip.
func (m *Host) BurstWait() time.Duration { return FirstResponseWait(m.rtt) }
