package pipelined

import (
	"net/http"
	"strings"
	"time"
)

// This file is what a host's answers teach the transport about the
// requests to come: the host model. It is pure: observations come in with
// their times, answers go out; it takes no lock, starts no goroutine and
// does no I/O. Its owner, the host's pool, guards it with hostPool.mu.
//
// The question it answers is the one that decides what pipelining costs:
// may a request be written behind this one? A request written behind
// another waits for the whole answer ahead of it, however short its own. So
// nothing is written behind a request whose answer nobody has seen yet: its
// route class (below) has not answered on this host, or its last answer
// was a stream (server-sent events, a watch, a log follow, a download too
// large to read ahead) or held its connection's head late (a long poll).
// A request of a class known to stream or to be late is also written
// behind nothing (it takes a connection of its own, as with net/http), and
// no copy of it is ever sent: it is slow for its own reasons. A class whose
// last answer was bounded and quick may be followed. The first request of
// a new class stalls nobody: what cannot be written behind it dials, up to
// MaxConnsPerHost, or takes another connection.
//
// Whether a class streams, its last answer decides: a watch path that once
// answered a quick list is followed again; a list route that streamed once
// is not, until it answers bounded again. Whether it is late, an estimate
// of its head waits decides (the one decay rule, estimate), its first
// answer setting it: a long poll is late from its first answer on, and a
// quick route that was slow once on a busy machine is not (on one answer
// alone, 200 hosts at 1 ms under load flipped routes to late and back
// several times a second, each flip a dial).

// A routeClass names the requests whose answers are expected to look
// alike: the same method, target host, path shape (a segment that holds a
// digit is an identifier, so that /items/8f3a… and /items/77c2… are one
// class), names of query parameters
// (in any order: ?watch=1 and ?limit=500 are two classes of one path), and
// Accept field. It is a 64-bit FNV-1a hash; a collision merges two classes,
// which costs at most a wrong guess that the next answer corrects.
type routeClass uint64

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnvByte(h uint64, b byte) uint64 {
	h ^= uint64(b)
	return h * fnvPrime
}

// classOf returns req's route class. It allocates nothing.
func classOf(req *http.Request, method string) routeClass {
	h := uint64(fnvOffset)
	h = fnvString(h, method)
	h = fnvByte(h, 0)
	u := req.URL
	h = fnvString(h, u.Host) // a forward proxy's pool serves every host
	h = fnvByte(h, 0)
	path := u.Path
	for path != "" {
		var seg string
		seg, path, _ = strings.Cut(path, "/")
		if isIDSegment(seg) {
			h = fnvByte(h, '*')
		} else {
			h = fnvString(h, seg)
		}
		h = fnvByte(h, '/')
	}
	h = fnvByte(h, 0)
	var names uint64 // a sum: the order of the parameters does not matter
	q := u.RawQuery
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		name, _, _ := strings.Cut(kv, "=")
		if name != "" {
			names += fnvString(fnvOffset, name)
		}
	}
	h ^= names
	h *= fnvPrime
	for _, v := range req.Header["Accept"] {
		h = fnvString(h, v)
		h = fnvByte(h, ',')
	}
	return routeClass(h)
}

// isIDSegment reports whether a path segment is an identifier rather than
// the name of a collection or an action: it holds a digit. Random ids
// almost always do (a 22-character base64 one lacks a digit once in 40, a
// UUID never); one that does not is a class of its own, which costs its
// requests nothing but a connection of their own, as with net/http.
func isIDSegment(seg string) bool {
	for i := 0; i < len(seg); i++ {
		if '0' <= seg[i] && seg[i] <= '9' {
			return true
		}
	}
	return false
}

// maxClasses bounds a host's model (a tuning value): a crawler's or a
// proxy's pool sees unbounded paths, and a class not seen lately is the
// first to go.
const maxClasses = 64

// followVerdict says whether requests may be written behind a request,
// and why not.
type followVerdict uint8

const (
	followKnown   followVerdict = iota // its class's last answer was bounded and quick
	followFixed                        // the model is off (TransportOptions.FixedPolicy)
	followUnseen                       // its class has not answered on this host yet
	followStreams                      // its class's last answer was a stream
	followLate                         // its class's answers hold their heads late
)

