package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server modes.
const (
	// modeSerial is net/http's server: it reads pipelined requests on a
	// connection but serves them one at a time (like nginx).
	modeSerial = "serial"
	// modeConcurrent is a small raw HTTP/1.1 server that handles the
	// pipelined requests of a connection concurrently and writes the
	// responses strictly in request order (like Node's http server).
	modeConcurrent = "concurrent"
)

// serverConfig describes one test server. It is comparable: the parent
// keeps one child per configuration.
type serverConfig struct {
	Mode  string
	Delay time.Duration // per response, on average
	Body  int           // response body bytes
	// SlowFrac of the responses (chosen at random) wait Slow instead of
	// Delay.
	SlowFrac float64       `json:",omitempty"`
	Slow     time.Duration `json:",omitempty"`
	// Hosts is the number of listeners (all on 127.0.0.1, each a "host" to
	// the clients); 0 means 1.
	Hosts int `json:",omitempty"`
	// Backends, if above 1, is the number of listeners on one port at
	// 127.0.0.1, 127.0.0.2 ...: one host's addresses (the concurrent
	// server only). With Track, the counts name the backend of each
	// request.
	Backends int `json:",omitempty"`
	// TLSCert and TLSKey are PEM files: when set the server speaks TLS. The
	// serial server (net/http's) then offers h2 and http/1.1 by ALPN, the
	// concurrent one http/1.1 only.
	TLSCert, TLSKey string `json:",omitempty"`
	// Track makes the server count requests by the "cell" and "id"
	// query parameters the clients send, so that requests sent twice can be
	// counted server side (GET /_bench/stats?cell=X answers "requests
	// distinct").
	Track bool `json:",omitempty"`
	// Chunked sends the bodies with Transfer-Encoding: chunked, in chunks
	// of chunkSize, as a server does for a body written without a
	// Content-Length (net/http's for one over 2 KiB, Node's res.write,
	// nginx's gzip).
	Chunked bool `json:",omitempty"`
	// Download: the serial server answers smallPath with smallBody bytes
	// and any other path with Body bytes written from one block of at
	// most 1 MiB (a 1 GiB body is never held whole).
	Download bool `json:",omitempty"`
	// The gateway child (modeGateway, gateway.go): a reverse proxy to
	// Backend over the row Transport's transport, C connections to it of
	// depth K, requests bounded by Timeout.
	Transport string        `json:",omitempty"`
	Backend   string        `json:",omitempty"`
	C, K      int           `json:",omitempty"`
	Timeout   time.Duration `json:",omitempty"`
}

// chunkSize is the size of a chunked body's chunks (the last may be
// shorter).
const chunkSize = 16 << 10

// testServer is a running test server.
type testServer struct {
	Addr  string   // host:port on 127.0.0.1 (the first listener)
	Addrs []string // every listener
	close func() error
}

func (s *testServer) Close() error { return s.close() }

