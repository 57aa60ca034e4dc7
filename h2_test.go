package pipelined

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2Server kinds.
const (
	h2Prefer = "h2-preferring" // ALPN h2 and http/1.1
	h2Only   = "h2-only"       // ALPN h2, HTTP/2 only
	h1Only   = "h1-only"       // ALPN http/1.1
	h2cOnly  = "h2c"           // cleartext, prior-knowledge HTTP/2 and HTTP/1
)

// h2TestServer starts a server of the given kind on 127.0.0.1 with h, and
// counts the connections it accepts.
func h2TestServer(t *testing.T, kind string, h http.Handler, cfg *http.HTTP2Config) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	return h2TestServerWith(t, kind, h, func(s *http.Server) { s.HTTP2 = cfg })
}

// h2TestServerWith is h2TestServer with the server's configuration set by
// configure before it starts.
func h2TestServerWith(t *testing.T, kind string, h http.Handler, configure func(*http.Server)) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	accepted := new(atomic.Int32)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}
	configure(srv.Config)
	var p http.Protocols
	switch kind {
	case h2Prefer:
		srv.EnableHTTP2 = true
		srv.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
		srv.StartTLS()
	case h2Only:
		srv.EnableHTTP2 = true
		srv.TLS = &tls.Config{NextProtos: []string{"h2"}}
		p.SetHTTP2(true)
		srv.Config.Protocols = &p
		srv.StartTLS()
	case h1Only:
		srv.StartTLS()
	case h2cOnly:
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Config.Protocols = &p
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, accepted
}

func protocols(h1, h2, h2c bool) *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(h1)
	p.SetHTTP2(h2)
	p.SetUnencryptedHTTP2(h2c)
	return &p
}

func protoHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	})
}

// h2Get sends a GET through tr and returns the response with its body read.
func h2Get(t *testing.T, tr http.RoundTripper, url string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(parCtx(t), "GET", url, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", url, err)
	}
	return resp, string(b)
}

func TestH2Negotiation(t *testing.T) {
	defaultClone := func(roots *tls.Config) TransportOptions {
		ht := http.DefaultTransport.(*http.Transport).Clone()
		ht.TLSClientConfig = roots
		return OptionsFrom(ht)
	}
	cases := []struct {
		name   string
		server string
		opts   func(roots *tls.Config) TransportOptions
		want   string
	}{
		{"default vs h2-only", h2Only, func(c *tls.Config) TransportOptions { return TransportOptions{TLSClientConfig: c} }, "HTTP/2.0"},
		{"default vs h2-preferring", h2Prefer, func(c *tls.Config) TransportOptions { return TransportOptions{TLSClientConfig: c} }, "HTTP/2.0"},
		{"default vs h1-only", h1Only, func(c *tls.Config) TransportOptions { return TransportOptions{TLSClientConfig: c} }, "HTTP/1.1"},
		{"HTTP1 only vs h2-preferring", h2Prefer, func(c *tls.Config) TransportOptions {
			return TransportOptions{TLSClientConfig: c, Protocols: protocols(true, false, false)}
		}, "HTTP/1.1"},
		{"HTTP2 only vs h2-preferring", h2Prefer, func(c *tls.Config) TransportOptions {
			return TransportOptions{TLSClientConfig: c, Protocols: protocols(false, true, false)}
		}, "HTTP/2.0"},
		{"DisableKeepAlives", h2Prefer, func(c *tls.Config) TransportOptions {
			return TransportOptions{TLSClientConfig: c, DisableKeepAlives: true}
		}, "HTTP/1.1"},
		{"OptionsFrom(DefaultTransport.Clone())", h2Prefer, defaultClone, "HTTP/2.0"},
		{"OptionsFrom(empty TLSNextProto)", h2Prefer, func(c *tls.Config) TransportOptions {
			ht := http.DefaultTransport.(*http.Transport).Clone()
			ht.TLSClientConfig = c
			ht.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			return OptionsFrom(ht)
		}, "HTTP/1.1"},
		{"OptionsFrom(custom TLS config)", h2Prefer, func(c *tls.Config) TransportOptions {
			return OptionsFrom(&http.Transport{TLSClientConfig: c})
		}, "HTTP/1.1"},
		{"OptionsFrom(custom TLS config, ForceAttemptHTTP2)", h2Prefer, func(c *tls.Config) TransportOptions {
			return OptionsFrom(&http.Transport{TLSClientConfig: c, ForceAttemptHTTP2: true})
		}, "HTTP/2.0"},
		{"h2c prior knowledge", h2cOnly, func(*tls.Config) TransportOptions {
			return TransportOptions{Protocols: protocols(false, false, true)}
		}, "HTTP/2.0"},
		{"h2c off by default", h2cOnly, func(*tls.Config) TransportOptions { return TransportOptions{} }, "HTTP/1.1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := h2TestServer(t, tc.server, protoHandler(), nil)
			tr := newTestTransport(t, tc.opts(tlsRoots(srv)))
			for i := range 2 { // the first learns the protocol, the second uses it
				resp, body := h2Get(t, tr, srv.URL+"/", nil)
				if resp.Proto != tc.want || body != tc.want {
					t.Fatalf("request %d: resp.Proto %q, server saw %q; want %q", i, resp.Proto, body, tc.want)
				}
				if tc.server != h2cOnly && resp.TLS == nil {
					t.Fatalf("request %d: resp.TLS is nil", i)
				}
				if tc.want == "HTTP/2.0" && resp.TLS != nil && resp.TLS.NegotiatedProtocol != "h2" {
					t.Fatalf("request %d: NegotiatedProtocol %q", i, resp.TLS.NegotiatedProtocol)
				}
			}
			for k, s := range tr.Stats() {
				if s.Protocol != tc.want {
					t.Errorf("Stats()[%s].Protocol = %q, want %q", k, s.Protocol, tc.want)
				}
				if wantOpen := !strings.Contains(tc.name, "DisableKeepAlives"); (s.Open == 1) != wantOpen || s.Idle != s.Open || s.InFlight != 0 || s.Streams != 0 {
					t.Errorf("Stats()[%s] = %+v, want one idle connection", k, s)
				}
			}
		})
	}
}

// The h1-only TLS server still gets pipelined requests: four requests on
// one connection at once.
func TestH2H1OnlyStillPipelined(t *testing.T) {
	release := make(chan struct{})
	srv, accepted := h2TestServer(t, h1Only, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, r.Proto)
	}), nil)
	tr := newTestTransport(t, TransportOptions{TLSClientConfig: tlsRoots(srv), MaxConnsPerHost: 1, PipelineDepth: 4})
	tr.opts.FixedPolicy = true // 4 behind the stalled head before any answer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(parCtx(t), "GET", srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	waitFor(t, "4 requests in flight on 1 connection", func() bool {
		for _, s := range tr.Stats() {
			return s.Open == 1 && s.InFlight == 4 && s.Protocol == "HTTP/1.1"
		}
		return false
	})
	close(release)
	wg.Wait()
	if n := accepted.Load(); n != 1 {
		t.Errorf("server accepted %d connections, want 1", n)
	}
}

