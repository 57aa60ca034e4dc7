package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Suites, in the order "all" runs them. Each is a list of scenarios; see
// suiteScenarios and README.md.
var suiteNames = []string{"default", "concurrency", "bodies", "chunked", "p1", "p5", "post", "upload", "slow", "undici", "hosts", "addrs", "tls", "rest", "download", "breakdown", "gateway"}

// suiteAbout says in a sentence what each suite shows (the -markdown page).
var suiteAbout = map[string]string{
	"default":     "Load spreading, overload and saturation: C=5, 10 ms answers, (K, P) = (10, 10), (1, 10), (10, 50), (10, 500) on both servers with the no-keep-alive rows, then no delay at P=50.",
	"concurrency": "A service migrated with `OptionsFrom(http.DefaultTransport)` beside net/http's `DefaultTransport`: 24 callers, 300 ms answers from the serial server, GET then POST, where nothing gains from pipelining.",
	"bodies":      "Response bodies from 128 B to 4 MiB (65537 B and 262145 B are one byte past where a transport may switch from buffering to streaming): MB/s and CPU per MB.",
	"chunked":     "The bodies suite's sizes from 16 KiB sent with `Transfer-Encoding: chunked`, whose length a client learns only at their end, on both servers.",
	"p1":          "One caller in a loop, and two: each request's own cost and latency; POSTs one after another; one caller over TLS.",
	"p5":          "As many callers as connections: nothing to pipeline, the cost per request alone; with fasthttp's engines behind `http.Client` (what the net/http API costs).",
	"post":        "50 callers sending POSTs of 1 KiB on 5 connections: requests that are never pipelined, queued for a connection.",
	"upload":      "Request bodies of 16 KiB to 1 MiB (POST, and PUT): how a body reaches the socket.",
	"slow":        "1% of answers after 200 ms, the rest after 1 ms: p50 to p99.9, and the requests the server received twice (`dup %`); with the opt-in hedge row and the migrated-service rows (no connection limit).",
	"undici":      "The shape of undici's README benchmark: 64 KiB after 1 ms, 50 connections of depth 10, 100 callers.",
	"hosts":       "200 hosts on 127.0.0.1, requests spread over them: pools per host, and the connections and goroutines left at the end.",
	"rest":        "A REST client's load: every request to its own path `/items/<id>`; then the same load beside a long-lived streaming GET (ndjson, a line every 100 ms) closed and sent again every 500 ms, on the same host.",
	"tls":         "HTTP/1.1 over TLS, and HTTP/2 where the server offers it (the serial server does; the concurrent one speaks HTTP/1.1 only).",
	"breakdown":   "Where each client's CPU per request goes, beside CPU/req (system calls, context switches, goroutine switches, allocations): the everyday cell (10 ms answers, 10 callers) and the per-request cost alone (P=5, no delay), on the concurrent server, with fasthttp's engines behind `http.Client`.",
	"gateway":     "`net/http/httputil.ReverseProxy` in a child process over each transport (fasthttp's engines behind `RoundTripper`), 16 connections to the backend, in front of the program's servers (1 ms answers) and nginx where installed (at once), driven by 128 callers on keep-alive connections: the gateway's req/s, p99 and CPU per request.",
	"download":    "One caller downloading 1 MiB, 64 MiB and 1 GiB bodies in 32 KiB reads, alone and beside ten callers' paced 128 B GETs to the same host: the download's MB/s and the client's CPU per MB, with fasthttp's streaming body.",
}

// defaultSuites run when neither a scenario (C/K/P/DELAY) nor a suite is
// given: about 4 minutes on the project's 2-core machine.
var defaultSuites = []string{"default", "concurrency"}

// bodySizes are the bodies suite's response sizes: 65537 B and 262145 B are
// one byte past 64 KiB and 256 KiB, where a transport may switch from
// buffering a body to streaming it (pipelined streams bodies over 256 KiB).
var bodySizes = []int{128, 16 << 10, 64 << 10, 64<<10 + 1, 256 << 10, 256<<10 + 1, 1 << 20, 4 << 20}

// withRoundTrippers is the default rows and fasthttp's engines behind
// http.Client (roundtripper.go), each below its engine.
var withRoundTrippers = []string{clientNetHTTP, clientPipelined,
	clientFastHost, clientFastHostRT, clientFastPipeline, clientFastPipelineRT}

// withRoundTripperRows returns names with each fasthttp engine's
// RoundTripper row below the engine's, where it is not there already.
func withRoundTripperRows(names []string) []string {
	var out []string
	for _, n := range names {
		out = append(out, n)
		for _, rt := range []string{clientFastHostRT, clientFastPipelineRT} {
			if n+" "+rtSuffix == rt && !slices.Contains(names, rt) {
				out = append(out, rt)
			}
		}
	}
	return out
}

