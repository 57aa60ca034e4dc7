package pipelined

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pipelined/pipelined/internal/model"
)

func TestResendCauseString(t *testing.T) {
	for _, tc := range []struct {
		c    ResendCause
		want string
	}{
		{ResendNone, "none"},
		{ResendNotWritten, "not_written"},
		{ResendConnFailed, "conn_failed"},
		{ResendHeadOfLine, "head_of_line"},
		{ResendCause(99), "unknown"},
	} {
		if got := tc.c.String(); got != tc.want {
			t.Errorf("ResendCause(%d).String() = %q, want %q", int(tc.c), got, tc.want)
		}
	}
}

func TestCloseReasonString(t *testing.T) {
	for _, tc := range []struct {
		r    CloseReason
		want string
	}{
		{CloseIdleTimeout, "idle_timeout"},
		{CloseServer, "server_close"},
		{CloseKeepAliveEnd, "keep_alive_end"},
		{CloseBudget, "budget"},
		{CloseError, "error"},
		{CloseRequest, "request"},
		{CloseCanceled, "canceled"},
		{CloseUpgraded, "upgraded"},
		{CloseTransportClosed, "transport_closed"},
		{CloseIdleConnections, "close_idle_connections"},
		{CloseIdleLimit, "idle_limit"},
		{CloseDrained, "drained"},
		{CloseReason(0), "unknown"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("CloseReason(%d).String() = %q, want %q", int(tc.r), got, tc.want)
		}
	}
}

// TestObserverEventsConsistent runs a workload with resends (a server that
// closes every connection after its third answer, without notice) and
// checks the events the engine reports: each connection opened once,
// closed once, as often made active as idle (counting a close while
// active); each request queued, assigned and done.
func TestObserverEventsConsistent(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, serveEchoN(3))
	var mu sync.Mutex
	// Per connection: opened, closed, and active minus idle. Hooks run
	// outside the locks, so calls for one connection may arrive out of
	// order; what must hold is that counters derived from them are exact
	// once the calls have returned (observer.go).
	type counts struct{ opened, closed, active int }
	conns := map[uint64]*counts{}
	var problems []string
	var queued, assigned, done, resent int
	note := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	conn := func(ev ConnEvent, f func(*counts)) {
		mu.Lock()
		defer mu.Unlock()
		if ev.ID == 0 || ev.Protocol != "HTTP/1.1" || ev.Opened.IsZero() {
			note("connection event %+v", ev)
		}
		c := conns[ev.ID]
		if c == nil {
			c = new(counts)
			conns[ev.ID] = c
		}
		f(c)
	}
	obs := &Observer{
		RequestQueued: func(ev RequestEvent) {
			mu.Lock()
			queued++
			if ev.Resend != ResendNone {
				resent++
			}
			mu.Unlock()
		},
		RequestAssigned: func(ev RequestEvent) {
			mu.Lock()
			assigned++
			if ev.ConnID == 0 || ev.InFlight < 1 {
				note("assigned %+v", ev)
			}
			mu.Unlock()
		},
		RequestDone: func(ev RequestEvent) {
			mu.Lock()
			done++
			if ev.Err != nil || ev.Status != 200 || ev.Attempt < 1 || ev.Start.IsZero() {
				note("done %+v", ev)
			}
			mu.Unlock()
		},
		ConnOpened: func(ev ConnEvent) { conn(ev, func(c *counts) { c.opened++ }) },
		ConnActive: func(ev ConnEvent) { conn(ev, func(c *counts) { c.active++ }) },
		ConnIdle:   func(ev ConnEvent) { conn(ev, func(c *counts) { c.active-- }) },
		ConnClosed: func(ev ConnEvent) {
			conn(ev, func(c *counts) {
				c.closed++
				if ev.Active {
					c.active--
				}
			})
		},
	}
	tr := NewTransport(TransportOptions{Observer: obs, PipelineConnsPerHost: 2})
	getEchoes(t, tr, srv, 100)
	tr.Close()
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	if done != 100 {
		t.Errorf("RequestDone %d times, want 100", done)
	}
	if queued != assigned || queued < 100 || resent != queued-100 {
		t.Errorf("queued %d, assigned %d, resent %d: want queued = assigned = 100 + resent", queued, assigned, resent)
	}
	for id, c := range conns {
		if *c != (counts{opened: 1, closed: 1}) {
			t.Errorf("connection %d: %+v, want opened and closed once, as often active as idle", id, *c)
		}
	}
}

func TestCloseReason(t *testing.T) {
	tests := []struct {
		err     error
		retired CloseReason
		want    CloseReason
	}{
		{ErrTransportClosed, 0, CloseTransportClosed},
		{errUpgraded, 0, CloseUpgraded},
		{context.Canceled, 0, CloseCanceled},
		{context.DeadlineExceeded, 0, CloseCanceled},
		{errRequestCanceled, 0, CloseCanceled}, // Request.Cancel
		{errDrainTooLong, 0, CloseCanceled},
		{ErrResponseHeaderTimeout, 0, CloseError},
		{errIdleClosed, 0, CloseServer},
		{errIdleTimeout, CloseIdleTimeout, CloseIdleTimeout},
		{errKeepAliveTimeout, CloseKeepAliveEnd, CloseKeepAliveEnd},
		{errClosedIdle, CloseIdleConnections, CloseIdleConnections},
		{errTooManyIdle, CloseIdleLimit, CloseIdleLimit},
		{errConnClosing, CloseBudget, CloseBudget},
		{errConnClosing, CloseRequest, CloseRequest},
		{errConnClosing, CloseDrained, CloseDrained},
		{errConnClosing, 0, CloseServer},
		{io.EOF, 0, CloseError},
	}
	for _, tt := range tests {
		if got := closeReason(tt.err, tt.retired); got != tt.want {
			t.Errorf("closeReason(%v, %v) = %v, want %v", tt.err, tt.retired, got, tt.want)
		}
	}
}