// startServer starts a test server in this process on 127.0.0.1 at random
// ports (cfg.Hosts listeners).
func startServer(cfg serverConfig) (*testServer, error) {
	var tlsCfg *tls.Config
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, err
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	if cfg.Mode != modeSerial && cfg.Mode != modeConcurrent {
		return nil, fmt.Errorf("unknown server mode %q (want %s or %s)", cfg.Mode, modeSerial, modeConcurrent)
	}
	if cfg.Download && cfg.Mode != modeSerial {
		return nil, errors.New("the download server is the serial one")
	}
	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	ts := &testServer{}
	if cfg.Backends > 1 {
		if cfg.Mode != modeConcurrent || cfg.Hosts > 1 {
			return nil, errors.New("backends: the concurrent server, one host")
		}
		var err error
		if lns, err = listenBackends(cfg.Backends); err != nil {
			return nil, err
		}
		for _, ln := range lns {
			ts.Addrs = append(ts.Addrs, ln.Addr().String())
		}
	}
	for range max(1, cfg.Hosts) - len(lns) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			closeAll()
			return nil, err
		}
		lns = append(lns, ln)
		ts.Addrs = append(ts.Addrs, ln.Addr().String())
	}
	ts.Addr = ts.Addrs[0]
	var body []byte
	if !cfg.Download {
		body = bytes.Repeat([]byte("x"), cfg.Body)
	}
	plan := newDelayPlan(cfg)
	switch cfg.Mode {
	case modeSerial:
		h := serialHandler(plan, body, cfg.Track, cfg.Chunked)
		if cfg.Download {
			h = downloadHandler(cfg.Body)
		}
		srv := &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 30 * time.Second,
			ErrorLog:          nil,
		}
		if tlsCfg != nil {
			// h2 and http/1.1, so that HTTP/2 clients can be compared
			// with HTTP/1.1 ones against the same server.
			srv.TLSConfig = tlsCfg
			var p http.Protocols
			p.SetHTTP1(true)
			p.SetHTTP2(true)
			srv.Protocols = &p
		}
		for _, ln := range lns {
			if tlsCfg != nil {
				go srv.ServeTLS(ln, "", "")
			} else {
				go srv.Serve(ln)
			}
		}
		ts.close = srv.Close
	case modeConcurrent:
		var servers []*concurrentServer
		var tr *requestTracker // one for all listeners, as the serial server's
		if cfg.Track {
			tr = new(requestTracker)
		}
		for i, ln := range lns {
			if tlsCfg != nil {
				c := tlsCfg.Clone()
				c.NextProtos = []string{"http/1.1"}
				ln = tls.NewListener(ln, c)
			}
			s := newConcurrentServer(ln, plan, body, cfg.Chunked, tr)
			s.backend = i
			servers = append(servers, s)
			go s.serve()
		}
		ts.close = func() error {
			var err error
			for _, s := range servers {
				err = errors.Join(err, s.Close())
			}
			return err
		}
	}
	return ts, nil
}

