// Command benchmarks compares HTTP/1.1 clients — net/http, pipelined,
// fasthttp.HostClient and fasthttp.PipelineClient — against a local test
// server that either serves pipelined requests one at a time (net/http's
// server, like nginx) or concurrently with in-order responses (like Node).
//
// The server runs in a child process (this binary re-executed with -serve),
// so the CPU time of this process is the clients' alone.
//
// Run "go run . -h" for the flags and environment variables.
package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
)

// scenario is one table: a server and the client parameters.
type scenario struct {
	Suite  string        `json:"suite,omitempty"`
	Server string        `json:"server"` // serial, concurrent, or "url" (-url)
	C      int           `json:"connections"`
	K      int           `json:"pipelining"`
	P      int           `json:"parallel"`
	Delay  time.Duration `json:"delay_ns"`
	Body   int           `json:"body_bytes"`

	Method   string        `json:"method,omitempty"`             // "" means GET
	ReqBody  int           `json:"request_body_bytes,omitempty"` // request body bytes
	SlowFrac float64       `json:"slow_fraction,omitempty"`      // this fraction of responses waits Slow instead of Delay
	Slow     time.Duration `json:"slow_ns,omitempty"`
	Hosts    int           `json:"hosts,omitempty"` // listeners, requests spread over them in turn
	// Backends: listeners on one port at 127.0.0.1, .2 ..., one host's
	// addresses behind the name backendsName (see backendResolver).
	Backends int  `json:"backends,omitempty"`
	TLS      bool `json:"tls,omitempty"`
	Chunked  bool `json:"chunked,omitempty"` // bodies sent chunked
	// IDs sends every request to /items/<id>, a fresh random id of 16
	// hex digits each time (a REST client's paths), instead of "/".
	IDs bool `json:"ids,omitempty"`
	// StreamBeside keeps, beside the load, one long-lived streaming GET
	// of streamPath open to the same host, closed and sent again every
	// streamPeriod (see runStream).
	StreamBeside bool `json:"stream_beside,omitempty"`
	// Track counts on the server the requests that arrive twice.
	Track bool `json:"track,omitempty"`
	// Download: one caller downloads Body bytes in a loop, beside Beside
	// callers' small GETs (download.go); P, Delay and Method do not apply.
	Download bool `json:"download,omitempty"`
	Beside   int  `json:"beside,omitempty"`
	// Defaults: the clients are built from http.DefaultTransport's
	// settings, C and K do not apply.
	Defaults bool   `json:"defaults,omitempty"`
	URL      string `json:"url,omitempty"` // -url: the server is the user's
	// Gateway: the rows are transports of a reverse proxy in a child
	// process in front of the Server (gateway.go), driven by P callers
	// on as many keep-alive connections; C and K are the proxy's
	// connections to the server. CPU and the breakdown are the proxy's.
	Gateway bool `json:"gateway,omitempty"`
	// Breakdown shows the breakdown columns (usage.go): -breakdown, or the
	// breakdown suite.
	Breakdown bool `json:"breakdown,omitempty"`

	// Clients are the scenario's rows when it names its own; duration, if
	// set, replaces the options' duration when DURATION was not given.
	Clients  []string `json:"-"`
	duration time.Duration
	// roundTrippers puts each fasthttp engine's row behind the net/http
	// API (roundtripper.go) below the engine's, when the run's clients
	// are the default ones: every CPU figure of fasthttp has its
	// like-for-like twin.
	roundTrippers bool
}

func (s scenario) String() string {
	var b strings.Builder
	if s.URL != "" {
		fmt.Fprintf(&b, "%s %s, C=%d K=%d P=%d", cmp.Or(s.Method, http.MethodGet), s.URL, s.C, s.K, s.P)
		return b.String()
	}
	if s.TLS {
		b.WriteString("TLS ")
	}
	if s.Download {
		fmt.Fprintf(&b, "%s server, C=%d K=%d, download %s", s.Server, s.C, s.K, fmtBytes(s.Body))
		if s.Beside > 0 {
			fmt.Fprintf(&b, " beside %d callers' %dB GETs (a pause of %v after each)", s.Beside, smallBody, downloadPause)
		} else {
			b.WriteString(" alone")
		}
		return b.String()
	}
	if s.Gateway {
		fmt.Fprintf(&b, "gateway (ReverseProxy, %d callers on keep-alive connections) to the %s server, C=%d K=%d", s.P, s.Server, s.C, s.K)
	} else if s.Defaults {
		fmt.Fprintf(&b, "%s server, clients' defaults P=%d", s.Server, s.P)
	} else {
		fmt.Fprintf(&b, "%s server, C=%d K=%d P=%d", s.Server, s.C, s.K, s.P)
	}
	if s.Hosts > 1 {
		fmt.Fprintf(&b, " hosts=%d", s.Hosts)
	}
	if s.Backends > 1 {
		fmt.Fprintf(&b, " backends=%d (one name)", s.Backends)
	}
	fmt.Fprintf(&b, " delay=%v", s.Delay)
	if s.SlowFrac > 0 {
		fmt.Fprintf(&b, " (%g%% %v)", s.SlowFrac*100, s.Slow)
	}
	fmt.Fprintf(&b, " body=%s", fmtBytes(s.Body))
	if s.Chunked {
		b.WriteString(" chunked")
	}
	if s.IDs {
		b.WriteString(" /items/<id>")
	}
	if s.StreamBeside {
		fmt.Fprintf(&b, " +stream (%v)", streamPeriod)
	}
	if s.Method != "" && s.Method != http.MethodGet {
		fmt.Fprintf(&b, " %s", s.Method)
		if s.ReqBody > 0 {
			fmt.Fprintf(&b, " %s", fmtBytes(s.ReqBody))
		}
	}
	return b.String()
}

// meanDelay is the mean time the server waits before a response.
func (s scenario) meanDelay() time.Duration {
	if s.SlowFrac <= 0 {
		return s.Delay
	}
	return time.Duration((1-s.SlowFrac)*float64(s.Delay) + s.SlowFrac*float64(s.Slow))
}

// ideal is the best possible throughput (req/s) of the scenario with
// pipelining, or 0 when there is no delay to bound it (or the server is
// not ours).
func (s scenario) ideal() float64 {
	d := s.meanDelay()
	if d <= 0 || s.URL != "" || s.Download || s.Gateway {
		return 0
	}
	if s.Defaults { // net/http's default: a connection per request
		return float64(s.P) / d.Seconds()
	}
	conns := s.C * max(1, s.Hosts)
	n := min(s.P, conns)
	if s.Server == modeConcurrent {
		n = min(s.P, conns*s.K)
	}
	return float64(n) / d.Seconds()
}

// serverConfig is the configuration of the scenario's server child; cert
// and key are the TLS files (for TLS scenarios).
func (s scenario) serverConfig(cert, key string) serverConfig {
	cfg := serverConfig{Mode: s.Server, Delay: s.Delay, Body: s.Body, SlowFrac: s.SlowFrac, Slow: s.Slow, Hosts: s.Hosts, Backends: s.Backends, Track: s.Track, Chunked: s.Chunked, Download: s.Download}
	if s.TLS {
		cfg.TLSCert, cfg.TLSKey = cert, key
	}
	return cfg
}

