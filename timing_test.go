package pipelined

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pipelined/pipelined/internal/model"
)

// The tests in this file check the transport's timers under
// testing/synctest: time is virtual, connections are in-memory pipes made
// by the DialContext hook, and each server goroutine runs in the bubble.

func TestTimerHeadOfLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var mu sync.Mutex
		served := map[string][]int{} // path → connections that ran it
		srv := &memServer{handle: func(n int, c net.Conn, br *bufio.Reader) {
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				mu.Lock()
				served[req.URL.Path] = append(served[req.URL.Path], n)
				mu.Unlock()
				if req.URL.Path == "/slow" {
					<-release
				}
				answer(c, req)
			}
		}}
		tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 2, PipelineConnsPerHost: 1, PipelineDepth: 4, HeadOfLineTimeout: time.Second})
		tr.opts.FixedPolicy = true // /behind is pipelined behind /slow, not dialed
		defer tr.Close()
		if got := <-memGet(tr, "/first"); got != "/first" { // the host has answered: requests may be pipelined
			t.Fatalf("/first = %q", got)
		}
		synctest.Wait() // connection 1 is idle again
		slow := memGet(tr, "/slow")
		synctest.Wait()
		behind := memGet(tr, "/behind") // pipelined behind /slow on connection 1
		synctest.Wait()
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		select {
		case got := <-behind:
			t.Fatalf("/behind answered before the head-of-line timeout: %q", got)
		default:
		}
		time.Sleep(2 * time.Millisecond)
		if got := <-behind; got != "/behind" {
			t.Errorf("/behind = %q", got)
		}
		close(release)
		if got := <-slow; got != "/slow" {
			t.Errorf("/slow = %q", got)
		}
		synctest.Wait() // connection 1's server has read /behind
		mu.Lock()
		defer mu.Unlock()
		if got := fmt.Sprint(served["/behind"]); got != "[1 2]" && got != "[2 1]" {
			t.Errorf("/behind ran on connections %s, want 1 and 2", got)
		}
	})
}

// TestTimerFirstAnswer: a burst of requests whose route class the host has
// not answered yet is not pipelined (internal/model): each request dials, as
// with net/http, and the burst is answered in one service time, not in
// three. A burst of a class answered quickly before (warm), once nothing
// is in flight, waits for its own first answer while it could dial
// (burstWaitLocked): a host answered quickly may be slow for this burst,
// and a serial one (Tomcat, Jetty) would run it pipelined at once several
// deep (900 ms on 2 connections for the 300 ms row); a server that answers
// at once gets it pipelined over PipelineConnsPerHost connections.
func TestTimerFirstAnswer(t *testing.T) {
	tests := []struct {
		warm     bool          // a quick request answered before the burst
		service  time.Duration // per request, one at a time per connection
		minDials int32
		maxDials int32
		wantMax  time.Duration // the burst's last answer, at the latest
	}{
		// Answers at once: the burst's callers may start one after another
		// answer (seen with -cpu 4 under -race), each finding the first
		// connection idle, and then one dial is right too.
		{false, 0, 1, 6, model.QuickWait},
		{false, time.Millisecond, 2, 6, 2 * time.Millisecond},
		{false, 300 * time.Millisecond, 6, 6, 300 * time.Millisecond},
		{true, 0, 1, 2, model.QuickWait},
		{true, 300 * time.Millisecond, 6, 6, 300*time.Millisecond + model.QuickWait},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v warm %v", tt.service, tt.warm), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &memServer{handle: memServeSerial(func(path string) time.Duration {
					if path == "/99" { // the burst's route class
						return 0
					}
					return tt.service
				})}
				tr := NewTransport(TransportOptions{DialContext: srv.dial, PipelineConnsPerHost: 2, PipelineDepth: 4})
				defer tr.Close()
				if tt.warm {
					if got := <-memGet(tr, "/99"); got != "/99" {
						t.Fatalf("/99 = %q", got)
					}
					synctest.Wait() // the connection is idle again
				}
				took := memBurst(t, tr, 6)
				if took > tt.wantMax {
					t.Errorf("burst answered in %v, want at most %v", took, tt.wantMax)
				}
				synctest.Wait() // a dial started for the burst has reached the server
				if got := srv.dials.Load(); got < tt.minDials || got > tt.maxDials {
					t.Errorf("dials = %d, want %d to %d", got, tt.minDials, tt.maxDials)
				}
			})
		})
	}
}

// TestTimerFarHost sends a burst to a server 50 ms away (a dial takes a
// round trip) that runs a connection's requests one at a time, 20 ms
// each. net/http, dialing a connection per request, answers every request
// of the burst in a dial, a round trip and a service time: 120 ms. No
// answer can come within model.QuickWait over such a round trip, so the
// requests beyond PipelineConnsPerHost dial at once (model.FirstResponseWait) instead
// of waiting for the first answer: when they waited up to twice the dial
// time, the cold burst took 260 ms and the warm one 230 ms; then 170 (a
// dial more than net/http's: the rest waited for the first connection)
// and 120; now the cold one 140 (the rest dial once the first dial has
// been under way for farHop).
func TestTimerFarHost(t *testing.T) {
	const oneWay, service = 25 * time.Millisecond, 20 * time.Millisecond
	const netHTTP = 4*oneWay + service
	tests := []struct {
		warm    bool
		wantMax time.Duration
	}{
		// The first dial has not connected within farHop: the rest
		// dial then (farDialLocked).
		{false, netHTTP + model.FarHop},
		{true, netHTTP},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("warm %v", tt.warm), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &memServer{oneWay: oneWay, handle: memServeSerial(func(string) time.Duration { return service })}
				tr := NewTransport(TransportOptions{DialContext: srv.dial, PipelineConnsPerHost: 2, PipelineDepth: 4})
				defer tr.Close()
				if tt.warm {
					if got := <-memGet(tr, "/warm"); got != "/warm" {
						t.Fatalf("/warm = %q", got)
					}
					synctest.Wait()
				}
				if took := memBurst(t, tr, 6); took > tt.wantMax {
					t.Errorf("burst answered in %v, want at most %v (net/http: %v)", took, tt.wantMax, netHTTP)
				}
			})
		})
	}
}

