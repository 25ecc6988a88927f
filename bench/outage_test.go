package bench

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failsafe-go/failsafe-go/failsafehttp"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/transport"
)

// outageShape is the former outage workload of examples/outage (closed
// loop, a server without a capacity limit), rewritten here because a
// package main cannot be imported: a fleet of client goroutines spread
// over client processes (each its own client: its own stack, breaker,
// budget and connection pool) calls one API in a loop (an operation with a deadline, then a think time) while
// the API is healthy, down (503 to everything), then healthy again. The
// API is httptestutil's Outage emulator on an in-memory network (a real
// http.Server and real http.Transports over net.Pipe, no kernel
// sockets), which counts every request it receives per 100 ms.
type outageShape struct {
	clients   int           // client goroutines
	instances int           // client processes the goroutines are spread over
	think     time.Duration // between operations, ±20%
	opTimeout time.Duration // each operation's deadline
	before    time.Duration // healthy before the outage
	down      time.Duration // the outage
	after     time.Duration // healthy after it, until clients stop starting operations
}

// benchOutage is the shape BenchmarkOutage runs in real time.
var benchOutage = outageShape{
	clients:   300,
	instances: 10,
	think:     100 * time.Millisecond,
	opTimeout: 2 * time.Second,
	before:    1500 * time.Millisecond,
	down:      3 * time.Second,
	after:     1500 * time.Millisecond,
}

// outageResult is what one run of the workload measured.
type outageResult struct {
	during   int64   // requests the server received while down
	peak     int64   // the busiest 100 ms in the first second after recovery
	baseline float64 // mean requests per 100 ms before the outage
	ops, ok  int64   // operations, and those that ended in 200
	// operations started after recovery, and those that ended in 200
	afterOps, afterOK int64
	p50, p99          time.Duration // operation latency
}

// The clients of the outage table, each with its library's documented
// defaults.
var (
	// naive retries at once, 5 times.
	kindNaive = clientKind{"naive", func(c clientConfig) client {
		return loopClient("naive", c.base, 6, 0)
	}}
	// noJitter is a hand-written loop with exponential backoff and no
	// jitter: 6 attempts, waits of 100, 200, 400, 800, 1600 ms.
	kindNoJitter = clientKind{"backoff-nojitter", func(c clientConfig) client {
		return loopClient("backoff-nojitter", c.base, 6, 100*time.Millisecond)
	}}
	// failsafeDefaults is failsafehttp with its documented retry policy
	// and nothing else: 3 attempts, no delay unless Retry-After.
	kindFailsafeDefaults = clientKind{"failsafe", func(c clientConfig) client {
		return stdClient("failsafe", failsafehttp.NewRoundTripper(c.base, failsafehttp.NewRetryPolicyBuilder().Build()))
	}}
	// sturdyDefaults is transport.New with the operation's deadline as
	// its Timeout and every other default.
	kindSturdyDefaults = clientKind{"sturdy", func(c clientConfig) client {
		return stdClient("sturdy", transport.New(transport.Options{Base: c.base, Timeout: c.timeout}))
	}}
)

var outageKinds = []clientKind{
	kindBare, kindNaive, kindNoJitter, kindRetryablehttp, kindFailsafeDefaults, kindSturdyDefaults,
}

// runOutage runs the workload once with clients of kind k. It uses
// time.Now and time.Sleep only, so it runs in real time in a benchmark
// and in virtual time inside a synctest bubble.
func runOutage(s outageShape, k clientKind) outageResult {
	n := httptestutil.NewNetwork()
	start := time.Now()
	o := httptestutil.NewOutage(start, httptestutil.OutageConfig{Start: s.before, Duration: s.down})
	srv := n.Serve("api.test", o)
	defer srv.Close()
	recovery := start.Add(s.before + s.down)
	end := recovery.Add(s.after)
	url := srv.URL + "/v1/things"

	var (
		mu   sync.Mutex
		res  outageResult
		lats []time.Duration
		wg   sync.WaitGroup
	)
	clients := make([]client, max(s.instances, 1))
	for i := range clients {
		tr := n.Transport()
		defer tr.CloseIdleConnections()
		clients[i] = k.new(clientConfig{base: tr, timeout: s.opTimeout})
	}
	for i := range s.clients {
		wg.Go(func() {
			c := clients[i%len(clients)]
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			time.Sleep(time.Duration(rng.Int64N(int64(s.think)))) // no synchronized start
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), s.opTimeout)
				status, err := c.do(ctx, op{method: http.MethodGet, url: url})
				cancel()
				d := time.Since(t0)
				ok := err == nil && status == http.StatusOK
				mu.Lock()
				res.ops++
				lats = append(lats, d)
				if ok {
					res.ok++
				}
				if !t0.Before(recovery) {
					res.afterOps++
					if ok {
						res.afterOK++
					}
				}
				mu.Unlock()
				time.Sleep(s.think*8/10 + time.Duration(rng.Int64N(int64(s.think*4/10)+1)))
			}
		})
	}
	wg.Wait()

	res.during = o.Between(s.before, s.before+s.down).Requests
	for _, b := range o.Buckets() {
		if b.Start >= s.before+s.down && b.Start < s.before+s.down+time.Second {
			res.peak = max(res.peak, b.Requests)
		}
	}
	if buckets := s.before / (100 * time.Millisecond); buckets > 0 {
		res.baseline = float64(o.Between(0, s.before).Requests) / float64(buckets)
	}
	slices.Sort(lats)
	res.p50, res.p99 = quantile(lats, 0.5), quantile(lats, 0.99)
	return res
}

