// This file holds the held write of a direct read (writeHeld): a request
// its caller will read the response to, held in the connection's
// bufio.Writer (and in wireCounter past its size) until the look at the
// socket, then written and waited for in one pass. Its methods are the
// writer side's (connWriter): they run holding the write token, which
// owns bw and heldDeadline.

package pipelined

import (
	"io"
	"net/http"
	"time"

	"github.com/pipelined/pipelined/internal/h1"
)

// mayHold reports whether a's request, claimed for a direct read, may be
// written by writeHeld: its body, if any, is in memory and small, it is
// not a CONNECT, and no hook of the user's is told when it is written
// (httptrace's WroteHeaderField, WroteHeaders and WroteRequest would fire
// as it is written into the buffer, before the look, and so for a request
// that the look may then keep from the socket; Observer.RequestWritten
// would fire only once the response had come).
func (wr *connWriter) mayHold(a *attempt, body io.ReadCloser) bool {
	c := wr.c
	r := a.r
	if r.method == http.MethodConnect || body != nil && !smallBody(r) {
		return false
	}
	if t := r.trace; t != nil && (t.WroteHeaderField != nil || t.WroteHeaders != nil || t.WroteRequest != nil) {
		return false
	}
	o := c.t.opts.Observer
	return o == nil || o.RequestWritten == nil
}

// writeHeld writes a's request, claimed for a direct read, in one pass
// with the look at the socket (quiet) and the wait for the response. A read
// right after writing a request seldom finds its response there: it finds
// the socket empty, and only then waits for it. Go's poller forgets a
// socket's readiness when a wait is prepared (runtime's pollReset), which
// is why a read cannot wait without trying first; so the look, which must
// come before the write, comes right after that preparation, the write
// after the look, and the wait after the write, all in one RawConn.Read
// (socket.Peeker.LookWrite): the look takes the place of the read that finds
// nothing, and a direct request costs the system calls of a minimal
// client. Nothing of the request reaches the socket before the look: it is
// held in bw (and in wc, past bw's size) until then. It returns what send
// returns.
func (wr *connWriter) writeHeld(a *attempt, h *h1.Head, body io.ReadCloser) error {
	c := wr.c
	r := a.r
	c.startDirect(a) // the context's watch covers the wait
	wr.heldDeadline = false
	if dl, ok := r.ctx.Deadline(); ok {
		// As write: a request head with a small body fits in the socket
		// buffer; the context's deadline bounds the write.
		c.conn.SetWriteDeadline(dl)
		wr.heldDeadline = true
	}
	wr.wc.mu.Lock()
	wr.wc.hold = true
	wr.wc.mu.Unlock()
	werr := writeRequest(wr.bw, &wr.lw, r, h, body, nil)
	quiet := true
	if werr == nil {
		// Written but for the flush: the header timer (a read deadline)
		// must run through the wait.
		c.armHeaderTimeout(a)
		quiet, werr = c.peek.LookWrite()
	} else {
		wr.dropHeld() // a partial request never reaches the socket
	}
	switch {
	case werr == nil && !quiet:
		if c.peek.SawPeer() {
			c.peerEnded()
		}
		wr.endHeldWrite()
		return wr.unsendHeld(a)
	case werr != nil:
		wr.endHeldWrite()
		<-wr.writeLock
		a.written.Store(false)
		wr.writeFailed(a, werr, nil)
	default:
		// Written: flushHeld released the write token, so that requests
		// may be written behind a while it waits (their responses are the
		// reader goroutine's, handBack).
		a.written.Store(true)
	}
	c.readDirect(a)
	return nil
}

// flushHeld ends writeHeld's hold and flushes the request, from within
// the look (socket.Peeker.LookWrite). Once it is written, the write token is
// released before the wait for the response.
func (wr *connWriter) flushHeld() error {
	err := wr.wc.release(true)
	if err == nil {
		err = wr.bw.Flush()
	}
	if err != nil {
		return err // writeHeld settles it, holding the token
	}
	wr.endHeldWrite()
	<-wr.writeLock
	return nil
}

// endHeldWrite ends writeHeld's write, before the write token is
// released: it undoes the write deadline.
func (wr *connWriter) endHeldWrite() {
	c := wr.c
	if wr.heldDeadline {
		wr.heldDeadline = false
		c.conn.SetWriteDeadline(time.Time{})
	}
}

// dropHeld ends writeHeld's hold and drops what bw and wc hold.
func (wr *connWriter) dropHeld() {
	wr.wc.release(false)
	wr.bw.Reset(&wr.wc)
}

// unsendHeld undoes writeHeld when the socket was not quiet, or could not
// be looked at (closed, or a's context cancelled): nothing of a's request
// reached it. As in claimReader, the connection takes no more requests and
// its reader goroutine reads what came; a goes elsewhere (errNotWritten), or
// has its outcome already if the connection failed meanwhile.
func (wr *connWriter) unsendHeld(a *attempt) error {
	c := wr.c
	wr.dropHeld()
	c.disarm(a)
	c.holStop()
	c.mu.Lock()
	settled := c.dead // fail delivered a's outcome
	if !settled && len(c.fifo) == 1 && c.fifo[0] == a {
		c.fifo[0] = nil
		c.fifo = c.fifo[:0]
	}
	c.mu.Unlock()
	c.stopWriting()
	<-wr.writeLock
	c.directing.Store(nil)
	c.endDirectWatch()
	c.handBack(rdReader)
	if settled {
		return nil
	}
	return errNotWritten
}
