package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the server child process, as the
// benchmarks binary does with -serve.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestClientsAgainstServers sends a few requests with every client to both
// servers (in this process).
func TestClientsAgainstServers(t *testing.T) {
	for _, mode := range []string{modeSerial, modeConcurrent} {
		srv, err := startServer(serverConfig{Mode: mode, Delay: time.Millisecond, Body: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range allClients {
			t.Run(mode+"/"+name, func(t *testing.T) {
				const k = 3
				cl, err := newClient(name, clientConfig{Addrs: []string{srv.Addr}, C: 2, K: k, Timeout: 10 * time.Second, Dialer: newDialCounter()})
				if err != nil {
					t.Skip(err)
				}
				defer cl.Close()
				// At most K at once: fasthttp.PipelineClient fails
				// requests beyond a connection's queue, and until its
				// writer takes them it counts none pending there, so
				// all may go to one connection.
				for range 3 {
					errs := make(chan error, k)
					for range k {
						go func() { _, err := cl.Do(context.Background()); errs <- err }()
					}
					for range k {
						if err := <-errs; err != nil {
							t.Error(err)
						}
					}
				}
			})
		}
		srv.Close()
	}
}

// TestConcurrentServerPipelining writes several requests at once and
// expects the responses in order, the last one closing the connection.
func TestConcurrentServerPipelining(t *testing.T) {
	srv, err := startServer(serverConfig{Mode: modeConcurrent, Delay: 2 * time.Millisecond, Body: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	reqs := "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" +
		"GET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(c, reqs); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i := range 3 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || string(b) != "xxxxx" {
			t.Fatalf("response %d: %v %q %v", i, resp.Status, b, err)
		}
		if got := resp.Close; got != (i == 2) {
			t.Errorf("response %d: Close = %v", i, got)
		}
	}
	if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("after the last response: %d, %v; want EOF", n, err)
	}
}

// TestRun runs a short single scenario end to end: server child process,
// tables, JSON and SVG.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	o, err := parseOptions("2", "2", "2,4", "1ms", "100ms", "0s", "10s", "10", "both", "", "on", "2")
	if err != nil {
		t.Fatal(err)
	}
	o.jsonFile = filepath.Join(dir, "r.json")
	o.plotFile = filepath.Join(dir, "r.svg")
	o.markdownFile = filepath.Join(dir, "r.md")
	o.readmeFile = filepath.Join(dir, "README.md")
	readme := "# x\n\nbefore\n" + readmeBegin + "\nold table\n" + readmeEnd + "\nafter\n"
	if err := os.WriteFile(o.readmeFile, []byte(readme), 0o644); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := run(o, &out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	md, err := os.ReadFile(o.markdownFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Benchmarks", "## Machine and run", runtime.Version(), "## Method", "![", "(r.svg)",
		"## Summary", "## Not ahead yet", "### serial server, C=2 K=2 P=4", "| pipelined ÷ net/http |", regenerate} {
		if !strings.Contains(string(md), want) {
			t.Errorf("the page has no %q", want)
		}
	}
	rd, err := os.ReadFile(o.readmeFile)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(rd); strings.Contains(s, "old table") || !strings.HasPrefix(s, "# x\n\nbefore\n"+readmeBegin) ||
		!strings.HasSuffix(s, readmeEnd+"\nafter\n") || !strings.Contains(s, "| pipelined | ") || !strings.Contains(s, "(r.md)") {
		t.Errorf("README after -readme:\n%s", s)
	}
	b, err := os.ReadFile(o.jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Results []result }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if want := 2 * 2 * 6; len(doc.Results) != want { // 2 servers, 2 P, 4 clients + 2 no-keepalive rows
		t.Fatalf("%d results, want %d", len(doc.Results), want)
	}
	for _, r := range doc.Results {
		if r.Skipped == "" && r.Requests == 0 {
			t.Errorf("%s %s: no requests (errors %d: %s)", r.Scenario, r.Client, r.Errors, r.FirstError)
		}
	}
	svg, err := os.ReadFile(o.plotFile)
	if err != nil || !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "</svg>") {
		t.Errorf("bad SVG (%v)", err)
	}
}

