package sturdyotel

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// pipeline is an in-memory OpenTelemetry SDK: a span recorder and a
// manual metric reader.
type pipeline struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
}

func newPipeline(t *testing.T) *pipeline {
	p := &pipeline{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	p.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.spans))
	p.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.reader))
	t.Cleanup(func() {
		if err := p.tp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if err := p.mp.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return p
}

// telemetry returns a Telemetry that records to p.
func (p *pipeline) telemetry() *Telemetry {
	return New(Options{TracerProvider: p.tp, MeterProvider: p.mp})
}

// tree prints the ended spans as a tree, children under their parent in
// the order they started, with their kind, start and length relative to
// the first span (virtual time in a synctest bubble), attributes and
// events. IDs and wall-clock times are left out, so it can be compared.
func (p *pipeline) tree() string {
	return spanTree(p.spans.Ended())
}

func spanTree(spans []sdktrace.ReadOnlySpan) string {
	if len(spans) == 0 {
		return ""
	}
	slices.SortStableFunc(spans, func(a, b sdktrace.ReadOnlySpan) int {
		if c := a.StartTime().Compare(b.StartTime()); c != 0 {
			return c
		}
		return strings.Compare(attrString(a.Attributes()), attrString(b.Attributes()))
	})
	t0 := spans[0].StartTime()
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
			ind := strings.Repeat("  ", depth)
			fmt.Fprintf(&b, "%s%s %s +%v %v", ind, s.Name(), s.SpanKind(), s.StartTime().Sub(t0), s.EndTime().Sub(s.StartTime()))
			if st := s.Status(); st.Code.String() != "Unset" {
				fmt.Fprintf(&b, " status=%s", st.Code)
			}
			if a := attrString(s.Attributes()); a != "" {
				fmt.Fprintf(&b, " {%s}", a)
			}
			b.WriteString("\n")
			for _, e := range s.Events() {
				fmt.Fprintf(&b, "%s  event %s +%v {%s}\n", ind, e.Name, e.Time.Sub(t0), attrString(eventAttrs(e.Attributes)))
			}
			walk(s.SpanContext().SpanID(), false, depth+1)
		}
	}
	walk(trace.SpanID{}, true, 0)
	return b.String()
}

// eventAttrs leaves out the request attributes every sturdy event
// repeats (the tests check them on the spans and metrics), and prints a
// breaker's retry_in, which its jittered cooldown makes random, as
// whether it lies within a minute.
func eventAttrs(kvs []attribute.KeyValue) []attribute.KeyValue {
	kvs = slices.DeleteFunc(slices.Clone(kvs), func(kv attribute.KeyValue) bool {
		return kv.Key == "http.request.method" || kv.Key == "server.address" || kv.Key == "server.port"
	})
	for i, kv := range kvs {
		if kv.Key == attrRetryIn {
			s := kv.Value.AsFloat64()
			kvs[i] = attribute.Bool(attrRetryIn+".within_a_minute", s > 0 && s <= 60)
		}
	}
	return kvs
}

// attrString prints attributes sorted by key, as k=v.
func attrString(kvs []attribute.KeyValue) string {
	var parts []string
	for _, kv := range kvs {
		parts = append(parts, string(kv.Key)+"="+kv.Value.Emit())
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// metrics prints every metric point p's reader collects, one a line,
// sorted: counters as name{attrs} = value, histograms as name{attrs}
// count=n sum=seconds.
func (p *pipeline) metrics(t *testing.T) string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := p.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return metricLines(rm)
}

func metricLines(rm metricdata.ResourceMetrics) string {
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, pt := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} = %d", m.Name, attrString(pt.Attributes.ToSlice()), pt.Value))
				}
			case metricdata.Gauge[int64]:
				for _, pt := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} = %d", m.Name, attrString(pt.Attributes.ToSlice()), pt.Value))
				}
			case metricdata.Histogram[float64]:
				for _, pt := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d sum=%g", m.Name, attrString(pt.Attributes.ToSlice()), pt.Count, pt.Sum))
				}
			default:
				lines = append(lines, fmt.Sprintf("%s: %T", m.Name, m.Data))
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// diff reports got against want, both trimmed, line by line.
func diff(t *testing.T, what, got, want string) {
	t.Helper()
	got, want = strings.TrimSpace(got), strings.TrimSpace(want)
	if got == want {
		return
	}
	t.Errorf("%s:\ngot:\n%s\n\nwant:\n%s", what, got, want)
}