// listenBackends listens on one port at 127.0.0.1 to 127.0.0.n (Linux
// routes all of 127.0.0.0/8 to the loopback interface), the port the first
// listener got; a port another program holds on one of the others is given
// up for another.
func listenBackends(n int) ([]net.Listener, error) {
	var err error
	for range 10 {
		var lns []net.Listener
		for i := range n {
			addr := fmt.Sprintf("127.0.0.%d:0", i+1)
			if i > 0 {
				addr = fmt.Sprintf("127.0.0.%d:%d", i+1, lns[0].Addr().(*net.TCPAddr).Port)
			}
			var ln net.Listener
			if ln, err = net.Listen("tcp", addr); err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if err == nil {
			return lns, nil
		}
		for _, ln := range lns {
			ln.Close()
		}
	}
	return nil, err
}

// delayPlan draws each response's delay: Delay on average (see delayer),
// or Slow for a fraction SlowFrac of the responses.
type delayPlan struct {
	d        delayer
	on       bool
	slowFrac float64
	slow     time.Duration
}

func newDelayPlan(cfg serverConfig) delayPlan {
	return delayPlan{d: newDelayer(cfg.Delay), on: cfg.Delay > 0 || cfg.SlowFrac > 0, slowFrac: cfg.SlowFrac, slow: cfg.Slow}
}

// next returns how long to wait before a response (0: answer at once).
func (p delayPlan) next() time.Duration {
	if !p.on {
		return 0
	}
	if p.slowFrac > 0 && rand.Float64() < p.slowFrac {
		return p.slow
	}
	if p.d.short == 0 && p.d.long == 0 {
		return 0
	}
	return p.d.next()
}

// requestTracker counts requests per benchmark cell and id, for the
// duplicate-request rate (a request sent twice by a client's retry or
// hedging arrives twice with the same id), and per backend (the listener
// of a Backends server that received it).
type requestTracker struct {
	mu    sync.Mutex
	cells map[string]*cellCount
}

type cellCount struct {
	ids      map[string]int32
	backends []int
}

func (t *requestTracker) add(cell, id string, backend int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.cells[cell]
	if c == nil {
		if t.cells == nil {
			t.cells = make(map[string]*cellCount)
		}
		c = &cellCount{ids: make(map[string]int32)}
		t.cells[cell] = c
	}
	c.ids[id]++
	for len(c.backends) <= backend {
		c.backends = append(c.backends, 0)
	}
	c.backends[backend]++
}

// serve is a tracking server's rule for a request with the given path and
// query, received by the given backend: the stats path answers the counts
// of its cell (the answer's body, ok true): requests, distinct ids, then
// the requests of each backend; any other request is counted by its cell
// and id.
func (t *requestTracker) serve(path, rawQuery string, backend int) (stats string, ok bool) {
	q, _ := url.ParseQuery(rawQuery)
	if path == statsPath {
		n, d, per := t.take(q.Get("cell"))
		var b strings.Builder
		fmt.Fprintf(&b, "%d %d", n, d)
		for _, k := range per {
			fmt.Fprintf(&b, " %d", k)
		}
		b.WriteByte('\n')
		return b.String(), true
	}
	if cell := q.Get("cell"); cell != "" {
		t.add(cell, q.Get("id"), backend)
	}
	return "", false
}

// take returns the cell's counts (all requests, distinct ids, requests
// per backend) and forgets the cell.
func (t *requestTracker) take(cell string) (requests, distinct int, backends []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.cells[cell]
	if c == nil {
		return 0, 0, nil
	}
	for _, n := range c.ids {
		requests += int(n)
		distinct++
	}
	delete(t.cells, cell)
	return requests, distinct, c.backends
}

// A delayer makes responses ready a configured delay after their request,
// on average. Go's timers fire on a grid of about a millisecond when the
// process is otherwise idle (on the 2-core VM this was built on, a 9 ms sleep
// took 9.3 ms, a 9.3 ms sleep 10.3 ms and a 10 ms sleep 10.4 ms), so no
// single duration gives the delay asked for. The delayer measures the real
// length of timers around the delay once, then mixes the two durations whose
// real lengths bracket the delay, in the proportion that makes the mean
// real delay the configured one, as the ideal throughput assumes.
type delayer struct {
	short, long time.Duration
	pLong       float64 // probability of the long duration
}

func newDelayer(delay time.Duration) delayer {
	if delay <= 0 {
		return delayer{}
	}
	const step, span, samples = 100 * time.Microsecond, 2 * time.Millisecond, 8
	var cands []time.Duration
	for c := max(delay-span, step); c <= delay; c += step {
		cands = append(cands, c)
	}
	// Measure all candidates concurrently, as the server's timers run.
	real := make([]time.Duration, len(cands))
	var mu sync.Mutex
	for range 3 {
		var wg sync.WaitGroup
		for i, c := range cands {
			for range samples {
				wg.Add(1)
				go func() {
					defer wg.Done()
					t := time.Now()
					time.Sleep(c)
					el := time.Since(t)
					mu.Lock()
					real[i] += el
					mu.Unlock()
				}()
			}
		}
		wg.Wait()
	}
	for i := range real {
		real[i] /= 3 * samples
	}
	d := delayer{short: cands[0], long: delay}
	shortReal, longReal := real[0], real[len(real)-1]
	for i, c := range cands {
		if real[i] <= delay && real[i] >= shortReal {
			d.short, shortReal = c, real[i]
		}
	}
	for i := len(cands) - 1; i >= 0; i-- {
		if real[i] >= delay && real[i] <= longReal {
			d.long, longReal = cands[i], real[i]
		}
	}
	switch {
	case shortReal > delay: // every timer is late: take the shortest
		d.long, d.pLong = d.short, 0
	case longReal < delay: // none reaches the delay: take the longest
		d.short, d.pLong = d.long, 1
	case longReal > shortReal:
		d.pLong = float64(delay-shortReal) / float64(longReal-shortReal)
	}
	return d
}

// next returns the timer duration for one response.
func (d delayer) next() time.Duration {
	if d.pLong > 0 && rand.Float64() < d.pLong {
		return d.long
	}
	return d.short
}

// statsPath answers a tracking server's counts for one cell.
const statsPath = "/_bench/stats"

func serialHandler(plan delayPlan, body []byte, track, chunked bool) http.Handler {
	clen := strconv.Itoa(len(body))
	var tr requestTracker
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == streamPath {
			serveStream(w, r)
			return
		}
		if track {
			if stats, ok := tr.serve(r.URL.Path, r.URL.RawQuery, 0); ok {
				io.WriteString(w, stats)
				return
			}
		}
		if d := plan.next(); d > 0 {
			time.Sleep(d)
		}
		h := w.Header()
		if !chunked {
			h["Content-Length"] = []string{clen}
		}
		h["Content-Type"] = []string{"text/plain"}
		w.WriteHeader(http.StatusOK)
		if !chunked {
			w.Write(body)
			return
		}
		// Each write of chunkSize or more goes out as one chunk (below
		// 2 KiB in all, net/http sends a Content-Length instead).
		for b := body; len(b) > 0; {
			n := min(len(b), chunkSize)
			w.Write(b[:n])
			b = b[n:]
		}
	})
}

