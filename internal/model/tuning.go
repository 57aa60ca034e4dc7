package model

import (
	"time"
)

// This file holds the tuning values of the decisions, the thresholds
// derived from them, and the one decay rule (estimate). It owns no state.

// # Host-wide estimates
//
// Beside its classes, a host's model holds a few quantities, each a moving
// estimate under the one decay rule (estimate): its round trip (the
// shortest dial), how long its responses hold their connections' heads
// (headWaits), the order in which it responds to pipelined requests
// (serviceOrder: one at a time or at once), the size of its responses, and
// what went wrong with pipelining (the depth fallback). From them come
// every threshold of the decisions; the tuning values below are all of
// them (docs/model.md lists them with their reasons).

// The tuning values of the decisions. Every other threshold is derived
// from them and from the host's estimates.
const (
	// Memory is how many observations an estimate remembers: each new
	// one weighs 1/Memory (the first ones, their mean), and a rate is
	// trusted once it has this many. Long enough for a rate of rare
	// events (a late response in a hundred) to stay put, short enough that a
	// server that changes is relearned within a few hundred requests. At
	// 64, the late-heads verdict of a host with 1% of its responses 200 ms
	// late (1 ms usual) was off a quarter of the time, between late
	// responses, and requests were pipelined behind the next one (p99 200 ms
	// where it had been 43 ms); at 128, 4% of the time.
	Memory = 128

	// lateWaits: a head is late after this many of its host's usual
	// waits, and a pipelined response's gap is long after this many of the
	// shortest gaps a serial server leaves; a mixed serial host whose
	// service time spans this many round trips is not pipelined.
	lateWaits = 20

	// LateMin: no wait shorter than this is late, however quick the host
	// usually is: the scheduling noise of a busy machine (a garbage
	// collection, a preempted thread) reaches tens of milliseconds.
	LateMin = 50 * time.Millisecond

	// QuickWait is the longest a request waits unwritten for a response
	// that would let it be pipelined instead of dialing (a host's first
	// response, a burst's), and the least silence that makes a chunked
	// body a stream: short enough not to matter to a person, long enough
	// for a near server's response.
	QuickWait = 5 * time.Millisecond

	// margin is how much longer than expected is clearly longer: a
	// chunked body silent for margin round trips is a stream, a dial
	// should be up within margin dial times; margin² (clearly) separates
	// long from short (a first hop clearly longer than a quick wait is far
	// away; the late-heads verdict ends once the late average is clearly
	// below the usual wait).
	margin  = 2
	clearly = margin * margin

	// hedgeRate and hedgeBurst are the duplicate budget: every request
	// placed earns hedgeRate of a duplicate, up to hedgeBurst saved, and
	// every copy sent while its original may still run spends one.
	hedgeRate  = 0.02
	hedgeBurst = 10

	// fallbackAfter pipeline failures within VerdictFor put a proven
	// host at depth 1 (the first one does, before the host is proven).
	fallbackAfter = 3

	// VerdictFor is how long a verdict learned from rare evidence holds
	// before it is learned again: the depth fallback, the serial verdict,
	// a per-connection budget learned from unannounced closes.
	VerdictFor = time.Minute

	// serialGapMin is the shortest gap between two pipelined responses that
	// says their server ran them one after the other: no server running
	// requests at once leaves one.
	serialGapMin = 250 * time.Microsecond

	// serialOn and serialOff: the serial verdict is given once the
	// evidence for it reaches serialOn, and revoked below serialOff.
	serialOn  = 0.6
	serialOff = 0.35

	// mixedMinRate: the mixed rates decide only while at least this share
	// of the responses behind quick ones came late; below it, their ratio
	// is one of a few long gaps, and says nothing.
	mixedMinRate = 0.1
)

// Derived thresholds.
const (
	// scoreKnown is how many scored samples the serial score needs
	// before it decides: a quarter of Memory. The score is a run of
	// alike samples (every pipelined response of a serial server is one
	// service time late), not a rate of rare events; trusted only after
	// Memory of them, a serial server under a closed loop, whose writes
	// are seldom back to back, went a whole 8 s run of 1% slow responses
	// without its verdict, pipelined 4 deep with no early re-send
	// (0.92 times the requests per second of the engine that needed 5;
	// with HedgeHeadOfLine 0.70).
	scoreKnown = Memory / clearly
	// scoreOn and scoreOff: the score gives the serial verdict at three
	// samples in four, clearly serial, and revokes it below one in four.
	// A score is a share of samples, not a ratio of rates (serialOn): at
	// 0.6, a few responses spaced by a busy machine's scheduling would make
	// a server that runs requests at once serial.
	scoreOn  = 1 - 1.0/clearly
	scoreOff = 1.0 / clearly

	// longGap is a pipelined response's gap that is long (serviceOrder).
	longGap = lateWaits * serialGapMin
	// serialDialGap is the service time from which a serial host's
	// pipelineable requests dial rather than wait behind one another:
	// below it, pipelining still saves round trips and system calls.
	serialDialGap = clearly * serialGapMin
	// FarHop is how long a host's first dial's first hop may take before
	// the host counts as far away (response_wait.go, farDialLocked). Over loopback
	// a process's first connect took 2.3 ms (8 ms under the race
	// detector); a host across a continent is 30 ms or more away. A dial
	// found far wrongly costs what net/http pays: a dial per waiting
	// request.
	FarHop = clearly * QuickWait
)

// estimate is a moving average under the one decay rule: the mean of the
// first Memory observations, then each new one weighing 1/Memory.
type estimate struct {
	n int
	v float64
}

func (e *estimate) add(x float64) {
	if e.n < Memory {
		e.n++
	}
	e.v += (x - e.v) / float64(e.n)
}

func (e *estimate) addDuration(d time.Duration) { e.add(float64(d)) }
func (e *estimate) duration() time.Duration     { return time.Duration(e.v) }

// known reports whether e has seen Memory observations.
func (e *estimate) known() bool { return e.n >= Memory }

func fromBool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
