package otelpipelined_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pipelined/pipelined"
	"github.com/pipelined/pipelined/otelpipelined"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/semconv/v1.43.0/httpconv"
)

// point is one data point, flattened for comparison: its attributes as
// "k=v,k=v" (sorted), and its value: "n" for sums, "count=n sum=s" for
// histograms.
type point struct{ attrs, value string }

// instrument is one instrument as the reader saw it.
type instrument struct {
	unit   string
	kind   string // "sum", "updown", "histogram"
	points []point
	bounds []float64 // histograms only
}

// collect reads every metric of the otelpipelined scope from reader.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]instrument {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	got := map[string]instrument{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelpipelined.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, otelpipelined.ScopeName)
		}
		for _, m := range sm.Metrics {
			in := instrument{unit: m.Unit}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				in.kind = "sum"
				if !d.IsMonotonic {
					in.kind = "updown"
				}
				for _, dp := range d.DataPoints {
					in.points = append(in.points, point{encode(dp.Attributes), fmt.Sprint(dp.Value)})
				}
			case metricdata.Histogram[float64]:
				in.kind = "histogram"
				for _, dp := range d.DataPoints {
					in.points = append(in.points, point{encode(dp.Attributes), fmt.Sprintf("count=%d sum=%.4g", dp.Count, dp.Sum)})
					in.bounds = dp.Bounds
				}
			case metricdata.Histogram[int64]:
				in.kind = "histogram"
				for _, dp := range d.DataPoints {
					in.points = append(in.points, point{encode(dp.Attributes), fmt.Sprintf("count=%d sum=%d", dp.Count, dp.Sum)})
					in.bounds = dp.Bounds
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
			sort.Slice(in.points, func(i, j int) bool { return in.points[i].attrs < in.points[j].attrs })
			got[m.Name] = in
		}
	}
	return got
}

