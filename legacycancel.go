package pipelined

import (
	"context"
	"io"
	"net/http"
	"sync"
)

// This file honours the deprecated Request.Cancel channel, as net/http's
// Transport does (transport.go, awaitLegacyCancel): closing it cancels the
// request, and the reading of its response body, with net/http's error.
//
// Only for a request whose context can never be cancelled. With both set,
// Request.Cancel's documentation leaves it undefined whether Cancel is
// respected, and http.Client sets both for every request with a Timeout
// sent through a RoundTripper other than its own (client.go,
// setRequestCancel: a deadline on the context, and a Cancel channel closed
// at the same moment), which would otherwise pay a goroutine more per
// request for nothing.

// watchLegacyCancel points r's context at req.Cancel, if it must be
// watched: a goroutine cancels the context when the channel closes. It
// returns the function that ends the watch (once the caller is done with
// the response), or nil if there is nothing to watch.
func (t *Transport) watchLegacyCancel(r *request) (end func()) {
	r.ctx, end = t.legacyCancelContext(r.ctx, r.req)
	return end
}

// legacyCancelContext returns ctx, req's context, cancelled when
// req.Cancel closes if that must be watched, and the function that ends
// the watch (nil if there is nothing to watch, and ctx is returned).
func (t *Transport) legacyCancelContext(ctx context.Context, req *http.Request) (context.Context, func()) {
	//lint:ignore SA1019 deprecated, but still honoured by net/http's Transport.
	cancelCh := req.Cancel
	if cancelCh == nil || ctx.Done() != nil {
		return ctx, nil
	}
	// The parent can never be cancelled: the child is registered nowhere,
	// and needs its cancel only when Cancel closes.
	ctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	go func() {
		select {
		case <-cancelCh:
			cancel(errRequestCanceled)
		case <-stop:
		case <-t.ctx.Done(): // Close: the request fails anyway
		}
	}()
	var once sync.Once
	return ctx, func() { once.Do(func() { close(stop) }) }
}

// endLegacyCancel arranges for end to run once the caller is done with
// resp: at once if there is no response or no body to read (an error, an
// empty body), or if the body is the connection itself (a 101's, which
// is also an io.Writer: a wrapper would hide that), or else at the body's
// end or Close.
func endLegacyCancel(resp *http.Response, end func()) {
	if resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		end()
		return
	}
	if _, conn := resp.Body.(io.Writer); conn {
		end()
		return
	}
	resp.Body = &legacyCancelBody{rc: resp.Body, end: end}
}

// legacyCancelBody ends a Request.Cancel watch when the caller is done with
// the response body: at its end (or a read error), or when it is closed.
type legacyCancelBody struct {
	rc  io.ReadCloser
	end func()
}

func (b *legacyCancelBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		b.end()
	}
	return n, err
}

func (b *legacyCancelBody) Close() error {
	err := b.rc.Close()
	b.end()
	return err
}
