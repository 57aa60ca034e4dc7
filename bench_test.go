package pipelined

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchServer is a minimal pipelining server for client benchmarks: it
// answers each request with a fixed 128-byte body, writing responses in
// batches as requests arrive.
func benchServer(b *testing.B) string {
	return benchServerResp(b, benchResponse(128, false))
}

// benchResponse is a response with a body of n bytes, with a
// Content-Length or chunked in 16 KiB chunks.
func benchResponse(n int, chunked bool) []byte {
	body := make([]byte, n)
	if !chunked {
		return append([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "+strconv.Itoa(n)+"\r\n\r\n"), body...)
	}
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
	for len(body) > 0 {
		c := min(len(body), 16<<10)
		resp = fmt.Appendf(resp, "%x\r\n", c)
		resp = append(append(resp, body[:c]...), "\r\n"...)
		body = body[c:]
	}
	return append(resp, "0\r\n\r\n"...)
}

// benchServerResp is benchServer answering resp to every request.
func benchServerResp(b *testing.B, resp []byte) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReaderSize(c, 64<<10)
				bw := bufio.NewWriterSize(c, 64<<10)
				for {
					// Skip one request head and its body (Content-Length
					// framing only).
					n := 0
					for {
						line, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(line) <= 2 {
							break
						}
						if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
							n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
						}
					}
					if _, err := br.Discard(n); err != nil {
						return
					}
					bw.Write(resp)
					if br.Buffered() == 0 {
						if bw.Flush() != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/"
}

// BenchmarkClientGet measures GETs through http.Client with 50 parallel
// callers, 5 connections and depth 10 (the project's saturation cell).
func BenchmarkClientGet(b *testing.B) {
	tr := NewTransport(TransportOptions{MaxConnsPerHost: 5, PipelineDepth: 10})
	defer tr.Close()
	benchGets(b, &http.Client{Transport: tr})
}

// BenchmarkClientGetDirect is BenchmarkClientGet with as many callers as
// connections (5): nothing to pipeline, every caller reads its own answer
// (a direct read, conn_direct.go). Compare with fasthttp.HostClient's shape
// (the benchmarks program's p5 suite).
func BenchmarkClientGetDirect(b *testing.B) {
	tr := NewTransport(TransportOptions{MaxConnsPerHost: 5, PipelineDepth: 10})
	defer tr.Close()
	benchGetsN(b, &http.Client{Transport: tr}, 5)
}

// BenchmarkClientGetDirectContext is BenchmarkClientGetDirect with
// requests that can be cancelled: all with one context (shared, as a
// service's workers often run under one), or each with its own, cancelled
// once its body is read (own, as with a Client.Timeout). A direct read
// watches its request's context (conn_direct.go, startDirect).
func BenchmarkClientGetDirectContext(b *testing.B) {
	for _, name := range []string{"shared", "own"} {
		b.Run(name, func(b *testing.B) {
			tr := NewTransport(TransportOptions{MaxConnsPerHost: 5, PipelineDepth: 10})
			defer tr.Close()
			client := &http.Client{Transport: tr}
			url := benchServer(b)
			base, cancelBase := context.WithCancel(context.Background())
			defer cancelBase()
			benchCallers(b, 5, func() func() error {
				return func() error {
					ctx, cancel := base, context.CancelFunc(func() {})
					if name == "own" {
						ctx, cancel = context.WithCancel(base)
					}
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
					resp, err := client.Do(req)
					if err != nil {
						return err
					}
					io.Copy(io.Discard, resp.Body)
					return resp.Body.Close()
				}
			})
		})
	}
}

// BenchmarkMinimalClientGet is the floor under BenchmarkClientGetDirect:
// the same 5 callers and server, each caller with a connection of its own
// and nothing but one write of the request and a textproto read of the
// answer, about what the leanest client (fasthttp.HostClient) does. What
// BenchmarkClientGetDirect spends above it is the net/http API, the pool
// and the building of an *http.Response; its look at the socket before
// each request takes the place of the read that would find the socket
// empty (conn_direct.go, writeHeld), so both make the same system calls.
func BenchmarkMinimalClientGet(b *testing.B) {
	url := benchServer(b)
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
	const head = "GET / HTTP/1.1\r\nHost: x\r\nUser-Agent: Go-http-client/1.1\r\nAccept-Encoding: gzip\r\n\r\n"
	benchCallers(b, 5, func() func() error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return func() error { return err }
		}
		b.Cleanup(func() { c.Close() })
		br := bufio.NewReader(c)
		tp := textproto.NewReader(br)
		return func() error {
			if _, err := io.WriteString(c, head); err != nil {
				return err
			}
			if line, err := tp.ReadLine(); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200 ") {
				return fmt.Errorf("status line %q: %v", line, err)
			}
			h, err := tp.ReadMIMEHeader()
			if err != nil {
				return err
			}
			n, err := strconv.Atoi(h.Get("Content-Length"))
			if err != nil {
				return err
			}
			_, err = br.Discard(n)
			return err
		}
	})
}

