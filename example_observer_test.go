package pipelined_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"github.com/pipelined/pipelined"
)

// An Observer is a struct of hooks: set the ones you need. Hooks run in
// the transport's goroutines, outside its locks, and must not block: count,
// or hand the event to another goroutine. RequestDone runs just before
// RoundTrip returns. The otelpipelined module turns these events into
// OpenTelemetry metrics.
func ExampleObserver() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()

	var requests, resends, pipelinedSends, conns atomic.Int64
	obs := &pipelined.Observer{
		RequestQueued: func(ev pipelined.RequestEvent) {
			if ev.Resend != pipelined.ResendNone {
				resends.Add(1)
			}
		},
		RequestWritten: func(ev pipelined.RequestEvent) {
			if ev.Pipelined {
				pipelinedSends.Add(1)
			}
		},
		RequestDone: func(ev pipelined.RequestEvent) {
			requests.Add(1)
			if ev.Err != nil {
				log.Printf("%s %s failed after %d attempts (%v queued): %v",
					ev.Request.Method, ev.Host, ev.Attempt, ev.QueueTime, ev.Err)
			}
		},
		ConnOpened: func(pipelined.ConnEvent) { conns.Add(1) },
		ConnClosed: func(ev pipelined.ConnEvent) {
			if ev.Reason == pipelined.CloseError {
				log.Printf("connection %d to %s closed after %v: %v",
					ev.ID, ev.Addr, ev.Time.Sub(ev.Opened), ev.Err)
			}
		},
	}
	t := pipelined.NewTransport(pipelined.TransportOptions{Observer: obs})
	defer t.Close()
	client := &http.Client{Transport: t}
	for range 3 { // one after another: one connection, nothing pipelined
		resp, err := client.Get(srv.URL)
		if err != nil {
			log.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	fmt.Printf("%d requests, %d connection, %d pipelined, %d sent again\n",
		requests.Load(), conns.Load(), pipelinedSends.Load(), resends.Load())
	// Output: 3 requests, 1 connection, 0 pipelined, 0 sent again
}

// HedgeHeadOfLine is for a service that reads mostly safe, quick requests
// and would rather send a few of them twice than wait behind a slow one.
// Its cost is counted here: the copies sent, and how many of them won
// (RequestDone reports the attempt whose answer the caller got).
func ExampleTransportOptions_hedgeHeadOfLine() {
	var copies, copiesWon atomic.Int64
	tr := pipelined.NewTransport(pipelined.TransportOptions{
		HedgeHeadOfLine: true,
		Observer: &pipelined.Observer{
			RequestQueued: func(ev pipelined.RequestEvent) {
				if ev.Resend == pipelined.ResendHedge {
					copies.Add(1)
				}
			},
			RequestDone: func(ev pipelined.RequestEvent) {
				if ev.Resend == pipelined.ResendHedge && ev.Err == nil {
					copiesWon.Add(1)
				}
			},
		},
	})
	defer tr.Close()
}
