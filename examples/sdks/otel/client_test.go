package otel

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// telemetry is an in-memory SDK pipeline: a span recorder and a manual
// metric reader.
type telemetry struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newTelemetry(t *testing.T) *telemetry {
	tm := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tm.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tm.spans))
	tm.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader))
	t.Cleanup(func() {
		tm.tp.Shutdown(context.Background())
		tm.mp.Shutdown(context.Background())
	})
	return tm
}

// tree prints the ended spans by name, kind and scope, children under
// their parent in the order they started.
func tree(spans []sdktrace.ReadOnlySpan) string {
	slices.SortStableFunc(spans, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext().SpanID()] = true
	}
	short := map[string]string{
		"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp": "otelhttp",
		"github.com/sturdyhttp/sturdy/sturdyotel":                       "sturdyotel",
	}
	var b strings.Builder
	var walk func(parent trace.SpanID, root bool, depth int)
	walk = func(parent trace.SpanID, root bool, depth int) {
		for _, s := range spans {
			if root && ids[s.Parent().SpanID()] || !root && s.Parent().SpanID() != parent {
				continue
			}
			fmt.Fprintf(&b, "%s%s %s %s", strings.Repeat("  ", depth), s.Name(), s.SpanKind(), short[s.InstrumentationScope().Name])
			for _, kv := range s.Attributes() {
				if kv.Key == "http.request.resend_count" || kv.Key == "http.response.status_code" {
					fmt.Fprintf(&b, " %s=%d", kv.Key, kv.Value.AsInt64())
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

// TestTraceFromClientToServer: a call that the server answers 503, 503,
// then 200, over a real socket to a server instrumented with otelhttp.
// Each server span is the child of the attempt that reached it, and the
// bare net/http client beside the stack, under the same otelhttp, gets
// the first 503 in one request.
func TestTraceFromClientToServer(t *testing.T) {
	tm := newTelemetry(t)
	var served atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if served.Add(1)%3 != 0 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	srv := httptest.NewServer(otelhttp.NewHandler(handler, "serve",
		otelhttp.WithTracerProvider(tm.tp), otelhttp.WithMeterProvider(tm.mp),
		otelhttp.WithPropagators(propagation.TraceContext{})))
	defer srv.Close()

	base := srv.Client().Transport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	client := NewClient(tm.tp, tm.mp, transport.Options{
		Base:  base,
		Retry: policy.Retry{Backoff: policy.Exponential(time.Millisecond, time.Millisecond)},
	})
	get := func(c *http.Client) int {
		t.Helper()
		resp, err := c.Get(srv.URL + "/things")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(client); got != 200 {
		t.Fatalf("sturdy: got status %d, want 200", got)
	}
	want := `
HTTP GET client otelhttp http.response.status_code=200 [sturdy.retry] [sturdy.retry]
  GET client sturdyotel http.response.status_code=503
    GET server otelhttp http.response.status_code=503
  GET client sturdyotel http.request.resend_count=1 http.response.status_code=503
    GET server otelhttp http.response.status_code=503
  GET client sturdyotel http.request.resend_count=2 http.response.status_code=200
    GET server otelhttp http.response.status_code=200`
	if got := tree(tm.spans.Ended()); strings.TrimSpace(got) != strings.TrimSpace(want) {
		t.Errorf("spans:\n%s\nwant:\n%s", got, strings.TrimSpace(want))
	}

	// Each request is counted once per metric: otelhttp's client metric
	// holds the operation, sturdy's the attempts, the server's each
	// request it served.
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, p := range h.DataPoints {
					got[m.Name] += p.Count
				}
			}
		}
	}
	for name, n := range map[string]uint64{
		"http.client.request.duration":   1,
		"sturdy.client.attempt.duration": 3,
		"http.server.request.duration":   3,
	} {
		if got[name] != n {
			t.Errorf("%s: %d points, want %d", name, got[name], n)
		}
	}

	// The bare client, under the same otelhttp, delivers the server's
	// next answer (a 503) in one request; sturdy turned the same answer
	// into a 200 without sending any request twice that the server did
	// not ask for again.
	served.Store(0)
	bare := &http.Client{Transport: otelhttp.NewTransport(base, otelhttp.WithTracerProvider(tm.tp), otelhttp.WithMeterProvider(tm.mp))}
	if got := get(bare); got != 503 {
		t.Errorf("bare: got status %d, want 503", got)
	}
	if got := served.Load(); got != 1 {
		t.Errorf("bare: server got %d requests, want 1", got)
	}
}
