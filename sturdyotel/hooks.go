package sturdyotel

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

// instruments are sturdy's counters; a nil one records nothing.
type instruments struct {
	attempts, retries, giveUps, budget                 metric.Int64Counter
	hedges, hedgesWon, hedgesCanceled                  metric.Int64Counter
	breakerChanges, breakerRefusals                    metric.Int64Counter
	quotaWaits, quotaRejections, throttleRejects       metric.Int64Counter
	streams, concurrencyRefusals, ejections, failovers metric.Int64Counter
	concurrencyLimit                                   metric.Int64Gauge
}

func newInstruments(m metric.Meter) instruments {
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			otel.Handle(err)
			return nil
		}
		return c
	}
	gauge := func(name, unit, desc string) metric.Int64Gauge {
		g, err := m.Int64Gauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err != nil {
			otel.Handle(err)
			return nil
		}
		return g
	}
	return instruments{
		attempts:        counter(MetricAttempts, "{attempt}", "Attempts sent by sturdy's Retry, the first of each operation included."),
		retries:         counter(MetricRetries, "{retry}", "Retries sturdy decided to make, by reason."),
		giveUps:         counter(MetricGiveUps, "{operation}", "Operations that ended on a failure, by why no further attempt was made."),
		budget:          counter(MetricBudgetExhausted, "{operation}", "Operations that ended because their host's retry budget was spent."),
		hedges:          counter(MetricHedgesSent, "{hedge}", "Hedges sent: copies of a request after the first."),
		hedgesWon:       counter(MetricHedgesWon, "{hedge}", "Hedges whose response won the race."),
		hedgesCanceled:  counter(MetricHedgesCanceled, "{copy}", "Copies of a hedged request canceled because another copy won."),
		breakerChanges:  counter(MetricBreakerChanges, "{change}", "Circuit breaker state changes."),
		breakerRefusals: counter(MetricBreakerRefusals, "{attempt}", "Attempts a circuit breaker refused unsent."),
		quotaWaits:      counter(MetricQuotaWaits, "{wait}", "Requests that waited for a server quota or the client-side rate."),
		quotaRejections: counter(MetricQuotaRejections, "{request}", "Requests failed fast because their quota wait could not end in time."),
		throttleRejects: counter(MetricThrottleRejections, "{request}", "Requests the adaptive throttle shed unsent."),
		streams:         counter(MetricStreamReadAheads, "{stream}", "Streams read ahead to their first content event, committed or failed."),
		concurrencyRefusals: counter(MetricConcurrencyRefusals, "{request}",
			"Requests refused unsent because their host's concurrency limit was full and their time did not allow a wait."),
		concurrencyLimit: gauge(MetricConcurrencyLimit, "{request}", "A host's adaptive limit of requests in flight, when it changes."),
		ejections:        counter(MetricEjections, "{ejection}", "Addresses of a host ejected after failing."),
		failovers:        counter(MetricFailovers, "{attempt}", "Attempts sent to an alternate origin."),
	}
}

// add adds one to c, when it exists, with attrs.
func add(ctx context.Context, c metric.Int64Counter, attrs []attribute.KeyValue) {
	if c != nil {
		c.Add(ctx, 1, metric.WithAttributes(attrs...))
	}
}

// quiet reports whether an event of ctx would be neither recorded on
// its span nor counted in any of cs, so that its attributes need not be
// built (with no SDK registered, every hook costs only this check).
func quiet(ctx context.Context, cs ...metric.Int64Counter) bool {
	if trace.SpanFromContext(ctx).IsRecording() {
		return false
	}
	for _, c := range cs {
		if c != nil && c.Enabled(ctx) {
			return false
		}
	}
	return true
}

