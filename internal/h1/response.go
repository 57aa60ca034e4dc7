package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// This file parses response heads strictly (RFC 9112 §2-§6) and works
// out the framing of their bodies (§6.3). Anything the RFC allows a
// recipient to either repair or reject (bare CR, bare LF, obs-fold,
// whitespace before the first field) is rejected: on a pipelined
// connection a lenient guess that turns out wrong hands every later
// response to the wrong request. Its functions hold no state and take no
// lock: the caller owns the bufio.Reader they read.

// BodyKind is how a response body is delimited (RFC 9112 §6.3).
type BodyKind uint8

// The kinds of response body.
const (
	BodyNone       BodyKind = iota // HEAD, 1xx, 204, 304: ends with the header block
	BodyLength                     // Content-Length
	BodyChunked                    // Transfer-Encoding: chunked
	BodyUntilClose                 // neither: the body ends when the server closes
)

// Framing is what the reader needs to know to find the end of a response
// body.
type Framing struct {
	Kind BodyKind
	N    int64 // for BodyLength
}

// readLine reads one CRLF-terminated line of a head and returns it without
// the CRLF. The slice is valid until the next read from br. budget is
// decremented by the bytes consumed; when it goes negative, readLine fails.
func readLine(br *bufio.Reader, budget *int64, limit int64) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		buf := append([]byte(nil), line...)
		for err == bufio.ErrBufferFull {
			if int64(len(buf)) > *budget {
				return nil, &HeaderTooLargeError{limit}
			}
			line, err = br.ReadSlice('\n')
			buf = append(buf, line...)
		}
		line = buf
	}
	*budget -= int64(len(line))
	if *budget < 0 {
		return nil, &HeaderTooLargeError{limit}
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	// RFC 9112 §2.2: a line ends with CRLF. A recipient MAY accept a bare
	// LF and MUST reject or replace a bare CR; we reject both.
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, framingErrorf("line not terminated by CRLF")
	}
	line = line[:len(line)-2]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, framingErrorf("bare CR in header")
	}
	return line, nil
}

// ReadResponseHead reads one response head from br for a request with the
// given method, skipping interim (1xx) responses other than 101, each of
// which is passed to interim if it is not nil (interim returns
// ErrResetHeaderLimit to have limit apply to each head alone, or an error
// that ends the read). The returned response has Status, StatusCode,
// Proto*, Header, ContentLength, TransferEncoding, Close and Trailer
// (declared keys) set as net/http sets them; the body framing is returned
// separately. A head longer than limit bytes fails with a
// *HeaderTooLargeError, a malformed one with a *FramingError.
func ReadResponseHead(br *bufio.Reader, method string, limit int64, interim func(code int, h http.Header) error) (*http.Response, Framing, error) {
	budget := limit
	for {
		resp, err := readOneHead(br, &budget, limit)
		if err != nil {
			return nil, Framing{}, err
		}
		code := resp.StatusCode
		if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
			// RFC 9112 §9.2: an interim response is not the final one; keep
			// reading for the final response of the same request.
			if interim != nil {
				if err := interim(code, resp.Header); err == ErrResetHeaderLimit {
					// The caller saw this 1xx and bounds their number
					// itself: reset the limit, as net/http does.
					budget = limit
				} else if err != nil {
					return nil, Framing{}, err
				}
			}
			continue
		}
		f, err := bodyFraming(resp, method)
		if err != nil {
			return nil, Framing{}, err
		}
		return resp, f, nil
	}
}

// readOneHead reads one response head (status line and header fields).
// When the whole head is already in br's buffer, as it is for almost every
// response, it is parsed in place by readBufferedHead; otherwise, or when
// that finds anything wrong, readHeadLines reads it line by line and
// reports the error.
func readOneHead(br *bufio.Reader, budget *int64, limit int64) (*http.Response, error) {
	if br.Buffered() == 0 {
		// Wait for the head's first bytes. An error here is what
		// readHeadLines's first read would return.
		if _, err := br.Peek(1); err != nil {
			return nil, err
		}
	}
	if resp, n := readBufferedHead(br, *budget); resp != nil {
		br.Discard(n)
		*budget -= int64(n)
		return resp, nil
	}
	return readHeadLines(br, budget, limit)
}

// newResponse returns a response and a slice of n strings for the values
// of its header. For n up to 16 both come from one allocation, sized in
// three steps so that a small head does not carry a large array.
func newResponse(n int) (*http.Response, []string) {
	switch {
	case n <= 4:
		a := &struct {
			resp http.Response
			vals [4]string
		}{}
		return &a.resp, a.vals[:n:n]
	case n <= 8:
		a := &struct {
			resp http.Response
			vals [8]string
		}{}
		return &a.resp, a.vals[:n:n]
	case n <= 16:
		a := &struct {
			resp http.Response
			vals [16]string
		}{}
		return &a.resp, a.vals[:n:n]
	}
	return &http.Response{}, make([]string, n)
}

