package model

import (
	"net/http"
	"strings"
)

// This file holds the route class of a request (Class, ClassOf), the
// verdict a class's responses give (Verdict) and what one response showed
// (Kind). It owns no state: classes are values, their statistics live in
// a Host (guarded by its owner's hostPool.mu).

// A Class names the requests whose responses are expected to look
// alike: the same method, target host, path shape (a segment that holds a
// digit is an identifier, so that /items/8f3a… and /items/77c2… are one
// class), names of query parameters
// (in any order: ?watch=1 and ?limit=500 are two classes of one path), and
// Accept field. It is a 64-bit FNV-1a hash; a collision merges two classes,
// which costs at most a wrong guess that the next response corrects.
type Class uint64

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

// ClassOf returns req's route class. It allocates nothing.
func ClassOf(req *http.Request, method string) Class {
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
	return Class(h)
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

// Verdict says whether requests may be written behind a request,
// and why not.
type Verdict uint8

const (
	Known   Verdict = iota // its class's last response was bounded and quick
	Fixed                  // the model is off (TransportOptions.FixedPolicy)
	Unseen                 // its class has had no response on this host yet
	Streams                // its class's last response was a stream
	Late                   // its class's responses hold their heads late
)

// OK reports whether requests may be written behind.
func (v Verdict) OK() bool { return v <= Fixed }

// Alone reports whether the request itself is written behind nothing: its
// class is known to be slow for its own reasons, so nothing should wait
// for it, and it should wait for nothing it could be moved away from
// (which would send it twice).
func (v Verdict) Alone() bool { return v == Streams || v == Late }

func (v Verdict) String() string {
	switch v {
	case Known:
		return "bounded"
	case Fixed:
		return "fixed"
	case Unseen:
		return "unseen"
	case Streams:
		return "stream"
	case Late:
		return "late"
	}
	return "?"
}

// Kind is what a response showed of its class.
type Kind uint8

const (
	Bounded Kind = iota // read whole, its head in time
	Stream              // a stream: events, a watch, a download too large to read ahead
)

// classStats is what a host's responses to one route class showed.
type classStats struct {
	seen int64    // when its last response was noted
	last Kind     // its last response's kind
	wait estimate // of its bounded responses' head waits, in ns
	late bool     // wait is late for the host (lateAfter)
}