// A burst to a fresh HTTP/2 host dials one connection: the first dial
// learns the protocol while the others wait, then all are multiplexed.
// (No trace hook counts the dials: while a dial runs a hook of the
// user's, nobody waits for it, and a request arriving then dials its
// own, firstHop.hooked.)
func TestH2BurstDialsOnce(t *testing.T) {
	verifyNoLeaks(t)
	h, inHandler, release := heldHandler()
	srv, accepted := h2TestServer(t, h2Prefer, h, nil)
	setTestHook(t, &testHookFarHop, time.Hour) // a slow loopback connect under -race is not a far host
	tr := NewTransport(TransportOptions{TLSClientConfig: tlsRoots(srv)})
	const n = 50
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(parCtx(t), "GET", srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "HTTP/2.0" {
				t.Errorf("served over %q", b)
			}
		})
	}
	waitFor(t, "50 requests in the handler", func() bool { return inHandler.Load() == n })
	for k, s := range tr.Stats() {
		if s.Protocol != "HTTP/2.0" || s.Open != 1 || s.Streams != n || s.InFlight != n {
			t.Errorf("Stats()[%s] = %+v, want 1 HTTP/2 connection with %d streams", k, s, n)
		}
	}
	close(release)
	wg.Wait()
	if a := accepted.Load(); a != 1 {
		t.Errorf("server accepted %d connections, want 1", a)
	}
	tr.Close()
}

// A burst larger than a connection's streams spreads over the connections
// MaxConnsPerHost allows: requests that chose a connection and have not
// yet opened their streams count against its free streams (h2Free), so
// that a burst does not pile onto the first connection and wait there
// for streams while others could be dialed.
func TestH2BurstSpreadsOverConns(t *testing.T) {
	verifyNoLeaks(t)
	const streams, conns, n = 100, 3, 250
	h, inHandler, release := heldHandler()
	srv, accepted := h2TestServer(t, h2Prefer, h, &http.HTTP2Config{MaxConcurrentStreams: streams})
	setTestHook(t, &testHookFarHop, time.Hour) // a slow loopback connect under -race is not a far host
	tr := NewTransport(TransportOptions{TLSClientConfig: tlsRoots(srv), MaxConnsPerHost: conns})
	defer tr.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	h2GetsGo(t, &wg, tr, srv.URL, n)
	waitFor(t, fmt.Sprintf("%d requests in the handler", n), func() bool { return inHandler.Load() == n })
	if a := accepted.Load(); a != conns {
		t.Errorf("server accepted %d connections, want %d", a, conns)
	}
}

// h2Free(avail, inFlight, claims) = free, idle.
func TestH2Free(t *testing.T) {
	for _, tc := range []struct {
		avail, inFlight, claims int
		free                    int
		idle                    bool
	}{
		{avail: 100, free: 100, idle: true},
		{avail: 100, claims: 30, free: 70},              // 30 chose it, no stream open yet
		{avail: 70, inFlight: 30, claims: 30, free: 70}, // their streams opened
		{avail: 85, inFlight: 15, claims: 30, free: 70}, // half of them opened
		{avail: 60, inFlight: 40, claims: 10, free: 60}, // 30 bodies still flowing
		{avail: 100, claims: 150, free: 0},              // more chose it than it has
		{avail: 0, inFlight: 100, claims: 100, free: 0}, //
		{avail: 1, inFlight: 0, claims: 0, free: 1, idle: true},
	} {
		free, idle := h2Free(tc.avail, tc.inFlight, tc.claims)
		if free != tc.free || idle != tc.idle {
			t.Errorf("h2Free(%d, %d, %d) = %d, %v, want %d, %v", tc.avail, tc.inFlight, tc.claims, free, idle, tc.free, tc.idle)
		}
	}
}

// With few streams per connection, a second connection is dialed only when
// streams run out, within MaxConnsPerHost; the rest wait for streams.
func TestH2MaxConcurrentStreams(t *testing.T) {
	var cur, peak atomic.Int32
	srv, accepted := h2TestServer(t, h2Prefer, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		cur.Add(-1)
		io.WriteString(w, r.Proto)
	}), &http.HTTP2Config{MaxConcurrentStreams: 2})
	// A connection the standard library gives up on is replaced, within
	// the limit: Go's client can send a stream beyond the server's limit
	// just after acknowledging its SETTINGS, the server resets it with
	// PROTOCOL_ERROR, and the client retires the connection.
	var closed atomic.Int32
	obs := &Observer{ConnClosed: func(ConnEvent) { closed.Add(1) }}
	tr := newTestTransport(t, TransportOptions{TLSClientConfig: tlsRoots(srv), MaxConnsPerHost: 2, Observer: obs})
	// Learn the server's limit first: until its SETTINGS arrive a new
	// connection assumes 100 streams (RFC 9113 §6.5.2 leaves it open).
	h2Get(t, tr, srv.URL, nil)
	h2Parallel(t, tr, srv.URL, 12)
	if a, c := accepted.Load(), closed.Load(); a-c > 2 {
		t.Errorf("server accepted %d connections, the client closed %d; want at most 2 open at once (MaxConnsPerHost)", a, c)
	}
	if p := peak.Load(); p > 4 {
		t.Errorf("%d requests in the handler at once, want at most 2 connections × 2 streams", p)
	}
}

// Cancelling a request cancels its stream only; the connection serves on.
func TestH2Cancel(t *testing.T) {
	srv, accepted := h2TestServer(t, h2Prefer, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			<-r.Context().Done()
			return
		}
		io.WriteString(w, r.Proto)
	}), nil)
	tr := newTestTransport(t, TransportOptions{TLSClientConfig: tlsRoots(srv)})
	h2Get(t, tr, srv.URL, nil)

	cases := []struct {
		name   string
		cancel func(cancel context.CancelCauseFunc)
		want   error
	}{
		{"cancel", func(c context.CancelCauseFunc) { c(nil) }, context.Canceled},
		{"cause", func(c context.CancelCauseFunc) { c(errTestCause) }, errTestCause},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(parCtx(t))
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/hang", nil)
			time.AfterFunc(50*time.Millisecond, func() { tc.cancel(cancel) })
			_, err := tr.RoundTrip(req)
			if !errors.Is(err, tc.want) {
				t.Fatalf("RoundTrip = %v, want %v", err, tc.want)
			}
			waitFor(t, "the stream released", func() bool {
				for _, s := range tr.Stats() {
					return s.Streams == 0
				}
				return false
			})
			h2Get(t, tr, srv.URL, nil)
		})
	}
	// A request cancelled while it waits for the first dial.
	ctx, cancel := context.WithCancel(parCtx(t))
	cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, context.Canceled) {
		t.Errorf("RoundTrip with a cancelled context = %v", err)
	}
	if a := accepted.Load(); a != 1 {
		t.Errorf("server accepted %d connections, want 1", a)
	}
}

var errTestCause = errors.New("test cause")

// A server's graceful shutdown (GOAWAY) lets requests in flight finish, and
// the connection leaves the pool.
func TestH2ServerShutdown(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	srv, _ := h2TestServer(t, h2Prefer, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "done")
	}), nil)
	tr := newTestTransport(t, TransportOptions{TLSClientConfig: tlsRoots(srv)})
	h2Get(t, tr, srv.URL, nil)
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(parCtx(t), "GET", srv.URL+"/slow", nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			var b []byte
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && string(b) != "done" {
				err = fmt.Errorf("body %q", b)
			}
		}
		errc <- err
	}()
	<-started
	shut := make(chan error, 1)
	go func() { shut <- srv.Config.Shutdown(parCtx(t)) }()
	time.Sleep(50 * time.Millisecond) // let the GOAWAY arrive
	close(release)
	if err := <-errc; err != nil {
		t.Fatalf("request in flight during GOAWAY: %v", err)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection gone", func() bool {
		for _, s := range tr.Stats() {
			return s.Open == 0
		}
		return true // and the host's pool with it
	})
}

// rawH2Server speaks raw HTTP/2 over TLS on 127.0.0.1 (httptest's
// certificate, ALPN h2 only): for each connection it reads the client
// preface and runs serve with a Framer over the connection, which it then
// closes; first is true for the listener's first connection.
func rawH2Server(t *testing.T, serve func(fr *http2.Framer, first bool)) (url string, roots *tls.Config) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil) // for its certificate
	srv.EnableHTTP2 = true
	srv.StartTLS()
	cert, roots := srv.TLS.Certificates[0], tlsRoots(srv)
	srv.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	var conns atomic.Int32
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			first := conns.Add(1) == 1
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				preface := make([]byte, len(http2.ClientPreface))
				if _, err := io.ReadFull(br, preface); err != nil {
					return
				}
				serve(http2.NewFramer(c, br), first)
			})
		}
	})
	return "https://" + ln.Addr().String(), roots
}

