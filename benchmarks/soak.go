//go:build !nopipelined

package main

// This file is the bounded soak mode (-soak DURATION): P callers send mixed
// GET/POST/HEAD requests through one pipelined Transport to a
// fault-injecting HTTP/1.1 server in a child process, for at most
// maxSoakDuration, and the program reports what was served, the errors by
// kind, and the client's goroutines and heap before and after.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/pipelined/pipelined"
)

// modeFault is the -server value of the fault-injecting child server.
const modeFault = "fault"

// maxSoakDuration caps -soak: the soak is a bounded check, not an endurance
// run.
const maxSoakDuration = 60 * time.Second

// soakConfig configures one soak run.
type soakConfig struct {
	Duration  time.Duration // capped at maxSoakDuration
	Conns     int           // MaxConnsPerHost
	Depth     int           // PipelineDepth
	Parallel  int           // callers
	FaultRate float64       // probability that the server injects a fault into a request
	Faults    string        // comma list of the faults to inject (soakFaultNames); "" or "all": every one
	Seed      uint64        // seeds the server's faults and the callers' choice of method
	Stall     time.Duration // how long a stall fault waits (bounded)
	Timeout   time.Duration // per request, including reading the body
	Progress  time.Duration // interval of progress lines; 0: none
	Hedge     bool          // TransportOptions.HedgeHeadOfLine
}

// defaultSoakConfig is the soak's configuration unless flags change it.
func defaultSoakConfig() soakConfig {
	return soakConfig{
		Duration:  30 * time.Second,
		Conns:     4,
		Depth:     8,
		Parallel:  64,
		FaultRate: 0.01,
		Seed:      1,
		Stall:     200 * time.Millisecond, // below the 1 s DefaultHeadOfLineTimeout
		Timeout:   5 * time.Second,
		Progress:  10 * time.Second,
	}
}

// Faults the soak server injects: a request gets a fault with probability
// FaultRate, chosen uniformly among those enabled (soakConfig.Faults).
type soakFault int

const (
	soakNone       soakFault = iota // answer normally
	soakCloseQuiet                  // close after N requests without answering this one
	soakReset                       // send the head and part of the body, then RST
	soakConnClose                   // answer with "Connection: close" (mid-pipeline), then close
	soakStall                       // wait Stall, then answer normally
	soakGarbage                     // send bytes that are not a response, then close
	soakShortBody                   // send fewer body bytes than Content-Length, then close
	numSoakFaults
)

var soakFaultNames = [numSoakFaults]string{"none", "close-quiet", "reset-mid-body", "conn-close", "stall", "garbage", "short-body"}

// parseSoakFaults parses a comma list of fault names; "" and "all" enable
// every fault.
func parseSoakFaults(list string) ([]soakFault, error) {
	if list == "" || list == "all" {
		var all []soakFault
		for f := soakCloseQuiet; f < numSoakFaults; f++ {
			all = append(all, f)
		}
		return all, nil
	}
	var out []soakFault
	for _, name := range strings.Split(list, ",") {
		i := slices.Index(soakFaultNames[:], strings.TrimSpace(name))
		if i < 1 {
			return nil, fmt.Errorf("soak: unknown fault %q (known: %s, or all)", name, strings.Join(soakFaultNames[1:], ", "))
		}
		if !slices.Contains(out, soakFault(i)) {
			out = append(out, soakFault(i))
		}
	}
	return out, nil
}

// soakServerStats is what the fault server reports when it stops.
type soakServerStats struct {
	Conns      int64            `json:"conns"`       // connections accepted
	Requests   int64            `json:"requests"`    // requests read in full
	Posts      int64            `json:"posts"`       // distinct POST ids read in full
	DupPosts   int64            `json:"dup_posts"`   // POST ids read more than once (each extra time counts)
	Faults     map[string]int64 `json:"faults"`      // faults injected, by name
	Goroutines int              `json:"goroutines"`  // the child's goroutines at the end
	HeapInuse  uint64           `json:"heap_inuse"`  // the child's heap in use at the end
	Seed       uint64           `json:"seed"`        // the seed it ran with
	FaultRate  float64          `json:"fault_rate"`  // the fault rate it ran with
	StallNanos time.Duration    `json:"stall_nanos"` // the stall it ran with
}