// ok reports whether requests may be written behind.
func (v followVerdict) ok() bool { return v <= followFixed }

// alone reports whether the request itself is written behind nothing: its
// class is known to be slow for its own reasons, so nothing should wait
// for it, and it should wait for nothing it could be moved away from
// (which would send it twice).
func (v followVerdict) alone() bool { return v == followStreams || v == followLate }

func (v followVerdict) String() string {
	switch v {
	case followKnown:
		return "bounded"
	case followFixed:
		return "fixed"
	case followUnseen:
		return "unseen"
	case followStreams:
		return "stream"
	case followLate:
		return "late"
	}
	return "?"
}

// answerKind is what an answer showed of its class.
type answerKind uint8

const (
	answerBounded answerKind = iota // read whole, its head in time
	answerStream                    // a stream: events, a watch, a download too large to read ahead
)

// classStats is what a host's answers to one route class showed.
type classStats struct {
	seen monoTime   // when its last answer was noted
	last answerKind // its last answer's kind
	wait estimate   // of its bounded answers' head waits, in ns
	late bool       // wait is late for the host (lateAfter)
}

// hostModel is one host's model: its route classes, and the host-wide
// estimates (below) every other decision reads.
type hostModel struct {
	// clock is the model's clock (time.Now if nil; tests inject a fake
	// one). It is read only where a verdict with an end is in force or
	// is given, so that a host with none costs no clock read.
	clock func() time.Time

	fixed   bool // learns nothing: every class may be followed
	classes map[routeClass]*classStats
	streams int // classes whose last answer was a stream
	lates   int // classes whose last answer was late

	rtt   time.Duration // the shortest successful dial: about a round trip
	heads headWaits
	order serviceOrder
	body  estimate // of the answers' body sizes, in bytes
	dup   float64  // the duplicate budget

	// proven: since the model began or its last fallback, a request
	// written together with the one ahead was answered unprompted
	// (attempt.proves); until then one request at a time is pipelined,
	// behind a head (scheduler.go, probeLocked). probeCopied: a copy of a
	// stalled probe was sent since (holprotect.go, lateHead): one per such
	// time, whatever came of it.
	proven, probeCopied bool
	failures            []time.Time // of the last pipeline failures
	fallbackUntil       time.Time   // the depth fallback's end

	budget connBudget // requests its server answers per connection
}

func newHostModel(fixed bool) hostModel {
	return hostModel{fixed: fixed}
}

// now reads the model's clock.
func (m *hostModel) now() time.Time {
	if m.clock != nil {
		return m.clock()
	}
	return time.Now()
}

// follow returns whether requests may be written behind one of class c.
func (m *hostModel) follow(c routeClass) followVerdict {
	if m.fixed {
		return followFixed
	}
	s := m.classes[c]
	switch {
	case s == nil:
		return followUnseen
	case s.last == answerStream:
		return followStreams
	case s.late:
		return followLate
	}
	return followKnown
}

// lateAfter is how long a head may wait before it is late: 20 of the
// host's usual waits, at least 50 ms (headWaits), and never longer than
// HeadOfLineTimeout (hol; 0 or less: disabled), after which requests
// behind it are moved anyway.
// Before the host's first head wait is known, only hol counts.
func (m *hostModel) lateAfter(hol time.Duration) time.Duration {
	late := m.heads.lateAfter()
	switch {
	case hol <= 0:
	case m.heads.usual.n == 0:
		late = hol
	default:
		late = min(late, hol)
	}
	return late
}

