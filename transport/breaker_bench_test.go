package transport

import (
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/sony/gobreaker/v2"
)

// breakerBenchBase is an in-memory host that answers 200 with a shared,
// empty response: no allocation, so what a benchmark measures above it is
// the middleware's own cost.
func breakerBenchBase() http.RoundTripper {
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}
	return Func(func(*http.Request) (*http.Response, error) { return resp, nil })
}

// breakerBenchRequests returns one GET per host, to host0.test ...
func breakerBenchRequests(b *testing.B, hosts int) []*http.Request {
	reqs := make([]*http.Request, hosts)
	for i := range reqs {
		r, err := http.NewRequest("GET", "https://host"+strconv.Itoa(i)+".test/v1/x", nil)
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = r
	}
	return reqs
}

// BenchmarkBreaker measures the cost of a successful request through
// Breaker over an in-memory base, with requests spread over 1, 100 and
// 10,000 hosts, against the bare base. Run with -cpu 1,2 for contention.
func BenchmarkBreaker(b *testing.B) {
	for _, hosts := range []int{1, 100, 10000} {
		for _, mode := range []string{"none", "breaker"} {
			b.Run("hosts="+strconv.Itoa(hosts)+"/"+mode, func(b *testing.B) {
				reqs := breakerBenchRequests(b, hosts)
				rt := breakerBenchBase()
				if mode == "breaker" {
					rt = Breaker(BreakerSettings{})(rt)
				}
				for _, r := range reqs { // create the breakers first
					if _, err := rt.RoundTrip(r); err != nil {
						b.Fatal(err)
					}
				}
				var next atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(7919)) // each goroutine starts elsewhere
					for pb.Next() {
						i++
						if i >= len(reqs) {
							i = 0
						}
						if _, err := rt.RoundTrip(reqs[i]); err != nil {
							b.Error(err)
							return
						}
					}
				})
				if mode == "breaker" {
					if got := rt.(*breakerTransport).b.slot.Registry().Len(); got != hosts {
						b.Errorf("breakers = %d, want %d", got, hosts)
					}
				}
			})
		}
	}
}

// BenchmarkBreakerRefusal measures a request refused by an open breaker:
// it is not sent, and costs the error it returns.
func BenchmarkBreakerRefusal(b *testing.B) {
	fail := Func(func(*http.Request) (*http.Response, error) { return nil, errors.New("refused") })
	rt := Breaker(BreakerSettings{ConsecutiveFailures: 1})(fail)
	req := breakerBenchRequests(b, 1)[0]
	rt.RoundTrip(req)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := rt.RoundTrip(req); !errors.Is(err, ErrCircuitOpen) {
				b.Errorf("err = %v, want ErrCircuitOpen", err)
				return
			}
		}
	})
}

// BenchmarkGobreaker compares gobreaker's two ways of wrapping a call:
// the two-step breaker returns a callback per request, which allocates;
// Execute with a closure that does not escape does not. Breaker uses
// Execute for this reason.
func BenchmarkGobreaker(b *testing.B) {
	b.Run("TwoStep", func(b *testing.B) {
		cb := gobreaker.NewTwoStepCircuitBreaker[*http.Response](gobreaker.Settings{})
		b.ReportAllocs()
		for b.Loop() {
			done, err := cb.Allow()
			if err != nil {
				b.Fatal(err)
			}
			done(nil)
		}
	})
	b.Run("Execute", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[*http.Response](gobreaker.Settings{})
		resp := &http.Response{StatusCode: 200}
		b.ReportAllocs()
		for b.Loop() {
			var got *http.Response
			_, err := cb.Execute(func() (*http.Response, error) { got = resp; return resp, nil })
			if err != nil || got == nil {
				b.Fatal(err)
			}
		}
	})
}