// soakServer is a raw HTTP/1.1 server on 127.0.0.1 that answers the
// pipelined requests of a connection one at a time, in order, and injects
// faults at random (each connection's generator is seeded from the seed and
// the connection's number). A request's id is the last element of its path
// (/get/<id>, /post/<id>, /head/<id>); a normal answer carries it in X-Id
// and as its body. Every POST id read in full is recorded.
type soakServer struct {
	ln    net.Listener
	rate  float64
	kinds []soakFault // the faults to choose from
	seed  uint64
	stall time.Duration

	conns atomic.Int64 // connections accepted
	reqs  atomic.Int64 // requests read in full

	mu     sync.Mutex // guards posts, dups, faults, open and done
	posts  map[uint64]struct{}
	dups   int64
	faults [numSoakFaults]int64
	open   map[net.Conn]struct{}
	done   bool

	wg sync.WaitGroup // the accept loop and the connections' goroutines
}

func newSoakServer(cfg soakConfig) (*soakServer, error) {
	kinds, err := parseSoakFaults(cfg.Faults)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &soakServer{ln: ln, rate: cfg.FaultRate, kinds: kinds, seed: cfg.Seed, stall: cfg.Stall,
		posts: make(map[uint64]struct{}), open: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *soakServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return
		}
		n := uint64(s.conns.Add(1))
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.open[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serve(n, c)
			s.mu.Lock()
			delete(s.open, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
}

// close stops the server and returns its statistics.
func (s *soakServer) close() soakServerStats {
	s.ln.Close()
	s.mu.Lock()
	s.done = true
	for c := range s.open {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	st := soakServerStats{Conns: s.conns.Load(), Requests: s.reqs.Load(), Faults: map[string]int64{},
		Seed: s.seed, FaultRate: s.rate, StallNanos: s.stall}
	s.mu.Lock()
	st.Posts, st.DupPosts = int64(len(s.posts)), s.dups
	for f := soakCloseQuiet; f < numSoakFaults; f++ {
		st.Faults[soakFaultNames[f]] = s.faults[f]
	}
	s.mu.Unlock()
	return st
}

// soakID parses the id at the end of a request path.
func soakID(path string) (uint64, bool) {
	i := strings.LastIndexByte(path, '/')
	id, err := strconv.ParseUint(path[i+1:], 10, 64)
	return id, err == nil
}

func (s *soakServer) serve(connN uint64, c net.Conn) {
	rng := rand.New(rand.NewPCG(s.seed, connN))
	br := bufio.NewReader(c)
	bw := bufio.NewWriter(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		req.Body.Close()
		s.reqs.Add(1)
		idStr := req.URL.Path[strings.LastIndexByte(req.URL.Path, '/')+1:]
		id, ok := soakID(req.URL.Path)
		if !ok {
			bw.WriteString("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			bw.Flush()
			return
		}
		f := soakNone
		if rng.Float64() < s.rate {
			f = s.kinds[rng.IntN(len(s.kinds))]
		}
		s.mu.Lock()
		if req.Method == http.MethodPost {
			if _, seen := s.posts[id]; seen {
				s.dups++
			} else {
				s.posts[id] = struct{}{}
			}
		}
		s.faults[f]++
		s.mu.Unlock()
		head := req.Method == http.MethodHead
		writeHead := func(clen int, extra string) {
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nX-Id: %s\r\n%s\r\n", clen, idStr, extra)
		}
		writeBody := func(b string) {
			if !head { // RFC 9110 §9.3.2: no content in a response to HEAD
				bw.WriteString(b)
			}
		}
		switch f {
		case soakNone, soakStall:
			if f == soakStall {
				if bw.Flush() != nil {
					return
				}
				time.Sleep(s.stall)
			}
			writeHead(len(idStr), "")
			writeBody(idStr)
		case soakCloseQuiet:
			bw.Flush()
			return
		case soakReset:
			writeHead(len(idStr)+100, "")
			writeBody(idStr)
			bw.Flush()
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0) // close sends RST
			}
			return
		case soakConnClose:
			writeHead(len(idStr), "Connection: close\r\n")
			writeBody(idStr)
			bw.Flush()
			return
		case soakGarbage:
			bw.WriteString("HTTP/1.1 2x0 nonsense\r\n\r\n")
			bw.Flush()
			return
		case soakShortBody:
			writeHead(len(idStr)+10, "")
			writeBody(idStr)
			bw.Flush()
			return
		}
		// Flush when the client has nothing more buffered for us, as a
		// server reading one request at a time does.
		if br.Buffered() == 0 && bw.Flush() != nil {
			return
		}
	}
}

// serveFaultChild runs the fault server for a parent process: it prints
// "LISTEN addr", serves until stdin is closed, then prints "STATS <json>".
func serveFaultChild(cfg soakConfig) error {
	s, err := newSoakServer(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "LISTEN %s\n", s.ln.Addr())
	io.Copy(io.Discard, os.Stdin)
	st := s.close()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	st.Goroutines, st.HeapInuse = runtime.NumGoroutine(), ms.HeapInuse
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(os.Stdout, "STATS %s\n", b)
	return err
}

// soakChild is the fault server running in a child process, so that the
// goroutines and heap measured in this process are the client's alone.
type soakChild struct {
	addr  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // the child's stdout after LISTEN, closed at EOF
}

func startSoakChild(cfg soakConfig) (*soakChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-serve", "-server", modeFault,
		"-soak-faults", strconv.FormatFloat(cfg.FaultRate, 'g', -1, 64),
		"-soak-fault-kinds", cfg.Faults,
		"-soak-seed", strconv.FormatUint(cfg.Seed, 10),
		"-soak-stall", cfg.Stall.String())
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
	c := &soakChild{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() { // owns stdout; ends when the child exits
		defer close(c.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody listens: drop
			}
		}
	}()
	select {
	case l, ok := <-c.lines:
		addr, found := strings.CutPrefix(l, "LISTEN ")
		if !ok || !found {
			c.stop()
			return nil, fmt.Errorf("soak server child: unexpected %q", l)
		}
		c.addr = addr
	case <-time.After(10 * time.Second):
		c.stop()
		return nil, errors.New("soak server child did not start in 10s")
	}
	return c, nil
}

// stop closes the child's stdin, collects its statistics and waits for it
// (killing it if it lingers).
func (c *soakChild) stop() (soakServerStats, error) {
	var st soakServerStats
	err := errors.New("soak server child: no statistics")
	c.stdin.Close()
	timeout := time.After(10 * time.Second)
collect:
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				break collect
			}
			if js, found := strings.CutPrefix(l, "STATS "); found {
				err = json.Unmarshal([]byte(js), &st)
			}
		case <-timeout:
			err = errors.New("soak server child: no statistics within 10s")
			break collect
		}
	}
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
	return st, err
}

