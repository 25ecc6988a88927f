package otel_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sturdyhttp/sturdy/examples/sdks/otel"
	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// Sturdy's work as OpenTelemetry metrics and span events: one 503, then
// a 200.
func ExampleHooks() {
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewInMemoryExporter()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	hooks, err := otel.Hooks(meters.Meter("sturdy"))
	if err != nil {
		fmt.Println(err)
		return
	}

	n := httptestutil.NewNetwork()
	srv := n.Serve("api.test", httptestutil.Script(httptestutil.Status(503, "busy"), httptestutil.Status(200, "ok")))
	defer srv.Close()
	base := n.Transport()
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: transport.New(transport.Options{
		Base:  base,
		Retry: policy.Retry{Backoff: policy.Exponential(time.Millisecond, time.Millisecond)},
		Hooks: hooks,
	})}

	ctx, span := tracer.Tracer("example").Start(context.Background(), "GET /things")
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/things", nil)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println(err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	span.End()

	var rm metricdata.ResourceMetrics
	reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
			var total int64
			for _, p := range sum.DataPoints {
				total += p.Value
			}
			fmt.Println(m.Name, total)
		}
	}
	for _, e := range spans.GetSpans()[0].Events {
		fmt.Println("event", e.Name)
	}
	// Output:
	// sturdy.attempts 2
	// sturdy.retries 1
	// event sturdy.attempt
	// event sturdy.retry
	// event sturdy.attempt
}
