package model

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"testing"
	"time"
)

// readAhead is the transport's read-ahead buffer of a response's body
// (maxBufferedBody), which New is given.
const readAhead = 256 << 10

func TestClassOf(t *testing.T) {
	class := func(method, url string, accept ...string) Class {
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range accept {
			req.Header.Add("Accept", a)
		}
		return ClassOf(req, method)
	}
	get := func(url string) Class { return class(http.MethodGet, url) }
	for _, tt := range []struct {
		name string
		a, b Class
		same bool
	}{
		{"ids with digits", get("http://h/items/8f3a19c2"), get("http://h/items/77c2d0e1"), true},
		{"uuids", get("http://h/items/123e4567-e89b-12d3-a456-426614174000/tags"), get("http://h/items/00000000-0000-0000-0000-000000000001/tags"), true},
		{"names without digits", get("http://h/u/abcdefghijklmnopqrstuvwxyz"), get("http://h/u/zyxwvutsrqponmlkjihgfedcba"), false},
		{"query values", get("http://h/api/v1/pods?limit=500"), get("http://h/api/v1/pods?limit=20"), true},
		{"query order", get("http://h/x?a=1&b=2"), get("http://h/x?b=3&a=4"), true},
		{"a watch beside a list", get("http://h/api/v1/pods?watch=1"), get("http://h/api/v1/pods?limit=500"), false},
		{"a log follow beside its pod", get("http://h/api/v1/namespaces/ns/pods/web-7d9f/log?follow=true"), get("http://h/api/v1/namespaces/ns/pods/web-7d9f"), false},
		{"collections", get("http://h/items/1"), get("http://h/users/1"), false},
		{"actions", get("http://h/items/1/download"), get("http://h/items/1"), false},
		{"methods", get("http://h/items/1"), class(http.MethodHead, "http://h/items/1"), false},
		{"hosts", get("http://a/items/1"), get("http://b/items/1"), false},
		{"accept", get("http://h/events"), class(http.MethodGet, "http://h/events", "text/event-stream"), false},
		{"same accept", class(http.MethodGet, "http://h/a/1", "application/json"), class(http.MethodGet, "http://h/a/2", "application/json"), true},
	} {
		if got := tt.a == tt.b; got != tt.same {
			t.Errorf("%s: ClassOf equal = %v, want %v", tt.name, got, tt.same)
		}
	}
}

func TestClassOfAllocs(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://h/api/v1/namespaces/ns/pods/web-7d9f?watch=1&resourceVersion=12", nil)
	req.Header.Set("Accept", "application/json")
	if n := testing.AllocsPerRun(100, func() { ClassOf(req, http.MethodGet) }); n != 0 {
		t.Errorf("ClassOf allocates %v times, want 0", n)
	}
}

// modelStep is one observation fed to a Host in a scenario: an
// answer of a class, or (class 0, kind 0, headWait only) a head wait.
type modelStep struct {
	class    Class
	kind     Kind
	headWait time.Duration
}