// TestTimerFarHostTLS sends a burst to an https host far away and not
// known yet. The requests beyond the first must not wait for the first
// connection's ALPN to dial (farDialLocked): an HTTP/1.1 server answers
// them in about net/http's time (before: 270 ms, a TCP dial and a TLS
// handshake more). An HTTP/2 server keeps one connection: the other
// dials are cancelled once the first connection says h2 (h2Dialed), and
// any that ends sooner is closed, as net/http closes such connections.
func TestTimerFarHostTLS(t *testing.T) {
	const oneWay, service = 25 * time.Millisecond, 20 * time.Millisecond
	// A TCP round trip, TLS's, then the request's and its service.
	const netHTTP = 6*oneWay + service
	cert, roots := memTLS(t)
	tests := []struct {
		alpn      []string
		wantProto string
		wantOpen  int
		// wantTLS: the handshakes the server completes; the other dials
		// to an HTTP/2 server are cancelled once the first says h2.
		wantTLS int32
	}{
		{[]string{"http/1.1"}, "HTTP/1.1", 6, 6},
		{[]string{"h2", "http/1.1"}, "HTTP/2.0", 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.wantProto, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				slow := func(w http.ResponseWriter, r *http.Request) {
					time.Sleep(service)
					io.WriteString(w, r.URL.Path)
				}
				srv := &memServer{
					oneWay: oneWay,
					tls:    &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: tt.alpn},
					h2:     http.HandlerFunc(slow),
					handle: memServeSerial(func(string) time.Duration { return service }),
				}
				tr := NewTransport(TransportOptions{DialContext: srv.dial, TLSClientConfig: roots, PipelineConnsPerHost: 2, PipelineDepth: 4})
				defer func() {
					tr.Close()
					time.Sleep(oneWay) // the close_notify alerts reach the server, which ends
				}()
				if took := memBurstTo(t, tr, "https://example.com", 6); took > netHTTP+model.FarHop {
					t.Errorf("burst answered in %v, want at most %v (net/http: %v)", took, netHTTP+model.FarHop, netHTTP)
				}
				synctest.Wait()
				s := tr.Stats()["https://example.com:443"]
				if s.Protocol != tt.wantProto || s.Open != tt.wantOpen {
					t.Errorf("Stats: protocol %s, %d open; want %s, %d", s.Protocol, s.Open, tt.wantProto, tt.wantOpen)
				}
				if n := srv.handshakes.Load(); n != tt.wantTLS {
					t.Errorf("the server completed %d TLS handshakes, want %d", n, tt.wantTLS)
				}
			})
		})
	}
}

// TestTimerStreamBurst sends streams at once: chunked answers whose first
// chunk comes at once and whose end comes 900 ms later, from a server
// that runs a connection's requests one at a time. Each caller must get
// its first chunk as early as with net/http: at once when it may dial
// (the head of a stream is not the answer that lets the rest of a burst
// be pipelined: answerLocked), after one stream when MaxConnsPerHost
// allows half of them (none pipelined three deep on the first connection
// up while the others were being dialed: stackOnLocked). Before, the
// last first chunk came one stream later (first row) and two (third).
func TestTimerStreamBurst(t *testing.T) {
	const stream = 900 * time.Millisecond
	tests := []struct {
		warm      bool // a quick request answered before the burst
		maxConns  int
		pipeConns int  // PipelineConnsPerHost
		slowDials bool // the first dial takes 3 ms, the others 4
		wantFirst time.Duration
	}{
		{false, 0, 2, false, 2 * model.QuickWait},
		{true, 0, 2, false, 2 * model.QuickWait},
		// All four dialed at once (the threshold is MaxConnsPerHost), the
		// first up before the others.
		{false, 4, 0, true, stream + 10*time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("warm %v max %d", tt.warm, tt.maxConns), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &memServer{handle: func(_ int, c net.Conn, br *bufio.Reader) {
					for {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						if req.URL.Path != "/stream" {
							answer(c, req)
							continue
						}
						io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
						time.Sleep(stream)
						io.WriteString(c, "0\r\n\r\n")
					}
				}}
				dial := srv.dial
				if tt.slowDials {
					dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
						d := 3 * time.Millisecond
						if srv.dials.Load() > 0 {
							d = 4 * time.Millisecond
						}
						time.Sleep(d)
						return srv.dial(ctx, network, addr)
					}
				}
				tr := NewTransport(TransportOptions{DialContext: dial, MaxConnsPerHost: tt.maxConns, PipelineConnsPerHost: tt.pipeConns, PipelineDepth: 4})
				defer tr.Close()
				if tt.warm {
					if got := <-memGet(tr, "/warm"); got != "/warm" {
						t.Fatalf("/warm = %q", got)
					}
					synctest.Wait()
				}
				start := time.Now()
				var wg sync.WaitGroup
				firsts := make([]time.Duration, 8)
				for i := range firsts {
					wg.Go(func() {
						req, _ := http.NewRequest(http.MethodGet, "http://mem.test/stream", nil)
						resp, err := tr.RoundTrip(req)
						if err != nil {
							t.Errorf("stream %d: %v", i, err)
							return
						}
						defer resp.Body.Close()
						if _, err := io.ReadFull(resp.Body, make([]byte, 5)); err != nil {
							t.Errorf("stream %d: %v", i, err)
						}
						firsts[i] = time.Since(start)
						io.Copy(io.Discard, resp.Body)
					})
				}
				wg.Wait()
				for i, got := range firsts {
					if got > tt.wantFirst {
						t.Errorf("stream %d: first chunk after %v, want at most %v", i, got, tt.wantFirst)
					}
				}
			})
		})
	}
}