// fmtBytes prints a size the way the suites name them: 128B, 16KiB, 65537B.
func fmtBytes(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// result is one client's measurement in one scenario.
type result struct {
	Scenario scenario `json:"scenario"`
	Client   string   `json:"client"`
	Seconds  float64  `json:"seconds"`
	// RateSeconds: the time ReqPerSec divides Requests by, Requests over
	// the callers' closed-loop rate (closedLoopRate); 0 where the rate is
	// a count over the window (Seconds).
	RateSeconds float64 `json:"rate_seconds,omitempty"`
	Requests    int64   `json:"requests"`
	Errors      int64   `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	ReqPerSec   float64 `json:"req_per_sec"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	P999Ms      float64 `json:"p999_ms"`
	MaxMs       float64 `json:"max_ms"`
	CPUPerReq   float64 `json:"cpu_us_per_req"` // client process user+sys
	// Response body bytes read, their rate (MB/s, 10^6 bytes) and the CPU
	// per MB (µs).
	Bytes    int64   `json:"body_bytes_read"`
	MBPerSec float64 `json:"mb_per_sec"`
	CPUPerMB float64 `json:"cpu_us_per_mb,omitempty"`
	// From the server (tracked scenarios): requests received over the
	// whole cell, distinct requests among them, and the share of extra ones.
	ServerRequests int     `json:"server_requests,omitempty"`
	ServerDistinct int     `json:"server_distinct,omitempty"`
	DupRate        float64 `json:"duplicate_rate,omitempty"`
	// BackendRequests: the requests each backend received (Backends
	// scenarios), over the whole cell.
	BackendRequests []int `json:"backend_requests,omitempty"`
	// At the end of the measured window: connections open and goroutines
	// beyond those the cell started with (callers excluded).
	OpenAtEnd       int64   `json:"open_at_end"`
	GoroutinesAtEnd int     `json:"goroutines_at_end"`
	Ideal           float64 `json:"ideal_req_per_sec,omitempty"`
	Ratio           float64 `json:"ratio_to_ideal,omitempty"`
	MaxOpen         int     `json:"max_open_conns"` // Stats for pipelined, dial counter for others
	// From Transport.Stats (pipelined only): the largest numbers of
	// requests in flight on connections and waiting for one.
	MaxInFlight int    `json:"max_in_flight,omitempty"`
	MaxQueued   int    `json:"max_queued,omitempty"`
	Dials       int64  `json:"dials"`
	Skipped     string `json:"skipped,omitempty"`
	// The download suite: the load's requests finished within the
	// window (Requests are then the downloads), their rate and p99.
	LoadRequests int64   `json:"load_requests,omitempty"`
	LoadPerSec   float64 `json:"load_req_per_sec,omitempty"`
	LoadP99Ms    float64 `json:"load_p99_ms,omitempty"`
	// StoppedAtBound: -url's request bound ended the cell before its
	// duration.
	StoppedAtBound bool `json:"stopped_at_bound,omitempty"`
	Rounds         int  `json:"rounds,omitempty"`
	// Stream: the StreamBeside scenarios' stream, over the whole cell.
	Stream *streamStats `json:"stream,omitempty"`
	// Usage: what the client process spent over the measured windows
	// (usage.go), and Breakdown, the same per successful request.
	Usage     *usage     `json:"usage,omitempty"`
	Breakdown *breakdown `json:"breakdown,omitempty"`

	lat     []time.Duration // sorted latencies, for merging rounds
	loadLat []time.Duration // the download suite's load requests' (sorted)
	cpu     time.Duration   // client CPU over the measured window
}

// merge adds round b of the same client and scenario to r.
func (r *result) merge(b result) {
	if r.Rounds == 0 {
		*r = b
		r.Rounds = 1
		return
	}
	r.Rounds++
	r.Seconds += b.Seconds
	r.RateSeconds += b.RateSeconds
	r.Requests += b.Requests
	r.Errors += b.Errors
	if r.FirstError == "" {
		r.FirstError = b.FirstError
	}
	r.MaxOpen = max(r.MaxOpen, b.MaxOpen)
	r.MaxInFlight = max(r.MaxInFlight, b.MaxInFlight)
	r.MaxQueued = max(r.MaxQueued, b.MaxQueued)
	r.StoppedAtBound = r.StoppedAtBound || b.StoppedAtBound
	r.Dials += b.Dials
	r.Stream = r.Stream.merge(b.Stream)
	if b.Usage != nil {
		u := b.Usage.add(usage{})
		if r.Usage != nil {
			u = r.Usage.add(u)
		}
		r.Usage = &u
	}
	r.Bytes += b.Bytes
	r.ServerRequests += b.ServerRequests
	r.ServerDistinct += b.ServerDistinct
	for i, n := range b.BackendRequests {
		if i == len(r.BackendRequests) {
			r.BackendRequests = append(r.BackendRequests, 0)
		}
		r.BackendRequests[i] += n
	}
	r.OpenAtEnd = max(r.OpenAtEnd, b.OpenAtEnd)
	r.GoroutinesAtEnd = max(r.GoroutinesAtEnd, b.GoroutinesAtEnd)
	r.lat = append(r.lat, b.lat...)
	r.LoadRequests += b.LoadRequests
	r.loadLat = append(r.loadLat, b.loadLat...)
	r.cpu += b.cpu
	slices.Sort(r.lat)
	slices.Sort(r.loadLat)
	r.finish()
}

// finish derives the rates and percentiles from the totals.
func (r *result) finish() {
	if r.RateSeconds > 0 {
		r.ReqPerSec = float64(r.Requests) / r.RateSeconds
	} else if r.Seconds > 0 {
		r.ReqPerSec = float64(r.Requests) / r.Seconds
	}
	if len(r.lat) > 0 {
		r.P50Ms = ms(percentile(r.lat, 0.50))
		r.P99Ms = ms(percentile(r.lat, 0.99))
		r.P999Ms = ms(percentile(r.lat, 0.999))
		r.MaxMs = ms(r.lat[len(r.lat)-1])
	}
	if r.Requests > 0 { // per successful request: failures are waste
		r.CPUPerReq = float64(r.cpu.Microseconds()) / float64(r.Requests)
	}
	if r.Usage != nil {
		r.Breakdown = r.Usage.per(r.Requests)
	}
	if r.Seconds > 0 {
		r.MBPerSec = float64(r.Bytes) / 1e6 / r.Seconds
	}
	if r.Bytes > 0 {
		r.CPUPerMB = float64(r.cpu.Microseconds()) / (float64(r.Bytes) / 1e6)
	}
	if r.Seconds > 0 {
		r.LoadPerSec = float64(r.LoadRequests) / r.Seconds
	}
	if len(r.loadLat) > 0 {
		r.LoadP99Ms = ms(percentile(r.loadLat, 0.99))
	}
	if r.ServerDistinct > 0 {
		r.DupRate = float64(r.ServerRequests-r.ServerDistinct) / float64(r.ServerDistinct)
	}
	if r.Ideal > 0 {
		r.Ratio = r.ReqPerSec / r.Ideal
	}
}

type options struct {
	conns, depths, parallels []int
	delays                   []time.Duration
	duration, warmup         time.Duration
	rounds                   int // each client's duration is split into this many rounds
	timeout                  time.Duration
	body                     int
	chunked                  bool // C/K/P/DELAY's bodies are sent chunked
	servers                  []string
	clients                  []string
	noKeepAlive              string
	jsonFile, plotFile       string
	markdownFile, readmeFile string // -markdown, -readme
	breakdown                bool   // -breakdown: every table shows the breakdown columns
	single                   bool   // a scenario was given: run just that

	suites      []string // the suites to run (when not single)
	durationSet bool     // DURATION was given: it wins over a suite's own
	clientsSet  bool     // CLIENTS was given: it wins over a suite's own rows
	method      string   // -method (with -url)

	// -url: the user's server instead of ours, at most maxRequests
	// requests per client and scenario, after a warning and urlPause.
	url         string
	maxRequests int64
	urlPause    time.Duration
}

// childEnv is set in the environment of the server child process.
const childEnv = "PIPELINED_BENCHMARKS_CHILD"

func main() {
	serve := flag.Bool("serve", false, "internal: run a test server for the parent process (prints LISTEN addr, stops when stdin closes)")
	fC := flag.String("c", "", "connections per host, C; comma list allowed (env CONNECTIONS, default 5)")
	fK := flag.String("k", "", "pipeline depth, K; comma list allowed (env PIPELINING, default 10)")
	fP := flag.String("p", "", "goroutines in the closed loop, P; comma list allowed (env PARALLEL, default 10)")
	fDelay := flag.String("delay", "", "server delay per response; comma list allowed (env DELAY, default 10ms)")
	fDur := flag.String("duration", "", "measured time per client per scenario (env DURATION, default 2.5s)")
	fWarm := flag.String("warmup", "", "unmeasured warm-up per client per scenario (env WARMUP, default 200ms)")
	fTimeout := flag.String("timeout", "", "per-request timeout (env TIMEOUT, default 10s)")
	fBody := flag.String("body", "", "response body size in bytes (env BODY, default 128)")
	fChunked := flag.Bool("chunked", false, "send the bodies of C/K/P/DELAY's scenarios chunked (as the chunked suite does)")
	fServer := flag.String("server", "", "server mode: serial, concurrent or both (env SERVER, default both)")
	fClients := flag.String("clients", "", "comma list of clients (env CLIENTS, default all); names: "+strings.Join(allClients, ", "))
	fNoKA := flag.String("nokeepalive", "", `no-keepalive rows (net/http and pipelined with DisableKeepAlives): auto (only with a delay), on, off (env NOKEEPALIVE, default auto)`)
	fJSON := flag.String("json", "", "write the results as JSON to `FILE`")
	fRounds := flag.String("rounds", "", "split each client's DURATION into `N` rounds, the clients' order rotated every round (env ROUNDS, default 2)")
	fCPUProfile := flag.String("cpuprofile", "", "write a CPU profile of the clients (not the server, a child process) to `FILE`")
	fTrace := flag.String("trace", "", "write an execution trace of the clients to `FILE` (go tool trace)")
	fMarkdown := flag.String("markdown", "", "write the run's page (machine, method, summary, what is not ahead yet, every table with its ratios) as Markdown to `FILE`")
	fReadme := flag.String("readme", "", "replace the benchmark table between the markers of `FILE` (the README) with this run's summary of the default suites")
	fPlot := flag.String("plot", "", "draw req/s against P per client (MB/s against body size for the bodies and chunked suites) as SVG to `FILE.svg`")
	fBreakdown := flag.Bool("breakdown", false, "show where each client's CPU per request goes, beside CPU/req: system CPU, read and write system calls, context switches, goroutine switches and starts, allocations, GC cycles and lock waits per request (README.md#columns)")
	fSuite := flag.String("suite", "", "comma list of suites to run (env SUITE, default \"default,concurrency\"): "+strings.Join(suiteNames, ", ")+", or all")
	fURL := flag.String("url", "", "benchmark net/http against pipelined on the server at `URL` (http or https, yours: this sends load) instead of the embedded servers; -c, -k, -p, -duration, -rounds apply")
	fMethod := flag.String("method", "", "with -url: GET or HEAD (env METHOD, default GET)")
	fMaxReq := flag.String("max-requests", "", "with -url: at most `N` requests per client and scenario, over all rounds (env MAX_REQUESTS, default 10000, at most 1000000)")
	fServeConfig := flag.String("serve-config", "", "internal: the -serve child's configuration as JSON")
	fSoak := flag.String("soak", "", "run the soak instead of the benchmarks for `DURATION` (at most 60s; env SOAK): mixed GET/POST/HEAD through the pipelined Transport to a fault-injecting server; -c, -k, -p and -timeout apply (defaults 4, 8, 64, 5s)")
	fSoakFaults := flag.String("soak-faults", "", "soak: probability of a fault per request (env SOAK_FAULTS, default 0.01)")
	fSoakSeed := flag.String("soak-seed", "", "soak: seed of the faults and the mix of methods (env SOAK_SEED, default 1)")
	fSoakStall := flag.String("soak-stall", "", "soak: how long a stall fault waits (env SOAK_STALL, default 200ms)")
	fSoakHedge := flag.String("soak-hedge", "", "soak: on sets TransportOptions.HedgeHeadOfLine (env SOAK_HEDGE, default off)")
	fSoakKinds := flag.String("soak-fault-kinds", "", "soak: comma list of faults to inject: close-quiet, reset-mid-body, conn-close, stall, garbage, short-body, or all (env SOAK_FAULT_KINDS, default all)")
	flag.Usage = func() {
		w := flag.CommandLine.Output()
		fmt.Fprintf(w, `Usage: go run . [flags]

Benchmarks net/http, pipelined, fasthttp.HostClient and fasthttp.PipelineClient
against a local test server (127.0.0.1, child process) in a closed loop.

Without C/K/P/DELAY the suites "default" and "concurrency" run: C=5 and
delay 10ms with (K,P) = (10,10), (1,10), (10,50), (10,500) on both
servers, then a zero-delay saturation run C=5 K=10 P=50 on both servers,
then 24 callers of 300 ms requests (GET, then POST) with net/http's and
pipelined's defaults. -suite picks other suites (see README.md).
If any of C, K, P or DELAY is given (flag or environment), just that
scenario runs (comma lists run every combination).

With -url URL the same side-by-side table (net/http vs pipelined) runs
against your server: it sends load to it, bounded by -duration and
-max-requests.

Flags override environment variables.

`)
		flag.PrintDefaults()
	}
	flag.Parse()

	if *serve && *fServer == modeFault {
		cfg, err := soakFlags("", *fSoakFaults, *fSoakSeed, *fSoakStall, *fSoakKinds, "", "", "", "")
		if err == nil {
			err = serveFaultChild(cfg)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		return
	}
	if *serve {
		cfg, err := serverFlags(*fServer, *fDelay, *fBody)
		if *fServeConfig != "" {
			cfg, err = decodeServerConfig(*fServeConfig)
		}
		if err == nil {
			err = serveChild(cfg)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "serve:", err)
			os.Exit(1)
		}
		return
	}

	defer startRecording(*fCPUProfile, pprof.StartCPUProfile, pprof.StopCPUProfile)()
	defer startRecording(*fTrace, trace.Start, trace.Stop)()

	if d := setting(*fSoak, "SOAK"); d != "" {
		cfg, err := soakFlags(d, *fSoakFaults, *fSoakSeed, *fSoakStall, *fSoakKinds, *fC, *fK, *fP, *fTimeout)
		if err == nil {
			switch h := setting(*fSoakHedge, "SOAK_HEDGE"); h {
			case "", "off":
			case "on":
				cfg.Hedge = true
			default:
				err = fmt.Errorf("SOAK_HEDGE: %q is not on or off", h)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks:", err)
			os.Exit(2)
		}
		r, err := runSoak(cfg, os.Stdout)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchmarks:", err)
			os.Exit(1)
		}
		if !r.Passed() {
			os.Exit(1)
		}
		return
	}

	opts, err := parseOptions(*fC, *fK, *fP, *fDelay, *fDur, *fWarm, *fTimeout, *fBody, *fServer, *fClients, *fNoKA, *fRounds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		os.Exit(2)
	}
	opts.jsonFile, opts.plotFile, opts.chunked = *fJSON, *fPlot, *fChunked
	opts.markdownFile, opts.readmeFile = *fMarkdown, *fReadme
	opts.breakdown = *fBreakdown
	if err := opts.setRunFlags(*fSuite, *fURL, *fMethod, *fMaxReq, *fDur, *fClients); err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		os.Exit(2)
	}
	if opts.url != "" {
		printURLWarning(os.Stderr, opts)
		time.Sleep(opts.urlPause)
	}
	if err := run(opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		os.Exit(1)
	}
}

