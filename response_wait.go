package pipelined

import (
	"time"

	"github.com/pipelined/pipelined/internal/model"
)

// This file holds when a request that could be pipelined dials instead
// (responseWait): the wait for the host's first response, or a burst's;
// a host far away; and whether the host gains from pipelining
// (gainsLocked). Everything here is guarded by hostPool.mu.

// responseWait is the state of the wait for the host's first response,
// or for a burst's. Its fields are guarded by hostPool.mu; its methods
// are called with hostPool.mu held.
type responseWait struct {
	pool *hostPool

	// First response (see model.FirstResponseWait): until the host has
	// responded to a request on this pool, a pipelineable request is not
	// written behind another while it could dial; once graceEnd has passed
	// without a response, it dials as to a serial host.
	answered   bool
	graceEnd   time.Time   // zero until the first connection is established
	graceTimer *time.Timer // dispatches the waiters at graceEnd, or at a burst's wait's end
	// A burst (see burstWait): a request was given a connection while the
	// host, having responded before, had nothing in flight, at burstStart, and
	// no response has come since. burstTimed: graceTimer is set for its end.
	burst      bool
	burstTimed bool
	burstStart monoTime
}

// answerLocked records a response of the host: the end of the wait for its
// first response, or for a burst's (model.FirstResponseWait, burstWaitLocked). A
// head whose body is chunked, of unknown length or long counts only once
// that body has ended: its connection is taken until then, and a stream
// does so for as long as it runs. Counted at its head, it let the
// requests of a burst of streams, waiting for a response while they could
// dial, be pipelined behind the streams of the first connections (16
// streams at once: a second wave after the first, where net/http dials 16
// connections).
func (rw *responseWait) answerLocked() {
	p := rw.pool
	if !p.answered {
		p.answered = true
		if p.graceTimer != nil {
			p.graceTimer.Stop()
		}
	}
	p.burst = false
}

// The first response. Until a host has responded once, nothing tells a fast
// server (where pipelining a burst saves connections at no cost) from one
// whose responses take long (where a burst pipelined over a few connections
// waits several service times, and net/http, dialing one connection per
// request, serves it in one). So a pipelineable request that would be
// written behind another, while it could dial (MaxConnsPerHost), waits
// unwritten instead: for a connection that becomes idle, or for the host's
// first response, after which it is pipelined as usual; and if no response
// comes within model.FirstResponseWait of the host's first connection, it dials, as
// net/http would, until the first response. A fast server near by costs a
// burst one round trip; a slow one, a few milliseconds on top of
// net/http's time; a server far away (a dial of model.QuickWait or more),
// nothing.

// A host far away. Until a host's first connection is up, the requests
// beyond the first wait for it: its dial time sets the wait for the first
// response (model.FirstResponseWait), and its protocol may be HTTP/2, which takes every
// request on one connection (canDialLocked). A host whose first dial has
// not made its way to the target (firstHop: TCP, or through a proxy)
// within farHop is far away, or slow to resolve: that wait would add a
// dial to net/http's time, and no response can come sooner than the round
// trip the dial shows. So the waiters dial at once, as net/http's
// do, and HTTP/2 connections found extra are closed (h2Dialed), as
// net/http's HTTP/2 pool closes them. A burst of 20 GETs over a 50 ms
// round trip waited one dial more than net/http over http, and two over
// https (a TCP dial, then TLS, to learn the protocol). (model.FarHop;
// under the race detector with 50 goroutines starting at once, a
// loopback connect took up to 70 ms.)

// farDialLocked ends the wait for the host's first connection (and the
// first response's, model.FirstResponseWait of a far host's dial) if a first hop has
// been under way for farHop: see farLocked. Until then it sets
// graceTimer to look again (startDialLocked sets it for the first look).
// The time is the hop's own, from its call, not the dial's: a dialing
// goroutine that a busy machine starts late is not far away.
func (rw *responseWait) farDialLocked() {
	p := rw.pool
	if p.learned || !p.graceEnd.IsZero() {
		return
	}
	now := monoNow()
	next := time.Duration(0)
	for d := range p.dials {
		if !d.hop.done.Load() {
			left := p.t.farHop - d.hop.pending(now)
			if left <= 0 {
				p.graceEnd = time.Now()
				return
			}
			if next == 0 || left < next {
				next = left
			}
		}
	}
	if next > 0 {
		p.armGraceLocked(next)
	}
}

