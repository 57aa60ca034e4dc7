// This file holds a response body's stream (bodyStream): the copy of one
// body from the connection into its buffer by the holder of the read
// turn, whether a chunked body became a stream (waiting, ended and the
// context watch, under bodyStream.mu), and the bounded wait for the rest
// of a body its caller closed early (earlyClose, atomics).

package pipelined

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pipelined/pipelined/internal/h1"
	"github.com/pipelined/pipelined/internal/model"
)

// bodyStream copies one response body from the connection into its body
// buffer.
//
// A chunked body may be a stream (server-sent events, a watch) or a
// bounded response that its server did not measure first (net/http's server
// chunks any body over 2 KiB written without a Content-Length, and so do
// Node's res.write and nginx's gzip). Taken for a stream at its first read
// from the network, as an open body is, every such response held its
// connection while it arrived: nothing was pipelined behind it, and at 16
// and 64 KiB from a Go server pipelined ran level with net/http, where the
// same bodies with a Content-Length ran 1.7-1.9 times faster. So a chunked
// body is tentative: it is read ahead whole, as a body of known length up
// to maxBufferedBody is, and requests may go behind it, until it shows
// itself a stream (becomeStream): it grows past maxBufferedBody, or
// nothing of it arrives for gap (attempt.streamGap, a few round trips:
// what a bulk transfer's segments never leave between them). Requests go
// behind it only once the host's chunked responses have proven bounded
// (hostPool.tentative); what is behind it when it turns out a stream
// waits for its end or HeadOfLineTimeout, as behind any stream.
//
// mu guards waiting, ended and stopCtx, which the stream verdict (its
// timer's goroutine) and the reader share; lock order: bodyStream.mu,
// then holGuard.mu, then hostPool.mu (docs/design.md).
type bodyStream struct {
	c *pconn
	a *attempt
	b *body
	// src is the body on the connection: lr of known length, cr chunked,
	// or c.br itself until the connection closes. Whoever holds the read
	// turn reads it: the reader, or once the body is a stream, its caller
	// (read).
	src io.Reader
	lr  *io.LimitedReader
	cr  *h1.ChunkedReader
	// open: the end is not in sight (chunked, until close, or longer than
	// maxBufferedBody). Its first read from the network makes it a stream.
	open bool
	// tentative: a chunked body read ahead until it shows itself a stream
	// (see above); its first read from the network starts its timers.
	tentative bool
	timed     bool         // startTimer ran
	early     *earlyClose  // a known remainder's wait, once it comes from the network
	got       atomic.Int64 // bytes of a tentative body read so far
	seen      int64        // got at the verdict timer's last run (its goroutine only)
	verdict   *time.Timer  // a tentative body's stream verdict (checkStream)
	// held: the caller has the response (its attempt was not abandoned
	// before the response came): a cancellation is the caller leaving it.
	held bool

	mu      sync.Mutex
	waiting bool        // the body is a stream (startWaiting or becomeStream ran)
	ended   bool        // stop ran
	stopCtx func() bool // stops the context watch
}

// pump copies the body until its end. Once the body is a stream, it
// lends the rest to the caller (body.lend), who reads it from the
// connection itself: the reader's copy through the body's buffer, and its
// wake-up of the caller per piece, cost a large download a sixth more CPU
// than net/http's reads, and twice its time beside other requests.
func (s *bodyStream) pump() error {
	c, src, lr, cr := s.c, s.src, s.lr, s.cr
	switch {
	case s.open:
		c.nr.onRead = s.startWaiting
	case s.tentative:
		c.nr.onRead = s.startTentative
	default:
		c.nr.onRead = s.startTimer
	}
	defer func() { c.nr.onRead = nil }()
	for {
		if cr != nil {
			// The next chunk's size line first: a body that has just
			// filled its buffer may have ended, and needs no room to
			// say so.
			more, err := cr.More()
			if err != nil {
				return unexpected(err)
			}
			if !more {
				return nil
			}
		}
		var sp []byte
		open := true
		if s.isStream() {
			var err error
			var ended bool
			if ended, open, err = s.b.lend(s); ended {
				return err
			}
		} else {
			sp, open = s.b.space()
		}
		if !open {
			return net.ErrClosed // closed under the body (fail): its cause stands
		}
		if sp == nil {
			return c.drain(lr, cr) // closed early by the caller
		}
		n, err := src.Read(sp)
		s.b.commit(n)
		if s.tentative && s.got.Add(int64(n)) > maxBufferedBody && !s.isStream() {
			// Larger than any body read whole: read on as a stream, as
			// one of known length this large is.
			s.becomeStream(false)
		}
		if done, err := s.took(err); done {
			return err
		}
	}
}

