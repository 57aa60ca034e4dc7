//go:build !nopipelined

package main

import (
	"fmt"
	"net/http"

	"github.com/pipelined/pipelined"
)

// newPipelinedClient builds a pipelined client row; its pool statistics
// come from Transport.Stats.
//
// The row clientPipelinedH2 is the hook for HTTP/2: pipelined speaks
// HTTP/1.1 only today, so that row is skipped. When the transport gains
// HTTP/2, build it here (TLS configuration cfg.TLS, C connections) with
// whatever option turns HTTP/2 on, and the TLS suite shows it beside
// net/http (h2).
func newPipelinedClient(name string, cfg clientConfig) (benchClient, error) {
	var o pipelined.TransportOptions
	switch name {
	case clientPipelinedH2:
		return nil, fmt.Errorf("%w: pipelined has no HTTP/2 yet (hook: newPipelinedClient in pipelined_client.go)", errUnsupported)
	case clientPipelinedDefaults:
		o = pipelined.OptionsFrom(http.DefaultTransport.(*http.Transport))
	default:
		// C connections, all of them pipelining (the threshold is
		// DefaultPipelineConnsPerHost otherwise, capped by C).
		o = pipelined.TransportOptions{
			MaxConnsPerHost:      cfg.C,
			PipelineConnsPerHost: cfg.C,
			PipelineDepth:        cfg.K,
			DisableKeepAlives:    name == clientPipelinedNoKA,
		}
	}
	o.DialContext = cfg.Dialer.DialContext
	if cfg.TLS != nil {
		o.TLSClientConfig = cfg.TLS.Clone()
	}
	t := pipelined.NewTransport(o)
	return &httpClient{
		client:  newHTTPClient(t), // no Timeout: see newClient
		targets: newTargets(cfg),
		method:  cfg.Method,
		reqBody: cfg.ReqBody,
		close:   func() { t.Close() },
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
