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

func TestParseKeepAlive(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name  string
		lines []string // Keep-Alive field lines; nil: no field
		want  keepAliveHint
	}{
		{"absent", nil, keepAliveHint{}},
		{"empty", []string{""}, keepAliveHint{}},
		{"node default", []string{"timeout=5"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true}},
		{"apache", []string{"timeout=5, max=100"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true, max: 100, hasMax: true}},
		{"max only", []string{"max=3"}, keepAliveHint{max: 3, hasMax: true}},
		{"case", []string{"TimeOut=7, MAX=9"}, keepAliveHint{timeout: 7 * time.Second, hasTimeout: true, max: 9, hasMax: true}},
		{"spaces", []string{"  timeout = 5 ,\tmax\t=\t10  "}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true, max: 10, hasMax: true}},
		{"no space after comma", []string{"timeout=5,max=10"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true, max: 10, hasMax: true}},
		{"semicolon", []string{"timeout=5; max=10"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true, max: 10, hasMax: true}},
		{"quoted", []string{`timeout="5", max="10"`}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true, max: 10, hasMax: true}},
		{"quoted with escape", []string{`timeout="\5"`}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true}},
		{"quoted comma is not a separator", []string{`junk="a, max=1", max=4`}, keepAliveHint{max: 4, hasMax: true}},
		{"unterminated quote", []string{`timeout="5`}, keepAliveHint{}},
		{"junk after quote", []string{`timeout="5"x, max=2`}, keepAliveHint{max: 2, hasMax: true}},
		{"empty elements", []string{",,timeout=5,, ,max=2,"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true, max: 2, hasMax: true}},
		{"unknown parameters", []string{"foo=bar, timeout=5, baz"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true}},
		{"bare number (request-style Keep-Alive: 300)", []string{"300"}, keepAliveHint{}},
		{"not a number", []string{"timeout=five, max=1e3"}, keepAliveHint{}},
		{"unit", []string{"timeout=5s"}, keepAliveHint{}},
		{"fraction", []string{"timeout=1.5"}, keepAliveHint{}},
		{"sign", []string{"timeout=+5, max=-1"}, keepAliveHint{}},
		{"negative", []string{"timeout=-5"}, keepAliveHint{}},
		{"empty value", []string{"timeout=, max="}, keepAliveHint{}},
		{"no name", []string{"=5"}, keepAliveHint{}},
		{"zero", []string{"timeout=0, max=0"}, keepAliveHint{timeout: 0, hasTimeout: true, max: 0, hasMax: true}},
		{"leading zeros", []string{"timeout=0005"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true}},
		{"huge timeout capped", []string{"timeout=99999999999999999999999999"}, keepAliveHint{timeout: day, hasTimeout: true}},
		{"huge max capped", []string{"max=99999999999999999999999999"}, keepAliveHint{max: maxKeepAliveMax, hasMax: true}},
		{"just over the cap", []string{"timeout=86401"}, keepAliveHint{timeout: day, hasTimeout: true}},
		{"duplicate in one line: smallest", []string{"timeout=10, timeout=3, max=5, max=50"}, keepAliveHint{timeout: 3 * time.Second, hasTimeout: true, max: 5, hasMax: true}},
		{"duplicate over lines: smallest", []string{"timeout=3", "timeout=10, max=7", "max=2"}, keepAliveHint{timeout: 3 * time.Second, hasTimeout: true, max: 2, hasMax: true}},
		{"bad duplicate ignored", []string{"timeout=5, timeout=-1, timeout=x"}, keepAliveHint{timeout: 5 * time.Second, hasTimeout: true}},
		{"junk line and good line", []string{"\x00\xff;;==", "max=1"}, keepAliveHint{max: 1, hasMax: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, l := range tt.lines {
				h.Add("Keep-Alive", l)
			}
			if got := parseKeepAlive(h); got != tt.want {
				t.Errorf("parseKeepAlive(%q) = %+v, want %+v", tt.lines, got, tt.want)
			}
		})
	}
}

// FuzzParseKeepAlive: parseKeepAlive never panics, its results are within
// bounds, and adding a field line never raises what was announced (the
// smallest value of a parameter wins). The input's lines are field lines.
func FuzzParseKeepAlive(f *testing.F) {
	for _, s := range []string{"timeout=5", "timeout=5, max=100", `timeout="5"`, "max=3\ntimeout=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lines := strings.Split(s, "\n")
		got := parseKeepAlive(http.Header{"Keep-Alive": lines})
		if got.timeout < 0 || got.timeout > maxKeepAliveTimeout || got.timeout%time.Second != 0 || (!got.hasTimeout && got.timeout != 0) {
			t.Fatalf("parseKeepAlive(%q): timeout = %v (has %v), out of bounds", lines, got.timeout, got.hasTimeout)
		}
		if got.max < 0 || got.max > maxKeepAliveMax || (!got.hasMax && got.max != 0) {
			t.Fatalf("parseKeepAlive(%q): max = %d (has %v), out of bounds", lines, got.max, got.hasMax)
		}
		if len(lines) < 2 {
			return
		}
		first := parseKeepAlive(http.Header{"Keep-Alive": lines[:len(lines)-1]})
		if first.hasTimeout && (!got.hasTimeout || got.timeout > first.timeout) {
			t.Fatalf("parseKeepAlive(%q): timeout %v (has %v), more than %v without the last line", lines, got.timeout, got.hasTimeout, first.timeout)
		}
		if first.hasMax && (!got.hasMax || got.max > first.max) {
			t.Fatalf("parseKeepAlive(%q): max %d (has %v), more than %d without the last line", lines, got.max, got.hasMax, first.max)
		}
	})
}

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