// h2ServeFrames reads the client's frames, acknowledging its SETTINGS, and
// hands each other frame to serve until serve returns false or the
// connection ends.
func h2ServeFrames(fr *http2.Framer, serve func(http2.Frame) bool) {
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		if sf, ok := f.(*http2.SettingsFrame); ok {
			if !sf.IsAck() {
				fr.WriteSettingsAck()
			}
			continue
		}
		if !serve(f) {
			return
		}
	}
}

// h2Respond writes a 200 response with body to stream id.
func h2Respond(fr *http2.Framer, id uint32, body string) {
	var hb bytes.Buffer
	hpack.NewEncoder(&hb).WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
	fr.WriteData(id, true, []byte(body))
}

// h2GoAwayServer is a rawH2Server: on its first connection it answers the
// first request's HEADERS with GOAWAY (last stream 0: RFC 9113 §6.8, the
// request was not processed) and reads on until the client closes, as a
// server ending a connection gracefully does (closing at once, with a
// request body unread, resets the connection, and a client writing that
// body may meet the reset before it reads the GOAWAY); later connections
// answer every request with 200 "ok".
func h2GoAwayServer(t *testing.T) (url string, roots *tls.Config, requests *atomic.Int32) {
	t.Helper()
	requests = new(atomic.Int32)
	url, roots = rawH2Server(t, func(fr *http2.Framer, first bool) {
		fr.WriteSettings()
		h2ServeFrames(fr, func(f http2.Frame) bool {
			if f, ok := f.(*http2.HeadersFrame); ok {
				requests.Add(1)
				if first {
					fr.WriteGoAway(0, http2.ErrCodeNo, nil)
					return true
				}
				h2Respond(fr, f.StreamID, "ok")
			}
			return true
		})
	})
	return url, roots, requests
}

// h2RefusingServer is a rawH2Server that allows limit concurrent streams
// (SETTINGS_MAX_CONCURRENT_STREAMS) and refuses any stream above it
// (REFUSED_STREAM, RFC 9113 §8.7), as HAProxy does: a client sends a burst
// beyond the limit on a new connection before the SETTINGS arrive (they
// are sent 20 ms after the connection opens). Each
// request is answered "ok" after delay. refused counts the refusals,
// later those on connections other than the first.
func h2RefusingServer(t *testing.T, limit int, delay time.Duration) (url string, roots *tls.Config, refused, later *atomic.Int32) {
	t.Helper()
	refused, later = new(atomic.Int32), new(atomic.Int32)
	url, roots = rawH2Server(t, func(fr *http2.Framer, first bool) {
		var mu sync.Mutex // the Framer's writes, open
		var wg sync.WaitGroup
		defer wg.Wait()
		open := 0
		// The SETTINGS, the first frame a server sends (RFC 9113 §3.4),
		// come 20 ms late, so that a burst goes out before them, whatever
		// the order of the client's goroutines.
		time.Sleep(20 * time.Millisecond)
		fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(limit)})
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			mu.Lock()
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			case *http2.HeadersFrame:
				if open >= limit {
					refused.Add(1)
					if !first {
						later.Add(1)
					}
					fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
					break
				}
				open++
				id := f.StreamID
				wg.Go(func() {
					time.Sleep(delay)
					mu.Lock()
					defer mu.Unlock()
					h2Respond(fr, id, "ok")
					open--
				})
			}
			mu.Unlock()
		}
	})
	return url, roots, refused, later
}

// A request refused by a GOAWAY that names a lower last stream was not
// processed: it is retried on a new connection, body included if GetBody
// allows, as net/http does.
func TestH2GoAwayRetried(t *testing.T) {
	cases := []struct {
		name    string
		method  string
		body    io.Reader
		noRetry bool
	}{
		{"GET", "GET", nil, false},
		{"POST with GetBody", "POST", strings.NewReader("payload"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url, roots, requests := h2GoAwayServer(t)
			tr := newTestTransport(t, TransportOptions{TLSClientConfig: roots})
			req, _ := http.NewRequestWithContext(parCtx(t), tc.method, url, tc.body)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "ok" || resp.Proto != "HTTP/2.0" || resp.Request != req {
				t.Errorf("response %q over %s (Request is the caller's: %v)", b, resp.Proto, resp.Request == req)
			}
			if n := requests.Load(); n != 2 {
				t.Errorf("server saw %d requests, want 2", n)
			}
		})
	}
}

// A server that allows fewer streams than a client assumes before its
// SETTINGS arrive (100) refuses the rest of a burst on each new
// connection. Such refusals are retried at once, and a refused request
// waits for a connection that knows the limit rather than meet the same on
// the next new one: net/http's rule (a wait of 1 s before every retry but
// the first) made requests refused twice wait a second, so every request
// here has 800 ms.
func TestH2RefusedBurstRetriedAtOnce(t *testing.T) {
	verifyNoLeaks(t)
	url, roots, refused, _ := h2RefusingServer(t, 2, 5*time.Millisecond)
	tr := newTestTransport(t, TransportOptions{TLSClientConfig: roots, MaxConnsPerHost: 3})
	for burst := range 3 {
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(parCtx(t), 800*time.Millisecond)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Errorf("burst %d, request %d: %v", burst, i, err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "ok" || err != nil {
					t.Errorf("burst %d, request %d: %q, %v", burst, i, b, err)
				}
			})
		}
		wg.Wait()
		tr.CloseIdleConnections() // the next burst meets new connections
	}
	if refused.Load() == 0 {
		t.Error("the server refused no stream (the test's own check)")
	}
}

// A connection closed under a request that the server may have processed
// (no GOAWAY spared it) fails the request with an error that matches
// ErrServerClosed, as over HTTP/1.1, and still matches the standard
// library's cause; a POST is never sent again. An idempotent request is
// sent again if the connection had answered before (RFC 9110 §9.2.2), as
// over HTTP/1.1; as a new connection's first request, it fails, as with
// net/http.
func TestH2ConnClosedUnderRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		warm   bool // a GET is answered on the connection first
		method string
		ok     bool // the request succeeds, sent twice
	}{
		{name: "POST, new connection", method: "POST"},
		{name: "POST, connection that answered", warm: true, method: "POST"},
		{name: "GET, new connection", method: "GET"},
		{name: "GET, connection that answered", warm: true, method: "GET", ok: true},
		{name: "PUT with GetBody, connection that answered", warm: true, method: "PUT", ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verifyNoLeaks(t)
			var runs atomic.Int32 // requests of the test's method that reached the server
			closeAt := 1
			if tc.warm {
				closeAt = 2
			}
			url, roots := rawH2Server(t, func(fr *http2.Framer, first bool) {
				fr.WriteSettings()
				n := 0
				h2ServeFrames(fr, func(f http2.Frame) bool {
					var id uint32
					switch f := f.(type) {
					case *http2.HeadersFrame:
						if !f.StreamEnded() {
							return true
						}
						id = f.StreamID
					case *http2.DataFrame:
						if !f.StreamEnded() {
							return true
						}
						id = f.StreamID
					default:
						return true
					}
					if n++; !first || n >= closeAt {
						runs.Add(1)
					}
					if first && n == closeAt {
						return false // the request is in: close without answering
					}
					h2Respond(fr, id, "ok")
					return true
				})
			})
			tr := newTestTransport(t, TransportOptions{TLSClientConfig: roots})
			if tc.warm {
				h2Get(t, tr, url, nil)
			}
			var body io.Reader
			if tc.method != "GET" {
				body = strings.NewReader("payload") // GetBody set
			}
			req, _ := http.NewRequestWithContext(parCtx(t), tc.method, url, body)
			if tc.method == "POST" {
				req.GetBody = nil // not that it would be sent again anyway
			}
			resp, err := tr.RoundTrip(req)
			wantRuns := int32(1)
			if tc.ok {
				wantRuns = 2
				if err != nil {
					t.Fatalf("RoundTrip: %v, want the answer of the retry", err)
				}
				resp.Body.Close()
			} else {
				if err == nil {
					resp.Body.Close()
					t.Fatal("RoundTrip succeeded, want an error")
				}
				var ce *ConnError
				if !errors.Is(err, ErrServerClosed) || !errors.As(err, &ce) || !ce.Written || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("RoundTrip error %q (%T): want a *ConnError matching ErrServerClosed and io.ErrUnexpectedEOF", err, err)
				}
			}
			if n := runs.Load(); n != wantRuns {
				t.Errorf("the server got the %s %d times, want %d", tc.method, n, wantRuns)
			}
		})
	}
}

