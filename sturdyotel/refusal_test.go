package sturdyotel

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

// TestRefusalsHaveNoAttemptSpan: a request that a layer refuses unsent
// (the throttle, a quota wait too long) has no attempt span; its refusal
// is an event on the caller's span, and is counted.
func TestRefusalsHaveNoAttemptSpan(t *testing.T) {
	tests := []struct {
		name    string
		steps   []httptestutil.Step
		options transport.Options
		err     error
		event   string
		metric  string
	}{{
		// Every answer a 500: the throttle's rejection probability grows
		// with each failure, n/(n+1), so a rejection comes within a few
		// calls (none in 200 has a probability of 1/201!).
		name:    "throttle",
		steps:   []httptestutil.Step{httptestutil.Status(500, "down").Forever()},
		options: transport.Options{Retry: policy.Retry{MaxAttempts: 1}, Throttle: &policy.Throttle{}, Disable: transport.LayerBreaker},
		err:     transport.ErrThrottled,
		event:   EventThrottled,
		metric:  MetricThrottleRejections,
	}, {
		// A quota of one request per 10s, and waits of at most 1s: the
		// second call fails fast.
		name: "quota",
		steps: []httptestutil.Step{
			httptestutil.RateLimitHeaders(200, "ok", httptestutil.Quota{Limit: 1, Remaining: 0, Reset: 10 * time.Second}, httptestutil.FamilyIETF),
			httptestutil.Status(200, "ok").Forever(),
		},
		options: transport.Options{RateLimit: ratelimit.Options{MaxWait: time.Second}},
		err:     ratelimit.ErrQuotaExhausted,
		event:   EventQuotaReject,
		metric:  MetricQuotaRejections,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPipeline(t)
				o := tt.options
				o.Base = httptestutil.NewHandlerTransport(httptestutil.Script(tt.steps...))
				c := &http.Client{Transport: transport.New(p.telemetry().Apply(o))}
				refused := ""
				for i := 1; i <= 200 && refused == ""; i++ {
					name := "call " + strconv.Itoa(i)
					if _, err := call(p, c, context.Background(), name, "http://api.test/things"); errors.Is(err, tt.err) {
						refused = name
					} else if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
				}
				if refused == "" {
					t.Fatalf("no call was refused with %v", tt.err)
				}
				var caller sdktrace.ReadOnlySpan
				children := 0
				for _, s := range p.spans.Ended() {
					if s.Name() == refused {
						caller = s
					}
				}
				if caller == nil {
					t.Fatalf("no span for %s", refused)
				}
				for _, s := range p.spans.Ended() {
					if s.Parent().SpanID() == caller.SpanContext().SpanID() {
						children++
					}
				}
				if children != 0 {
					t.Errorf("%s: %d attempt spans, want none", refused, children)
				}
				var events []string
				for _, e := range caller.Events() {
					events = append(events, e.Name)
				}
				if !strings.Contains(strings.Join(events, " "), tt.event) {
					t.Errorf("%s: events %v, want %s among them", refused, events, tt.event)
				}
				var counted []string
				for _, line := range strings.Split(p.metrics(t), "\n") {
					if strings.HasPrefix(line, tt.metric+"{") {
						counted = append(counted, line)
					}
				}
				if len(counted) != 1 || !strings.HasSuffix(counted[0], "} = 1") {
					t.Errorf("%s points %q, want one of value 1", tt.metric, counted)
				}
			})
		})
	}
}
