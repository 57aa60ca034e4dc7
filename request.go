package pipelined

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pipelined/pipelined/internal/h1"
	"github.com/pipelined/pipelined/internal/model"
	"golang.org/x/net/http/httpguts"
)

// request is one call to RoundTrip: the caller's request (never modified)
// and what the transport derived from it. It is owned by the RoundTrip
// goroutine; the fields are read-only once set.
type request struct {
	req    *http.Request
	ctx    context.Context
	method string
	trace  *httptrace.ClientTrace

	// RFC 9110 §9.2.2: idempotent, and a body that is absent or
	// replayable through GetBody: the request may be sent again after a
	// connection failure (retry.go).
	replayable bool
	// RFC 9110 §9.2.1: a safe method without a body. Only such a request
	// may be sent again while its original may still run (mayDuplicate).
	safe bool
	// pipelineable reports whether the request may be written behind
	// others and others behind it: safe, not a Connection: close
	// request, and a head far from servers' limits (headNearLimits).
	pipelineable bool
	// class is the request's route class (internal/model), for a pipelineable
	// request only.
	class      model.Class
	closeAfter bool // Connection: close is sent; the connection ends with it
	upgrade    bool // CONNECT or Upgrade: the connection may leave the pool
	// expectContinue: the body waits for a 100 (expect.go), as net/http:
	// HTTP/1.1 request, a body, and "Expect: 100-continue".
	expectContinue bool
	addGzip        bool // the transport asks for gzip and decodes it
	absoluteURI    bool // absolute-form request target (HTTP proxy)
	bodyUsed       bool // req.Body was handed to a write
	proxyAuth      string
	// host and target are the Host field and the request-target, checked
	// before the request is placed (checkTarget); empty for a copy of a
	// late head, whose write works them out again.
	host, target string

	obs *requestObs // for the Observer (observer_report.go), only when there is one

	// copyOf is, for a copy of a late head (hostPool.hedge), the attempt
	// it copies; a copy has no httptrace hooks and is never copied itself.
	copyOf *attempt

	first attempt // the first attempt, allocated with the request
	// sig (capacity 1), made with the first attempt, wakes the caller: once
	// when a waiter of one of its attempts is given a connection
	// (waiter.give) and once when an attempt's outcome is delivered
	// (attempt.deliver). The two never overlap: place receives its signal
	// before it returns, before the attempt can be written; await receives
	// the outcome's before the next attempt starts. The payloads are in the
	// waiter and the attempt, written before the send and read after the
	// receive (a channel of struct{} is one allocation; a channel of
	// results, two).
	sig chan struct{}
}

// replayable reports whether req may be sent again after the connection it
// was written on failed: its method is idempotent, and its body, if any,
// can be had again (GetBody).
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		// RFC 9110 §9.2.2: PUT and DELETE are idempotent.
		http.MethodPut, http.MethodDelete:
		return true
	}
	// net/http's isReplayable: the presence of either key marks the
	// request idempotent, whatever its value (golang/go#19943).
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

// Request heads near the limits servers set on them are not pipelined.
// Their defaults refuse a head of more than 64 fields (Varnish's
// http_max_hdr) or 8 KiB (Tomcat's maxHttpHeaderSize; nginx's and Apache's
// limit on a line), and many refuse with an immediate close that does
// not read what followed. RFC 9112 §9.6: a request that arrives on a
// closed connection makes the server's TCP send a reset, which "might
// erase the client's unacknowledged input buffers": the refusal (400,
// 414, 431) is lost, and its caller gets "connection reset by peer"
// where net/http, which writes nothing behind a request, gets the status.
const (
	riskyHeadFields = 48
	riskyHeadBytes  = 6 << 10
)

// headNearLimits reports whether req's head comes near the limits
// servers set on request heads (riskyHeadFields, riskyHeadBytes): field
// lines as written, and an estimate of its bytes, the request line's
// target and Host included.
func headNearLimits(req *http.Request) bool {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	n := len(host) + max(len(req.URL.Path), len(req.URL.RawPath)) + len(req.URL.RawQuery)
	if len(req.Header) > riskyHeadFields || n > riskyHeadBytes {
		return true
	}
	lines := 0
	for k, vs := range req.Header {
		lines += len(vs)
		for _, v := range vs {
			n += len(k) + len(v) + len(": \r\n")
		}
	}
	return lines > riskyHeadFields || n > riskyHeadBytes
}

