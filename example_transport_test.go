package pipelined_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"

	"github.com/pipelined/pipelined"
)

// NewTransport takes the options; their zero values are the defaults
// (TransportOptions says each one, and its net/http twin). Here 16 callers
// share at most 4 connections, up to 4 requests in flight on each, and
// every caller gets the answer to its own request.
func ExampleNewTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Query().Get("id"))
	}))
	defer srv.Close()

	t := pipelined.NewTransport(pipelined.TransportOptions{
		MaxConnsPerHost: 4, // as http.Transport's: a hard cap per host
		PipelineDepth:   4, // requests in flight on one connection
	})
	defer t.Close()
	client := &http.Client{Transport: t}

	var wg sync.WaitGroup
	var mu sync.Mutex
	own := 0
	for i := range 16 {
		wg.Go(func() {
			resp, err := client.Get(fmt.Sprintf("%s/?id=%d", srv.URL, i))
			if err != nil {
				log.Print(err)
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if string(body) == fmt.Sprint(i) {
				mu.Lock()
				own++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	fmt.Println(own, "callers got their own answer")
	// Output: 16 callers got their own answer
}

// Stats is a snapshot of every host's pool, keyed by scheme://host:port:
// connections open, idle, dialing, requests in flight and queued, the
// host's protocol and its effective pipeline depth.
func ExampleTransport_Stats() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()

	t := pipelined.NewTransport(pipelined.TransportOptions{})
	defer t.Close()
	client := &http.Client{Transport: t}
	resp, err := client.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	s := t.Stats()[srv.URL]
	fmt.Printf("%s: %d open, %d idle, %d in flight, %d queued\n", s.Protocol, s.Open, s.Idle, s.InFlight, s.Queued)
	// Output: HTTP/1.1: 1 open, 1 idle, 0 in flight, 0 queued
}

// DialContext replaces the dialer, as http.Transport's does: here every
// connection goes to a Unix socket, whatever the URL's host. The URL still
// names the host (for the Host header and the pool).
func ExampleTransportOptions_dialContext() {
	dir, err := os.MkdirTemp("", "pipelined-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s over a Unix socket", r.Method, r.Host)
	}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()

	var d net.Dialer
	t := pipelined.NewTransport(pipelined.TransportOptions{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		},
	})
	defer t.Close()
	client := &http.Client{Transport: t}

	resp, err := client.Get("http://api.internal/v1/status")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	// Output: GET api.internal over a Unix socket
}
