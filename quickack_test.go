package pipelined

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// A server that writes without TCP_NODELAY (Puma, by default) holds a small
// answer until the one before it is acknowledged (Nagle's algorithm). The
// answers to pipelined requests must not wait for the client's delayed ACK
// (40 ms on Linux): a read that waits past ackStall while pipelined answers
// are due acknowledges what came (netReader.Read).
//
// Each round pipelines two GETs on the one connection; the server reads
// both, then writes the two answers in two writes. Without the prompt ACK
// every round waits out the timer between the two answers; a round is
// counted late past 30 ms.
func TestNagleServerPipelinedAnswersNotDelayed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("only Linux lets a client acknowledge at once (TCP_QUICKACK)")
	}
	verifyNoLeaks(t)
	srv := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		c.(*net.TCPConn).SetNoDelay(false) // as Puma's (tcp:// binds without low_latency)
		serveEchoN(1)(c, br)               // the first answer: the pool pipelines after it
		for {
			var paths [2]string
			for i := range paths {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				paths[i] = req.URL.Path
			}
			for _, p := range paths {
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(p), p)
			}
		}
	})
	tr := newTestTransport(t, TransportOptions{MaxConnsPerHost: 1, PipelineDepth: 4, FixedPolicy: true})
	if _, err := getBody(t.Context(), tr, srv.url("/first")); err != nil {
		t.Fatal(err)
	}
	const rounds = 30
	late := 0
	for range rounds {
		// The server answers only once it has both requests: each round
		// is pipelined.
		a := getAt(t, tr, srv.url("/a"))
		waitFor(t, "/a written", func() bool {
			c := soleConn(tr, srv)
			return c != nil && fifoLen(c) == 1
		})
		b := getAt(t, tr, srv.url("/b"))
		ta, tb := <-a, <-b
		if gap := tb.Sub(ta); gap > 30*time.Millisecond {
			late++
		}
	}
	tr.CloseIdleConnections()
	if late > rounds/3 {
		t.Errorf("%d of %d rounds: the second answer came more than 30 ms after the first, want at most %d", late, rounds, rounds/3)
	}
}