// TestObserverEvents feeds the observer a known sequence of events, as the
// transport emits them, and checks every instrument's name, unit, kind,
// attributes and values.
func TestObserverEvents(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	obs, err := otelpipelined.NewObserver(mp)
	if err != nil {
		t.Fatal(err)
	}

	const host, addr, h1 = "http://example.com:8080", "example.com:8080", "HTTP/1.1"
	t0 := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	get := httptest.NewRequest("GET", "http://example.com:8080/a", nil)
	purge := httptest.NewRequest("PURGE", "http://example.com:8080/b", nil)
	post := httptest.NewRequest("POST", "http://example.com:8080/c", nil)
	req := func(r *http.Request, start, now int, attempt int, mod func(*pipelined.RequestEvent)) pipelined.RequestEvent {
		ev := pipelined.RequestEvent{Time: at(now), Start: at(start), Request: r, Host: host, Addr: addr, Attempt: attempt}
		if mod != nil {
			mod(&ev)
		}
		return ev
	}
	conn := func(id uint64, opened, now int, active bool) pipelined.ConnEvent {
		return pipelined.ConnEvent{Time: at(now), ID: id, Host: host, Addr: addr, Protocol: h1, Opened: at(opened), Active: active}
	}
	on := func(id uint64, inFlight int) func(*pipelined.RequestEvent) {
		return func(ev *pipelined.RequestEvent) {
			ev.ConnID, ev.Protocol, ev.InFlight, ev.Pipelined = id, h1, inFlight, inFlight > 1
		}
	}

	// Request A: GET, waits 10 ms for connection 1, answered 200 at 50 ms.
	obs.RequestQueued(req(get, 0, 0, 1, nil))
	obs.ConnOpened(conn(1, 10, 10, false))
	obs.ConnActive(conn(1, 10, 10, true))
	obs.RequestAssigned(req(get, 0, 10, 1, on(1, 1)))
	// Request B: GET pipelined behind A on connection 1, answered 404.
	obs.RequestQueued(req(get, 20, 20, 1, nil))
	obs.RequestAssigned(req(get, 20, 20, 1, on(1, 2)))
	obs.RequestDone(req(get, 0, 50, 1, func(ev *pipelined.RequestEvent) {
		on(1, 1)(ev)
		ev.QueueTime, ev.Status = 10*time.Millisecond, 200
	}))
	obs.RequestDone(req(get, 20, 120, 1, func(ev *pipelined.RequestEvent) {
		on(1, 2)(ev)
		ev.Status = 404
	}))
	// Request C: POST on connection 1, which fails before writing it: it is
	// resent on connection 2 and answered 201.
	obs.RequestQueued(req(post, 200, 200, 1, nil))
	obs.RequestAssigned(req(post, 200, 200, 1, on(1, 1)))
	obs.ConnClosed(func() pipelined.ConnEvent {
		ev := conn(1, 10, 210, true)
		ev.Reason, ev.Err = pipelined.CloseError, errors.New("connection reset")
		return ev
	}())
	obs.RequestQueued(req(post, 200, 210, 2, func(ev *pipelined.RequestEvent) { ev.Resend = pipelined.ResendNotWritten }))
	obs.ConnOpened(conn(2, 230, 230, false))
	obs.ConnActive(conn(2, 230, 230, true))
	obs.RequestAssigned(req(post, 200, 230, 2, on(2, 1)))
	obs.RequestDone(req(post, 200, 300, 2, func(ev *pipelined.RequestEvent) {
		on(2, 1)(ev)
		ev.Resend, ev.QueueTime, ev.Status = pipelined.ResendNotWritten, 20*time.Millisecond, 201
	}))
	obs.ConnIdle(conn(2, 230, 300, false))
	// Request D: PURGE, cancelled after 500 ms in the queue.
	obs.RequestQueued(req(purge, 1000, 1000, 1, nil))
	obs.RequestDone(req(purge, 1000, 1500, 1, func(ev *pipelined.RequestEvent) {
		ev.QueueTime, ev.Err = 500*time.Millisecond, context.Canceled
	}))
	// What the host's model holds about two routes changed three times.
	for _, v := range []string{"bounded", "stream", "bounded"} {
		obs.RouteLearned(pipelined.RouteEvent{Addr: "example.com:8080", Verdict: v})
	}
	// And what it decides for the host, twice.
	obs.HostLearned(pipelined.HostEvent{Addr: "example.com:8080", Reason: "fallback"})
	obs.HostLearned(pipelined.HostEvent{Addr: "example.com:8080", Pipelining: true})

	const srv = "server.address=example.com,server.port=8080"
	want := map[string]instrument{
		"http.client.request.duration": {unit: "s", kind: "histogram", points: []point{
			{"error.type=404,http.request.method=GET,http.response.status_code=404,network.protocol.version=1.1," + srv, "count=1 sum=0.1"},
			{"error.type=canceled,http.request.method=_OTHER," + srv, "count=1 sum=0.5"},
			{"http.request.method=GET,http.response.status_code=200,network.protocol.version=1.1," + srv, "count=1 sum=0.05"},
			{"http.request.method=POST,http.response.status_code=201,network.protocol.version=1.1," + srv, "count=1 sum=0.1"},
		}},
		"http.client.active_requests": {unit: "{request}", kind: "updown", points: []point{
			{"http.request.method=GET," + srv, "0"},
			{"http.request.method=POST," + srv, "0"},
			{"http.request.method=_OTHER," + srv, "0"},
		}},
		"http.client.open_connections": {unit: "{connection}", kind: "updown", points: []point{
			{"http.connection.state=active,network.protocol.version=1.1," + srv, "0"},
			{"http.connection.state=idle,network.protocol.version=1.1," + srv, "1"},
		}},
		"http.client.connection.duration": {unit: "s", kind: "histogram", points: []point{
			{"network.protocol.version=1.1,pipelined.connection.close_reason=error," + srv, "count=1 sum=0.2"},
		}},
		"pipelined.client.request.time_in_queue": {unit: "s", kind: "histogram", points: []point{
			{"http.request.method=GET,network.protocol.version=1.1," + srv, "count=2 sum=0.01"},
			{"http.request.method=POST,network.protocol.version=1.1," + srv, "count=1 sum=0.02"},
			{"http.request.method=_OTHER," + srv, "count=1 sum=0.5"},
		}},
		"pipelined.client.connection.requests_in_flight": {unit: "{request}", kind: "histogram", points: []point{
			{"network.protocol.version=1.1," + srv, "count=4 sum=5"},
		}},
		"pipelined.client.request.resends": {unit: "{request}", kind: "sum", points: []point{
			{"http.request.method=POST,pipelined.resend.cause=not_written," + srv, "1"},
		}},
		"pipelined.client.route.verdicts": {unit: "{change}", kind: "sum", points: []point{
			{"pipelined.route.verdict=bounded," + srv, "2"},
			{"pipelined.route.verdict=stream," + srv, "1"},
		}},
		"pipelined.client.host.decisions": {unit: "{change}", kind: "sum", points: []point{
			{"pipelined.host.decision=fallback," + srv, "1"},
			{"pipelined.host.decision=pipelined," + srv, "1"},
		}},
	}
	got := collect(t, reader)
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s: missing", name)
			continue
		}
		if g.unit != w.unit || g.kind != w.kind {
			t.Errorf("%s: unit %q kind %s, want %q %s", name, g.unit, g.kind, w.unit, w.kind)
		}
		if !reflect.DeepEqual(g.points, w.points) {
			t.Errorf("%s points:\n got  %s\n want %s", name, fmtPoints(g.points), fmtPoints(w.points))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected instrument %s", name)
		}
	}
	if b := got["http.client.request.duration"].bounds; !slices.Equal(b, []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}) {
		t.Errorf("http.client.request.duration buckets %v, want the conventions' 0.005 … 10", b)
	}
}

