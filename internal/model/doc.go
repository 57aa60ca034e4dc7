// Package model is the host model: what a host's responses teach the
// transport about the requests to come, and the decisions taken from it.
// Observations go in with their times (a response and what it showed of
// its route class, a head wait, a dial's round trip, a body's size, the
// order of pipelined responses, a pipeline failure, a close), decisions
// come out (may a request be written behind this one, the depth, dial or
// wait, how long a head, a probe or a body may wait, may a duplicate be
// sent, the per-connection budget, and why the host is not pipelined),
// and every tuning value of those decisions is declared here
// (docs/model.md lists them with their reasons).
//
// The package is pure: it takes no lock, starts no goroutine, does no I/O
// and imports nothing of the transport. A Host is not safe for concurrent
// use: its owner, the host's pool, guards it with hostPool.mu, and reads
// and writes it only under that lock.
//
// The question it answers is the one that decides what pipelining costs:
// may a request be written behind this one? A request written behind
// another waits for the whole response ahead of it, however short its own.
// So nothing is written behind a request whose response nobody has seen
// yet: its route class (Class) has had no response on this host, or its
// last response was a stream (server-sent events, a watch, a log follow, a
// download too large to read ahead) or held its connection's head late (a
// long poll). A request of a class known to stream or to be late is also
// written behind nothing (it takes a connection of its own, as with
// net/http), and no copy of it is ever sent: it is slow for its own
// reasons. A class whose last response was bounded and quick may be
// followed. The first request of a new class stalls nobody: what cannot be
// written behind it dials, up to MaxConnsPerHost, or takes another
// connection.
//
// Whether a class streams, its last response decides: a watch path that
// once returned a quick list is followed again; a list route that streamed
// once is not, until its response is bounded again. Whether it is late, an
// estimate of its head waits decides (the one decay rule, estimate), its
// first response setting it: a long poll is late from its first response
// on, and a quick route that was slow once on a busy machine is not (on
// one response alone, 200 hosts at 1 ms under load flipped routes to late
// and back several times a second, each flip a dial).
package model
