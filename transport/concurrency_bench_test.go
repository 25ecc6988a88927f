package transport

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

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
// alone above that base (also from every P at once, all on one host),
// and, as the yardstick, an empty loop against one uncontended atomic
// add.
func BenchmarkConcurrencySuccess(b *testing.B) {
	const allButBreaker = LayerIdempotencyKey | LayerTimeout | LayerIdleTimeout | LayerRetry | LayerRetryBudget |
		LayerRateLimit | LayerFirstEvent | LayerAttemptTimeout
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}
	free := Func(func(*http.Request) (*http.Response, error) { return resp, nil })
	var n atomic.Int64
	for _, s := range []struct {
		name     string
		off, on  func() http.RoundTripper
		parallel bool
	}{
		{"atomic-add", nil, nil, false},
		{"layer", func() http.RoundTripper { return free }, func() http.RoundTripper { return Chain(free, Concurrency(&policy.Concurrency{})) }, false},
		{"layer-parallel", func() http.RoundTripper { return free }, func() http.RoundTripper { return Chain(free, Concurrency(&policy.Concurrency{})) }, true},
		{"New-breaker-only", func() http.RoundTripper { return New(Options{Base: free, Disable: allButBreaker}) }, func() http.RoundTripper {
			return New(Options{Base: free, Disable: allButBreaker, Concurrency: &policy.Concurrency{}})
		}, false},
		{"New", func() http.RoundTripper { return New(Options{Base: memBase}) }, func() http.RoundTripper {
			return New(Options{Base: memBase, Concurrency: &policy.Concurrency{}})
		}, false},
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
				if s.parallel { // every goroutine on the same host's word
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							resp, err := rt.RoundTrip(req)
							if err != nil {
								b.Error(err)
								return
							}
							resp.Body.Close()
						}
					})
					return
				}
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

// BenchmarkConcurrencyPaired measures the same as
// BenchmarkConcurrencySuccess, each stack with the limit off and on in
// alternating chunks of a few hundred requests, beside chunks of
// uncontended atomic adds and of an empty loop, so that a machine whose
// load drifts slows all four alike. It reports what the limit adds to a
// request, in ns (extra-ns/op) and in atomic adds (atomic-adds/op).
func BenchmarkConcurrencyPaired(b *testing.B) {
	const allButBreaker = LayerIdempotencyKey | LayerTimeout | LayerIdleTimeout | LayerRetry | LayerRetryBudget |
		LayerRateLimit | LayerFirstEvent | LayerAttemptTimeout
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}
	free := Func(func(*http.Request) (*http.Response, error) { return resp, nil })
	for _, s := range []struct {
		name    string
		off, on http.RoundTripper
	}{
		{"layer", free, Chain(free, Concurrency(&policy.Concurrency{}))},
		{"New-breaker-only", New(Options{Base: free, Disable: allButBreaker}),
			New(Options{Base: free, Disable: allButBreaker, Concurrency: &policy.Concurrency{}})},
		{"New", New(Options{Base: memBase}), New(Options{Base: memBase, Concurrency: &policy.Concurrency{}})},
	} {
		b.Run("stack="+s.name, func(b *testing.B) {
			req, _ := http.NewRequest("GET", "http://api.test/v1/things", nil)
			get := func(rt http.RoundTripper, n int) time.Duration {
				start := time.Now()
				for range n {
					resp, err := rt.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				return time.Since(start)
			}
			var a atomic.Int64
			adds := func(n int, add bool) time.Duration {
				start := time.Now()
				for range n {
					if add {
						a.Add(1)
					} else {
						a.Load()
					}
				}
				return time.Since(start)
			}
			var off, on, add, empty time.Duration
			const chunk = 256
			b.ResetTimer()
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				off += get(s.off, n)
				on += get(s.on, n)
				add += adds(n*8, true)
				empty += adds(n*8, false)
			}
			perOp := func(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(n) }
			extra := perOp(on-off, b.N)
			b.ReportMetric(perOp(off, b.N), "off-ns/op")
			b.ReportMetric(perOp(on, b.N), "on-ns/op")
			b.ReportMetric(extra, "extra-ns/op")
			b.ReportMetric(perOp(add-empty, 8*b.N), "add-ns")
			b.ReportMetric(extra/perOp(add-empty, 8*b.N), "atomic-adds/op")
		})
	}
}
