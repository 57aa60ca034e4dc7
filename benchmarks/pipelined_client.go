//go:build !nopipelined

package main

import (
	"net/http"

	"github.com/pipelined/pipelined"
)

// newPipelinedClient builds the pipelined client; its pool statistics come
// from Transport.Stats.
func newPipelinedClient(cfg clientConfig, disableKeepAlives bool) (benchClient, error) {
	t := pipelined.NewTransport(pipelined.TransportOptions{
		MaxConnsPerHost:   cfg.C,
		PipelineDepth:     cfg.K,
		DisableKeepAlives: disableKeepAlives,
		DialContext:       cfg.Dialer.DialContext,
	})
	return &httpClient{
		client: &http.Client{Transport: t}, // no Timeout: see newClient
		url:    "http://" + cfg.Addr + "/",
		close:  func() { t.Close() },
		poolStats: func() (poolStats, bool) {
			var s poolStats
			for _, hs := range t.Stats() {
				s.Open += hs.Open
				s.InFlight += hs.InFlight
				s.Queued += hs.Queued
			}
			return s, true
		},
	}, nil
}
