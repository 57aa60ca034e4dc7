//go:build !nopipelined

package main

import (
	"net/http"

	"github.com/pipelined/pipelined"
)

// newPipelinedClient builds a pipelined client row; its pool statistics
// come from Transport.Stats.
//
// Every row but clientPipelinedH2 and clientPipelinedDefaults speaks
// HTTP/1.1 only (Protocols), so that the TLS suite's "h1 pipelined" row and
// -url over https compare HTTP/1.1 with HTTP/1.1; clientPipelinedH2
// offers h2 and http/1.1 and takes h2 where the server chooses it.
func newPipelinedClient(name string, cfg clientConfig) (benchClient, error) {
	var o pipelined.TransportOptions
	switch name {
	case clientPipelinedH2:
		o = pipelined.TransportOptions{MaxConnsPerHost: cfg.C, PipelineConnsPerHost: cfg.C, PipelineDepth: cfg.K}
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetHTTP2(true)
		o.Protocols = &p
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
			HedgeHeadOfLine:      name == clientPipelinedHedge,
		}
		var p http.Protocols
		p.SetHTTP1(true)
		o.Protocols = &p
	}
	o.DialContext = cfg.Dialer.DialPlain // its Stats count open connections
	if cfg.Resolver != nil {
		// One name: the Transport resolves it and dials its addresses
		// itself (TransportOptions.Resolver); its dials are counted as
		// they open.
		o.Resolver, o.DialContext = cfg.Resolver, nil
		o.Observer = &pipelined.Observer{ConnOpened: func(pipelined.ConnEvent) { cfg.Dialer.dials.Add(1) }}
	}
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
