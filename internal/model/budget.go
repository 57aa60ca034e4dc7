package model

import (
	"time"
)

// This file holds the per-connection budget (Budget): how many requests a
// host's server serves on one connection, learned from its closes. A
// Budget is a field of a Host, guarded with it by hostPool.mu.

// The per-connection budget. A server that closes each connection after a
// number of requests (nginx's keepalive_requests, hypercorn and tinyproxy
// after one) is learned from its closes, so that a connection is given no
// more requests than it will serve, none written only to be sent again.
// A close it announces (Connection: close) with requests written behind,
// at the same count on two connections in a row, is the budget; one it
// does not announce, right after a response, at the same count twice in a
// row, is too, for VerdictFor: nothing tells that such a server would now
// serve more, its connections being closed at the budget, so it is
// learned again; a server that still closes costs a request sent again per
// connection until it has closed two in a row at the same count, and one
// whose closes had another cause is no longer held to it. A connection
// that responds to more disproves either.
//
// Its fields are exported for the owner's tests, which stage a learned
// budget (Host.Budget); the owner itself decides with the methods.
type Budget struct {
	N     int       // requests per connection; 0 if unknown
	Until time.Time // a budget learned from unannounced closes holds until then; zero for an announced one
	// Quiet is the count at which a connection was last closed without
	// notice; NoQuietUntil: a budget learned from such closes proved
	// wrong (a connection served more), so that those closes are not
	// the server's doing (a faulty network's resets): none is learned
	// again until then.
	Quiet        int
	NoQuietUntil time.Time
	CloseAt      int // the count at which the server last closed a connection it announced closing
}

// Budget returns the per-connection budget, as learned, expired or not
// (ConnBudget expires it): for the owner to note announced closes and
// unclosed connections, to read the count it just learned
// (NoteQuietClose), and for tests to stage one.
func (m *Host) Budget() *Budget { return &m.budget }

// ConnBudget returns the per-connection budget (0: none).
func (m *Host) ConnBudget() int {
	b := &m.budget
	if b.N > 0 && !b.Until.IsZero() && m.Now().After(b.Until) {
		b.N, b.Quiet, b.Until = 0, 0, time.Time{}
	}
	return b.N
}

// NoteAnnouncedClose records a close the server announced on the
// response at place, with requests written behind it.
func (b *Budget) NoteAnnouncedClose(place int) {
	if b.CloseAt == place {
		b.N, b.Until = place, time.Time{}
	}
	b.CloseAt = place
}

// NoteQuietClose records a connection the server closed without notice
// right after its answered-th response, reporting whether that made the
// budget.
func (m *Host) NoteQuietClose(answered int) (learned bool) {
	b := &m.budget
	if b.Quiet == answered && (b.N == 0 || answered < b.N) {
		if now := m.Now(); now.After(b.NoQuietUntil) {
			b.N, b.Until = answered, now.Add(VerdictFor)
			learned = true
		}
	}
	b.Quiet = answered
	return learned
}

// NoteServed records a connection that has responded to served requests: a
// count above one at which others closed without notice says that count
// is not the server's budget.
func (m *Host) NoteServed(served int) {
	b := &m.budget
	if b.Quiet > 0 && served > b.Quiet {
		b.Quiet = 0
	}
	if !b.Until.IsZero() && served > b.N {
		b.N, b.Until = 0, time.Time{}
		b.NoQuietUntil = m.Now().Add(VerdictFor)
	}
}

// NoteUnclosed records a connection given the announced budget of
// assigned requests that served them all without a close: the server
// would have served more than it announced, so the budget is learned
// again from the next close. (One learned from unannounced closes
// expires instead.)
func (b *Budget) NoteUnclosed(assigned int) {
	if b.N == assigned && b.Until.IsZero() {
		b.N = 0
	}
}

// learned reports whether b holds anything a new model would learn again
// at a cost.
func (b *Budget) learned() bool { return b.N > 0 || b.Quiet > 0 }
