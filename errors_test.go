package pipelined

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestConnErrorMessage: a ConnError names the server's close only when the
// server closed or failed the connection; the transport's own verdicts
// read as themselves, and all keep their matches.
func TestConnErrorMessage(t *testing.T) {
	tests := []struct {
		err         *ConnError
		want        string
		wantClosed  bool // errors.Is(err, ErrServerClosed)
		wantTimeout bool // its Timeout method
	}{
		{&ConnError{Err: io.EOF, Written: true}, "pipelined: server closed connection before answering: EOF", true, false},
		{&ConnError{Err: io.EOF}, "pipelined: connection failed: EOF", false, false},
		{&ConnError{Err: ErrResponseHeaderTimeout, Written: true}, "pipelined: timeout awaiting response headers", true, true},
		{&ConnError{Err: framingErrorf("bad status line"), Written: true}, "pipelined: malformed response: bad status line", true, false},
		{&ConnError{Err: ErrTransportClosed, Written: true}, "pipelined: transport closed", true, false},
		{&ConnError{Err: ErrTransportClosed}, "pipelined: transport closed", false, false},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("ConnError{%v, Written: %v}.Error() = %q, want %q", tt.err.Err, tt.err.Written, got, tt.want)
		}
		if got := errors.Is(tt.err, ErrServerClosed); got != tt.wantClosed {
			t.Errorf("errors.Is(ConnError{%v, Written: %v}, ErrServerClosed) = %v, want %v", tt.err.Err, tt.err.Written, got, tt.wantClosed)
		}
		if got := tt.err.Timeout(); got != tt.wantTimeout {
			t.Errorf("ConnError{%v}.Timeout() = %v, want %v", tt.err.Err, got, tt.wantTimeout)
		}
		if !errors.Is(tt.err, tt.err.Err) {
			t.Errorf("errors.Is(ConnError{%v}, its cause) = false, want true", tt.err.Err)
		}
	}
}

// TestTimeoutErrors: every timeout the transport reports is a net.Error
// whose Timeout method reports true, through RoundTrip and through an
// http.Client (whose *url.Error asks only the error it wraps), wherever
// net/http's Transport reports one; and it matches
// context.DeadlineExceeded wherever net/http's does (the TLS handshake's
// matches it where net/http's does not). Each row runs both transports,
// configured alike (OptionsFrom).
func TestTimeoutErrors(t *testing.T) {
	verifyNoLeaks(t)
	// silent reads what it is sent and never answers.
	silent := startRawServer(t, func(_ int, c net.Conn) { io.Copy(io.Discard, c) })
	// onceThenSilent answers a connection's first request only.
	onceThenSilent := newRawServer(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		io.Copy(io.Discard, br)
	})
	// stalls sends half a body, then nothing until the client gives up.
	stalls := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/length" {
			w.Header().Set("Content-Length", "10")
		}
		io.WriteString(w, "half!")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer stalls.Close()
	// slowH2 speaks HTTP/2 and answers nothing until the client gives up.
	slowH2 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	slowH2.EnableHTTP2 = true
	slowH2.StartTLS()
	defer slowH2.Close()
	h2TLS := slowH2.Client().Transport.(*http.Transport).TLSClientConfig
	unblock := make(chan struct{}) // ends the dials that wait for it
	defer close(unblock)

	const short = 100 * time.Millisecond
	tests := []struct {
		name string
		tr   func() *http.Transport // the settings both transports get
		// do returns the error to judge: a request's, or its body's read.
		do func(t *testing.T, c *http.Client) error
	}{
		{"ResponseHeaderTimeout", func() *http.Transport {
			return &http.Transport{ResponseHeaderTimeout: short}
		}, func(t *testing.T, c *http.Client) error {
			return getErr(context.Background(), c, silent.url("/"))
		}},
		{"ResponseHeaderTimeout, reused connection", func() *http.Transport {
			return &http.Transport{ResponseHeaderTimeout: short}
		}, func(t *testing.T, c *http.Client) error {
			if err := getErr(context.Background(), c, onceThenSilent.url("/")); err != nil {
				t.Fatalf("first request: %v", err)
			}
			return getErr(context.Background(), c, onceThenSilent.url("/"))
		}},
		{"ResponseHeaderTimeout, Expect: 100-continue", func() *http.Transport {
			return &http.Transport{ResponseHeaderTimeout: short, ExpectContinueTimeout: short / 4}
		}, func(t *testing.T, c *http.Client) error {
			req, _ := http.NewRequest(http.MethodPost, silent.url("/"), strings.NewReader("body"))
			req.Header.Set("Expect", "100-continue")
			return doErr(c, req)
		}},
		{"ResponseHeaderTimeout, HTTP/2", func() *http.Transport {
			return &http.Transport{ResponseHeaderTimeout: short, TLSClientConfig: h2TLS.Clone(), ForceAttemptHTTP2: true}
		}, func(t *testing.T, c *http.Client) error {
			return getErr(context.Background(), c, slowH2.URL)
		}},
		{"TLSHandshakeTimeout", func() *http.Transport {
			return &http.Transport{TLSHandshakeTimeout: short, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
		}, func(t *testing.T, c *http.Client) error {
			return getErr(context.Background(), c, "https://"+silent.addr+"/")
		}},
		{"dial timeout", func() *http.Transport {
			return &http.Transport{DialContext: (&net.Dialer{Timeout: time.Nanosecond}).DialContext}
		}, func(t *testing.T, c *http.Client) error {
			return getErr(context.Background(), c, silent.url("/"))
		}},
		{"context deadline while dialing", func() *http.Transport {
			return &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				select {
				case <-ctx.Done():
				case <-unblock:
				}
				return nil, errors.New("dial abandoned")
			}}
		}, func(t *testing.T, c *http.Client) error {
			ctx, cancel := context.WithTimeout(context.Background(), short)
			defer cancel()
			return getErr(ctx, c, silent.url("/"))
		}},
		{"context deadline awaiting headers", func() *http.Transport {
			return &http.Transport{}
		}, func(t *testing.T, c *http.Client) error {
			ctx, cancel := context.WithTimeout(context.Background(), short)
			defer cancel()
			return getErr(ctx, c, silent.url("/"))
		}},
		{"context deadline queued behind MaxConnsPerHost", func() *http.Transport {
			return &http.Transport{MaxConnsPerHost: 1}
		}, func(t *testing.T, c *http.Client) error {
			hold, release := context.WithCancel(context.Background())
			defer release()
			first := make(chan error, 1)
			go func() { first <- getErr(hold, c, silent.url("/first")) }()
			waitFor(t, "the first request's connection", func() bool { return silent.conns.Load() > 0 })
			ctx, cancel := context.WithTimeout(context.Background(), short)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, silent.url("/second"), strings.NewReader("x"))
			err := doErr(c, req)
			release()
			<-first
			return err
		}},
		{"context deadline reading a body of known length", func() *http.Transport {
			return &http.Transport{}
		}, func(t *testing.T, c *http.Client) error {
			ctx, cancel := context.WithTimeout(context.Background(), short)
			defer cancel()
			return getErr(ctx, c, stalls.URL+"/length")
		}},
		{"context deadline reading a chunked body", func() *http.Transport {
			return &http.Transport{}
		}, func(t *testing.T, c *http.Client) error {
			ctx, cancel := context.WithTimeout(context.Background(), short)
			defer cancel()
			return getErr(ctx, c, stalls.URL+"/chunked")
		}},
	}
	type verdict struct {
		Timeout  bool // errors.As(err, &netErr) && netErr.Timeout()
		Deadline bool // errors.Is(err, context.DeadlineExceeded)
	}
	judge := func(err error) verdict {
		var ne net.Error
		return verdict{errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded)}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, via := range []string{"RoundTrip", "Client"} {
				var got [2]verdict
				var errs [2]error
				for i, pipelined := range []bool{false, true} {
					ht := tt.tr()
					c := clientOver(t, ht, pipelined, via)
					errs[i] = tt.do(t, c)
					if errs[i] == nil {
						t.Fatalf("%s, pipelined %v: no error", via, pipelined)
					}
					got[i] = judge(errs[i])
				}
				t.Logf("%s: pipelined %q, net/http %q", via, errs[1], errs[0])
				if got[1].Timeout != got[0].Timeout || got[0].Deadline && !got[1].Deadline || !got[0].Timeout {
					t.Errorf("%s: pipelined's error %q is %+v; net/http's %q is %+v", via, errs[1], got[1], errs[0], got[0])
				}
			}
		})
	}
}