// Error kinds, in report order. errorKind assigns each error the first
// that matches.
var soakErrorKinds = []string{
	"ErrServerClosed",    // errors.Is(err, pipelined.ErrServerClosed)
	"ErrFraming",         // errors.Is(err, pipelined.ErrFraming)
	"DeadlineExceeded",   // errors.Is(err, context.DeadlineExceeded)
	"ErrTransportClosed", // errors.Is(err, pipelined.ErrTransportClosed)
	"unexpected EOF",     // errors.Is(err, io.ErrUnexpectedEOF): a body cut short
	"net error",          // errors.As(err, *net.Error), e.g. a reset
	"ConnError (other)",  // errors.As(err, **pipelined.ConnError), other causes
	"bad status",         // a response other than 200
	"other",
}

func soakErrorKind(err error) string {
	var ne net.Error
	var ce *pipelined.ConnError
	switch {
	case errors.Is(err, pipelined.ErrServerClosed):
		return "ErrServerClosed"
	case errors.Is(err, pipelined.ErrFraming):
		return "ErrFraming"
	case errors.Is(err, context.DeadlineExceeded):
		return "DeadlineExceeded"
	case errors.Is(err, pipelined.ErrTransportClosed):
		return "ErrTransportClosed"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	case errors.As(err, &ce):
		// A ConnError is a net.Error itself (its cause's Timeout): what
		// the network said is its cause's.
		if errors.As(ce.Err, &ne) {
			return "net error"
		}
		return "ConnError (other)"
	case errors.As(err, &ne):
		return "net error"
	case errors.Is(err, errBadStatus):
		return "bad status"
	}
	return "other"
}

var errBadStatus = errors.New("bad status")

