package pipelined

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestClassOf(t *testing.T) {
	class := func(method, url string, accept ...string) routeClass {
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range accept {
			req.Header.Add("Accept", a)
		}
		return classOf(req, method)
	}
	get := func(url string) routeClass { return class(http.MethodGet, url) }
	for _, tt := range []struct {
		name string
		a, b routeClass
		same bool
	}{
		{"ids with digits", get("http://h/items/8f3a19c2"), get("http://h/items/77c2d0e1"), true},
		{"uuids", get("http://h/items/123e4567-e89b-12d3-a456-426614174000/tags"), get("http://h/items/00000000-0000-0000-0000-000000000001/tags"), true},
		{"long ids without digits", get("http://h/u/abcdefghijklmnopqrstuvwxyz"), get("http://h/u/zyxwvutsrqponmlkjihgfedcba"), true},
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
			t.Errorf("%s: classOf equal = %v, want %v", tt.name, got, tt.same)
		}
	}
}

func TestClassOfAllocs(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://h/api/v1/namespaces/ns/pods/web-7d9f?watch=1&resourceVersion=12", nil)
	req.Header.Set("Accept", "application/json")
	if n := testing.AllocsPerRun(100, func() { classOf(req, http.MethodGet) }); n != 0 {
		t.Errorf("classOf allocates %v times, want 0", n)
	}
}

// modelStep is one observation fed to a hostModel in a scenario: an
// answer of a class, or (class 0, kind 0, headWait only) a head wait.
type modelStep struct {
	class    routeClass
	kind     answerKind
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
		list  routeClass = 1 // a REST list or item route: small, quick answers
		watch routeClass = 2 // a watch, an SSE feed, a log follow
		poll  routeClass = 3 // a long poll
		big   routeClass = 4 // a download too large to read ahead
		other routeClass = 5 // never seen
	)
	const hol = time.Second
	quick := func(c routeClass) modelStep { return modelStep{c, answerBounded, 2 * time.Millisecond} }
	stream := func(c routeClass) modelStep { return modelStep{c, answerStream, 2 * time.Millisecond} }
	slow := func(c routeClass, d time.Duration) modelStep { return modelStep{c, answerBounded, d} }
	type want map[routeClass]followVerdict
	for _, tt := range []struct {
		name  string
		fixed bool
		steps []modelStep
		want  want
	}{
		{"a new host: nothing is followed", false, nil,
			want{list: followUnseen, watch: followUnseen}},
		{"a quick bounded answer makes its class followable", false,
			[]modelStep{quick(list)},
			want{list: followKnown, watch: followUnseen, other: followUnseen}},
		{"a watch streams: never followed, its neighbours still are", false,
			[]modelStep{quick(list), quick(list), stream(watch)},
			want{list: followKnown, watch: followStreams}},
		{"a watch restarted stays a stream", false,
			[]modelStep{quick(list), stream(watch), quick(list), stream(watch), stream(watch)},
			want{list: followKnown, watch: followStreams}},
		{"a bulk answer of a stream class forgets it", false,
			[]modelStep{quick(list), stream(watch), quick(watch)},
			want{watch: followKnown}},
		{"a long poll is late, even as the host's first answer", false,
			[]modelStep{slow(poll, 2*time.Second)},
			want{poll: followLate}},
		{"a long poll beside quick answers", false,
			[]modelStep{quick(list), quick(list), slow(poll, 2*time.Second), quick(list)},
			want{list: followKnown, poll: followLate}},
		{"late: 20 usual waits, never before 50 ms", false,
			[]modelStep{quick(list), slow(poll, 60*time.Millisecond)},
			want{poll: followLate}},
		{"not late below 50 ms", false,
			[]modelStep{quick(list), slow(poll, 45*time.Millisecond)},
			want{poll: followKnown}},
		{"a slow host's usual answers are not late", false,
			[]modelStep{slow(list, 200*time.Millisecond), slow(list, 210*time.Millisecond)},
			want{list: followKnown}},
		{"a late class stays late after one quick answer", false,
			[]modelStep{quick(list), slow(poll, 2*time.Second), quick(poll)},
			want{poll: followLate}},
		{"a quick class slow once is not late", false,
			[]modelStep{quick(list), quick(list), slow(list, 200*time.Millisecond), quick(list)},
			want{list: followKnown}},
		{"a late class that answers quickly long enough", false,
			append([]modelStep{quick(list), slow(poll, 200*time.Millisecond)}, repeat(60, quick(poll))...),
			want{poll: followKnown}},
		{"a large download streams", false,
			[]modelStep{quick(list), stream(big)},
			want{big: followStreams, list: followKnown}},
		{"fixed: everything is followed, nothing learned", true,
			[]modelStep{stream(watch), slow(poll, 2*time.Second)},
			want{watch: followFixed, poll: followFixed, other: followFixed}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := newHostModel(tt.fixed)
			var now monoTime
			for _, s := range tt.steps {
				now += monoTime(time.Millisecond)
				m.noteHeadWait(s.headWait)
				m.noteAnswer(s.class, now, s.kind, s.headWait, hol)
			}
			for c, w := range tt.want {
				if got := m.follow(c); got != w {
					t.Errorf("follow(%d) = %v, want %v", c, got, w)
				}
			}
		})
	}
}