// suiteScenarios returns the scenarios of the named suite. The servers of
// o.servers apply to the suites that run on both; BODY to the default one.
func suiteScenarios(name string, o *options) []scenario {
	const ms = time.Millisecond
	both := func(sc scenario) []scenario {
		var out []scenario
		for _, s := range o.servers {
			sc.Server = s
			out = append(out, sc)
		}
		return out
	}
	var out []scenario
	switch name {
	case "default":
		// fasthttp's engines behind RoundTripper beside the K=10 cells
		// up to P=50 and saturation: not at K=1 nor at P=500 (overload,
		// where PipelineClient fails what its queues cannot hold), to
		// keep the default run within about four minutes; the p5 and
		// post suites compare the cost of a request without pipelining.
		for _, kp := range [][2]int{{10, 10}, {1, 10}, {10, 50}, {10, 500}} {
			rt := kp[0] > 1 && kp[1] <= 50
			out = append(out, both(scenario{C: 5, K: kp[0], P: kp[1], Delay: 10 * ms, Body: o.body, roundTrippers: rt})...)
		}
		out = append(out, both(scenario{C: 5, K: 10, P: 50, Body: o.body, roundTrippers: true})...)
	case "concurrency":
		// A service migrated with OptionsFrom(http.DefaultTransport)
		// must not be slower than with net/http when requests cannot be
		// pipelined (POST) or the server answers one at a time (serial).
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			sc := scenario{Server: modeSerial, P: 24, Delay: 300 * ms, Body: 128, Method: m, Defaults: true,
				Clients:  []string{clientNetHTTPDefaults, clientPipelinedDefaults},
				duration: 3 * time.Second} // a few 300 ms responses per caller and round
			if m == http.MethodPost {
				sc.ReqBody = 128
			}
			out = append(out, sc)
		}
	case "bodies":
		for _, b := range bodySizes {
			out = append(out, scenario{Server: modeConcurrent, C: 5, K: 10, P: 50, Body: b, roundTrippers: true})
		}
	case "chunked":
		// The bodies suite's sizes from 16 KiB, sent chunked: what a
		// server sends for a body written without a Content-Length. A
		// transport cannot know such a body's length before its end.
		// Both servers: net/http's chunks each write of its handler.
		for _, b := range bodySizes {
			if b >= 16<<10 {
				out = append(out, both(scenario{C: 5, K: 10, P: 50, Body: b, Chunked: true, roundTrippers: true})...)
			}
		}
	case "p1":
		// One caller in a loop, and two: a program that calls a service
		// one request after another, where a request's cost is its own
		// (nothing to share a write or a wake-up with).
		for _, p := range []int{1, 2} {
			out = append(out, both(scenario{C: 5, K: 10, P: p, Body: 128})...)
		}
		// One caller sending POSTs one after another: each may need a
		// look at the socket before it is written.
		out = append(out, both(scenario{C: 5, K: 10, P: 1, Body: 128, Method: http.MethodPost, ReqBody: 1 << 10})...)
		// The same caller over TLS (HTTP/1.1: an API client's usual case).
		out = append(out, scenario{Server: modeConcurrent, C: 5, K: 10, P: 1, Body: 128, TLS: true,
			Clients: []string{clientNetHTTPH1, clientPipelinedH1, clientFastHost}})
	case "p5":
		// As many callers as connections: nothing to pipeline. The
		// fasthttp engines also run behind the net/http API
		// (roundtripper.go): what the API adds to their CPU per request.
		out = both(scenario{C: 5, K: 10, P: 5, Body: 128, Clients: withRoundTrippers})
	case "post":
		out = both(scenario{C: 5, K: 10, P: 50, Body: 128, Method: http.MethodPost, ReqBody: 1 << 10, Clients: withRoundTrippers})
	case "upload":
		// Request bodies of 16 KiB to 1 MiB (POST, then PUT, which may be
		// pipelined): how a transport hands a large body to the socket.
		for _, rb := range []int{16 << 10, 256 << 10, 1 << 20} {
			for _, p := range []int{5, 50} {
				out = append(out, scenario{Server: modeConcurrent, C: 5, K: 10, P: p, Body: 128, Method: http.MethodPost, ReqBody: rb})
			}
		}
		out = append(out, scenario{Server: modeConcurrent, C: 5, K: 10, P: 50, Body: 128, Method: http.MethodPut, ReqBody: 1 << 20})
	case "slow":
		// 1% of responses take 200 ms, the others 1 ms: the tail, and
		// requests sent twice (server side). On the serial server (one
		// at a time per connection) and the concurrent one, with every
		// pipeline place taken (P=50), and on the concurrent one with
		// fewer callers than places (P=10). The migrated-service rows
		// have no connection limit: there net/http opens a connection
		// per request and waits for no late answer but its own.
		for _, c := range []struct {
			mode string
			p    int
		}{{modeSerial, 50}, {modeConcurrent, 50}, {modeConcurrent, 10}} {
			out = append(out, scenario{Server: c.mode, C: 5, K: 10, P: c.p, Delay: ms, Body: 128,
				SlowFrac: 0.01, Slow: 200 * ms, Track: true, duration: 8 * time.Second,
				Clients: []string{clientNetHTTP, clientPipelined, clientPipelinedHedge, clientFastHost, clientFastPipeline,
					clientNetHTTPDefaults, clientPipelinedDefaults}})
		}
	case "undici":
		// The shape of undici's README benchmark: 64 KiB after 1 ms, 50
		// connections, depth 10, 100 callers, a Node-like server.
		out = append(out, scenario{Server: modeConcurrent, C: 50, K: 10, P: 100, Delay: ms, Body: 64 << 10,
			Clients: []string{clientNetHTTP, clientPipelined, clientFastHost, clientFastPipeline}})
	case "hosts":
		// 200 listeners, requests spread over them in turn: pools per host,
		// idle connections and goroutines kept.
		out = append(out, scenario{Server: modeConcurrent, C: 5, K: 10, P: 50, Delay: ms, Body: 128, Hosts: 200,
			Clients: []string{clientNetHTTP, clientPipelined, clientNetHTTPDefaults, clientPipelinedDefaults, clientFastHost}})
	case "addrs":
		// One name, three addresses (127.0.0.1, .2, .3 at one port),
		// served by a resolver the run controls: how each client shares
		// its requests among a host's addresses. net/http dials the name
		// through a DialContext that resolves it the same way and tries
		// the addresses in order, as net/http's own dialer does. C=6: two
		// connections per address make an even share possible.
		out = append(out, scenario{Server: modeConcurrent, C: 6, K: 10, P: 60, Delay: ms, Body: 128, Backends: 3, Track: true,
			Clients: []string{clientNetHTTP, clientPipelined, clientFastHost}})
	case "download":
		// One caller downloading 1 MiB, 64 MiB and 1 GiB bodies, alone
		// and beside ten callers' small GETs to the same host: the cost
		// of a stream, and whether requests beside it slow it down.
		for _, size := range downloadSizes {
			for _, beside := range []int{0, downloadBeside} {
				out = append(out, scenario{Server: modeSerial, C: 5, K: 10, P: 1, Body: size, Download: true, Beside: beside,
					Clients: []string{clientNetHTTP, clientPipelined, clientFastHostStream}})
			}
		}
	case "gateway":
		// A reverse proxy in front of the program's servers and nginx
		// (skipped where it is not installed): the rows are its
		// transports, the load many keep-alive connections.
		for _, s := range append(slices.Clone(o.servers), modeNginx) {
			sc := scenario{Gateway: true, Server: s, C: gatewayConns, K: 10, P: gatewayCallers, Delay: ms, Body: 128, Clients: gatewayRows}
			if s == modeNginx {
				sc.Delay = 0 // nginx answers at once
			}
			out = append(out, sc)
		}
	case "breakdown":
		// Where the CPU per request goes (usage.go), in the everyday cell
		// and at P=5 with no delay, beside fasthttp's engines behind the
		// same API: the cells a profile against them starts from.
		out = append(out,
			scenario{Server: modeConcurrent, C: 5, K: 10, P: 10, Delay: 10 * ms, Body: 128, Breakdown: true, Clients: withRoundTrippers},
			scenario{Server: modeConcurrent, C: 5, K: 10, P: 5, Body: 128, Breakdown: true, Clients: withRoundTrippers})
	case "tls":
		// HTTP/1.1 over TLS, and HTTP/2 where the server offers it (the
		// serial server is net/http's, which speaks h2; the concurrent one
		// speaks http/1.1 only, so the h2 rows fall back to HTTP/1.1 there).
		out = both(scenario{C: 5, K: 10, P: 50, Body: 128, TLS: true,
			Clients: []string{clientNetHTTPH2, clientNetHTTPH1, clientPipelinedH2, clientPipelinedH1, clientFastHost, clientFastHostRT, clientFastPipeline, clientFastPipelineRT}})
	case "rest":
		// A REST client: a fresh path per request; then the same load
		// beside a stream to the same host (scenario.StreamBeside).
		rest := []string{clientNetHTTP, clientPipelined, clientFastHost, clientFastPipeline}
		out = append(out,
			scenario{Server: modeConcurrent, C: 5, K: 10, P: 50, Body: 128, IDs: true, Clients: rest},
			scenario{Server: modeConcurrent, C: 5, K: 10, P: 50, Body: 128, IDs: true, StreamBeside: true, Clients: rest})
	}
	for i := range out {
		out[i].Suite = name
	}
	return out
}

