package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// The stream beside the load (scenario.StreamBeside): a GET of streamPath,
// which the servers answer with chunked application/x-ndjson, a line at
// once and a line every streamInterval until the client closes; the client
// closes it and sends it again every streamPeriod.
const (
	streamPath     = "/stream"
	streamInterval = 100 * time.Millisecond
	streamPeriod   = 500 * time.Millisecond
)

// streamStats is what one cell's stream did.
type streamStats struct {
	Via    string `json:"via"`    // the client that carried it
	Opened int    `json:"opened"` // responses received
	Lines  int    `json:"lines"`  // lines read
	// Failed: requests that failed, and streams that ended or failed
	// before the client closed them.
	Failed     int    `json:"failed"`
	FirstError string `json:"first_error,omitempty"`
}

// merge adds round b to s (either may be nil).
func (s *streamStats) merge(b *streamStats) *streamStats {
	if s == nil || b == nil {
		if s == nil {
			return b
		}
		return s
	}
	out := *s
	out.Opened += b.Opened
	out.Lines += b.Lines
	out.Failed += b.Failed
	if out.FirstError == "" {
		out.FirstError = b.FirstError
	}
	return &out
}

// runStream keeps the stream open beside the load until ctx ends. A row
// built on http.Client (net/http, pipelined) carries it itself; a fasthttp
// row cannot read a response that does not end without a setting that
// would change how it reads the load's (StreamResponseBody), so its stream
// goes through a plain net/http Transport of its own, dialed by the row's
// dialer.
func runStream(ctx context.Context, cl benchClient, cfg clientConfig, name string) *streamStats {
	st := &streamStats{Via: "the row's client"}
	var client *http.Client
	if hc, ok := cl.(*httpClient); ok && !strings.HasPrefix(name, "fasthttp") {
		client = hc.client
	} else {
		tr := &http.Transport{DialContext: cfg.Dialer.DialContext}
		if cfg.TLS != nil {
			tr.TLSClientConfig = cfg.TLS.Clone()
		}
		defer tr.CloseIdleConnections()
		client = newHTTPClient(tr)
		st.Via = "a plain net/http Transport"
	}
	scheme := "http://"
	if cfg.TLS != nil {
		scheme = "https://"
	}
	url := scheme + cfg.Addrs[0] + streamPath
	fail := func(err error) {
		st.Failed++
		if st.FirstError == "" {
			st.FirstError = err.Error()
		}
	}
	for ctx.Err() == nil {
		end := time.Now().Add(streamPeriod)
		if err := streamOnce(ctx, client, url, end, st); err != nil && ctx.Err() == nil {
			fail(err)
		}
		select { // after a failure, the next one at its time
		case <-ctx.Done():
		case <-time.After(time.Until(end)):
		}
	}
	return st
}

// errStreamEnded: the server ended a stream the client had not closed.
var errStreamEnded = errors.New("stream ended before the client closed it")

// streamOnce sends one stream request and reads its lines until end, when
// it closes the body. It returns an error if the request failed or the
// stream ended before end.
func streamOnce(ctx context.Context, client *http.Client, url string, end time.Time, st *streamStats) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return fmt.Errorf("stream: status %s", resp.Status)
	}
	st.Opened++
	var closed atomic.Bool
	t := time.AfterFunc(time.Until(end), func() {
		closed.Store(true)
		resp.Body.Close()
	})
	defer t.Stop()
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		st.Lines++
	}
	if closed.Load() {
		return nil
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errStreamEnded
}
