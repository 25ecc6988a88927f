package sturdyotel

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sturdyhttp/sturdy/transport"
)

// memBase answers 200 with a small body, in memory, so that the
// benchmarks measure the instrumentation's own cost.
var memBase = transport.Func(func(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("ok")), ContentLength: 2, Request: r}, nil
})

// BenchmarkAttempt: one GET of one attempt through transport.New,
// without the telemetry, with it on no-op providers (the globals before
// any SDK is registered), and with it on a recording SDK (every span
// sampled, a manual metric reader, the W3C propagator); and, for
// comparison, otelhttp around the stack, alone and with the telemetry.
func BenchmarkAttempt(b *testing.B) {
	sdk := func() Options {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())) // no exporter: spans are made and dropped
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { tp.Shutdown(context.Background()); mp.Shutdown(context.Background()) })
		return Options{TracerProvider: tp, MeterProvider: mp, Propagators: propagation.TraceContext{}}
	}
	noop := Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()}
	rec := sdk()
	stacks := []struct {
		name string
		rt   http.RoundTripper
	}{
		{"off", transport.New(transport.Options{Base: memBase})},
		{"noop", transport.New(New(noop).Apply(transport.Options{Base: memBase}))},
		{"sdk", transport.New(New(rec).Apply(transport.Options{Base: memBase}))},
		{"otelhttp-only+sdk", otelhttp.NewTransport(transport.New(transport.Options{Base: memBase}),
			otelhttp.WithTracerProvider(rec.TracerProvider), otelhttp.WithMeterProvider(rec.MeterProvider), otelhttp.WithPropagators(rec.Propagators))},
		{"otelhttp-outermost+sdk", otelhttp.NewTransport(transport.New(New(rec).Apply(transport.Options{Base: memBase})),
			otelhttp.WithTracerProvider(rec.TracerProvider), otelhttp.WithMeterProvider(rec.MeterProvider), otelhttp.WithPropagators(rec.Propagators))},
	}
	for _, s := range stacks {
		b.Run("telemetry="+s.name, func(b *testing.B) {
			c := &http.Client{Transport: s.rt}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := c.Get("http://api.test/v1/things")
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
