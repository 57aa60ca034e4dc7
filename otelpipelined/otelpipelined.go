// Package otelpipelined turns the events of a [pipelined.Transport] into
// OpenTelemetry metrics: the HTTP client metrics of the semantic
// conventions v1.43.0 (the version it imports,
// go.opentelemetry.io/otel/semconv/v1.43.0), by their exact names, and the
// pipelining metrics no other client has, under the "pipelined." prefix.
//
// Three lines:
//
//	obs, err := otelpipelined.NewObserver(meterProvider)
//	// handle err
//	t := pipelined.NewTransport(pipelined.TransportOptions{Observer: obs})
//
// The instruments:
//
//	http.client.request.duration                histogram, s: RoundTrip's duration (until the response headers or the error)
//	http.client.active_requests                 updown counter, {request}: requests in RoundTrip
//	http.client.open_connections                updown counter, {connection}: by http.connection.state, active or idle
//	http.client.connection.duration             histogram, s: lifetime of closed connections, by pipelined.connection.close_reason
//	pipelined.client.request.time_in_queue      histogram, s: time a request waited for a connection, dials included, over all its attempts
//	pipelined.client.connection.requests_in_flight histogram, {request}: requests in flight on a connection when a request is assigned to it, that one included
//	pipelined.client.request.resends            counter, {request}: attempts sent again, by pipelined.resend.cause
//	pipelined.client.route.verdicts             counter, {change}: changes of what a host's model holds about a route class, by pipelined.route.verdict
//	pipelined.client.host.decisions             counter, {change}: changes of what a host's model decides for the host, by pipelined.host.decision
//
// Every instrument has server.address and server.port (the target server's,
// not a proxy's). Request instruments add http.request.method (the nine
// RFC 9110 methods and QUERY; any other is "_OTHER"); the request duration
// adds http.response.status_code, error.type (the status code for 4xx and
// 5xx; for errors, "timeout", "canceled", "transport_closed",
// "server_closed", "framing", "unsolicited_response", the value of an
// ErrorType() string method, or the error's Go type) and
// network.protocol.version ("1.1" or "2") once a connection was assigned.
// Connection instruments add network.protocol.version.
package otelpipelined

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pipelined/pipelined"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// ScopeName is the instrumentation scope (meter) name of the instruments.
const ScopeName = "github.com/pipelined/pipelined/otelpipelined"

// The names of the instruments.
const (
	RequestDuration    = "http.client.request.duration"
	ActiveRequests     = "http.client.active_requests"
	OpenConnections    = "http.client.open_connections"
	ConnectionDuration = "http.client.connection.duration"
	TimeInQueue        = "pipelined.client.request.time_in_queue"
	RequestsInFlight   = "pipelined.client.connection.requests_in_flight"
	Resends            = "pipelined.client.request.resends"
	RouteVerdicts      = "pipelined.client.route.verdicts"
	HostDecisions      = "pipelined.client.host.decisions"
)

// The attribute keys of the pipelined-specific attributes.
const (
	// ResendCauseKey is the cause of a resend (pipelined.ResendCause's
	// String: "not_written", "conn_failed", "head_of_line", "hedge").
	ResendCauseKey = attribute.Key("pipelined.resend.cause")

	// CloseReasonKey is why a connection closed (pipelined.CloseReason's
	// String: "idle_timeout", "server_close", "error", ...). The count of
	// http.client.connection.duration by it counts the connections
	// retired: "keep_alive_end", "drained" and "lifetime"
	// (TransportOptions.MaxConnLifetime), as HostStats.Retired does.
	CloseReasonKey = attribute.Key("pipelined.connection.close_reason")

	// RouteVerdictKey is a route class's verdict after a change
	// (pipelined.RouteEvent's Verdict: "bounded", "stream", "late").
	RouteVerdictKey = attribute.Key("pipelined.route.verdict")

	// HostDecisionKey is a host's decision after a change: "pipelined", or
	// why not (pipelined.HostEvent's Reason: "fallback", "late heads",
	// "serial").
	HostDecisionKey = attribute.Key("pipelined.host.decision")
)

// Bucket boundaries: the semantic conventions' advice for request
// durations; for connection lifetimes the advice of the conventions' text
// (as .NET uses it), 10 ms to 5 min; and pipeline depths.
var (
	durationBuckets   = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	connectionBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}
	inFlightBuckets   = []float64{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64}
)

