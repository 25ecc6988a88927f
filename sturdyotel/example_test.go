package sturdyotel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/sturdyotel"
	"github.com/sturdyhttp/sturdy/transport"
)

// A call that took three attempts, traced with the SDK's stdout exporter:
// otelhttp's span is the operation, with sturdy's waits as its events and
// a client span per attempt beneath it. The exporter's JSON is printed as
// a tree, without the IDs and times that change from run to run.
func Example() {
	var out bytes.Buffer
	exporter, err := stdouttrace.New(stdouttrace.WithWriter(&out))
	if err != nil {
		fmt.Println(err)
		return
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	mp := sdkmetric.NewMeterProvider()
	defer mp.Shutdown(context.Background())

	server := httptestutil.Script(
		httptestutil.Status(503, "busy").Times(2),
		httptestutil.Status(200, "ok"),
	)
	tel := sturdyotel.New(sturdyotel.Options{TracerProvider: tp, MeterProvider: mp})
	rt := transport.New(tel.Apply(transport.Options{
		Base:  httptestutil.NewHandlerTransport(server),
		Retry: policy.Retry{Backoff: policy.Exponential(time.Millisecond, time.Second)},
	}))
	// The recommended placement: otelhttp around the whole stack.
	client := &http.Client{Transport: otelhttp.NewTransport(rt,
		otelhttp.WithTracerProvider(tp), otelhttp.WithMeterProvider(mp))}

	resp, err := client.Get("http://api.example.com/things")
	if err != nil {
		fmt.Println(err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	tp.Shutdown(context.Background())

	printTree(&out)
	// Output:
	// HTTP GET client http.response.status_code=200
	//   event sturdy.retry sturdy.attempt=2 http.response.status_code=503 sturdy.retry.reason=status 503 sturdy.wait.duration=0.001 sturdy.wait.reason=backoff
	//   event sturdy.retry sturdy.attempt=3 http.response.status_code=503 sturdy.retry.reason=status 503 sturdy.wait.duration=0.002 sturdy.wait.reason=backoff
	//   GET client sturdy.attempt=1 http.response.status_code=503 error.type=503
	//   GET client sturdy.attempt=2 http.request.resend_count=1 http.response.status_code=503 error.type=503
	//   GET client sturdy.attempt=3 http.request.resend_count=2 http.response.status_code=200
}

// exported is the part of a span, as stdouttrace writes it, that the
// example prints.
type exported struct {
	Name        string
	SpanContext struct{ SpanID string }
	Parent      struct{ SpanID string }
	SpanKind    int
	StartTime   time.Time
	Attributes  []exportedAttr
	Events      []struct {
		Name       string
		Attributes []exportedAttr
	}
}

type exportedAttr struct {
	Key   string
	Value struct{ Value any }
}

// printTree prints the spans stdouttrace wrote to r as a tree, children
// in the order they started, with a few attributes of each.
func printTree(r io.Reader) {
	var spans []exported
	for dec := json.NewDecoder(r); dec.More(); {
		var s exported
		if err := dec.Decode(&s); err != nil {
			fmt.Println(err)
			return
		}
		spans = append(spans, s)
	}
	slices.SortStableFunc(spans, func(a, b exported) int { return a.StartTime.Compare(b.StartTime) })
	kinds := map[int]string{1: "internal", 2: "server", 3: "client"}
	keep := []string{"sturdy.attempt", "http.request.resend_count", "http.response.status_code", "error.type",
		"sturdy.retry.reason", "sturdy.wait.duration", "sturdy.wait.reason"}
	attrs := func(as []exportedAttr) string {
		var b strings.Builder
		for _, k := range keep {
			for _, a := range as {
				if a.Key == k {
					fmt.Fprintf(&b, " %s=%v", a.Key, a.Value.Value)
				}
			}
		}
		return b.String()
	}
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		for _, s := range spans {
			if s.Parent.SpanID != parent {
				continue
			}
			ind := strings.Repeat("  ", depth)
			fmt.Printf("%s%s %s%s\n", ind, s.Name, kinds[s.SpanKind], attrs(s.Attributes))
			for _, e := range s.Events {
				fmt.Printf("%s  event %s%s\n", ind, e.Name, attrs(e.Attributes))
			}
			walk(s.SpanContext.SpanID, depth+1)
		}
	}
	walk("0000000000000000", 0)
}