// noteAnswer records an answer of class c at now: its kind, and, if its
// request was at the head of its connection, how long it held the head
// (headWait; 0 if unknown). hol is the Transport's HeadOfLineTimeout. It
// reports whether the class's verdict changed. (Every answer's head wait
// is noted in heads as well, by noteHeadWait, once per answer.)
func (m *hostModel) noteAnswer(c routeClass, now monoTime, kind answerKind, headWait, hol time.Duration) (changed bool) {
	if m.fixed {
		return false
	}
	before := m.follow(c)
	s := m.classes[c]
	if s == nil {
		if m.classes == nil {
			m.classes = make(map[routeClass]*classStats)
		}
		if len(m.classes) >= maxClasses {
			m.evict()
		}
		s = &classStats{}
		m.classes[c] = s
	} else {
		m.count(s, -1)
		if s.last == answerStream && kind == answerBounded {
			// A stream's class answered whole (a watch that ended soon
			// after its start, a 410 Gone): unseen again, so that the
			// next request, likely a stream again, has nothing written
			// behind it until an answer shows what it is. Taken as
			// bounded at once, the next restart of a Kubernetes watch
			// had GETs behind it until HeadOfLineTimeout.
			delete(m.classes, c)
			return m.follow(c) != before
		}
	}
	s.seen = now
	s.last = kind
	// A stream's head says nothing of its length: only a bounded answer's
	// wait counts.
	if kind == answerBounded && headWait > 0 {
		s.wait.addDuration(headWait)
	}
	s.late = s.wait.n > 0 && s.wait.duration() >= m.lateAfter(hol)
	m.count(s, 1)
	return m.follow(c) != before
}

// noteHeadWait records how long an answer held its connection's head.
func (m *hostModel) noteHeadWait(wait time.Duration) {
	if !m.fixed {
		m.heads.note(wait)
	}
}

// count adds d to the tallies of s's verdict.
func (m *hostModel) count(s *classStats, d int) {
	switch {
	case s.last == answerStream:
		m.streams += d
	case s.late:
		m.lates += d
	}
}

// evict forgets the class seen least recently.
func (m *hostModel) evict() {
	var oldest routeClass
	var os *classStats
	for c, s := range m.classes {
		if os == nil || s.seen < os.seen {
			oldest, os = c, s
		}
	}
	if os != nil {
		m.count(os, -1)
		delete(m.classes, oldest)
	}
}

// # Host-wide estimates
//
// Beside its classes, a host's model holds a few quantities, each a moving
// estimate under the one decay rule (estimate): its round trip (the
// shortest dial), how long its answers hold their connections' heads
// (headWaits), the order in which it answers pipelined requests
// (serviceOrder: one at a time or at once), the size of its answers, and
// what went wrong with pipelining (the depth fallback). From them come
// every threshold of the decisions; the tuning values below are all of
// them (docs/model.md lists them with their reasons).

// The tuning values of the decisions. Every other threshold is derived
// from them and from the host's estimates.
const (
	// memory is how many observations an estimate remembers: each new
	// one weighs 1/memory (the first ones, their mean), and a rate is
	// trusted once it has this many. Long enough for a rate of rare
	// events (a late answer in a hundred) to stay put, short enough that a
	// server that changes is relearned within a few hundred requests. At
	// 64, the late-heads verdict of a host with 1% of its answers 200 ms
	// late (1 ms usual) was off a quarter of the time, between late
	// answers, and requests were pipelined behind the next one (p99 200 ms
	// where it had been 43 ms); at 128, 4% of the time.
	memory = 128

	// lateWaits: a head is late after this many of its host's usual
	// waits, and a pipelined answer's gap is long after this many of the
	// shortest gaps a serial server leaves; a mixed serial host whose
	// service time spans this many round trips is not pipelined.
	lateWaits = 20

	// lateMin: no wait shorter than this is late, however quick the host
	// usually is: the scheduling noise of a busy machine (a garbage
	// collection, a preempted thread) reaches tens of milliseconds.
	lateMin = 50 * time.Millisecond

	// quickWait is the longest a request waits unwritten for an answer
	// that would let it be pipelined instead of dialing (a host's first
	// answer, a burst's), and the least silence that makes a chunked
	// body a stream: short enough not to matter to a person, long enough
	// for a near server's answer.
	quickWait = 5 * time.Millisecond

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

	// fallbackAfter pipeline failures within verdictFor put a proven
	// host at depth 1 (the first one does, before the host is proven).
	fallbackAfter = 3

	// verdictFor is how long a verdict learned from rare evidence holds
	// before it is learned again: the depth fallback, the serial verdict,
	// a per-connection budget learned from unannounced closes.
	verdictFor = time.Minute

	// serialGapMin is the shortest gap between two pipelined answers that
	// says their server ran them one after the other: no server running
	// requests at once leaves one.
	serialGapMin = 250 * time.Microsecond

	// serialOn and serialOff: the serial verdict is given once the
	// evidence for it reaches serialOn, and revoked below serialOff.
	serialOn  = 0.6
	serialOff = 0.35

	// mixedMinRate: the mixed rates decide only while at least this share
	// of the answers behind quick ones came late; below it, their ratio
	// is one of a few long gaps, and says nothing.
	mixedMinRate = 0.1
)

