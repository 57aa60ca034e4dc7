package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"runtime"
	"testing"
)

// Response heads for BenchmarkReadResponse: the benchmark servers' two
// fields, and a head as nginx sends it for a static file.
var (
	benchHeadSmall = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 128\r\n\r\n"
	benchHeadNginx = "HTTP/1.1 200 OK\r\nServer: nginx/1.26.3\r\nDate: Tue, 01 Dec 2026 06:00:00 GMT\r\n" +
		"Content-Type: text/html\r\nContent-Length: 615\r\nLast-Modified: Mon, 30 Nov 2026 10:00:00 GMT\r\n" +
		"Connection: keep-alive\r\nETag: \"674abc12-267\"\r\nAccept-Ranges: bytes\r\n\r\n"
	benchHeadAPI = "HTTP/1.1 200 OK\r\nDate: Tue, 01 Dec 2026 06:00:00 GMT\r\nContent-Type: application/json; charset=utf-8\r\n" +
		"Content-Length: 1024\r\nCache-Control: no-store\r\nVary: Accept-Encoding\r\nVary: Origin\r\n" +
		"X-Request-Id: 5f0c6a2e-1f1b-4b7e-9d3e-0c7a1b2c3d4e\r\nX-Ratelimit-Remaining: 4999\r\n" +
		"Set-Cookie: a=1; Path=/\r\nSet-Cookie: b=2; Path=/\r\nStrict-Transport-Security: max-age=63072000\r\n\r\n"
)

// BenchmarkReadResponse measures parsing one response head into an
// *http.Response (ReadResponseHead), as the connection's reader does.
// cpu-ns/op is the thread's CPU time per head (Linux), a figure that holds
// better than ns/op when other work shares the machine.
func BenchmarkReadResponse(b *testing.B) {
	for _, c := range []struct{ name, head string }{
		{"small", benchHeadSmall}, {"nginx", benchHeadNginx}, {"api", benchHeadAPI},
	} {
		b.Run(c.name, func(b *testing.B) {
			src := bytes.NewReader(nil)
			br := bufio.NewReaderSize(src, 4096)
			head := []byte(c.head)
			b.ReportAllocs()
			b.SetBytes(int64(len(head)))
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu0 := threadCPU()
			for b.Loop() {
				src.Reset(head)
				br.Reset(src)
				resp, _, err := ReadResponseHead(br, http.MethodGet, 1<<20, nil)
				if err != nil || resp.StatusCode != 200 {
					b.Fatal(resp, err)
				}
			}
			if cpu := threadCPU() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