func repeat(n int, s modelStep) []modelStep {
	out := make([]modelStep, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestHostModel replays the situations the model is for as traces of
// observations under a fake clock, and checks each verdict.
func TestHostModel(t *testing.T) {
	const (
		list  Class = 1 // a REST list or item route: small, quick answers
		watch Class = 2 // a watch, an SSE feed, a log follow
		poll  Class = 3 // a long poll
		big   Class = 4 // a download too large to read ahead
		other Class = 5 // never seen
	)
	const hol = time.Second
	quick := func(c Class) modelStep { return modelStep{c, Bounded, 2 * time.Millisecond} }
	stream := func(c Class) modelStep { return modelStep{c, Stream, 2 * time.Millisecond} }
	slow := func(c Class, d time.Duration) modelStep { return modelStep{c, Bounded, d} }
	type want map[Class]Verdict
	for _, tt := range []struct {
		name  string
		fixed bool
		steps []modelStep
		want  want
	}{
		{"a new host: nothing is followed", false, nil,
			want{list: Unseen, watch: Unseen}},
		{"a quick bounded answer makes its class followable", false,
			[]modelStep{quick(list)},
			want{list: Known, watch: Unseen, other: Unseen}},
		{"a watch streams: never followed, its neighbours still are", false,
			[]modelStep{quick(list), quick(list), stream(watch)},
			want{list: Known, watch: Streams}},
		{"a watch restarted stays a stream", false,
			[]modelStep{quick(list), stream(watch), quick(list), stream(watch), stream(watch)},
			want{list: Known, watch: Streams}},
		{"a bulk answer of a stream class forgets it", false,
			[]modelStep{quick(list), stream(watch), quick(watch)},
			want{watch: Unseen}},
		{"a stream class answered whole twice is followed", false,
			[]modelStep{quick(list), stream(watch), quick(watch), quick(watch)},
			want{watch: Known}},
		{"a long poll is late, even as the host's first answer", false,
			[]modelStep{slow(poll, 2*time.Second)},
			want{poll: Late}},
		{"a long poll beside quick answers", false,
			[]modelStep{quick(list), quick(list), slow(poll, 2*time.Second), quick(list)},
			want{list: Known, poll: Late}},
		{"late: 20 usual waits, never before 50 ms", false,
			[]modelStep{quick(list), slow(poll, 60*time.Millisecond)},
			want{poll: Late}},
		{"not late below 50 ms", false,
			[]modelStep{quick(list), slow(poll, 45*time.Millisecond)},
			want{poll: Known}},
		{"a slow host's usual answers are not late", false,
			[]modelStep{slow(list, 200*time.Millisecond), slow(list, 210*time.Millisecond)},
			want{list: Known}},
		{"a late class stays late after one quick answer", false,
			[]modelStep{quick(list), slow(poll, 2*time.Second), quick(poll)},
			want{poll: Late}},
		{"a quick class slow once is not late", false,
			append(repeat(10, quick(list)), slow(list, 200*time.Millisecond), quick(list)),
			want{list: Known}},
		{"a late class that answers quickly long enough", false,
			append([]modelStep{quick(list), slow(poll, 200*time.Millisecond)}, repeat(60, quick(poll))...),
			want{poll: Known}},
		{"a large download streams", false,
			[]modelStep{quick(list), stream(big)},
			want{big: Streams, list: Known}},
		{"fixed: everything is followed, nothing learned", true,
			[]modelStep{stream(watch), slow(poll, 2*time.Second)},
			want{watch: Fixed, poll: Fixed, other: Fixed}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := New(tt.fixed, readAhead)
			var now int64
			for _, s := range tt.steps {
				now += int64(time.Millisecond)
				m.NoteHeadWait(s.headWait)
				m.NoteResponse(s.class, now, s.kind, s.headWait, hol)
			}
			for c, w := range tt.want {
				if got := m.Follow(c); got != w {
					t.Errorf("follow(%d) = %v, want %v", c, got, w)
				}
			}
		})
	}
}

// TestHostModelBounded: a host's model holds at most maxClasses classes,
// forgetting the one seen least recently, and its tallies stay exact.
func TestHostModelBounded(t *testing.T) {
	m := New(false, readAhead)
	var now int64
	for i := range 3 * maxClasses {
		now += int64(time.Millisecond)
		kind := Bounded
		if i%3 == 0 {
			kind = Stream
		}
		m.NoteResponse(Class(i), now, kind, time.Millisecond, time.Second)
	}
	if n := len(m.classes); n != maxClasses {
		t.Fatalf("%d classes, want %d", n, maxClasses)
	}
	streams := 0
	for _, s := range m.classes {
		if s.last == Stream {
			streams++
		}
	}
	if streams != m.streams {
		t.Errorf("streams tally %d, want %d", m.streams, streams)
	}
	if got := m.Follow(Class(0)); got != Unseen {
		t.Errorf("the oldest class: %v, want forgotten (%v)", got, Unseen)
	}
	if got := m.Follow(Class(3*maxClasses - 1)); got != Known {
		t.Errorf("the newest class: %v, want %v", got, Known)
	}
}

// TestHostModelChanged: noteAnswer reports a change of verdict, and only
// then (the Observer's RouteLearned).
func TestHostModelChanged(t *testing.T) {
	m := New(false, readAhead)
	var got []string
	for i, s := range []struct {
		kind Kind
		wait time.Duration
	}{{Bounded, time.Millisecond}, {Bounded, time.Millisecond}, {Stream, time.Millisecond}, {Stream, 0},
		{Bounded, time.Millisecond}, {Bounded, 3 * time.Second}, {Bounded, 3 * time.Second}, {Bounded, 3 * time.Second},
		{Stream, 0}} {
		if m.NoteResponse(7, int64(i), s.kind, s.wait, time.Second) {
			got = append(got, m.Follow(7).String())
		}
	}
	if want := []string{"bounded", "stream", "unseen", "late", "stream"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("changes %q, want %q", got, want)
	}
}

func BenchmarkClassOf(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "http://h/api/v1/namespaces/ns/pods/web-7d9f?watch=1&resourceVersion=12", nil)
	req.Header.Set("Accept", "application/json")
	for b.Loop() {
		ClassOf(req, http.MethodGet)
	}
}