// Derived thresholds.
const (
	// scoreKnown is how many scored samples the serial score needs
	// before it decides: a quarter of memory. The score is a run of
	// alike samples (every pipelined answer of a serial server is one
	// service time late), not a rate of rare events; trusted only after
	// memory of them, a serial server under a closed loop, whose writes
	// are seldom back to back, went a whole 8 s run of 1% slow answers
	// without its verdict, pipelined 4 deep with no early re-send
	// (0.92 times the requests per second of the engine that needed 5;
	// with HedgeHeadOfLine 0.70).
	scoreKnown = memory / clearly
	// scoreOn and scoreOff: the score gives the serial verdict at three
	// samples in four, clearly serial, and revokes it below one in four.
	// A score is a share of samples, not a ratio of rates (serialOn): at
	// 0.6, a few answers spaced by a busy machine's scheduling would make
	// a server that runs requests at once serial.
	scoreOn  = 1 - 1.0/clearly
	scoreOff = 1.0 / clearly

	// longGap is a pipelined answer's gap that is long (serviceOrder).
	longGap = lateWaits * serialGapMin
	// serialDialGap is the service time from which a serial host's
	// pipelineable requests dial rather than wait behind one another:
	// below it, pipelining still saves round trips and system calls.
	serialDialGap = clearly * serialGapMin
	// farHop is how long a host's first dial's first hop may take before
	// the host counts as far away (scheduler.go, farDialLocked). Over loopback
	// a process's first connect took 2.3 ms (8 ms under the race
	// detector); a host across a continent is 30 ms or more away. A dial
	// found far wrongly costs what net/http pays: a dial per waiting
	// request.
	farHop = clearly * quickWait
)

// estimate is a moving average under the one decay rule: the mean of the
// first memory observations, then each new one weighing 1/memory.
type estimate struct {
	n int
	v float64
}

func (e *estimate) add(x float64) {
	if e.n < memory {
		e.n++
	}
	e.v += (x - e.v) / float64(e.n)
}

func (e *estimate) addDuration(d time.Duration) { e.add(float64(d)) }
func (e *estimate) duration() time.Duration     { return time.Duration(e.v) }

// known reports whether e has seen memory observations.
func (e *estimate) known() bool { return e.n >= memory }

func fromBool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Late heads. A request written behind another waits, whatever its own
// service time, until the answer ahead of it is read; against a server
// whose answers mostly come at once and now and then late (one in a
// hundred after 200 ms, the rest after 1 ms), every request behind a late
// head waits out the late answer, where net/http, which writes each
// request on a connection of its own, waits only for its own. So a host
// keeps an estimate of how long its answers hold their connection's head
// (the usual wait, late ones left out), and another, over every answer,
// of the time spent in late ones: what a request written behind a head
// can expect to wait for it beyond the usual. While that is as long as
// the usual wait itself, pipelining costs the requests behind more than it
// saves them, and the pipelining threshold no longer holds back the dials
// of pipelineable requests (hostModel.gains): up to MaxConnsPerHost (no
// limit by default, as net/http), a request takes a connection of its own
// rather than a place behind a head. A limit that is reached still
// pipelines, as before.
//
// Measured: a migrated service (OptionsFrom(http.DefaultTransport))
// against a server that runs pipelined requests at once, 1% of its
// answers after 200 ms, ran at 0.23x net/http's requests per second at
// 50 callers before this rule and 1.20x after (benchmarks suite "slow").