// acceptsEventStream reports whether Accept field values name
// text/event-stream (the WHATWG HTML standard, §9.2: server-sent events).
func acceptsEventStream(values []string) bool {
	for _, v := range values {
		for m := range strings.SplitSeq(v, ",") {
			if isEventStream(m) {
				return true
			}
		}
	}
	return false
}

// isEventStream reports whether a media type (parameters allowed) is
// text/event-stream.
func isEventStream(mediaType string) bool {
	t, _, _ := strings.Cut(mediaType, ";")
	return strings.EqualFold(strings.Trim(t, " \t"), "text/event-stream")
}

func newRequest(t *Transport, req *http.Request, key poolKey) *request {
	r := &request{req: req, ctx: req.Context(), method: req.Method}
	if r.method == "" {
		r.method = http.MethodGet
	}
	r.trace = httptrace.ContextClientTrace(r.ctx)
	noBody := req.Body == nil || req.Body == http.NoBody
	r.replayable = replayable(req)
	switch r.method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		r.safe = noBody
	}
	r.closeAfter = req.Close || t.opts.DisableKeepAlives ||
		httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close")
	upgrade := r.method == http.MethodConnect || httpguts.HeaderValuesContainsToken(req.Header["Connection"], "upgrade")
	expect := !noBody && httpguts.HeaderValuesContainsToken(req.Header["Expect"], "100-continue")
	// Only safe requests are pipelined: a request behind another may have
	// to move to another connection while its original may still run
	// (a slow or streaming head), and only a safe one may run twice, or
	// after requests its caller sent later (docs/reliability.md).
	//
	// A request for an event stream (an EventSource's Accept) is responded
	// to with a body that does not end: nothing may wait behind it, and it
	// waits behind nothing, as with net/http.
	r.pipelineable = r.safe && !upgrade && !r.closeAfter && !headNearLimits(req) && !acceptsEventStream(req.Header["Accept"])
	if r.pipelineable {
		r.class = model.ClassOf(req, r.method)
	}
	r.expectContinue = expect && req.ProtoAtLeast(1, 1)
	r.upgrade = upgrade
	if upgrade {
		r.closeAfter = false // the connection leaves the pool instead
	}
	if !t.opts.DisableCompression && req.Header["Accept-Encoding"] == nil &&
		req.Header["Range"] == nil && r.method != http.MethodHead && !upgrade {
		// net/http asks for gzip only, and only when it can decode it
		// without surprising the caller (golang/go#8923 for Range).
		r.addGzip = true
	}
	return r
}

// body returns the body to write for an attempt: the caller's body the
// first time, a fresh one from GetBody after that.
func (r *request) body() (io.ReadCloser, error) {
	b := r.req.Body
	if b == nil || b == http.NoBody {
		return nil, nil
	}
	if !r.bodyUsed {
		r.bodyUsed = true
		return b, nil
	}
	if r.req.GetBody == nil {
		return nil, errors.New("net/http: cannot rewind body after connection loss")
	}
	return r.req.GetBody()
}

// rewound returns r's request with a body no attempt has read, for a
// request that goes on elsewhere (the HTTP/2 side) after an attempt took
// its body: a copy with a fresh body from GetBody, or body's error if it
// has none (net/http's rewindBody).
func (r *request) rewound() (*http.Request, error) {
	body, err := r.body()
	if err != nil {
		return nil, err
	}
	req := *r.req
	req.Body = body
	return &req, nil
}

// probing reports whether a is a probe (scheduler.go, probeLocked): placed
// while its host was not proven, and written behind another request. Read
// by the connection's reader, or under pconn.mu, once a joined the fifo.
func (a *attempt) probing() bool { return a.probeAfter > 0 && a.behind }

// mayDuplicate reports whether a copy of r may be sent while its original
// may still be executed by the server: only if r is safe (RFC 9110
// §9.2.1). Idempotent (§9.2.2) means that repeating a request has the
// effect of sending it once, not that a copy may run after requests the
// caller sent later. This is the one place the rule is decided.
func mayDuplicate(r *request) bool { return r.safe }

