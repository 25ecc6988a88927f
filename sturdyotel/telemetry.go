package sturdyotel

import (
	"net/http"

	"github.com/hashicorp/go-cleanhttp"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/semconv/v1.43.0/httpconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/transport"
)

// ScopeName is the instrumentation scope of the tracer and meter that
// [Telemetry] uses: its import path.
const ScopeName = "github.com/sturdyhttp/sturdy/sturdyotel"

// Options configures [New]. The zero value uses the globally registered
// providers and propagator, as otelhttp does.
type Options struct {
	// TracerProvider makes the attempt spans. Nil means
	// otel.GetTracerProvider(), the one registered when New is called.
	TracerProvider trace.TracerProvider

	// MeterProvider makes the instruments. Nil means
	// otel.GetMeterProvider(), the one registered when New is called.
	MeterProvider metric.MeterProvider

	// Propagators write each attempt's span context into its headers, so
	// the server's span is a child of the attempt. Nil means
	// otel.GetTextMapPropagator().
	Propagators propagation.TextMapPropagator

	// IdempotencyHeader is the header whose presence an attempt span
	// reports. Empty means the one of the transport.Options given to
	// Apply, else "Idempotency-Key".
	IdempotencyHeader string
}

// Telemetry records a sturdy stack's work with OpenTelemetry. Make one
// with [New] and share it: it is safe for concurrent use, and its
// instruments are made once.
type Telemetry struct {
	tracer     trace.Tracer
	props      propagation.TextMapPropagator
	keyHeader  string
	inst       instruments
	reqDur     httpconv.ClientRequestDuration
	attemptDur metric.Float64Histogram
}

// New returns a Telemetry for o. An instrument the meter fails to make
// is reported to otel.Handle, and records nothing.
func New(o Options) *Telemetry {
	tp, mp, props := o.TracerProvider, o.MeterProvider, o.Propagators
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if props == nil {
		props = otel.GetTextMapPropagator()
	}
	meter := mp.Meter(ScopeName)
	t := &Telemetry{
		tracer:    tp.Tracer(ScopeName),
		props:     props,
		keyHeader: o.IdempotencyHeader,
		inst:      newInstruments(meter),
	}
	var err error
	if t.reqDur, err = httpconv.NewClientRequestDuration(meter); err != nil {
		otel.Handle(err)
	}
	t.attemptDur, err = meter.Float64Histogram(MetricAttemptDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of each attempt of an HTTP client operation that otelhttp measures as a whole."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10))
	if err != nil {
		otel.Handle(err)
	}
	return t
}

// Apply returns o with t's instrumentation in place: Base wrapped in
// [Telemetry.Middleware] (a nil Base is first replaced by the one
// [transport.New] would make) and [Telemetry.Hooks] joined to Hooks, after
// the hooks already there. A Base that is an [otelhttp.Transport] is left
// as it is: it makes a span per attempt already, and t only adds hooks.
// With Endpoints.PerAddress, the per-address pools ([transport.PerAddress])
// go beneath the middleware, so each attempt span carries the address it
// was sent to as network.peer.address.
//
//	rt := transport.New(tel.Apply(transport.Options{Timeout: time.Minute}))
func (t *Telemetry) Apply(o transport.Options) transport.Options {
	tt := *t
	if tt.keyHeader == "" {
		tt.keyHeader = o.Retry.IdempotencyHeader
	}
	if tt.keyHeader == "" {
		tt.keyHeader = o.Idempotency.HeaderName()
	}
	base := o.Base
	if base == nil {
		b := cleanhttp.DefaultPooledTransport()
		b.MaxIdleConnsPerHost = transport.DefaultMaxIdleConnsPerHost
		b.MaxResponseHeaderBytes = transport.DefaultMaxResponseHeaderBytes
		base = b
	}
	o.Hooks = join(o.Hooks, tt.Hooks())
	if b, ok := base.(*http.Transport); ok && o.Endpoints.PerAddress {
		// The per-address pools beneath the attempt spans, which then
		// say which address each attempt went to. New leaves a Base that
		// is not an *http.Transport as it is.
		e := o.Endpoints
		e.OnEject = both(e.OnEject, o.Hooks.OnEject)
		base = transport.PerAddress(b, e)
	}
	if _, ok := base.(*otelhttp.Transport); !ok {
		base = tt.Middleware()(base)
	}
	o.Base = base
	return o
}

// Middleware returns a middleware that starts a client span for each
// request it sends and records its duration. Put it just above the base
// transport, beneath Retry and Hedge (Apply does), so that each attempt
// and each hedge copy has a span of its own.
func (t *Telemetry) Middleware() transport.Middleware {
	return func(next http.RoundTripper) http.RoundTripper {
		if next == nil {
			next = http.DefaultTransport
		}
		keyHeader := t.keyHeader
		if keyHeader == "" {
			keyHeader = idempotency.Options{}.HeaderName()
		}
		return &attemptTransport{t: t, next: next, keyHeader: keyHeader}
	}
}

// join returns hooks that call a's hook, then b's, for every event.
func join(a, b transport.Hooks) transport.Hooks {
	return transport.Hooks{
		OnAttempt:            both(a.OnAttempt, b.OnAttempt),
		OnRetry:              both(a.OnRetry, b.OnRetry),
		OnGiveUp:             both(a.OnGiveUp, b.OnGiveUp),
		OnBreakerStateChange: bothChange(a.OnBreakerStateChange, b.OnBreakerStateChange),
		OnRateLimitWait:      both(a.OnRateLimitWait, b.OnRateLimitWait),
		OnRateLimitReject:    both(a.OnRateLimitReject, b.OnRateLimitReject),
		OnHedge:              both(a.OnHedge, b.OnHedge),
		OnHedgeWon:           both(a.OnHedgeWon, b.OnHedgeWon),
		OnCopyCanceled:       both(a.OnCopyCanceled, b.OnCopyCanceled),
		OnThrottle:           both(a.OnThrottle, b.OnThrottle),
		OnStreamCommit:       both(a.OnStreamCommit, b.OnStreamCommit),
		OnConcurrencyChange:  both(a.OnConcurrencyChange, b.OnConcurrencyChange),
		OnConcurrencyRefuse:  both(a.OnConcurrencyRefuse, b.OnConcurrencyRefuse),
		OnEject:              both(a.OnEject, b.OnEject),
		OnFailover:           both(a.OnFailover, b.OnFailover),
	}
}

func both[E any](f, g func(E)) func(E) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(e E) { f(e); g(e) }
}

func bothChange(f, g func(string, transport.BreakerState, transport.BreakerState)) func(string, transport.BreakerState, transport.BreakerState) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(k string, from, to transport.BreakerState) { f(k, from, to); g(k, from, to) }
}