// memServeOnePerRead is a memServer handler that answers one request per
// read from the connection and leaves what else that read brought until
// the next one, closing after idle of nothing read, as gunicorn's gthread
// worker does: requests that come together with the one ahead are
// answered only when more bytes come.
func memServeOnePerRead(idle time.Duration) func(int, net.Conn, *bufio.Reader) {
	return func(_ int, c net.Conn, _ *bufio.Reader) {
		var buf []byte
		tmp := make([]byte, 4096)
		for {
			c.SetReadDeadline(time.Now().Add(idle))
			n, err := c.Read(tmp)
			if err != nil {
				return
			}
			buf = append(buf, tmp[:n]...)
			br := bufio.NewReader(bytes.NewReader(buf))
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			buf = buf[len(buf)-br.Buffered():]
			answer(c, req)
		}
	}
}

// memServeSlowOnce is a memServer handler that answers a connection's
// requests one at a time, each after delay(its path), but the first
// request of all that came in one read behind another, which it answers
// slow later: a server that handles pipelining, with one slow run.
func memServeSlowOnce(slow time.Duration, once *atomic.Bool, delay func(string) time.Duration) func(int, net.Conn, *bufio.Reader) {
	return func(_ int, c net.Conn, _ *bufio.Reader) {
		var buf []byte
		tmp := make([]byte, 4096)
		for {
			n, err := c.Read(tmp)
			if err != nil {
				return
			}
			buf = append(buf, tmp[:n]...)
			for first := true; ; first = false {
				br := bufio.NewReader(bytes.NewReader(buf))
				req, err := http.ReadRequest(br)
				if err != nil {
					break // incomplete: read on
				}
				buf = buf[len(buf)-br.Buffered():]
				d := delay(req.URL.Path)
				if !first && once.CompareAndSwap(false, true) {
					d = slow
				}
				time.Sleep(d)
				answer(c, req)
			}
		}
	}
}

// TestTimerPipeliningProbe sends bursts of 8 GETs to a new host over 2
// connections of depth 4. A server that leaves what came with the request
// ahead (gthread) stalls one request, the probe, for model.LateMin: a copy
// of it is then answered on another connection, and the host falls back to
// depth 1. Before, every request written behind another waited for the
// server's idle close (3 of 8 in one burst); then the probe did; and a
// fallback learned as both connections closed was lost with the pool
// (ending). A server that runs pipelined requests proves the host within a
// few bursts (probeLocked), without falling back even if its answers take
// longer than a probe's wait (the probe's answer comes before its copy's),
// and at the cost of one copy at most, nor if the probe's own run is slow
// (its copy answered first, its answer soon after). Whether a probe goes
// out together with its head depends on how the writers meet, so the rows
// run several bursts.
func TestTimerPipeliningProbe(t *testing.T) {
	const idle = 2 * time.Second
	tests := []struct {
		name     string
		handle   func(delay func(string) time.Duration) func(int, net.Conn, *bufio.Reader)
		delay    time.Duration // of each answer
		maxWait  time.Duration // of any request
		proven   bool          // the host is proven within 10 bursts, never falling back (else: never)
		maxExtra int32         // requests served beyond those sent (counted if delay > 0)
	}{
		{"one per read", func(func(string) time.Duration) func(int, net.Conn, *bufio.Reader) { return memServeOnePerRead(idle) }, 0, model.LateMin, false, 0},
		{"serial", memServeSerial, time.Millisecond, 50 * time.Millisecond, true, 0},
		{"serial, slower than a probe's wait", memServeSerial, 2 * model.LateMin, 8 * 2 * model.LateMin, true, 1},
		{"serial, the first pipelined request slow", func(delay func(string) time.Duration) func(int, net.Conn, *bufio.Reader) {
			return memServeSlowOnce(3*model.LateMin/2, new(atomic.Bool), delay)
		}, time.Millisecond, time.Second, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var served atomic.Int32 // by a serial server
				srv := &memServer{handle: tt.handle(func(string) time.Duration {
					served.Add(1)
					return tt.delay
				})}
				tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 2, PipelineDepth: 4})
				defer tr.Close()
				state := func() (proven, fellBack bool) {
					p := poolOf(tr, "mem.test:80")
					if p == nil {
						return false, false
					}
					p.mu.Lock()
					defer p.mu.Unlock()
					return p.model.Proven(), p.model.InFallback()
				}
				var longest atomic.Int64
				sent := 0
				for bursts := 0; bursts < 10; bursts++ {
					if proven, _ := state(); proven && tt.proven {
						break
					}
					start := time.Now()
					var answers []<-chan string
					for i := range 8 {
						answers = append(answers, memGet(tr, fmt.Sprintf("/%d", i)))
					}
					sent += 8
					var wg sync.WaitGroup
					for i, ch := range answers {
						wg.Go(func() {
							if got, want := <-ch, fmt.Sprintf("/%d", i); got != want {
								t.Errorf("answer %d = %q, want %q", i, got, want)
							}
							d := int64(time.Since(start))
							for m := longest.Load(); d > m && !longest.CompareAndSwap(m, d); m = longest.Load() {
							}
						})
					}
					wg.Wait()
					synctest.Wait()
				}
				proven, fellBack := state()
				// A host never proven falls back if a probe stalled; the
				// requests of a burst may go out one at a time.
				if proven != tt.proven || tt.proven && fellBack {
					t.Errorf("proven = %v, fell back = %v, want %v", proven, fellBack, tt.proven)
				}
				if d := time.Duration(longest.Load()); d > tt.maxWait {
					t.Errorf("a request took %v, want at most %v", d, tt.maxWait)
				}
				if n := served.Load(); tt.delay > 0 && n > int32(sent)+tt.maxExtra {
					t.Errorf("%d requests served for %d sent, want at most %d more", n, sent, tt.maxExtra)
				}
			})
		})
	}
}

func TestTimerResponseHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &memServer{handle: func(n int, c net.Conn, br *bufio.Reader) {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			time.Sleep(3 * time.Second)
			answer(c, req)
			io.Copy(io.Discard, br)
		}}
		tr := NewTransport(TransportOptions{DialContext: srv.dial, ResponseHeaderTimeout: 2 * time.Second})
		defer tr.Close()
		start := time.Now()
		got := <-memGet(tr, "/x")
		if !strings.Contains(got, "timeout awaiting response headers") {
			t.Errorf("GET = %q, want a header timeout", got)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("timed out after %v, want 2s", d)
		}
		tr.Close()
		time.Sleep(2 * time.Second) // let the server's handler end
	})
}

func TestTimerIdleConn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		closedAt := make(chan time.Time, 1)
		srv := &memServer{handle: func(n int, c net.Conn, br *bufio.Reader) {
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					closedAt <- time.Now()
					return
				}
				answer(c, req)
			}
		}}
		tr := NewTransport(TransportOptions{DialContext: srv.dial, IdleConnTimeout: 90 * time.Second})
		defer tr.Close()
		<-memGet(tr, "/a")
		time.Sleep(60 * time.Second)
		<-memGet(tr, "/b") // reuses the connection and restarts its idle timer
		idleFrom := time.Now()
		if got := <-closedAt; got.Sub(idleFrom) != 90*time.Second {
			t.Errorf("idle connection closed after %v, want 90s", got.Sub(idleFrom))
		}
		synctest.Wait()
		for host, s := range tr.Stats() {
			if s.Open != 0 {
				t.Errorf("%s: Open = %d after the idle timeout, want 0", host, s.Open)
			}
		}
		if n := srv.dials.Load(); n != 1 {
			t.Errorf("dials = %d, want 1", n)
		}
	})
}

// A host that drops every pipelined request falls back to depth 1 at its
// first failure, having never answered a pipelined request; the fallback
// ends after model.VerdictFor, and the next one, earned at the next failure,
// lasts as long.
func TestTimerFallbackExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Each connection answers its first request and drops the
		// connection when a second one arrives pipelined.
		depth, burst, stop := fallbackHost(nil, func(net.Conn, *http.Request) bool { return false })
		defer stop()
		for i, want := range []time.Duration{model.VerdictFor, model.VerdictFor} {
			burst()
			if d := depth(); d != 1 {
				t.Fatalf("fallback %d: depth = %d after a burst whose pipelined requests were dropped, want 1", i, d)
			}
			time.Sleep(want - time.Second)
			if d := depth(); d != 1 {
				t.Errorf("fallback %d: depth = %d %v into it, want 1", i, d, want-time.Second)
			}
			time.Sleep(2 * time.Second)
			if d := depth(); d != 4 {
				t.Errorf("fallback %d: depth = %d %v into it, want 4", i, d, want+time.Second)
			}
		}
	})
}

// A host that answered pipelined requests before falls back at the first
// failure whose pipelined head had waited past the head-of-line timeout:
// gunicorn's gthread worker answers the first request of a read and leaves
// the rest until its keep-alive timeout closes the connection.
func TestTimerFallbackAfterDroppedHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var drop atomic.Bool
		depth, burst, stop := fallbackHost(nil, func(c net.Conn, req *http.Request) bool {
			answer(c, req)
			if drop.Load() {
				time.Sleep(2 * time.Second) // its keep-alive close
				return false
			}
			return true
		})
		defer stop()
		burst() // pipelined, answered
		if d := depth(); d != 4 {
			t.Fatalf("depth = %d after pipelined answers, want 4", d)
		}
		drop.Store(true)
		burst()
		if d := depth(); d != 1 {
			t.Errorf("depth = %d after one pipelined head was dropped, want 1", d)
		}
	})
}

// pipelineHandlingServer is a memServer that answers each request that
// came alone and hands one that came with another behind it (pipelined)
// to pipelined, which reports whether the connection goes on.
func pipelineHandlingServer(pipelined func(c net.Conn, req *http.Request) bool) *memServer {
	return &memServer{handle: func(n int, c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			time.Sleep(time.Millisecond) // let a pipelined request arrive
			if br.Buffered() == 0 && c.(*memConn).unread() == 0 {
				answer(c, req)
			} else if !pipelined(c, req) {
				return
			}
		}
	}}
}

// fallbackHost starts, in a synctest bubble, a Transport (MaxConnsPerHost
// 1, PipelineDepth 4, Observer o) over a memServer that answers each request that came
// alone and hands one that came with another behind it (pipelined) to
// pipelined, which reports whether the connection goes on. It returns the
// host's effective depth, a burst of 4 GETs that waits for their outcomes,
// and a function that closes the Transport.
func fallbackHost(o *Observer, pipelined func(c net.Conn, req *http.Request) bool) (depth func() int, burst, stop func()) {
	srv := pipelineHandlingServer(pipelined)
	tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 1, PipelineDepth: 4, Observer: o})
	depth = func() int { return tr.Stats()["http://mem.test:80"].PipelineDepth }
	<-memGet(tr, "/9") // the route's answers are known: the bursts are pipelined
	burst = func() {
		var chs []<-chan string
		for i := range 4 {
			chs = append(chs, memGet(tr, fmt.Sprintf("/%d", i)))
		}
		for _, ch := range chs {
			<-ch
		}
	}
	return depth, burst, func() { tr.Close() }
}

func TestTimerExpectContinue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bodyAt := make(chan time.Time, 1)
		srv := &memServer{handle: func(n int, c net.Conn, br *bufio.Reader) {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			// Never send 100 Continue: the client sends the body after
			// ExpectContinueTimeout.
			b, _ := io.ReadAll(req.Body)
			bodyAt <- time.Now()
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
			io.Copy(io.Discard, br)
		}}
		tr := NewTransport(TransportOptions{DialContext: srv.dial, ExpectContinueTimeout: time.Second})
		defer tr.Close()
		req, _ := http.NewRequest(http.MethodPost, "http://mem.test/", strings.NewReader("payload"))
		req.Header.Set("Expect", "100-continue")
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "payload" {
			t.Errorf("body = %q", b)
		}
		if d := (<-bodyAt).Sub(start); d != time.Second {
			t.Errorf("body sent after %v, want 1s", d)
		}
	})
}

