// Package otel feeds sturdy's hooks ([transport.Hooks]) to OpenTelemetry:
// counters and a histogram on a metric.Meter, and events on the span that
// each request's context carries.
package otel

import (
	"context"
	"errors"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

// The attribute keys of transport.SlogHooks, which its doc lists.
const (
	attrMethod   = "http.request.method"
	attrServer   = "server.address"
	attrStatus   = "http.response.status_code"
	attrAttempt  = "sturdy.attempt"
	attrAttempts = "sturdy.attempts"
	attrDuration = "sturdy.duration"
	attrWait     = "sturdy.wait"
	attrReason   = "sturdy.reason"
	attrKey      = "sturdy.key"
	attrFrom     = "sturdy.breaker.from"
	attrTo       = "sturdy.breaker.to"
)

// The metrics that [Hooks] records. Their attributes use the keys that
// [transport.SlogHooks] writes (http.request.method, server.address,
// sturdy.reason, ...), so logs and metrics line up.
const (
	MetricAttempts         = "sturdy.attempts"              // counter: attempts sent, by method, server, status or error
	MetricAttemptDuration  = "sturdy.attempt.duration"      // histogram, seconds: from sending an attempt to its response headers or error
	MetricRetries          = "sturdy.retries"               // counter: retries about to be made, by reason
	MetricGiveUps          = "sturdy.give_ups"              // counter: operations that ended on a failure, by reason
	MetricBreakerChanges   = "sturdy.breaker.state_changes" // counter: breaker transitions, by key, from and to
	MetricRateLimitWaits   = "sturdy.ratelimit.waits"       // counter: requests that waited for a quota, by key and reason
	MetricRateLimitRejects = "sturdy.ratelimit.rejects"     // counter: requests failed fast because their quota wait was too long
	AttrErrorType          = "error.type"                   // on attempts that ended in an error: "timeout", "canceled", "circuit_open", "quota_exhausted" or "network"
)

// The span events that [Hooks] adds to the span of the request's context.
const (
	EventAttempt       = "sturdy.attempt"
	EventRetry         = "sturdy.retry"
	EventGiveUp        = "sturdy.give_up"
	EventRateLimitWait = "sturdy.ratelimit.wait"
)

// Hooks returns hooks that record the stack's work on meter (the metrics
// named by the Metric constants) and as events (the Event constants) on
// the span of each request's context; a request whose context carries no
// recording span adds no event. Use it as:
//
//	hooks, err := otel.Hooks(meterProvider.Meter("sturdy"))
//	rt := transport.New(transport.Options{Hooks: hooks})
//
// The span is the caller's (an otelhttp client span, or the handler's
// span of the service making the call): sturdy starts none of its own. An
// error creating an instrument is returned with hooks that record the
// other instruments.
func Hooks(meter metric.Meter) (transport.Hooks, error) {
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	attempts, err := meter.Int64Counter(MetricAttempts, metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts sent by sturdy, the first of each operation included."))
	check(err)
	duration, err := meter.Float64Histogram(MetricAttemptDuration, metric.WithUnit("s"),
		metric.WithDescription("Time from sending an attempt to its response headers or error."))
	check(err)
	retries, err := meter.Int64Counter(MetricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Retries sturdy decided to make."))
	check(err)
	giveUps, err := meter.Int64Counter(MetricGiveUps, metric.WithUnit("{operation}"),
		metric.WithDescription("Operations that ended on a failure."))
	check(err)
	breaker, err := meter.Int64Counter(MetricBreakerChanges, metric.WithUnit("{change}"),
		metric.WithDescription("Circuit breaker state changes."))
	check(err)
	waits, err := meter.Int64Counter(MetricRateLimitWaits, metric.WithUnit("{wait}"),
		metric.WithDescription("Requests that waited for a server quota or the client-side rate."))
	check(err)
	rejects, err := meter.Int64Counter(MetricRateLimitRejects, metric.WithUnit("{request}"),
		metric.WithDescription("Requests failed fast because their quota wait could not end in time."))
	check(err)

	h := transport.Hooks{}
	h.OnAttempt = func(e policy.AttemptEvent) {
		ctx, attrs := requestAttrs(e.Request)
		if e.Status != 0 {
			attrs = append(attrs, attribute.Int(attrStatus, e.Status))
		} else if e.Err != nil {
			attrs = append(attrs, attribute.String(AttrErrorType, errorType(e.Err)))
		}
		set := metric.WithAttributes(attrs...)
		if attempts != nil {
			attempts.Add(ctx, 1, set)
		}
		if duration != nil {
			duration.Record(ctx, e.Duration.Seconds(), set)
		}
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent(EventAttempt, trace.WithAttributes(append(attrs,
				attribute.Int(attrAttempt, e.Attempt),
				attribute.Float64(attrDuration, e.Duration.Seconds()))...))
		}
	}
	h.OnRetry = func(e policy.RetryEvent) {
		ctx, attrs := requestAttrs(e.Request)
		attrs = append(attrs, attribute.String(attrReason, e.Reason))
		if retries != nil {
			retries.Add(ctx, 1, metric.WithAttributes(attrs...))
		}
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			if e.Status != 0 {
				attrs = append(attrs, attribute.Int(attrStatus, e.Status))
			}
			span.AddEvent(EventRetry, trace.WithAttributes(append(attrs,
				attribute.Int(attrAttempt, e.Attempt),
				attribute.Float64(attrWait, e.Wait.Seconds()))...))
		}
	}
	h.OnGiveUp = func(e policy.GiveUpEvent) {
		ctx, attrs := requestAttrs(e.Request)
		attrs = append(attrs, attribute.String(attrReason, string(e.Reason)))
		if giveUps != nil {
			giveUps.Add(ctx, 1, metric.WithAttributes(attrs...))
		}
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			if e.Status != 0 {
				attrs = append(attrs, attribute.Int(attrStatus, e.Status))
			}
			span.AddEvent(EventGiveUp, trace.WithAttributes(append(attrs,
				attribute.Int(attrAttempts, e.Attempts))...))
		}
	}
	h.OnBreakerStateChange = func(key string, from, to transport.BreakerState) {
		if breaker != nil {
			breaker.Add(context.Background(), 1, metric.WithAttributes(
				attribute.String(attrKey, key),
				attribute.String(attrFrom, from.String()),
				attribute.String(attrTo, to.String())))
		}
	}
	h.OnRateLimitWait = func(e ratelimit.WaitEvent) {
		ctx, attrs := requestAttrs(e.Request)
		attrs = append(attrs, attribute.String(attrKey, e.Key), attribute.String(attrReason, e.Reason))
		if waits != nil {
			waits.Add(ctx, 1, metric.WithAttributes(attrs...))
		}
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent(EventRateLimitWait, trace.WithAttributes(append(attrs,
				attribute.Float64(attrWait, e.Wait.Seconds()))...))
		}
	}
	h.OnRateLimitReject = func(e ratelimit.RejectEvent) {
		ctx, attrs := requestAttrs(e.Request)
		if rejects != nil {
			rejects.Add(ctx, 1, metric.WithAttributes(append(attrs,
				attribute.String(attrKey, e.Key), attribute.String(attrReason, e.Reason))...))
		}
	}
	return h, errors.Join(errs...)
}

// requestAttrs returns r's context and its method and server attributes.
// The path is left out of metrics: it can hold IDs without bound.
func requestAttrs(r *http.Request) (context.Context, []attribute.KeyValue) {
	if r == nil {
		return context.Background(), nil
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, attribute.String(attrMethod, r.Method))
	if r.URL != nil {
		attrs = append(attrs, attribute.String(attrServer, r.URL.Host))
	}
	return r.Context(), attrs
}

// errorType names an attempt's error in a few stable words.
func errorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, transport.ErrCircuitOpen):
		return "circuit_open"
	case errors.Is(err, ratelimit.ErrQuotaExhausted):
		return "quota_exhausted"
	}
	return "network"
}
