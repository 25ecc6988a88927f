package bench

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
)

// BenchmarkParallel is the throughput of successful GETs made by
// GOMAXPROCS goroutines at once (run it with -cpu 1,2), over the
// in-memory base transport, to one host and spread over 1,000 hosts:
// what the stack's shared state (per-host breakers, quotas, retry
// budgets; a library's single breaker or pool) costs under contention.
func BenchmarkParallel(b *testing.B) {
	for _, hosts := range []int{1, 1000} {
		urls := make([]string, hosts)
		for i := range urls {
			urls[i] = fmt.Sprintf("http://h%d.api.test/v1/things", i)
		}
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			for _, k := range allKinds {
				b.Run("client="+k.name, func(b *testing.B) {
					c := k.new(clientConfig{base: memTransport{}})
					var next atomic.Int64
					b.ReportAllocs()
					cpu0 := cpuTime()
					defer func() { reportCPU(b, cpu0, b.N) }()
					b.RunParallel(func(pb *testing.PB) {
						ctx := context.Background()
						i := int(next.Add(1)) * 7919 // each goroutine starts at another host
						for pb.Next() {
							i++
							o := op{method: http.MethodGet, url: urls[i%hosts]}
							if status, err := c.do(ctx, o); err != nil || status != http.StatusOK {
								b.Errorf("%s: got %d, %v; want 200, nil", c.name, status, err)
								return
							}
						}
					})
				})
			}
		})
	}
}