// Request methods of the soak, as indexes into per-method counters.
const (
	soakGET = iota
	soakPOST
	soakHEAD
	numSoakMethods
)

var soakMethods = [numSoakMethods]string{http.MethodGet, http.MethodPost, http.MethodHead}

// soakCounts are the callers' results. Each caller owns one and merges it
// into the total under soakResult.mu when it stops.
type soakCounts struct {
	sent        [numSoakMethods]int64
	ok          [numSoakMethods]int64
	errs        map[string]*[numSoakMethods]int64
	bodyErrs    int64 // errors while reading a body (included in errs)
	wrongCaller int64
	examples    map[string]string // first error message of each kind
	wrongEx     string
}

func newSoakCounts() *soakCounts {
	return &soakCounts{errs: map[string]*[numSoakMethods]int64{}, examples: map[string]string{}}
}

func (c *soakCounts) addErr(m int, err error, body bool) {
	k := soakErrorKind(err)
	if c.errs[k] == nil {
		c.errs[k] = new([numSoakMethods]int64)
	}
	c.errs[k][m]++
	if body {
		c.bodyErrs++
	}
	if _, ok := c.examples[k]; !ok {
		c.examples[k] = fmt.Sprintf("%s: %v", soakMethods[m], err)
	}
}

func (c *soakCounts) merge(o *soakCounts) {
	for m := range numSoakMethods {
		c.sent[m] += o.sent[m]
		c.ok[m] += o.ok[m]
	}
	for k, v := range o.errs {
		if c.errs[k] == nil {
			c.errs[k] = new([numSoakMethods]int64)
		}
		for m := range numSoakMethods {
			c.errs[k][m] += v[m]
		}
		if _, ok := c.examples[k]; !ok {
			c.examples[k] = o.examples[k]
		}
	}
	c.bodyErrs += o.bodyErrs
	c.wrongCaller += o.wrongCaller
	if c.wrongEx == "" {
		c.wrongEx = o.wrongEx
	}
}

func (c *soakCounts) served() (n int64) {
	for _, v := range c.ok {
		n += v
	}
	return n
}

// soakResult is the outcome of a soak.
type soakResult struct {
	Elapsed                         time.Duration
	Counts                          *soakCounts
	DupPosts                        int64
	Server                          soakServerStats
	GoroutinesBefore                int
	GoroutinesAfter                 int
	GoroutinesMax                   int // sampled during the run
	HeapBefore, HeapAfter           uint64
	HeapAllocBefore, HeapAllocAfter uint64
	CallersStuck                    bool
	Leaked                          []string // stacks of goroutines alive after Close that were not before
	StatsEnd                        map[string]pipelined.HostStats
	StatsClosed                     map[string]pipelined.HostStats
	MaxOpen, MaxInFlight            int
	MaxQueued                       int
	Samples, FallbackSamples        int                              // Stats samples, and those with PipelineDepth 1
	Resends                         [pipelined.ResendHedge + 1]int64 // attempts queued, by pipelined.ResendCause
}

// Passed reports whether the soak found nothing wrong: no response reached
// the wrong caller, no POST reached the server twice, no goroutine outlived
// Close, every caller stopped by itself.
func (r *soakResult) Passed() bool {
	return r.Counts.wrongCaller == 0 && r.DupPosts == 0 && r.GoroutinesAfter <= r.GoroutinesBefore &&
		len(r.Leaked) == 0 && !r.CallersStuck
}

