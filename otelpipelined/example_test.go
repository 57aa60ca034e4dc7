package otelpipelined_test

import (
	"log"
	"net/http"

	"github.com/pipelined/pipelined"
	"github.com/pipelined/pipelined/otelpipelined"
	"go.opentelemetry.io/otel"
)

// The three lines: an observer from a MeterProvider (here the global one,
// set by the application's OpenTelemetry setup), in TransportOptions.
func ExampleNewObserver() {
	obs, err := otelpipelined.NewObserver(otel.GetMeterProvider())
	if err != nil {
		log.Fatal(err)
	}
	t := pipelined.NewTransport(pipelined.TransportOptions{Observer: obs})
	defer t.Close()

	client := &http.Client{Transport: t}
	_ = client // client.Get(...) now records http.client.request.duration and the others
}
