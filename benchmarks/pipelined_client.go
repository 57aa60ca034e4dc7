//go:build !nopipelined

package main

import (
	"net/http"

	"github.com/pipelined/pipelined"
)

// newPipelinedClient builds the pipelined client; its open connections come
// from Transport.Stats.
func newPipelinedClient(cfg clientConfig, disableKeepAlives bool) (benchClient, error) {
	t := pipelined.NewTransport(pipelined.TransportOptions{
		MaxConnsPerHost:   cfg.C,
		PipelineDepth:     cfg.K,
		DisableKeepAlives: disableKeepAlives,
		DialContext:       cfg.Dialer.DialContext,
	})
	return &httpClient{
		client: &http.Client{Transport: t, Timeout: cfg.Timeout},
		url:    "http://" + cfg.Addr + "/",
		close:  func() { t.Close() },
		openConns: func() (int, bool) {
			n := 0
			for _, hs := range t.Stats() {
				n += hs.Open
			}
			return n, true
		},
	}, nil
}
