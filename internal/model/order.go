package model

import (
	"fmt"
	"time"
)

// This file holds the order of a host's pipelined responses
// (serviceOrder): the serial verdict, its evidence, and the depth a serial
// host gains from. A serviceOrder is a field of a Host, guarded with it by
// hostPool.mu.

// Servers that gain nothing from pipelining. A server that runs pipelined
// requests one at a time (Go's net/http, Python's http.server) responds to the
// second request of a pipeline one service time after the first; one that
// runs them concurrently (nginx in front of a pool, most proxies) has it
// ready when the first ends. Against the first kind, when service times
// are long enough to matter, pipelining serialises what separate
// connections would run in parallel: net/http, dialing one connection per
// request, is faster. Such a host is recognised from its responses. While the
// verdict holds (VerdictFor, renewed by new evidence) it is pipelined no
// deeper than it gains from (serialDepth), and, if its service time is at
// least serialDialGap, its pipelineable requests dial like any other (up
// to MaxConnsPerHost).
//
// Two kinds of evidence, both from pipelined responses:
//
//   - The score: only a request written right behind the one ahead tells
//     the two kinds of server apart: one that runs requests at once
//     responds to both together, one that runs them one at a time responds a
//     service time apart (serialGapMin or more). When callers write one
//     request per response (a closed loop), the writes are spaced as the
//     responses are, and both kinds of server respond alike: such samples
//     say nothing to the score.
//   - The mixed rates, where service times are mixed and the score says
//     nothing (a quick response comes right after the one ahead from
//     either kind of server). A serial server responds to a pipelined request
//     its own service time after the response ahead, however long that one
//     took; a concurrent one has run it meanwhile, and responds to it late
//     only if it took longer than the response ahead (the shadow: from its
//     write to the end of that response). So among requests behind a
//     response that ended clearly sooner than a long gap after their write,
//     and among those behind one that ended clearly later, the rate of
//     long gaps is about the same from a serial server, and far lower
//     behind the long shadows from a concurrent one. The score misses the
//     first kind when most responses are quick (a Go backend behind 60%
//     quick routes and 25% of 20-300 ms: a score of 0.3-0.5, never a
//     verdict) and so pipelined it 4 deep, each slow response holding 3
//     requests where net/http holds none (p99 1.1-1.2x net/http's, max
//     1.2-1.3x). Measured on a Go server and on Node (which runs them at
//     once), 5 loads each: ratios 0.62-1.74 against 0.21-0.45 from the
//     score's samples; from every response, in the mixed load, 0.66
//     (aiohttp) to 1.03 (nginx) against Node's 0.33-0.39 (docs/design.md
//     has a load that reads serial from a server that is not). While both
//     rates are known, they decide.

// serviceOrder is what the order of a host's pipelined responses says.
type serviceOrder struct {
	score      estimate  // of scored samples: 1 if a service time apart, 0 if together
	gap        estimate  // of the score's serial gaps, in ns
	mixGap     estimate  // of every pipelined response's gap of serialGapMin or more, in ns
	afterQuick estimate  // rate of long gaps behind responses that ended clearly soon
	afterSlow  estimate  // and behind responses that ended clearly late
	until      time.Time // the serial verdict's end; zero if none
	mixed      bool      // the verdict came from the mixed rates (serialDepth)
}

// order is what the mixed rates say of a host (mixedOrder).
type order int

const (
	orderUnknown    order = iota // not enough mixed samples: the score decides
	orderSerial                  // one request at a time
	orderConcurrent              // requests at once
	orderUnsure                  // between the two thresholds
)

// mixedOrder is the verdict of the long-gap rates after quick and after
// slow responses ahead.
func mixedOrder(afterQuick, afterSlow estimate) order {
	if !afterQuick.known() || !afterSlow.known() || afterQuick.v < mixedMinRate {
		return orderUnknown
	}
	switch r := afterSlow.v / afterQuick.v; {
	case r >= serialOn:
		return orderSerial
	case r < serialOff:
		return orderConcurrent
	}
	return orderUnsure
}

// orderVerdict is what a response does to the serial verdict.
type orderVerdict int

const (
	verdictKept    orderVerdict = iota // as it was, until it expires
	verdictGiven                       // given or renewed, for VerdictFor from now
	verdictRevoked                     // revoked
)

