package main

import (
	"os"
	"path/filepath"
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