// attempt is one sending of a request on one connection. Its state is in
// parts, each written by one goroutine or under one lock, named in its
// comment with what reads it (docs/design.md, "The attempt's parts"); a
// field with a second writer says so, and what makes that safe.
type attempt struct {
	r *request // set by newAttempt, read-only after
	// c is a's connection, set by the pool under hostPool.mu when it
	// assigns one (assignLocked); read by a's caller once placed, and by
	// the Observer's reports.
	c *pconn

	attemptCaller
	attemptPlace
	attemptOutcome
	attemptWrite
	attemptHeaderTimer
	attemptContinue
	attemptRead
	// Flags only, after attemptStream's: together they fill one word (a
	// request, with its first attempt, fits the allocator's 480-byte
	// class).
	attemptStream
	attemptPool

	// wait is a's place in its pool's queue (scheduler.go, place), written
	// under hostPool.mu by place and by whoever dispatches a connection to
	// it (dispatchLocked).
	wait waiter
}

// attemptCaller is written by a's caller's goroutine (roundTripAttempts,
// acquire) before a is placed, with no lock: nobody else has a yet. Read
// by that goroutine, and by the Observer's reports it makes.
type attemptCaller struct {
	queuedAt  monoTime
	n         int32       // 1 for the first attempt
	cause     ResendCause // why this attempt is sent
	askedConn bool        // GetConn fired (once per attempt, whatever the pool)
}

// attemptPlace is written when a is placed, before its caller has the
// connection: by the caller's goroutine in place, under hostPool.mu (alone
// first by newAttempt), and by the pool when it assigns a connection
// (assignLocked, under hostPool.mu, in whichever goroutine dispatches
// it). Read-only once a's caller has the connection: the connection
// (writer, reader, head-of-line timer) reads it without a lock.
type attemptPlace struct {
	// holAfter is how long a may wait at the head of its connection before
	// the safe requests behind it are re-sent elsewhere, set by the pool
	// when it places a (model.Host.EarlyAfter); 0: HeadOfLineTimeout.
	holAfter time.Duration
	// probeAfter: a was placed while its host was not proven to handle
	// pipelining; if it is the probe (probing), how long it may wait, once
	// at the head with nothing behind it, before a copy of it is sent
	// elsewhere (model.Host.ProbeWait). Set by the pool when it
	// places a; 0 otherwise.
	probeAfter time.Duration
	// streamGap is how long nothing of a chunked response may arrive before
	// the response is taken for a stream (bodyStream.tentative), set by the
	// pool when it places a: two of the host's round trips (its shortest
	// dial), at least model.QuickWait.
	streamGap time.Duration

	inflightAtAssign int32 // for the Observer, set by assignLocked
	// follow: whether requests may be written behind it, from its class
	// (internal/model); set under hostPool.mu when it is placed.
	follow model.Verdict
	// alone: written alone on its connection: a retry (RFC 9112 §9.3.2),
	// or a request whose class streams or is late (then toStream too for
	// a stream: a chunked response is a stream from its head). Set before
	// it is placed.
	alone, toStream bool
	activated       bool // the assignment made the connection active (for the Observer)
	// heldAtAssign: the assignment holds its connection (sched.held)
	// until the hooks told of it (GotConn, ConnActive, RequestAssigned)
	// have run, so that a request one sends does not wait behind a's
	// place, unwritten (roundTripAttempts). Two writers: set by
	// assignLocked under hostPool.mu, cleared by a's caller once it has
	// the connection (the hand-over through place orders the two).
	heldAtAssign bool
}

// attemptPool is written by the pool under hostPool.mu once a is written,
// and read under it.
type attemptPool struct {
	hedged bool // a copy of it was sent (hostPool.lateHead)
	// answerAtEnd: its response's head did not count as the host's response
	// (its body was not of a known, buffered length): its end does
	// (hostPool.answerLocked).
	answerAtEnd bool
	// heldTentative: the pool took the response's connection for a stream's
	// while it was read from the network (hostPool.tentative).
	heldTentative bool
}