// read is the stream's source for its caller (body.lend): it reads the
// body's next bytes from the connection into p.
func (s *bodyStream) read(p []byte) (int, bool, error) {
	n, err := s.src.Read(p)
	done, err := s.took(err)
	return n, done, err
}

// took judges a read of the body that returned err: whether the body
// ended, and if so with which outcome.
func (s *bodyStream) took(err error) (bool, error) {
	lr := s.lr
	switch {
	case err == io.EOF:
		if lr != nil && lr.N > 0 {
			return true, io.ErrUnexpectedEOF
		}
		return true, nil
	case err != nil:
		return true, unexpected(err)
	}
	return lr != nil && lr.N == 0, nil
}

// startWaiting runs before the first read from the network of an open
// body: the body is a stream now. It holds its connection (nothing new is
// placed behind it; what is behind it and safe moves after the
// head-of-line timeout), and its request's cancellation closes the
// connection, as with net/http, so that the server learns at once.
func (s *bodyStream) startWaiting() {
	s.watch()
	s.mu.Lock()
	s.streamLocked()
	s.c.holStartStream(s.a)
	closed := s.onCloseLocked()
	s.mu.Unlock()
	if closed != nil {
		// Closed while the reader was on its way to the network: the
		// read it is about to make may never return.
		closed()
	}
}

// streamLocked makes the body a stream: its connection takes nothing new
// until it ends, and its request's cancellation closes the connection
// (since the body's first read from the network if its caller has it:
// watch). s.mu is held.
func (s *bodyStream) streamLocked() {
	s.waiting = true
	c, a := s.c, s.a
	g := &c.hol
	g.mu.Lock() // holFire reads streamed under it
	a.streamed = true
	g.mu.Unlock()
	c.ev.streaming(c, a)
	if ctx := a.r.ctx; s.stopCtx == nil && ctx.Done() != nil {
		s.stopCtx = context.AfterFunc(ctx, func() { c.fail(context.Cause(ctx)) })
	}
}

// watch makes the cancellation of the body's request close the
// connection from the body's first read from the network until its end,
// if its caller has the response (held), as net/http closes it (its
// readLoop watches the request's context until the body's EOF): the
// server learns at once that nobody reads on, and nothing is read for
// nobody. A rest already in hand (the body read to its end) keeps the
// connection; the drain of a body closed early and nearly read
// (earlyClose) is for Close, not for a cancellation. It runs once, in the
// reader goroutine, at the body's first read from the network
// (startTimer, startWaiting; stop runs in the same goroutine, later), and
// registers the watch outside s.mu: AfterFunc calls the context's
// methods, which may be the user's.
func (s *bodyStream) watch() {
	ctx := s.a.r.ctx
	if !s.held || ctx.Done() == nil {
		return
	}
	stop := context.AfterFunc(ctx, s.cancelled)
	s.mu.Lock()
	s.stopCtx = stop
	s.mu.Unlock()
}

// cancelled closes the connection of a body whose request was cancelled
// before its end (watch). The safe requests pipelined behind it are sent
// again elsewhere (resendBehind), their responses not yet read; others fail
// with the connection, sent again only as retry.go allows.
func (s *bodyStream) cancelled() {
	s.mu.Lock()
	ended := s.ended
	s.mu.Unlock()
	if ended {
		return // the rest was in hand
	}
	s.c.resendBehind(false)
	s.c.fail(context.Cause(s.a.r.ctx))
}

// onCloseLocked installs what the caller's early Close of a stream does.
// If the caller has closed the body already, it returns what the close
// does now, to be run outside s.mu (fail reports to the pool); a tentative
// body's early close, set at its first read, has armed its own wait then.
// s.mu is held.
func (s *bodyStream) onCloseLocked() (closed func()) {
	c, a := s.c, s.a
	if s.lr == nil && s.cr == nil {
		// RFC 9112 §6.3: a body delimited by the connection's close
		// leaves nothing to reuse; closing it early closes the
		// connection at once.
		fail := func() { c.fail(errDrainTooLong) }
		if !s.b.setOnClose(fail) {
			return fail
		}
		return nil
	}
	wait := c.drainWait()
	if a.events {
		wait = model.LateMin // its end is not near; its server should learn soon
	}
	e := &earlyClose{c: c, a: a, wait: wait, held: s.held}
	switch {
	case s.b.setOnClose(e.closed):
		if s.early != nil {
			s.early.end() // replaced before its caller closed the body
		}
	case s.early != nil:
		return nil
	default:
		closed = e.closed
	}
	s.early = e
	return closed
}

// isStream reports whether the body became a stream.
func (s *bodyStream) isStream() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// startTentative runs before the first read from the network of a
// tentative body: the same timer as for a body read ahead whole (it may
// trickle), the same wait for the rest of it if its caller closes it
// early, and the stream verdict.
func (s *bodyStream) startTentative() {
	s.c.ev.tentative(s.c, s.a)
	s.startTimer()
	s.mu.Lock() // checkStream reads verdict under it
	s.verdict = time.AfterFunc(s.gap(), s.checkStream)
	s.mu.Unlock()
}