// setRunFlags reads the options that choose what runs: the suites, or
// -url with its method and request bound.
func (o *options) setRunFlags(fSuite, fURL, fMethod, fMaxReq, fDur, fClients string) error {
	o.durationSet = setting(fDur, "DURATION") != ""
	o.clientsSet = setting(fClients, "CLIENTS") != ""
	o.urlPause = 3 * time.Second
	suites := setting(fSuite, "SUITE")
	if u := fURL; u != "" {
		if suites != "" {
			return errors.New("-url runs its own table: no -suite with it")
		}
		if o.clientsSet {
			return errors.New("-url compares net/http and pipelined: no CLIENTS with it")
		}
		if err := checkURL(u); err != nil {
			return err
		}
		o.url = u
		switch o.method = strings.ToUpper(setting(fMethod, "METHOD")); o.method {
		case "":
			o.method = http.MethodGet
		case http.MethodGet, http.MethodHead:
		default:
			return fmt.Errorf("METHOD: %q: -url sends GET or HEAD only", o.method)
		}
		o.maxRequests = 10000
		if m := setting(fMaxReq, "MAX_REQUESTS"); m != "" {
			n, err := strconv.ParseInt(m, 10, 64)
			if err != nil || n < 1 || n > 1_000_000 {
				return fmt.Errorf("MAX_REQUESTS: bad count %q (want 1 to 1000000)", m)
			}
			o.maxRequests = n
		}
		if o.duration*time.Duration(o.rounds) > time.Minute {
			return errors.New("DURATION: at most 1m with -url")
		}
		return nil
	}
	if setting(fMethod, "METHOD") != "" || setting(fMaxReq, "MAX_REQUESTS") != "" {
		return errors.New("-method and -max-requests go with -url")
	}
	if suites == "" {
		o.suites = defaultSuites
		return nil
	}
	if o.single {
		return errors.New("SUITE: a suite has its own scenarios: give either a suite or C/K/P/DELAY")
	}
	for _, n := range strings.Split(suites, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "all":
			o.suites = append(o.suites, suiteNames...)
		case slices.Contains(suiteNames, n):
			o.suites = append(o.suites, n)
		default:
			return fmt.Errorf("SUITE: unknown suite %q (known: %s, all)", n, strings.Join(suiteNames, ", "))
		}
	}
	return nil
}