// headWaits is a host's record of how long its answers hold their
// connections' heads.
type headWaits struct {
	usual estimate // of the waits that were not late, in ns
	late  estimate // over all answers, of their late waits (0 if not late), in ns
	mixed bool     // late >= usual: requests written behind a head lose by it
}

// usualWait is the usual head wait; 0 until one.
func (h *headWaits) usualWait() time.Duration { return max(h.usual.duration(), 0) }

// lateAfter is how long a head may wait before it is late.
func (h *headWaits) lateAfter() time.Duration {
	return max(lateWaits*h.usualWait(), lateMin)
}

// note adds an answer that came wait after its request became the head
// of its connection. The verdict turns on once the late average, known
// (memory answers: a late answer among a host's first few says nothing of
// how often they come), reaches the usual wait, and off once it falls
// clearly below it (a quarter).
func (h *headWaits) note(wait time.Duration) {
	wait = max(wait, 1)
	lateWait := 0.0
	if h.usual.n > 0 && wait >= h.lateAfter() {
		lateWait = float64(wait)
	} else {
		h.usual.addDuration(wait) // the first answer is the usual one, late or not: nothing is known before it
	}
	h.late.add(lateWait)
	switch {
	case h.late.known() && h.late.v >= h.usual.v:
		h.mixed = true
	case h.late.v < h.usual.v/clearly:
		h.mixed = false
	}
}

// Servers that gain nothing from pipelining. A server that runs pipelined
// requests one at a time (Go's net/http, Python's http.server) answers the
// second request of a pipeline one service time after the first; one that
// runs them concurrently (nginx in front of a pool, most proxies) has it
// ready when the first ends. Against the first kind, when service times
// are long enough to matter, pipelining serialises what separate
// connections would run in parallel: net/http, dialing one connection per
// request, is faster. Such a host is recognised from its answers. While the
// verdict holds (verdictFor, renewed by new evidence) it is pipelined no
// deeper than it gains from (serialDepth), and, if its service time is at
// least serialDialGap, its pipelineable requests dial like any other (up
// to MaxConnsPerHost).
//
// Two kinds of evidence, both from pipelined answers:
//
//   - The score: only a request written right behind the one ahead tells
//     the two kinds of server apart: one that runs requests at once
//     answers both together, one that runs them one at a time answers a
//     service time apart (serialGapMin or more). When callers write one
//     request per answer (a closed loop), the writes are spaced as the
//     answers are, and both kinds of server answer alike: such samples
//     say nothing to the score.
//   - The mixed rates, where service times are mixed and the score says
//     nothing (a quick answer comes right after the one ahead from
//     either kind of server). A serial server answers a pipelined request
//     its own service time after the answer ahead, however long that one
//     took; a concurrent one has run it meanwhile, and answers it late
//     only if it took longer than the answer ahead (the shadow: from its
//     write to the end of that answer). So among requests behind an
//     answer that ended clearly sooner than a long gap after their write,
//     and among those behind one that ended clearly later, the rate of
//     long gaps is about the same from a serial server, and far lower
//     behind the long shadows from a concurrent one. The score misses the
//     first kind when most answers are quick (a Go backend behind 60%
//     quick routes and 25% of 20-300 ms: a score of 0.3-0.5, never a
//     verdict) and so pipelined it 4 deep, each slow answer holding 3
//     requests where net/http holds none (p99 1.1-1.2x net/http's, max
//     1.2-1.3x). Measured on a Go server and on Node (which runs them at
//     once), 5 loads each: ratios 0.62-1.74 against 0.21-0.45 from the
//     score's samples; from every answer, in the mixed load, 0.66
//     (aiohttp) to 1.03 (nginx) against Node's 0.33-0.39 (docs/design.md
//     has a load that reads serial from a server that is not). While both
//     rates are known, they decide.

