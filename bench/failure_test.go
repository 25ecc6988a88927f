package bench

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/go-cleanhttp"
)

// failureKinds are the clients of the failure table: every client that
// retries (bare does not, and resty's retry needs a condition of its own,
// which the table's resty has).
var failureKinds = []clientKind{
	kindBare, kindRetryablehttp, kindRetryablehttpRT, kindFailsafe,
	kindResty, kindLoop, kindSturdy, kindSturdyRetry,
}

// BenchmarkFailure is the cost of operations against a server that
// answers every 4th request 503 with an error body of 3 KiB or 64 KiB,
// over loopback, one operation at a time. Retries are immediate (every
// library's wait set to zero) so that the time is the retry's own cost.
//
// Besides time and allocations it reports, per 1,000 operations:
// new-conns (connections the server accepted: a pool that reuses its
// connection makes 1 in the whole run), reqs (requests the server
// received) and failed (operations that did not end in 200); and
// goroutines-left, the goroutines still running once the server is
// closed and the pool's idle connections too: connections whose bodies
// were never closed stay in use, each with two goroutines, for the life
// of the process.
func BenchmarkFailure(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"3KiB", 3 << 10}, {"64KiB", 64 << 10}} {
		b.Run("errbody="+size.name, func(b *testing.B) {
			for _, k := range failureKinds {
				b.Run("client="+k.name, func(b *testing.B) {
					before := runtime.NumGoroutine()
					f := newFlaky(4, size.n)
					srv := newLoopback(b, f)
					base := cleanhttp.DefaultPooledTransport()
					c := k.new(clientConfig{base: base, noWait: true})
					o := op{method: http.MethodGet, url: srv.URL + "/v1/things"}
					ctx := context.Background()
					var ops, failed int64
					b.ReportAllocs()
					cpu0 := cpuTime()
					for b.Loop() {
						ops++
						status, err := c.do(ctx, o)
						if err != nil || status != http.StatusOK {
							failed++
						}
					}
					b.StopTimer()
					reportCPU(b, cpu0, int(ops))
					per1k := func(n int64) float64 { return float64(n) * 1000 / float64(ops) }
					b.ReportMetric(per1k(srv.conns.Load()), "new-conns/1kop")
					b.ReportMetric(per1k(f.n.Load()), "reqs/1kop")
					b.ReportMetric(per1k(failed), "failed/1kop")
					base.CloseIdleConnections()
					srv.CloseClientConnections()
					srv.Close()
					b.ReportMetric(per1k(int64(leftGoroutines(before))), "goroutines-left/1kop")
				})
			}
		})
	}
}

// leftGoroutines waits up to a second for the goroutine count to fall
// back to before and returns how many more there still are.
func leftGoroutines(before int) int {
	deadline := time.Now().Add(time.Second)
	for {
		n := runtime.NumGoroutine() - before
		if n <= 0 || time.Now().After(deadline) {
			return max(n, 0)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