// event adds an event to the recording span of ctx, if any.
func event(ctx context.Context, name string, attrs ...attribute.KeyValue) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// Hooks returns hooks that count the stack's decisions (the Metric
// constants) and add them as events (the Event constants) to the span of
// each request's context. [Telemetry.Apply] joins them to Options.Hooks.
// A breaker refusal is seen through OnAttempt, so only with the Retry
// layer on (as it is in [transport.New] by default).
func (t *Telemetry) Hooks() transport.Hooks {
	in := &t.inst
	return transport.Hooks{
		OnAttempt: func(e policy.AttemptEvent) {
			if quiet(reqContext(e.Request), in.attempts, in.breakerRefusals) {
				return
			}
			ctx, attrs := requestAttrs(e.Request, 2)
			var ce *transport.CircuitOpenError
			switch {
			case errors.As(e.Err, &ce):
				attrs = append(attrs, attribute.String(attrBreakerSt, ce.State.String()))
				add(ctx, in.breakerRefusals, attrs)
				event(ctx, EventBreakerRefused, append(attrs,
					attribute.String(attrBreakerKey, ce.Key),
					attribute.Int(attrAttempt, e.Attempt),
					attribute.Float64(attrRetryIn, ce.RetryIn.Seconds()))...)
			case errors.Is(e.Err, transport.ErrThrottled), errors.Is(e.Err, ratelimit.ErrQuotaExhausted),
				errors.Is(e.Err, transport.ErrConcurrencyLimit):
				// Unsent: OnThrottle, OnRateLimitReject and OnConcurrencyRefuse report these.
			default:
				add(ctx, in.attempts, append(attrs, outcome(ctx, e.Status, e.Err)...))
			}
		},
		OnRetry: func(e policy.RetryEvent) {
			if quiet(reqContext(e.Request), in.retries) {
				return
			}
			ctx, attrs := requestAttrs(e.Request, 6)
			attrs = append(attrs, attribute.String(attrRetryReason, e.Reason))
			add(ctx, in.retries, attrs)
			wait := "backoff"
			if e.RetryAfter > 0 && e.RetryAfter >= e.Wait {
				wait = "retry-after" // the server's wait, longer than the backoff
			}
			event(ctx, EventRetry, append(append(attrs,
				attribute.Int(attrAttempt, e.Attempt),
				attribute.Float64(attrWait, e.Wait.Seconds()),
				attribute.String(attrWaitReason, wait)),
				outcome(ctx, e.Status, e.Err)...)...)
		},
		OnGiveUp: func(e policy.GiveUpEvent) {
			if quiet(reqContext(e.Request), in.giveUps, in.budget) {
				return
			}
			ctx, attrs := requestAttrs(e.Request, 4)
			if e.Reason == policy.ReasonBudgetSpent {
				add(ctx, in.budget, attrs)
			}
			attrs = append(attrs, attribute.String(attrGiveUp, string(e.Reason)))
			add(ctx, in.giveUps, attrs)
			event(ctx, EventGiveUp, append(append(attrs,
				attribute.Int(attrAttempts, e.Attempts)),
				outcome(ctx, e.Status, e.Err)...)...)
		},
		OnBreakerStateChange: func(key string, from, to transport.BreakerState) {
			add(context.Background(), in.breakerChanges, []attribute.KeyValue{
				attribute.String(attrBreakerKey, key),
				attribute.String(attrBreakerFrom, from.String()),
				attribute.String(attrBreakerTo, to.String()),
			})
		},
		OnRateLimitWait: func(e ratelimit.WaitEvent) {
			if quiet(reqContext(e.Request), in.quotaWaits) {
				return
			}
			ctx, attrs := requestAttrs(e.Request, 3)
			attrs = append(attrs, attribute.String(attrWaitReason, e.Reason))
			add(ctx, in.quotaWaits, attrs)
			event(ctx, EventQuotaWait, append(attrs,
				attribute.String(attrQuotaKey, e.Key),
				attribute.Float64(attrWait, e.Wait.Seconds()))...)
		},
		OnRateLimitReject: func(e ratelimit.RejectEvent) {
			if quiet(reqContext(e.Request), in.quotaRejections) {
				return
			}
			ctx, attrs := requestAttrs(e.Request, 3)
			attrs = append(attrs, attribute.String(attrWaitReason, e.Reason))
			add(ctx, in.quotaRejections, attrs)
			event(ctx, EventQuotaReject, append(attrs,
				attribute.String(attrQuotaKey, e.Key),
				attribute.Float64(attrWait, e.Wait.Seconds()))...)
		},
		OnHedge: func(e policy.HedgeEvent) {
			if quiet(reqContext(e.Request), in.hedges) {
				return
			}
			ctx, attrs := requestAttrs(e.Request, 2)
			add(ctx, in.hedges, attrs)
			event(ctx, EventHedgeSent, hedgeAttrs(attrs, e)...)
		},
		OnHedgeWon: func(e policy.HedgeEvent) {
			if quiet(reqContext(e.Request), in.hedgesWon) {
				return
			}
			ctx, attrs := requestAttrs(e.Request, 3)
			add(ctx, in.hedgesWon, attrs)
			event(ctx, EventHedgeWon, append(hedgeAttrs(attrs, e), semconv.HTTPResponseStatusCode(e.Status))...)
		},
		OnCopyCanceled: func(e policy.HedgeEvent) {
			if quiet(reqContext(e.Request), in.hedgesCanceled) {
				return
			}
			ctx, attrs := requestAttrs(e.Request, 2)
			add(ctx, in.hedgesCanceled, attrs)
			event(ctx, EventHedgeCanceled, hedgeAttrs(attrs, e)...)
		},
		OnThrottle: func(e transport.ThrottleEvent) {
			if quiet(reqContext(e.Request), in.throttleRejects) {
				return
			}
			ctx, attrs := requestAttrs(e.Request, 1)
			add(ctx, in.throttleRejects, attrs)
			event(ctx, EventThrottled, append(attrs, attribute.Float64(attrProb, e.Probability))...)
		},
		OnConcurrencyChange: func(e transport.ConcurrencyEvent) {
			if g := in.concurrencyLimit; g != nil {
				g.Record(context.Background(), int64(e.Limit), metric.WithAttributes(attribute.String(attrConcKey, e.Host)))
			}
		},
		OnConcurrencyRefuse: func(e transport.ConcurrencyEvent) {
			if quiet(reqContext(e.Request), in.concurrencyRefusals) {
				return
			}
			ctx, attrs := requestAttrs(e.Request, 1)
			add(ctx, in.concurrencyRefusals, attrs)
			event(ctx, EventConcurrencyRefused, append(attrs,
				attribute.String(attrConcKey, e.Host),
				attribute.Int(attrConcLimit, e.Limit),
				attribute.Int(attrConcInFlight, e.InFlight),
				attribute.Float64(attrWait, e.Waited.Seconds()))...)
		},
		OnStreamCommit: func(e transport.StreamEvent) {
			if quiet(reqContext(e.Request), in.streams) {
				return
			}
			ctx, attrs := requestAttrs(e.Request, 3)
			attrs = append(attrs, attribute.Bool(attrCommitted, e.Committed))
			if e.Status != 0 {
				attrs = append(attrs, semconv.HTTPResponseStatusCode(e.Status))
			}
			add(ctx, in.streams, attrs)
			event(ctx, EventStream, append(attrs, attribute.Float64(attrWait, e.Wait.Seconds()))...)
		},
		OnEject: func(e transport.EjectionEvent) {
			host, port, _ := net.SplitHostPort(e.Host)
			p, _ := strconv.Atoi(port)
			add(context.Background(), in.ejections, []attribute.KeyValue{
				semconv.ServerAddress(host), semconv.ServerPort(p),
				semconv.NetworkPeerAddress(e.Address),
				attribute.Int(attrEjections, e.Ejections),
			})
		},
		OnFailover: func(e transport.FailoverEvent) {
			if quiet(reqContext(e.Request), in.failovers) {
				return
			}
			ctx, attrs := requestAttrs(e.Request, 2)
			attrs = append(attrs, attribute.String(attrFailoverTo, e.To), attribute.String(attrFailoverWhy, e.Reason))
			add(ctx, in.failovers, attrs)
			event(ctx, EventFailover, attrs...)
		},
	}
}