// farLocked reports whether the host's first dial showed it far away
// before any dial succeeded (farDialLocked).
func (rw *responseWait) farLocked() bool {
	p := rw.pool
	return !p.learned && !p.graceEnd.IsZero()
}

// startGraceLocked starts the wait for the host's first response when its
// first connection is established, took being that connection's dial.
// With no wait, the dispatch that follows (joinUnlock) lets the waiters
// dial.
func (rw *responseWait) startGraceLocked(took time.Duration) {
	p := rw.pool
	if p.answered || !p.graceEnd.IsZero() {
		return
	}
	d := model.FirstResponseWait(took)
	p.graceEnd = time.Now().Add(d)
	if d > 0 {
		p.armGraceLocked(d)
	}
}

// armGraceLocked sets graceTimer to dispatch the waiters in d: at the end
// of the wait for the host's first response, or for a burst's. One timer
// serves both, so that Close stops whichever is pending.
func (rw *responseWait) armGraceLocked(d time.Duration) {
	p := rw.pool
	if p.graceTimer != nil {
		p.graceTimer.Reset(d)
		return
	}
	p.graceTimer = time.AfterFunc(d, func() {
		p.mu.Lock()
		p.dispatchLocked()
		p.mu.Unlock()
	})
}

// A burst is the first response's wait again: requests given connections
// while the host had nothing in flight, after a response or a pause of any
// length. Until one of them is responded to, a pipelineable request is not
// written behind another while it could dial: it waits unwritten for an
// idle connection or for the burst's first response, and dials if none comes
// within burstWait of the burst's start. A host that responded quickly before
// may be slow for this burst (a burst of slow GETs to Tomcat or Jetty,
// which run a connection's requests one at a time, after a quick one: 3-4
// times net/http's time when pipelined four deep at once). A fast server
// costs a burst's stacked requests one response's time.
func (rw *responseWait) burstWaitLocked() time.Duration {
	p := rw.pool
	return p.model.BurstWait()
}

// burstWaitingLocked reports whether a burst waits for its first response,
// setting graceTimer for the end of the wait once.
func (rw *responseWait) burstWaitingLocked() bool {
	p := rw.pool
	if !p.burst {
		return false
	}
	left := p.burstWaitLocked() - time.Duration(monoNow()-p.burstStart)
	if left <= 0 {
		return false
	}
	if !p.burstTimed {
		p.burstTimed = true
		p.armGraceLocked(left)
	}
	return true
}

// awaitsAnswerLocked reports whether the host has not responded yet and the
// wait for its first response is not over, or a burst waits for its first
// response: a request must not be pipelined while it could dial.
func (rw *responseWait) awaitsAnswerLocked() bool {
	p := rw.pool
	if p.model.Fixed() {
		return false
	}
	if !p.answered {
		return p.graceEnd.IsZero() || time.Now().Before(p.graceEnd)
	}
	return p.burstWaitingLocked()
}

// gainsLocked reports whether the host gains from pipelining, so that
// the pipelining threshold holds back the dials of pipelineable requests
// (as far as is known: a host that has not responded within its
// first-response wait is dialed like a serial one until it does).
func (rw *responseWait) gainsLocked() bool {
	p := rw.pool
	if p.model.Fixed() {
		return true // learns nothing: the pipelining threshold holds
	}
	if !p.answered && !p.graceEnd.IsZero() && !time.Now().Before(p.graceEnd) {
		return false
	}
	if p.burst && time.Duration(monoNow()-p.burstStart) >= p.burstWaitLocked() {
		return false // the burst had no response within its wait
	}
	return p.model.Gains()
}
