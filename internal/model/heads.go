package model

import (
	"time"
)

// This file holds the host's head waits (headWaits): how long its
// responses hold their connections' heads, and the late-heads verdict.
// A headWaits is a field of a Host, guarded with it by hostPool.mu.

// Late heads. A request written behind another waits, whatever its own
// service time, until the response ahead of it is read; against a server
// whose responses mostly come at once and now and then late (one in a
// hundred after 200 ms, the rest after 1 ms), every request behind a late
// head waits out the late response, where net/http, which writes each
// request on a connection of its own, waits only for its own. So a host
// keeps an estimate of how long its responses hold their connection's head
// (the usual wait, late ones left out), and another, over every response,
// of the time spent in late ones: what a request written behind a head
// can expect to wait for it beyond the usual. While that is as long as
// the usual wait itself, pipelining costs the requests behind more than it
// saves them, and the pipelining threshold no longer holds back the dials
// of pipelineable requests (Host.Gains): up to MaxConnsPerHost (no
// limit by default, as net/http), a request takes a connection of its own
// rather than a place behind a head. A limit that is reached still
// pipelines, as before.
//
// Measured: a migrated service (OptionsFrom(http.DefaultTransport))
// against a server that runs pipelined requests at once, 1% of its
// responses after 200 ms, ran at 0.23x net/http's requests per second at
// 50 callers before this rule and 1.20x after (benchmarks suite "slow").

// headWaits is a host's record of how long its responses hold their
// connections' heads.
type headWaits struct {
	usual estimate // of the waits that were not late, in ns
	late  estimate // over all responses, of their late waits (0 if not late), in ns
	mixed bool     // late >= usual: requests written behind a head lose by it
}

// usualWait is the usual head wait; 0 until one.
func (h *headWaits) usualWait() time.Duration { return max(h.usual.duration(), 0) }

// lateAfter is how long a head may wait before it is late.
func (h *headWaits) lateAfter() time.Duration {
	return max(lateWaits*h.usualWait(), LateMin)
}

// note adds a response that came wait after its request became the head
// of its connection. The verdict turns on once the late average, known
// (Memory responses: a late response among a host's first few says nothing of
// how often they come), reaches the usual wait, and off once it falls
// clearly below it (a quarter).
func (h *headWaits) note(wait time.Duration) {
	wait = max(wait, 1)
	lateWait := 0.0
	if h.usual.n > 0 && wait >= h.lateAfter() {
		lateWait = float64(wait)
	} else {
		h.usual.addDuration(wait) // the first response is the usual one, late or not: nothing is known before it
	}
	h.late.add(lateWait)
	switch {
	case h.late.known() && h.late.v >= h.usual.v:
		h.mixed = true
	case h.late.v < h.usual.v/clearly:
		h.mixed = false
	}
}