// streamLine is line n of a stream's body.
func streamLine(n int) []byte { return fmt.Appendf(nil, "{\"n\":%d}\n", n) }

// serveStream answers the stream (the serial server): a line at once, then
// one every streamInterval until the client goes away.
func serveStream(w http.ResponseWriter, r *http.Request) {
	w.Header()["Content-Type"] = []string{"application/x-ndjson"}
	w.WriteHeader(http.StatusOK)
	f := w.(http.Flusher)
	tick := time.NewTicker(streamInterval)
	defer tick.Stop()
	for n := 0; ; n++ {
		if _, err := w.Write(streamLine(n)); err != nil {
			return
		}
		f.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

// downloadHandler is the download suite's server (serverConfig.Download):
// smallBody bytes at smallPath, size bytes anywhere else.
func downloadHandler(size int) http.Handler {
	block := bytes.Repeat([]byte("x"), max(smallBody, min(size, 1<<20)))
	small, clen := strconv.Itoa(smallBody), strconv.Itoa(size)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Type"] = []string{"application/octet-stream"}
		if r.URL.Path == smallPath {
			h["Content-Length"] = []string{small}
			w.Write(block[:smallBody])
			return
		}
		h["Content-Length"] = []string{clen}
		for left := size; left > 0; {
			n, err := w.Write(block[:min(left, len(block))])
			if err != nil {
				return
			}
			left -= n
		}
	})
}

// concurrentServer is a minimal HTTP/1.1 server for pipelining benchmarks.
// Each connection has a reader, which parses requests and starts each one's
// handling (a timer of the configured delay), and a writer, which writes the
// responses in request order as they become ready.
type concurrentServer struct {
	ln   net.Listener
	plan delayPlan
	resp []byte          // keep-alive response
	last []byte          // response to a request with "Connection: close"
	tr   *requestTracker // counts requests by cell and id, if set
	// backend is the listener's place among a Backends server's (0:
	// 127.0.0.1), for tr.
	backend int

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

func newConcurrentServer(ln net.Listener, plan delayPlan, body []byte, chunked bool, tr *requestTracker) *concurrentServer {
	head := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n", len(body))
	if chunked {
		head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n"
		body = chunk(body)
	}
	resp := append([]byte(head+"\r\n"), body...)
	last := append([]byte(head+"Connection: close\r\n\r\n"), body...)
	return &concurrentServer{ln: ln, plan: plan, resp: resp, last: last, tr: tr, conns: make(map[net.Conn]struct{})}
}

func (s *concurrentServer) serve() {
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
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Close stops the listener and closes every connection.
func (s *concurrentServer) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.done = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// slot is one pipelined request's response, ready when done is closed.
type slot struct {
	done   chan struct{}
	resp   []byte
	last   bool // close the connection after this response
	stream bool // the stream: written until the client closes
}

func (s *concurrentServer) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	queue := make(chan *slot, 4096)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		s.writeLoop(c, queue)
	}()
	br := bufio.NewReaderSize(c, 8<<10)
	for {
		closeAfter, stream, target, err := readRequest(br, s.tr != nil)
		if err != nil {
			// EOF or a malformed request: answer nothing more and drop
			// the connection once the earlier responses are out.
			break
		}
		sl := &slot{done: make(chan struct{}), resp: s.resp, stream: stream}
		if closeAfter {
			sl.resp, sl.last = s.last, true
		}
		var stats bool
		if s.tr != nil {
			var resp []byte
			if resp, stats = s.track(target); stats {
				sl.resp = resp
			}
		}
		if d := s.plan.next(); d > 0 && !stats && !stream {
			time.AfterFunc(d, func() { close(sl.done) })
		} else {
			close(sl.done)
		}
		queue <- sl
		if closeAfter {
			break
		}
	}
	close(queue)
	<-writerDone
}

