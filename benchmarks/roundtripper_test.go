package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestFastRoundTripper: a request through fasthttp's engine behind
// http.Client arrives as sent, and its answer reads as net/http's own
// transport reads it (status, header lists, length, body).
func TestFastRoundTripper(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header()["X-Multi"] = []string{"a", "b"}
		w.Header().Set("X-Got", r.Method+" "+r.URL.RequestURI()+" "+r.Host+" "+strconv.Itoa(len(b))+" "+r.Header.Get("X-Sent"))
		if r.URL.Query().Get("status") == "404" {
			w.WriteHeader(http.StatusNotFound)
		}
		w.Write(bytes.Repeat([]byte("x"), 100))
	}))
	defer srv.Close()
	hc := &fasthttp.HostClient{Addr: strings.TrimPrefix(srv.URL, "http://"), ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	fast := newHTTPClient(fastRoundTripper{do: hc.Do})
	std := newHTTPClient(&http.Transport{})
	for _, tc := range []struct {
		name, method, path string
		body               string
	}{
		{"get", http.MethodGet, "/a?x=1", ""},
		{"post", http.MethodPost, "/p", strings.Repeat("b", 1000)},
		{"not found", http.MethodGet, "/?status=404", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			do := func(c *http.Client) (*http.Response, []byte) {
				t.Helper()
				var body io.Reader
				if tc.body != "" {
					body = strings.NewReader(tc.body)
				}
				req, err := http.NewRequest(tc.method, srv.URL+tc.path, body)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-Sent", "yes")
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				return resp, b
			}
			got, gotBody := do(fast)
			want, wantBody := do(std)
			if got.Status != want.Status || got.StatusCode != want.StatusCode || got.Proto != want.Proto {
				t.Errorf("status %q %d %s, want %q %d %s", got.Status, got.StatusCode, got.Proto, want.Status, want.StatusCode, want.Proto)
			}
			for _, k := range []string{"X-Multi", "X-Got", "Content-Type", "Content-Length"} {
				if g, w := strings.Join(got.Header[k], ","), strings.Join(want.Header[k], ","); g != w {
					t.Errorf("header %s = %q, want %q", k, g, w)
				}
			}
			if got.ContentLength != want.ContentLength || !bytes.Equal(gotBody, wantBody) {
				t.Errorf("body %d bytes (ContentLength %d), want %d (%d)", len(gotBody), got.ContentLength, len(wantBody), want.ContentLength)
			}
		})
	}
}