// runSoak runs a soak and prints its report to out. The error is for a soak
// that could not run; a soak that ran and found problems returns a result
// whose Passed is false.
func runSoak(cfg soakConfig, out io.Writer) (*soakResult, error) {
	if cfg.Duration > maxSoakDuration {
		fmt.Fprintf(out, "soak: duration %v capped at %v\n", cfg.Duration, maxSoakDuration)
		cfg.Duration = maxSoakDuration
	}
	if cfg.Duration <= 0 || cfg.Conns < 1 || cfg.Depth < 1 || cfg.Parallel < 1 || cfg.Timeout <= 0 {
		return nil, fmt.Errorf("soak: bad configuration %+v", cfg)
	}
	if cfg.FaultRate < 0 || cfg.FaultRate > 1 {
		return nil, fmt.Errorf("soak: fault rate %v not in [0, 1]", cfg.FaultRate)
	}
	kinds, err := parseSoakFaults(cfg.Faults)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range kinds {
		names = append(names, soakFaultNames[f])
	}
	fmt.Fprintf(out, "soak: %s %s/%s GOMAXPROCS=%d; pipelined.Transport MaxConnsPerHost=%d PipelineDepth=%d HedgeHeadOfLine=%t, %d callers, %v;\n"+
		"      fault server in a child process: fault rate %g per request (seed %d, stall %v), per-request timeout %v;\n"+
		"      faults: %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), cfg.Conns, cfg.Depth, cfg.Hedge, cfg.Parallel, cfg.Duration,
		cfg.FaultRate, cfg.Seed, cfg.Stall, cfg.Timeout, strings.Join(names, ", "))

	child, err := startSoakChild(cfg)
	if err != nil {
		return nil, err
	}
	childStopped := false
	defer func() {
		if !childStopped {
			child.stop()
		}
	}()
	url := "http://" + child.addr

	r := &soakResult{Counts: newSoakCounts()}
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC() // sync.Pool victim caches survive one GC
	runtime.ReadMemStats(&ms)
	r.HeapBefore, r.HeapAllocBefore = ms.HeapInuse, ms.HeapAlloc
	r.GoroutinesBefore = runtime.NumGoroutine()
	before := goroutineIDs()

	var resends [len(r.Resends)]atomic.Int64
	t := pipelined.NewTransport(pipelined.TransportOptions{MaxConnsPerHost: cfg.Conns, PipelineDepth: cfg.Depth, HedgeHeadOfLine: cfg.Hedge,
		Observer: &pipelined.Observer{RequestQueued: func(ev pipelined.RequestEvent) {
			if int(ev.Resend) < len(resends) {
				resends[ev.Resend].Add(1)
			}
		}}})

	var (
		stop   atomic.Bool
		nextID atomic.Uint64
		served atomic.Int64 // for progress lines
		failed atomic.Int64
		mu     sync.Mutex // guards r.Counts while callers merge into it
		wg     sync.WaitGroup
	)
	base, cancelAll := context.WithCancel(context.Background())
	defer cancelAll()
	start := time.Now()
	for i := range cfg.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newSoakCounts()
			defer func() {
				mu.Lock()
				r.Counts.merge(c)
				mu.Unlock()
			}()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1<<32))
			buf := make([]byte, 256)
			for !stop.Load() && base.Err() == nil {
				id := strconv.FormatUint(nextID.Add(1), 10)
				m, body := soakGET, io.Reader(nil)
				switch x := rng.IntN(100); {
				case x < 2:
					m = soakHEAD
				case x < 22:
					m, body = soakPOST, strings.NewReader("payload-"+id)
				}
				ctx, cancel := context.WithTimeout(base, cfg.Timeout)
				req, err := http.NewRequestWithContext(ctx, soakMethods[m], url+"/"+strings.ToLower(soakMethods[m])+"/"+id, body)
				if err != nil {
					cancel()
					c.addErr(m, err, false)
					failed.Add(1)
					continue
				}
				c.sent[m]++
				resp, err := t.RoundTrip(req)
				if err != nil {
					cancel()
					c.addErr(m, err, false)
					failed.Add(1)
					continue
				}
				n, err := io.ReadFull(resp.Body, buf)
				if err == io.ErrUnexpectedEOF || err == io.EOF {
					err = nil // a body shorter than buf: all of it
				} else if err == nil {
					err = fmt.Errorf("body longer than %d bytes", len(buf))
				}
				resp.Body.Close()
				cancel()
				if err != nil {
					c.addErr(m, err, true)
					failed.Add(1)
					continue
				}
				if resp.StatusCode != http.StatusOK {
					c.addErr(m, fmt.Errorf("%w %s", errBadStatus, resp.Status), false)
					failed.Add(1)
					continue
				}
				want := id
				if m == soakHEAD {
					want = ""
				}
				if got, xid := string(buf[:n]), resp.Header.Get("X-Id"); got != want || xid != id {
					c.wrongCaller++
					if c.wrongEx == "" {
						c.wrongEx = fmt.Sprintf("%s %s got X-Id %q and body %q", soakMethods[m], id, xid, got)
					}
					continue
				}
				c.ok[m]++
				served.Add(1)
			}
		}()
	}

	// Sample Stats and goroutines until the end, with progress lines.
	end := start.Add(cfg.Duration)
	nextProgress := start.Add(cfg.Progress)
	for now := time.Now(); now.Before(end); now = time.Now() {
		time.Sleep(min(20*time.Millisecond, end.Sub(now)))
		for _, hs := range t.Stats() {
			r.MaxOpen = max(r.MaxOpen, hs.Open)
			r.MaxInFlight = max(r.MaxInFlight, hs.InFlight)
			r.MaxQueued = max(r.MaxQueued, hs.Queued)
			r.Samples++
			if hs.PipelineDepth == 1 && cfg.Depth > 1 {
				r.FallbackSamples++
			}
		}
		r.GoroutinesMax = max(r.GoroutinesMax, runtime.NumGoroutine())
		if cfg.Progress > 0 && !time.Now().Before(nextProgress) && time.Now().Before(end) {
			nextProgress = nextProgress.Add(cfg.Progress)
			runtime.ReadMemStats(&ms)
			var hs pipelined.HostStats
			for _, s := range t.Stats() {
				hs = s
			}
			fmt.Fprintf(out, "  %5.1fs: %d served, %d errors; goroutines %d, heap in use %s; open %d, in flight %d, queued %d, depth %d\n",
				time.Since(start).Seconds(), served.Load(), failed.Load(), runtime.NumGoroutine(), kib(ms.HeapInuse),
				hs.Open, hs.InFlight, hs.Queued, hs.PipelineDepth)
		}
	}
	stop.Store(true)
	r.Elapsed = time.Since(start)
	// Every caller stops after its current request, which its timeout
	// bounds; if one does not, cancel everything and close the Transport.
	callersDone := make(chan struct{})
	go func() { wg.Wait(); close(callersDone) }()
	select {
	case <-callersDone:
	case <-time.After(cfg.Timeout + 10*time.Second):
		r.CallersStuck = true
		cancelAll()
		t.Close()
		select {
		case <-callersDone:
		case <-time.After(10 * time.Second):
			return nil, errors.New("soak: callers still running 10s after Close")
		}
	}
	r.StatsEnd = t.Stats()
	t.Close()
	r.StatsClosed = t.Stats()
	t = nil
	for i := range resends {
		r.Resends[i] = resends[i].Load()
	}

	// Goroutines after Close, with a bounded wait for exiting ones.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r.GoroutinesAfter = runtime.NumGoroutine()
		if r.GoroutinesAfter <= r.GoroutinesBefore || time.Now().After(deadline) {
			break
		}
	}
	if r.GoroutinesAfter > r.GoroutinesBefore {
		for id, stack := range goroutineStacks() {
			if _, ok := before[id]; !ok && !strings.Contains(stack, "runtime.Stack(") {
				r.Leaked = append(r.Leaked, stack)
			}
		}
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	r.HeapAfter, r.HeapAllocAfter = ms.HeapInuse, ms.HeapAlloc

	childStopped = true
	st, err := child.stop()
	if err != nil {
		return nil, err
	}
	r.Server, r.DupPosts = st, st.DupPosts
	r.print(out, cfg)
	return r, nil
}

