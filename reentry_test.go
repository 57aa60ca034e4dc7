package pipelined

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestHookReentry: every hook a caller can give the transport (each
// Observer hook, each httptrace.ClientTrace hook) may send a request to
// the same host through the same transport, and that request is
// answered: it never waits for the connection, read turn or write token
// of the request whose event the hook reports. Each hook sends one
// request per request it reports on (per event, for the Observer's
// connection events), to a new host, to a warm one (an idle connection
// rests), for ten requests at once, and where the hook's request is
// pipelined behind the one it reports on if it may (one connection carries
// pipelined requests), its answer read by its caller or by the
// connection's reader; every request has a deadline, so
// that a deadlock fails the row instead of hanging it.
func TestHookReentry(t *testing.T) {
	verifyNoLeaks(t)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/early":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
		case "/close":
			w.Header().Set("Connection", "close")
		}
		io.WriteString(w, r.URL.Path)
	})
	plain := httptest.NewServer(handler)
	defer plain.Close()
	secure := httptest.NewTLSServer(handler)
	defer secure.Close()
	secureTLS := secure.Client().Transport.(*http.Transport).TLSClientConfig

	// The kinds of outer request, each of which makes some hooks fire.
	const (
		get     = iota // GET / over http
		early          // GET /early: a 103 first
		expect         // POST /continue with Expect: 100-continue
		closing        // GET /close: the connection closes after it
		overTLS        // GET / over https
		byName         // GET / to localhost: a name to resolve
	)
	// newOnly: the hook fires only when a connection is dialed (not for
	// a warm host, whose connection is idle).
	type hook struct {
		name    string
		kind    int
		newOnly bool
		obs     func(o *Observer, fire func(*http.Request))
		trace   func(ct *httptrace.ClientTrace, fire func())
	}
	req := func(f func(*http.Request)) func(RequestEvent) { return func(ev RequestEvent) { f(ev.Request) } }
	conn := func(f func(*http.Request)) func(ConnEvent) { return func(ConnEvent) { f(nil) } }
	hooks := []hook{
		{name: "Observer.RequestQueued", obs: func(o *Observer, f func(*http.Request)) { o.RequestQueued = req(f) }},
		{name: "Observer.RequestAssigned", obs: func(o *Observer, f func(*http.Request)) { o.RequestAssigned = req(f) }},
		{name: "Observer.RequestWritten", obs: func(o *Observer, f func(*http.Request)) { o.RequestWritten = req(f) }},
		{name: "Observer.RequestHeaders", obs: func(o *Observer, f func(*http.Request)) { o.RequestHeaders = req(f) }},
		{name: "Observer.RequestDone", obs: func(o *Observer, f func(*http.Request)) { o.RequestDone = req(f) }},
		{name: "Observer.ConnOpened", newOnly: true, obs: func(o *Observer, f func(*http.Request)) { o.ConnOpened = conn(f) }},
		{name: "Observer.ConnActive", obs: func(o *Observer, f func(*http.Request)) { o.ConnActive = conn(f) }},
		{name: "Observer.ConnIdle", obs: func(o *Observer, f func(*http.Request)) { o.ConnIdle = conn(f) }},
		{name: "Observer.ConnClosed", kind: closing, obs: func(o *Observer, f func(*http.Request)) { o.ConnClosed = conn(f) }},
		{name: "GetConn", trace: func(ct *httptrace.ClientTrace, f func()) { ct.GetConn = func(string) { f() } }},
		{name: "GotConn", trace: func(ct *httptrace.ClientTrace, f func()) { ct.GotConn = func(httptrace.GotConnInfo) { f() } }},
		{name: "PutIdleConn", trace: func(ct *httptrace.ClientTrace, f func()) { ct.PutIdleConn = func(error) { f() } }},
		{name: "GotFirstResponseByte", trace: func(ct *httptrace.ClientTrace, f func()) { ct.GotFirstResponseByte = f }},
		{name: "Got100Continue", kind: expect, trace: func(ct *httptrace.ClientTrace, f func()) { ct.Got100Continue = f }},
		{name: "Got1xxResponse", kind: early, trace: func(ct *httptrace.ClientTrace, f func()) {
			ct.Got1xxResponse = func(int, textproto.MIMEHeader) error { f(); return nil }
		}},
		{name: "DNSStart", kind: byName, newOnly: true, trace: func(ct *httptrace.ClientTrace, f func()) {
			ct.DNSStart = func(httptrace.DNSStartInfo) { f() }
		}},
		{name: "DNSDone", kind: byName, newOnly: true, trace: func(ct *httptrace.ClientTrace, f func()) {
			ct.DNSDone = func(httptrace.DNSDoneInfo) { f() }
		}},
		{name: "ConnectStart", newOnly: true, trace: func(ct *httptrace.ClientTrace, f func()) {
			ct.ConnectStart = func(string, string) { f() }
		}},
		{name: "ConnectDone", newOnly: true, trace: func(ct *httptrace.ClientTrace, f func()) {
			ct.ConnectDone = func(string, string, error) { f() }
		}},
		{name: "TLSHandshakeStart", kind: overTLS, newOnly: true, trace: func(ct *httptrace.ClientTrace, f func()) {
			ct.TLSHandshakeStart = f
		}},
		{name: "TLSHandshakeDone", kind: overTLS, newOnly: true, trace: func(ct *httptrace.ClientTrace, f func()) {
			ct.TLSHandshakeDone = func(tls.ConnectionState, error) { f() }
		}},
		{name: "WroteHeaderField", trace: func(ct *httptrace.ClientTrace, f func()) {
			ct.WroteHeaderField = func(string, []string) { f() }
		}},
		{name: "WroteHeaders", trace: func(ct *httptrace.ClientTrace, f func()) { ct.WroteHeaders = f }},
		{name: "Wait100Continue", kind: expect, trace: func(ct *httptrace.ClientTrace, f func()) { ct.Wait100Continue = f }},
		{name: "WroteRequest", trace: func(ct *httptrace.ClientTrace, f func()) {
			ct.WroteRequest = func(httptrace.WroteRequestInfo) { f() }
		}},
	}
	const innerWait = 2 * time.Second // a deadlock: the inner request's deadline
	scenes := []struct {
		name   string
		warm   bool // a request answered first: the connection is idle
		outers int  // requests at once
		// pipelined: the hook's request is pipelined behind the one it
		// reports on if it may (one connection carries pipelined
		// requests, the host has answered).
		pipelined bool
		// watched: the idle connection is watched by its reader
		// goroutine, which reads the answer (otherwise the connection
		// rests, and the caller reads its own answer: conn_direct.go).
		watched bool
	}{
		{name: "new host", outers: 1},
		{name: "warm host", warm: true, outers: 1},
		{name: "ten at once", outers: 10},
		{name: "pipelined, read by the caller", warm: true, outers: 1, pipelined: true},
		{name: "pipelined, read by the reader", warm: true, outers: 1, pipelined: true, watched: true},
	}
	for _, h := range hooks {
		for _, scene := range scenes {
			if h.newOnly && scene.warm {
				continue // nothing is dialed
			}
			t.Run(h.name+"/"+scene.name, func(t *testing.T) {
				base := plain.URL
				// No head-of-line resend: it moves a request stuck behind
				// a head after a second, which would hide a deadlock.
				opts := TransportOptions{HeadOfLineTimeout: -1}
				switch h.kind {
				case overTLS:
					base = secure.URL
					opts.TLSClientConfig = secureTLS.Clone()
				case byName:
					base = "http://localhost:" + plain.Listener.Addr().(*net.TCPAddr).AddrPort().String()[len("127.0.0.1:"):]
				}
				if scene.pipelined {
					// Pipelined at full depth behind any request that
					// allows it, on one connection, whatever was learned.
					opts.PipelineConnsPerHost, opts.FixedPolicy = 1, true
				}
				var tr *Transport
				var fired, running atomic.Int32
				var mu sync.Mutex
				var innerErrs []error
				// inner sends a GET to the same host, bounded by innerWait.
				inner := func() {
					fired.Add(1)
					running.Add(1)
					defer running.Add(-1)
					ctx, cancel := context.WithTimeout(context.Background(), innerWait)
					defer cancel()
					r, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/inner", nil)
					_, err := getBody(ctx, tr, r.URL.String())
					if err != nil {
						mu.Lock()
						innerErrs = append(innerErrs, err)
						mu.Unlock()
					}
				}
				// armed counts the connection events still to re-enter on:
				// one per outer request.
				var armed atomic.Int32
				if h.obs != nil {
					o := &Observer{}
					h.obs(o, func(r *http.Request) {
						if r != nil && r.Header.Get("X-Outer") == "" {
							return // the inner request's own event
						}
						if r == nil && armed.Add(-1) < 0 {
							return
						}
						inner()
					})
					opts.Observer = o
				}
				if scene.watched {
					setTestHook(t, &testHookRestWatch, time.Microsecond)
				} else {
					// The connection rests until the request: after
					// restWatch (50 ms) its reader would watch it
					// again, and a poll of a loaded machine could miss
					// the rest.
					setTestHook(t, &testHookRestWatch, time.Hour)
				}
				tr = newTestTransport(t, opts)
				if scene.warm {
					if _, err := getBody(context.Background(), tr, base+"/warm"); err != nil {
						t.Fatal(err)
					}
					waitFor(t, "the warm connection to be idle", func() bool {
						p := poolOf(tr, plain.Listener.Addr().String())
						if p == nil {
							return false
						}
						p.mu.Lock()
						defer p.mu.Unlock()
						if len(p.conns) != 1 || !p.conns[0].s.idle() {
							return false
						}
						rd := p.conns[0].rd.Load()
						return scene.watched && rd == rdReader || !scene.watched && rd == rdFree
					})
				}
				outers := scene.outers
				armed.Store(int32(outers))
				var wg sync.WaitGroup
				errs := make(chan error, outers)
				for range outers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx, cancel := context.WithTimeout(context.Background(), 3*innerWait)
						defer cancel()
						if h.trace != nil {
							ct := &httptrace.ClientTrace{}
							var once sync.Once
							h.trace(ct, func() { once.Do(inner) })
							ctx = httptrace.WithClientTrace(ctx, ct)
						}
						path, method := "/", http.MethodGet
						var body io.Reader
						switch h.kind {
						case early:
							path = "/early"
						case expect:
							path, method, body = "/continue", http.MethodPost, strings.NewReader("body")
						case closing:
							path = "/close"
						}
						r, _ := http.NewRequestWithContext(ctx, method, base+path, body)
						r.Header.Set("X-Outer", "1")
						if h.kind == expect {
							r.Header.Set("Expect", "100-continue")
						}
						resp, err := tr.RoundTrip(r)
						if err == nil {
							var b []byte
							b, err = io.ReadAll(resp.Body)
							resp.Body.Close()
							if err == nil && string(b) != path {
								err = fmt.Errorf("body %q", b)
							}
						}
						if err != nil {
							errs <- fmt.Errorf("%s %s: %w", method, path, err)
						}
					}()
				}
				wg.Wait()
				// A dial may run its hook after its request was served
				// elsewhere, and a connection report its close after its
				// answer was read.
				waitFor(t, "the hooks' requests", func() bool {
					for _, s := range tr.Stats() {
						if s.Dialing > 0 {
							return false
						}
					}
					return running.Load() == 0
				})
				armed.Store(0)
				tr.Close()
				close(errs)
				for err := range errs {
					t.Errorf("outer request: %v", err)
				}
				mu.Lock()
				defer mu.Unlock()
				for _, err := range innerErrs {
					if errors.Is(err, ErrTransportClosed) {
						continue // sent by a hook as the test ended
					}
					if errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("the hook's request waited for the request it reports on: %v", err)
					} else {
						t.Errorf("the hook's request: %v", err)
					}
				}
				if fired.Load() == 0 {
					t.Errorf("the hook never fired")
				}
			})
		}
	}
}
