package transport

import (
	"errors"
	"net"
	"net/http"
	"testing"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// BenchmarkJudgedStack measures one attempt through the layers that
// judge it (RateLimitAware, Concurrency, Breaker, beneath a Retry that
// sends once; a Throttle too for a success, which a run of failures
// would have it shed), over an in-memory base: a success, and a failure
// (a connection reset), whose verdict takes the most facts.
func BenchmarkJudgedStack(b *testing.B) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	ok := &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}
	for _, bc := range []struct {
		name     string
		base     Func
		throttle bool
	}{
		{"success", func(*http.Request) (*http.Response, error) { return ok, nil }, true},
		{"failure", func(*http.Request) (*http.Response, error) { return nil, reset }, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			mws := []Middleware{Retry(policy.Retry{MaxAttempts: 1})}
			if bc.throttle {
				mws = append(mws, Throttle(&policy.Throttle{}))
			}
			mws = append(mws, RateLimitAware(ratelimit.Options{}), Concurrency(&policy.Concurrency{}),
				Breaker(BreakerSettings{IsFailure: func(*http.Response, error) bool { return false }})) // judged, never opened
			rt := Chain(bc.base, mws...)
			req, _ := http.NewRequest("GET", "http://bench.verdict.test/", nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := rt.RoundTrip(req)
				if resp != nil {
					resp.Body.Close()
				} else if !errors.Is(err, reset) {
					b.Fatalf("error %v, want the base's", err)
				}
			}
		})
	}
}