// BenchmarkClientGetObserver is BenchmarkClientGet with an Observer whose
// every hook is set (and counts): what watching the transport costs.
// BenchmarkClientGet itself runs with no Observer: compare the two, and
// BenchmarkClientGet with the engine before the Observer existed.
func BenchmarkClientGetObserver(b *testing.B) {
	var n atomic.Int64
	req := func(RequestEvent) { n.Add(1) }
	conn := func(ConnEvent) { n.Add(1) }
	obs := &Observer{
		RequestQueued: req, RequestAssigned: req, RequestWritten: req, RequestHeaders: req, RequestDone: req,
		ConnOpened: conn, ConnActive: conn, ConnIdle: conn, ConnClosed: conn,
	}
	tr := NewTransport(TransportOptions{MaxConnsPerHost: 5, PipelineDepth: 10, Observer: obs})
	defer tr.Close()
	benchGets(b, &http.Client{Transport: tr})
}

// BenchmarkClientGetTimeout is BenchmarkClientGet through a Client with a
// Timeout, as most programs use it: every request then has a cancellable
// context, and http.Client adds a timer goroutine per request for any
// RoundTripper other than *http.Transport.
func BenchmarkClientGetTimeout(b *testing.B) {
	tr := NewTransport(TransportOptions{MaxConnsPerHost: 5, PipelineDepth: 10})
	defer tr.Close()
	benchGets(b, &http.Client{Transport: tr, Timeout: time.Minute})
}

// BenchmarkNetHTTPClientGet is the same through net/http's Transport, for
// comparison in the same run.
func BenchmarkNetHTTPClientGet(b *testing.B) {
	tr := &http.Transport{MaxConnsPerHost: 5, MaxIdleConnsPerHost: 5}
	defer tr.CloseIdleConnections()
	benchGets(b, &http.Client{Transport: tr})
}

// BenchmarkClientUpload sends POSTs with 1 MiB in-memory bodies (as
// http.NewRequest makes them from a bytes.Reader) from 5 callers over 5
// connections to an in-process net/http server, through pipelined and
// through net/http's Transport. The benchmarks program's upload suite runs
// the peers too, with the server in a process of its own.
func BenchmarkClientUpload(b *testing.B) {
	payload := make([]byte, 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	for _, name := range []string{"pipelined", "net/http"} {
		b.Run(name, func(b *testing.B) {
			client := &http.Client{Transport: benchTransport(b, name, 5, 0)}
			b.SetBytes(int64(len(payload)))
			benchCallers(b, 5, func() func() error {
				return func() error {
					req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(payload))
					resp, err := client.Do(req)
					if err != nil {
						return err
					}
					io.Copy(io.Discard, resp.Body)
					return resp.Body.Close()
				}
			})
		})
	}
}

// BenchmarkClientPost is the benchmarks program's post suite in process:
// 50 callers sending 1 KiB POSTs over 5 connections, none pipelined, so
// that 45 wait for a connection at any time (the pool's queue and its
// hand-offs).
func BenchmarkClientPost(b *testing.B) {
	tr := NewTransport(TransportOptions{MaxConnsPerHost: 5, PipelineDepth: 10})
	defer tr.Close()
	client := &http.Client{Transport: tr}
	url := benchServer(b)
	payload := make([]byte, 1<<10)
	benchCallers(b, 50, func() func() error {
		return func() error {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(payload))
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		}
	})
}