// TestCloseReasonTransportClosed: Close ends an idle connection with
// CloseTransportClosed, never with the reason its reader then sees (the
// connection closed under it, as if by the server).
func TestCloseReasonTransportClosed(t *testing.T) {
	verifyNoLeaks(t)
	srv := newRawServer(t, serveEcho)
	for i := range 100 {
		reasons := make(chan CloseReason, 1)
		tr := NewTransport(TransportOptions{Observer: &Observer{
			ConnClosed: func(ev ConnEvent) { reasons <- ev.Reason },
		}})
		getEchoes(t, tr, srv, 1)
		waitFor(t, "an idle connection", func() bool { return tr.Stats()["http://"+srv.addr].Idle == 1 })
		tr.Close()
		if got := <-reasons; got != CloseTransportClosed {
			t.Fatalf("round %d: close reason %v, want %v", i, got, CloseTransportClosed)
		}
	}
}

// TestRouteLearned: the Observer hears of each change of a route class's
// verdict, with the request that changed it, outside every lock: the hook
// may call Stats.
func TestRouteLearned(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/watch" {
			// An event, then nothing until the client leaves.
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: x\n\n")
			http.NewResponseController(w).Flush()
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "{}")
	}))
	defer srv.Close()
	var mu sync.Mutex
	var got []string
	var tr *Transport
	obs := &Observer{RouteLearned: func(e RouteEvent) {
		routes := tr.Stats()["http://"+e.Addr].Model.Routes
		mu.Lock()
		got = append(got, fmt.Sprintf("%s %s %d", e.Request.URL.Path, e.Verdict, routes))
		mu.Unlock()
	}}
	tr = newTestTransport(t, TransportOptions{Observer: obs})
	watch := func() *http.Response {
		t.Helper()
		resp, err := get(t, tr, srv.URL+"/watch")
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := readEvent(bufio.NewReader(resp.Body)); err != nil || ev != "data: x" {
			t.Fatalf("event %q, %v", ev, err)
		}
		return resp
	}
	// A watch, two GETs beside it (on a connection of their own), the
	// watch closed (and its connection with it), and a watch again: the
	// host's pool, and its model, stay with the GETs' connection.
	w := watch()
	for _, path := range []string{"/items/1", "/items/2"} {
		if _, err := getBody(context.Background(), tr, srv.URL+path); err != nil {
			t.Fatal(err)
		}
	}
	w.Body.Close()
	w = watch()
	defer w.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"/watch stream 1", "/items/1 bounded 2"}; !slices.Equal(got, want) {
		t.Errorf("RouteLearned: %q, want %q", got, want)
	}
	m := tr.Stats()[srv.URL].Model
	if !m.Learning || m.Routes != 2 || m.StreamRoutes != 1 || m.LateRoutes != 0 || !m.Pipelining || m.UsualHeadWait <= 0 {
		t.Errorf("Stats().Model = %+v, want learning, 2 routes, 1 of them a stream, pipelining", m)
	}
}

// TestHostLearned: Observer.HostLearned reports each change of the host's
// decision, outside our locks (it calls Stats): a host that drops what is
// pipelined falls back; the next answer after the fallback's end finds
// the host pipelined again, and the next pipelined burst falls back again.
func TestHostLearned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := pipelineHandlingServer(func(net.Conn, *http.Request) bool { return false }) // drops what is pipelined
		var mu sync.Mutex
		var got []string
		var tr *Transport
		o := &Observer{HostLearned: func(e HostEvent) {
			_ = tr.Stats() // no lock of ours is held
			mu.Lock()
			defer mu.Unlock()
			got = append(got, fmt.Sprintf("%v %q", e.Pipelining, e.Reason))
			if e.Host != "http://mem.test:80" || e.Addr != "mem.test:80" {
				t.Errorf("event for %q (%q), want http://mem.test:80 (mem.test:80)", e.Host, e.Addr)
			}
		}}
		tr = NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 1, PipelineDepth: 4, Observer: o})
		defer tr.Close()
		burst := func(n int) {
			var chs []<-chan string
			for i := range n {
				chs = append(chs, memGet(tr, fmt.Sprintf("/%d", i)))
			}
			for _, ch := range chs {
				<-ch
			}
		}
		burst(1) // the route's answers are known: the next bursts are pipelined
		burst(4)
		time.Sleep(model.VerdictFor + time.Second)
		burst(1)
		burst(4)
		want := []string{`false "fallback"`, `true ""`, `false "fallback"`}
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(got, want) {
			t.Errorf("host events %q, want %q", got, want)
		}
	})
}
