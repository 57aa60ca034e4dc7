package pipelined_test

import (
	"log"
	"sync/atomic"

	"github.com/pipelined/pipelined"
)

// An Observer is a struct of hooks: set the ones you need. Hooks run in
// the transport's goroutines, outside its locks, and must not block: count,
// or hand the event to another goroutine. Install it with
// pipelined.NewTransport(pipelined.TransportOptions{Observer: obs}).
// The otelpipelined module turns these events into OpenTelemetry metrics.
func ExampleObserver() {
	var requests, resends, pipelinedSends atomic.Int64
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
		ConnClosed: func(ev pipelined.ConnEvent) {
			if ev.Reason == pipelined.CloseError {
				log.Printf("connection %d to %s closed after %v: %v",
					ev.ID, ev.Addr, ev.Time.Sub(ev.Opened), ev.Err)
			}
		},
	}
	tr := pipelined.NewTransport(pipelined.TransportOptions{Observer: obs})
	defer tr.Close()
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
