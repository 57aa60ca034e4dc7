package h1

import (
	"bufio"
	"io"
	"net/http"
)

// This file holds the chunked decoder (RFC 9112 §7.1). A ChunkedReader
// has no lock: it is owned by the reader of the body it decodes.

// A ChunkedReader decodes a chunked body (RFC 9112 §7.1) strictly from
// br. Chunk sizes are bounded, chunk extensions are skipped within the
// line limit, and the trailer section is parsed like a header block.
type ChunkedReader struct {
	br      *bufio.Reader
	n       int64 // bytes left in the current chunk
	started bool  // a chunk's data was begun (so a CRLF is due at its end)
	done    bool
	err     error
	trailer http.Header // received trailer fields, set at EOF
	limit   int64       // bound on one size line and on the trailer section
	// Raw, if set, is br's own source: with br empty, chunk data is read
	// from it directly, together with what follows the chunk (readRaw).
	// Set by the owner before the first Read.
	Raw RawReader
}

// RawReader is the source beneath a bufio.Reader: Unread hands bytes
// read from it back, to be read again first.
type RawReader interface {
	io.Reader
	Unread(b []byte)
}

// NewChunkedReader returns a ChunkedReader of the chunked body that
// follows in br; limit bounds one size line and the trailer section.
func NewChunkedReader(br *bufio.Reader, limit int64) *ChunkedReader {
	return &ChunkedReader{br: br, limit: limit}
}

// Trailer returns the trailer fields received, once Read has returned
// io.EOF; nil before, or if there were none.
func (cr *ChunkedReader) Trailer() http.Header { return cr.trailer }

