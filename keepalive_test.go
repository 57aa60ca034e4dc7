package pipelined

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// keepAliveServer answers every request with the given Keep-Alive header,
// and closes a connection idle for idle (as Node's keepAliveTimeout does),
// or after max requests. It counts the POSTs it runs.
func keepAliveServer(header string, idle time.Duration, max int, posts *atomic.Int32) *memServer {
	return &memServer{handle: func(_ int, c net.Conn, br *bufio.Reader) {
		for n := 0; max == 0 || n < max; n++ {
			if idle > 0 {
				c.SetReadDeadline(time.Now().Add(idle))
			}
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if req.Method == http.MethodPost {
				posts.Add(1)
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nKeep-Alive: %s\r\nContent-Length: %d\r\n\r\n%s", header, len(req.URL.Path), req.URL.Path)
		}
	}}
}

// TestKeepAliveTimeoutPOSTs is the idle-timeout race: POSTs (and GETs) spaced at
// about the server's announced idle timeout. None may meet a connection the
// server is closing: a connection is retired timeout minus a margin after
// its last response, and a POST, which cannot be retried, takes no
// connection that has used half of that.
func TestKeepAliveTimeoutPOSTs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var posts atomic.Int32
		srv := keepAliveServer("timeout=5", 5*time.Second, 0, &posts)
		tr := NewTransport(TransportOptions{DialContext: srv.dial})
		defer tr.Close()
		// 5 s announced: a 1.25 s margin, so connections idle 3.75 s or
		// more are retired; a POST takes none idle 1.875 s or more.
		steps := []struct {
			method  string
			gap     time.Duration
			newConn bool
		}{
			{"POST", 0, true},
			{"POST", time.Second, false},
			{"POST", 2500 * time.Millisecond, true},
			{"GET", 2500 * time.Millisecond, false},
			{"GET", 3700 * time.Millisecond, false},
			{"GET", 3800 * time.Millisecond, true},
			{"POST", 4900 * time.Millisecond, true},
			{"POST", 5 * time.Second, true},
			{"POST", 5100 * time.Millisecond, true},
			{"POST", 1800 * time.Millisecond, false},
		}
		retired := 0
		for i, st := range steps {
			time.Sleep(st.gap)
			before := srv.dials.Load()
			var body io.Reader
			if st.method == http.MethodPost {
				body = strings.NewReader("x")
			}
			req, _ := http.NewRequest(st.method, "http://mem.test/p", body)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("%s %d after %v idle: %v", st.method, i, st.gap, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got := srv.dials.Load() > before; got != st.newConn {
				t.Errorf("%s %d after %v idle: new connection %v, want %v", st.method, i, st.gap, got, st.newConn)
			}
			retired = max(retired, tr.Stats()["http://mem.test:80"].Retired.KeepAlive)
		}
		if got, want := posts.Load(), int32(7); got != want {
			t.Errorf("server ran %d POSTs, want %d", got, want)
		}
		if retired == 0 {
			t.Errorf("Retired.KeepAlive stayed 0, want connections retired before the announced end")
		}
	})
}

// TestKeepAliveMax: max=M caps the requests assigned to a connection at
// the M the server still accepts.
func TestKeepAliveMax(t *testing.T) {
	tests := []struct {
		name   string
		max    func(served int) int // the max= sent with the response to request served+1
		accept int                  // requests the server accepts per connection
		dials  int32                // for 9 sequential POSTs
	}{
		// Apache counts down what it still accepts. The first response's
		// max is read as the smaller of the two readings (a total of 2),
		// so each connection carries 2 of the 3 it could: 5 dials.
		{"countdown", func(served int) int { return 2 - served }, 3, 5},
		// Node repeats its maxRequestsPerSocket: a total of 3.
		{"total", func(int) int { return 3 }, 3, 3},
		// A large countdown is read as such from the second response on.
		{"countdown large", func(served int) int { return 99 - served }, 100, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var posts atomic.Int32
				// The server relies on its max= alone: a request past it on
				// the connection is refused with 503 (as Node does).
				srv := &memServer{handle: func(_ int, c net.Conn, br *bufio.Reader) {
					for served := 0; ; served++ {
						req, err := http.ReadRequest(br)
						if err != nil {
							return
						}
						io.Copy(io.Discard, req.Body)
						if served >= tt.accept {
							io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
							return
						}
						posts.Add(1)
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5, max=%d\r\nContent-Length: 2\r\n\r\nok", tt.max(served))
					}
				}}
				tr := NewTransport(TransportOptions{DialContext: srv.dial})
				defer tr.Close()
				for i := range 9 {
					req, _ := http.NewRequest(http.MethodPost, "http://mem.test/p", strings.NewReader("x"))
					resp, err := tr.RoundTrip(req)
					if err != nil {
						t.Fatalf("POST %d: %v", i, err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("POST %d: %s, written past the server's max", i, resp.Status)
					}
				}
				if got := srv.dials.Load(); got != tt.dials {
					t.Errorf("dials = %d, want %d", got, tt.dials)
				}
				if got := posts.Load(); got != 9 {
					t.Errorf("server ran %d POSTs, want 9", got)
				}
			})
		})
	}
}