// serviceOrder is what the order of a host's pipelined answers says.
type serviceOrder struct {
	score      estimate  // of scored samples: 1 if a service time apart, 0 if together
	gap        estimate  // of the score's serial gaps, in ns
	mixGap     estimate  // of every pipelined answer's gap of serialGapMin or more, in ns
	afterQuick estimate  // rate of long gaps behind answers that ended clearly soon
	afterSlow  estimate  // and behind answers that ended clearly late
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
// slow answers ahead.
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

// orderVerdict is what an answer does to the serial verdict.
type orderVerdict int

const (
	verdictKept    orderVerdict = iota // as it was, until it expires
	verdictGiven                       // given or renewed, for verdictFor from now
	verdictRevoked                     // revoked
)

// note records the answer of a pipelined request that arrived gap after
// the answer ahead of it ended, and was written writeGap after the
// request ahead of it, shadow before that answer ended, and returns what
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
		// changed). A single sample may mislead either way: answers read
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

// serviceGap is the host's service time as its answers show it, for a
// host judged serial: under a verdict from the mixed rates, the estimate
// of every pipelined answer's gap, else of the gaps the score took.
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
// one: a request written as an answer arrives must reach it within its
// service time of the request in progress. One request behind the head
// does that when a round trip is shorter than a service time; more
// requests behind add nothing but head-of-line waits (each slow answer
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
// hundred), the request behind loses nothing to its head on most answers,
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

// Pipelining large answers. Every answer in flight on a connection is
// read ahead into a buffer of its own (up to maxBufferedBody), so a
// connection K deep holds K bodies at once: 2.5 MiB at 256 KiB and depth
// 10, and the host's connections together more than the processor's
// caches, through which the kernel copies each body and the caller then
// reads it. The depth then costs more than it saves: one request behind
// the head is enough to keep a connection busy when a body takes longer to
// send than a round trip. So answers on a connection are held to about
// two read-ahead buffers in flight (pipelineBytes, at least 2 requests):
// depth 8 at 64 KiB, 2 from 256 KiB. Measured alone at 256 KiB (5
// connections, 50 callers): depth 1 read 5.5 GB/s, 2 6.2, 10 4.0; budgets
// of 256 KiB (slower at 64 and 128 KiB bodies) and 1 MiB (no better) were
// tried.
const pipelineBytes = margin * maxBufferedBody

// bytesDepth is depth held to pipelineBytes of answers whose bodies
// average avg bytes (0: none seen yet), and never below 2 unless depth is.
func bytesDepth(depth int, avg float64) int {
	if depth <= 2 || avg <= 0 {
		return depth
	}
	return max(2, min(depth, int(pipelineBytes/avg)))
}

// depth is the host's effective pipeline depth at now, of the configured
// one: 1 while it is in fallback after pipeline failures, fewer behind a
// serial server's head (serialDepth), and fewer when its answers are
// large (bytesDepth).
func (m *hostModel) depth(configured int) int {
	if configured > 1 && m.inFallback() {
		return 1
	}
	if m.fixed || configured <= 1 {
		return configured
	}
	d := configured
	if m.serial() {
		d = serialDepth(d, m.rtt, m.order.serviceGap(), m.order.mixed)
	}
	return bytesDepth(d, m.body.v)
}

// gains reports whether the host gains from pipelining as far as its
// answers show, so that the pipelining threshold holds back the dials of
// pipelineable requests: not while what waits behind its heads waits out
// late ones, nor while it runs requests one at a time with service times
// of serialDialGap or more.
func (m *hostModel) gains() bool {
	if m.fixed {
		return true
	}
	if m.heads.mixed {
		return false
	}
	return !m.serial() || m.order.serviceGap() < serialDialGap
}

// noteRoundTrip records a successful dial that took d: the shortest is
// about a round trip.
func (m *hostModel) noteRoundTrip(d time.Duration) {
	if m.rtt == 0 || d < m.rtt {
		m.rtt = d
	}
}

// noteBody adds an answer's body of n bytes: one of declared length at its
// head, a chunked one read whole at its end.
func (m *hostModel) noteBody(n int64) {
	if !m.fixed {
		m.body.add(max(float64(n), 1))
	}
}

// noteOrder records a pipelined answer (serviceOrder.note).
func (m *hostModel) noteOrder(gap, writeGap, shadow time.Duration) {
	if m.fixed {
		return
	}
	switch m.order.note(gap, writeGap, shadow) {
	case verdictGiven:
		m.order.until = m.now().Add(verdictFor)
	case verdictRevoked:
		m.order.until = time.Time{}
	}
}

// serial reports whether the verdict "one request at a time" is in force.
func (m *hostModel) serial() bool {
	return !m.order.until.IsZero() && m.now().Before(m.order.until)
}

// The duplicate budget. Every copy of a request sent while its original
// may still run is a duplicate for the server: safe requests re-sent from
// behind a serial host's late head before HeadOfLineTimeout (earlyAfter), copies
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

// earn adds what one request placed earns to the duplicate budget.
func (m *hostModel) earn() { m.dup = min(m.dup+hedgeRate, hedgeBurst) }

// mayDuplicate reports whether the budget holds one duplicate.
func (m *hostModel) mayDuplicate() bool { return m.dup >= 1 }

// spend takes n duplicates from the budget.
func (m *hostModel) spend(n int) { m.dup -= float64(n) }

// earlyAfter returns the head-of-line threshold of a request placed now
// (attempt.holAfter): for a host that runs a connection's requests one at
// a time, lateWaits of its service times (at least margin quick waits)
// while the budget allows a duplicate, so that the safe requests behind a
// late head, which such a server has not begun, are re-sent elsewhere
// then; or 0 for HeadOfLineTimeout (hol), when no budget is left, the host
// is not judged serial, or the early threshold is not sooner. It charges
// nothing: the connection does, if it re-sends. Behind a server that runs
// requests at once, what waits behind a late head has mostly been answered
// already: re-sent at the late wait, it cost the server 2% more requests
// and the slowest requests a second late head (p99.9 1.6 times as long, 1%
// of answers after 200 ms), for 4-19% more requests per second.
func (m *hostModel) earlyAfter(hol time.Duration) time.Duration {
	if m.fixed || hol <= 0 || !m.mayDuplicate() || !m.serial() {
		return 0
	}
	gap := m.order.serviceGap()
	if gap <= 0 {
		return 0
	}
	if d := max(lateWaits*gap, margin*quickWait); d < hol {
		return d
	}
	return 0
}

// The probe's wait. A server that leaves what came with the request it
// answers unread (gunicorn's gthread worker) stalls the probe
// (scheduler.go, probeLocked) until it closes the idle connection: 2 s for
// gthread, with the connection taking nothing meanwhile. So a probe that is
// the head of its connection with nothing behind it, and has had no answer
// when a head is late (lateAfter), is copied once on another connection,
// as a late head is (holprotect.go, lateHead): it is safe, as every
// pipelined request is.

// probeWait returns how long a probe placed now may wait at the head of
// its connection (attempt.probeAfter).
func (m *hostModel) probeWait(hol time.Duration) time.Duration { return m.lateAfter(hol) }

// The depth fallback. A host whose connections fail with pipelined
// requests outstanding (malformed responses, closes or resets
// mid-pipeline) fallbackAfter times within verdictFor, or once while it is
// not proven to handle pipelining since its last fallback (a server that
// drops what is pipelined: gunicorn's gthread worker leaves the requests
// that came in the same read as the one it answers unanswered until it
// closes the connection, seconds later), or once a pipelined request had
// waited past the head-of-line timeout and then the connection closed
// (no server closes on a request it runs), is at depth 1 for verdictFor.
// Such a server costs one stall per verdictFor: the probe that finds it out
// again.

// noteFailure records a pipeline failure: headSlow, its oldest request,
// pipelined, had waited past the head-of-line timeout.
func (m *hostModel) noteFailure(headSlow bool) {
	now := m.now()
	if now.Before(m.fallbackUntil) {
		return // pipelined before the fallback began
	}
	if !m.proven || headSlow {
		m.fallBack()
		return
	}
	// Keep the times of the last fallbackAfter failures.
	m.failures = append(m.failures, now)
	if len(m.failures) > fallbackAfter {
		m.failures = m.failures[len(m.failures)-fallbackAfter:]
	}
	if len(m.failures) == fallbackAfter && now.Sub(m.failures[0]) <= verdictFor {
		m.fallBack()
	}
}

// fallBack puts the host at depth 1 from now for verdictFor; it is not
// proven after.
func (m *hostModel) fallBack() {
	m.fallbackUntil = m.now().Add(verdictFor)
	m.proven, m.probeCopied = false, false
	m.failures = m.failures[:0]
}

// inFallback reports whether the host is in a depth fallback.
func (m *hostModel) inFallback() bool {
	return !m.fallbackUntil.IsZero() && m.now().Before(m.fallbackUntil)
}

// learned reports whether the model holds something about its host that a
// new one would have to learn again at a cost to requests: a
// per-connection budget, recent pipeline failures or a depth fallback, or
// evidence of a serial server.
func (m *hostModel) learned() bool {
	return m.budget.learned() || len(m.failures) > 0 || m.inFallback() || m.serial() ||
		m.order.score.n > 0 && m.order.score.v >= scoreOff
}

// The per-connection budget. A server that closes each connection after a
// number of requests (nginx's keepalive_requests, hypercorn and tinyproxy
// after one) is learned from its closes, so that a connection is given no
// more requests than it will answer, none written only to be sent again.
// A close it announces (Connection: close) with requests written behind,
// at the same count on two connections in a row, is the budget; one it
// does not announce, right after an answer, at the same count twice in a
// row, is too, for verdictFor: nothing tells that such a server would now
// answer more, its connections being closed at the budget, so it is
// learned again; a server that still closes costs a request sent again per
// connection until it has closed two in a row at the same count, and one
// whose closes had another cause is no longer held to it. A connection
// that answers more disproves either.
type connBudget struct {
	n     int       // requests per connection; 0 if unknown
	until time.Time // a budget learned from unannounced closes holds until then; zero for an announced one
	// quiet is the count at which a connection was last closed without
	// notice; noQuietUntil: a budget learned from such closes proved
	// wrong (a connection answered more), so that those closes are not
	// the server's doing (a faulty network's resets): none is learned
	// again until then.
	quiet        int
	noQuietUntil time.Time
	closeAt      int // the count at which the server last closed a connection it announced closing
}

// connBudget returns the per-connection budget (0: none).
func (m *hostModel) connBudget() int {
	b := &m.budget
	if b.n > 0 && !b.until.IsZero() && m.now().After(b.until) {
		b.n, b.quiet, b.until = 0, 0, time.Time{}
	}
	return b.n
}

// noteAnnouncedClose records a close the server announced on the answer
// at place, with requests written behind it.
func (b *connBudget) noteAnnouncedClose(place int) {
	if b.closeAt == place {
		b.n, b.until = place, time.Time{}
	}
	b.closeAt = place
}

// noteQuietClose records a connection the server closed without notice
// right after its answered-th answer, reporting whether that made the
// budget.
func (m *hostModel) noteQuietClose(answered int) (learned bool) {
	b := &m.budget
	if b.quiet == answered && (b.n == 0 || answered < b.n) {
		if now := m.now(); now.After(b.noQuietUntil) {
			b.n, b.until = answered, now.Add(verdictFor)
			learned = true
		}
	}
	b.quiet = answered
	return learned
}

// noteServed records a connection that has answered served requests: a
// count above one at which others closed without notice says that count
// is not the server's budget.
func (m *hostModel) noteServed(served int) {
	b := &m.budget
	if b.quiet > 0 && served > b.quiet {
		b.quiet = 0
	}
	if !b.until.IsZero() && served > b.n {
		b.n, b.until = 0, time.Time{}
		b.noQuietUntil = m.now().Add(verdictFor)
	}
}

// noteUnclosed records a connection given the announced budget of
// assigned requests that answered them all without a close: the server
// would have answered more than it announced, so the budget is learned
// again from the next close. (One learned from unannounced closes
// expires instead.)
func (b *connBudget) noteUnclosed(assigned int) {
	if b.n == assigned && b.until.IsZero() {
		b.n = 0
	}
}

// learned reports whether b holds anything a new model would learn again
// at a cost.
func (b *connBudget) learned() bool { return b.n > 0 || b.quiet > 0 }
