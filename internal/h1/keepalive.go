package h1

import (
	"net/http"
	"strings"
	"time"
)

// This file parses the Keep-Alive response header (not TCP keep-alive):
// the parameters timeout= and max=. How a connection honours them is the
// transport's. No state, no lock.

// Bounds on what a Keep-Alive header may announce. A larger value is
// capped: a server that keeps connections open for more than a day, or for
// more than a million requests, has in practice announced no limit.
const (
	MaxKeepAliveTimeout = 24 * time.Hour
	MaxKeepAliveMax     = 1 << 20
)

// KeepAlive is what a server announced in its Keep-Alive response
// header: how long it keeps an idle connection open (timeout=, in seconds)
// and how many more requests it accepts on this connection (max=).
type KeepAlive struct {
	Timeout    time.Duration // in [0, MaxKeepAliveTimeout]; meaningful if HasTimeout
	HasTimeout bool
	Max        int // in [0, MaxKeepAliveMax]; meaningful if HasMax
	HasMax     bool
}

// ParseKeepAlive reads the timeout= and max= parameters of every Keep-Alive
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
func ParseKeepAlive(h http.Header) (ka KeepAlive) {
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
				n, ok := parseKeepAliveInt(value, int64(MaxKeepAliveTimeout/time.Second))
				if !ok {
					continue
				}
				d := time.Duration(n) * time.Second
				if !ka.HasTimeout || d < ka.Timeout {
					ka.Timeout, ka.HasTimeout = d, true
				}
			case strings.EqualFold(name, "max"):
				n, ok := parseKeepAliveInt(value, MaxKeepAliveMax)
				if !ok {
					continue
				}
				if !ka.HasMax || int(n) < ka.Max {
					ka.Max, ka.HasMax = int(n), true
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
