package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// The download suite: one caller downloads large bodies in a loop, alone
// and beside downloadBeside other callers' small GETs to the same host
// (net/http's server). What it measures is the stream: the download's
// MB/s and the client's CPU per MB, as each transport hands a body to a
// caller that reads it with Read into a buffer of its own (io.Copy's 32
// KiB), net/http's way of reading a body.
const (
	downloadReadBuf = 32 << 10
	downloadBeside  = 10
	// downloadPause is each load caller's pause between its GETs: the
	// load is a rate (about downloadBeside/downloadPause requests per
	// second at most), the same for every client, not a race for the CPU
	// against the download.
	downloadPause = time.Millisecond
	smallPath     = "/small"
	smallBody     = 128
)

// downloadSizes are the download suite's bodies.
var downloadSizes = []int{1 << 20, 64 << 20, 1 << 30}

// downloader is a client that can read a body with Read into the caller's
// buffer, reporting the bytes of each read.
type downloader interface {
	// download GETs path and reads the whole body with Read into buf,
	// calling got with each read's count (if got is not nil).
	download(ctx context.Context, path string, buf []byte, got func(int)) error
}

func (c *httpClient) download(ctx context.Context, path string, buf []byte, got func(int)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.targets.base()+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %s", resp.Status)
	}
	return readAll(resp.Body, buf, got)
}

func (c *fastClient) download(ctx context.Context, path string, buf []byte, got func(int)) error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(c.targets.base() + path)
	if err := c.do(req, resp); err != nil {
		return err
	}
	if sc := resp.StatusCode(); sc/100 != 2 {
		return fmt.Errorf("status %d", sc)
	}
	r := resp.BodyStream()
	if r == nil { // read whole by fasthttp
		if got != nil {
			got(len(resp.Body()))
		}
		return nil
	}
	// fasthttp takes no context: a read that stops early closes the
	// stream (and its connection) with the context's error.
	err := readAll(ctxReader{ctx, r}, buf, got)
	if rc, ok := r.(fasthttp.ReadCloserWithError); ok && err != nil {
		rc.CloseWithError(err)
	}
	return err
}

// ctxReader fails its reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// readAll reads r to its end with Read into buf (never through a WriteTo
// of r's), reporting each read to got.
func readAll(r io.Reader, buf []byte, got func(int)) error {
	for {
		n, err := r.Read(buf)
		if got != nil && n > 0 {
			got(n)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// runDownloadCell measures one client in a download scenario: one caller
// downloads sc.Body bytes in a loop while sc.Beside callers each GET
// smallPath, read it and pause downloadPause, in a loop. After the
// warm-up (o.warmup, and at least one small GET per load caller), the
// download's bytes read within the window (a download may span it) give
// MB/s, and the process CPU over the window per MB gives CPU/MB;
// Requests are the downloads finished within it, and the load's requests
// and latencies are counted apart.
func runDownloadCell(sc scenario, name string, base clientConfig, o *options) result {
	r := result{Scenario: sc, Client: name}
	dc := newDialCounter()
	cfg := base
	cfg.C, cfg.K, cfg.Timeout, cfg.Dialer = sc.C, sc.K, o.timeout, dc
	runtime.GC()
	cl, err := newClient(name, cfg)
	if err != nil {
		r.Skipped = err.Error()
		return r
	}
	defer cl.Close()
	dl, ok := cl.(downloader)
	if !ok {
		r.Skipped = "cannot read a body in the caller's buffer"
		return r
	}
	duration := o.duration
	if sc.duration > 0 && !o.durationSet {
		duration = sc.duration / time.Duration(o.rounds)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg        sync.WaitGroup
		stop      atomic.Bool
		inWindow  atomic.Bool
		bytesRead atomic.Int64
		nerr      atomic.Int64
		errOnce   sync.Once
		firstErr  string
		warmed    atomic.Int64
		mu        sync.Mutex
		loadLat   []time.Duration
		dlLat     []time.Duration
	)
	fail := func(err error) {
		if stop.Load() || !inWindow.Load() {
			return // cancelled at the end, or in the warm-up
		}
		nerr.Add(1)
		errOnce.Do(func() { firstErr = err.Error() })
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, downloadReadBuf)
		got := func(n int) { bytesRead.Add(int64(n)) }
		for !stop.Load() {
			t0 := time.Now()
			in := inWindow.Load()
			if err := dl.download(ctx, "/", buf, got); err != nil {
				fail(err)
				continue
			}
			if in && inWindow.Load() {
				mu.Lock()
				dlLat = append(dlLat, time.Since(t0))
				mu.Unlock()
			}
		}
	}()
	for range sc.Beside {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4<<10)
			var lat []time.Duration
			first := true
			for !stop.Load() {
				t0 := time.Now()
				err := dl.download(ctx, smallPath, buf, nil)
				el := time.Since(t0)
				if first {
					first = false
					warmed.Add(1)
				}
				if err != nil {
					fail(err)
				} else if inWindow.Load() {
					lat = append(lat, el)
				}
				time.Sleep(downloadPause)
			}
			mu.Lock()
			loadLat = append(loadLat, lat...)
			mu.Unlock()
		}()
	}
	time.Sleep(o.warmup)
	for limit := time.Now().Add(o.timeout); warmed.Load() < int64(sc.Beside) && time.Now().Before(limit); {
		time.Sleep(5 * time.Millisecond)
	}
	dc.reset()
	inWindow.Store(true)
	b0, cpu0, t0 := bytesRead.Load(), cpuTime(), time.Now()
	end := t0.Add(duration)
	maxOpen := 0
	_, hasStats := cl.PoolStats()
	for now := time.Now(); now.Before(end); now = time.Now() {
		if hasStats {
			ps, _ := cl.PoolStats()
			maxOpen = max(maxOpen, ps.Open)
		}
		time.Sleep(min(5*time.Millisecond, end.Sub(now)))
	}
	b1, cpu, elapsed := bytesRead.Load(), cpuTime()-cpu0, time.Since(t0)
	inWindow.Store(false)
	r.Dials = dc.dials.Load()
	if !hasStats {
		maxOpen = int(dc.maxOpen.Load())
	}
	r.Errors = nerr.Load()
	stop.Store(true)
	cancel()
	wg.Wait()
	slices.Sort(dlLat)
	slices.Sort(loadLat)
	r.FirstError = firstErr
	r.Seconds = elapsed.Seconds()
	r.Bytes = b1 - b0
	r.Requests = int64(len(dlLat))
	r.LoadRequests = int64(len(loadLat))
	r.lat, r.loadLat, r.cpu = dlLat, loadLat, cpu
	r.finish()
	r.MaxOpen = maxOpen
	return r
}