// h2Retry(failure, early, strikes) = wait, strikes.
func TestH2Retry(t *testing.T) {
	for _, tc := range []struct {
		f           h2Failure
		early       bool
		strikes     int
		wait        time.Duration
		wantStrikes int
	}{
		{h2Refused, true, 0, 0, 0},
		{h2Refused, true, 3, 0, 3},                      // a new connection's refusal is never a strike
		{h2Refused, false, 0, 0, 1},                     // the first strike is retried at once, as net/http's first retry
		{h2Refused, false, 1, time.Second, 2},           // an overloaded server: net/http's backoff
		{h2Ended, true, 0, 0, 1},                        // GOAWAY: net/http's rule
		{h2Ended, false, 1, time.Second, 2},             //
		{h2Ended, false, 3, 4 * time.Second, 4},         //
		{h2PeerProtocol, true, 2, 2 * time.Second, 3},   //
		{h2PeerProtocol, false, 5, 16 * time.Second, 6}, //
	} {
		wait, strikes := h2Retry(tc.f, tc.early, tc.strikes)
		if wait != tc.wait || strikes != tc.wantStrikes {
			t.Errorf("h2Retry(%d, %v, %d) = %v, %d; want %v, %d", tc.f, tc.early, tc.strikes, wait, strikes, tc.wait, tc.wantStrikes)
		}
	}
}

// takesLocked(conn, settledOnly) = takes.
func TestH2TakesLocked(t *testing.T) {
	for _, tc := range []struct {
		closing, settled bool
		claims           int
		settledOnly      bool
		want             bool
	}{
		{want: true},                    // a new connection: 100 streams assumed
		{claims: 50, want: true},        //
		{closing: true, want: false},    //
		{settledOnly: true, want: true}, // refused by a new connection: only as a first stream
		{settledOnly: true, claims: 1, want: false},
		{settledOnly: true, settled: true, claims: 3, want: true},
		{settledOnly: true, closing: true, settled: true, want: false},
	} {
		c := &h2Conn{closing: tc.closing, claims: tc.claims, settled: tc.settled}
		if got := c.takesLocked(tc.settledOnly); got != tc.want {
			t.Errorf("takesLocked(%+v) = %v, want %v", tc, got, tc.want)
		}
	}
}

// h2Classify(err) = failure.
func TestH2Classify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want h2Failure
	}{
		{nil, h2Final},
		{errors.New(h2ErrConnUnusable), h2Ended},
		{errors.New(h2ErrConnNotEstablished), h2Ended}, // a new connection closed before its first stream
		{errors.New(h2ErrGotGoAway), h2Ended},
		{fmt.Errorf("wrapped: %w", h2StreamError{StreamID: 3, Code: h2CodeRefusedStream}), h2Refused},
		{h2StreamError{StreamID: 3, Code: h2CodeProtocol, Cause: errors.New(h2ErrFromPeer)}, h2PeerProtocol},
		{h2StreamError{StreamID: 3, Code: h2CodeProtocol}, h2Final}, // our own protocol error
		{h2StreamError{StreamID: 3, Code: 0x2}, h2Final},            // INTERNAL_ERROR: may have been processed
		{io.ErrUnexpectedEOF, h2Final},
		{context.DeadlineExceeded, h2Final},
	} {
		if got := h2Classify(tc.err); got != tc.want {
			t.Errorf("h2Classify(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// Requests that need HTTP/1.1 (Upgrade, CONNECT) go to an h2-preferring
// server over a connection of their own that offers only http/1.1.
func TestH2UpgradeUsesHTTP1(t *testing.T) {
	srv, _ := h2TestServer(t, h2Prefer, protoHandler(), nil)
	tr := newTestTransport(t, TransportOptions{TLSClientConfig: tlsRoots(srv)})
	if resp, _ := h2Get(t, tr, srv.URL, nil); resp.Proto != "HTTP/2.0" {
		t.Fatalf("plain GET over %s", resp.Proto)
	}
	resp, body := h2Get(t, tr, srv.URL, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}})
	if resp.Proto != "HTTP/1.1" || body != "HTTP/1.1" {
		t.Fatalf("upgrade request over %s (server saw %q), want HTTP/1.1", resp.Proto, body)
	}
	// The upgrade's connection left its pool (and the emptied pool was
	// forgotten); the host's HTTP/2 pool is untouched.
	key := strings.TrimPrefix(srv.URL, "https://")
	if s := tr.Stats()["https://"+key]; s.Protocol != "HTTP/2.0" || s.Open != 1 {
		t.Errorf("h2 pool: %+v", s)
	}
}

// httptrace over HTTP/2: GetConn and GotConn once per request, the dial's
// hooks once, on the request that dialed.
func TestH2Trace(t *testing.T) {
	srv, _ := h2TestServer(t, h2Prefer, protoHandler(), nil)
	tr := newTestTransport(t, TransportOptions{TLSClientConfig: tlsRoots(srv)})
	for i, want := range []string{
		"GetConn ConnectStart TLSHandshakeStart TLSHandshakeDone(h2) GotConn(reused=false)",
		"GetConn GotConn(reused=true,idle=true)",
	} {
		var mu sync.Mutex
		var events []string
		add := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
		trace := &httptrace.ClientTrace{
			GetConn:           func(string) { add("GetConn") },
			ConnectStart:      func(string, string) { add("ConnectStart") },
			TLSHandshakeStart: func() { add("TLSHandshakeStart") },
			TLSHandshakeDone:  func(s tls.ConnectionState, _ error) { add("TLSHandshakeDone(" + s.NegotiatedProtocol + ")") },
			GotConn: func(info httptrace.GotConnInfo) {
				if info.Reused {
					add(fmt.Sprintf("GotConn(reused=true,idle=%v)", info.WasIdle))
				} else {
					add("GotConn(reused=false)")
				}
			},
		}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(parCtx(t), trace), "GET", srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		mu.Lock()
		got := strings.Join(events, " ")
		mu.Unlock()
		if got != want {
			t.Errorf("request %d: trace %q, want %q", i, got, want)
		}
	}
}

// Transport.Close fails waiting and in-flight HTTP/2 requests and leaves no
// goroutine behind; CloseIdleConnections closes idle HTTP/2 connections.
func TestH2CloseAndCloseIdle(t *testing.T) {
	verifyNoLeaks(t)
	started := make(chan struct{}, 1)
	srv, _ := h2TestServer(t, h2Prefer, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hang" {
			started <- struct{}{}
			<-r.Context().Done()
			return
		}
		io.WriteString(w, r.Proto)
	}), nil)
	tr := NewTransport(TransportOptions{TLSClientConfig: tlsRoots(srv)})
	h2Get(t, tr, srv.URL, nil)
	tr.CloseIdleConnections()
	for k, s := range tr.Stats() {
		if s.Open != 0 {
			t.Errorf("after CloseIdleConnections: Stats()[%s] = %+v", k, s)
		}
	}
	h2Get(t, tr, srv.URL, nil) // dials again
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(parCtx(t), "GET", srv.URL+"/hang", nil)
		_, err := tr.RoundTrip(req)
		errc <- err
	}()
	<-started
	tr.Close()
	if err := <-errc; err == nil {
		t.Error("request in flight at Close succeeded")
	}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, ErrTransportClosed) {
		t.Errorf("RoundTrip after Close = %v", err)
	}
}