// TestHostModelNoHeadOfLineTimeout: with HeadOfLineTimeout disabled (a
// negative value), lateness is the host's own: 20 usual waits, at least
// 50 ms.
func TestHostModelNoHeadOfLineTimeout(t *testing.T) {
	m := New(false, readAhead)
	for i, s := range []struct {
		c    Class
		wait time.Duration
	}{{1, 2 * time.Millisecond}, {1, 2 * time.Millisecond}, {2, 60 * time.Millisecond}, {3, 40 * time.Millisecond}} {
		m.NoteHeadWait(s.wait)
		m.NoteResponse(s.c, int64(i), Bounded, s.wait, -1)
	}
	for c, want := range map[Class]Verdict{1: Known, 2: Late, 3: Known} {
		if got := m.Follow(c); got != want {
			t.Errorf("follow(%d) = %v, want %v", c, got, want)
		}
	}
}

// TestSerialVerdict: serviceOrder.note(now, gap, writeGap, shadow) over a
// sequence of answers = the verdict "runs requests one at a time" after it.
func TestSerialVerdict(t *testing.T) {
	const ms, us = time.Millisecond, time.Microsecond
	type s struct{ gap, writeGap, shadow time.Duration }
	rep := func(n int, x s) []s { return slices.Repeat([]s{x}, n) }
	// mixed returns n answers, every other one behind a quick answer (a
	// shadow of 100 µs) or a slow one (50 ms); two in five of each kind
	// come late (30 ms: a service time) if lateAfterSlow, else only those
	// behind quick answers: the order of a server that runs requests one
	// at a time, or at once, when 60% of its service times are short.
	mixed := func(n int, lateAfterSlow bool) []s {
		var out []s
		for i := range n {
			a := s{gap: 50 * us, shadow: 100 * us}
			if i%2 == 1 {
				a.shadow = 50 * ms
			}
			if k := (i / 2) % 5; (k == 0 || k == 3) && (i%2 == 0 || lateAfterSlow) {
				a.gap = 30 * ms
			}
			out = append(out, a)
		}
		return out
	}
	// spaced gives answers whose requests were written a service time
	// after the one ahead: the score takes none, the mixed rates all.
	spaced := func(answers []s) []s {
		for i := range answers {
			answers[i].writeGap = ms
		}
		return answers
	}
	tests := []struct {
		name    string
		answers []s
		want    bool
		mixed   bool // the verdict came from the mixed rates: not pipelined (serialDepth)
	}{
		{"serial server, burst", rep(scoreKnown, s{ms, 0, 0}), true, false},
		{"concurrent server, burst", rep(2*Memory, s{10 * us, 0, 0}), false, false},
		{"closed loop: writes spaced as answers", rep(2*Memory, s{ms, ms, 0}), false, false},
		{"too few", rep(scoreKnown-1, s{ms, 0, 0}), false, false},
		{"still serial after a few answers that came together", append(rep(Memory, s{ms, 0, 0}), rep(Memory/2, s{10 * us, 0, 0})...), true, false},
		{"revoked by answers that came together", append(rep(Memory, s{ms, 0, 0}), rep(2*Memory, s{10 * us, 0, 0})...), false, false},
		{"one answer read late does not revoke", append(append(rep(Memory, s{ms, 0, 0}), s{0, 0, 0}), rep(2, s{ms, 0, 0})...), true, false},
		{"serial server, mixed service times", mixed(2*Memory, true), true, true},
		{"serial server, mixed, too few to tell", mixed(2*Memory-2, true), false, false},
		{"serial server, mixed, writes spaced as answers", spaced(mixed(2*Memory, true)), true, true},
		{"concurrent server, mixed, writes spaced as answers", spaced(mixed(2*Memory, false)), false, false},
		{"concurrent server, mixed service times", mixed(2*Memory, false), false, false},
		{"serial, mixed, a run of quick answers does not revoke", append(mixed(2*Memory, true), rep(8, s{10 * us, 0, 0})...), true, true},
		{"score's verdict overruled by mixed evidence", append(mixed(4*Memory, false), rep(5, s{ms, 0, 0})...), false, false},
	}
	for _, tt := range tests {
		clock := newFakeClock()
		m := Host{clock: clock.now}
		for _, a := range tt.answers {
			clock.advance(time.Millisecond)
			m.NoteOrder(a.gap, a.writeGap, a.shadow)
		}
		if got := m.Serial(); got != tt.want {
			t.Errorf("%s: serial = %v (score %.2f), want %v", tt.name, got, m.order.score.v, tt.want)
		}
		if got := m.Serial() && m.order.mixed; got != tt.mixed {
			t.Errorf("%s: serial and mixed = %v, want %v", tt.name, got, tt.mixed)
		}
	}
}