// clientOver returns a Client over ht, or over a pipelined Transport with
// ht's options, closed when t ends; via "RoundTrip", its errors reach the
// caller unwrapped.
func clientOver(t *testing.T, ht *http.Transport, pipelined bool, via string) *http.Client {
	var rt http.RoundTripper = ht
	if pipelined {
		p := NewTransport(OptionsFrom(ht))
		t.Cleanup(func() { p.Close() })
		rt = p
	} else {
		t.Cleanup(ht.CloseIdleConnections)
	}
	if via == "RoundTrip" {
		rt = unwrapped{rt}
	}
	return &http.Client{Transport: rt}
}

// unwrapped is a RoundTripper whose errors reach an http.Client's caller
// unwrapped: the Client wraps them in a *url.Error, and getErr and doErr
// take that off again, so that a row judges RoundTrip's own error.
type unwrapped struct{ http.RoundTripper }

func (u unwrapped) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := u.RoundTripper.RoundTrip(req)
	if err != nil {
		err = rawErr{err}
	}
	return resp, err
}

// rawErr carries RoundTrip's error through the Client's *url.Error.
type rawErr struct{ err error }

func (e rawErr) Error() string { return e.err.Error() }

// doErr sends req through c and returns its error or its body's: the
// error of RoundTrip itself if c's transport is unwrapped.
func doErr(c *http.Client, req *http.Request) error {
	resp, err := c.Do(req)
	if err != nil {
		var re rawErr
		if errors.As(err, &re) {
			return re.err
		}
		return err
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return err
}

// getErr is doErr for a GET of url with ctx.
func getErr(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	return doErr(c, req)
}

// TestTimerProxyConnectTimeout: a proxy that never answers a CONNECT fails
// the dial after a minute, as with net/http, with a timeout that reads as
// one through RoundTrip and through an http.Client (TestTimeoutErrors has
// the other timeouts).
func TestTimerProxyConnectTimeout(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		for _, via := range []string{"RoundTrip", "Client"} {
			t.Run(fmt.Sprintf("pipelined %v, %s", pipelined, via), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					proxy := &memServer{handle: func(_ int, _ net.Conn, br *bufio.Reader) { io.Copy(io.Discard, br) }}
					ht := &http.Transport{
						Proxy:       http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.test:8080"}),
						DialContext: proxy.dial,
					}
					c := clientOver(t, ht, pipelined, via)
					err := getErr(context.Background(), c, "https://example.com/")
					var ne net.Error
					if !errors.As(err, &ne) || !ne.Timeout() {
						t.Errorf("error %q (%T): not a net.Error whose Timeout reports true", err, err)
					}
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("errors.Is(%q, context.DeadlineExceeded) = false, want true", err)
					}
				})
			})
		}
	}
}
