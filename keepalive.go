package pipelined

import (
	"errors"
	"net/http"
	"strings"
	"time"
)

// Bounds on what a Keep-Alive header may announce. A larger value is
// capped: a server that keeps connections open for more than a day, or for
// more than a million requests, has in practice announced no limit.
const (
	maxKeepAliveTimeout = 24 * time.Hour
	maxKeepAliveMax     = 1 << 20
)

// keepAliveHint is what a server announced in its Keep-Alive response
// header: how long it keeps an idle connection open (timeout=, in seconds)
// and how many more requests it accepts on this connection (max=).
type keepAliveHint struct {
	timeout    time.Duration // in [0, maxKeepAliveTimeout]; meaningful if hasTimeout
	hasTimeout bool
	max        int // in [0, maxKeepAliveMax]; meaningful if hasMax
	hasMax     bool
}

// parseKeepAlive reads the timeout= and max= parameters of every Keep-Alive
// field line of h. Keep-Alive is the HTTP/1.0 keep-alive header (RFC 2068
// §19.7.1.1, kept for compatibility by RFC 9112 Appendix C.2.2); its
// parameters follow the parameter syntax of RFC 9110 §5.6.6:
//
//	Keep-Alive: timeout=5, max=100
//
// Parsing is tolerant: parameter names are case-insensitive, whitespace
// around "=" and list elements is skipped (RFC 9110 §5.6.3), values may be
// quoted strings (RFC 9110 §5.6.4), empty list elements are ignored (RFC
// 9110 §5.6.1), ";" separates elements as "," does, and anything else
// (unknown parameters, bare tokens, values that are not decimal integers,
// negative numbers) is skipped. A value too large is capped. When a
// parameter appears more than once, in one line or several, the smallest
// value wins: it is the one that is safe to honour.
func parseKeepAlive(h http.Header) (ka keepAliveHint) {
	for _, line := range h.Values("Keep-Alive") {
		for len(line) > 0 {
			var name, value string
			var ok bool
			name, value, ok, line = nextKeepAliveParam(line)
			if !ok {
				continue
			}
			switch {
			case strings.EqualFold(name, "timeout"):
				n, ok := parseKeepAliveInt(value, int64(maxKeepAliveTimeout/time.Second))
				if !ok {
					continue
				}
				d := time.Duration(n) * time.Second
				if !ka.hasTimeout || d < ka.timeout {
					ka.timeout, ka.hasTimeout = d, true
				}
			case strings.EqualFold(name, "max"):
				n, ok := parseKeepAliveInt(value, maxKeepAliveMax)
				if !ok {
					continue
				}
				if !ka.hasMax || int(n) < ka.max {
					ka.max, ka.hasMax = int(n), true
				}
			}
		}
	}
	return ka
}

// nextKeepAliveParam parses one list element of s, "name=value" with
// optional whitespace and a token or quoted-string value, and returns it
// with the rest of s after the element's separator. ok is false for an
// element that is not a parameter (empty, bare token, junk).
func nextKeepAliveParam(s string) (name, value string, ok bool, rest string) {
	s = trimKeepAliveOWS(s)
	i := 0
	for i < len(s) && s[i] != '=' && s[i] != ',' && s[i] != ';' {
		i++
	}
	name = trimKeepAliveOWS(s[:i])
	if i == len(s) || s[i] != '=' {
		if i < len(s) {
			i++ // the separator
		}
		return "", "", false, s[i:]
	}
	s = trimKeepAliveOWS(s[i+1:])
	if len(s) > 0 && s[0] == '"' {
		// quoted-string: backslash escapes the next byte (RFC 9110 §5.6.4).
		var b strings.Builder
		j := 1
		closed := false
		for ; j < len(s); j++ {
			c := s[j]
			if c == '\\' && j+1 < len(s) {
				j++
				b.WriteByte(s[j])
				continue
			}
			if c == '"' {
				closed = true
				j++
				break
			}
			b.WriteByte(c)
		}
		value = b.String()
		s = s[j:]
		// Skip whatever follows the closing quote up to the separator.
		k := 0
		for k < len(s) && s[k] != ',' && s[k] != ';' {
			k++
		}
		junk := trimKeepAliveOWS(s[:k])
		if k < len(s) {
			k++
		}
		return name, value, closed && junk == "" && name != "", s[k:]
	}
	k := 0
	for k < len(s) && s[k] != ',' && s[k] != ';' {
		k++
	}
	value = trimKeepAliveOWS(s[:k])
	if k < len(s) {
		k++
	}
	return name, value, name != "", s[k:]
}