// TestSerialVerdictExpires: the serial verdict holds VerdictFor after its
// last evidence.
func TestSerialVerdictExpires(t *testing.T) {
	clock := newFakeClock()
	m := Host{clock: clock.now}
	for range Memory {
		m.NoteOrder(time.Millisecond, 0, 0)
	}
	var after time.Duration
	for _, tt := range []struct {
		after time.Duration
		want  bool
	}{{0, true}, {VerdictFor - time.Second, true}, {VerdictFor, false}} {
		clock.advance(tt.after - after)
		after = tt.after
		if got := m.Serial(); got != tt.want {
			t.Errorf("serial %v after the last evidence = %v, want %v", tt.after, got, tt.want)
		}
	}
}

// fakeClock is a model's clock in tests: it moves only when told.
type fakeClock struct{ t time.Time }

func newFakeClock() *fakeClock               { return &fakeClock{t: time.Unix(0, 0)} }
func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestMixedOrder: mixedOrder(afterQuick, afterSlow) = got, want want.
func TestMixedOrder(t *testing.T) {
	known := func(rate float64) estimate { return estimate{n: Memory, v: rate} }
	tests := []struct {
		name              string
		afterQuick, after estimate
		want              order
	}{
		{"nothing yet", estimate{}, estimate{}, orderUnknown},
		{"too few behind slow answers", known(0.4), estimate{n: Memory - 1, v: 0.4}, orderUnknown},
		{"too few behind quick answers", estimate{n: Memory - 1, v: 0.4}, known(0.4), orderUnknown},
		{"hardly any long answers", known(mixedMinRate * 0.9), known(0), orderUnknown},
		{"as often behind slow answers", known(0.3), known(0.3), orderSerial},
		{"at the serial threshold", known(0.5), known(0.3), orderSerial},
		{"more often behind slow answers", known(0.2), known(0.5), orderSerial},
		{"far less often behind slow answers", known(0.3), known(0.09), orderConcurrent},
		{"never behind slow answers", known(0.3), known(0), orderConcurrent},
		{"between", known(0.4), known(0.2), orderUnsure},
	}
	for _, tt := range tests {
		if got := mixedOrder(tt.afterQuick, tt.after); got != tt.want {
			t.Errorf("%s: mixedOrder(%+v, %+v) = %v, want %v", tt.name, tt.afterQuick, tt.after, got, tt.want)
		}
	}
}