// downloadTable lays out a download scenario (makeTable): the download's
// MB/s and the client's CPU per MB, the downloads finished within the
// window and their median time, the load beside it (its rate and p99),
// and the ratios of each pipelined row to its peers in MB/s and CPU per
// MB (ratiosOf, in requests, leaves these tables out).
func downloadTable(sc scenario, rows []result) table {
	t := table{title: sc.String()}
	t.cols = []string{"client", "MB/s", "CPU/MB", "downloads", "p50"}
	if sc.Beside > 0 {
		t.cols = append(t.cols, "load req/s", "load p99")
	}
	t.cols = append(t.cols, "errors", "max conns", "dials")
	for _, r := range rows {
		if r.Skipped != "" {
			t.cells = append(t.cells, append([]string{r.Client}, slices.Repeat([]string{"-"}, len(t.cols)-1)...))
			t.notes = append(t.notes, fmt.Sprintf("%s skipped: %s", r.Client, r.Skipped))
			continue
		}
		p50 := "-"
		if r.Requests > 0 {
			p50 = fmtMs(r.P50Ms)
		}
		vals := []string{r.Client, fmt.Sprintf("%.0f", r.MBPerSec), fmtMs(r.CPUPerMB / 1000), strconv.FormatInt(r.Requests, 10), p50}
		if sc.Beside > 0 {
			vals = append(vals, fmt.Sprintf("%.0f", r.LoadPerSec), fmtMs(r.LoadP99Ms))
		}
		vals = append(vals, strconv.FormatInt(r.Errors, 10), strconv.Itoa(r.MaxOpen), strconv.FormatInt(r.Dials, 10))
		t.cells = append(t.cells, vals)
		if r.FirstError != "" {
			t.notes = append(t.notes, fmt.Sprintf("%s first error: %s", r.Client, r.FirstError))
		}
	}
	ok := func(r result) bool { return r.Skipped == "" && r.Bytes > 0 }
	for _, p := range rows {
		if !isPipelined(p.Client) || !ok(p) {
			continue
		}
		var parts []string
		for _, q := range rows {
			if isPipelined(q.Client) || !ok(q) {
				continue
			}
			part := fmt.Sprintf("/ %s: MB/s %.2f, CPU/MB %.2f", q.Client, p.MBPerSec/q.MBPerSec, p.CPUPerMB/q.CPUPerMB)
			if sc.Beside > 0 && q.LoadP99Ms > 0 {
				part += fmt.Sprintf(", load req/s %.2f, load p99 %.2f", p.LoadPerSec/q.LoadPerSec, p.LoadP99Ms/q.LoadP99Ms)
			}
			parts = append(parts, part)
		}
		if len(parts) > 0 {
			t.ratios = append(t.ratios, p.Client+" "+strings.Join(parts, "; "))
		}
	}
	return t
}
