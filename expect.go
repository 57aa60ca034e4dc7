// This file implements "Expect: 100-continue" (RFC 9110 §10.1.1) as
// net/http's Transport does (Request.write, persistConn.readResponse and
// waitForContinue): the writer flushes the request head, then waits for the
// connection's reader to see a 100 (send the body), a final status (send the
// body unless the connection is closing), or ExpectContinueTimeout (send the
// body). Such requests are never pipelined (request.pipelineable), so
// nothing waits behind the held body on the wire. The verdict passes once,
// from the reader to the writer, through the attempt's continueCh
// (continueOnce): no lock.

package pipelined

import (
	"context"
	"net/http"
	"time"

	"github.com/pipelined/pipelined/internal/h1"
)

// signalContinue tells a's writer, if it waits for a 100, whether to send
// the body. Only the first signal counts; it never blocks. It is called by
// the connection's reader.
func (a *attempt) signalContinue(send bool) {
	if a.continueCh == nil {
		return
	}
	a.continueOnce.Do(func() {
		if send {
			a.continueCh <- struct{}{}
		} else {
			close(a.continueCh)
		}
	})
}

// finalContinue signals a's writer once a's final response head arrived
// before any 100: as net/http, skip the body if the connection will close,
// otherwise send it to keep the connection usable.
func (a *attempt) finalContinue(resp *http.Response) {
	a.signalContinue(!(resp.Close || a.r.req.Close))
}

// waitForContinue returns the function writeRequest calls after flushing
// the head of a's request, or nil if a does not expect a 100. The function
// reports whether to send the body.
func (wr *connWriter) waitForContinue(a *attempt) func() bool {
	c := wr.c
	if a.continueCh == nil {
		return nil
	}
	d := c.t.opts.ExpectContinueTimeout
	return func() bool {
		if d <= 0 {
			return true // as net/http: zero means send the body at once
		}
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case _, ok := <-a.continueCh:
			return ok
		case <-timer.C:
			return true
		case <-c.closed:
			return false
		case <-a.r.ctx.Done():
			// The server may wait for a body that will not come: the
			// connection cannot be trusted any more (net/http closes it
			// on cancellation too).
			c.fail(context.Cause(a.r.ctx))
			return false
		}
	}
}

// errResetHeaderLimit is returned by an interim hook to have
// h1.ReadResponseHead reset its header budget: as net/http, once 1xx
// responses are delivered to ClientTrace.Got1xxResponse, the caller bounds
// their number, and MaxResponseHeaderBytes applies to each head alone.
var errResetHeaderLimit = h1.ErrResetHeaderLimit