// TestMergeRounds: rounds add up as one longer run would.
func TestMergeRounds(t *testing.T) {
	ms := time.Millisecond
	a := result{Seconds: 1, Requests: 3, lat: []time.Duration{1 * ms, 2 * ms, 3 * ms}, cpu: 30 * time.Microsecond, Ideal: 10, MaxOpen: 2}
	a.finish()
	b := result{Seconds: 1, Requests: 1, lat: []time.Duration{10 * ms}, cpu: 10 * time.Microsecond, Ideal: 10, MaxOpen: 3, Errors: 1, FirstError: "x"}
	var r result
	r.merge(a)
	r.merge(b)
	if r.Rounds != 2 || r.Requests != 4 || r.ReqPerSec != 2 || r.Ratio != 0.2 || r.MaxOpen != 3 || r.Errors != 1 || r.FirstError != "x" {
		t.Errorf("merge = %+v, want 2 rounds, 4 requests, 2 req/s, ratio 0.2, max open 3, 1 error", r)
	}
	if r.CPUPerReq != 10 {
		t.Errorf("merged CPUPerReq = %v, want 10", r.CPUPerReq)
	}
	if r.P50Ms != 3 && r.P50Ms != 2 {
		t.Errorf("merged P50Ms = %v, want the median of all four latencies", r.P50Ms)
	}
}

// TestDelayer: the mix of timer durations averages the configured delay
// within a generous margin (this only guards against a broken calibration).
func TestDelayer(t *testing.T) {
	const delay = 10 * time.Millisecond
	d := newDelayer(delay)
	if d.short > delay || d.long > delay || d.pLong < 0 || d.pLong > 1 {
		t.Fatalf("newDelayer(%v) = %+v, want durations <= the delay and 0 <= pLong <= 1", delay, d)
	}
	var sum time.Duration
	const n = 40
	for range n {
		t0 := time.Now()
		time.Sleep(d.next())
		sum += time.Since(t0)
	}
	if mean := sum / n; mean < delay/2 || mean > 2*delay {
		t.Errorf("mean real delay = %v, want about %v", mean, delay)
	}
}

// TestSuites runs every suite once, very briefly (50 ms per client): every
// row runs without errors, body bytes add up, and the
// slow suite's server counts requests (warm-up included, so at least one
// per caller).
func TestSuites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts many servers")
	}
	o, err := parseOptions("", "", "", "", "50ms", "0s", "10s", "", "", "", "", "1")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.setRunFlags("all", "", "", "", "50ms", ""); err != nil {
		t.Fatal(err)
	}
	if len(o.suites) != len(suiteNames) {
		t.Fatalf("suites %v, want %v", o.suites, suiteNames)
	}
	o.jsonFile = filepath.Join(t.TempDir(), "s.json")
	o.plotFile = filepath.Join(t.TempDir(), "s.svg")
	o.markdownFile = filepath.Join(t.TempDir(), "s.md")
	var out strings.Builder
	if err := run(o, &out); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	md, err := os.ReadFile(o.markdownFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range suiteNames {
		if !strings.Contains(string(md), "## Suite `"+s+"`\n\n"+suiteAbout[s]) {
			t.Errorf("the page has no section with its sentence for suite %s", s)
		}
	}
	b, err := os.ReadFile(o.jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Results []result }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	suites := map[string]bool{}
	for _, r := range doc.Results {
		suites[r.Scenario.Suite] = true
		if r.Skipped != "" {
			// As the -url test against nginx: its rows skip where it is
			// not installed, unless CI=true.
			if r.Scenario.Server != modeNginx || r.Skipped != errNginxMissing.Error() || os.Getenv("CI") == "true" {
				t.Errorf("%s %s skipped: %s", r.Scenario, r.Client, r.Skipped)
			}
			continue
		}
		if r.Scenario.Gateway && (r.Usage == nil || r.Usage.Allocs == 0) {
			t.Errorf("%s %s: no usage from the gateway: %+v", r.Scenario, r.Client, r.Usage)
		}
		// Whether a response lands in a 50 ms window depends on the
		// machine: count errors only (fasthttp.PipelineClient fails
		// requests beyond its queues by design).
		if r.Errors != 0 && r.Client != clientFastPipeline && r.Client != clientFastPipelineRT {
			t.Errorf("%s %s: %d errors: %s", r.Scenario, r.Client, r.Errors, r.FirstError)
		}
		if r.Scenario.Track && (r.ServerDistinct == 0 || r.ServerRequests < r.ServerDistinct) {
			t.Errorf("%s %s: server counted %d requests, %d distinct", r.Scenario, r.Client, r.ServerRequests, r.ServerDistinct)
		}
		if r.Scenario.Download {
			continue // bytes within the window: downloads span it
		}
		if r.Scenario.Body > 0 && r.Requests > 0 && r.Bytes != int64(r.Scenario.Body)*r.Requests {
			t.Errorf("%s %s: %d body bytes for %d requests", r.Scenario, r.Client, r.Bytes, r.Requests)
		}
	}
	for _, s := range suiteNames {
		if !suites[s] {
			t.Errorf("suite %s: no results", s)
		}
	}
	svg, err := os.ReadFile(o.plotFile)
	if err != nil || !strings.Contains(string(svg), "MB/s") {
		t.Errorf("the plot has no bodies panel (%v)", err)
	}
}

