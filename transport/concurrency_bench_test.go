package transport

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/sturdyhttp/sturdy/policy"
)

// BenchmarkConcurrencySuccess measures what Options.Concurrency adds to a
// request that succeeds. Each stack runs with concurrency=off and
// concurrency=on, side by side, so that
//
//	benchstat -col /concurrency
//
// shows the difference: New over an in-memory base, New with every layer
// but Breaker switched off above a base that costs nothing, the layer
// alone above that base, and, as the yardstick, an empty loop against one
// uncontended atomic add.
func BenchmarkConcurrencySuccess(b *testing.B) {
	const allButBreaker = LayerIdempotencyKey | LayerTimeout | LayerIdleTimeout | LayerRetry | LayerRetryBudget |
		LayerRateLimit | LayerFirstEvent | LayerAttemptTimeout
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}
	free := Func(func(*http.Request) (*http.Response, error) { return resp, nil })
	var n atomic.Int64
	for _, s := range []struct {
		name    string
		off, on func() http.RoundTripper
	}{
		{"atomic-add", nil, nil},
		{"layer", func() http.RoundTripper { return free }, func() http.RoundTripper { return Chain(free, Concurrency(&policy.Concurrency{})) }},
		{"New-breaker-only", func() http.RoundTripper { return New(Options{Base: free, Disable: allButBreaker}) }, func() http.RoundTripper {
			return New(Options{Base: free, Disable: allButBreaker, Concurrency: &policy.Concurrency{}})
		}},
		{"New", func() http.RoundTripper { return New(Options{Base: memBase}) }, func() http.RoundTripper {
			return New(Options{Base: memBase, Concurrency: &policy.Concurrency{}})
		}},
	} {
		for _, on := range []bool{false, true} {
			name := "stack=" + s.name + "/concurrency=off"
			if on {
				name = "stack=" + s.name + "/concurrency=on"
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				if s.off == nil { // the yardstick
					for b.Loop() {
						if on {
							n.Add(1)
						}
					}
					return
				}
				rt := s.off()
				if on {
					rt = s.on()
				}
				req, _ := http.NewRequest("GET", "http://api.test/v1/things", nil)
				for b.Loop() {
					resp, err := rt.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
}