var crlfcrlf = []byte("\r\n\r\n")

// readBufferedHead parses the head at the start of br's buffer if it is
// complete there, valid, and at most budget bytes long. It returns the
// response and the head's length, which the caller discards from br; or nil
// if any of that does not hold, having consumed nothing. The head's bytes
// are copied into one string; the status, the header names that are not
// common ones and all values are substrings of it, and the values share one
// backing array (the response's own when there are few).
func readBufferedHead(br *bufio.Reader, budget int64) (*http.Response, int) {
	buf, _ := br.Peek(br.Buffered())
	end := bytes.Index(buf, crlfcrlf)
	if end < 0 || int64(end+4) > budget {
		return nil, 0
	}
	end += 4
	head := buf[:end]
	// Every line ends with LF: the status line, the field lines, the empty
	// line. A bare LF inside makes a line fail the CRLF check below.
	n := bytes.Count(head, []byte{'\n'}) - 2
	eol := bytes.IndexByte(head, '\n')
	line := head[:eol]
	if len(line) < 2 || line[len(line)-1] != '\r' || bytes.IndexByte(line[:len(line)-1], '\r') >= 0 {
		return nil, 0
	}
	resp, vals := newResponse(n)
	if parseStatusLine(line[:len(line)-1], resp) != nil {
		return nil, 0
	}
	str := string(head)
	resp.Status = str[9 : eol-1]
	h := make(http.Header, n)
	lastKey, lastStart := "", 0
	pos := eol + 1
	for k := range n {
		eol = pos + bytes.IndexByte(head[pos:], '\n')
		line := head[pos:eol]
		if len(line) < 2 || line[len(line)-1] != '\r' {
			return nil, 0
		}
		line = line[:len(line)-1]
		if line[0] == ' ' || line[0] == '\t' || bytes.IndexByte(line, '\r') >= 0 {
			return nil, 0
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !validFieldName(line[:colon]) {
			return nil, 0
		}
		vs, ve := colon+1, len(line)
		for vs < ve && (line[vs] == ' ' || line[vs] == '\t') {
			vs++
		}
		for ve > vs && (line[ve-1] == ' ' || line[ve-1] == '\t') {
			ve--
		}
		if !validFieldValue(line[vs:ve]) {
			return nil, 0
		}
		key := commonKey(line[:colon])
		if key == "" {
			// Returns its argument when already canonical.
			key = textproto.CanonicalMIMEHeaderKey(str[pos : pos+colon])
		}
		vals[k] = str[pos+vs : pos+ve]
		switch vv, ok := h[key]; {
		case !ok:
			h[key] = vals[k : k+1 : k+1]
			lastKey, lastStart = key, k
		case key == lastKey:
			// Repeated on consecutive lines (Set-Cookie, Vary): the values
			// are already next to each other.
			h[key] = vals[lastStart : k+1 : k+1]
		default:
			h[key] = append(vv, vals[k])
			lastKey = ""
		}
		pos = eol + 1
	}
	resp.Header = h
	return resp, end
}

// readHeadLines reads one response head line by line, for heads that are
// not complete in the buffer (or not valid: it reports why).
func readHeadLines(br *bufio.Reader, budget *int64, limit int64) (*http.Response, error) {
	line, err := readLine(br, budget, limit)
	if err != nil {
		return nil, err
	}
	resp := &http.Response{}
	if err := parseStatusLine(line, resp); err != nil {
		return nil, err
	}
	// The head's text is gathered into one buffer and converted to one
	// string; names and values are substrings of it, and all values share
	// one backing array, as textproto does.
	var spanBuf [32]fieldSpan
	spans := spanBuf[:0]
	var textBuf [1024]byte
	text := append(textBuf[:0], line[9:]...) // Status
	statusLen := len(text)
	for first := true; ; first = false {
		line, err := readLine(br, budget, limit)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			if first {
				// RFC 9112 §2.2: whitespace between the start-line and the
				// first field.
				return nil, framingErrorf("whitespace before first header field")
			}
			// RFC 9112 §5.2: obs-fold.
			return nil, framingErrorf("obsolete line folding in header")
		}
		i := bytes.IndexByte(line, ':')
		if i <= 0 {
			return nil, framingErrorf("malformed header line %q", truncate(line))
		}
		name, value := line[:i], trimOWS(line[i+1:])
		// RFC 9112 §5.1: no whitespace between field name and colon.
		if !validFieldName(name) {
			return nil, framingErrorf("invalid header field name %q", truncate(name))
		}
		if !validFieldValue(value) {
			return nil, framingErrorf("invalid header field value for %q", truncate(name))
		}
		sp := fieldSpan{nameStart: len(text)}
		sp.key = commonKey(name)
		text = append(text, name...)
		sp.start = len(text)
		text = append(text, value...)
		sp.end = len(text)
		spans = append(spans, sp)
	}
	str := string(text)
	resp.Status = str[:statusLen]
	vals := make([]string, len(spans))
	h := make(http.Header, len(spans))
	for i, sp := range spans {
		if sp.key == "" {
			// Returns its argument when already canonical.
			sp.key = textproto.CanonicalMIMEHeaderKey(str[sp.nameStart:sp.start])
		}
		vals[i] = str[sp.start:sp.end]
		if vv, ok := h[sp.key]; ok {
			h[sp.key] = append(vv, vals[i])
		} else {
			h[sp.key] = vals[i : i+1 : i+1]
		}
	}
	resp.Header = h
	return resp, nil
}

