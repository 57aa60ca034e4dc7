package h1

import (
	"bufio"
	"bytes"
	"reflect"
	"testing"
)

// FuzzHeadPaths checks that the two ways readOneHead parses a head agree:
// readBufferedHead (the whole head in the buffer) and readHeadLines (line
// by line). For any bytes and budget, both fail, or both return the same
// status, protocol and header and consume the same bytes and budget.
func FuzzHeadPaths(f *testing.F) {
	for _, s := range []string{
		benchHeadSmall, benchHeadNginx, benchHeadAPI,
		"HTTP/1.1 200 OK\r\n\r\n",
		"HTTP/1.0 404 \r\nX: 1\r\n\r\nbody",
		"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nCONTENT-TYPE: a\r\netag: x\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nSet-Cookie: a\r\nVary: x\r\nSet-Cookie: b\r\nSet-Cookie: c\r\nVary: y\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Weird_Name: v\r\nx-lower: v\r\nX-Trim:  \t a b \t \r\nEmpty:\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n",           // bare LF
		"HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n",                   // bare CR
		"HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n",                // obs-fold
		"HTTP/1.1 200 OK\r\n A: b\r\n\r\n",                     // whitespace before the first field
		"HTTP/1.1 200 OK\r\nA : b\r\n\r\n",                     // space before the colon
		"HTTP/1.1 200 OK\r\nA: b\x00\r\n\r\n",                  // NUL
		"HTTP/1.1 200 OK\r\nA: b\n\r\n\r\n",                    // bare LF then CRLF CRLF
		"HTTP/1.1 2x0 OK\r\n\r\n",                              // bad status
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n", // two heads
		"\r\n\r\n",
		"\n\r\n\r\n",
	} {
		f.Add([]byte(s), uint16(4096))
		f.Add([]byte(s), uint16(40))
	}
	f.Fuzz(func(t *testing.T, data []byte, budget uint16) {
		if len(data) > 8<<10 {
			return
		}
		limit := int64(budget)
		// Fast: a buffer that holds all the data, filled before parsing.
		br1 := bufio.NewReaderSize(bytes.NewReader(data), 16<<10)
		br1.Peek(len(data))
		b1 := limit
		var resp1 = (*headResult)(nil)
		if r, n := readBufferedHead(br1, b1); r != nil {
			br1.Discard(n)
			b1 -= int64(n)
			resp1 = &headResult{r.Status, r.StatusCode, r.Proto, r.ProtoMinor, r.Header, len(data) - br1.Buffered(), b1}
		}
		if resp1 == nil {
			return // the line reader parses it: nothing to compare
		}
		// Lines: the same bytes through readHeadLines.
		br2 := bufio.NewReaderSize(bytes.NewReader(data), 16<<10)
		b2 := limit
		r, err := readHeadLines(br2, &b2, limit)
		if err != nil {
			t.Fatalf("readBufferedHead accepted %q, readHeadLines: %v", data, err)
		}
		resp2 := &headResult{r.Status, r.StatusCode, r.Proto, r.ProtoMinor, r.Header, len(data) - br2.Buffered(), b2}
		if !reflect.DeepEqual(resp1, resp2) {
			t.Fatalf("%q:\nbuffered %+v\nlines    %+v", data, *resp1, *resp2)
		}
	})
}

// headResult is what FuzzHeadPaths compares.
type headResult struct {
	Status     string
	StatusCode int
	Proto      string
	ProtoMinor int
	Header     map[string][]string
	Consumed   int
	Budget     int64
}

// TestHeadPathsReject: heads the line reader rejects are never accepted
// by the buffered parser.
func TestHeadPathsReject(t *testing.T) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n",
		"HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n",
		"HTTP/1.1 200 OK\r\n A: b\r\n\r\n",
		"HTTP/1.1 200 OK\r\nA : b\r\n\r\n",
		"HTTP/1.1 200 OK\r\nA: b\x00\r\n\r\n",
		"HTTP/1.1 200 OK\r\nA: b\n\r\n\r\n",
		"HTTP/1.1 2x0 OK\r\n\r\n",
		"\r\n\r\n",
		"\n\r\n\r\n",
	} {
		br := bufio.NewReader(bytes.NewReader([]byte(s)))
		br.Peek(len(s))
		if r, _ := readBufferedHead(br, 1<<20); r != nil {
			t.Errorf("readBufferedHead accepted %q", s)
		}
		b := int64(1 << 20)
		if _, err := readOneHead(bufio.NewReader(bytes.NewReader([]byte(s))), &b, b); err == nil {
			t.Errorf("readOneHead accepted %q", s)
		}
	}
	// Over the budget: left to the line reader, which reports it.
	br := bufio.NewReader(bytes.NewReader([]byte(benchHeadNginx)))
	br.Peek(len(benchHeadNginx))
	if r, _ := readBufferedHead(br, int64(len(benchHeadNginx)-1)); r != nil {
		t.Error("readBufferedHead accepted a head over the budget")
	}
}