// attemptOutcome is a's outcome, delivered once: state moves by
// compare-and-swap (deliver, or abandon by a caller that gave up), and
// only the deliverer that moved it writes out, before it signals r.sig;
// the caller reads out after the signal (result).
type attemptOutcome struct {
	out   result       // the outcome, written by deliver before it signals r.sig
	state atomic.Int32 // attemptWaiting → attemptDelivered | attemptAbandoned
}

// attemptWrite is written by a's writer, the holder of its connection's
// write token (send, write, writeHeld); the fields set when a joins the
// fifo are set under pconn.mu (joinLocked), which the reader holds to
// read them. headAt has a second writer.
type attemptWrite struct {
	// Set under pconn.mu when the attempt joins the connection's fifo.
	wireOff int64    // bytes handed to the connection before this request's first byte
	sentAt  monoTime // for a pipelined request, when it joined the fifo
	// writeGap is how long after the request ahead of it a pipelined
	// request joined the fifo, read by the pool (internal/model, serviceOrder).
	writeGap time.Duration
	// headAt is when it became the oldest request still awaiting its response
	// on its connection (written with nothing ahead, or the response ahead
	// read). Two writers, both under pconn.mu: the writer when a joins the
	// fifo with nothing ahead, the reader when the response ahead is read
	// (popHead). Read by the reader (readOne).
	headAt monoTime
	// wireEnd: for a request written together with the one ahead, the
	// connection's byte count at its end, set by write; read by the
	// reader (readOne).
	wireEnd atomic.Int64
	// writeDone, for a body written by a goroutine of its own, is closed
	// when that write ends (send makes it, write closes it).
	writeDone chan struct{}
	reused    bool // the connection had served a response, or others were in flight
	behind    bool // others were in flight: the request was pipelined
	// together: written behind another request in the same write (its
	// bytes went out with the request ahead), set under pconn.mu.
	together bool
	// written: the whole request was written; read by the reader
	// (finishResponse).
	written atomic.Bool
}

// attemptHeaderTimer is the arming of a's header timer (see
// pconn.armHeaderTimeout). arm has two writers, atomic: the writer once a
// is written, and whoever makes a the oldest request still awaiting its
// response (the
// writer that queues it first, or the reader that reads the response ahead).
// disarmed is written and read under pconn.deadlineMu.
type attemptHeaderTimer struct {
	arm atomic.Int32
	// disarmed: the header timer must not start any more.
	disarmed bool
}

// attemptContinue is, for an expectContinue request, how the reader tells
// the writer whether to send the body (expect.go). continueCh is made by
// newAttempt and read-only after; the reader sends on it, once
// (continueOnce, signalContinue); the writer and claimDirect read it.
type attemptContinue struct {
	continueCh   chan struct{} // capacity 1; nil if no 100 is awaited
	continueOnce sync.Once
}

// attemptRead is written by a's reader, the holder of its connection's
// read turn (the reader goroutine, or a's caller reading its own response,
// conn_direct.go), before it reports what it read to the pool (headers read,
// response done), which reads it then under hostPool.mu. headersRead is
// set under pconn.mu, which its readers hold.
type attemptRead struct {
	// Set by the reader for a pipelined request when its headers arrive
	// (timed): how long after the response ahead of it ended (gap), and
	// how long after the request joined the fifo that one ended (shadow;
	// internal/model, serviceOrder).
	gap, shadow time.Duration
	// headWait is how long after headAt its headers came, set before the
	// reader reports the response done (headWaits.note, in
	// hostPool.responseDone).
	headWait time.Duration
	// ka is the Keep-Alive hint of the response, if it had one, set before
	// the reader reports the headers.
	ka *h1.KeepAlive
	// place is its response's place on the connection (1: the first), set
	// with headersRead, before the reader reports the headers: what the
	// pool learns from a head counts from it, not from the responses it
	// has counted served (design.md, "Direct reads").
	place int
	// bodyLen is its response's Content-Length, or -1 if the body has no
	// declared length (or none at all), set with place.
	bodyLen int64
	// chunkedLen is the length of its response's chunked body, set at the
	// body's end, before responseDone.
	chunkedLen int64
	// tentative: its response is chunked (bodyStream.tentative), set before
	// the reader reports the headers.
	tentative bool
	// streamAtHead: its response is a stream from its head, set before the
	// reader reports the headers: server-sent events, or a body it will
	// not read whole (longer than maxBufferedBody, or until the connection
	// closes). The pool places nothing behind it from its head on, not
	// from its first read from the network (streamed).
	streamAtHead bool
	// timed: gap and shadow are set (above).
	timed bool
	// proves: its response came before anything written after it, set
	// before the reader reports the headers: the server read it along with
	// the request ahead and responded to it unprompted, as one that handles
	// pipelining does (hostPool.probeLocked).
	proves bool
	// noBody: its response had no body by rule (RFC 9112 §6.3: HEAD, 1xx,
	// 204, 304), set before the reader reports the response done.
	noBody bool
	// headersRead: final response headers parsed; set under pconn.mu, and
	// read under it (fail, dropIfUnwanted, the head-of-line timer,
	// probeLost).
	headersRead bool
}

