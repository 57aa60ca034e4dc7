package h1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// This file writes a request's head and frames its body on the wire as
// net/http's Request.write does (RFC 9112 §3, §6, §7.1): the Host field
// and request-target and their checks, the framing of the body, the head's
// fields (the caller's and the transport's own) and the chunked coding.
// No state, no lock: the caller owns the bufio.Writer it writes to.

const defaultUserAgent = "Go-http-client/1.1"

// Head is what a request's head is written from (WriteHead): its request
// line, its Host field, its body's framing and the fields the transport
// adds to the caller's header.
type Head struct {
	Method       string
	Host, Target string         // the Host field and the request-target (RequestTarget)
	Framing      RequestFraming // how the body goes on the wire (FrameRequest)
	Close        bool           // add "Connection: close" unless the header says so already
	Gzip         bool           // add "Accept-Encoding: gzip"
	ProxyAuth    string         // the Proxy-Authorization field, if not ""
}

// RequestTarget returns the Host field and the request-target of req's
// request line (RFC 9112 §3.2: absolute-form to a proxy, authority-form
// for CONNECT, origin-form otherwise), validated as net/http validates
// them. method is the request's method ("" already made GET);
// absoluteURI asks for the absolute-form (a request to an HTTP proxy).
func RequestTarget(req *http.Request, method string, absoluteURI bool) (host, ruri string, err error) {
	host = req.Host
	if host == "" {
		host = req.URL.Host
	}
	host, err = httpguts.PunycodeHostPort(host)
	if err != nil {
		return "", "", err
	}
	if !httpguts.ValidHostHeader(host) {
		// As net/http (golang/go#61431): never send an altered Host.
		if absoluteURI {
			return "", "", errors.New("http: invalid Host header")
		}
		host = ""
	}
	host = removeZone(host)

	ruri = req.URL.RequestURI()
	if absoluteURI && req.URL.Opaque == "" {
		ruri = req.URL.Scheme + "://" + host + ruri
	} else if method == http.MethodConnect && req.URL.Path == "" {
		ruri = host
		if req.URL.Opaque != "" {
			ruri = req.URL.Opaque
		}
	}
	if strings.IndexFunc(ruri, isCTL) >= 0 {
		return "", "", errors.New("net/http: can't write control character in Request.URL")
	}
	return host, ruri, nil
}

// RequestFraming is how a request's body goes on the wire (RFC 9112 §6),
// chosen by FrameRequest.
type RequestFraming struct {
	// Body is what is written as the body: the caller's, or a reader
	// over it that has read its first byte ahead; nil: no body.
	Body io.Reader
	// CL is the declared length: 0 with no body, -1 if unknown.
	CL      int64
	Chunked bool // Transfer-Encoding: chunked
	// FlushHead: the body's first byte was waited for, so the head goes
	// out before the body (golang/go#14315).
	FlushHead bool
}

// FrameRequest chooses the framing of req's body (nil: none), following
// net/http's transferWriter: a body of unknown length is chunked, except
// for CONNECT, whose body is raw. body is the caller's body, or what is
// left of it once its first byte was read ahead (nil: it turned out
// empty), and flushHead whether that read had to wait. method is the
// request's method ("" already made GET).
func FrameRequest(req *http.Request, method string, body io.Reader, flushHead bool) RequestFraming {
	f := RequestFraming{Body: body, CL: req.ContentLength, FlushHead: flushHead}
	if f.Body == nil {
		f.CL = 0
	} else if f.CL == 0 {
		f.CL = -1 // a body of unknown length
	}
	f.Chunked = f.Body != nil && method != http.MethodConnect &&
		(f.CL < 0 || (len(req.TransferEncoding) > 0 && req.TransferEncoding[0] == "chunked"))
	return f
}

// CheckTrailer checks the trailer of a chunked request as net/http's
// transferWriter does: it may not frame the body anew (RFC 9110 §6.5.1:
// fields that frame the message are not sent as trailers).
func CheckTrailer(trailer http.Header) error {
	for k := range trailer {
		switch k = http.CanonicalHeaderKey(k); k {
		case "Transfer-Encoding", "Trailer", "Content-Length":
			return fmt.Errorf("invalid Trailer key %q", k)
		}
	}
	return nil
}

// WriteHead writes the head of req to w from h: the request line, the
// Host and User-Agent fields, the body's framing fields, the caller's
// fields, then the transport's own (Connection: close, Accept-Encoding:
// gzip, Proxy-Authorization), each reported to trace (if not nil) as
// written. It returns w's error at the end of the head.
func WriteHead(w *bufio.Writer, req *http.Request, trace *httptrace.ClientTrace, h *Head) error {
	w.WriteString(h.Method)
	w.WriteByte(' ')
	w.WriteString(h.Target)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(h.Host)
	w.WriteString("\r\n")
	if trace != nil && trace.WroteHeaderField != nil {
		trace.WroteHeaderField("Host", []string{h.Host})
	}
	if ua := userAgent(req.Header); ua != "" {
		writeField(w, trace, "User-Agent", ua)
	}
	writeFramingFields(w, trace, h.Method, req.Trailer, h.Framing)
	writeHeaderFields(w, trace, req.Header)
	if h.Close && !httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close") {
		writeField(w, trace, "Connection", "close")
	}
	if h.Gzip {
		writeField(w, trace, "Accept-Encoding", "gzip")
	}
	if h.ProxyAuth != "" {
		writeField(w, trace, "Proxy-Authorization", h.ProxyAuth)
	}
	_, err := w.WriteString("\r\n")
	if trace != nil && trace.WroteHeaders != nil {
		trace.WroteHeaders()
	}
	return err
}