// benchTransport returns the transport named "pipelined" (with depth, if
// not 0) or "net/http", with conns connections per host, closed when b
// ends.
func benchTransport(b *testing.B, name string, conns, depth int) http.RoundTripper {
	if name == "pipelined" {
		tr := NewTransport(TransportOptions{MaxConnsPerHost: conns, PipelineDepth: depth})
		b.Cleanup(func() { tr.Close() })
		return tr
	}
	tr := &http.Transport{MaxConnsPerHost: conns}
	b.Cleanup(tr.CloseIdleConnections)
	return tr
}

// benchGets runs GETs of benchServer through client from 50 goroutines.
func benchGets(b *testing.B, client *http.Client) {
	benchGetsN(b, client, 50)
}

// BenchmarkClientGetBodies is BenchmarkClientGet (50 callers) and
// BenchmarkClientGetDirect (5) with larger bodies, with a Content-Length
// and chunked (16 KiB chunks), for pipelined and net/http (5 connections
// each); bytes/s are the bodies'.
func BenchmarkClientGetBodies(b *testing.B) {
	for _, callers := range []int{5, 50} {
		for _, size := range []int{4 << 10, 16 << 10, 64 << 10, 256 << 10} {
			for _, chunked := range []bool{false, true} {
				for _, client := range []string{"pipelined", "net-http"} {
					benchGetBody(b, callers, size, chunked, client)
				}
			}
		}
	}
}

func benchGetBody(b *testing.B, callers, size int, chunked bool, client string) {
	b.Run(fmt.Sprintf("P=%d/%dKiB/chunked=%v/%s", callers, size>>10, chunked, client), func(b *testing.B) {
		var rt http.RoundTripper
		if client == "pipelined" {
			tr := NewTransport(TransportOptions{MaxConnsPerHost: 5, PipelineDepth: 10})
			defer tr.Close()
			rt = tr
		} else {
			tr := &http.Transport{MaxConnsPerHost: 5, MaxIdleConnsPerHost: 5}
			defer tr.CloseIdleConnections()
			rt = tr
		}
		b.SetBytes(int64(size))
		benchGetsFrom(b, &http.Client{Transport: rt}, callers, benchServerResp(b, benchResponse(size, chunked)))
	})
}

// BenchmarkClientDownload downloads a large body per op (a stream:
// longer than maxBufferedBody), alone, reading it with Read into a buffer
// of 32 KiB (io.Copy's: through the body's 64 KiB buffer) or 256 KiB
// (straight from the socket), through pipelined and net/http; bytes/s are
// the body's. The server runs in the process (cpu-ns/op counts it too);
// the benchmarks program's download suite measures the client alone.
func BenchmarkClientDownload(b *testing.B) {
	const size = 64 << 20
	for _, read := range []int{32 << 10, 256 << 10} {
		for _, client := range []string{"pipelined", "net-http"} {
			b.Run(fmt.Sprintf("%dMiB/read=%dKiB/%s", size>>20, read>>10, client), func(b *testing.B) {
				rt := benchTransport(b, client, 1, 0)
				url := benchDownloadServer(b, size)
				b.SetBytes(int64(size))
				buf := make([]byte, read)
				benchCallers(b, 1, func() func() error {
					req, _ := http.NewRequest("GET", url, nil)
					return func() error {
						resp, err := rt.RoundTrip(req)
						if err != nil {
							return err
						}
						defer resp.Body.Close()
						var n int
						for {
							m, err := resp.Body.Read(buf)
							n += m
							if err == io.EOF {
								break
							}
							if err != nil {
								return err
							}
						}
						if n != size {
							return fmt.Errorf("read %d bytes, want %d", n, size)
						}
						return nil
					}
				})
			})
		}
	}
}

// benchDownloadServer answers every request with a body of size bytes,
// written from one 1 MiB block.
func benchDownloadServer(b *testing.B, size int) string {
	b.Helper()
	block := make([]byte, 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for left := size; left > 0; left -= len(block) {
			if _, err := w.Write(block[:min(left, len(block))]); err != nil {
				return
			}
		}
	}))
	b.Cleanup(srv.Close)
	return srv.URL + "/"
}

// benchGetsN runs b.N GETs of benchServer through client from callers
// goroutines.
func benchGetsN(b *testing.B, client *http.Client, callers int) {
	benchGetsFrom(b, client, callers, benchServer(b))
}

// benchGetsFrom runs b.N GETs of url through client from callers
// goroutines, reading each body whole.
func benchGetsFrom(b *testing.B, client *http.Client, callers int, url string) {
	benchCallers(b, callers, func() func() error {
		req, _ := http.NewRequest("GET", url, nil)
		return func() error {
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		}
	})
}