// checkURL accepts only an explicit absolute http or https URL with a host:
// -url sends load, so nothing is guessed (no default scheme, no relative
// reference).
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("-url: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("-url: %q is not an explicit http:// or https:// URL", s)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("-url: %q has no host", s)
	}
	if u.User != nil {
		return fmt.Errorf("-url: %q has credentials: not sent by the benchmark", s)
	}
	return nil
}

// printURLWarning says what -url is about to send, and where.
func printURLWarning(w io.Writer, o *options) {
	scs := o.scenarios()
	maxP := 0
	for _, sc := range scs {
		maxP = max(maxP, sc.P)
	}
	fmt.Fprintf(w, `WARNING: this sends load to %s
  %s requests from up to %d goroutines, net/http and pipelined in turn, %d scenario(s) x 2 clients,
  for about %v per client and scenario after one warm-up request per caller, and at most
  %d requests per client and scenario (%d in all). Redirects are not followed.
  Run it only against a server you own or may load. Starting in %v; interrupt (Ctrl-C) to stop.
`, o.url, o.method, maxP, len(scs), o.duration*time.Duration(o.rounds), o.maxRequests,
		o.maxRequests*int64(2*len(scs)), o.urlPause)
}

// writeTestCert writes a self-signed ECDSA certificate for 127.0.0.1 and its
// key to dir, for the TLS suite, and returns the files and a pool that
// trusts the certificate.
func writeTestCert(dir string) (certFile, keyFile string, roots *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pipelined benchmarks"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "", "", nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", nil, err
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots, nil
}

// newCellID returns a random name for one cell's requests on a tracking
// server.
func newCellID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// fetchServerCount asks a tracking server how many requests of the cell it
// received, how many distinct ones, and how many each backend received.
func fetchServerCount(addr, cell string) (requests, distinct int, backends []int, err error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + addr + statsPath + "?cell=" + cell)
	if err != nil {
		return 0, 0, nil, err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return 0, 0, nil, err
	}
	f := strings.Fields(line)
	var ns []int
	for _, x := range f {
		n, err := strconv.Atoi(x)
		if err != nil {
			break
		}
		ns = append(ns, n)
	}
	if len(ns) < 2 || len(ns) != len(f) {
		return 0, 0, nil, fmt.Errorf("bad answer %q", line)
	}
	return ns[0], ns[1], ns[2:], nil
}