// Read reads chunk data into p; it returns io.EOF at the body's end, once
// the trailer section has been read.
func (cr *ChunkedReader) Read(p []byte) (int, error) {
	if more, err := cr.More(); !more {
		if err == nil {
			err = io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > cr.n {
		if cr.Raw != nil && cr.br.Buffered() == 0 {
			return cr.readRaw(p)
		}
		p = p[:cr.n]
	}
	return cr.took(cr.br.Read(p))
}

// took accounts for a read of n bytes of the current chunk's data and its
// error: an end of stream within a chunk is unexpected, and any error is
// final.
func (cr *ChunkedReader) took(n int, err error) (int, error) {
	cr.n -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		cr.err = err
	}
	return n, err
}

// More reports whether chunk data is due, reading the next size line if
// the current chunk is done (and the trailer section after the last); it
// returns false and nil at the body's end.
func (cr *ChunkedReader) More() (bool, error) {
	if cr.err != nil {
		return false, cr.err
	}
	if cr.n == 0 && !cr.done {
		if err := cr.nextChunk(); err != nil {
			cr.err = err
			return false, err
		}
	}
	return !cr.done, nil
}

// readRaw reads the rest of the current chunk into p directly from
// cr.Raw, br being empty, together with what follows it up to br's size:
// the chunks that follow are decoded in place as long as their size
// lines are plain and whole there ("\r\n" hex digits "\r\n"), and what is
// left from the first byte not decoded (a size line cut off or with
// extensions, the last chunk, the next response) goes back to br through
// cr.Raw. So a read from the network takes a chunk's data and the next
// size line, or several small chunks. Through br alone, a size line
// filled br with the start of its chunk's data, and the rest of it came
// in a read of its own: two reads per chunk (16 KiB chunks of 256 KiB
// bodies were read at 0.9-0.95 times net/http's speed). Reading further
// ahead saved few reads more and cost a copy of the data in place.
func (cr *ChunkedReader) readRaw(p []byte) (int, error) {
	p = p[:min(int64(len(p)), cr.n+int64(cr.br.Size()))]
	m, err := cr.Raw.Read(p)
	if int64(m) <= cr.n {
		return cr.took(m, err)
	}
	// Past this chunk's data: a read that brought bytes reports no error
	// (the next read meets it again).
	w := int(cr.n)
	cr.n = 0
	i := w
	for i < m {
		size, head := plainChunkHead(p[i:m])
		if head == 0 || size == 0 {
			break // for nextChunk: it parses the last chunk and anything else
		}
		i += head
		take := int(min(size, int64(m-i)))
		copy(p[w:], p[i:i+take])
		w, i = w+take, i+take
		cr.n = size - int64(take)
	}
	if i < m {
		cr.Raw.Unread(p[i:m])
		// Into br at once (it is empty, and its size bounds what was
		// read past the chunk): br holds all that came and is not parsed.
		cr.br.Peek(m - i)
	}
	return w, nil
}

// plainChunkHead parses the end of a chunk's data and the next size line
// at the start of b when both are plain and whole ("\r\n" 1-15 hex
// digits "\r\n", RFC 9112 §7.1); it returns the chunk's size and the
// length of what it parsed, or 0, 0.
func plainChunkHead(b []byte) (size int64, head int) {
	if len(b) < 5 || b[0] != '\r' || b[1] != '\n' {
		return 0, 0
	}
	for i := 2; i < len(b); i++ {
		if b[i] == '\r' && i > 2 && i+1 < len(b) && b[i+1] == '\n' {
			return size, i + 2
		}
		d, ok := hexDigit(b[i])
		if !ok || i-2 == 15 { // longer: nextChunk's error
			return 0, 0
		}
		size = size<<4 | int64(d)
	}
	return 0, 0
}

// hexDigit returns the value of the hexadecimal digit c (RFC 5234 HEXDIG,
// either case).
func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// nextChunk consumes the CRLF ending the previous chunk, then the next size
// line, and, for the last chunk, the trailer section.
func (cr *ChunkedReader) nextChunk() error {
	if cr.started {
		var crlf [2]byte
		if _, err := io.ReadFull(cr.br, crlf[:]); err != nil {
			return unexpected(err)
		}
		if crlf != [2]byte{'\r', '\n'} {
			return framingErrorf("chunk data not followed by CRLF")
		}
	}
	budget := cr.limit
	line, err := readLine(cr.br, &budget, cr.limit)
	if err != nil {
		return unexpected(err)
	}
	size, err := parseChunkSize(line)
	if err != nil {
		return err
	}
	cr.started = true
	if size > 0 {
		cr.n = size
		return nil
	}
	// RFC 9112 §7.1.2: the trailer section ends with an empty line.
	budget = cr.limit
	for {
		line, err := readLine(cr.br, &budget, cr.limit)
		if err != nil {
			return unexpected(err)
		}
		if len(line) == 0 {
			break
		}
		i := indexColon(line)
		if i <= 0 || line[0] == ' ' || line[0] == '\t' || !validFieldName(line[:i]) {
			return framingErrorf("malformed trailer line %q", truncate(line))
		}
		value := trimOWS(line[i+1:])
		if !validFieldValue(value) {
			return framingErrorf("invalid trailer field value")
		}
		if cr.trailer == nil {
			cr.trailer = make(http.Header)
		}
		key := canonicalKey(line[:i])
		cr.trailer[key] = append(cr.trailer[key], string(value))
	}
	cr.done = true
	return nil
}

// parseChunkSize parses "chunk-size [ chunk-ext ]" (RFC 9112 §7.1).
func parseChunkSize(line []byte) (int64, error) {
	var n int64
	i := 0
	for ; i < len(line); i++ {
		d, ok := hexDigit(line[i])
		if !ok {
			goto ext
		}
		if i >= 15 {
			return 0, framingErrorf("chunk length too large")
		}
		n = n<<4 | int64(d)
	}
ext:
	if i == 0 {
		return 0, framingErrorf("invalid chunk size line %q", truncate(line))
	}
	rest := trimOWS(line[i:])
	if len(rest) > 0 && rest[0] != ';' {
		return 0, framingErrorf("invalid chunk size line %q", truncate(line))
	}
	if !validFieldValue(rest) {
		return 0, framingErrorf("control character in chunk extension")
	}
	return n, nil
}

func indexColon(b []byte) int {
	for i, c := range b {
		if c == ':' {
			return i
		}
	}
	return -1
}

// unexpected turns an end of stream within a body into
// io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