// attemptStream is written by the stream of a's response (bodyStream), under
// bodyStream.mu: by the reader, or by the stream verdict's timer
// (becomeStream), whichever makes the body a stream. Read by the pool
// once told of the stream or the response's end, and by the head-of-line
// timer.
type attemptStream struct {
	// events: its response is a stream of events, server-sent events or a
	// chunked body of which nothing came for streamGap (not one that only
	// grew too long to be read whole). Its route class is then a
	// stream in the host model (model.Host.NoteResponse). Two writers: the reader sets it before it
	// reports the headers (server-sent events), before the verdict's
	// timer exists, and clears it at the body's end (read in full sooner
	// than a request behind would have waited), after bodyStream.stop;
	// in between, the verdict sets it under bodyStream.mu before it
	// reports the stream.
	events bool
	// streamed: its body became a stream (bodyStream.startWaiting,
	// becomeStream), set under bodyStream.mu and holGuard.mu (holFire
	// reads it under the latter) before the pool is told, which clears
	// the connection's streaming mark with a's response only.
	streamed bool
}

const (
	attemptWaiting int32 = iota
	attemptDelivered
	attemptAbandoned
)

type result struct {
	resp  *http.Response
	err   error
	retry bool // not responded to here and safe to send elsewhere, not a failure
	// copied: the response is that of a copy of the request (r.obs.copy
	// with an Observer), delivered to the late head's attempt
	// (hostPool.hedge).
	copied bool
}

func newAttempt(r *request, alone bool) *attempt {
	// The first attempt lives in the request, and all attempts share one
	// signal channel: an attempt's outcome is always received (or, once
	// abandoned, never sent) before the next attempt starts.
	var a *attempt
	if r.sig == nil {
		r.sig = make(chan struct{}, 1)
		a = &r.first
	} else {
		a = new(attempt)
	}
	a.r, a.alone = r, alone
	if r.expectContinue {
		a.continueCh = make(chan struct{}, 1)
	}
	return a
}

// deliver hands the outcome to the caller, reporting false if the caller
// has given up on the attempt.
func (a *attempt) deliver(res result) bool {
	if !a.state.CompareAndSwap(attemptWaiting, attemptDelivered) {
		return false
	}
	a.out = res
	a.r.sig <- struct{}{}
	return true
}

// result waits for the outcome that deliver signals.
func (a *attempt) result() result {
	<-a.r.sig
	return a.out
}

// abandon marks the attempt given up by the caller; it reports false if an
// outcome was already delivered (and is waiting to be received).
func (a *attempt) abandon() bool {
	return a.state.CompareAndSwap(attemptWaiting, attemptAbandoned)
}