// reqContext returns r's context, or Background for no request.
func reqContext(r *http.Request) context.Context {
	if r == nil {
		return context.Background()
	}
	return r.Context()
}

// requestAttrs returns r's context and its method, server.address and
// server.port, with room for extra more. The path is left out: it can
// hold IDs without bound.
func requestAttrs(r *http.Request, extra int) (context.Context, []attribute.KeyValue) {
	if r == nil || r.URL == nil {
		return context.Background(), nil
	}
	attrs := make([]attribute.KeyValue, 0, 3+extra+2)
	method, _ := methodAttrs(r.Method)
	host, port := serverOf(r.URL)
	attrs = append(attrs, method, semconv.ServerAddress(host), semconv.ServerPort(port))
	return r.Context(), attrs
}

// outcome is http.response.status_code, or error.type for an error that
// ended a request of ctx.
func outcome(ctx context.Context, status int, err error) []attribute.KeyValue {
	if err != nil {
		return []attribute.KeyValue{errorType(ctx, err)}
	}
	if status == 0 {
		return nil
	}
	return []attribute.KeyValue{semconv.HTTPResponseStatusCode(status)}
}

func hedgeAttrs(attrs []attribute.KeyValue, e policy.HedgeEvent) []attribute.KeyValue {
	return append(attrs, attribute.Int(attrCopy, e.Copy), attribute.Float64(attrElapsed, e.Elapsed.Seconds()))
}
