//go:build !nopipelined

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pipelined/pipelined"
)

// TestSoakShort runs the soak for about 2 s against the fault server in a
// child process, with every fault on. It asserts the soak's own pass
// conditions, not its numbers.
//
// The second run hedges late heads (HedgeHeadOfLine) for 3 s: its faults
// are stalls longer than DefaultHeadOfLineTimeout, so that heads are late,
// and copies race their originals while other callers' requests come and
// go.
func TestSoakShort(t *testing.T) {
	for _, hedge := range []bool{false, true} {
		t.Run(fmt.Sprintf("HedgeHeadOfLine=%t", hedge), func(t *testing.T) {
			cfg := defaultSoakConfig()
			cfg.Duration = 2 * time.Second
			cfg.Progress = time.Second
			cfg.FaultRate = 0.02
			if hedge {
				cfg.Hedge = true
				cfg.Duration = 3 * time.Second
				cfg.Faults, cfg.FaultRate, cfg.Stall = "stall", 0.02, 1200*time.Millisecond
			}
			var out strings.Builder
			r, err := runSoak(cfg, &out)
			t.Log("\n" + out.String())
			if err != nil {
				t.Fatal(err)
			}
			if !r.Passed() {
				t.Errorf("soak failed: wrong caller %d, duplicate POSTs %d, goroutines %d before and %d after, callers stuck %v",
					r.Counts.wrongCaller, r.DupPosts, r.GoroutinesBefore, r.GoroutinesAfter, r.CallersStuck)
			}
			if r.Counts.served() == 0 {
				t.Error("no request served")
			}
			if n := r.Resends[pipelined.ResendHedge]; hedge != (n > 0) {
				t.Errorf("%d copies of late heads sent, want some only with HedgeHeadOfLine", n)
			}
			for _, want := range []string{"requests served", "errors by kind", "goroutines before", "heap in use before", "Stats() at the end"} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("report lacks %q", want)
				}
			}
		})
	}
}

// TestSoakServer checks the fault server without faults: pipelined
// requests are answered in order with their ids, HEAD without a body, and
// a POST id read twice is counted.
func TestSoakServer(t *testing.T) {
	s, err := newSoakServer(soakConfig{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		s.close()
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	reqs := "GET /get/1 HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /post/2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" +
		"HEAD /head/3 HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /post/2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
	if _, err := io.WriteString(c, reqs); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i, want := range []struct{ method, id, body string }{{"GET", "1", "1"}, {"POST", "2", "2"}, {"HEAD", "3", ""}, {"POST", "2", "2"}} {
		resp, err := http.ReadResponse(br, &http.Request{Method: want.method})
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || string(b) != want.body || resp.Header.Get("X-Id") != want.id {
			t.Errorf("response %d = %s X-Id %q body %q (%v), want 200 X-Id %q body %q",
				i, resp.Status, resp.Header.Get("X-Id"), b, err, want.id, want.body)
		}
	}
	c.Close()
	st := s.close()
	if st.Requests != 4 || st.Posts != 1 || st.DupPosts != 1 {
		t.Errorf("server stats: %d requests, %d POST ids, %d duplicates; want 4, 1, 1", st.Requests, st.Posts, st.DupPosts)
	}
}

func TestSoakErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&pipelined.ConnError{Err: io.EOF, Written: true}, "ErrServerClosed"},
		{&pipelined.FramingError{Reason: "x"}, "ErrFraming"},
		{fmt.Errorf("read: %w", context.DeadlineExceeded), "DeadlineExceeded"},
		{pipelined.ErrTransportClosed, "ErrTransportClosed"},
		{io.ErrUnexpectedEOF, "unexpected EOF"},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, "net error"},
		{&pipelined.ConnError{Err: io.EOF}, "ConnError (other)"}, // not written: not ErrServerClosed
		{&pipelined.ConnError{Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}, "net error"},
		{fmt.Errorf("%w 500", errBadStatus), "bad status"},
		{errors.New("x"), "other"},
	} {
		if got := soakErrorKind(tc.err); got != tc.want {
			t.Errorf("soakErrorKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestParseSoakFaults(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int // number of faults
		wantErr bool
	}{
		{"", int(numSoakFaults) - 1, false},
		{"all", int(numSoakFaults) - 1, false},
		{"stall", 1, false},
		{"conn-close, stall,stall", 2, false},
		{"none", 0, true},
		{"bogus", 0, true},
	} {
		got, err := parseSoakFaults(tc.in)
		if (err != nil) != tc.wantErr || len(got) != tc.want {
			t.Errorf("parseSoakFaults(%q) = %v, %v; want %d faults, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestSoakFlags(t *testing.T) {
	for _, tc := range []struct {
		dur, faults, c, timeout string
		wantErr                 bool
	}{
		{"2s", "0.5", "2", "1s", false},
		{"90s", "", "", "", false}, // capped by runSoak, not refused
		{"0s", "", "", "", true},
		{"x", "", "", "", true},
		{"1s", "1.5", "", "", true},
		{"1s", "", "0", "", true},
		{"1s", "", "2,3", "", true},
		{"1s", "", "", "0s", true},
	} {
		_, err := soakFlags(tc.dur, tc.faults, "", "", "", tc.c, "", "", tc.timeout)
		if (err != nil) != tc.wantErr {
			t.Errorf("soakFlags(%q, %q, c=%q, timeout=%q) error = %v, want error %v", tc.dur, tc.faults, tc.c, tc.timeout, err, tc.wantErr)
		}
	}
}
