package otelpipelined_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pipelined/pipelined"
	"github.com/pipelined/pipelined/otelpipelined"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// TestTransportMetrics runs a real Transport against a local server and
// checks what the observer recorded: it passes once the Transport emits
// the Observer's events.
func TestTransportMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	srvAttrs := "server.address=127.0.0.1,server.port=" + port

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	obs, err := otelpipelined.NewObserver(mp)
	if err != nil {
		t.Fatal(err)
	}
	tr := pipelined.NewTransport(pipelined.TransportOptions{Observer: obs, MaxConnsPerHost: 1})
	client := &http.Client{Transport: tr}
	for _, path := range []string{"/a", "/b", "/missing"} {
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	// The connection becomes idle once the last response is read; its
	// reader reports it, maybe after Get returned.
	openWant := []point{
		{"http.connection.state=active,network.protocol.version=1.1," + srvAttrs, "0"},
		{"http.connection.state=idle,network.protocol.version=1.1," + srvAttrs, "1"},
	}
	var got map[string]instrument
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got = collect(t, reader)
		if fmt.Sprint(got["http.client.open_connections"].points) == fmt.Sprint(openWant) || time.Now().After(deadline) {
			break
		}
	}
	checkPoints(t, got, "http.client.open_connections", openWant)
	checkPoints(t, got, "http.client.active_requests", []point{{"http.request.method=GET," + srvAttrs, "0"}})
	checkCounts(t, got, "http.client.request.duration", map[string]uint64{
		"http.request.method=GET,http.response.status_code=200,network.protocol.version=1.1," + srvAttrs:                2,
		"error.type=404,http.request.method=GET,http.response.status_code=404,network.protocol.version=1.1," + srvAttrs: 1,
	})
	checkCounts(t, got, "pipelined.client.request.time_in_queue", map[string]uint64{
		"http.request.method=GET,network.protocol.version=1.1," + srvAttrs: 3,
	})
	checkCounts(t, got, "pipelined.client.connection.requests_in_flight", map[string]uint64{
		"network.protocol.version=1.1," + srvAttrs: 3,
	})
	if _, ok := got["pipelined.client.request.resends"]; ok {
		t.Errorf("resends recorded: %v", got["pipelined.client.request.resends"].points)
	}

	// Close ends the connection: counted, and no longer open.
	tr.Close()
	got = collect(t, reader)
	checkPoints(t, got, "http.client.open_connections", []point{
		{"http.connection.state=active,network.protocol.version=1.1," + srvAttrs, "0"},
		{"http.connection.state=idle,network.protocol.version=1.1," + srvAttrs, "0"},
	})
	checkCounts(t, got, "http.client.connection.duration", map[string]uint64{
		"network.protocol.version=1.1,pipelined.connection.close_reason=transport_closed," + srvAttrs: 1,
	})
}

func checkPoints(t *testing.T, got map[string]instrument, name string, want []point) {
	t.Helper()
	if g := got[name].points; fmt.Sprint(g) != fmt.Sprint(want) {
		t.Errorf("%s points:\n got  %s\n want %s", name, fmtPoints(g), fmtPoints(want))
	}
}

// checkCounts checks the data points of a histogram by their counts.
func checkCounts(t *testing.T, got map[string]instrument, name string, want map[string]uint64) {
	t.Helper()
	g := map[string]uint64{}
	for _, p := range got[name].points {
		var n uint64
		fmt.Sscanf(p.value, "count=%d", &n)
		g[p.attrs] = n
	}
	if fmt.Sprint(g) != fmt.Sprint(want) {
		t.Errorf("%s counts:\n got  %v\n want %v", name, g, want)
	}
}