// userAgent is the User-Agent a request with header h sends: the
// caller's, none if the caller set it empty, else defaultUserAgent.
func userAgent(h http.Header) string {
	v, ok := h["User-Agent"]
	switch {
	case !ok:
		return defaultUserAgent
	case len(v) > 0:
		return v[0]
	}
	return ""
}

// writeFramingFields writes the fields that frame a request's body (f):
// Transfer-Encoding and Trailer (the trailer's field names, sorted), or
// Content-Length, which a POST, PUT or PATCH without a body sends as 0.
func writeFramingFields(w *bufio.Writer, trace *httptrace.ClientTrace, method string, trailer http.Header, f RequestFraming) {
	switch {
	case f.Chunked:
		writeField(w, trace, "Transfer-Encoding", "chunked")
		if len(trailer) > 0 {
			keys := make([]string, 0, len(trailer))
			for k := range trailer {
				keys = append(keys, http.CanonicalHeaderKey(k))
			}
			slices.Sort(keys)
			writeField(w, trace, "Trailer", strings.Join(keys, ","))
		}
	case f.CL > 0 && (trace == nil || trace.WroteHeaderField == nil):
		// The length is written in place, with no string made for it.
		w.WriteString("Content-Length: ")
		w.Write(strconv.AppendInt(w.AvailableBuffer(), f.CL, 10))
		w.WriteString("\r\n")
	case f.CL > 0:
		writeField(w, trace, "Content-Length", strconv.FormatInt(f.CL, 10))
	case f.CL == 0 && (method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch):
		// Many servers expect a Content-Length for these methods.
		writeField(w, trace, "Content-Length", "0")
	}
}

// writeHeaderFields writes the caller's header h, but for the fields the
// transport writes itself (Host, User-Agent and the framing fields).
func writeHeaderFields(w *bufio.Writer, trace *httptrace.ClientTrace, h http.Header) {
	for k, vv := range h {
		if k == "User-Agent" || transportField(k) {
			continue
		}
		if trace == nil || trace.WroteHeaderField == nil {
			for _, v := range vv {
				writeField(w, nil, k, v)
			}
			continue
		}
		// As net/http's Header.write: one report per field name, with
		// all its values as written.
		written := make([]string, len(vv))
		for i, v := range vv {
			written[i] = writeField(w, nil, k, v)
		}
		trace.WroteHeaderField(k, written)
	}
}

// transportField reports whether k names, in any case, a field the
// transport writes itself from the request's fields (Host, and those that
// frame the body). net/http skips only their canonical spelling, and
// writes a second Host or Content-Length for "host" or "content-length" in
// the header map; RFC 9112 §3.2 and §6.3 make a server refuse either (or
// two of its hops read the request differently: smuggling).
func transportField(k string) bool {
	switch len(k) {
	case len("Host"):
		return strings.EqualFold(k, "Host")
	case len("Trailer"):
		return strings.EqualFold(k, "Trailer")
	case len("Content-Length"):
		return strings.EqualFold(k, "Content-Length")
	case len("Transfer-Encoding"):
		return strings.EqualFold(k, "Transfer-Encoding")
	}
	return false
}

// A ChunkWriter writes what is written to it to w as chunks of the
// chunked coding (RFC 9112 §7.1), one per Write, and flushes each.
type ChunkWriter struct{ w *bufio.Writer }

// NewChunkWriter returns a ChunkWriter that writes to w.
func NewChunkWriter(w *bufio.Writer) *ChunkWriter { return &ChunkWriter{w: w} }

// Write writes p as one chunk, then flushes w.
func (cw *ChunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	cw.w.WriteString(strconv.FormatInt(int64(len(p)), 16))
	cw.w.WriteString("\r\n")
	cw.w.Write(p)
	cw.w.WriteString("\r\n")
	// As net/http (internal.FlushAfterChunkWriter): each chunk reaches the
	// server as soon as the caller's body yields it, so that a streaming
	// body streams.
	if err := cw.w.Flush(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// WriteLastChunk ends a chunked body on w: the last chunk, the trailer
// fields and the empty line (RFC 9112 §7.1, §7.1.2). It returns w's error.
func WriteLastChunk(w *bufio.Writer, trailer http.Header) error {
	w.WriteString("0\r\n")
	for k, vv := range trailer {
		for _, v := range vv {
			writeField(w, nil, k, v)
		}
	}
	_, err := w.WriteString("\r\n")
	return err
}

// writeField writes the field line k: v to w, v trimmed of surrounding
// space, and reports it to trace (if not nil). It returns v as written.
func writeField(w *bufio.Writer, trace *httptrace.ClientTrace, k, v string) string {
	// Values were validated (no CR or LF); trim as net/http does.
	v = strings.TrimSpace(v)
	w.WriteString(k)
	w.WriteString(": ")
	w.WriteString(v)
	w.WriteString("\r\n")
	if trace != nil && trace.WroteHeaderField != nil {
		trace.WroteHeaderField(k, []string{v})
	}
	return v
}

func isCTL(r rune) bool { return r < ' ' || r == 0x7f }

// removeZone removes an IPv6 zone identifier from host, as net/http does.
func removeZone(host string) string {
	if !strings.HasPrefix(host, "[") {
		return host
	}
	i := strings.LastIndex(host, "]")
	if i < 0 {
		return host
	}
	j := strings.LastIndex(host[:i], "%")
	if j < 0 {
		return host
	}
	return host[:j] + host[i:]
}