// NewObserver returns a [pipelined.Observer] that records the transport's
// events as metrics of a meter named [ScopeName] from mp; a nil mp means
// the global MeterProvider (otel.GetMeterProvider). Set it as
// TransportOptions.Observer. One observer may serve several Transports.
func NewObserver(mp metric.MeterProvider) (*pipelined.Observer, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	var r recorder
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var err error
	r.reqDuration, err = m.Float64Histogram(RequestDuration,
		metric.WithDescription("Duration of HTTP client requests."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	check(err)
	r.active, err = m.Int64UpDownCounter(ActiveRequests,
		metric.WithDescription("Number of active HTTP requests."),
		metric.WithUnit("{request}"))
	check(err)
	r.open, err = m.Int64UpDownCounter(OpenConnections,
		metric.WithDescription("Number of outbound HTTP connections that are currently active or idle on the client."),
		metric.WithUnit("{connection}"))
	check(err)
	r.connDuration, err = m.Float64Histogram(ConnectionDuration,
		metric.WithDescription("The duration of the successfully established outbound HTTP connections."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(connectionBuckets...))
	check(err)
	r.queue, err = m.Float64Histogram(TimeInQueue,
		metric.WithDescription("Time HTTP client requests spent waiting for a connection, dials included, over all their attempts."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	check(err)
	r.inFlight, err = m.Int64Histogram(RequestsInFlight,
		metric.WithDescription("Requests in flight on a connection when a request is assigned to it, that request included."),
		metric.WithUnit("{request}"),
		metric.WithExplicitBucketBoundaries(inFlightBuckets...))
	check(err)
	r.resends, err = m.Int64Counter(Resends,
		metric.WithDescription("Attempts of HTTP client requests sent again, by cause."),
		metric.WithUnit("{request}"))
	check(err)
	r.verdicts, err = m.Int64Counter(RouteVerdicts,
		metric.WithDescription("Changes of what a host's model holds about a route class, by the verdict after the change."),
		metric.WithUnit("{change}"))
	check(err)
	r.decisions, err = m.Int64Counter(HostDecisions,
		metric.WithDescription("Changes of what a host's model decides for the host, by the decision after the change."),
		metric.WithUnit("{change}"))
	check(err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("pipelined: creating OpenTelemetry instruments: %w", err)
	}
	return &pipelined.Observer{
		RequestQueued:   r.requestQueued,
		RequestAssigned: r.requestAssigned,
		RequestDone:     r.requestDone,
		ConnOpened:      r.connOpened,
		ConnActive:      r.connActive,
		ConnIdle:        r.connIdle,
		ConnClosed:      r.connClosed,
		RouteLearned:    r.routeLearned,
		HostLearned:     r.hostLearned,
	}, nil
}

type recorder struct {
	reqDuration  metric.Float64Histogram
	active       metric.Int64UpDownCounter
	open         metric.Int64UpDownCounter
	connDuration metric.Float64Histogram
	queue        metric.Float64Histogram
	inFlight     metric.Int64Histogram
	resends      metric.Int64Counter
	verdicts     metric.Int64Counter
	decisions    metric.Int64Counter

	// connAttrs caches the attribute sets of connections, per connKey.
	connAttrs sync.Map
}

type connKey struct{ addr, protocol string }

type connSets struct {
	base, idle, active attribute.Set
}

func (r *recorder) connSets(ev pipelined.ConnEvent) *connSets {
	k := connKey{ev.Addr, ev.Protocol}
	if v, ok := r.connAttrs.Load(k); ok {
		return v.(*connSets)
	}
	base := serverAttrs(ev.Addr, nil)
	if v := protocolVersion(ev.Protocol); v != "" {
		base = append(base, semconv.NetworkProtocolVersion(v))
	}
	s := &connSets{
		base:   attribute.NewSet(base...),
		idle:   attribute.NewSet(append(base[:len(base):len(base)], attribute.String("http.connection.state", "idle"))...),
		active: attribute.NewSet(append(base[:len(base):len(base)], attribute.String("http.connection.state", "active"))...),
	}
	v, _ := r.connAttrs.LoadOrStore(k, s)
	return v.(*connSets)
}

func (r *recorder) routeLearned(ev pipelined.RouteEvent) {
	r.verdicts.Add(context.Background(), 1, metric.WithAttributes(serverAttrs(ev.Addr, []attribute.KeyValue{RouteVerdictKey.String(ev.Verdict)})...))
}

func (r *recorder) hostLearned(ev pipelined.HostEvent) {
	decision := ev.Reason
	if ev.Pipelining {
		decision = "pipelined"
	}
	r.decisions.Add(context.Background(), 1, metric.WithAttributes(serverAttrs(ev.Addr, []attribute.KeyValue{HostDecisionKey.String(decision)})...))
}

func (r *recorder) connOpened(ev pipelined.ConnEvent) {
	r.open.Add(context.Background(), 1, metric.WithAttributeSet(r.connSets(ev).idle))
}

func (r *recorder) connActive(ev pipelined.ConnEvent) {
	s := r.connSets(ev)
	r.open.Add(context.Background(), -1, metric.WithAttributeSet(s.idle))
	r.open.Add(context.Background(), 1, metric.WithAttributeSet(s.active))
}

func (r *recorder) connIdle(ev pipelined.ConnEvent) {
	s := r.connSets(ev)
	r.open.Add(context.Background(), -1, metric.WithAttributeSet(s.active))
	r.open.Add(context.Background(), 1, metric.WithAttributeSet(s.idle))
}

func (r *recorder) connClosed(ev pipelined.ConnEvent) {
	s := r.connSets(ev)
	state := s.idle
	if ev.Active {
		state = s.active
	}
	r.open.Add(context.Background(), -1, metric.WithAttributeSet(state))
	attrs := append(s.base.ToSlice(), CloseReasonKey.String(ev.Reason.String()))
	r.connDuration.Record(context.Background(), seconds(ev.Time.Sub(ev.Opened)), metric.WithAttributes(attrs...))
}

func (r *recorder) requestQueued(ev pipelined.RequestEvent) {
	ctx := ev.Request.Context()
	if ev.Resend == pipelined.ResendNone {
		if ev.Attempt <= 1 {
			r.active.Add(ctx, 1, metric.WithAttributes(requestAttrs(ev)...))
		}
		return
	}
	r.resends.Add(ctx, 1, metric.WithAttributes(append(requestAttrs(ev), ResendCauseKey.String(ev.Resend.String()))...))
}

func (r *recorder) requestAssigned(ev pipelined.RequestEvent) {
	attrs := serverAttrs(ev.Addr, make([]attribute.KeyValue, 0, 3))
	if v := protocolVersion(ev.Protocol); v != "" {
		attrs = append(attrs, semconv.NetworkProtocolVersion(v))
	}
	r.inFlight.Record(ev.Request.Context(), int64(ev.InFlight), metric.WithAttributes(attrs...))
}

func (r *recorder) requestDone(ev pipelined.RequestEvent) {
	ctx := ev.Request.Context()
	attrs := requestAttrs(ev)
	r.active.Add(ctx, -1, metric.WithAttributes(attrs...))
	if v := protocolVersion(ev.Protocol); v != "" {
		attrs = append(attrs, semconv.NetworkProtocolVersion(v))
	}
	r.queue.Record(ctx, seconds(ev.QueueTime), metric.WithAttributes(attrs...))
	if ev.Status > 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(ev.Status))
	}
	if et := errorType(ev.Status, ev.Err); et != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(et))
	}
	r.reqDuration.Record(ctx, seconds(ev.Time.Sub(ev.Start)), metric.WithAttributes(attrs...))
}

// requestAttrs returns http.request.method, server.address and
// server.port, with room for four more.
func requestAttrs(ev pipelined.RequestEvent) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, method(ev.Request.Method))
	return serverAttrs(ev.Addr, attrs)
}