// Through a CONNECT tunnel TLS is end to end: an h2 origin is served over
// HTTP/2 behind http and https proxies, and the proxy hears HTTP/1.1 only.
func TestH2ThroughConnectProxy(t *testing.T) {
	for _, proxyTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("https proxy %v", proxyTLS), func(t *testing.T) {
			srv, accepted := h2TestServer(t, h2Prefer, protoHandler(), nil)
			p := newHTTPProxy(t, proxyTLS, "")
			pu, _ := url.Parse(p.URL)
			setTestHook(t, &testHookFarHop, time.Hour) // a slow tunnel under -race is not a far host
			tr := newTestTransport(t, TransportOptions{Proxy: http.ProxyURL(pu), TLSClientConfig: tlsRoots(srv)})
			h2Parallel(t, tr, srv.URL, 10)
			if a, c := accepted.Load(), p.conns.Load(); a != 1 || c != 1 {
				t.Errorf("origin accepted %d connections, proxy %d; want 1", a, c)
			}
			for k, s := range tr.Stats() {
				if !strings.Contains(k, " via ") || s.Protocol != "HTTP/2.0" {
					t.Errorf("Stats()[%s] = %+v", k, s)
				}
			}
		})
	}
}

// OptionsFrom carries net/http's protocol choice: for each configuration,
// net/http and a Transport made with OptionsFrom speak the same protocol to
// a server that prefers HTTP/2, and OptionsFrom gives the same answer
// before and after net/http has used the configuration (its first use
// fills in TLSNextProto and TLSClientConfig).
func TestH2OptionsFromMatchesNetHTTP(t *testing.T) {
	srv, _ := h2TestServer(t, h2Prefer, protoHandler(), nil)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	cases := []struct {
		name  string
		proto string // what net/http speaks
		make  func() *http.Transport
	}{
		{"TLSClientConfig", "HTTP/1.1", func() *http.Transport { return &http.Transport{TLSClientConfig: tlsRoots(srv)} }},
		{"TLSClientConfig, ForceAttemptHTTP2", "HTTP/2.0", func() *http.Transport {
			return &http.Transport{TLSClientConfig: tlsRoots(srv), ForceAttemptHTTP2: true}
		}},
		{"DialContext, ForceAttemptHTTP2", "HTTP/2.0", func() *http.Transport {
			return &http.Transport{TLSClientConfig: tlsRoots(srv), DialContext: dial, ForceAttemptHTTP2: true}
		}},
		{"ForceAttemptHTTP2, empty TLSNextProto", "HTTP/1.1", func() *http.Transport {
			return &http.Transport{TLSClientConfig: tlsRoots(srv), ForceAttemptHTTP2: true,
				TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
		}},
		{"Protocols HTTP1+HTTP2", "HTTP/2.0", func() *http.Transport {
			return &http.Transport{TLSClientConfig: tlsRoots(srv), Protocols: protocols(true, true, false)}
		}},
		{"Protocols HTTP1", "HTTP/1.1", func() *http.Transport {
			return &http.Transport{TLSClientConfig: tlsRoots(srv), ForceAttemptHTTP2: true, Protocols: protocols(true, false, false)}
		}},
		{"DefaultTransport clone", "HTTP/2.0", func() *http.Transport {
			ht := http.DefaultTransport.(*http.Transport).Clone()
			ht.TLSClientConfig = tlsRoots(srv)
			return ht
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			std := tc.make()
			defer std.CloseIdleConnections()
			before := OptionsFrom(std)
			want, _ := h2Get(t, std, srv.URL, nil)
			if want.Proto != tc.proto {
				t.Fatalf("net/http spoke %s, want %s", want.Proto, tc.proto)
			}
			after := OptionsFrom(std)
			for i, o := range []TransportOptions{before, after} {
				got, _ := h2Get(t, newTestTransport(t, o), srv.URL, nil)
				if got.Proto != want.Proto {
					t.Errorf("OptionsFrom (%s net/http's first use): %s, net/http: %s", []string{"before", "after"}[i], got.Proto, want.Proto)
				}
			}
		})
	}
}

// A request queued in the HTTP/1 pool and redirected to HTTP/2 still gets
// its RequestDone: the Observer's queued and done counts stay balanced.
// (The HTTP/2 side itself reports no Observer events yet.)
func TestH2ObserverBalanced(t *testing.T) {
	// The POST's body is read before the answer: a body the server
	// answered first may be cut short (RequestWritten not reported).
	srv, _ := h2TestServer(t, h2Prefer, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, r.Proto)
	}), nil)
	var queued, assigned, done, h2Done, opened, closed, written, heads atomic.Int32
	var mu sync.Mutex
	var problems []string
	// A request's events between assignment and its end carry its
	// connection and HTTP/2; RequestHeaders its status.
	check := func(name *atomic.Int32, ev RequestEvent, wantStatus int) {
		name.Add(1)
		if ev.Protocol != "HTTP/2.0" || ev.ConnID == 0 || ev.Status != wantStatus || ev.Request == nil {
			mu.Lock()
			problems = append(problems, fmt.Sprintf("%+v", ev))
			mu.Unlock()
		}
	}
	obs := &Observer{
		RequestQueued:   func(RequestEvent) { queued.Add(1) },
		RequestAssigned: func(ev RequestEvent) { check(&assigned, ev, 0) },
		RequestWritten:  func(ev RequestEvent) { check(&written, ev, 0) },
		RequestHeaders:  func(ev RequestEvent) { check(&heads, ev, 200) },
		RequestDone: func(ev RequestEvent) {
			done.Add(1)
			if ev.Protocol == "HTTP/2.0" && ev.Err == nil && ev.Status == 200 {
				h2Done.Add(1)
			}
		},
		ConnOpened: func(ConnEvent) { opened.Add(1) },
		ConnClosed: func(ConnEvent) { closed.Add(1) },
	}
	tr := newTestTransport(t, TransportOptions{TLSClientConfig: tlsRoots(srv), Observer: obs})
	h2Parallel(t, tr, srv.URL, 10)
	h2Get(t, tr, srv.URL, nil)
	req, _ := http.NewRequestWithContext(parCtx(t), "POST", srv.URL, strings.NewReader("a body"))
	if resp, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	} else {
		readBody(t, resp)
	}
	if q, d := queued.Load(), done.Load(); q != d || q == 0 {
		t.Errorf("RequestQueued %d times, RequestDone %d times", q, d)
	}
	// WroteRequest may come after RoundTrip returned.
	waitFor(t, "RequestWritten for every request", func() bool { return written.Load() == 12 })
	if n := heads.Load(); n != 12 {
		t.Errorf("RequestHeaders %d times, want 12 (one per request)", n)
	}
	mu.Lock()
	for _, p := range problems {
		t.Errorf("event %s", p)
	}
	mu.Unlock()
	// Requests sent while the first connection is dialed are queued by
	// the HTTP/1 pool and then sent over HTTP/2: they too are reported
	// assigned, written, answered and done over HTTP/2.
	if q, a := queued.Load(), assigned.Load(); q != a {
		t.Errorf("RequestQueued %d times, RequestAssigned %d times", q, a)
	}
	if n := h2Done.Load(); n != 12 {
		t.Errorf("RequestDone over HTTP/2 with its status: %d times, want 12", n)
	}
	tr.Close()
	if o, c := opened.Load(), closed.Load(); o != c || o == 0 {
		t.Errorf("ConnOpened %d times, ConnClosed %d times after Close, want equal", o, c)
	}
}