func kib(n uint64) string { return fmt.Sprintf("%.0f KiB", float64(n)/1024) }

func (r *soakResult) print(out io.Writer, cfg soakConfig) {
	c := r.Counts
	var sent int64
	for _, v := range c.sent {
		sent += v
	}
	fmt.Fprintf(out, "\nduration         %.1fs\n", r.Elapsed.Seconds())
	fmt.Fprintf(out, "requests sent    %d (GET %d, POST %d, HEAD %d)\n", sent, c.sent[soakGET], c.sent[soakPOST], c.sent[soakHEAD])
	fmt.Fprintf(out, "requests served  %d (GET %d, POST %d, HEAD %d), %.0f req/s\n",
		c.served(), c.ok[soakGET], c.ok[soakPOST], c.ok[soakHEAD], float64(c.served())/r.Elapsed.Seconds())
	fmt.Fprintf(out, "wrong caller     %d (must be 0)\n", c.wrongCaller)
	if c.wrongEx != "" {
		fmt.Fprintf(out, "                 first: %s\n", c.wrongEx)
	}
	fmt.Fprintf(out, "POSTs received twice %d (must be 0; the server read %d distinct POST ids)\n", r.DupPosts, r.Server.Posts)
	fmt.Fprintf(out, "attempts queued  ")
	for i, n := range r.Resends {
		if i > 0 {
			fmt.Fprint(out, ", ")
		}
		fmt.Fprintf(out, "%s %d", pipelined.ResendCause(i), n)
	}
	fmt.Fprintln(out)

	fmt.Fprintf(out, "\nerrors by kind (%d of them while reading a body):\n", c.bodyErrs)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind                \tGET\tPOST\tHEAD\ttotal\t")
	var total [numSoakMethods]int64
	for _, k := range soakErrorKinds {
		var v [numSoakMethods]int64
		if p := c.errs[k]; p != nil {
			v = *p
		}
		fmt.Fprintf(tw, "%-20s\t%d\t%d\t%d\t%d\t\n", k, v[0], v[1], v[2], v[0]+v[1]+v[2])
		for m := range numSoakMethods {
			total[m] += v[m]
		}
	}
	fmt.Fprintf(tw, "%-20s\t%d\t%d\t%d\t%d\t\n", "total", total[0], total[1], total[2], total[0]+total[1]+total[2])
	tw.Flush()
	for _, k := range soakErrorKinds {
		if ex, ok := c.examples[k]; ok {
			fmt.Fprintf(out, "  first %s: %s\n", k, ex)
		}
	}

	fmt.Fprintf(out, "\nserver: %d connections, %d requests read (%.3f per request sent), faults injected:",
		r.Server.Conns, r.Server.Requests, float64(r.Server.Requests)/float64(max(sent, 1)))
	for f := soakCloseQuiet; f < numSoakFaults; f++ {
		fmt.Fprintf(out, " %s %d", soakFaultNames[f], r.Server.Faults[soakFaultNames[f]])
	}
	fmt.Fprintln(out)

	fmt.Fprintf(out, "\nclient goroutines before %d, max during %d, after Close %d", r.GoroutinesBefore, r.GoroutinesMax, r.GoroutinesAfter)
	if r.GoroutinesAfter > r.GoroutinesBefore {
		fmt.Fprintf(out, " (LEAK: %d more)", r.GoroutinesAfter-r.GoroutinesBefore)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "client heap in use before %s, after %s (HeapAlloc %s, after %s; after runtime.GC twice)\n",
		kib(r.HeapBefore), kib(r.HeapAfter), kib(r.HeapAllocBefore), kib(r.HeapAllocAfter))
	fmt.Fprintf(out, "server child at the end: %d goroutines, heap in use %s\n", r.Server.Goroutines, kib(r.Server.HeapInuse))
	fmt.Fprintf(out, "Stats sampled every 20ms: max open %d, max in flight %d, max queued %d; depth-1 fallback in %d of %d samples\n",
		r.MaxOpen, r.MaxInFlight, r.MaxQueued, r.FallbackSamples, r.Samples)
	for _, k := range sortedKeys(r.StatsEnd) {
		fmt.Fprintf(out, "Stats() at the end    %s %+v\n", k, r.StatsEnd[k])
	}
	for _, k := range sortedKeys(r.StatsClosed) {
		fmt.Fprintf(out, "Stats() after Close   %s %+v\n", k, r.StatsClosed[k])
	}
	if r.CallersStuck {
		fmt.Fprintf(out, "FAIL: callers did not stop within %v of the end; cancelled them and closed the Transport\n", cfg.Timeout+10*time.Second)
	}
	for i, s := range r.Leaked {
		if i == 5 {
			fmt.Fprintf(out, "... and %d more\n", len(r.Leaked)-5)
			break
		}
		fmt.Fprintf(out, "goroutine alive after Close:\n%s\n", s)
	}
	if r.Passed() {
		fmt.Fprintln(out, "\nPASS: no wrong caller, no duplicate POST, no goroutine leaked")
	} else {
		fmt.Fprintln(out, "\nFAIL")
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

var goroutineHeader = regexp.MustCompile(`^goroutine (\d+) `)

// goroutineStacks returns the stacks of every goroutine, by id.
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

func goroutineIDs() map[int]struct{} {
	m := make(map[int]struct{})
	for id := range goroutineStacks() {
		m[id] = struct{}{}
	}
	return m
}