// benchCallers runs b.N requests from callers goroutines, each with the
// request function newCaller returns for it, and reports the process's
// CPU per request.
func benchCallers(b *testing.B, callers int, newCaller func() func() error) {
	dos := make([]func() error, callers)
	for i := range dos {
		dos[i] = newCaller()
	}
	b.ReportAllocs()
	b.ResetTimer()
	// The process's CPU per request, server included (it runs here):
	// holds better than ns/op when other work shares the machine.
	cpu0 := processCPU()
	defer func() {
		if cpu := processCPU() - cpu0; cpu > 0 {
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for _, do := range dos {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := do(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkInFlightMemory reports the memory (heap and stacks, caller
// goroutines included) per request in flight: b.N requests wait at once
// for a server that answers only when all have arrived or a deadline
// passes. With MaxConnsPerHost 8 for both transports, most requests wait
// for a connection (net/http) or a place in a pipeline (pipelined).
// heapB/inflight is the heap part alone: the callers' stacks are 4 KiB
// each with either transport. Run it with -benchtime 10000x: with fewer
// requests the server's and the pools' fixed costs blur the figure.
func BenchmarkInFlightMemory(b *testing.B) {
	for _, name := range []string{"pipelined", "net/http"} {
		b.Run(name, func(b *testing.B) {
			rt := benchTransport(b, name, 8, 4)
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				<-release
			}))
			defer srv.Close()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var wg sync.WaitGroup
			var started atomic.Int64
			for range b.N {
				wg.Add(1)
				go func() {
					defer wg.Done()
					started.Add(1)
					req, _ := http.NewRequest("GET", srv.URL, nil)
					if resp, err := rt.RoundTrip(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}()
			}
			for started.Load() < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // let them reach their waits
			runtime.GC()
			runtime.ReadMemStats(&after)
			close(release)
			wg.Wait()
			used := (after.HeapInuse + after.StackInuse) - (before.HeapInuse + before.StackInuse)
			b.ReportMetric(float64(used)/float64(b.N), "B/inflight")
			b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(b.N), "heapB/inflight")
		})
	}
}

// floorTransport answers every request at once, with no I/O: what is left
// is the cost of the plain net/http client API itself.
type floorTransport struct{}

func (floorTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// BenchmarkClientAPIFloor is the part of a request's CPU that no
// RoundTripper can save: http.NewRequest (as the benchmarks program's
// callers build one per request) and http.Client.Do, over a transport that
// does nothing. fasthttp's clients reuse their request and response
// objects and pay none of it; compare with BenchmarkClientGet's cpu-ns/op.
func BenchmarkClientAPIFloor(b *testing.B) {
	client := &http.Client{Transport: floorTransport{}}
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkClientGetH2 measures GETs over HTTP/2 (TLS, ALPN h2) through
// http.Client with 50 parallel callers, pipelined against net/http's own
// HTTP/2: the cost of the hand-off to the standard library's
// http.ClientConn (h2.go).
func BenchmarkClientGetH2(b *testing.B) {
	body := make([]byte, 128)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(body)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	b.Cleanup(srv.Close)
	tlsConf := srv.Client().Transport.(*http.Transport).TLSClientConfig
	for _, name := range []string{"pipelined", "net/http"} {
		b.Run(name, func(b *testing.B) {
			var rt http.RoundTripper
			if name == "pipelined" {
				tr := NewTransport(TransportOptions{MaxConnsPerHost: 5, TLSClientConfig: tlsConf})
				b.Cleanup(func() { tr.Close() })
				rt = tr
			} else {
				tr := &http.Transport{MaxConnsPerHost: 5, TLSClientConfig: tlsConf, ForceAttemptHTTP2: true}
				b.Cleanup(tr.CloseIdleConnections)
				rt = tr
			}
			client := &http.Client{Transport: rt}
			benchCallers(b, 50, func() func() error {
				return func() error {
					req, _ := http.NewRequest("GET", srv.URL, nil)
					resp, err := client.Do(req)
					if err != nil {
						return err
					}
					io.Copy(io.Discard, resp.Body)
					if resp.ProtoMajor != 2 {
						return fmt.Errorf("%s: got %s, want HTTP/2", name, resp.Proto)
					}
					return resp.Body.Close()
				}
			})
		})
	}
}