// prepareHead works out r's head for an attempt whose body is body (nil:
// none), before anything of it is written: an error here is one net/http
// finds while writing a request, before any byte of it reaches its
// connection, and fails the request with nothing written, its connection
// and the requests pipelined on it left alone (the head it returns with
// an error is for traceRefused). The Host field and the
// request-target were checked before r was placed (checkTarget); the
// framing needs the body (a probe of it, request_body_probe.go).
func prepareHead(r *request, body io.ReadCloser) (h1.Head, error) {
	h := h1.Head{Method: r.method, Host: r.host, Target: r.target,
		Close: r.closeAfter, Gzip: r.addGzip, ProxyAuth: r.proxyAuth}
	if h.Target == "" {
		var err error
		if h.Host, h.Target, err = h1.RequestTarget(r.req, r.method, r.absoluteURI); err != nil {
			return h1.Head{}, err
		}
	}
	if tunnel, _ := tunnelBody(r, body); tunnel != nil {
		body = nil // a CONNECT's tunnel is no body of the request's
	}
	h.Framing = frameRequest(r, body)
	if h.Framing.Chunked {
		if err := h1.CheckTrailer(r.req.Trailer); err != nil {
			return h1.Head{}, err
		}
	} else if h.Framing.CL > 0 {
		// A body in memory tells its length: one that differs from the
		// declared one fails before a byte is written, as with net/http
		// (its head and such a body wait in its buffer until the
		// mismatch shows).
		if n, ok := inMemoryLen(h.Framing.Body); ok && n != h.Framing.CL {
			// The head is returned for traceRefused: net/http had
			// written it into its buffer.
			return h, fmt.Errorf("http: ContentLength=%d with Body length %d", h.Framing.CL, n)
		}
	}
	return h, nil
}

// traceRefused tells r's trace (if it has write hooks) of a request
// prepareHead refused with err, as net/http's write tells of it: the
// fields and the end of the head it had written into its buffer before it
// found err (h, if prepareHead returned one), then WroteRequest with err.
// Nothing of it is written anywhere. It runs in the caller's goroutine,
// under no lock and with no write token.
func traceRefused(r *request, h *h1.Head, err error) {
	t := r.trace
	if !writeHooked(t) {
		return
	}
	if h.Target != "" && (t.WroteHeaderField != nil || t.WroteHeaders != nil) {
		h1.WriteHead(bufio.NewWriterSize(io.Discard, 16), r.req, t, h)
	}
	if t.WroteRequest != nil {
		t.WroteRequest(httptrace.WroteRequestInfo{Err: err})
	}
}

// checkTarget works out and checks the Host field and the request-target
// of r before it is placed on a connection: a request net/http would
// refuse to write is refused before it takes a place (h1.RequestTarget).
func (r *request) checkTarget() error {
	var err error
	r.host, r.target, err = h1.RequestTarget(r.req, r.method, r.absoluteURI)
	return err
}

// writeRequest writes r's head (h) and body to w in HTTP/1.1 form, as
// net/http's Request.write does, adding the transport's own headers
// without modifying r.req. If waitForContinue is not nil, the head is
// flushed and the body is written only if waitForContinue reports true
// (expect.go). lw is the writer's own limitWriter (writeBody), so that
// none is allocated per body. body, if not nil, is closed on return.
func writeRequest(w *bufio.Writer, lw *limitWriter, r *request, h *h1.Head, body io.ReadCloser, waitForContinue func() bool) error {
	if body != nil {
		defer body.Close()
	}
	if err := h1.WriteHead(w, r.req, r.trace, h); err != nil || h.Framing.Body == nil {
		return err
	}
	return writeRequestBody(w, lw, r, body, h.Framing, waitForContinue)
}

// frameRequest chooses the framing of r's body (nil: none), following
// net/http's transferWriter: an empty body of unknown length on a method
// that usually lacks one is no body (request_body_probe.go); h1.FrameRequest
// chooses the rest.
func frameRequest(r *request, body io.ReadCloser) h1.RequestFraming {
	var b io.Reader = body
	flushHead := false
	if body != nil && r.req.ContentLength == 0 && methodUsuallyLacksBody(r.method) {
		b, flushHead = probeBody(body)
	}
	return h1.FrameRequest(r.req, r.method, b, flushHead)
}

// writeRequestBody writes r's body after its head, framed by f. The head
// goes out first if the body may block (below) or if waitForContinue (not
// nil) is to decide whether the body is sent at all (expect.go).
func writeRequestBody(w *bufio.Writer, lw *limitWriter, r *request, body io.ReadCloser, f h1.RequestFraming, waitForContinue func() bool) error {
	// As net/http (transferWriter.FlushHeaders, golang/go#22088): a body
	// not already in memory may block until its caller has read some of
	// the response (a pipe of a full-duplex exchange), so the head goes
	// out before it is copied; one in memory goes out with it.
	if f.FlushHead || !inMemory(body) {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if waitForContinue != nil {
		if err := w.Flush(); err != nil {
			return err
		}
		if t := r.trace; t != nil && t.Wait100Continue != nil {
			t.Wait100Continue()
		}
		if !waitForContinue() {
			return nil // writeRequest's deferred Close releases the body
		}
	}
	return writeBody(w, lw, r.req, f.Body, f.CL, f.Chunked)
}

// requestBodyError wraps an error returned by the caller's request body, to
// tell it apart from an error writing to the connection.
type requestBodyError struct{ err error }

func (e *requestBodyError) Error() string { return e.err.Error() }
func (e *requestBodyError) Unwrap() error { return e.err }

type bodyReader struct{ r io.Reader }

func (b bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = &requestBodyError{err}
	}
	return n, err
}

