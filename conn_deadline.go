// This file holds a connection's read deadlines (readDeadline), under
// deadlineMu: the header timer of the oldest request still awaiting its
// response (ResponseHeaderTimeout, a read deadline), and the watch of a
// direct read's context, whose cancellation ends the read with a past
// deadline (startDirect, cancelDirect), kept from one direct read to the
// next.

package pipelined

import (
	"context"
	"sync"
	"time"
)

// readDeadline is what sets a connection's read deadline: the header
// timer (armHeaderTimeout, disarm) and the cancellation of a direct read
// (startDirect, cancelDirect, endDirectWatch). deadlineMu guards every
// field below it. c is the connection whose read deadlines they are.
type readDeadline struct {
	c *pconn

	deadlineMu sync.Mutex // guards armed and read-deadline changes
	armed      *attempt   // the attempt whose header timeout is running
	armedUntil time.Time  // the header deadline of armed

	// The attempt a caller reads directly while its context may be
	// cancelled, that context's Done channel, and whether it was
	// cancelled; the watch of a context (startDirect): the Done channel
	// it fires on, how to stop it, whether it is kept after the direct
	// read, the Done channel of the last one stopped, and whether the
	// connection is gone (no new watch).
	directA         *attempt
	directCtxDone   <-chan struct{}
	directCancelled bool
	watchDone       <-chan struct{}
	watchStop       func() bool
	watchKeep       bool
	lastDone        <-chan struct{}
	watchGone       bool
}

// armHeaderTimeout is called twice per attempt: once when it is fully
// written and once when it becomes the oldest request still awaiting its
// response on c. The second call starts the head-of-line timer and, if
// ResponseHeaderTimeout is set, the header timer, as a read deadline on the
// connection.
func (rdl *readDeadline) armHeaderTimeout(a *attempt) {
	c := rdl.c
	if a.arm.Add(1) != 2 {
		return
	}
	c.holStart(a)
	d := c.t.opts.ResponseHeaderTimeout
	if d <= 0 {
		return
	}
	rdl.deadlineMu.Lock()
	if !a.disarmed {
		rdl.armed = a
		rdl.armedUntil = time.Now().Add(d)
		if !rdl.directCancelled {
			c.conn.SetReadDeadline(rdl.armedUntil)
		}
	}
	rdl.deadlineMu.Unlock()
}

// disarm stops a's header timer, reporting whether it was running.
func (rdl *readDeadline) disarm(a *attempt) bool {
	c := rdl.c
	if c.t.opts.ResponseHeaderTimeout <= 0 {
		return false
	}
	rdl.deadlineMu.Lock()
	defer rdl.deadlineMu.Unlock()
	a.disarmed = true
	if rdl.armed == a {
		rdl.armed = nil
		if !rdl.directCancelled {
			c.conn.SetReadDeadline(time.Time{})
		}
		return true
	}
	return false
}

// startDirect starts the direct read of a: from here, a cancellation of
// a's context interrupts the wait for its response (cancelDirect).
//
// The context is watched with context.AfterFunc, which registers with the
// context's parent: under a lock the parent shares with every request
// derived from it, an allocation and a map insertion, and as much to stop
// it, for each request (a fifth of a direct request's own work when its
// callers share one context, as a service's workers often do). So a watch
// may be kept from one direct read to the next: callers that share a
// context (the same Done channel) twice running on the connection keep
// its watch until another context comes or the connection ends
// (endWatch), and it is then only pointed at the attempt being read. A
// watch of a context that each request has its own of (a Client.Timeout,
// a server's request) is stopped after its read, as before, so that it
// never fires for a request that is done.
func (rdl *readDeadline) startDirect(a *attempt) {
	c := rdl.c
	c.directing.Store(a)
	ctx := a.r.ctx
	done := ctx.Done()
	c.directWatched = done != nil
	if done == nil {
		return // a context that can never be cancelled needs no watch
	}
	rdl.deadlineMu.Lock()
	rdl.directA, rdl.directCtxDone = a, done
	kept := rdl.watchStop != nil && rdl.watchDone == done
	var old func() bool
	if !kept {
		old, rdl.watchStop, rdl.watchDone = rdl.watchStop, nil, nil
	}
	keep := done == rdl.lastDone
	gone := rdl.watchGone
	rdl.deadlineMu.Unlock()
	if kept {
		// The watch fires once, when done closes: if it closed before a
		// was pointed at, the watch is spent.
		select {
		case <-done:
			rdl.cancelDirect()
		default:
		}
		return
	}
	if old != nil {
		old()
	}
	if gone {
		return // closed: the read ends without a watch
	}
	// Registered outside deadlineMu: AfterFunc calls the context's
	// methods, which may be the user's. The function is the connection's
	// own (newPconn): a closure per watch would cost an allocation per
	// request whose context is its own (a Client.Timeout).
	stop := context.AfterFunc(ctx, c.onCancel)
	rdl.deadlineMu.Lock()
	if rdl.watchGone {
		rdl.deadlineMu.Unlock()
		stop()
		return
	}
	rdl.watchDone, rdl.watchStop, rdl.watchKeep = done, stop, keep
	rdl.deadlineMu.Unlock()
}

// cancelDirect interrupts the direct read under way if its context was
// cancelled (its Done channel is closed). It runs in a watch's goroutine
// (startDirect); a watch of another context, stopped too late, finds the
// read's own context alive and does nothing.
func (rdl *readDeadline) cancelDirect() {
	c := rdl.c
	rdl.deadlineMu.Lock()
	if rdl.directA != nil {
		select {
		case <-rdl.directCtxDone:
			rdl.directCancelled = true
			c.conn.SetReadDeadline(aLongTimeAgo)
		default:
		}
	}
	rdl.deadlineMu.Unlock()
}

func (rdl *readDeadline) directWasCancelled() bool {
	rdl.deadlineMu.Lock()
	defer rdl.deadlineMu.Unlock()
	return rdl.directCancelled
}

// endDirectWatch ends the context watch of a direct read (stopping it
// unless it is kept, startDirect) and undoes what a cancellation did to
// the read deadline, before the turn passes on.
func (rdl *readDeadline) endDirectWatch() {
	c := rdl.c
	if !c.directWatched {
		return
	}
	c.directWatched = false
	var stop func() bool
	rdl.deadlineMu.Lock()
	rdl.directA, rdl.directCtxDone = nil, nil
	if !rdl.watchKeep && rdl.watchStop != nil {
		stop, rdl.lastDone = rdl.watchStop, rdl.watchDone
		rdl.watchStop, rdl.watchDone = nil, nil
	}
	if rdl.directCancelled {
		rdl.directCancelled = false
		var d time.Time // the header deadline of the new head, if armed
		if rdl.armed != nil {
			d = rdl.armedUntil
		}
		c.conn.SetReadDeadline(d)
	}
	rdl.deadlineMu.Unlock()
	if stop != nil {
		stop()
	}
}

// endWatch stops a kept watch when the connection ends or leaves the pool
// (the reader goroutine's end), so that a long-lived context does not hold
// the connection, and lets no new watch start.
func (rdl *readDeadline) endWatch() {
	rdl.deadlineMu.Lock()
	rdl.watchGone = true
	stop := rdl.watchStop
	rdl.watchStop, rdl.watchDone, rdl.lastDone = nil, nil, nil
	rdl.deadlineMu.Unlock()
	if stop != nil {
		stop()
	}
}