// TestTimerSerialHostEarlyResend: against a host that runs a connection's
// requests one at a time, once recognised, requests are pipelined at most
// one behind another, and a GET behind a head that has taken 20 service
// times is re-sent on another connection then, not after
// HeadOfLineTimeout.
func TestTimerSerialHostEarlyResend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := &memServer{handle: memServeSerial(func(path string) time.Duration {
			if path == "/slow" {
				return 500 * time.Millisecond
			}
			return time.Millisecond
		})}
		tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 2, PipelineConnsPerHost: 2, PipelineDepth: 4})
		defer tr.Close()
		memBurst(t, tr, 1)
		p := poolOf(tr, "mem.test:80")
		serial := func() (bool, int) {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.model.Serial(), p.depthLocked()
		}
		for i := 0; ; i++ {
			memBurst(t, tr, 8)
			if ok, _ := serial(); ok && i >= 8 { // and enough requests for the budget
				break
			}
			if i == 50 {
				t.Fatal("the host was not recognised as serial")
			}
		}
		if _, depth := serial(); depth != 2 {
			t.Errorf("depth = %d, want 2", depth)
		}
		synctest.Wait()
		slow := memGet(tr, "/slow")
		synctest.Wait()
		if took := memBurst(t, tr, 3); took > 50*time.Millisecond { // one of them behind /slow
			t.Errorf("GETs beside /slow took %v, want about 20 service times", took)
		}
		if got := <-slow; got != "/slow" {
			t.Errorf("/slow = %q", got)
		}
		tr.Close()
		time.Sleep(time.Second) // the server's goroutines end
	})
}

// TestTimerMixedSerialHost: a server that runs a connection's requests
// one at a time, 40% of them slow, gets the serial verdict from the mixed
// rates (the score alone stays under its threshold) and is then not
// pipelined: nothing is written behind an unanswered request, so a quick
// request never waits behind a slow one (serialDepth).
func TestTimerMixedSerialHost(t *testing.T) {
	for _, depth := range []int{2, 4} {
		t.Run(fmt.Sprintf("PipelineDepth %d", depth), func(t *testing.T) { testTimerMixedSerialHost(t, depth) })
	}
}

func testTimerMixedSerialHost(t *testing.T, depth int) {
	synctest.Test(t, func(t *testing.T) {
		var behind atomic.Int32 // requests written before the one ahead was answered
		srv := &memServer{handle: func(_ int, c net.Conn, br *bufio.Reader) {
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				if br.Buffered() > 0 {
					behind.Add(1)
				}
				if strings.HasPrefix(req.URL.Path, "/s") {
					time.Sleep(30 * time.Millisecond)
				}
				answer(c, req)
			}
		}}
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			time.Sleep(time.Millisecond) // a round trip: service times span 30
			return srv.dial(ctx, network, addr)
		}
		tr := NewTransport(TransportOptions{DialContext: dial, MaxConnsPerHost: 2, PipelineConnsPerHost: 2, PipelineDepth: depth})
		defer tr.Close()
		// 40% slow, in an order that does not repeat from burst to burst:
		// a fixed one ties a request's kind to its place behind a head.
		rng := rand.New(rand.NewPCG(1, uint64(depth)))
		burst := func() {
			var answers []<-chan string
			for i := range 16 {
				path := fmt.Sprintf("/q%d", i)
				if rng.IntN(5) < 2 {
					path = fmt.Sprintf("/s%d", i)
				}
				answers = append(answers, memGet(tr, path))
			}
			for _, ch := range answers {
				if got := <-ch; strings.HasPrefix(got, "error") {
					t.Fatal(got)
				}
			}
		}
		burst()
		p := poolOf(tr, "mem.test:80")
		state := func() (serial, mixed bool, depth int) {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.model.Serial(), p.model.SerialFromMixed(), p.depthLocked()
		}
		for i := 0; ; i++ {
			burst()
			if serial, mixed, _ := state(); serial && mixed {
				break
			}
			if i == 100 {
				p.mu.Lock()
				evidence := p.model.OrderEvidence()
				p.mu.Unlock()
				t.Fatalf("no mixed serial verdict: %s", evidence)
			}
		}
		if _, _, depth := state(); depth != 1 {
			t.Errorf("depth = %d, want 1", depth)
		}
		behind.Store(0)
		for range 5 {
			burst()
		}
		if n := behind.Load(); n != 0 {
			t.Errorf("%d requests written behind an unanswered one, want 0", n)
		}
		tr.Close()
		time.Sleep(time.Second) // the server's goroutines end
	})
}

// TestTimerChunkedReadAhead: a chunked answer whose rest is still coming
// (a bounded one its server did not measure, as net/http's server sends
// any body over 2 KiB) has a request placed behind it once its route's
// last answer was bounded (internal/model), and not before; one of a route never
// seen has nothing behind it. One connection, depth 4: each round sends a
// request, and a second one while the first's answer is half written.
// The second's GotConn says whether it was written behind the first
// answer (a connection not idle) or held until that answer ended.
func TestTimerChunkedReadAhead(t *testing.T) {
	const half = 2 * time.Millisecond // the pause inside a bounded answer
	tests := []struct {
		rounds     int
		streamAt   int // the round whose first answer pauses 50 ms (a stream), -1 none
		size       int // the first answer's body: 4 KiB, a pause, the rest
		wantBehind []bool
	}{
		// The route's first answer is not followed (its class is not
		// known yet); later ones are, while they arrive.
		{6, -1, 8 << 10, []bool{false, true, true, true, true, true}},
		// A stream in round 4, of a route never seen: nothing goes
		// behind it; the other route's answers are followed as before.
		{8, 4, 8 << 10, []bool{false, true, true, true, false, true, true, true}},
		// As large as a body read whole may be: bounded, as one of
		// that Content-Length is.
		{6, -1, maxBufferedBody, []bool{false, true, true, true, true, true}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("stream at %d size %d", tt.streamAt, tt.size), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var behind []bool
				srv := &memServer{handle: func(_ int, c net.Conn, br *bufio.Reader) {
					for {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						chunk, rest := strings.Repeat("x", 4096), strings.Repeat("y", 4096)
						if req.URL.Path != "/second" {
							rest = strings.Repeat("y", tt.size-len(chunk))
						}
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(chunk), chunk)
						pause := half
						if req.URL.Path == "/stream" {
							pause = 50 * time.Millisecond
						}
						time.Sleep(pause)
						fmt.Fprintf(c, "%x\r\n%s\r\n0\r\n\r\n", len(rest), rest)
					}
				}}
				tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 1, PipelineDepth: 4})
				defer tr.Close()
				for i := range tt.rounds {
					first := "/first"
					if i == tt.streamAt {
						first = "/stream"
					}
					a := memGet(tr, first)
					time.Sleep(half / 2)
					var wasIdle bool
					trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { wasIdle = info.WasIdle }}
					req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, "http://mem.test/second", nil)
					resp, err := tr.RoundTrip(req)
					if err != nil {
						t.Fatalf("round %d: second: %v", i, err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if got := <-a; strings.HasPrefix(got, "error") {
						t.Fatalf("round %d: %s", i, got)
					}
					behind = append(behind, !wasIdle)
				}
				if !slices.Equal(behind, tt.wantBehind) {
					t.Errorf("second request written behind the first answer, by round: %v, want %v", behind, tt.wantBehind)
				}
			})
		})
	}
}