// parseKeepAliveInt parses a non-negative decimal integer (1*DIGIT),
// saturating at limit. Anything else is not a number.
func parseKeepAliveInt(s string, limit int64) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < limit {
			n = n*10 + int64(c-'0')
		}
	}
	if n > limit {
		n = limit
	}
	return n, true
}

// trimKeepAliveOWS removes optional whitespace (SP, HTAB; RFC 9110 §5.6.3) at both
// ends of s.
func trimKeepAliveOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// Honouring the hints. A server that announces timeout=N closes a
// connection idle for N; a request written at that moment meets a closing
// connection (the keep-alive race: net/http's "server closed idle
// connection", Node's ECONNRESET), and a POST then fails with
// ErrServerClosed, since nobody can know whether it ran. So a connection
// whose server announced timeout=N is retired after N minus a margin of
// idleness, before the server closes it; and max=M caps what is assigned
// to the connection at the M requests the server still accepts.

// keepAliveMargin is how long before an announced timeout a connection is
// retired: undici's 2 s, but at most a quarter of the timeout, so that a
// server announcing timeout=1 (Node's keepAliveTimeout set small) still
// gets its connections reused for 750 ms. The margin covers the time from
// the server's write of its response to our reading it, plus the request's
// trip back: a few milliseconds on a LAN, rarely a second on the Internet.
func keepAliveMargin(timeout time.Duration) time.Duration {
	return min(2*time.Second, timeout/4)
}

var (
	errKeepAliveTimeout = errors.New("pipelined: idle connection retired before the server's announced Keep-Alive timeout")
	errKeepAliveMax     = errors.New("pipelined: connection retired at the server's announced Keep-Alive max")
)

// keepAliveLocked applies the hint of a response just read on c, the
// place-th on it (1: the first). p.mu must be held.
func (p *hostPool) keepAliveLocked(c *pconn, ka keepAliveHint, place int) {
	s := &c.s
	if ka.hasTimeout {
		s.kaIdle = ka.timeout - keepAliveMargin(ka.timeout)
		if s.kaIdle <= 0 {
			// timeout=0: the server closes at once when idle.
			s.kaIdle = time.Nanosecond
		}
	}
	if ka.hasMax {
		// Servers read max two ways. Apache counts down: the requests it
		// still accepts after this response (max=99, then 98, ...). Node
		// repeats its maxRequestsPerSocket: the total for the connection
		// (max=3 on every response). Until a second response tells them
		// apart, the smaller reading holds; a value that repeats is a
		// total, one that changes counts down. Requests already assigned
		// behind this response count either way.
		switch {
		case s.kaFirstMax == 0:
			s.kaFirstMax = ka.max + 1 // +1: 0 means not seen
			s.kaLimit = min(place+ka.max, max(ka.max, 1))
		case ka.max+1 == s.kaFirstMax:
			s.kaLimit = max(ka.max, 1)
		default:
			s.kaLimit = place + ka.max
		}
		if s.assigned >= s.kaLimit {
			p.retireLocked(c, CloseKeepAliveEnd)
		}
	}
}

// nearKeepAliveEnd reports whether c has used up half of its announced
// idle time: a request that cannot be retried (a POST) prefers another
// connection, or a new one.
func (s *sched) nearKeepAliveEnd() bool {
	return s.kaIdle > 0 && time.Since(s.idleSince) >= s.kaIdle/2
}

// pastKeepAliveEnd reports whether c has been idle for its whole
// announced idle time, margin included: it takes no new request even if
// its idle timer has not fired yet.
func (s *sched) pastKeepAliveEnd() bool {
	return s.kaIdle > 0 && time.Since(s.idleSince) >= s.kaIdle
}
