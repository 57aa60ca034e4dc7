package model

import (
	"time"
)

// This file holds the Host type: its fields, its constructor and clock,
// its route classes' verdicts (Follow, NoteResponse) and the accessors its
// owner reads. A Host's state is owned by its host's pool and guarded by
// hostPool.mu; the type itself takes no lock.

// Host is one host's model: its route classes, and the host-wide
// estimates (tuning.go) every other decision reads. It is not safe for
// concurrent use: its owner, the host's pool, guards it with hostPool.mu.
// Its zero value learns, with no read-ahead budget (New gives one).
type Host struct {
	// clock is the model's clock (time.Now if nil; tests inject a fake
	// one). It is read only where a verdict with an end is in force or
	// is given, so that a host with none costs no clock read.
	clock func() time.Time

	fixed   bool // learns nothing: every class may be followed
	classes map[Class]*classStats
	streams int // classes whose last response was a stream
	lates   int // classes whose last response was late

	rtt   time.Duration // the shortest successful dial: about a round trip
	heads headWaits
	order serviceOrder
	body  estimate // of the responses' body sizes, in bytes
	dup   float64  // the duplicate budget

	// proven: since the model began or its last fallback, a request
	// written together with the one ahead was responded to unprompted
	// (attempt.proves); until then one request at a time is pipelined,
	// behind a head (scheduler.go, probeLocked). probeCopied: a copy of a
	// stalled probe was sent since (holprotect.go, lateHead): one per such
	// time, whatever came of it.
	proven, probeCopied bool
	failures            []time.Time // of the last pipeline failures
	fallbackUntil       time.Time   // the depth fallback's end

	budget Budget // requests its server responds to per connection

	// pipelineBytes is how many bytes of responses a connection holds
	// in flight (bytesDepth): margin read-ahead buffers.
	pipelineBytes int
}

// New returns a host's model: one that learns nothing if fixed
// (TransportOptions.FixedPolicy), and whose responses are read ahead into
// buffers of up to readAhead bytes each (bytesDepth).
func New(fixed bool, readAhead int) Host {
	return Host{fixed: fixed, pipelineBytes: margin * readAhead}
}

// Now reads the model's clock.
func (m *Host) Now() time.Time {
	if m.clock != nil {
		return m.clock()
	}
	return time.Now()
}

// Fixed reports whether the model learns nothing
// (TransportOptions.FixedPolicy).
func (m *Host) Fixed() bool { return m.fixed }

// Follow returns whether requests may be written behind one of class c.
func (m *Host) Follow(c Class) Verdict {
	if m.fixed {
		return Fixed
	}
	s := m.classes[c]
	switch {
	case s == nil:
		return Unseen
	case s.last == Stream:
		return Streams
	case s.late:
		return Late
	}
	return Known
}

// LateAfter is how long a head may wait before it is late: 20 of the
// host's usual waits, at least 50 ms (headWaits), and never longer than
// HeadOfLineTimeout (hol; 0 or less: disabled), after which requests
// behind it are moved anyway.
// Before the host's first head wait is known, only hol counts.
func (m *Host) LateAfter(hol time.Duration) time.Duration {
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

// NoteResponse records a response of class c at now (a monotonic time in
// ns, only compared with others of the same Host): its kind, and, if its
// request was at the head of its connection, how long it held the head
// (headWait; 0 if unknown). hol is the Transport's HeadOfLineTimeout. It
// reports whether the class's verdict changed. (Every response's head wait
// is noted in heads as well, by NoteHeadWait, once per response.)
func (m *Host) NoteResponse(c Class, now int64, kind Kind, headWait, hol time.Duration) (changed bool) {
	if m.fixed {
		return false
	}
	before := m.Follow(c)
	s := m.classes[c]
	if s == nil {
		if m.classes == nil {
			m.classes = make(map[Class]*classStats)
		}
		if len(m.classes) >= maxClasses {
			m.evict()
		}
		s = &classStats{}
		m.classes[c] = s
	} else {
		m.count(s, -1)
		if s.last == Stream && kind == Bounded {
			// A stream's class responded whole (a watch that ended soon
			// after its start, a 410 Gone): unseen again, so that the
			// next request, likely a stream again, has nothing written
			// behind it until a response shows what it is. Taken as
			// bounded at once, the next restart of a Kubernetes watch
			// had GETs behind it until HeadOfLineTimeout.
			delete(m.classes, c)
			return m.Follow(c) != before
		}
	}
	s.seen = now
	s.last = kind
	// A stream's head says nothing of its length: only a bounded response's
	// wait counts.
	if kind == Bounded && headWait > 0 {
		s.wait.addDuration(headWait)
	}
	s.late = s.wait.n > 0 && s.wait.duration() >= m.LateAfter(hol)
	m.count(s, 1)
	return m.Follow(c) != before
}

// NoteHeadWait records how long a response held its connection's head.
func (m *Host) NoteHeadWait(wait time.Duration) {
	if !m.fixed {
		m.heads.note(wait)
	}
}

// count adds d to the tallies of s's verdict.
func (m *Host) count(s *classStats, d int) {
	switch {
	case s.last == Stream:
		m.streams += d
	case s.late:
		m.lates += d
	}
}

// evict forgets the class seen least recently.
func (m *Host) evict() {
	var oldest Class
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
