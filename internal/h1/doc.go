// Package h1 is the HTTP/1.1 wire format of the transport's connections:
// a request's head and the framing of its body as they are written (RFC
// 9112 §3, §6, §7), a response's head as it is read, strictly, with the
// framing of its body (RFC 9112 §2-§6), the chunked decoder (§7.1), and
// the Keep-Alive header's parameters. It knows nothing of connections,
// pools or retries: its functions take a request, a header or a
// bufio.Reader or bufio.Writer and return a value, bytes or an error.
//
// Its errors keep net/http's texts where callers compare them with
// net/http's, and the package's own ("pipelined: ...") elsewhere. Nothing
// here holds a lock; a ChunkedReader is owned by whoever reads its body.
package h1
