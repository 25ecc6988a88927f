package otel

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// telemetry is an in-memory OpenTelemetry pipeline: a manual metric
// reader and a span exporter.
type telemetry struct {
	reader *sdkmetric.ManualReader
	meters *sdkmetric.MeterProvider
	spans  *tracetest.InMemoryExporter
	tracer *sdktrace.TracerProvider
}

func newTelemetry() *telemetry {
	tm := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter()}
	tm.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader))
	tm.tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(tm.spans))
	return tm
}

func (tm *telemetry) shutdown(t *testing.T) {
	if err := tm.meters.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	if err := tm.tracer.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// collect returns the data points of every metric, by name.
func (tm *telemetry) collect(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// count sums the points of an int64 counter whose attributes include
// every one of want.
func count(data metricdata.Aggregation, want ...attribute.KeyValue) int64 {
	sum, _ := data.(metricdata.Sum[int64])
	var n int64
	for _, p := range sum.DataPoints {
		if hasAll(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

func hasAll(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func TestHooksFeedMetricsAndSpanEvents(t *testing.T) {
	const host = "api.test:80"
	tests := []struct {
		name        string
		steps       []httptestutil.Step
		maxAttempts int
		wantStatus  int
		// Per status, the attempts counted.
		wantAttempts map[int]int64
		wantRetries  int64
		wantGiveUps  int64
		// wantSeconds is the sum of the attempt durations: each attempt
		// of the script takes 1s (virtual time).
		wantSeconds float64
	}{{
		name: "two 503s, then 200",
		steps: []httptestutil.Step{
			httptestutil.Delay(time.Second, httptestutil.Status(503, "busy")).Times(2),
			httptestutil.Delay(time.Second, httptestutil.Status(200, "ok")),
		},
		wantStatus:   200,
		wantAttempts: map[int]int64{503: 2, 200: 1},
		wantRetries:  2, wantSeconds: 3,
	}, {
		name: "503 until sturdy gives up",
		steps: []httptestutil.Step{
			httptestutil.Delay(time.Second, httptestutil.Status(503, "busy")).Forever(),
		},
		maxAttempts:  2,
		wantStatus:   503,
		wantAttempts: map[int]int64{503: 2},
		wantRetries:  1, wantGiveUps: 1, wantSeconds: 2,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tm := newTelemetry()
				defer tm.shutdown(t)
				hooks, err := Hooks(tm.meters.Meter("sturdy-test"))
				if err != nil {
					t.Fatal(err)
				}

				n := httptestutil.NewNetwork()
				srv := n.Serve("api.test", httptestutil.Script(tt.steps...))
				defer srv.Close()
				base := n.Transport()
				defer base.CloseIdleConnections()
				client := &http.Client{Transport: transport.New(transport.Options{
					Base:  base,
					Retry: policy.Retry{MaxAttempts: tt.maxAttempts, Backoff: policy.Exponential(100*time.Millisecond, time.Second)},
					Hooks: hooks,
				})}

				ctx, span := tm.tracer.Tracer("test").Start(context.Background(), "GET /things")
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/things", nil)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				span.End()
				if resp.StatusCode != tt.wantStatus {
					t.Errorf("got status %d, want %d", resp.StatusCode, tt.wantStatus)
				}

				m := tm.collect(t)
				method, server := attribute.String(attrMethod, "GET"), attribute.String(attrServer, host)
				var total int64
				for status, want := range tt.wantAttempts {
					got := count(m[MetricAttempts], method, server, attribute.Int(attrStatus, status))
					if got != want {
						t.Errorf("%s{status=%d} = %d, want %d", MetricAttempts, status, got, want)
					}
					total += want
				}
				if got := count(m[MetricAttempts]); got != total {
					t.Errorf("%s = %d in all, want %d", MetricAttempts, got, total)
				}
				if got := count(m[MetricRetries], method, server, attribute.String(attrReason, "status 503")); got != tt.wantRetries {
					t.Errorf("%s{reason=status 503} = %d, want %d", MetricRetries, got, tt.wantRetries)
				}
				if got := count(m[MetricGiveUps], method, server); got != tt.wantGiveUps {
					t.Errorf("%s = %d, want %d", MetricGiveUps, got, tt.wantGiveUps)
				}
				hist, _ := m[MetricAttemptDuration].(metricdata.Histogram[float64])
				var hcount uint64
				var hsum float64
				for _, p := range hist.DataPoints {
					hcount += p.Count
					hsum += p.Sum
				}
				if hcount != uint64(total) || hsum < tt.wantSeconds || hsum > tt.wantSeconds+0.001 {
					t.Errorf("%s: %d attempts, %gs in all; want %d, %gs", MetricAttemptDuration, hcount, hsum, total, tt.wantSeconds)
				}

				spans := tm.spans.GetSpans()
				if len(spans) != 1 {
					t.Fatalf("got %d spans, want 1", len(spans))
				}
				events := map[string][]sdktrace.Event{}
				for _, e := range spans[0].Events {
					events[e.Name] = append(events[e.Name], e)
				}
				if got := len(events[EventAttempt]); int64(got) != total {
					t.Errorf("%d %s events, want %d", got, EventAttempt, total)
				}
				if got := len(events[EventGiveUp]); int64(got) != tt.wantGiveUps {
					t.Errorf("%d %s events, want %d", got, EventGiveUp, tt.wantGiveUps)
				}
				if got := len(events[EventRetry]); int64(got) != tt.wantRetries {
					t.Fatalf("%d %s events, want %d", got, EventRetry, tt.wantRetries)
				}
				for i, e := range events[EventRetry] {
					want := []attribute.KeyValue{
						attribute.Int(attrAttempt, i+2),
						attribute.String(attrReason, "status 503"),
						attribute.Int(attrStatus, 503),
						attribute.Float64(attrWait, (100 * time.Millisecond << i).Seconds()),
					}
					if set := attribute.NewSet(e.Attributes...); !hasAll(set, want) {
						t.Errorf("retry event %d: attributes %v, want %v among them", i+1, e.Attributes, want)
					}
				}
			})
		})
	}
}

func TestHooksBreakerAndRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm := newTelemetry()
		defer tm.shutdown(t)
		hooks, err := Hooks(tm.meters.Meter("sturdy-test"))
		if err != nil {
			t.Fatal(err)
		}
		n := httptestutil.NewNetwork()
		// A quota of one request per 10s window: the second call waits.
		srv := n.Serve("api.test", httptestutil.Script(
			httptestutil.RateLimitHeaders(200, "ok", httptestutil.Quota{Limit: 1, Remaining: 0, Reset: 10 * time.Second}, httptestutil.FamilyIETF),
			httptestutil.Status(200, "ok"),
			httptestutil.Status(500, "down").Forever(),
		))
		defer srv.Close()
		base := n.Transport()
		defer base.CloseIdleConnections()
		client := &http.Client{Transport: transport.New(transport.Options{
			Base:    base,
			Retry:   policy.Retry{MaxAttempts: 1},
			Breaker: transport.BreakerSettings{ConsecutiveFailures: 2, Cooldown: time.Minute},
			Hooks:   hooks,
		})}
		start := time.Now()
		var err2 error
		for i := range 5 {
			resp, err := client.Get(srv.URL + "/")
			if err != nil {
				err2 = err
				if i != 4 {
					t.Errorf("call %d: got error %v, want a response", i+1, err)
				}
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if !errors.Is(err2, transport.ErrCircuitOpen) {
			t.Errorf("call 5: got error %v, want ErrCircuitOpen", err2)
		}
		if took := time.Since(start); took < 10*time.Second {
			t.Errorf("calls took %v, want at least the 10s quota reset", took)
		}

		m := tm.collect(t)
		if got := count(m[MetricRateLimitWaits], attribute.String(attrReason, "quota")); got != 1 {
			t.Errorf("%s{reason=quota} = %d, want 1", MetricRateLimitWaits, got)
		}
		if got := count(m[MetricBreakerChanges], attribute.String(attrFrom, "closed"), attribute.String(attrTo, "open")); got != 1 {
			t.Errorf("%s{closed->open} = %d, want 1", MetricBreakerChanges, got)
		}
		if got := count(m[MetricAttempts], attribute.String(AttrErrorType, "circuit_open")); got != 1 {
			t.Errorf("%s{error.type=circuit_open} = %d, want 1", MetricAttempts, got)
		}
	})
}