// fieldSpan locates one field value in a head's text.
type fieldSpan struct {
	key                   string // canonical name, if common
	nameStart, start, end int    // name is text[nameStart:start], value text[start:end]
}

func parseStatusLine(line []byte, resp *http.Response) error {
	// RFC 9112 §4: status-line = HTTP-version SP status-code SP [ reason-phrase ]
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return framingErrorf("malformed status line %q", truncate(line))
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return framingErrorf("malformed status code %q", truncate(line))
		}
		code = code*10 + int(c-'0')
	}
	if code < 100 {
		return framingErrorf("malformed status code %q", truncate(line))
	}
	for _, c := range line[12:] {
		if c == 0 || (c < ' ' && c != '\t') || c == 0x7f {
			return framingErrorf("control character in status line")
		}
	}
	resp.StatusCode = code
	resp.ProtoMajor, resp.ProtoMinor = 1, int(line[7]-'0')
	if resp.ProtoMinor == 1 {
		resp.Proto = "HTTP/1.1"
	} else {
		resp.Proto = "HTTP/1.0"
	}
	return nil
}

// IsProtocolSwitch reports whether the header of a 101 response switches
// the connection to another protocol, as net/http's
// Response.isProtocolSwitch: it names one (Upgrade) and says so
// (Connection: upgrade).
func IsProtocolSwitch(h http.Header) bool {
	up := h["Upgrade"]
	return len(up) > 0 && up[0] != "" && httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade")
}

// bodyFraming applies RFC 9112 §6.3 to a final response head and sets the
// fields of resp that net/http derives from it.
func bodyFraming(resp *http.Response, method string) (Framing, error) {
	h := resp.Header
	te, hasTE := h["Transfer-Encoding"]
	cls, hasCL := h["Content-Length"]
	chunked := false
	if hasTE {
		if resp.ProtoMinor == 0 {
			// RFC 9112 §6.1: HTTP/1.0 with Transfer-Encoding has faulty framing.
			return Framing{}, framingErrorf("Transfer-Encoding in an HTTP/1.0 response")
		}
		if hasCL {
			// RFC 9112 §6.3 ¶3, §11.2: both headers is how responses are
			// smuggled; treat it as an error, not as "TE wins".
			return Framing{}, framingErrorf("both Transfer-Encoding and Content-Length")
		}
		if len(te) != 1 || !strings.EqualFold(strings.TrimSpace(te[0]), "chunked") {
			// RFC 9112 §6.3 ¶4 would read a non-chunked coding until close;
			// like net/http, we do not support other codings.
			return Framing{}, framingErrorf("unsupported transfer encoding %q", te)
		}
		chunked = true
		delete(h, "Transfer-Encoding")
		resp.TransferEncoding = []string{"chunked"}
	}
	var n int64 = -1
	if hasCL {
		var err error
		n, err = parseContentLength(cls)
		if err != nil {
			return Framing{}, err
		}
		if len(cls) > 1 || strings.IndexByte(cls[0], ',') >= 0 {
			// Keep one value, as net/http does with duplicates.
			h["Content-Length"] = []string{strconv.FormatInt(n, 10)}
		}
	}
	resp.Close = shouldClose(resp)
	noBody := method == http.MethodHead || resp.StatusCode/100 == 1 ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	switch {
	case noBody:
		// RFC 9112 §6.3 ¶1: these responses end with the header block,
		// whatever their headers say. net/http reports the declared length
		// for HEAD and 0 for the statuses.
		if method == http.MethodHead && !chunked {
			resp.ContentLength = n
		} else if method == http.MethodHead {
			resp.ContentLength = -1
		} else {
			resp.ContentLength = 0
		}
		return Framing{Kind: BodyNone}, nil
	case chunked:
		resp.ContentLength = -1
		if err := declareTrailers(resp); err != nil {
			return Framing{}, err
		}
		return Framing{Kind: BodyChunked}, nil
	case hasCL:
		resp.ContentLength = n
		return Framing{Kind: BodyLength, N: n}, nil
	default:
		// RFC 9112 §6.3 ¶8: read until the connection closes.
		resp.ContentLength = -1
		resp.Close = true
		return Framing{Kind: BodyUntilClose}, nil
	}
}

