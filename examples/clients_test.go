// Package examples runs popular third-party HTTP clients over the pipelined
// transport against local servers: retries, redirects and timeouts must
// behave as they do over net/http's Transport.
package examples

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-resty/resty/v2"
	"github.com/hashicorp/go-retryablehttp"
	"github.com/pipelined/pipelined"
)

// flakyServer fails the first two requests to each path with 503 and then
// answers with the method and body it received. /redirect redirects to
// /final; /slow answers after release is closed.
type flakyServer struct {
	*httptest.Server
	mu      sync.Mutex
	calls   map[string]int
	release chan struct{}
	bodies  []string
}

func newFlakyServer(t *testing.T) *flakyServer {
	s := &flakyServer{calls: map[string]int{}, release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.calls[r.URL.Path]++
		n := s.calls[r.URL.Path]
		s.bodies = append(s.bodies, string(body))
		s.mu.Unlock()
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "/final", http.StatusFound)
			return
		case "/slow":
			select {
			case <-s.release:
			case <-r.Context().Done():
			}
			io.WriteString(w, "late")
			return
		case "/final", "/ok":
		default:
			if n <= 2 {
				http.Error(w, "try again", http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintf(w, "%s %s %q attempt %d", r.Method, r.URL.Path, body, n)
	}))
	t.Cleanup(func() {
		close(s.release)
		s.Close()
	})
	return s
}

func newTransport(t *testing.T) *pipelined.Transport {
	tr := pipelined.NewTransport(pipelined.OptionsFrom(http.DefaultTransport.(*http.Transport)))
	t.Cleanup(func() { tr.Close() })
	return tr
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestRetryablehttp(t *testing.T) {
	srv := newFlakyServer(t)
	c := retryablehttp.NewClient()
	c.HTTPClient = &http.Client{Transport: newTransport(t)}
	c.RetryMax = 3
	c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, 10*time.Millisecond
	c.Logger = nil

	t.Run("retries a GET", func(t *testing.T) {
		resp, err := c.Get(srv.URL + "/get")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if want := `GET /get "" attempt 3`; string(body) != want {
			t.Errorf("body = %q, want %q", body, want)
		}
	})
	t.Run("retries a POST with its body", func(t *testing.T) {
		resp, err := c.Post(srv.URL+"/post", "text/plain", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if want := `POST /post "payload" attempt 3`; string(body) != want {
			t.Errorf("body = %q, want %q", body, want)
		}
	})
	t.Run("follows redirects", func(t *testing.T) {
		resp, err := c.Get(srv.URL + "/redirect")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if want := `GET /final "" attempt 1`; string(body) != want || resp.Request.URL.Path != "/final" {
			t.Errorf("body = %q at %s, want %q at /final", body, resp.Request.URL.Path, want)
		}
	})
	t.Run("gives up after the retry budget", func(t *testing.T) {
		c := retryablehttp.NewClient()
		c.HTTPClient = &http.Client{Transport: newTransport(t)}
		c.RetryMax = 1
		c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, time.Millisecond
		c.Logger = nil
		_, err := c.Get(srv.URL + "/always-fails-twice")
		if err == nil || !strings.Contains(err.Error(), "giving up after 2 attempt(s)") {
			t.Errorf("Get = %v, want giving up after 2 attempts", err)
		}
	})
	t.Run("client timeout", func(t *testing.T) {
		c := retryablehttp.NewClient()
		c.HTTPClient = &http.Client{Transport: newTransport(t), Timeout: 50 * time.Millisecond}
		c.RetryMax = 1
		c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, time.Millisecond
		c.Logger = nil
		var attempts atomic.Int32
		c.RequestLogHook = func(retryablehttp.Logger, *http.Request, int) { attempts.Add(1) }
		_, err := c.Get(srv.URL + "/slow")
		if !isTimeout(err) {
			t.Errorf("Get(/slow) = %v, want a timeout", err)
		}
		if n := attempts.Load(); n != 2 {
			t.Errorf("%d attempts, want 2 (one retry after the timeout)", n)
		}
	})
}

func TestResty(t *testing.T) {
	srv := newFlakyServer(t)
	var retries atomic.Int32
	c := resty.New().
		SetTransport(newTransport(t)).
		SetRetryCount(3).
		SetRetryWaitTime(time.Millisecond).
		SetRetryMaxWaitTime(10 * time.Millisecond).
		AddRetryCondition(func(r *resty.Response, err error) bool {
			return r != nil && r.StatusCode() >= 500
		}).
		AddRetryHook(func(*resty.Response, error) { retries.Add(1) })

	t.Run("retries a GET", func(t *testing.T) {
		retries.Store(0)
		resp, err := c.R().Get(srv.URL + "/resty-get")
		if err != nil {
			t.Fatal(err)
		}
		if want := `GET /resty-get "" attempt 3`; resp.String() != want || retries.Load() != 2 {
			t.Errorf("body = %q after %d retries, want %q after 2", resp.String(), retries.Load(), want)
		}
	})
	t.Run("retries a PUT with its body", func(t *testing.T) {
		resp, err := c.R().SetBody("json-ish").Put(srv.URL + "/resty-put")
		if err != nil {
			t.Fatal(err)
		}
		if want := `PUT /resty-put "json-ish" attempt 3`; resp.String() != want {
			t.Errorf("body = %q, want %q", resp.String(), want)
		}
	})
	t.Run("follows redirects", func(t *testing.T) {
		resp, err := c.R().Get(srv.URL + "/redirect")
		if err != nil {
			t.Fatal(err)
		}
		if want := `GET /final "" attempt`; !strings.HasPrefix(resp.String(), want) {
			t.Errorf("body = %q, want prefix %q", resp.String(), want)
		}
	})
	t.Run("concurrent requests", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.R().Get(fmt.Sprintf("%s/ok?i=%d", srv.URL, i))
				if err != nil || resp.StatusCode() != 200 {
					t.Errorf("Get #%d = %v, %v", i, resp.Status(), err)
				}
			}()
		}
		wg.Wait()
	})
	t.Run("timeout", func(t *testing.T) {
		c := resty.New().SetTransport(newTransport(t)).SetTimeout(50 * time.Millisecond)
		_, err := c.R().Get(srv.URL + "/slow")
		if !isTimeout(err) {
			t.Errorf("Get(/slow) = %v, want a timeout", err)
		}
	})
}
