package transport

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// The limit on a server-asked wait (Retry.MaxRetryAfter, shared with the
// rate-limit layer by New) bounds the waits a server asked for, never the
// client-side limiter's: three quick GETs at a client-side rate of 2 a
// second go at 0, 0.5 and 1 s whatever MaxRetryAfter says, as they do
// through the bare client (at once). The limiter keeps its own bound,
// RateLimit.MaxWait, and a server's ask longer than the limit still
// fails the request that got it and those that come after it at once.
func TestNewServerWaitLimitLeavesClientRateAlone(t *testing.T) {
	type outcome struct {
		at     time.Duration
		code   int    // the status; 0 when refused
		reason string // the refusal's QuotaError.Reason
	}
	ok := func(at time.Duration) outcome { return outcome{at: at, code: 200} }
	refused := func(reason string) outcome { return outcome{reason: reason} }
	rate := ratelimit.Options{Rate: 2, Burst: 1}
	for _, tc := range []struct {
		name  string
		retry policy.Retry
		rl    ratelimit.Options
		// pause: the server answers the first request 429 with a
		// Retry-After of 2 s, then 200.
		pause bool
		want  []outcome
		// bare is what the server answers the bare client; the stack
		// must deliver those of them that want says it delivers.
		bare []int
	}{
		{name: "MaxRetryAfter default", rl: rate,
			want: []outcome{ok(0), ok(500 * time.Millisecond), ok(time.Second)}, bare: []int{200, 200, 200}},
		{name: "MaxRetryAfter 100ms", retry: policy.Retry{MaxRetryAfter: 100 * time.Millisecond}, rl: rate,
			want: []outcome{ok(0), ok(500 * time.Millisecond), ok(time.Second)}, bare: []int{200, 200, 200}},
		{name: "MaxRetryAfter negative", retry: policy.Retry{MaxRetryAfter: -1}, rl: rate,
			want: []outcome{ok(0), ok(500 * time.Millisecond), ok(time.Second)}, bare: []int{200, 200, 200}},
		{name: "MaxServerWait 100ms", rl: ratelimit.Options{Rate: 2, Burst: 1, MaxServerWait: 100 * time.Millisecond},
			want: []outcome{ok(0), ok(500 * time.Millisecond), ok(time.Second)}, bare: []int{200, 200, 200}},
		{name: "MaxServerWait negative", rl: ratelimit.Options{Rate: 2, Burst: 1, MaxServerWait: -1},
			want: []outcome{ok(0), ok(500 * time.Millisecond), ok(time.Second)}, bare: []int{200, 200, 200}},
		// The caller's own bound on its limiter still holds.
		{name: "MaxWait 100ms", rl: ratelimit.Options{Rate: 2, Burst: 1, MaxWait: 100 * time.Millisecond},
			want: []outcome{ok(0), refused(ratelimit.ReasonClientRate), refused(ratelimit.ReasonClientRate)}, bare: []int{200, 200, 200}},
		// A server's ask longer than the limit: the request that got it
		// has the 429 at once, and the host's next requests fail at once.
		{name: "Retry-After 2s over MaxRetryAfter 100ms", retry: policy.Retry{MaxRetryAfter: 100 * time.Millisecond}, rl: rate, pause: true,
			want: []outcome{{code: 429}, refused(ratelimit.ReasonRetryAfter), refused(ratelimit.ReasonRetryAfter)}, bare: []int{429, 200, 200}},
		{name: "Retry-After 2s over MaxServerWait 100ms", rl: ratelimit.Options{Rate: 2, Burst: 1, MaxServerWait: 100 * time.Millisecond}, pause: true,
			want: []outcome{{code: 429}, refused(ratelimit.ReasonRetryAfter), refused(ratelimit.ReasonRetryAfter)}, bare: []int{429, 200, 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hits atomic.Int32
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if hits.Add(1) == 1 && tc.pause {
						w.Header().Set("Retry-After", "2")
						w.WriteHeader(http.StatusTooManyRequests)
					}
				})
				n := httptestutil.NewNetwork()
				srv := n.Serve("api.test", h)
				base := n.Transport()
				defer func() {
					base.CloseIdleConnections()
					srv.Close()
				}()

				bare := &http.Client{Transport: base}
				for i, want := range tc.bare {
					if code, err := rlGet(context.Background(), bare, srv.URL); err != nil || code != want {
						t.Fatalf("bare GET %d = %d, %v; want %d", i, code, err, want)
					}
				}
				hits.Store(0)

				c := &http.Client{Transport: New(Options{Base: base, Retry: tc.retry, RateLimit: tc.rl})}
				start := time.Now()
				sent := 0
				for i, want := range tc.want {
					code, err := rlGet(context.Background(), c, srv.URL)
					at := time.Since(start)
					if want.code != 0 {
						sent++
						if err != nil || code != want.code || at != want.at {
							t.Errorf("GET %d = %d, %v at %v; want %d at %v (bare: %d)", i, code, err, at, want.code, want.at, tc.bare[i])
						}
						continue
					}
					var qe *ratelimit.QuotaError
					if !errors.As(err, &qe) || qe.Reason != want.reason || at != 0 {
						t.Errorf("GET %d = %d, %v at %v; want it refused at once for %q", i, code, err, at, want.reason)
					}
				}
				if got := int(hits.Load()); got != sent {
					t.Errorf("the server had %d requests from the stack, want %d", got, sent)
				}
			})
		})
	}
}