// serverAttrs appends server.address and server.port for addr, a
// "host:port", to attrs.
func serverAttrs(addr string, attrs []attribute.KeyValue) []attribute.KeyValue {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return append(attrs, semconv.ServerAddress(addr))
	}
	attrs = append(attrs, semconv.ServerAddress(host))
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	return attrs
}

// method returns http.request.method: the method if it is one of the
// conventions' known methods, else "_OTHER" (the conventions' rule, which
// keeps the attribute's cardinality bounded).
func method(m string) attribute.KeyValue {
	switch m {
	case "":
		return semconv.HTTPRequestMethodGet
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace, "QUERY":
		return semconv.HTTPRequestMethodKey.String(m)
	}
	return semconv.HTTPRequestMethodOther
}

// protocolVersion returns network.protocol.version for a protocol string
// such as "HTTP/1.1" or "HTTP/2.0": "1.1", "2"; "" for none.
func protocolVersion(proto string) string {
	v, ok := strings.CutPrefix(proto, "HTTP/")
	if !ok {
		return ""
	}
	if v == "2.0" || v == "3.0" {
		return v[:1]
	}
	return v
}

// errorType returns error.type: the status code for 4xx and 5xx
// responses, a short name for the transport's errors, or the error's type.
func errorType(status int, err error) string {
	if err == nil {
		if status >= 400 {
			return strconv.Itoa(status)
		}
		return ""
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, pipelined.ErrTransportClosed):
		return "transport_closed"
	case errors.Is(err, pipelined.ErrServerClosed):
		return "server_closed"
	case errors.Is(err, pipelined.ErrFraming):
		return "framing"
	case errors.Is(err, pipelined.ErrUnsolicitedResponse):
		return "unsolicited_response"
	}
	return semconv.ErrorType(err).Value.AsString()
}

func seconds(d time.Duration) float64 { return d.Seconds() }