func (s *concurrentServer) writeLoop(c net.Conn, queue chan *slot) {
	bw := bufio.NewWriterSize(c, 16<<10)
	for {
		var sl *slot
		var ok bool
		select {
		case sl, ok = <-queue:
		default:
			if bw.Flush() != nil {
				drain(queue)
				return
			}
			sl, ok = <-queue
		}
		if !ok {
			bw.Flush()
			return
		}
		select {
		case <-sl.done:
		default:
			if bw.Flush() != nil {
				drain(queue)
				return
			}
			<-sl.done
		}
		if sl.stream {
			writeStream(bw) // until the client closes: the connection ends with it
			drain(queue)
			return
		}
		if _, err := bw.Write(sl.resp); err != nil {
			drain(queue)
			return
		}
		if sl.last {
			bw.Flush()
			drain(queue)
			return
		}
	}
}

// writeStream writes the stream's response (the concurrent server): chunked
// (RFC 9112 §7.1), a line at once and then one every streamInterval, each
// flushed, until a write fails.
func writeStream(bw *bufio.Writer) {
	bw.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/x-ndjson\r\n\r\n")
	tick := time.NewTicker(streamInterval)
	defer tick.Stop()
	for n := 0; ; n++ {
		line := streamLine(n)
		fmt.Fprintf(bw, "%x\r\n%s\r\n", len(line), line)
		if bw.Flush() != nil {
			return
		}
		<-tick.C
	}
}

// chunk returns body in the chunked coding (RFC 9112 §7.1), in chunks of
// chunkSize, with its last chunk and no trailer.
func chunk(body []byte) []byte {
	var b []byte
	for len(body) > 0 {
		n := min(len(body), chunkSize)
		b = fmt.Appendf(b, "%x\r\n", n)
		b = append(b, body[:n]...)
		b = append(b, "\r\n"...)
		body = body[n:]
	}
	return append(b, "0\r\n\r\n"...)
}

// drain empties queue so that the reader never blocks on it.
func drain(queue chan *slot) {
	for range queue {
	}
}

var errBadRequest = errors.New("bad request")

// readRequest reads one request (request line, header fields, and a body of
// Content-Length bytes) and reports whether it asked to close the connection
// and whether it is the stream (GET streamPath).
func readRequest(br *bufio.Reader, wantTarget bool) (closeAfter, stream bool, target string, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if err == io.EOF && len(line) == 0 {
			return false, false, "", io.EOF
		}
		return false, false, "", errBadRequest
	}
	stream = bytes.HasPrefix(line, []byte("GET "+streamPath+" "))
	if bytes.HasSuffix(line, []byte(" HTTP/1.0\r\n")) {
		closeAfter = true
	}
	if wantTarget {
		if f := strings.Fields(string(line)); len(f) == 3 {
			target = f[1]
		}
	}
	var clen int64
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return false, false, "", errBadRequest
		}
		if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return false, false, "", errBadRequest
		}
		name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			clen, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil || clen < 0 {
				return false, false, "", errBadRequest
			}
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				closeAfter = true
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return false, false, "", errBadRequest // not needed by the benchmarks
		}
	}
	if clen > 0 {
		if _, err := br.Discard(int(clen)); err != nil {
			return false, false, "", errBadRequest
		}
	}
	return closeAfter, stream, target, nil
}

// track applies the tracking rule (requestTracker.serve) to a request
// target, returning the whole response for the stats path.
func (s *concurrentServer) track(target string) (stats []byte, ok bool) {
	path, query, _ := strings.Cut(target, "?")
	body, ok := s.tr.serve(path, query, s.backend)
	if !ok {
		return nil, false
	}
	return fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n%s", len(body), body), true
}

// serveChild runs a test server for a parent process: it prints the
// address on stdout and serves until stdin is closed (the parent exited or
// is done with it).
func serveChild(cfg serverConfig) error {
	if cfg.Mode == modeGateway {
		return serveGateway(cfg)
	}
	srv, err := startServer(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "LISTEN %s\n", strings.Join(srv.Addrs, ","))
	io.Copy(io.Discard, os.Stdin)
	return srv.Close()
}

// encodeServerConfig and decodeServerConfig pass a configuration to the
// child process (flag -serve-config).
func encodeServerConfig(cfg serverConfig) string {
	b, _ := json.Marshal(cfg)
	return string(b)
}

func decodeServerConfig(s string) (serverConfig, error) {
	var cfg serverConfig
	if err := json.Unmarshal([]byte(s), &cfg); err != nil {
		return cfg, fmt.Errorf("bad -serve-config: %v", err)
	}
	return cfg, nil
}