// gap is how long nothing of a tentative body may arrive before it is
// taken for a stream: attempt.streamGap (model.Host.StreamGap: margin
// round trips of its host, at least model.QuickWait).
func (s *bodyStream) gap() time.Duration {
	return s.a.streamGap
}

// checkStream is the stream verdict's timer: a tentative body that
// arrived on since its last run is given as long again; one of which
// nothing arrived is a stream. What is behind it already waits, as behind
// any stream, for its end or HeadOfLineTimeout (holFire): moved at once,
// a request's original still reaches a server that runs a connection's
// requests one at a time, which serves it after the stream, so that the
// copy waits a stream's time more for a connection (TestTimerStreamBurst:
// 1.8 s where net/http's first chunk came after 0.9 s).
func (s *bodyStream) checkStream() {
	if got := s.got.Load(); got != s.seen {
		s.seen = got
		s.mu.Lock()
		if !s.ended && !s.waiting {
			s.verdict.Reset(s.gap())
		}
		s.mu.Unlock()
		return
	}
	s.becomeStream(true)
}

// becomeStream makes a tentative body a stream, unless it ended or is one
// already; quiet: nothing of it came for its gap (a stream of events),
// rather than it grew too long to be read whole.
func (s *bodyStream) becomeStream(quiet bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.waiting {
		return
	}
	s.a.events = quiet // under s.mu, before the pool hears of the stream
	s.streamLocked()
	s.b.readAhead(maxReadAhead) // a stream's buffer, from now on
	// A tentative body closed early already has its early close armed
	// (startTimer): nothing to run.
	s.onCloseLocked()
}

// startTimer runs before the first read from the network of a body that
// is read ahead whole: it comes from the network, so it may trickle.
// Requests may be placed behind it meanwhile; if it is still arriving
// after HeadOfLineTimeout, as with a stream, the connection takes nothing
// new and the safe requests behind it move (holFire).
func (s *bodyStream) startTimer() {
	s.timed = true
	s.c.holStartStream(s.a)
	s.watch()
	s.early = &earlyClose{c: s.c, a: s.a, wait: s.c.drainWait(), held: s.held}
	s.early.watch(s.b)
}

func (s *bodyStream) stop() {
	s.mu.Lock()
	s.ended = true
	if s.stopCtx != nil {
		s.stopCtx()
	}
	waiting := s.waiting
	s.mu.Unlock()
	if s.verdict != nil {
		s.verdict.Stop()
	}
	if s.early != nil {
		s.early.end()
	}
	if waiting || s.timed {
		s.c.holStop()
	}
}

// earlyClose bounds the wait for the rest of a body that must come from
// the network, once its caller has closed it: we read and discard the
// rest (drain, up to maxDrain) so that the connection stays, but only if
// it comes within wait, as Go 1.27's net/http does (golang/go#77370; it
// waits 50 ms for any body). Ours waits drainWait for a body read ahead
// as bounded, or grown too long to be, whose connection may carry
// requests behind it, and model.LateMin for a stream of events, whose server
// should learn soon that nobody reads it. A request whose caller had its
// response and cancelled it gives its connection up at once, as with
// net/http (its watch, bodyStream.watch, may not have run yet); so does
// one abandoned before its response came, with nothing behind it (with
// requests behind, the rest is read for their sake): a server that stalls
// mid-body would otherwise hold the connection, and its reader, for ever.
type earlyClose struct {
	c    *pconn
	a    *attempt
	wait time.Duration              // set before it is installed
	held bool                       // the caller has the response (bodyStream.held)
	done atomic.Bool                // the body ended (bodyStream.stop)
	t    atomic.Pointer[time.Timer] // armed by closed
}

// closed runs in the caller's Close, before the body's end.
func (e *earlyClose) closed() {
	if ctx := e.a.r.ctx; ctx.Err() != nil && (e.held || !e.c.behind()) {
		e.c.resendBehind(false)
		e.c.fail(context.Cause(ctx))
		return
	}
	e.t.Store(time.AfterFunc(e.wait, func() {
		if !e.done.Load() {
			e.c.fail(errDrainTooLong)
		}
	}))
	if e.done.Load() { // ended meanwhile: stop may have missed the timer
		e.t.Load().Stop()
	}
}

// watch installs e as the body's early close; if the caller has closed it
// already, the read the reader is about to make may never return.
func (e *earlyClose) watch(b *body) {
	if !b.setOnClose(e.closed) {
		e.closed()
	}
}

// end runs when the body has ended, read in full or not.
func (e *earlyClose) end() {
	e.done.Store(true)
	if t := e.t.Load(); t != nil {
		t.Stop()
	}
}