// TestTLSProtocols: against the serial server over TLS (which offers h2),
// the TLS suite's rows speak what their names say, and the plain pipelined
// row stays on HTTP/1.1 (as -url over https compares HTTP/1.1 clients).
func TestTLSProtocols(t *testing.T) {
	dir := t.TempDir()
	cert, key, roots, err := writeTestCert(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := startServer(serverConfig{Mode: modeSerial, Body: 10, TLSCert: cert, TLSKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for name, major := range map[string]int{
		clientNetHTTPH2: 2, clientNetHTTPH1: 1, clientPipelinedH2: 2, clientPipelinedH1: 1, clientPipelined: 1,
	} {
		cl, err := newClient(name, clientConfig{Addrs: []string{srv.Addr}, C: 2, K: 2, Timeout: 10 * time.Second,
			Dialer: newDialCounter(), TLS: &tls.Config{RootCAs: roots}})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		hc := cl.(*httpClient)
		resp, err := hc.client.Get("https://" + srv.Addr + "/")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != major {
			t.Errorf("%s: %s, want HTTP/%d", name, resp.Proto, major)
		}
		if n, err := cl.Do(context.Background()); err != nil || n != 10 {
			t.Errorf("%s: Do = %d, %v", name, n, err)
		}
		cl.Close()
	}
}

// TestChunk: chunk(body), decoded, is body, in chunks of at most chunkSize.
func TestChunk(t *testing.T) {
	for _, n := range []int{1, chunkSize - 1, chunkSize, chunkSize + 1, 3*chunkSize + 7} {
		body := bytes.Repeat([]byte("x"), n)
		enc := chunk(body)
		got, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(enc)))
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("chunk(%d B) decodes to %d B, %v; want %d B", n, len(got), err, n)
		}
		if want := (n + chunkSize - 1) / chunkSize; bytes.Count(enc, []byte("\r\n"))/2-1 != want {
			t.Errorf("chunk(%d B) = %d chunks, want %d", n, bytes.Count(enc, []byte("\r\n"))/2-1, want)
		}
	}
}

// TestClosedLoopRate: the rate of callers that wait for each response
// does not depend on where their responses fall against the window's
// edges.
func TestClosedLoopRate(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		callers int
		done    int
		busy    time.Duration
		want    float64
	}{
		// Two callers of 300 ms responses in a 1 s window: one ended
		// three, the other four (its first began before the window).
		{"phase", 2, 7, 2100 * ms, 2 / 0.3},
		{"one caller", 1, 10, 100 * ms, 100},
		// Responses longer than the window: few callers end one there.
		{"long responses", 50, 20, 20 * 110 * ms, 50 / 0.11},
		{"failures take time too", 1, 1, 2000 * ms, 0.5},
		{"none", 4, 0, 0, 0},
	} {
		if got := closedLoopRate(tc.callers, tc.done, tc.busy); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: closedLoopRate(%d, %d, %v) = %v, want %v", tc.name, tc.callers, tc.done, tc.busy, got, tc.want)
		}
	}
}
