package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/valyala/fasthttp"
)

// fastRoundTripper is fasthttp's engine (a HostClient or a PipelineClient)
// behind the net/http API: an http.RoundTripper used through
// http.Client.Do, as a drop-in transport is. It does the least a
// RoundTripper can: it copies the request into a pooled fasthttp.Request,
// lets fasthttp send it and read the answer whole, and copies the answer
// into an *http.Response that the caller owns (status, header map, body).
// It validates nothing and retries nothing.
//
// Its rows say what the net/http API costs on top of fasthttp's own
// engine, in the same run: what a drop-in transport pays for the API
// that the peer it wraps does not (the targets that matter are ratios to
// fasthttp.HostClient and fasthttp.PipelineClient, which reuse their
// request and response objects and allocate nothing).
type fastRoundTripper struct {
	do func(*fasthttp.Request, *fasthttp.Response) error
}

func (rt fastRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(r.Method)
	req.SetRequestURI(r.URL.RequestURI())
	if r.URL.Scheme == "https" {
		// A path alone is taken for http, which a HostClient with IsTLS
		// refuses as a redirect to another protocol.
		req.URI().SetScheme("https")
	}
	req.SetHost(r.URL.Host) // after the URI, which would replace it
	for k, vs := range r.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if r.Body != nil && r.Body != http.NoBody {
		_, err := io.Copy(req.BodyWriter(), r.Body)
		r.Body.Close()
		if err != nil {
			return nil, err
		}
	}
	if err := rt.do(req, resp); err != nil {
		return nil, err
	}
	sc := resp.StatusCode()
	out := &http.Response{
		Status:     statusText(sc),
		StatusCode: sc,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     make(http.Header, resp.Header.Len()),
		Request:    r,
	}
	for k, v := range resp.Header.All() {
		key := string(k)
		out.Header[key] = append(out.Header[key], string(v))
	}
	body := &bytesBody{}
	body.Reset(bytes.Clone(resp.Body()))
	out.Body, out.ContentLength = body, int64(body.Len())
	return out, nil
}

// statusText is a response's Status as net/http spells it ("200 OK"),
// without an allocation for the status every benchmark server sends.
func statusText(code int) string {
	if code == http.StatusOK {
		return "200 OK"
	}
	return strconv.Itoa(code) + " " + http.StatusText(code)
}

// bytesBody is a body read whole: one allocation besides its bytes.
type bytesBody struct{ bytes.Reader }

func (*bytesBody) Close() error { return nil }

// newFastRoundTripper builds the row named name, fasthttp's client engine
// (the row engine) behind http.Client.
func newFastRoundTripper(name, engine string, cfg clientConfig) (benchClient, error) {
	c, err := newClient(engine, cfg)
	if err != nil {
		return nil, err
	}
	fc, ok := c.(*fastClient)
	if !ok {
		return nil, fmt.Errorf("%s: %s is not a fasthttp client", name, engine)
	}
	return &httpClient{
		client:    newHTTPClient(fastRoundTripper{do: fc.do}),
		targets:   newTargets(cfg),
		method:    fc.method,
		reqBody:   cfg.ReqBody,
		close:     fc.close,
		poolStats: func() (poolStats, bool) { return poolStats{}, false },
	}, nil
}
