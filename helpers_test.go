package pipelined

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// This file holds the helpers every test file shares: the one scripted raw
// server, the one polling helper, the one leak checker, and small request
// helpers.

// testTimeout bounds every wait in these tests; it only guards against
// hangs and is never a performance assertion.
const testTimeout = 20 * time.Second

// rawServer is a raw TCP server on 127.0.0.1 whose connections are handled
// by a test-supplied function, for misbehaviour httptest cannot produce.
// It is closed, its connections closed and its goroutines waited for, at
// the end of the test (close may also be called earlier, more than once).
type rawServer struct {
	ln    net.Listener
	addr  string
	conns atomic.Int64 // connections accepted
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  map[net.Conn]struct{}
}

// startRawServer runs handle for each accepted connection, with the
// connection's number (from 0); the connection is closed when handle
// returns.
func startRawServer(t *testing.T, handle func(n int, c net.Conn)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, addr: ln.Addr().String(), open: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(s.conns.Add(1) - 1)
			s.mu.Lock()
			s.open[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				handle(n, c)
				s.mu.Lock()
				delete(s.open, c)
				s.mu.Unlock()
				c.Close()
			}()
		}
	}()
	t.Cleanup(s.close)
	return s
}

// newRawServer is startRawServer for handlers that read the connection
// through a bufio.Reader.
func newRawServer(t *testing.T, handle func(c net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	return startRawServer(t, func(_ int, c net.Conn) { handle(c, bufio.NewReader(c)) })
}

func (s *rawServer) url(path string) string { return "http://" + s.addr + path }

func (s *rawServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// serveEcho answers each request with its path as the body, in order.
func serveEcho(c net.Conn, br *bufio.Reader) {
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
	}
}

// waitFor polls cond until it holds, failing the test after testTimeout (the
// bound only avoids a hang). It must be called from the test's goroutine.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v", what, testTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitOrFail waits for wg, failing the test (instead of hanging it) if that
// takes longer than testTimeout.
func waitOrFail(t *testing.T, wg *sync.WaitGroup, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatalf("%s: not done within %v", what, testTimeout)
	}
}

// verifyNoLeaks fails the test if goroutines started during it are still
// running after its cleanup (Transports closed, servers stopped), after a
// bounded wait. Call it first, so that its cleanup runs last.
func verifyNoLeaks(t *testing.T) {
	t.Helper()
	before := goroutineStacks()
	t.Cleanup(func() {
		var leaked []string
		deadline := time.Now().Add(testTimeout)
		for {
			leaked = leaked[:0]
			for id, stack := range goroutineStacks() {
				if _, ok := before[id]; !ok {
					leaked = append(leaked, stack)
				}
			}
			if len(leaked) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		for i, s := range leaked {
			if i == 5 {
				t.Errorf("... and %d more", len(leaked)-5)
				break
			}
			t.Errorf("goroutine leaked:\n%s", s)
		}
	})
}

var goroutineHeader = regexp.MustCompile(`^goroutine (\d+) `)

// goroutineStacks returns the stack of every goroutine, by id.
func goroutineStacks() map[int]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	m := make(map[int]string)
	for _, g := range strings.Split(string(buf), "\n\n") {
		if sm := goroutineHeader.FindStringSubmatch(g); sm != nil {
			id, _ := strconv.Atoi(sm[1])
			m[id] = g
		}
	}
	return m
}

// newTestTransport returns a Transport closed at the end of the test.
func newTestTransport(t *testing.T, opts TransportOptions) *Transport {
	t.Helper()
	tr := NewTransport(opts)
	t.Cleanup(func() { tr.Close() })
	return tr
}

func get(t *testing.T, tr http.RoundTripper, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr.RoundTrip(req)
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return string(b)
}