func writeBody(w *bufio.Writer, lw *limitWriter, req *http.Request, raw io.Reader, cl int64, chunked bool) error {
	if chunked {
		_, err := copyPooled(h1.NewChunkWriter(w), bodyReader{raw})
		if err != nil {
			return err
		}
		return h1.WriteLastChunk(w, req.Trailer)
	}
	var n int64
	if wt, ok := raw.(io.WriterTo); ok {
		// In-memory bodies (bytes.Reader, strings.Reader, bytes.Buffer,
		// through io.NopCloser as http.NewRequest makes them) hand over
		// their own memory: what does not fit in w's buffer goes straight
		// to the connection, in pieces of maxBodyWrite, with no copy.
		*lw = limitWriter{w: w, left: cl}
		_, err := wt.WriteTo(lw)
		var werr error
		n, werr = lw.n, lw.werr
		*lw = limitWriter{}
		if err != nil {
			if werr == nil || !errors.Is(err, werr) {
				err = &requestBodyError{err}
			}
			return err
		}
	} else {
		// Past w's buffer, w hands the rest to the connection's ReadFrom
		// (wireCounter), which writes it in large pieces.
		body := bodyReader{raw}
		var err error
		if n, err = io.Copy(w, io.LimitReader(body, cl)); err != nil {
			return err
		}
		if n == cl {
			// Detect a body longer than declared and count it all, as
			// net/http does (transferWriter.writeBody).
			m, _ := io.Copy(io.Discard, body)
			n += m
		}
	}
	if n != cl {
		// net/http's wording: its transport reports this as a broken
		// connection (mapRoundTripError).
		return &requestBodyError{fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w",
			fmt.Errorf("http: ContentLength=%d with Body length %d", cl, n))}
	}
	return nil
}

func httptraceWroteRequest(err error) httptrace.WroteRequestInfo {
	return httptrace.WroteRequestInfo{Err: err}
}

func textprotoHeader(h http.Header) textproto.MIMEHeader { return textproto.MIMEHeader(h) }

// maxBodyWrite is the largest piece of an in-memory request body handed to
// the connection at once (limitWriter).
const maxBodyWrite = 256 << 10

// limitWriter takes a body of declared length from its WriteTo: it writes
// the first left bytes to w and counts, without writing, any beyond them,
// so that a body longer than declared is reported as net/http reports it.
// werr is w's last error, to tell it from the body's own.
type limitWriter struct {
	w    *bufio.Writer
	left int64
	n    int64
	werr error
}

func (lw *limitWriter) Write(p []byte) (int, error) {
	lw.n += int64(len(p))
	if lw.left <= 0 {
		return len(p), nil
	}
	q := p
	if int64(len(q)) > lw.left {
		q = q[:lw.left]
	}
	// In pieces: at 1 MiB, writes of 256 KiB gave 1.13-1.28x net/http's
	// req/s where one write of the whole body gave 0.97-1.19 (benchmarks
	// suite upload, alternated), for the same CPU.
	var m int
	var err error
	for len(q) > 0 && err == nil {
		k := min(len(q), maxBodyWrite)
		var mk int
		mk, err = lw.w.Write(q[:k])
		m += mk
		q = q[k:]
	}
	lw.left -= int64(m)
	if err != nil {
		lw.n -= int64(len(p) - m)
		lw.werr = err
		return m, err
	}
	return len(p), nil
}

// ReadFrom spares a body that copies itself with io.Copy (*os.File's
// WriteTo does) a buffer of its own per request.
func (lw *limitWriter) ReadFrom(r io.Reader) (int64, error) {
	return copyPooled(lw, r)
}