// setting returns the flag value, else the environment variable.
func setting(flagVal, env string) string {
	if flagVal != "" {
		return flagVal
	}
	return strings.TrimSpace(os.Getenv(env))
}

func parseInts(s, name string, def int) ([]int, error) {
	if s == "" {
		return []int{def}, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: bad value %q (want positive integers)", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseDuration(s, name string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s: bad duration %q", name, s)
	}
	return d, nil
}

func parseOptions(fC, fK, fP, fDelay, fDur, fWarm, fTimeout, fBody, fServer, fClients, fNoKA, fRounds string) (*options, error) {
	o := &options{}
	var err error
	sC, sK, sP, sD := setting(fC, "CONNECTIONS"), setting(fK, "PIPELINING"), setting(fP, "PARALLEL"), setting(fDelay, "DELAY")
	o.single = sC != "" || sK != "" || sP != "" || sD != ""
	if o.conns, err = parseInts(sC, "CONNECTIONS", 5); err != nil {
		return nil, err
	}
	if o.depths, err = parseInts(sK, "PIPELINING", 10); err != nil {
		return nil, err
	}
	if o.parallels, err = parseInts(sP, "PARALLEL", 10); err != nil {
		return nil, err
	}
	if sD == "" {
		o.delays = []time.Duration{10 * time.Millisecond}
	} else {
		for _, f := range strings.Split(sD, ",") {
			d, err := parseDuration(f, "DELAY", 0)
			if err != nil {
				return nil, err
			}
			o.delays = append(o.delays, d)
		}
	}
	if o.duration, err = parseDuration(setting(fDur, "DURATION"), "DURATION", 2500*time.Millisecond); err != nil {
		return nil, err
	}
	if o.duration <= 0 {
		return nil, errors.New("DURATION must be positive")
	}
	o.rounds = 2
	if r := setting(fRounds, "ROUNDS"); r != "" {
		if o.rounds, err = strconv.Atoi(r); err != nil || o.rounds < 1 {
			return nil, fmt.Errorf("ROUNDS: bad count %q", r)
		}
	}
	o.duration /= time.Duration(o.rounds)
	if o.warmup, err = parseDuration(setting(fWarm, "WARMUP"), "WARMUP", 200*time.Millisecond); err != nil {
		return nil, err
	}
	if o.timeout, err = parseDuration(setting(fTimeout, "TIMEOUT"), "TIMEOUT", 10*time.Second); err != nil {
		return nil, err
	}
	if o.timeout <= 0 {
		return nil, errors.New("TIMEOUT must be positive")
	}
	if b := setting(fBody, "BODY"); b == "" {
		o.body = 128
	} else if o.body, err = strconv.Atoi(b); err != nil || o.body < 0 {
		return nil, fmt.Errorf("BODY: bad size %q", b)
	}
	switch s := setting(fServer, "SERVER"); s {
	case "", "both":
		o.servers = []string{modeSerial, modeConcurrent}
	case modeSerial, modeConcurrent:
		o.servers = []string{s}
	default:
		return nil, fmt.Errorf("SERVER: %q is not serial, concurrent or both", s)
	}
	cl := setting(fClients, "CLIENTS")
	if cl == "" {
		cl = defaultClientsString
	}
	for _, name := range strings.Split(cl, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(allClients, name) {
			return nil, fmt.Errorf("CLIENTS: unknown client %q (known: %s)", name, strings.Join(allClients, ", "))
		}
		o.clients = append(o.clients, name)
	}
	switch o.noKeepAlive = setting(fNoKA, "NOKEEPALIVE"); o.noKeepAlive {
	case "":
		o.noKeepAlive = "auto"
	case "auto", "on", "off":
	default:
		return nil, fmt.Errorf("NOKEEPALIVE: %q is not auto, on or off", o.noKeepAlive)
	}
	return o, nil
}