// TestEstimate: an estimate is the mean of its first Memory observations,
// then moves by 1/Memory of each new one.
func TestEstimate(t *testing.T) {
	var e estimate
	for i := range Memory {
		e.add(fromBool(i%4 == 0))
	}
	if want := 0.25; !e.known() || math.Abs(e.v-want) > 1e-9 {
		t.Fatalf("after %d observations: known %v, v = %v, want true, %v", Memory, e.known(), e.v, want)
	}
	e.add(1)
	if want := 0.25 + 0.75/Memory; e.n != Memory || math.Abs(e.v-want) > 1e-9 {
		t.Fatalf("one more: n = %d, v = %v, want %d, %v", e.n, e.v, Memory, want)
	}
}

func TestBytesDepth(t *testing.T) {
	const kib = 1 << 10
	tests := []struct {
		depth int
		avg   float64
		want  int
	}{
		{10, 0, 10},         // no body seen yet
		{10, 128, 10},       // small answers: the configured depth
		{10, 16 * kib, 10},  // 32 fit in pipelineBytes
		{10, 64 * kib, 8},   // 8 fit
		{4, 64 * kib, 4},    // the default depth is below that
		{10, 256 * kib, 2},  // 2 fit
		{10, 4096 * kib, 2}, // none fit: at least one behind the head
		{2, 4096 * kib, 2},
		{1, 4096 * kib, 1}, // pipelining off stays off
	}
	for _, tt := range tests {
		if got := bytesDepth(tt.depth, tt.avg, margin*readAhead); got != tt.want {
			t.Errorf("bytesDepth(%d, %v, margin*readAhead) = %d, want %d", tt.depth, tt.avg, got, tt.want)
		}
	}
}

// TestHeadWaits: the verdict that requests written behind a head lose by
// it (headWaits), after a run of answers of the given
// waits, the pattern repeated.
func TestHeadWaits(t *testing.T) {
	ms := time.Millisecond
	for _, tt := range []struct {
		name    string
		pattern []time.Duration // repeated to 2000 answers
		once    bool            // the pattern once, not repeated
		want    bool
	}{
		{name: "all quick", pattern: []time.Duration{ms}},
		{name: "1% after 200 ms, the rest after 1 ms", pattern: append(slices.Repeat([]time.Duration{ms}, 99), 200*ms), want: true},
		{name: "0.1% after 1 s, the rest after 30 ms", pattern: append(slices.Repeat([]time.Duration{30 * ms}, 999), time.Second)},
		{name: "all after 200 ms", pattern: []time.Duration{200 * ms}},
		{name: "varied, none late", pattern: []time.Duration{ms, 5 * ms, 2 * ms, 9 * ms}},
		{name: "5 late, then 300 quick answers: still on", pattern: quickLateQuick(Memory, 5, 300), once: true, want: true},
		{name: "5 late, then 700 quick answers: off again", pattern: quickLateQuick(Memory, 5, 700), once: true},
		{name: "a late answer among the first few turns nothing", pattern: quickLateQuick(2, 1, 10), once: true},
	} {
		var h headWaits
		n := 2000
		if tt.once {
			n = len(tt.pattern)
		}
		for i := range n {
			h.note(tt.pattern[i%len(tt.pattern)])
		}
		if h.mixed != tt.want {
			t.Errorf("%s: mixed = %v (usual %v, late %v), want %v", tt.name, h.mixed, h.usualWait(), h.late.duration(), tt.want)
		}
	}
}

// quickLateQuick is TestHeadWaits' pattern of a quick answers (1 ms),
// then l late ones (200 ms), then q quick ones.
func quickLateQuick(a, l, q int) []time.Duration {
	p := slices.Repeat([]time.Duration{time.Millisecond}, a)
	p = append(p, slices.Repeat([]time.Duration{200 * time.Millisecond}, l)...)
	return append(p, slices.Repeat([]time.Duration{time.Millisecond}, q)...)
}