// TestHostModelBounded: a host's model holds at most maxClasses classes,
// forgetting the one seen least recently, and its tallies stay exact.
func TestHostModelBounded(t *testing.T) {
	m := newHostModel(false)
	var now monoTime
	for i := range 3 * maxClasses {
		now += monoTime(time.Millisecond)
		kind := answerBounded
		if i%3 == 0 {
			kind = answerStream
		}
		m.noteAnswer(routeClass(i), now, kind, time.Millisecond, time.Second)
	}
	if n := len(m.classes); n != maxClasses {
		t.Fatalf("%d classes, want %d", n, maxClasses)
	}
	streams := 0
	for _, s := range m.classes {
		if s.last == answerStream {
			streams++
		}
	}
	if streams != m.streams {
		t.Errorf("streams tally %d, want %d", m.streams, streams)
	}
	if got := m.follow(routeClass(0)); got != followUnseen {
		t.Errorf("the oldest class: %v, want forgotten (%v)", got, followUnseen)
	}
	if got := m.follow(routeClass(3*maxClasses - 1)); got != followKnown {
		t.Errorf("the newest class: %v, want %v", got, followKnown)
	}
}

// TestHostModelChanged: noteAnswer reports a change of verdict, and only
// then (the Observer's RouteLearned).
func TestHostModelChanged(t *testing.T) {
	m := newHostModel(false)
	var got []string
	for i, s := range []struct {
		kind answerKind
		wait time.Duration
	}{{answerBounded, time.Millisecond}, {answerBounded, time.Millisecond}, {answerStream, time.Millisecond}, {answerStream, 0},
		{answerBounded, 3 * time.Second}, {answerBounded, 3 * time.Second}, {answerBounded, 3 * time.Second}, {answerBounded, 3 * time.Second},
		{answerBounded, 3 * time.Second}, {answerBounded, 3 * time.Second}, {answerBounded, 3 * time.Second}, {answerBounded, 3 * time.Second},
		{answerStream, 0}} {
		if m.noteAnswer(7, monoTime(i), s.kind, s.wait, time.Second) {
			got = append(got, m.follow(7).String())
		}
	}
	if want := []string{"bounded", "stream", "bounded", "late", "stream"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("changes %q, want %q", got, want)
	}
}

func BenchmarkClassOf(b *testing.B) {
	req, _ := http.NewRequest(http.MethodGet, "http://h/api/v1/namespaces/ns/pods/web-7d9f?watch=1&resourceVersion=12", nil)
	req.Header.Set("Accept", "application/json")
	for b.Loop() {
		classOf(req, http.MethodGet)
	}
}

// TestHostModelNoHeadOfLineTimeout: with HeadOfLineTimeout disabled (a
// negative value), lateness is the host's own: 20 usual waits, at least
// 50 ms.
func TestHostModelNoHeadOfLineTimeout(t *testing.T) {
	m := newHostModel(false)
	for i, s := range []struct {
		c    routeClass
		wait time.Duration
	}{{1, 2 * time.Millisecond}, {1, 2 * time.Millisecond}, {2, 60 * time.Millisecond}, {3, 40 * time.Millisecond}} {
		m.noteHeadWait(s.wait)
		m.noteAnswer(s.c, monoTime(i), answerBounded, s.wait, -1)
	}
	for c, want := range map[routeClass]followVerdict{1: followKnown, 2: followLate, 3: followKnown} {
		if got := m.follow(c); got != want {
			t.Errorf("follow(%d) = %v, want %v", c, got, want)
		}
	}
}
