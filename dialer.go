package pipelined

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/idna"
)

// poolKey identifies the connections that may serve a request: a pool per
// (proxy, scheme, target address).
type poolKey struct {
	scheme    string // "http" or "https"
	addr      string // host:port of the target
	proxy     string // proxy URL without credentials, or ""
	proxyAuth string // Proxy-Authorization value for HTTP proxies
}

func (k poolKey) String() string {
	s := k.scheme + "://" + k.addr
	if k.proxy != "" {
		s += " via " + k.proxy
	}
	return s
}

// keyFor returns the pool key for req.
func (t *Transport) keyFor(req *http.Request) (poolKey, error) {
	addr, err := canonicalAddr(req.URL.Scheme, req.URL.Host)
	if err != nil {
		return poolKey{}, err
	}
	return poolKey{scheme: req.URL.Scheme, addr: addr}, nil
}

// canonicalAddr returns host:port for a URL host, with the scheme's default
// port and an ASCII (IDNA) host, as net/http dials.
func canonicalAddr(scheme, hostport string) (string, error) {
	host, port := hostport, ""
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && !strings.Contains(hostport[i:], "]") {
		host, port = hostport[:i], hostport[i+1:]
	}
	if port == "" {
		port = "80"
		if scheme == "https" {
			port = "443"
		}
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if !isASCII(host) {
		h, err := idna.Lookup.ToASCII(host)
		if err != nil {
			return "", err
		}
		host = h
	}
	return net.JoinHostPort(host, port), nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

var defaultDialer = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}

// dial opens a connection for key: TCP, then TLS for https.
func (t *Transport) dial(ctx context.Context, key poolKey) (net.Conn, *tls.ConnectionState, error) {
	dial := t.opts.DialContext
	if dial == nil {
		dial = defaultDialer.DialContext
	}
	conn, err := dial(ctx, "tcp", key.addr)
	if err != nil {
		return nil, nil, err
	}
	if conn == nil {
		return nil, nil, errors.New("pipelined: DialContext returned (nil, nil)")
	}
	if key.scheme != "https" {
		return conn, nil, nil
	}
	host, _, _ := net.SplitHostPort(key.addr)
	tc := tls.Client(conn, &tls.Config{ServerName: host, NextProtos: []string{"http/1.1"}})
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, nil, err
	}
	st := tc.ConnectionState()
	return tc, &st, nil
}
