package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRatioPeers: which comparisons the page counts as like with like,
// and which of them are behind.
func TestRatioPeers(t *testing.T) {
	for _, tc := range []struct {
		r            ratio
		peer, behind bool
	}{
		{ratio{Row: clientPipelined, Peer: clientNetHTTP, ReqPerSec: 1.2, CPUPerReq: 0.8, P99: 0.9}, true, false},
		{ratio{Row: clientPipelined, Peer: clientFastHost, ReqPerSec: 0.9, CPUPerReq: 0.8, P99: 0.9}, true, true},
		{ratio{Row: clientPipelined, Peer: clientFastPipelineRT, ReqPerSec: 1, CPUPerReq: 1.01, P99: 1}, true, true},
		{ratio{Row: clientPipelined, Peer: clientNetHTTPDefaults, ReqPerSec: 0.5}, false, true},
		{ratio{Row: clientPipelinedDefaults, Peer: clientNetHTTPDefaults, ReqPerSec: 1, CPUPerReq: 1, P99: 1, P999: 1.1}, true, true},
		{ratio{Row: clientPipelinedDefaults, Peer: clientFastHost, ReqPerSec: 2, CPUPerReq: 0.5, P99: 0.5}, false, false},
		{ratio{Row: clientPipelinedNoKA, Peer: clientNetHTTPNoKA, ReqPerSec: 1, CPUPerReq: 1, P99: 1}, true, false},
		{ratio{Row: clientPipelinedH2, Peer: clientNetHTTPH2, ReqPerSec: 1, CPUPerReq: 1, P99: 1.2}, true, true},
		{ratio{Row: clientPipelinedH2, Peer: clientFastHost, ReqPerSec: 1, CPUPerReq: 1, P99: 1}, false, false},
		{ratio{Row: clientPipelinedH1, Peer: clientNetHTTPH1, ReqPerSec: 2, CPUPerReq: 0.5, P99: 0.5}, true, false},
		{ratio{Row: clientPipelinedH1, Peer: clientFastPipeline, ReqPerSec: 2, CPUPerReq: 0.5, P99: 0.5}, true, false},
		{ratio{Row: clientPipelinedHedge, Peer: clientNetHTTP, ReqPerSec: 2, CPUPerReq: 0.5, P99: 0.5}, true, false},
		// As printed, to two decimals: 0.996 and 1.004 are level.
		{ratio{Row: clientPipelined, Peer: clientNetHTTP, ReqPerSec: 0.996, CPUPerReq: 1.004, P99: 1.004}, true, false},
		{ratio{Row: clientPipelined, Peer: clientNetHTTP, ReqPerSec: 0.994, CPUPerReq: 1, P99: 1}, true, true},
	} {
		if got := tc.r.isPeer(); got != tc.peer {
			t.Errorf("%s ÷ %s: isPeer = %v, want %v", tc.r.Row, tc.r.Peer, got, tc.peer)
		}
		if got := tc.r.behind(); got != tc.behind {
			t.Errorf("%+v: behind = %v, want %v", tc.r, got, tc.behind)
		}
	}
}

// TestReadmeNeedsMarkers: -readme rewrites only what lies between its
// markers, and refuses a file without them.
func TestReadmeNeedsMarkers(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"markers", "a\n" + readmeBegin + "\nx\n" + readmeEnd + "\nb\n", true},
		{"no markers", "a\nb\n", false},
		{"end first", readmeEnd + "\n" + readmeBegin + "\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "README.md")
			if err := os.WriteFile(f, []byte(tc.in), 0o644); err != nil {
				t.Fatal(err)
			}
			err := writeReadme(f, "", nil, newRunInfo())
			if (err == nil) != tc.ok {
				t.Fatalf("writeReadme = %v, want ok %v", err, tc.ok)
			}
			b, _ := os.ReadFile(f)
			if got := string(b); tc.ok && (!strings.HasPrefix(got, "a\n"+readmeBegin) || !strings.HasSuffix(got, readmeEnd+"\nb\n") || strings.Contains(got, "\nx\n")) {
				t.Errorf("after writeReadme:\n%s", got)
			} else if !tc.ok && got != tc.in {
				t.Errorf("the file changed:\n%s", got)
			}
		})
	}
}

// TestRoundTripperTwins: the suites that compare CPU with fasthttp's
// clients have each engine's row behind the net/http API too, and the
// summary divides by the fastest of them.
func TestRoundTripperTwins(t *testing.T) {
	o, err := parseOptions("", "", "", "", "", "", "", "", "", "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, suite := range []string{"default", "bodies", "chunked", "tls", "p5", "post", "breakdown"} {
		for _, sc := range suiteScenarios(suite, o) {
			if sc.Suite == "default" && (sc.K == 1 || sc.P > 50) {
				continue // kept short: see suiteScenarios
			}
			names := o.clientsFor(sc)
			for _, want := range []string{clientFastHostRT, clientFastPipelineRT} {
				if !slices.Contains(names, want) {
					t.Errorf("%s %s: rows %q, no %s", suite, sc, names, want)
				}
			}
		}
	}
	sc := scenario{Suite: "default", Server: modeConcurrent, C: 5, K: 10, P: 10}
	rows := []result{
		{Scenario: sc, Client: clientPipelined, Requests: 1, ReqPerSec: 100, CPUPerReq: 30},
		{Scenario: sc, Client: clientNetHTTP, Requests: 1, ReqPerSec: 50, CPUPerReq: 60},
		{Scenario: sc, Client: clientFastPipeline, Requests: 1, ReqPerSec: 100, CPUPerReq: 20},
		{Scenario: sc, Client: clientFastPipelineRT, Requests: 1, ReqPerSec: 80, CPUPerReq: 25},
		{Scenario: sc, Client: clientFastHostRT, Requests: 1, ReqPerSec: 50, CPUPerReq: 40},
	}
	var b strings.Builder
	summaryRows(&b, byScenario(rows), nil, false)
	want := "| 1.00, **1.50** (fasthttp.PipelineClient) | 1.25, **1.20** (fasthttp.PipelineClient RoundTripper) |"
	if !strings.Contains(b.String(), want) {
		t.Errorf("summary:\n%s\nwant a row ending %q", b.String(), want)
	}
}