// soakFlags reads the soak's configuration (flags, else environment, else
// defaultSoakConfig). The duration is capped by runSoak.
func soakFlags(fDur, fFaults, fSeed, fStall, fKinds, fC, fK, fP, fTimeout string) (soakConfig, error) {
	cfg := defaultSoakConfig()
	var err error
	if d := setting(fDur, "SOAK"); d != "" {
		if cfg.Duration, err = parseDuration(d, "SOAK", 0); err != nil {
			return cfg, err
		}
		if cfg.Duration <= 0 {
			return cfg, errors.New("SOAK must be positive")
		}
	}
	if f := setting(fFaults, "SOAK_FAULTS"); f != "" {
		if cfg.FaultRate, err = strconv.ParseFloat(f, 64); err != nil || cfg.FaultRate < 0 || cfg.FaultRate > 1 {
			return cfg, fmt.Errorf("SOAK_FAULTS: bad rate %q (want 0 to 1)", f)
		}
	}
	if f := setting(fSeed, "SOAK_SEED"); f != "" {
		if cfg.Seed, err = strconv.ParseUint(f, 10, 64); err != nil {
			return cfg, fmt.Errorf("SOAK_SEED: bad seed %q", f)
		}
	}
	cfg.Faults = setting(fKinds, "SOAK_FAULT_KINDS")
	if f := setting(fStall, "SOAK_STALL"); f != "" {
		if cfg.Stall, err = parseDuration(f, "SOAK_STALL", 0); err != nil {
			return cfg, err
		}
	}
	for _, v := range []struct {
		s, name string
		dst     *int
	}{{setting(fC, "CONNECTIONS"), "CONNECTIONS", &cfg.Conns}, {setting(fK, "PIPELINING"), "PIPELINING", &cfg.Depth}, {setting(fP, "PARALLEL"), "PARALLEL", &cfg.Parallel}} {
		if v.s == "" {
			continue
		}
		if *v.dst, err = strconv.Atoi(v.s); err != nil || *v.dst < 1 {
			return cfg, fmt.Errorf("%s: bad value %q for the soak (want one positive integer)", v.name, v.s)
		}
	}
	if f := setting(fTimeout, "TIMEOUT"); f != "" {
		if cfg.Timeout, err = parseDuration(f, "TIMEOUT", 0); err != nil {
			return cfg, err
		}
		if cfg.Timeout <= 0 {
			return cfg, errors.New("TIMEOUT must be positive")
		}
	}
	return cfg, nil
}