// BenchmarkOutage runs the outage workload once per client kind, in real
// time (about 7 s each; run it with -benchtime=1x), and reports the
// server's load: outage-reqs, the requests it received while down;
// recovery-peak, its busiest 100 ms in the first second after it came
// back; baseline, its mean load per 100 ms before the outage; and the
// clients' view: ok-%, the operations that succeeded, ok-after-%, those
// started after recovery that succeeded, and the p99 latency of an
// operation.
func BenchmarkOutage(b *testing.B) {
	for _, k := range outageKinds {
		b.Run("client="+k.name, func(b *testing.B) {
			var r outageResult
			for b.Loop() {
				r = runOutage(benchOutage, k)
			}
			pct := func(a, b int64) float64 {
				if b == 0 {
					return 0
				}
				return 100 * float64(a) / float64(b)
			}
			b.ReportMetric(float64(r.during), "outage-reqs")
			b.ReportMetric(float64(r.peak), "recovery-peak/100ms")
			b.ReportMetric(r.baseline, "baseline/100ms")
			b.ReportMetric(pct(r.ok, r.ops), "ok-%")
			b.ReportMetric(pct(r.afterOK, r.afterOps), "ok-after-%")
			b.ReportMetric(float64(r.p99)/float64(time.Millisecond), "p99-ms")
		})
	}
}

// TestOutageWorkload runs a small version of the outage workload in
// virtual time and checks what the benchmark's table relies on: the
// counts add up, bare clients send one request per operation, and
// sturdy's clients load the down server at least ten times less than the
// naive loop's.
func TestOutageWorkload(t *testing.T) {
	shape := outageShape{
		clients:   20,
		instances: 4,
		think:     100 * time.Millisecond,
		opTimeout: 2 * time.Second,
		before:    1 * time.Second,
		down:      3 * time.Second,
		after:     3 * time.Second,
	}
	results := map[string]outageResult{}
	for _, k := range outageKinds {
		synctest.Test(t, func(t *testing.T) {
			results[k.name] = runOutage(shape, k)
		})
		r := results[k.name]
		if r.ops == 0 || r.ok > r.ops || r.afterOK > r.afterOps || r.afterOps > r.ops {
			t.Errorf("%s: inconsistent counts %+v", k.name, r)
		}
		if r.p50 > r.p99 {
			t.Errorf("%s: got p50 %v > p99 %v", k.name, r.p50, r.p99)
		}
	}
	// Bare clients make one request per operation; about 10 per client
	// per second.
	bare := results["bare"]
	if want := int64(shape.clients) * int64(shape.down/shape.think); bare.during < want*7/10 || bare.during > want*13/10 {
		t.Errorf("bare: got %d requests during the outage, want about %d", bare.during, want)
	}
	if naive, sturdy := results["naive"], results["sturdy"]; sturdy.during*10 > naive.during {
		t.Errorf("got sturdy %d, naive %d requests during the outage; want sturdy at least 10x fewer", sturdy.during, naive.during)
	}
	if naive := results["naive"]; naive.during < bare.during*5 {
		t.Errorf("naive: got %d requests during the outage, want about 6x bare's %d", naive.during, bare.during)
	}
	for name, r := range results {
		t.Logf("%-16s during=%5d peak=%4d baseline=%5.1f ok=%d/%d after=%d/%d p50=%v p99=%v",
			name, r.during, r.peak, r.baseline, r.ok, r.ops, r.afterOK, r.afterOps, r.p50, r.p99)
	}
}
