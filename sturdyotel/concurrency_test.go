package sturdyotel

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// TestConcurrencyRefusalIsReported: a request that a host's concurrency
// limit refuses unsent has no attempt span and no attempt counted; its
// refusal is an event on the caller's span and is counted.
func TestConcurrencyRefusalIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeline(t)
		release := make(chan struct{})
		base := httptestutil.NewHandlerTransport(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				<-release
			}
			w.Write([]byte("ok"))
		}))
		o := transport.Options{Base: base, Concurrency: &policy.Concurrency{Initial: 1, Min: 1, Max: 1}}
		c := &http.Client{Transport: transport.New(p.telemetry().Apply(o))}
		held := make(chan error, 1)
		go func() {
			_, err := call(p, c, context.Background(), "holder", "http://api.test/hold")
			held <- err
		}()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if _, err := call(p, c, ctx, "refused", "http://api.test/things"); !errors.Is(err, transport.ErrConcurrencyLimit) {
			t.Fatalf("second call: %v, want ErrConcurrencyLimit", err)
		}
		close(release)
		if err := <-held; err != nil {
			t.Fatalf("holder: %v", err)
		}
		var caller sdktrace.ReadOnlySpan
		for _, s := range p.spans.Ended() {
			if s.Name() == "refused" {
				caller = s
			}
		}
		if caller == nil {
			t.Fatal("no span for the refused call")
		}
		for _, s := range p.spans.Ended() {
			if s.Parent().SpanID() == caller.SpanContext().SpanID() {
				t.Errorf("refused call has an attempt span %q, want none", s.Name())
			}
		}
		var events []string
		for _, e := range caller.Events() {
			events = append(events, e.Name)
		}
		if !strings.Contains(strings.Join(events, " "), EventConcurrencyRefused) {
			t.Errorf("events %v, want %s among them", events, EventConcurrencyRefused)
		}
		m := p.metrics(t)
		var refusals, attempts []string
		for _, line := range strings.Split(m, "\n") {
			switch {
			case strings.HasPrefix(line, MetricConcurrencyRefusals+"{"):
				refusals = append(refusals, line)
			case strings.HasPrefix(line, MetricAttempts+"{"):
				attempts = append(attempts, line)
			}
		}
		if len(refusals) != 1 || !strings.HasSuffix(refusals[0], "} = 1") {
			t.Errorf("%s points %q, want one of value 1", MetricConcurrencyRefusals, refusals)
		}
		if len(attempts) != 1 || !strings.HasSuffix(attempts[0], "} = 1") {
			t.Errorf("%s points %q, want one of value 1 (the holder's; a refusal is no attempt)", MetricAttempts, attempts)
		}
	})
}

// TestConcurrencyLimitIsReported: a host's limit falling on losses is
// recorded as a gauge, by host.
func TestConcurrencyLimitIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPipeline(t)
		base := httptestutil.NewHandlerTransport(httptestutil.Script(httptestutil.Status(503, "overloaded").Forever()))
		o := transport.Options{Base: base, Retry: policy.Retry{MaxAttempts: 1}, Disable: transport.LayerBreaker,
			Concurrency: &policy.Concurrency{Initial: 10, Min: 1}}
		c := &http.Client{Transport: transport.New(p.telemetry().Apply(o))}
		for range 20 {
			if _, err := call(p, c, context.Background(), "call", "http://api.test/things"); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond) // a window ends
		}
		var points []string
		for _, line := range strings.Split(p.metrics(t), "\n") {
			if strings.HasPrefix(line, MetricConcurrencyLimit+"{") {
				points = append(points, line)
			}
		}
		if len(points) != 1 || !strings.Contains(points[0], "sturdy.concurrency.key=http://api.test") || strings.HasSuffix(points[0], "= 10") {
			t.Errorf("%s points %q, want one for http://api.test, below 10", MetricConcurrencyLimit, points)
		}
	})
}