func TestSerialDepth(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		depth     int
		dial, gap time.Duration
		mixed     bool
		want      int
	}{
		{10, 100 * time.Microsecond, ms, false, 2}, // a round trip within a service time
		{10, 0, ms, false, 2},
		{10, 50 * ms, 10 * ms, false, 6}, // the next request is there after 5 service times
		{10, 500 * ms, ms, false, 10},    // at most the configured depth
		{10, ms, 0, false, 10},           // no service time known
		{2, 50 * ms, ms, false, 2},
		{10, 100 * time.Microsecond, 40 * ms, false, 2}, // alike service times: one behind
		{10, 100 * time.Microsecond, 40 * ms, true, 1},  // mixed: none behind
		{10, 50 * time.Microsecond, ms, true, 1},        // 20 round trips
		{10, 100 * time.Microsecond, ms, true, 2},       // 10 round trips: one behind
		{10, 50 * ms, 40 * ms, true, 3},                 // far: pipelined as before
		{10, 0, 40 * ms, true, 2},                       // no dial measured
		{10, ms, 0, true, 10},
	}
	for _, tt := range tests {
		if got := serialDepth(tt.depth, tt.dial, tt.gap, tt.mixed); got != tt.want {
			t.Errorf("serialDepth(%d, %v, %v, %t) = %d, want %d", tt.depth, tt.dial, tt.gap, tt.mixed, got, tt.want)
		}
	}
}

// TestFallback: noteFailure's verdicts, in a row of failures at the given
// times, with the model proven before them or not.
func TestFallback(t *testing.T) {
	s := time.Second
	for _, tt := range []struct {
		name     string
		proven   bool
		at       []time.Duration // failures
		slow     bool            // each one's pipelined head was late
		want     bool            // in fallback after the last one
		wantFrom time.Duration   // the fallback's start
	}{
		{"unproven: the first failure", false, []time.Duration{0}, false, true, 0},
		{"proven: one failure", true, []time.Duration{0}, false, false, 0},
		{"proven: a late head dropped", true, []time.Duration{0}, true, true, 0},
		{"proven: three within VerdictFor", true, []time.Duration{0, 20 * s, 40 * s}, false, true, 40 * s},
		{"proven: three spread wider", true, []time.Duration{0, 40 * s, 80 * s}, false, false, 0},
	} {
		clock := newFakeClock()
		m := Host{clock: clock.now, proven: tt.proven}
		start := clock.now()
		for _, at := range tt.at {
			clock.t = start.Add(at)
			m.NoteFailure(tt.slow)
		}
		if got := m.InFallback(); got != tt.want {
			t.Errorf("%s: in fallback = %v, want %v", tt.name, got, tt.want)
			continue
		}
		if !tt.want {
			continue
		}
		if want := start.Add(tt.wantFrom + VerdictFor); !m.fallbackUntil.Equal(want) {
			t.Errorf("%s: fallback until %v, want %v", tt.name, m.fallbackUntil.Sub(start), want.Sub(start))
		}
		during := m.Depth(4)
		clock.t = m.fallbackUntil
		if after := m.Depth(4); m.proven || during != 1 || after != 4 {
			t.Errorf("%s: proven %v, depth %d then %d after, want false, 1, 4", tt.name, m.proven, during, after)
		}
	}
}

