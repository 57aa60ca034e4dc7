package pipelined

import (
	"errors"
	"time"

	"github.com/pipelined/pipelined/internal/h1"
)

// This file holds how a connection honours the hints of a Keep-Alive
// response header (internal/h1 parses them): the limits it sets are the
// connection's sched fields, written under the pool's mu.
//
// Honouring the hints. A server that announces timeout=N closes a
// connection idle for N; a request written at that moment meets a closing
// connection (the keep-alive race: net/http's "server closed idle
// connection", Node's ECONNRESET), and a POST then fails with
// ErrServerClosed, since nobody can know whether it ran. So a connection
// whose server announced timeout=N is retired after N minus a margin of
// idleness, before the server closes it; and max=M caps what is assigned
// to the connection at the M requests the server still accepts.

// keepAliveMargin is how long before an announced timeout a connection is
// retired: undici's 2 s, but at most a quarter of the timeout, so that a
// server announcing timeout=1 (Node's keepAliveTimeout set small) still
// gets its connections reused for 750 ms. The margin covers the time from
// the server's write of its response to our reading it, plus the request's
// trip back: a few milliseconds on a LAN, rarely a second on the Internet.
func keepAliveMargin(timeout time.Duration) time.Duration {
	return min(keepAliveMarginMax, timeout/4)
}

// keepAliveMarginMax is keepAliveMargin's bound: undici's margin.
const keepAliveMarginMax = 2 * time.Second

var (
	errKeepAliveTimeout = errors.New("pipelined: idle connection retired before the server's announced Keep-Alive timeout")
	errKeepAliveMax     = errors.New("pipelined: connection retired at the server's announced Keep-Alive max")
)

// keepAliveLocked applies the hint of a response just read on c, the
// place-th on it (1: the first). p.mu must be held.
func (p *hostPool) keepAliveLocked(c *pconn, ka h1.KeepAlive, place int) {
	s := &c.s
	if ka.HasTimeout {
		s.kaIdle = ka.Timeout - keepAliveMargin(ka.Timeout)
		if s.kaIdle <= 0 {
			// timeout=0: the server closes at once when idle.
			s.kaIdle = time.Nanosecond
		}
	}
	if ka.HasMax {
		// Servers read max two ways. Apache counts down: the requests it
		// still accepts after this response (max=99, then 98, ...). Node
		// repeats its maxRequestsPerSocket: the total for the connection
		// (max=3 on every response). Until a second response tells them
		// apart, the smaller reading holds; a value that repeats is a
		// total, one that changes counts down. Requests already assigned
		// behind this response count either way.
		switch {
		case s.kaFirstMax == 0:
			s.kaFirstMax = ka.Max + 1 // +1: 0 means not seen
			s.kaLimit = min(place+ka.Max, max(ka.Max, 1))
		case ka.Max+1 == s.kaFirstMax:
			s.kaLimit = max(ka.Max, 1)
		default:
			s.kaLimit = place + ka.Max
		}
		if s.assigned >= s.kaLimit {
			p.retireLocked(c, CloseKeepAliveEnd)
		}
	}
}

// nearKeepAliveEnd reports whether c has used up half of its announced
// idle time: a request that cannot be retried (a POST) prefers another
// connection, or a new one.
func (s *sched) nearKeepAliveEnd() bool {
	return s.kaIdle > 0 && time.Since(s.idleSince) >= s.kaIdle/2
}

// pastKeepAliveEnd reports whether c has been idle for its whole
// announced idle time, margin included: it takes no new request even if
// its idle timer has not fired yet.
func (s *sched) pastKeepAliveEnd() bool {
	return s.kaIdle > 0 && time.Since(s.idleSince) >= s.kaIdle
}