// TestSemconvNames checks the standard instruments' names and units
// against the generated semantic-convention package.
func TestSemconvNames(t *testing.T) {
	for _, tc := range []struct {
		ours, name, unit string
		wantUnit         string
	}{
		{otelpipelined.RequestDuration, httpconv.ClientRequestDuration{}.Name(), httpconv.ClientRequestDuration{}.Unit(), "s"},
		{otelpipelined.ActiveRequests, httpconv.ClientActiveRequests{}.Name(), httpconv.ClientActiveRequests{}.Unit(), "{request}"},
		{otelpipelined.OpenConnections, httpconv.ClientOpenConnections{}.Name(), httpconv.ClientOpenConnections{}.Unit(), "{connection}"},
		{otelpipelined.ConnectionDuration, httpconv.ClientConnectionDuration{}.Name(), httpconv.ClientConnectionDuration{}.Unit(), "s"},
	} {
		if tc.ours != tc.name || tc.unit != tc.wantUnit {
			t.Errorf("%s (unit %s): the conventions say %s (unit %s)", tc.ours, tc.wantUnit, tc.name, tc.unit)
		}
	}
}

// TestNilMeterProvider: a nil provider means the global one, a no-op by
// default.
func TestNilMeterProvider(t *testing.T) {
	obs, err := otelpipelined.NewObserver(nil)
	if err != nil || obs == nil || obs.RequestDone == nil {
		t.Fatalf("NewObserver(nil) = %v, %v", obs, err)
	}
	obs.RequestDone(pipelined.RequestEvent{Request: httptest.NewRequest("GET", "/", nil), Addr: "h:80", Status: 200})
}

func fmtPoints(ps []point) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "\n   {%s} %s", p.attrs, p.value)
	}
	return b.String()
}

// encode returns set as "k=v,k=v", sorted by key.
func encode(set attribute.Set) string {
	var parts []string
	for it := set.Iter(); it.Next(); {
		kv := it.Attribute()
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(parts, ",")
}