// serverFlags reads the child's configuration.
func serverFlags(mode, delay, body string) (serverConfig, error) {
	cfg := serverConfig{Mode: mode}
	var err error
	if cfg.Delay, err = parseDuration(delay, "delay", 0); err != nil {
		return cfg, err
	}
	if body != "" {
		if cfg.Body, err = strconv.Atoi(body); err != nil {
			return cfg, fmt.Errorf("bad body size %q", body)
		}
	}
	return cfg, nil
}

// scenarios lists the scenarios to run, in order.
func (o *options) scenarios() []scenario {
	var out []scenario
	if o.url != "" {
		for _, c := range o.conns {
			for _, k := range o.depths {
				for _, p := range o.parallels {
					out = append(out, scenario{Server: "url", URL: o.url, Method: o.method, C: c, K: k, P: p,
						Clients: []string{clientNetHTTP, clientPipelined}})
				}
			}
		}
		return out
	}
	if o.single {
		for _, d := range o.delays {
			for _, c := range o.conns {
				for _, k := range o.depths {
					for _, p := range o.parallels {
						for _, s := range o.servers {
							out = append(out, scenario{Server: s, C: c, K: k, P: p, Delay: d, Body: o.body, Chunked: o.chunked})
						}
					}
				}
			}
		}
		return out
	}
	for _, name := range o.suites {
		out = append(out, suiteScenarios(name, o)...)
	}
	return out
}