// TestDuplicateBudget: early re-sends (earlyAfter) are allowed only while
// the host's one duplicate budget lasts: one per 1/hedgeRate requests
// placed, each re-send spending one; then nothing is left for a copy of a
// late head either.
func TestDuplicateBudget(t *testing.T) {
	clock := newFakeClock()
	// orderOf returns the service order of a serial host whose service
	// time is gap.
	orderOf := func(gap time.Duration) serviceOrder {
		m := Host{clock: clock.now}
		for range Memory {
			m.NoteOrder(gap, 0, 0)
		}
		return m.order
	}
	serial := orderOf(time.Millisecond)
	m := Host{clock: clock.now, order: serial}
	early := 0
	for range 1000 {
		m.Earn()
		if d := m.EarlyAfter(time.Second); d > 0 {
			if want := lateWaits * time.Millisecond; d != want {
				t.Fatalf("earlyAfter = %v, want %v", d, want)
			}
			early++
			m.Spend(1) // as setSlow does for one request behind
		}
	}
	if want := int(1000 * hedgeRate); early < want-1 || early > want {
		t.Errorf("%d early re-sends allowed in 1000 requests, want %d", early, want)
	}
	if m.MayDuplicate() {
		t.Errorf("duplicate budget %v after the re-sends, want below 1", m.dup)
	}
	quick := orderOf(300 * time.Microsecond)
	for _, tt := range []struct {
		name string
		m    Host
		hol  time.Duration
		want time.Duration
	}{
		{"not serial", Host{dup: hedgeBurst}, time.Second, 0},
		{"serial", Host{dup: 1, order: serial}, time.Second, lateWaits * time.Millisecond},
		{"serial, quick: at least two quick waits", Host{dup: 1, order: quick}, time.Second, margin * QuickWait},
		{"no budget", Host{dup: 0.9, order: serial}, time.Second, 0},
		{"HeadOfLineTimeout disabled", Host{dup: hedgeBurst, order: serial}, -1, 0},
		{"HeadOfLineTimeout sooner", Host{dup: hedgeBurst, order: serial}, 15 * time.Millisecond, 0},
		{"fixed policy", Host{fixed: true, dup: hedgeBurst, order: serial}, time.Second, 0},
	} {
		tt.m.clock = clock.now
		if got := tt.m.EarlyAfter(tt.hol); got != tt.want {
			t.Errorf("%s: earlyAfter(%v) = %v, want %v", tt.name, tt.hol, got, tt.want)
		}
	}
}