// h2Parallel sends n GETs of url through tr at once and waits for them
// (h2GetsGo).
func h2Parallel(t *testing.T, tr http.RoundTripper, url string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	h2GetsGo(t, &wg, tr, url, n)
	wg.Wait()
}

// heldHandler returns a handler that counts the requests in it (in) and
// holds each until release is closed, then answers r.Proto.
func heldHandler() (h http.Handler, in *atomic.Int32, release chan struct{}) {
	in, release = new(atomic.Int32), make(chan struct{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.Add(1)
		<-release
		io.WriteString(w, r.Proto)
	}), in, release
}

// h2GetsGo starts n GETs of url through tr on wg, each checking that it was
// served over HTTP/2 (by protoHandler, or any handler that answers
// r.Proto).
func h2GetsGo(t *testing.T, wg *sync.WaitGroup, tr http.RoundTripper, url string, n int) {
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(parCtx(t), "GET", url, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.Proto != "HTTP/2.0" || string(b) != "HTTP/2.0" {
				t.Errorf("served over %s (server saw %q)", resp.Proto, b)
			}
		})
	}
}

// The deprecated Request.Cancel cancels a request that waits for an HTTP/2
// stream (the connection's only stream is taken, and no other connection
// may be opened), with net/http's error; once a request has its stream,
// the standard library's client watches the channel.
func TestH2LegacyCancelWhileWaiting(t *testing.T) {
	verifyNoLeaks(t)
	release := make(chan struct{})
	srv, _ := h2TestServer(t, h2Prefer, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hold":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "/hang":
			<-r.Context().Done()
		}
		io.WriteString(w, r.Proto)
	}), &http.HTTP2Config{MaxConcurrentStreams: 1})
	tr := newTestTransport(t, TransportOptions{TLSClientConfig: tlsRoots(srv), MaxConnsPerHost: 1})
	h2Get(t, tr, srv.URL, nil) // learn the server's limit
	held := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(parCtx(t), "GET", srv.URL+"/hold", nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			readBody(t, resp)
		}
		held <- err
	}()
	waitFor(t, "/hold in flight", func() bool { return tr.Stats()[srv.URL].Streams == 1 })
	for _, stage := range []string{"waiting", "with its stream"} {
		req, _ := http.NewRequest("GET", srv.URL+"/hang", nil)
		cancel := make(chan struct{})
		//lint:ignore SA1019 the deprecated field is what is tested.
		req.Cancel = cancel
		done := make(chan error, 1)
		go func() {
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
				err = errors.New("answered")
			}
			done <- err
		}()
		if stage == "with its stream" {
			close(release) // the first request ends: the second gets the stream
			if err := <-held; err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the second request's stream", func() bool { return tr.Stats()[srv.URL].Streams == 1 })
		} else {
			waitFor(t, "a request queued", func() bool { return tr.Stats()[srv.URL].Queued == 1 })
		}
		close(cancel)
		select {
		case err := <-done:
			if err == nil || err.Error() != "net/http: request canceled" {
				t.Errorf("%s: RoundTrip error %v, want net/http: request canceled", stage, err)
			}
		case <-time.After(testTimeout):
			t.Fatalf("%s: RoundTrip did not return after Cancel closed", stage)
		}
	}
}

// Requests waiting for an HTTP/2 stream get one when a stream ends, even a
// stream too short for the ClientConn's state hook to see: the hook
// compares the connection's state with its last look, which it takes at
// the end of RoundTrip, so a stream that begins and ends between two looks
// changes nothing it can see. With one stream and one connection allowed,
// every request but one waits for another's end.
func TestH2WaitersWakeAfterShortStreams(t *testing.T) {
	verifyNoLeaks(t)
	srv, _ := h2TestServer(t, h2Prefer, protoHandler(), &http.HTTP2Config{MaxConcurrentStreams: 1})
	tr := newTestTransport(t, TransportOptions{TLSClientConfig: tlsRoots(srv), MaxConnsPerHost: 1})
	h2Get(t, tr, srv.URL, nil) // learn the server's limit
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range 8 {
		wg.Go(func() {
			for range 25 {
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					failed.Add(1)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d callers failed (%v): requests waited for a stream that had come free; stats %+v", n, context.Cause(ctx), tr.Stats()[srv.URL])
	}
}

// TestDifferentialH2Load runs the same load, GETs (short, slower, 200 KB)
// and POSTs from callers that pause at random, through pipelined and
// net/http at once against HTTP/2 servers that allow one stream or three
// per connection, or close idle connections after a few milliseconds
// (GOAWAY, then close: a request may meet a connection as it goes), both
// clients allowed 2 connections. Every answer must be the caller's own, no
// POST may run twice, and pipelined may fail only where net/http fails
// too.
func TestDifferentialH2Load(t *testing.T) {
	for _, tc := range []struct {
		name    string
		streams uint32
		idle    time.Duration
	}{
		{"one stream", 1, 0},
		{"3 streams, 30ms idle timeout", 3, 30 * time.Millisecond},
		{"10ms idle timeout", 0, 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verifyNoLeaks(t)
			var posts sync.Map // id → *atomic.Int32, runs of the POST
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				if r.Method == http.MethodPost {
					v, _ := posts.LoadOrStore(string(b), new(atomic.Int32))
					v.(*atomic.Int32).Add(1)
				}
				switch {
				case strings.HasPrefix(r.URL.Path, "/slow/"):
					time.Sleep(5 * time.Millisecond)
				case strings.HasPrefix(r.URL.Path, "/big/"):
					w.Write(bytes.Repeat([]byte(r.URL.Path), 200<<10/len(r.URL.Path)))
					return
				}
				fmt.Fprintf(w, "%s %s", r.URL.Path, b)
			})
			srv, _ := h2TestServerWith(t, h2Prefer, h, func(s *http.Server) {
				s.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: int(tc.streams)}
				s.IdleTimeout = tc.idle
			})
			run := func(prefix string, rt http.RoundTripper) []string {
				return runCallers(8, 20, 1, 20*time.Millisecond, func(_ *rand.Rand, g, i int) string {
					id := fmt.Sprintf("%s-%d-%d", prefix, g, i)
					path := []string{"/get/", "/slow/", "/big/"}[i%3] + id
					method, body, want := http.MethodGet, "", path+" "
					if i%4 == 1 {
						method, body, want = http.MethodPost, id, path+" "+id
					}
					if strings.HasPrefix(path, "/big/") {
						want = string(bytes.Repeat([]byte(path), 200<<10/len(path)))
					}
					ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
					got := ""
					resp, err := rt.RoundTrip(req)
					if err == nil {
						got = readBody(t, resp)
					}
					if err != nil || got != want {
						return fmt.Sprintf("%s %s: %v %.40q", method, path, err, got)
					}
					return ""
				})
			}
			ours := newTestTransport(t, TransportOptions{TLSClientConfig: tlsRoots(srv), MaxConnsPerHost: 2})
			std := &http.Transport{TLSClientConfig: tlsRoots(srv), ForceAttemptHTTP2: true, MaxConnsPerHost: 2}
			defer std.CloseIdleConnections()
			var fo, fs []string
			var wg sync.WaitGroup
			wg.Go(func() { fo = run("p", ours) })
			wg.Go(func() { fs = run("n", std) })
			wg.Wait()
			t.Logf("failed: pipelined %d, net/http %d", len(fo), len(fs))
			if len(fo) > 0 && len(fs) == 0 {
				t.Errorf("pipelined failed %d requests where net/http failed none, e.g. %s", len(fo), fo[0])
			}
			posts.Range(func(k, v any) bool {
				if n := v.(*atomic.Int32).Load(); n > 1 {
					t.Errorf("POST %s ran %d times", k, n)
				}
				return true
			})
		})
	}
}