// parseContentLength parses one or more Content-Length field lines. RFC 9112
// §6.3 ¶5: a list of identical values is one value; anything else that is
// not a single non-negative decimal integer is an unrecoverable error.
func parseContentLength(vals []string) (int64, error) {
	var n int64 = -1
	for _, v := range vals {
		for part := range strings.SplitSeq(v, ",") {
			part = strings.TrimSpace(part)
			m, ok := parseDecimal(part)
			if !ok {
				return -1, framingErrorf("invalid Content-Length %q", v)
			}
			if n >= 0 && m != n {
				return -1, framingErrorf("differing Content-Length values %q", vals)
			}
			n = m
		}
	}
	return n, nil
}

func parseDecimal(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// shouldClose reports whether the server said it closes the connection
// after resp, and removes "Connection: close" from the header as net/http
// does.
func shouldClose(resp *http.Response) bool {
	conn := resp.Header["Connection"]
	if resp.ProtoMinor == 0 {
		// RFC 9112 §9.3: HTTP/1.0 is not persistent without keep-alive.
		return !httpguts.HeaderValuesContainsToken(conn, "keep-alive")
	}
	if httpguts.HeaderValuesContainsToken(conn, "close") {
		delete(resp.Header, "Connection")
		return true
	}
	return false
}

// declareTrailers moves the Trailer header of a chunked response into
// resp.Trailer, with nil values until the body has been read, as net/http
// does.
func declareTrailers(resp *http.Response) error {
	vv, ok := resp.Header["Trailer"]
	if !ok {
		return nil
	}
	delete(resp.Header, "Trailer")
	tr := make(http.Header)
	for _, v := range vv {
		for key := range strings.SplitSeq(v, ",") {
			key = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(key))
			switch key {
			case "Transfer-Encoding", "Trailer", "Content-Length":
				return framingErrorf("bad trailer key %q", key)
			case "":
				continue
			}
			tr[key] = nil
		}
	}
	if len(tr) > 0 {
		resp.Trailer = tr
	}
	return nil
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func validFieldName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tokenByte[c] {
			return false
		}
	}
	return true
}

// tokenByte reports the bytes allowed in a token (RFC 9110 §5.6.2).
var tokenByte = func() (t [256]bool) {
	for c := range 128 {
		t[c] = httpguts.IsTokenRune(rune(c))
	}
	return t
}()

// validFieldValue reports whether b is a valid field value (RFC 9110 §5.5):
// no control characters other than HTAB, no NUL, CR or LF.
func validFieldValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// canonicalKey returns the canonical form of a header name without
// allocating for common names.
func canonicalKey(name []byte) string {
	if k := commonKey(name); k != "" {
		return k
	}
	return textproto.CanonicalMIMEHeaderKey(string(name))
}

// commonKeys are the canonical forms of header names that responses
// commonly carry, by length (commonKey).
var commonKeys = func() (t [32][]string) {
	for _, k := range []string{
		"Accept-Ranges", "Access-Control-Allow-Origin", "Age", "Alt-Svc", "Cache-Control",
		"Connection", "Content-Disposition", "Content-Encoding", "Content-Language",
		"Content-Length", "Content-Location", "Content-Range", "Content-Security-Policy",
		"Content-Type", "Date", "Etag", "Expires", "Keep-Alive", "Last-Modified", "Link",
		"Location", "Pragma", "Retry-After", "Server", "Set-Cookie", "Strict-Transport-Security",
		"Trailer", "Transfer-Encoding", "Upgrade", "Vary", "Via", "Www-Authenticate",
		"X-Content-Type-Options", "X-Frame-Options", "X-Powered-By", "X-Request-Id",
	} {
		t[len(k)] = append(t[len(k)], k)
	}
	return t
}()

// commonKey returns the canonical form of name if it is one of
// commonKeys, in any case ("content-length", "ETag"), or "". It does not
// allocate. name must be a valid token: then the only bytes that fold to a
// letter or '-' under |0x20 are that letter in either case, and '-'.
func commonKey(name []byte) string {
	if len(name) >= len(commonKeys) {
		return ""
	}
next:
	for _, k := range commonKeys[len(name)] {
		if string(name) == k {
			return k
		}
		for i := range len(k) {
			if name[i]|0x20 != k[i]|0x20 {
				continue next
			}
		}
		return k
	}
	return ""
}

func truncate(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "..."
	}
	return string(b)
}