// TestHostModelScenarios replays the situations the host-wide estimates
// are for into a model under a fake clock (time advances 1 ms per
// observation), and checks what it decides after: the depth (of 4),
// whether the pipelining threshold holds back dials (gains), the serial
// verdict, the depth fallback and the per-connection budget.
func TestHostModelScenarios(t *testing.T) {
	const ms, us = time.Millisecond, time.Microsecond
	type decision struct {
		depth                   int
		gains, serial, fallback bool
		budget                  int
	}
	pipelined := decision{depth: 4, gains: true}
	// answers notes n pipelined answers, each head wait taken from waits in
	// turn, written right behind the one ahead and answered gap after it.
	answers := func(n int, gap time.Duration, waits ...time.Duration) func(*Host, *time.Time) {
		return func(m *Host, now *time.Time) {
			for i := range n {
				*now = now.Add(ms)
				m.NoteHeadWait(waits[i%len(waits)])
				m.NoteOrder(gap, 0, 0)
				m.NoteBody(128)
			}
		}
	}
	// mixedLoad notes pipelined answers of a load where two in five service
	// times are 30 ms, the rest 50 µs: behind quick answers and slow ones
	// alike from a serial server, mostly behind quick ones from a concurrent
	// one.
	mixedLoad := func(serial bool) func(*Host, *time.Time) {
		return func(m *Host, now *time.Time) {
			for i := range 8 * Memory {
				*now = now.Add(ms)
				gap, shadow := 50*us, 100*us
				if i%2 == 1 {
					shadow = 50 * ms
				}
				if k := (i / 2) % 5; (k == 0 || k == 3) && (i%2 == 0 || serial) {
					gap = 30 * ms
				}
				m.NoteHeadWait(max(gap, 100*us))
				m.NoteOrder(gap, ms, shadow)
			}
		}
	}
	failures := func(proven bool, every time.Duration, n int) func(*Host, *time.Time) {
		return func(m *Host, now *time.Time) {
			m.proven = proven
			for range n {
				*now = now.Add(every)
				m.NoteFailure(false)
			}
		}
	}
	wait := func(d time.Duration) func(*Host, *time.Time) {
		return func(_ *Host, now *time.Time) { *now = now.Add(d) }
	}
	for _, tt := range []struct {
		name  string
		fixed bool
		steps []func(*Host, *time.Time)
		want  decision
	}{
		{"nothing seen", false, nil, pipelined},
		{"concurrent server, quick answers", false, []func(*Host, *time.Time){answers(500, 10*us, ms)}, pipelined},
		{"serial server, 10 ms: not worth a pipeline beyond one behind, dials", false,
			[]func(*Host, *time.Time){answers(2*Memory, 10*ms, 10*ms)}, decision{depth: 2, serial: true}},
		{"serial server, 0.5 ms: one behind, still pipelined", false,
			[]func(*Host, *time.Time){answers(2*Memory, 500*us, 500*us)}, decision{depth: 2, gains: true, serial: true}},
		{"serial verdict expires", false,
			[]func(*Host, *time.Time){answers(2*Memory, 10*ms, 10*ms), wait(VerdictFor)}, pipelined},
		{"one late answer in a thousand turns nothing", false,
			[]func(*Host, *time.Time){answers(2000, 10*us, append(slices.Repeat([]time.Duration{30 * ms}, 999), time.Second)...)}, pipelined},
		{"1% late at 200 ms: dials rather than wait behind heads", false,
			[]func(*Host, *time.Time){answers(2000, 10*us, append(slices.Repeat([]time.Duration{ms}, 99), 200*ms)...)}, decision{depth: 4}},
		{"mixed service times, serial server (a Go backend): not pipelined", false,
			[]func(*Host, *time.Time){func(m *Host, _ *time.Time) { m.NoteRoundTrip(100 * us) }, mixedLoad(true)}, decision{depth: 1, serial: true}},
		{"mixed service times, concurrent server (Node)", false,
			[]func(*Host, *time.Time){mixedLoad(false)}, pipelined},
		{"drops what is pipelined (gthread): the first failure", false,
			[]func(*Host, *time.Time){failures(false, ms, 1)}, decision{depth: 1, gains: true, fallback: true}},
		{"the fallback ends", false,
			[]func(*Host, *time.Time){failures(false, ms, 1), wait(VerdictFor)}, pipelined},
		{"proven: three failures within a minute", false,
			[]func(*Host, *time.Time){failures(true, 10*time.Second, 3)}, decision{depth: 1, gains: true, fallback: true}},
		{"proven: a failure every 40 s", false,
			[]func(*Host, *time.Time){failures(true, 40*time.Second, 5)}, pipelined},
		{"nginx keepalive_requests 100: announced twice", false,
			[]func(*Host, *time.Time){func(m *Host, _ *time.Time) { m.budget.NoteAnnouncedClose(100); m.budget.NoteAnnouncedClose(100) }},
			decision{depth: 4, gains: true, budget: 100}},
		{"closes after one answer without notice (hypercorn 0.13)", false,
			[]func(*Host, *time.Time){func(m *Host, now *time.Time) { m.NoteQuietClose(1); m.NoteQuietClose(1) }},
			decision{depth: 4, gains: true, budget: 1}},
		{"a quiet budget is learned again after a minute", false,
			[]func(*Host, *time.Time){func(m *Host, now *time.Time) { m.NoteQuietClose(1); m.NoteQuietClose(1) }, wait(VerdictFor + ms)},
			pipelined},
		{"resets at random counts (a faulty network)", false,
			[]func(*Host, *time.Time){func(m *Host, now *time.Time) {
				for _, n := range []int{3, 7, 2, 5, 9} {
					m.NoteQuietClose(n)
				}
			}}, pipelined},
		{"large answers (256 KiB)", false,
			[]func(*Host, *time.Time){func(m *Host, _ *time.Time) {
				for range Memory {
					m.NoteBody(256 << 10)
				}
			}}, decision{depth: 2, gains: true}},
		{"fixed policy: a serial server with late answers changes nothing", true,
			[]func(*Host, *time.Time){answers(2*Memory, 10*ms, 10*ms, time.Second)}, pipelined},
	} {
		m := New(tt.fixed, readAhead)
		now := time.Unix(0, 0)
		m.clock = func() time.Time { return now }
		for _, step := range tt.steps {
			step(&m, &now)
		}
		got := decision{depth: m.Depth(4), gains: m.Gains(), serial: m.Serial(),
			fallback: m.InFallback(), budget: m.ConnBudget()}
		if got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