// A host that spoke HTTP/2 and whose new connection negotiates HTTP/1.1
// (another server at the same address, a configuration changed) turns back
// to HTTP/1.1, as net/http follows each connection's protocol: the
// requests waiting for a stream move to the HTTP/1 pool, bodies intact,
// and a later connection that negotiates h2 turns it to HTTP/2 again. The
// Observer's events stay balanced across the moves.
func TestH2HostTurnsBackToHTTP1(t *testing.T) {
	verifyNoLeaks(t)
	srv, h1only := alpnSwitchServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s", r.Proto, b)
	}), 0)
	var mu sync.Mutex
	var queued, resent, assigned, done int
	var problems []string
	obs := &Observer{
		RequestQueued: func(ev RequestEvent) {
			mu.Lock()
			defer mu.Unlock()
			queued++
			if ev.Resend != ResendNone {
				resent++
			}
		},
		RequestAssigned: func(RequestEvent) { mu.Lock(); assigned++; mu.Unlock() },
		RequestDone: func(ev RequestEvent) {
			mu.Lock()
			defer mu.Unlock()
			done++
			if ev.Err != nil || ev.Protocol == "" {
				problems = append(problems, fmt.Sprintf("RequestDone %+v", ev))
			}
		},
	}
	tr := newTestTransport(t, TransportOptions{TLSClientConfig: tlsRoots(srv), Observer: obs})
	send := func(method, body string) string {
		req, _ := http.NewRequestWithContext(parCtx(t), method, srv.URL, strings.NewReader(body))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return "error: " + err.Error()
		}
		if resp.Request != req {
			t.Errorf("%s: resp.Request is not the caller's request", method)
		}
		return readBody(t, resp)
	}
	protocol := func() string { return tr.Stats()[srv.URL].Protocol }
	for i, phase := range []struct {
		h1only bool
		want   string
	}{{false, "HTTP/2.0"}, {true, "HTTP/1.1"}, {false, "HTTP/2.0"}, {true, "HTTP/1.1"}} {
		h1only.Store(phase.h1only)
		// The last phase's connections are closed once idle and none is
		// being dialed: an HTTP/2 stream may count in flight for a moment
		// after its body was read, and a dial the last phase started may
		// still be going; either connection would serve the next phase in
		// its own protocol, as net/http's would (1 run in 30 failed).
		waitFor(t, "every connection idle, none dialing", func() bool {
			s, ok := tr.Stats()[srv.URL]
			return !ok || s.Idle == s.Open && s.Dialing == 0
		})
		tr.CloseIdleConnections()
		// Several at once: one dials, the others wait for it.
		var wg sync.WaitGroup
		for j := range 6 {
			wg.Go(func() {
				method := http.MethodGet
				if j%2 == 0 {
					method = http.MethodPost
				}
				body := fmt.Sprintf("%d-%d", i, j)
				if got, want := send(method, body), phase.want+" "+body; got != want {
					t.Errorf("phase %d: %s = %q, want %q", i, method, got, want)
				}
			})
		}
		wg.Wait()
		if p := protocol(); p != phase.want {
			t.Errorf("phase %d: Stats Protocol %q, want %q", i, p, phase.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	if done != 24 || queued != assigned || queued-resent != done {
		t.Errorf("queued %d (%d sent again), assigned %d, done %d: want 24 done, queued = assigned = done + sent again", queued, resent, assigned, done)
	}
}

// The pool of an HTTP/2 host is forgotten once it has no connection, dial
// or waiter left, as an HTTP/1 host's is, so that a client visiting many
// hosts keeps nothing for those it no longer talks to: after
// CloseIdleConnections, and after the idle timeout while requests come and
// go (a request that finds a pool as it is forgotten is placed on the
// host's new one). These pools were kept for ever before.
func TestH2ManyHostsLeaveNoPool(t *testing.T) {
	verifyNoLeaks(t)
	srv, _ := h2TestServer(t, h2cOnly, protoHandler(), nil)
	opts := TransportOptions{Protocols: protocols(false, false, true), DialContext: redirectDialer(strings.TrimPrefix(srv.URL, "http://"))}
	tr := newTestTransport(t, opts)
	for i := range 300 {
		if _, body := h2Get(t, tr, fmt.Sprintf("http://h%d.test/", i), nil); body != "HTTP/2.0" {
			t.Fatalf("h%d.test: the server saw %q, want HTTP/2.0", i, body)
		}
	}
	if n := len(tr.Stats()); n != 300 {
		t.Fatalf("%d pools, want 300", n)
	}
	tr.CloseIdleConnections()
	waitFor(t, "no pool left after CloseIdleConnections", func() bool { return len(tr.Stats()) == 0 })

	opts.IdleConnTimeout = 20 * time.Millisecond
	tr = newTestTransport(t, opts)
	for _, f := range h2RandomGets(t, tr, 8, 25, 10, 40*time.Millisecond, 2) {
		t.Error(f)
	}
	waitFor(t, "no pool left after the idle timeout", func() bool { return len(tr.Stats()) == 0 })
}

// h2RandomGets runs callers goroutines, each sending each GETs of
// http://h<i>.test/ (i below hosts, at random, seeded by seed) through
// tr after a random pause below pause, and returns the failures: an error,
// or an answer not over HTTP/2.
func h2RandomGets(t *testing.T, tr http.RoundTripper, callers, each, hosts int, pause time.Duration, seed uint64) []string {
	t.Helper()
	return runCallers(callers, each, seed, pause, func(rng *rand.Rand, _, _ int) string {
		url := fmt.Sprintf("http://h%d.test/", rng.IntN(hosts))
		req, _ := http.NewRequestWithContext(parCtx(t), "GET", url, nil)
		resp, err := tr.RoundTrip(req)
		got := ""
		if err == nil {
			got = readBody(t, resp)
		}
		if err != nil || got != "HTTP/2.0" {
			return fmt.Sprintf("GET %s: %v, the server saw %q", url, err, got)
		}
		return ""
	})
}

// runCallers runs callers goroutines, each making each calls of
// call(rng, g, i) after a random pause below pause (rng is seeded by g
// and seed), and returns what the calls that failed returned (a call
// returns "" when it succeeds).
func runCallers(callers, each int, seed uint64, pause time.Duration, call func(rng *rand.Rand, g, i int) string) []string {
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), seed))
			for i := range each {
				time.Sleep(time.Duration(rng.Int64N(int64(pause))))
				if f := call(rng, g, i); f != "" {
					mu.Lock()
					failed = append(failed, f)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return failed
}

// everyFewMillis runs f after random pauses below max until the returned
// stop is called, which waits for it.
func everyFewMillis(max time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Duration(rand.Int64N(int64(max)))):
				f()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// alpnSwitchServer starts an HTTPS server running h, with idle timeout
// idle, that offers h2 and http/1.1 in ALPN, or http/1.1 only while the
// returned flag is set.
func alpnSwitchServer(t *testing.T, h http.Handler, idle time.Duration) (*httptest.Server, *atomic.Bool) {
	t.Helper()
	h1only := new(atomic.Bool)
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
	srv.Config.IdleTimeout = idle
	srv.StartTLS()
	t.Cleanup(srv.Close)
	// Set once started (StartTLS adds the certificate), before any
	// connection.
	h1 := srv.TLS.Clone()
	h1.NextProtos = []string{"http/1.1"}
	srv.TLS.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if h1only.Load() {
			return h1, nil
		}
		return nil, nil
	}
	return srv, h1only
}

