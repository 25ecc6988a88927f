// Package otel shows sturdy under OpenTelemetry in the recommended
// placement: otelhttp around the whole stack, whose span is the
// operation, and the sturdyotel module inside it, which adds a client
// span per attempt, the conventions' metrics and sturdy's own.
package otel

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sturdyhttp/sturdy/sturdyotel"
	"github.com/sturdyhttp/sturdy/transport"
)

// NewClient returns a client whose calls are traced and measured with tp,
// mp and the W3C trace context: otelhttp records each operation, and
// sturdyotel each attempt beneath it, through the stack o configures.
// A nil tp or mp means the globally registered one.
func NewClient(tp trace.TracerProvider, mp metric.MeterProvider, o transport.Options) *http.Client {
	props := propagation.TraceContext{}
	tel := sturdyotel.New(sturdyotel.Options{TracerProvider: tp, MeterProvider: mp, Propagators: props})
	var opts []otelhttp.Option
	if tp != nil {
		opts = append(opts, otelhttp.WithTracerProvider(tp))
	}
	if mp != nil {
		opts = append(opts, otelhttp.WithMeterProvider(mp))
	}
	opts = append(opts, otelhttp.WithPropagators(props))
	return &http.Client{Transport: otelhttp.NewTransport(transport.New(tel.Apply(o)), opts...)}
}