// TestTimerEventStreamBeside: on a host whose chunked answers proved
// bounded, an event stream (asked for with Accept: text/event-stream, or
// only answered as text/event-stream) takes nothing behind it: with both
// connections busy, one with the stream and one with a slow answer, a GET
// waits for the slow answer (100 ms), not for HeadOfLineTimeout behind
// the stream. The host's chunked answers stay trusted. So with a body too
// long to be read whole (a Content-Length over maxBufferedBody): it holds
// its connection from its head.
func TestTimerEventStreamBeside(t *testing.T) {
	for _, tt := range []struct {
		accept bool // the request says Accept: text/event-stream
		// queued: the GET waits in the pool before the stream's head
		// comes (10 ms), the other connection taken by a POST: the
		// stream must take nothing from its head on.
		queued bool
		// large: the stream is a body longer than maxBufferedBody with
		// a Content-Length, held from its head as an event stream is.
		large bool
		// ndjson: the stream is chunked NDJSON, neither asked for nor
		// answered as server-sent events, on a path whose answer was
		// taken for a stream before (its route class a stream in the
		// host model).
		ndjson bool
	}{
		{accept: true},
		{},
		{accept: true, queued: true},
		{queued: true, large: true},
		{ndjson: true},
		{ndjson: true, queued: true},
	} {
		t.Run(fmt.Sprintf("accept=%v queued=%v large=%v ndjson=%v", tt.accept, tt.queued, tt.large, tt.ndjson), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				second := make(chan struct{})
				srv := &memServer{handle: memEach(func(c net.Conn, req *http.Request) {
					switch req.URL.Path {
					case "/events":
						// An event, another when the test says, and the
						// stream stays open until the client closes the
						// connection.
						if tt.queued {
							time.Sleep(10 * time.Millisecond)
						}
						ct := "text/event-stream"
						if tt.ndjson {
							ct = "application/x-ndjson"
						}
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: x\n\n\r\n", ct)
						if req.URL.RawQuery == "learn" {
							return // until the client closes
						}
						<-second
						io.WriteString(c, "9\r\ndata: y\n\n\r\n")
						return
					case "/large":
						// The same two events in a body of known length,
						// too long to be read whole.
						const n = maxBufferedBody + 1
						time.Sleep(10 * time.Millisecond)
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\ndata: x\n\n", n)
						<-second
						io.WriteString(c, "data: y\n\n"+strings.Repeat("\n", n-18))
						return
					case "/slow":
						time.Sleep(100 * time.Millisecond)
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbulk\r\n0\r\n\r\n")
				})}
				tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 2, PipelineDepth: 4})
				defer tr.Close()
				for range 2 {
					if got := <-memGet(tr, "/bulk"); got != "bulk" {
						t.Fatalf("/bulk = %q", got)
					}
				}
				wantDials := int32(2)
				if tt.ndjson {
					// The path's first answer: a stream once nothing
					// of it came for a while, closed by its caller with
					// its connection, while a slow answer keeps the
					// other connection (and the pool). The host's
					// chunked answers then earn their trust again.
					wantDials++
					slow := memGet(tr, "/slow")
					synctest.Wait()
					learn, _ := http.NewRequest(http.MethodGet, "http://mem.test/events?learn", nil)
					resp, err := tr.RoundTrip(learn)
					if err != nil {
						t.Fatal(err)
					}
					if ev, err := readEvent(bufio.NewReader(resp.Body)); err != nil || ev != "data: x" {
						t.Fatalf("event %q, %v", ev, err)
					}
					time.Sleep(50 * time.Millisecond)
					resp.Body.Close()
					if got := <-slow; got != "bulk" {
						t.Fatalf("/slow = %q", got)
					}
					for range 1 {
						if got := <-memGet(tr, "/bulk"); got != "bulk" {
							t.Fatalf("/bulk = %q", got)
						}
					}
				}
				// The slow answer's connection first, then the stream's: the
				// stream's head is the more recent, which wins a tie.
				slow := make(chan error, 1)
				go func() {
					method, body := http.MethodGet, io.Reader(nil)
					if tt.queued {
						method, body = http.MethodPost, strings.NewReader("x")
					}
					req, _ := http.NewRequest(method, "http://mem.test/slow", body)
					resp, err := tr.RoundTrip(req)
					if err == nil {
						resp.Body.Close()
					}
					slow <- err
				}()
				synctest.Wait()
				// A POST to /large: nothing is placed behind it before
				// its head comes, as nothing is behind an event stream
				// asked for.
				method, path, body := http.MethodGet, "/events", io.Reader(nil)
				if tt.large {
					method, path, body = http.MethodPost, "/large", strings.NewReader("x")
				}
				req, _ := http.NewRequest(method, "http://mem.test"+path, body)
				if tt.accept {
					req.Header.Set("Accept", "text/event-stream")
				}
				stream := roundTripAsync(tr, req)
				synctest.Wait()
				start := time.Now()
				var bulk <-chan string
				if tt.queued {
					bulk = memGet(tr, "/bulk")
				}
				r := <-stream
				if r.err != nil {
					t.Fatal(r.err)
				}
				defer r.resp.Body.Close()
				events := bufio.NewReader(r.resp.Body)
				if ev, err := readEvent(events); err != nil || ev != "data: x" {
					t.Fatalf("event %q, %v", ev, err)
				}
				if !tt.queued {
					synctest.Wait()
					start = time.Now()
					bulk = memGet(tr, "/bulk")
				}
				if got := <-bulk; got != "bulk" {
					t.Fatalf("/bulk = %q", got)
				}
				if el := time.Since(start); el > 150*time.Millisecond {
					t.Errorf("GET beside the stream took %v, want the slow answer's 100 ms at most", el)
				}
				if n := srv.dials.Load(); n != wantDials {
					t.Errorf("%d dials, want %d", n, wantDials)
				}
				close(second)
				if ev, err := readEvent(events); err != nil || ev != "data: y" {
					t.Errorf("second event %q, %v: the stream did not last", ev, err)
				}
				if err := <-slow; err != nil {
					t.Errorf("/slow: %v", err)
				}
				if v := routeVerdict(tr, http.MethodGet, "http://mem.test/bulk"); v != model.Known {
					t.Errorf("/bulk's class is %v after an event stream, want %v", v, model.Known)
				}
			})
		})
	}
}

