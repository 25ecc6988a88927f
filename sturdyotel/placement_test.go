package sturdyotel

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// shape prints the span tree by name, kind and resend count, with each
// span's events by name: what a placement changes.
func shape(spans []sdktrace.ReadOnlySpan) string {
	slices.SortStableFunc(spans, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	var b strings.Builder
	var walk func(parent trace.SpanID, root bool, depth int)
	walk = func(parent trace.SpanID, root bool, depth int) {
		for _, s := range spans {
			if root && ids[s.Parent().SpanID()] || !root && s.Parent().SpanID() != parent {
				continue
			}
			fmt.Fprintf(&b, "%s%s %s %s", strings.Repeat("  ", depth), s.Name(), s.SpanKind(), s.InstrumentationScope().Name)
			for _, kv := range s.Attributes() {
				if kv.Key == "http.request.resend_count" {
					fmt.Fprintf(&b, " resend=%d", kv.Value.AsInt64())
				}
			}
			for _, e := range s.Events() {
				fmt.Fprintf(&b, " [%s]", e.Name)
			}
			b.WriteString("\n")
			walk(s.SpanContext().SpanID(), false, depth+1)
		}
	}
	walk(trace.SpanID{}, true, 0)
	return b.String()
}

// durations counts the points of each duration histogram, by scope.
func durations(t *testing.T, p *pipeline) string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := p.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && strings.HasSuffix(m.Name, ".duration") {
				var n uint64
				for _, pt := range h.DataPoints {
					n += pt.Count
				}
				lines = append(lines, fmt.Sprintf("%s %s %d", sm.Scope.Name, m.Name, n))
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestPlacements: with otelhttp around the stack, as its Base, or both,
// no request is counted twice by sturdyotel, and each attempt has one
// span (but for "both", where otelhttp itself records the operation and
// each attempt in http.client.request.duration).
func TestPlacements(t *testing.T) {
	const (
		scope = ScopeName
		oh    = "go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	)
	tests := []struct {
		name             string
		outer, base      bool
		shape, durations string
	}{{
		name: "sturdyotel alone",
		shape: `
call internal test [sturdy.retry] [sturdy.retry]
  GET client ` + scope + `
  GET client ` + scope + ` resend=1
  GET client ` + scope + ` resend=2`,
		durations: scope + " http.client.request.duration 3",
	}, {
		// The recommended placement: otelhttp's span is the operation,
		// the attempts' parent, and carries sturdy's events; it records
		// the operation in http.client.request.duration, and sturdyotel
		// the attempts in sturdy.client.attempt.duration.
		name:  "otelhttp outermost",
		outer: true,
		shape: `
call internal test
  HTTP GET client ` + oh + ` [sturdy.retry] [sturdy.retry]
    GET client ` + scope + `
    GET client ` + scope + ` resend=1
    GET client ` + scope + ` resend=2`,
		durations: scope + " sturdy.client.attempt.duration 3\n" + oh + " http.client.request.duration 1",
	}, {
		// otelhttp as Base makes the attempt spans (without a resend
		// count) and records them; sturdyotel adds only its hooks.
		name: "otelhttp as Base",
		base: true,
		shape: `
call internal test [sturdy.retry] [sturdy.retry]
  HTTP GET client ` + oh + `
  HTTP GET client ` + oh + `
  HTTP GET client ` + oh,
		durations: oh + " http.client.request.duration 3",
	}, {
		// Both: otelhttp counts the operation and each attempt in one
		// metric (1 + 3); sturdyotel adds nothing to it.
		name:  "otelhttp both",
		outer: true, base: true,
		shape: `
call internal test
  HTTP GET client ` + oh + ` [sturdy.retry] [sturdy.retry]
    HTTP GET client ` + oh + `
    HTTP GET client ` + oh + `
    HTTP GET client ` + oh,
		durations: oh + " http.client.request.duration 4",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPipeline(t)
				ohOpts := []otelhttp.Option{otelhttp.WithTracerProvider(p.tp), otelhttp.WithMeterProvider(p.mp)}
				var base http.RoundTripper = httptestutil.NewHandlerTransport(httptestutil.Script(
					httptestutil.Delay(10*time.Millisecond, httptestutil.Status(503, "busy")).Times(2),
					httptestutil.Delay(10*time.Millisecond, httptestutil.Status(200, "ok")),
				))
				if tt.base {
					base = otelhttp.NewTransport(base, ohOpts...)
				}
				rt := transport.New(p.telemetry().Apply(transport.Options{
					Base:  base,
					Retry: policy.Retry{Backoff: policy.Exponential(100*time.Millisecond, time.Second)},
				}))
				if tt.outer {
					rt = otelhttp.NewTransport(rt, ohOpts...)
				}
				status, err := call(p, &http.Client{Transport: rt}, context.Background(), "call", "http://api.test/things")
				if status != 200 || err != nil {
					t.Fatalf("got %d, %v; want 200", status, err)
				}
				synctest.Wait()
				diff(t, "spans", shape(p.spans.Ended()), tt.shape)
				diff(t, "duration points", durations(t, p), tt.durations)
			})
		})
	}
}
