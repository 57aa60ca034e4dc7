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
// is not, until it answers bounded again. Whether it is late, a moving
// average of its head waits decides, weighted as the host's usual wait is
// (usualWaitWeight), its first answer setting it: a long poll is late from
// its first answer on, and a quick route that was slow once on a busy
// machine is not (on one answer alone, 200 hosts at 1 ms under load
// flipped routes to late and back several times a second, each flip a dial).

// A routeClass names the requests whose answers are expected to look
// alike: the same method, target host, path shape (a segment that holds a
// digit, or is longer than idSegmentLen, is an identifier, so that
// /items/8f3a… and /items/77c2… are one class), names of query parameters
// (in any order: ?watch=1 and ?limit=500 are two classes of one path), and
// Accept field. It is a 64-bit FNV-1a hash; a collision merges two classes,
// which costs at most a wrong guess that the next answer corrects.
type routeClass uint64

// idSegmentLen: a path segment at least this long is an identifier even
// without a digit (base64 and word-list ids). Names of collections and
// actions are shorter.
const idSegmentLen = 24

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
// the name of a collection or an action.
func isIDSegment(seg string) bool {
	if len(seg) >= idSegmentLen {
		return true
	}
	for i := 0; i < len(seg); i++ {
		if '0' <= seg[i] && seg[i] <= '9' {
			return true
		}
	}
	return false
}

// maxClasses bounds a host's model: a crawler's or a proxy's pool sees
// unbounded paths, and a class not seen lately is the first to go.
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
	seen monoTime      // when its last answer was noted
	last answerKind    // its last answer's kind
	wait time.Duration // moving average of its bounded answers' head waits; 0 until one
	late bool          // wait is late for the host (lateAfter)
}

// hostModel is one host's model: its route classes, and how long its
// answers hold their connections' heads.
type hostModel struct {
	fixed   bool // learns nothing: every class may be followed
	classes map[routeClass]*classStats
	heads   headWaits
	streams int // classes whose last answer was a stream
	lates   int // classes whose last answer was late
}

func newHostModel(fixed bool) hostModel {
	return hostModel{fixed: fixed}
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
	case m.heads.usual == 0:
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
	}
	s.seen = now
	s.last = kind
	// A stream's head says nothing of its length: only a bounded answer's
	// wait counts.
	if kind == answerBounded && headWait > 0 {
		if s.wait == 0 {
			s.wait = headWait
		} else {
			s.wait += time.Duration(float64(headWait-s.wait) * usualWaitWeight)
		}
	}
	s.late = s.wait >= m.lateAfter(hol)
	m.count(s, 1)
	return m.follow(c) != before
}

// noteHeadWait records how long an answer held its connection's head.
func (m *hostModel) noteHeadWait(wait time.Duration) { m.heads.note(wait) }

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