// note records the response of a pipelined request that arrived gap after
// the response ahead of it ended, and was written writeGap after the
// request ahead of it, shadow before that response ended, and returns what
// it does to the serial verdict (the caller sets until).
func (o *serviceOrder) note(gap, writeGap, shadow time.Duration) orderVerdict {
	long := gap >= longGap
	switch {
	case shadow < longGap/clearly:
		o.afterQuick.add(fromBool(long))
	case shadow >= clearly*longGap:
		o.afterSlow.add(fromBool(long))
	}
	if gap >= serialGapMin {
		o.mixGap.addDuration(gap)
	}
	scored := writeGap < serialGapMin/margin
	if scored {
		if gap >= serialGapMin {
			o.gap.addDuration(gap)
		}
		o.score.add(fromBool(gap >= serialGapMin))
	}
	switch mixedOrder(o.afterQuick, o.afterSlow) {
	case orderSerial:
		o.mixed = true
		return verdictGiven
	case orderConcurrent:
		o.mixed = false
		return verdictRevoked
	case orderUnsure:
		return verdictKept // neither: the verdict holds until it expires
	default:
		o.mixed = false
		// A verdict once the score is known, renewed while the evidence
		// lasts; revoked once most samples show the server running
		// requests at once (the verdict was wrong, or the server
		// changed). A single sample may mislead either way: responses read
		// late come together.
		switch {
		case !scored || o.score.n < scoreKnown:
		case o.score.v >= scoreOn:
			return verdictGiven
		case o.score.v < scoreOff:
			return verdictRevoked
		}
		return verdictKept
	}
}

// serviceGap is the host's service time as its responses show it, for a
// host judged serial: under a verdict from the mixed rates, the estimate
// of every pipelined response's gap, else of the gaps the score took.
func (o *serviceOrder) serviceGap() time.Duration {
	if o.mixed {
		return o.mixGap.duration()
	}
	return o.gap.duration()
}

// serialDepth is the depth for a host that runs a connection's requests
// one at a time, whose service time is about gap and whose dial took dial
// (one round trip, or a few with TLS). Such a server gains from
// pipelining only that the next request is already there when it ends
// one: a request written as a response arrives must reach it within its
// service time of the request in progress. One request behind the head
// does that when a round trip is shorter than a service time; more
// requests behind add nothing but head-of-line waits (each slow response
// delays every request behind it). So the depth is one plus the service
// times a round trip spans, at least 2 and at most the configured depth.
//
// Where service times are mixed (the verdict came from mixedOrder), even
// the one request behind costs more than it gains once a round trip is a
// small part of the service time (lateWaits round trips): it saves the
// server a round trip's idle time, a few per cent, and waits out whatever
// the head takes, where a request left in the queue takes the first
// connection to come free (net/http's tail). Such a host is not pipelined
// (depth 1). Where service times are alike (a 1 ms server, slow once in a
// hundred), the request behind loses nothing to its head on most responses,
// and is kept: depth 1 there measured 0.71-0.73x net/http's rate against
// 0.98-1.22x.
func serialDepth(depth int, dial, gap time.Duration, mixed bool) int {
	if gap <= 0 {
		return depth
	}
	if mixed && dial > 0 && gap >= lateWaits*dial {
		return 1
	}
	d := 1 + int((dial+gap-1)/gap)
	return min(max(d, 2), depth)
}

// NoteOrder records a pipelined response (serviceOrder.note).
func (m *Host) NoteOrder(gap, writeGap, shadow time.Duration) {
	if m.fixed {
		return
	}
	switch m.order.note(gap, writeGap, shadow) {
	case verdictGiven:
		m.order.until = m.Now().Add(VerdictFor)
	case verdictRevoked:
		m.order.until = time.Time{}
	}
}

// Serial reports whether the verdict "one request at a time" is in force.
func (m *Host) Serial() bool {
	return !m.order.until.IsZero() && m.Now().Before(m.order.until)
}

// SerialFromMixed reports whether the serial verdict came from the mixed
// rates (serialDepth: a host not pipelined where its service times are
// mixed and long); whether it is in force, Serial says.
func (m *Host) SerialFromMixed() bool { return m.order.mixed }

// OrderEvidence describes the evidence of the serial verdict, for
// messages: the score and the two mixed rates.
func (m *Host) OrderEvidence() string {
	o := &m.order
	return fmt.Sprintf("score %.2f, after quick %+v, after slow %+v", o.score.v, o.afterQuick, o.afterSlow)
}
