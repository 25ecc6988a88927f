package bench

import (
	"context"
	"fmt"
	"net/http"
	"testing"
)

// BenchmarkSameWork is a successful in-memory GET, to one host and
// cycling over 1,000 warmed hosts, by clients that each bound the
// operation in time (the same work): net/http's own Client.Timeout,
// go-retryablehttp's RoundTripper under that Timeout, failsafe-go with
// its timeout policy, and sturdy's default stack; the bare client, which
// bounds nothing, is the baseline. Over many hosts the per-host state a
// client keeps (breakers, quotas, budgets, latency sketches) is looked up
// and touched per request: cache misses that instruction counts miss.
func BenchmarkSameWork(b *testing.B) {
	kinds := []clientKind{kindBare, kindBareTimeout, kindRetryablehttpRTTimeout, kindFailsafe, kindSturdy}
	for _, hosts := range []int{1, 1000} {
		urls := make([]string, hosts)
		for i := range urls {
			urls[i] = fmt.Sprintf("http://h%d.api.test/v1/things", i)
		}
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			for _, k := range kinds {
				b.Run("client="+k.name, func(b *testing.B) {
					c := k.new(clientConfig{base: memTransport{}})
					ctx := context.Background()
					for _, u := range urls { // warm every host's state
						if status, err := c.do(ctx, op{method: http.MethodGet, url: u}); err != nil || status != http.StatusOK {
							b.Fatalf("%s warm-up: got %d, %v", c.name, status, err)
						}
					}
					b.ReportAllocs()
					cpu0, i := cpuTime(), 0
					for b.Loop() {
						i++
						status, err := c.do(ctx, op{method: http.MethodGet, url: urls[i%hosts]})
						if err != nil || status != http.StatusOK {
							b.Fatalf("%s: got %d, %v; want 200, nil", c.name, status, err)
						}
					}
					reportCPU(b, cpu0, i)
				})
			}
		})
	}
}