// TestTimerChunkedBuffer: a chunked body's buffer grows no further than
// its data needs (the last chunk's size line is read before room is
// asked for), and the next chunked body on the connection starts with a
// buffer of the last one's size. Each body is 64 KiB in 16 KiB chunks;
// the buffer's size is taken once the first chunk has come (the rest
// comes later) and at the body's end.
func TestTimerChunkedBuffer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const chunk = 16 << 10
		srv := &memServer{handle: func(_ int, c net.Conn, br *bufio.Reader) {
			data := strings.Repeat("x", chunk)
			for {
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", chunk, data)
				time.Sleep(time.Millisecond)
				for range 3 {
					fmt.Fprintf(c, "%x\r\n%s\r\n", chunk, data)
				}
				io.WriteString(c, "0\r\n\r\n")
			}
		}}
		tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 1})
		defer tr.Close()
		bufLen := func(b *body) int {
			b.mu.Lock()
			defer b.mu.Unlock()
			return len(b.buf)
		}
		var got [][2]int
		for range 2 {
			req, _ := http.NewRequest(http.MethodGet, "http://mem.test/", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // the first chunk is read
			b := resp.Body.(*body)
			mid := bufLen(b)
			time.Sleep(2 * time.Millisecond)
			synctest.Wait() // the rest is read
			end := bufLen(b)
			if n, err := io.Copy(io.Discard, resp.Body); n != 4*chunk || err != nil {
				t.Fatalf("read %d bytes, %v", n, err)
			}
			resp.Body.Close()
			got = append(got, [2]int{mid, end})
		}
		want := [][2]int{{chunk, 4 * chunk}, {4 * chunk, 4 * chunk}}
		if !slices.Equal(got, want) {
			t.Errorf("buffer sizes (after the first chunk, at the end) = %v, want %v", got, want)
		}
		if n := srv.dials.Load(); n != 1 {
			t.Errorf("%d dials, want 1", n)
		}
	})
}

// TestTimerChunkedEarlyClose: a chunked body closed early while it is
// still arriving and not taken for a stream is drained if its rest comes
// within drainWait, and its connection serves the next request; one closed
// once taken for a stream of events (a pause past its gap, or server-sent
// events from its head) is drained only within model.LateMin, and otherwise
// closes its connection, so that its server learns that nobody reads it
// (Go 1.27's net/http waits 50 ms for any body; earlier releases close
// the connection).
func TestTimerChunkedEarlyClose(t *testing.T) {
	for _, tt := range []struct {
		name      string
		events    bool          // Content-Type: text/event-stream (a stream from its head)
		pause     time.Duration // between the two chunks
		closeAt   time.Duration // after the first chunk was read
		wantDials int32
	}{
		{"quick rest", false, 2 * time.Millisecond, time.Millisecond, 1},
		{"closed before the verdict", false, 100 * time.Millisecond, time.Millisecond, 1},
		{"closed as a stream, rest within lateMin", false, 40 * time.Millisecond, 20 * time.Millisecond, 1},
		{"closed as a stream, rest after lateMin", false, 100 * time.Millisecond, 20 * time.Millisecond, 2},
		{"event stream, rest within lateMin", true, 40 * time.Millisecond, time.Millisecond, 1},
		{"event stream, rest after lateMin", true, 100 * time.Millisecond, time.Millisecond, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &memServer{handle: func(_ int, c net.Conn, br *bufio.Reader) {
					for {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						if req.URL.Path != "/chunked" {
							answer(c, req)
							continue
						}
						chunk := strings.Repeat("x", 4096)
						ct := "text/plain"
						if tt.events {
							ct = "text/event-stream"
						}
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", ct, len(chunk), chunk)
						time.Sleep(tt.pause)
						fmt.Fprintf(c, "%x\r\n%s\r\n0\r\n\r\n", len(chunk), chunk)
					}
				}}
				tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 1})
				defer tr.Close()
				req, _ := http.NewRequest(http.MethodGet, "http://mem.test/chunked", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(resp.Body, make([]byte, 5)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(tt.closeAt)
				resp.Body.Close()
				if got := <-memGet(tr, "/next"); got != "/next" {
					t.Fatalf("next request: %q", got)
				}
				if n := srv.dials.Load(); n != tt.wantDials {
					t.Errorf("%d dials, want %d", n, tt.wantDials)
				}
				time.Sleep(tt.pause) // the server's last chunk, maybe to a closed connection
			})
		})
	}
}