// clientsFor lists the clients of a scenario, adding the no-keepalive rows.
func (o *options) clientsFor(sc scenario) []string {
	if sc.URL != "" {
		return sc.Clients
	}
	out := slices.Clone(o.clients)
	if sc.Clients != nil && !o.clientsSet {
		out = slices.Clone(sc.Clients)
	}
	if sc.roundTrippers && !o.clientsSet {
		out = withRoundTripperRows(out)
	}
	if o.noKeepAlive == "on" || (o.noKeepAlive == "auto" && sc.Delay > 0 && sc.Clients == nil) {
		for _, n := range []string{clientNetHTTPNoKA, clientPipelinedNoKA} {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

func run(o *options, out io.Writer) error {
	where, warm := "server in a child process", fmt.Sprintf("+%v warm-up each", o.warmup)
	if o.url != "" {
		where, warm = "against "+o.url, "after one warm-up request per caller"
	}
	fmt.Fprintf(out, "benchmarks: %s %s/%s GOMAXPROCS=%d, %d rounds of %v per client (%s, order rotated), %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), o.rounds, o.duration, warm, where)
	ri := newRunInfo()
	var all []result
	servers := map[serverConfig]*childServer{}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	scs := o.scenarios()
	var certFile, keyFile string
	var roots *x509.CertPool
	if slices.ContainsFunc(scs, func(sc scenario) bool { return sc.TLS }) {
		dir, err := os.MkdirTemp("", "pipelined-benchmarks-tls")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if certFile, keyFile, roots, err = writeTestCert(dir); err != nil {
			return err
		}
	}
	var nginx *nginxBackend // started for the first scenario that needs it
	var nginxErr error
	defer func() {
		if nginx != nil {
			nginx.Close()
		}
	}()
	for _, sc := range scs {
		sc.Breakdown = sc.Breakdown || o.breakdown
		var base clientConfig
		if sc.URL != "" {
			base.URL = sc.URL
		} else if sc.Server == modeNginx {
			if nginx == nil && nginxErr == nil {
				nginx, nginxErr = startNginxBackend(sc.Body)
			}
			if nginxErr != nil {
				base.skip = nginxErr.Error()
			} else {
				base.Addrs = []string{nginx.Addr}
			}
		} else {
			cfg := sc.serverConfig(certFile, keyFile)
			srv := servers[cfg]
			if srv == nil {
				var err error
				if srv, err = startChildServer(cfg); err != nil {
					return err
				}
				servers[cfg] = srv
			}
			base.Addrs = srv.Addrs
			if sc.Backends > 1 {
				// One name for the backends: the clients resolve it
				// (backendResolver) and request it.
				base.Resolver = newBackendResolver(srv.Addrs)
				base.Addrs = []string{net.JoinHostPort(backendsName, portOf(srv.Addrs[0]))}
				base.StatsAddr = srv.Addrs[0]
			}
			if sc.TLS {
				base.TLS = &tls.Config{RootCAs: roots}
			}
		}
		// Each client runs o.rounds times, the order rotated every round,
		// so that a drift of the machine or the server over the scenario
		// does not favour the clients that happen to run first or last.
		names := o.clientsFor(sc)
		rows := make([]result, len(names))
		for round := range o.rounds {
			for j := range names {
				i := (j + round) % len(names)
				if sc.Download {
					rows[i].merge(runDownloadCell(sc, names[i], base, o))
				} else {
					rows[i].merge(runCell(sc, names[i], base, o))
				}
			}
		}
		printTable(out, sc, rows)
		// The percentiles are taken: let the latencies go, so that the
		// cells after this one do not run with its samples in the heap.
		for i := range rows {
			rows[i].lat, rows[i].loadLat = nil, nil
		}
		all = append(all, rows...)
		if o.jsonFile != "" { // keep what we have if a later cell dies
			ri.End, ri.LoadEnd = time.Now().UTC(), loadAverage()
			if err := writeJSON(o.jsonFile, all, o, ri); err != nil {
				return err
			}
		}
	}
	ri.End, ri.LoadEnd = time.Now().UTC(), loadAverage()
	if o.plotFile != "" {
		if err := os.WriteFile(o.plotFile, []byte(plotSVG(all)), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", o.plotFile)
	}
	if o.jsonFile != "" {
		if err := writeJSON(o.jsonFile, all, o, ri); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", o.jsonFile)
	}
	if o.markdownFile != "" {
		if err := writeMarkdown(o.markdownFile, all, o, ri); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", o.markdownFile)
	}
	if o.readmeFile != "" {
		if err := writeReadme(o.readmeFile, o.markdownFile, all, ri); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", o.readmeFile)
	}
	return nil
}

func writeJSON(file string, rs []result, o *options, ri runInfo) error {
	doc := struct {
		GoVersion  string    `json:"go_version"`
		GOMAXPROCS int       `json:"gomaxprocs"`
		NumCPU     int       `json:"num_cpu"`
		Time       time.Time `json:"time"`
		Duration   string    `json:"duration"`
		Run        runInfo   `json:"run"`
		Results    []result  `json:"results"`
	}{runtime.Version(), runtime.GOMAXPROCS(0), runtime.NumCPU(), time.Now().UTC(), o.duration.String(), ri, rs}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

// childServer is a test server in a child process.
type childServer struct {
	Addr  string   // the first listener
	Addrs []string // every listener (host:port)
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func startChildServer(cfg serverConfig) (*childServer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-serve", "-serve-config", encodeServerConfig(cfg))
	cmd.Stderr = os.Stderr
	cmd.Env = append(os.Environ(), childEnv+"=1") // lets a test binary act as the child
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &childServer{cmd: cmd, stdin: stdin}
	type line struct {
		s   string
		err error
	}
	ch := make(chan line, 1)
	go func() {
		l, err := bufio.NewReader(stdout).ReadString('\n')
		ch <- line{l, err}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-ch:
		addr, ok := strings.CutPrefix(strings.TrimSpace(l.s), "LISTEN ")
		if l.err != nil || !ok {
			s.Close()
			return nil, fmt.Errorf("server child: unexpected %q (%v)", l.s, l.err)
		}
		s.Addrs = strings.Split(addr, ",")
		s.Addr = s.Addrs[0]
	case <-time.After(10 * time.Second):
		s.Close()
		return nil, errors.New("server child did not start in 10s")
	}
	return s, nil
}

// Close asks the child to stop (closing its stdin) and kills it if it
// lingers.
func (s *childServer) Close() {
	s.stdin.Close()
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runCell measures one client in one scenario: P goroutines each send a
// request, read the whole response and repeat. The warm-up (o.warmup, and
// until every goroutine has had a response) is not measured; then for the
// cell's duration the requests that finish are counted (with their latency
// and body bytes) and the process CPU time is taken. At the end the
// requests still in flight are cancelled (net/http, pipelined) or waited
// for (fasthttp), unmeasured. With -url the cell also stops after its
// share of o.maxRequests requests, and the warm-up is one request per
// caller (each then waits for the window to open), so that the bound is
// not spent before the measurement.
func runCell(sc scenario, name string, base clientConfig, o *options) result {
	r := result{Scenario: sc, Client: name, Ideal: sc.ideal()}
	dc := newDialCounter()
	cfg := base
	cfg.C, cfg.K, cfg.Timeout, cfg.Dialer, cfg.Method = sc.C, sc.K, o.timeout, dc, sc.Method
	if isNoKeepAlive(name) {
		cfg.K = 1
	}
	if sc.ReqBody > 0 {
		cfg.ReqBody = bytes.Repeat([]byte("r"), sc.ReqBody)
	}
	if sc.Track {
		cfg.Cell = newCellID()
	}
	cfg.IDs = sc.IDs
	if base.skip != "" {
		r.Skipped = base.skip
		return r
	}
	runtime.GC() // the previous cell's garbage
	g0 := runtime.NumGoroutine()
	// The usage measured: this process's, or the gateway child's.
	snap := readUsage
	var (
		gw      *gateway
		gwFirst gatewayUsage
		gwLast  gatewayUsage
		gwErr   error
		cl      benchClient
		err     error
	)
	if sc.Gateway {
		if gw, err = startGateway(name, base.Addrs[0], sc, o.timeout); err != nil {
			r.Skipped = err.Error()
			return r
		}
		defer gw.Close()
		// The load: a keep-alive net/http connection per caller.
		lc := cfg
		lc.Addrs, lc.C, lc.Dialer = []string{gw.child.Addr}, sc.P, newDialCounter()
		cl, err = newClient(clientNetHTTP, lc)
		snap = func() usage {
			gu, err := gw.usage()
			if err != nil && gwErr == nil {
				gwErr = err
			}
			gwFirst, gwLast = cmp.Or(gwFirst, gu), gu
			return gu.Usage
		}
	} else {
		cl, err = newClient(name, cfg)
	}
	if err != nil {
		r.Skipped = err.Error()
		return r
	}
	defer cl.Close()
	duration := o.duration
	if sc.duration > 0 && !o.durationSet {
		duration = sc.duration / time.Duration(o.rounds)
	}
	var limit int64 // requests this cell may send (-url), 0: no limit
	if sc.URL != "" {
		limit = max(1, o.maxRequests/int64(o.rounds))
	}

	var (
		stop     atomic.Bool
		sent     atomic.Int64
		running  atomic.Int64
		nerr     atomic.Int64
		errOnce  sync.Once
		firstErr string
		warmOnce sync.Once
		warmErr  string // the first error outside the window, shown if there is no other
		wg       sync.WaitGroup
		lat      = make([][]time.Duration, sc.P)
		busy     = make([]time.Duration, sc.P) // each caller's time in requests ended in the window
		nbytes   = make([]int64, sc.P)
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streamDone chan *streamStats
	if sc.StreamBeside {
		streamDone = make(chan *streamStats, 1)
		go func() { streamDone <- runStream(ctx, cl, cfg, name) }()
	}
	// The measured window [from, to), in nanoseconds since start; it opens
	// after the warm-up once every goroutine has had a response, so that
	// queues are in their steady state.
	var from, to, warmedUp atomic.Int64
	from.Store(math.MaxInt64)
	to.Store(math.MaxInt64)
	start := time.Now()
	running.Store(int64(sc.P))
	gate := make(chan struct{}) // -url: callers wait here after their first response
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	defer openGate()
	// The callers carry the row's name and the scenario as profiler labels, and so do the
	// goroutines they start (a connection's reader and writer): with
	// -cpuprofile, "go tool pprof -tagfocus client=NAME" shows one row's
	// share of an interleaved run. The scheduler's own work (finding a
	// goroutine to run, the network poller) carries no label.
	labels := pprof.WithLabels(context.Background(), pprof.Labels("client", name, "scenario", sc.String()))
	for i := range sc.P {
		wg.Add(1)
		go func() {
			pprof.SetGoroutineLabels(labels)
			defer wg.Done()
			defer running.Add(-1)
			l := make([]time.Duration, 0, 256)
			var nb int64         // this caller's bytes, summed here: no shared cache line in the loop
			var bt time.Duration // and its time in requests
			first := true
			defer func() {
				if first { // stopped before a first response: warm-up is over for it too
					warmedUp.Add(1)
				}
			}()
			for !stop.Load() {
				if limit > 0 && sent.Add(1) > limit {
					break
				}
				t0 := time.Now()
				n, err := cl.Do(ctx)
				t1 := time.Now()
				if first {
					first = false
					warmedUp.Add(1)
					if limit > 0 {
						<-gate
					}
				}
				if at := int64(t1.Sub(start)); at < from.Load() || at >= to.Load() {
					if err != nil {
						warmOnce.Do(func() { warmErr = err.Error() })
					}
					continue
				}
				bt += t1.Sub(t0)
				if err != nil {
					nerr.Add(1)
					errOnce.Do(func() { firstErr = err.Error() })
					continue
				}
				l = append(l, t1.Sub(t0))
				nb += n
			}
			lat[i], busy[i], nbytes[i] = l, bt, nb
		}()
	}

	time.Sleep(o.warmup)
	for limit := time.Now().Add(o.timeout); warmedUp.Load() < int64(sc.P) && running.Load() > 0 && time.Now().Before(limit); {
		time.Sleep(5 * time.Millisecond)
	}
	dc.reset()
	u0, t0 := snap(), time.Now()
	end := t0.Add(duration)
	from.Store(int64(t0.Sub(start)))
	to.Store(int64(end.Sub(start)))
	openGate()
	// Sample the client's own count of open connections.
	maxOpen := 0
	_, hasStats := cl.PoolStats()
	for now := time.Now(); now.Before(end) && running.Load() > 0; now = time.Now() {
		if hasStats {
			ps, _ := cl.PoolStats()
			maxOpen = max(maxOpen, ps.Open)
			r.MaxInFlight = max(r.MaxInFlight, ps.InFlight)
			r.MaxQueued = max(r.MaxQueued, ps.Queued)
		}
		time.Sleep(min(5*time.Millisecond, end.Sub(now)))
	}
	use, elapsed := snap().sub(u0), time.Since(t0)
	r.StoppedAtBound = limit > 0 && running.Load() == 0 && elapsed < duration
	r.Dials = dc.dials.Load()
	r.OpenAtEnd = dc.open.Load()
	r.GoroutinesAtEnd = max(0, runtime.NumGoroutine()-g0-int(running.Load()))
	if hasStats {
		ps, _ := cl.PoolStats()
		r.OpenAtEnd = int64(ps.Open)
	} else {
		maxOpen = int(dc.maxOpen.Load())
	}
	if gw != nil { // the gateway's connections to its backend
		r.Dials, maxOpen = gwLast.Dials-gwFirst.Dials, int(gwLast.Open)
		r.OpenAtEnd = gwLast.Open
		if gwErr != nil {
			r.FirstError = "gateway usage: " + gwErr.Error()
		}
	}
	stop.Store(true)
	cancel()
	openGate()
	wg.Wait()
	if streamDone != nil {
		r.Stream = <-streamDone
	}
	if sc.Track {
		n, d, per, err := fetchServerCount(cmp.Or(base.StatsAddr, base.Addrs[0]), cfg.Cell)
		if err != nil && r.FirstError == "" {
			r.FirstError = "server count: " + err.Error()
		}
		r.ServerRequests, r.ServerDistinct = n, d
		if sc.Backends > 1 {
			r.BackendRequests = slices.Clone(per)
		}
	}

	var all []time.Duration
	var spent time.Duration
	for i, l := range lat {
		all = append(all, l...)
		spent += busy[i]
	}
	slices.Sort(all)
	// Callers that stopped at -url's bound were not all busy to the end.
	if rate := closedLoopRate(sc.P, len(all), spent); rate > 0 && !r.StoppedAtBound {
		r.RateSeconds = float64(len(all)) / rate
	}
	for _, n := range nbytes {
		r.Bytes += n
	}
	r.Seconds = elapsed.Seconds()
	r.Requests = int64(len(all))
	r.Errors = nerr.Load()
	if firstErr != "" {
		r.FirstError = firstErr
	}
	if r.FirstError == "" && r.Requests == 0 && warmErr != "" {
		r.FirstError = "outside the measured window: " + warmErr
	}
	r.lat, r.cpu, r.Usage = all, use.cpu(), &use
	r.finish()
	r.MaxOpen = maxOpen
	return r
}

// closedLoopRate is the request rate of callers that each send a request,
// wait for its response and send the next (Little's law: callers over the
// mean time of a request): done responses ended in the window and busy is
// the time of every request ended there, failures included. A count over
// the window alone depends on where responses fall against its edges: with
// 300 ms responses, a 1 s window holds 3 or 4 of a caller's, a third apart
// for clients of the same speed.
func closedLoopRate(callers, done int, busy time.Duration) float64 {
	if done == 0 || busy <= 0 {
		return 0
	}
	return float64(callers) * float64(done) / busy.Seconds()
}

// backendShares prints each backend's share of the requests, and the
// largest departure from an even share, relative to it (±10% of a third is
// 30.0% to 36.7%).
func backendShares(per []int, n int) string {
	per = append(per, make([]int, max(0, n-len(per)))...)
	total := 0
	for _, k := range per {
		total += k
	}
	if total == 0 {
		return "no requests counted"
	}
	var b strings.Builder
	worst := 0.0
	even := 1 / float64(n)
	for i, k := range per {
		share := float64(k) / float64(total)
		fmt.Fprintf(&b, "127.0.0.%d %.1f%%, ", i+1, 100*share)
		worst = max(worst, math.Abs(share-even)/even)
	}
	fmt.Fprintf(&b, "at most %.1f%% from an even share", 100*worst)
	return b.String()
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// table is one scenario's table as the program prints it: the title
// (scenario and ideal), the columns, a row of cells per client (the client
// first), the notes under it and the ratio lines.
type table struct {
	title  string
	cols   []string
	cells  [][]string
	notes  []string
	ratios []string
}

// makeTable lays out one scenario's rows, with the columns the scenario
// calls for, the notes, and the ratios of each pipelined row to its peers.
func makeTable(sc scenario, rows []result) table {
	if sc.Download {
		return downloadTable(sc, rows)
	}
	ideal := "-"
	if v := sc.ideal(); v > 0 {
		ideal = fmt.Sprintf("%.0f req/s", v)
	}
	t := table{title: fmt.Sprintf("%s   ideal %s", sc, ideal)}
	tail := sc.SlowFrac > 0 || sc.Track
	maxCol := sc.StreamBeside
	bytesCols := sc.Body >= 16<<10 || sc.URL != ""
	t.cols = []string{"client", "req/s", "p50", "p99"}
	if tail {
		t.cols = append(t.cols, "p99.9")
	}
	if maxCol {
		t.cols = append(t.cols, "max")
	}
	t.cols = append(t.cols, "CPU/req")
	if sc.Breakdown {
		t.cols = append(t.cols, breakdownCols...)
	}
	if bytesCols {
		t.cols = append(t.cols, "MB/s", "CPU/MB")
	}
	if sc.Track {
		t.cols = append(t.cols, "dup %")
	}
	t.cols = append(t.cols, "errors", "vs ideal", "max conns", "dials")
	for _, r := range rows {
		if r.Skipped != "" {
			t.cells = append(t.cells, append([]string{r.Client}, slices.Repeat([]string{"-"}, len(t.cols)-1)...))
			t.notes = append(t.notes, fmt.Sprintf("%s skipped: %s", r.Client, r.Skipped))
			continue
		}
		ratio := "-"
		if r.Ideal > 0 {
			ratio = fmt.Sprintf("%.2f", r.Ratio)
		}
		vals := []string{r.Client, fmt.Sprintf("%.0f", r.ReqPerSec), fmtMs(r.P50Ms), fmtMs(r.P99Ms)}
		if tail {
			vals = append(vals, fmtMs(r.P999Ms))
		}
		if maxCol {
			vals = append(vals, fmtMs(r.MaxMs))
		}
		vals = append(vals, fmt.Sprintf("%.1fµs", r.CPUPerReq))
		if sc.Breakdown {
			vals = append(vals, r.Breakdown.cells()...)
		}
		if bytesCols {
			mbs := fmt.Sprintf("%.0f", r.MBPerSec)
			if r.MBPerSec < 10 {
				mbs = fmt.Sprintf("%.2f", r.MBPerSec)
			}
			vals = append(vals, mbs, fmtMs(r.CPUPerMB/1000))
		}
		if sc.Track {
			vals = append(vals, fmt.Sprintf("%.2f", 100*r.DupRate))
		}
		vals = append(vals, strconv.FormatInt(r.Errors, 10), ratio, strconv.Itoa(r.MaxOpen), strconv.FormatInt(r.Dials, 10))
		t.cells = append(t.cells, vals)
		if r.MaxInFlight > 0 || r.MaxQueued > 0 {
			t.notes = append(t.notes, fmt.Sprintf("%s Stats: max %d open, %d in flight, %d queued", r.Client, r.MaxOpen, r.MaxInFlight, r.MaxQueued))
		}
		if sc.Hosts > 1 {
			t.notes = append(t.notes, fmt.Sprintf("%s at the end of the window: %d connections open, %d goroutines besides the callers", r.Client, r.OpenAtEnd, r.GoroutinesAtEnd))
		}
		if sc.Track {
			t.notes = append(t.notes, fmt.Sprintf("%s server side: %d requests, %d distinct", r.Client, r.ServerRequests, r.ServerDistinct))
		}
		if sc.Backends > 1 {
			t.notes = append(t.notes, r.Client+" share of requests per backend: "+backendShares(r.BackendRequests, sc.Backends))
		}
		if st := r.Stream; st != nil {
			t.notes = append(t.notes, fmt.Sprintf("%s stream (%s): %d opened, %d lines read, %d failed or ended early", r.Client, st.Via, st.Opened, st.Lines, st.Failed))
			if st.FirstError != "" {
				t.notes = append(t.notes, fmt.Sprintf("%s stream first error: %s", r.Client, st.FirstError))
			}
		}
		if r.StoppedAtBound {
			t.notes = append(t.notes, fmt.Sprintf("%s stopped at the request bound (-max-requests) before the end of its duration", r.Client))
		}
		if r.FirstError != "" {
			t.notes = append(t.notes, fmt.Sprintf("%s first error: %s", r.Client, r.FirstError))
		}
	}
	t.ratios = ratioLines(rows, tail)
	return t
}

// printTable prints one scenario's table as text.
func printTable(out io.Writer, sc scenario, rows []result) {
	t := makeTable(sc, rows)
	fmt.Fprintf(out, "\n== %s\n", t.title)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	w := 0
	for _, c := range t.cells {
		w = max(w, len(c[0]))
	}
	line := func(c []string) {
		c = slices.Clone(c)
		c[0] = fmt.Sprintf("%-*s", max(w, len(c[0])), c[0]) // names to the left
		fmt.Fprintln(tw, strings.Join(c, "\t")+"\t")
	}
	line(t.cols)
	for _, c := range t.cells {
		line(c)
	}
	tw.Flush()
	for _, n := range t.notes {
		fmt.Fprintln(out, "  ", n)
	}
	for _, l := range t.ratios {
		fmt.Fprintln(out, "  ", l)
	}
}

// ratio is one pipelined row's figures divided by a peer's in the same
// table: above 1 is better for ReqPerSec, below 1 for the others.
type ratio struct {
	Row, Peer                 string
	ReqPerSec, CPUPerReq, P99 float64
	P999                      float64 // with tail only
}

// ratiosOf compares each pipelined row with its peers in the same table
// (same run, same scenario): req/s, CPU per request (per byte too, the
// bodies being equal) and p99 (p99.9 with tail). A no-keepalive row is
// compared with no-keepalive peers only.
func ratiosOf(rows []result, tail bool) []ratio {
	if len(rows) > 0 && rows[0].Scenario.Download {
		return nil // in MB/s and CPU per MB: downloadTable
	}
	var out []ratio
	for _, p := range rows {
		if !isPipelined(p.Client) || !measured(p) {
			continue
		}
		for _, q := range rows {
			if isPipelined(q.Client) || !measured(q) || isNoKeepAlive(p.Client) != isNoKeepAlive(q.Client) {
				continue
			}
			r := ratio{Row: p.Client, Peer: q.Client, ReqPerSec: p.ReqPerSec / q.ReqPerSec,
				CPUPerReq: p.CPUPerReq / q.CPUPerReq, P99: p.P99Ms / q.P99Ms}
			if tail {
				r.P999 = p.P999Ms / q.P999Ms
			}
			out = append(out, r)
		}
	}
	return out
}

// measured reports whether a row has figures to compare.
func measured(r result) bool { return r.Skipped == "" && r.Requests > 0 }

// ratioLines prints ratiosOf, a line per pipelined row, and the ratios of
// each fasthttp engine behind the net/http API to the engine alone.
func ratioLines(rows []result, tail bool) []string {
	var out []string
	rs := ratiosOf(rows, tail)
	for i := 0; i < len(rs); {
		var parts []string
		j := i
		for ; j < len(rs) && rs[j].Row == rs[i].Row; j++ {
			part := fmt.Sprintf("/ %s: req/s %.2f, CPU/req %.2f, p99 %.2f", rs[j].Peer, rs[j].ReqPerSec, rs[j].CPUPerReq, rs[j].P99)
			if tail {
				part += fmt.Sprintf(", p99.9 %.2f", rs[j].P999)
			}
			parts = append(parts, part)
		}
		out = append(out, rs[i].Row+" "+strings.Join(parts, "; "))
		i = j
	}
	out = append(out, apiCostLines(rows)...)
	return out
}

// apiCostLines gives a fasthttp engine behind the net/http API against the
// engine alone (roundtripper.go): what the API costs.
func apiCostLines(rows []result) []string {
	var out []string
	for _, p := range rows {
		engine, isRT := strings.CutSuffix(p.Client, " "+rtSuffix)
		if !isRT || !measured(p) {
			continue
		}
		for _, q := range rows {
			if q.Client == engine && measured(q) {
				out = append(out, fmt.Sprintf("%s / %s: req/s %.2f, CPU/req %.2f (+%.1fµs), p99 %.2f", p.Client, q.Client,
					p.ReqPerSec/q.ReqPerSec, p.CPUPerReq/q.CPUPerReq, p.CPUPerReq-q.CPUPerReq, p.P99Ms/q.P99Ms))
			}
		}
	}
	return out
}

func fmtMs(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%.0fµs", v*1000)
	}
	return fmt.Sprintf("%.1fms", v)
}

// startRecording starts a CPU profile or an execution trace into the file
// named path, if path is not empty, and returns the function that stops it.
func startRecording(path string, start func(io.Writer) error, stop func()) func() {
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = start(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmarks:", err)
		os.Exit(2)
	}
	return stop
}
