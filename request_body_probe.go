// This file holds net/http's probe of a request body of unknown length
// (probeBody: whether a body of a method that usually has none has a first
// byte, waited for up to probeDelay) and the test for bodies read from
// memory (inMemory). It owns no shared state: a probe's goroutine hands its
// result over once, on a channel.

package pipelined

import (
	"bytes"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"
)

// probeDelay is how long net/http waits for the first byte of a request body
// of unknown length on a method that usually has none (transfer.go,
// probeRequestBody).
const probeDelay = 200 * time.Millisecond

// methodUsuallyLacksBody reports whether net/http probes a body of unknown
// length for method before deciding to send it chunked.
func methodUsuallyLacksBody(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodOptions, "PROPFIND", "SEARCH":
		return true
	}
	return false
}

type probeResult struct {
	b   byte
	n   int
	err error
}

// probeBody reads the first byte of a body of unknown length, as net/http
// does for methods that usually lack a body: many servers reject a GET with
// "Transfer-Encoding: chunked", so an empty body must not be sent as one.
// It returns nil if the body turned out to be empty, else a reader that
// yields the whole body. If the first byte takes longer than probeDelay,
// the body is assumed non-empty, and flushHeaders reports that the head
// should be flushed before waiting for the body (golang/go#14315). The
// caller still owns (and closes) body.
func probeBody(body io.Reader) (r io.Reader, flushHeaders bool) {
	ch := make(chan probeResult, 1)
	go func() {
		var buf [1]byte
		n, err := body.Read(buf[:])
		ch <- probeResult{buf[0], n, err}
	}()
	timer := time.NewTimer(probeDelay)
	defer timer.Stop()
	select {
	case res := <-ch:
		return probed(res, body), false
	case <-timer.C:
		return &lateProbe{ch: ch, rest: body}, true
	}
}

func probed(res probeResult, body io.Reader) io.Reader {
	switch {
	case res.n == 0 && res.err == io.EOF:
		return nil
	case res.n == 1 && res.err != nil:
		return io.MultiReader(&oneByte{b: res.b}, errReader{res.err})
	case res.n == 1:
		return io.MultiReader(&oneByte{b: res.b}, body)
	case res.err != nil:
		return errReader{res.err}
	}
	return body
}

// lateProbe is a body whose first Read waits for the probe's result.
type lateProbe struct {
	ch   chan probeResult
	rest io.Reader
	r    io.Reader
}

func (p *lateProbe) Read(b []byte) (int, error) {
	if p.r == nil {
		p.r = probed(<-p.ch, p.rest)
		if p.r == nil {
			return 0, io.EOF
		}
	}
	return p.r.Read(b)
}

type oneByte struct {
	b    byte
	done bool
}

func (o *oneByte) Read(p []byte) (int, error) {
	if o.done {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0], o.done = o.b, true
	return 1, io.EOF
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// The types io.NopCloser returns, which http.NewRequest wraps in-memory
// bodies in.
var (
	nopCloserType         = reflect.TypeOf(io.NopCloser(nil))
	nopCloserWriterToType = reflect.TypeOf(io.NopCloser(struct {
		io.Reader
		io.WriterTo
	}{}))
)

// inMemory reports whether r is one of the standard library's in-memory
// readers, bare or wrapped by io.NopCloser: reading it never blocks. It
// is net/http's isKnownInMemoryReader.
func inMemory(r io.Reader) bool {
	switch r.(type) {
	case *bytes.Reader, *bytes.Buffer, *strings.Reader:
		return true
	}
	if t := reflect.TypeOf(r); t == nopCloserType || t == nopCloserWriterToType {
		return inMemory(reflect.ValueOf(r).Field(0).Interface().(io.Reader))
	}
	return false
}

// inMemoryLen returns the length of what is left of an inMemory body, and
// whether it is one.
func inMemoryLen(r io.Reader) (int64, bool) {
	switch b := r.(type) {
	case *bytes.Reader:
		return int64(b.Len()), true
	case *bytes.Buffer:
		return int64(b.Len()), true
	case *strings.Reader:
		return int64(b.Len()), true
	}
	if t := reflect.TypeOf(r); t == nopCloserType || t == nopCloserWriterToType {
		return inMemoryLen(reflect.ValueOf(r).Field(0).Interface().(io.Reader))
	}
	return 0, false
}