// TestTimerRouteClasses: a host's model learns, per route class, whether
// its last answer was a stream: a chunked answer of which nothing came for
// a while, or one too long to be read whole; and forgets it when an answer
// of the class ends sooner than a request behind it would have waited: the
// class is unseen again until its next answer.
func TestTimerRouteClasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const big = maxBufferedBody + 64<<10
		release := make(chan struct{})
		var bulkWatch atomic.Bool
		srv := &memServer{handle: memEach(func(c net.Conn, req *http.Request) {
			switch req.URL.Path + "?" + req.URL.RawQuery {
			case "/hold?":
				<-release
			case "/watch?stream=1":
				if bulkWatch.Load() {
					break
				}
				// An event, then nothing until the client closes.
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{}\n\r\n")
				return
			case "/big?":
				io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
				for n := 0; n < big; n += 16 << 10 {
					fmt.Fprintf(c, "%x\r\n%s\r\n", 16<<10, strings.Repeat("b", 16<<10))
				}
				io.WriteString(c, "0\r\n\r\n")
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbulk\r\n0\r\n\r\n")
		})}
		tr := NewTransport(TransportOptions{DialContext: srv.dial, MaxConnsPerHost: 3, PipelineDepth: 4})
		defer tr.Close()
		// A request held open keeps a connection, and so the pool and
		// what it learned, while the others' connections close.
		hold := memGet(tr, "/hold")
		defer func() { close(release); <-hold }()
		synctest.Wait()
		watch := func(d time.Duration) {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, "http://mem.test/watch?stream=1", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || line != "{}\n" {
				t.Fatalf("watch: %q, %v", line, err)
			}
			time.Sleep(d)
			resp.Body.Close()
			synctest.Wait()
		}
		const (
			watchURL = "http://mem.test/watch?stream=2" // the same class: another value
			bigURL   = "http://mem.test/big"
			plainURL = "http://mem.test/watch" // another class: no query
		)
		for _, step := range []struct {
			name                 string
			do                   func()
			watch, big, plainGet model.Verdict
		}{
			{"nothing yet", func() {}, model.Unseen, model.Unseen, model.Unseen},
			{"a bulk chunked answer", func() { <-memGet(tr, "/watch") }, model.Unseen, model.Unseen, model.Known},
			{"a chunked body too long to be read whole", func() {
				if got := <-memGet(tr, "/big"); len(got) != big {
					t.Fatalf("/big: %d bytes, want %d", len(got), big)
				}
			}, model.Unseen, model.Streams, model.Known},
			{"a stream of events", func() { watch(2 * time.Second) }, model.Streams, model.Streams, model.Known},
			{"the class's stream again", func() { watch(2 * time.Second) }, model.Streams, model.Streams, model.Known},
			{"a bulk answer of the class", func() {
				bulkWatch.Store(true)
				<-memGet(tr, "/watch?stream=3")
			}, model.Unseen, model.Streams, model.Known},
			{"a second bulk answer", func() { <-memGet(tr, "/watch?stream=4") }, model.Known, model.Streams, model.Known},
		} {
			step.do()
			for _, c := range []struct {
				url  string
				want model.Verdict
			}{{watchURL, step.watch}, {bigURL, step.big}, {plainURL, step.plainGet}} {
				if got := routeVerdict(tr, http.MethodGet, c.url); got != c.want {
					t.Errorf("after %s: %s's class is %v, want %v", step.name, c.url, got, c.want)
				}
			}
		}
	})
}

// TestTimerLateHeadsDial: once a host's answers hold their connections'
// heads late often enough (holprotect.go, headWaits), a GET that could
// open a connection of its own does so instead of being written behind a
// head that has not answered, as net/http's would; before that, it is
// pipelined behind it (PipelineConnsPerHost 1).
func TestTimerLateHeadsDial(t *testing.T) {
	for _, tt := range []struct {
		name      string
		late      bool // one answer came after 200 ms, the others at once
		wantDials int32
		wantAhead bool // the GET's answer came while the head was still unanswered
	}{
		{name: "quick answers", late: false, wantDials: 1, wantAhead: false},
		{name: "a late answer", late: true, wantDials: 2, wantAhead: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				srv := &memServer{handle: memEach(func(c net.Conn, req *http.Request) {
					switch req.URL.Path {
					case "/s/1": // a route of its own, slow: the host's answers are late now and then
						time.Sleep(200 * time.Millisecond)
					case "/x/9": // the head, of the quick answers' route
						<-release
					}
					answer(c, req)
				})}
				tr := NewTransport(TransportOptions{DialContext: srv.dial, PipelineConnsPerHost: 1, PipelineDepth: 4, HeadOfLineTimeout: time.Hour})
				defer tr.Close()
				for range model.Memory { // the late average is known
					if got := <-memGet(tr, "/x/1"); got != "/x/1" {
						t.Fatalf("/x/1 = %q", got)
					}
				}
				if tt.late {
					if got := <-memGet(tr, "/s/1"); got != "/s/1" {
						t.Fatalf("/s/1 = %q", got)
					}
				}
				block := memGet(tr, "/x/9")
				synctest.Wait()
				quick := memGet(tr, "/x/8")
				synctest.Wait()
				ahead := false
				select {
				case got := <-quick:
					ahead = got == "/x/8"
				default:
				}
				close(release)
				if got := <-block; got != "/x/9" {
					t.Fatalf("/x/9 = %q", got)
				}
				if !ahead {
					if got := <-quick; got != "/x/8" {
						t.Fatalf("/x/8 = %q", got)
					}
				}
				if ahead != tt.wantAhead || srv.dials.Load() != tt.wantDials {
					t.Errorf("answered while the head was out: %v, dials %d; want %v, %d", ahead, srv.dials.Load(), tt.wantAhead, tt.wantDials)
				}
			})
		})
	}
}