// TestH2PoolsChurn: 12 callers over 4 HTTP/2 hosts whose server allows
// two streams and closes idle connections after 15 ms, our idle timeout
// 10 ms, and CloseIdleConnections every few milliseconds: pools are
// forgotten and made again under the load. No request fails, and no pool
// or goroutine is left.
func TestH2PoolsChurn(t *testing.T) {
	verifyNoLeaks(t)
	srv, _ := h2TestServerWith(t, h2cOnly, protoHandler(), func(s *http.Server) {
		s.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 2}
		s.IdleTimeout = 15 * time.Millisecond
	})
	opts := TransportOptions{Protocols: protocols(false, false, true), DialContext: redirectDialer(strings.TrimPrefix(srv.URL, "http://")),
		IdleConnTimeout: 10 * time.Millisecond, MaxConnsPerHost: 2}
	tr := newTestTransport(t, opts)
	stop := everyFewMillis(10*time.Millisecond, tr.CloseIdleConnections)
	fails := h2RandomGets(t, tr, 12, 60, 4, 8*time.Millisecond, 3)
	stop()
	for _, f := range fails {
		t.Error(f)
	}
	waitFor(t, "no pool", func() bool { return len(tr.Stats()) == 0 })
}

// TestDifferentialALPNFlap: a server that switches between offering h2
// and HTTP/1.1 only every few milliseconds and closes idle connections
// after 20 ms, and 10 callers sending GETs and POSTs (bodies echoed), some
// calling CloseIdleConnections, through pipelined and then net/http: the
// host turns from one protocol to the other under the load (h2Host.demoted,
// h2Dialed). pipelined may fail nothing where net/http fails nothing, but
// a POST written as the server's idle timeout closed its connection, which
// either client loses (RFC 9112 §9.3.1: it may have been processed, so it
// is not sent again; net/http says "EOF" or "server closed idle
// connection"): about 1 run in 100 under load, for each client, and none
// without the server's idle timeout. A failure names what the server read
// of the request (protocol, body, error), and a wrong body the protocol of
// its answer: an empty echo over HTTP/2 is a body sent after an earlier
// attempt read it.
func TestDifferentialALPNFlap(t *testing.T) {
	verifyNoLeaks(t)
	var mu sync.Mutex
	seen := map[string][]string{} // by X-Id: what the server read of each request
	srv, h1only := alpnSwitchServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		mu.Lock()
		id := r.Header.Get("X-Id")
		seen[id] = append(seen[id], fmt.Sprintf("%s %q %v", r.Proto, b, err))
		mu.Unlock()
		fmt.Fprintf(w, "%s", b)
	}), 20*time.Millisecond)
	stop := everyFewMillis(15*time.Millisecond, func() { h1only.Store(!h1only.Load()) })
	failed := map[string]int{}
	for _, name := range []string{"pipelined", "net/http"} {
		var rt http.RoundTripper
		var closeIdle func()
		if name == "pipelined" {
			tr := NewTransport(TransportOptions{TLSClientConfig: tlsRoots(srv), MaxConnsPerHost: 2, IdleConnTimeout: 10 * time.Millisecond})
			defer tr.Close()
			rt, closeIdle = tr, tr.CloseIdleConnections
		} else {
			st := &http.Transport{TLSClientConfig: tlsRoots(srv), ForceAttemptHTTP2: true, MaxConnsPerHost: 2, IdleConnTimeout: 10 * time.Millisecond}
			defer st.CloseIdleConnections()
			rt, closeIdle = st, st.CloseIdleConnections
		}
		fails := runCallers(10, 40, 4, 6*time.Millisecond, func(rng *rand.Rand, g, i int) string {
			if rng.IntN(20) == 0 {
				closeIdle()
			}
			body := fmt.Sprintf("%d-%d", g, i)
			method := "GET"
			if i%3 == 0 {
				method = "POST"
			}
			req, _ := http.NewRequestWithContext(parCtx(t), method, srv.URL, strings.NewReader(body))
			id := name + " " + body
			req.Header.Set("X-Id", id)
			resp, err := rt.RoundTrip(req)
			if err != nil && method == "POST" && errors.Is(err, ErrServerClosed) {
				t.Logf("%s: POST lost to the server's idle timeout: %v", name, err)
				return ""
			}
			var f string
			if err != nil {
				f = fmt.Sprintf("%s %s: %v", method, body, err)
			} else if b := readBody(t, resp); b != body {
				f = fmt.Sprintf("%s %s: body %q over %s", method, body, b, resp.Proto)
			} else {
				return ""
			}
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("%s; the server read %q", f, seen[id])
		})
		failed[name] = len(fails)
		for _, f := range fails {
			t.Logf("%s: %s", name, f)
		}
	}
	stop()
	if failed["pipelined"] > 0 && failed["net/http"] == 0 {
		t.Errorf("pipelined failed %d requests, net/http none", failed["pipelined"])
	}
}

// TestH1RetryOverH2SendsFreshBody: a request whose HTTP/1.1 connection
// failed after taking its body, and whose host speaks HTTP/2 by the time
// it is sent again (its retry's dial negotiated h2), goes to the HTTP/2
// side with a fresh body from GetBody, as net/http rewinds a body for each
// retry. It went with the body the first attempt had read, and the server
// saw an empty one (TestDifferentialALPNFlap, a few runs in a hundred). A
// request that may not be sent again is sent once.
func TestH1RetryOverH2SendsFreshBody(t *testing.T) {
	verifyNoLeaks(t)
	var mu sync.Mutex
	seen := map[string]int{} // bodies the server read, over either protocol
	var h1only *atomic.Bool
	srv, h1only := alpnSwitchServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[string(b)]++
		mu.Unlock()
		if r.Header.Get("X-Close") != "" && r.ProtoMajor == 1 {
			// Read whole, not answered: the connection fails under the
			// request, and the next dial negotiates h2.
			h1only.Store(false)
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		fmt.Fprintf(w, "%s %s", r.Proto, b)
	}), 0)
	send := func(tr *Transport, method, body string, getBody bool) string {
		req, _ := http.NewRequestWithContext(parCtx(t), method, srv.URL, strings.NewReader(body))
		if body != "" {
			req.Header.Set("X-Close", "1")
		}
		if !getBody {
			req.GetBody = nil
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return err.Error()
		}
		return readBody(t, resp)
	}
	for _, tc := range []struct {
		method  string
		getBody bool   // the body can be had again (GetBody)
		want    string // the answer, or the error
		sent    int    // times the server read the body
	}{
		{"GET", true, "HTTP/2.0 GET-true", 2},
		{"PUT", true, "HTTP/2.0 PUT-true", 2},
		{"POST", true, ErrServerClosed.Error() + ": EOF", 1},
		{"GET", false, ErrServerClosed.Error() + ": EOF", 1},
	} {
		h1only.Store(true)
		// One connection: the request is the second on it (a connection's
		// first request is not sent again after a failure).
		tr := newTestTransport(t, TransportOptions{TLSClientConfig: tlsRoots(srv), MaxConnsPerHost: 1})
		if got := send(tr, "GET", "", true); got != "HTTP/1.1 " {
			t.Fatalf("first request = %q, want \"HTTP/1.1 \"", got)
		}
		body := fmt.Sprintf("%s-%v", tc.method, tc.getBody)
		got := send(tr, tc.method, body, tc.getBody)
		mu.Lock()
		sent := seen[body]
		mu.Unlock()
		if got != tc.want || sent != tc.sent {
			t.Errorf("%s (GetBody %v) = %q, sent %d times, want %q, sent %d times", tc.method, tc.getBody, got, sent, tc.want, tc.sent)
		}
		tr.Close()
	}
}
