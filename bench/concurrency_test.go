package bench

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/failsafehttp"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// The finite-capacity server of BenchmarkConcurrency: 8 workers of 20 ms
// each (400 requests a second) behind a first-in first-out queue that
// keeps working for callers who left.
const (
	ccWorkers  = 8
	ccService  = 20 * time.Millisecond
	ccCapacity = float64(ccWorkers) * float64(time.Second) / float64(ccService)
	ccOpBound  = 250 * time.Millisecond
	ccWarmUp   = time.Second
	ccMeasured = 3 * time.Second
	ccFixed    = 2 * ccWorkers // the fixed limit: twice the server's workers, as if tuned to it
)

// fixedLimit is a RoundTripper that sends at most n requests at once and
// refuses the others at once: the fixed bulkhead a user writes by hand.
type fixedLimit struct {
	sem  chan struct{}
	next http.RoundTripper
}

var errFixedFull = errors.New("fixed limit full")

func (f *fixedLimit) RoundTrip(req *http.Request) (*http.Response, error) {
	select {
	case f.sem <- struct{}{}:
	default:
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errFixedFull
	}
	defer func() { <-f.sem }()
	return f.next.RoundTrip(req)
}

var concurrencyClients = []struct {
	name string
	new  func(base http.RoundTripper) http.RoundTripper
}{
	{"no-limit", func(base http.RoundTripper) http.RoundTripper { return transport.New(transport.Options{Base: base}) }},
	{"fixed-16", func(base http.RoundTripper) http.RoundTripper {
		return &fixedLimit{sem: make(chan struct{}, ccFixed), next: base}
	}},
	{"failsafe-adaptive", func(base http.RoundTripper) http.RoundTripper {
		return failsafehttp.NewRoundTripper(base, adaptivelimiter.NewWithDefaults[*http.Response]())
	}},
	{"sturdy", func(base http.RoundTripper) http.RoundTripper {
		return transport.New(transport.Options{Base: base, Concurrency: &policy.Concurrency{}})
	}},
}

// ccResult is what one run measured over its measured period.
type ccResult struct {
	ops, ok, refused, timedOut int
	lat                        []time.Duration // of the successes, sorted
	served, abandoned          int64           // by the server's workers, in the whole run
}

// ccShape is the course of a run: a warm-up, then, from slowAt (when
// set), workers slower by slowBy, and the measured period at the end.
type ccShape struct {
	warmUp, measured time.Duration
	slowAt           time.Duration // 0: the server never slows
	slowBy           int
}

var (
	ccSteady = ccShape{warmUp: ccWarmUp, measured: ccMeasured}
	// ccIncident: after 5 s, the server's workers take three times as
	// long (its capacity falls to a third) for a minute; the last 10 s of
	// it are measured.
	ccIncident = ccShape{warmUp: 55 * time.Second, measured: 10 * time.Second, slowAt: 5 * time.Second, slowBy: 3}
)

// runConcurrency sends open-loop Poisson arrivals at rate a second,
// each bounded at 250 ms, through rt to a finite-capacity server over
// the in-memory network, for a warm-up and a measured period.
func runConcurrency(rate float64, newRT func(http.RoundTripper) http.RoundTripper, seed uint64) ccResult {
	return runConcurrencyShape(rate, newRT, seed, ccSteady)
}

func runConcurrencyShape(rate float64, newRT func(http.RoundTripper) http.RoundTripper, seed uint64, shape ccShape) ccResult {
	n := httptestutil.NewNetwork()
	w := httptestutil.NewWorkers(ccWorkers, ccService)
	srv := n.Serve("capacity.test", w)
	base := n.Transport()
	base.MaxIdleConnsPerHost = 1000
	hc := &http.Client{Transport: newRT(base)}
	rng := rand.New(rand.NewPCG(seed, uint64(rate)))
	var mu sync.Mutex
	var r ccResult
	var wg sync.WaitGroup
	start := time.Now()
	next := start
	if shape.slowAt > 0 {
		slow := time.AfterFunc(shape.slowAt, func() { w.SetService(time.Duration(shape.slowBy) * ccService) })
		defer slow.Stop()
	}
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		at := next.Sub(start)
		if at >= shape.warmUp+shape.measured {
			break
		}
		time.Sleep(time.Until(next)) // late wakes start several at once: the schedule holds
		measured := at >= shape.warmUp
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), ccOpBound)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/work", nil)
			began := time.Now()
			resp, err := hc.Do(req)
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = errors.New(resp.Status)
				}
			}
			took := time.Since(began)
			if !measured {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			r.ops++
			switch {
			case err == nil:
				r.ok++
				r.lat = append(r.lat, took)
			case errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, transport.ErrConcurrencyLimit):
				r.timedOut++
			default:
				r.refused++ // refused by the client's limit, unsent
			}
		})
	}
	wg.Wait()
	r.served, r.abandoned = w.Served()
	base.CloseIdleConnections()
	srv.Close()
	w.Close()
	slices.Sort(r.lat)
	return r
}

// BenchmarkConcurrency compares client-side concurrency limits against
// a server of finite capacity (8 workers of 20 ms, 400 requests a
// second, a queue that keeps working for callers who left), with
// requests arriving open-loop (Poisson) at 1×, 2× and 5× its capacity
// and each operation bounded at 250 ms: no limit (sturdy without
// Options.Concurrency), a fixed limit of 16, failsafe-go's adaptive
// limiter with its defaults, and sturdy's Options.Concurrency. It
// reports the successful operations a second over 3 s after a 1 s
// warm-up (goodput/s, and as a share of capacity), their p50 and p99,
// and the share of operations refused by the limit and timed out.
func BenchmarkConcurrency(b *testing.B) {
	var seed atomic.Uint64
	for _, load := range []float64{1, 2, 5} {
		for _, c := range concurrencyClients {
			b.Run("load="+loadName(load)+"/client="+c.name, func(b *testing.B) {
				var r ccResult
				for b.Loop() {
					r = runConcurrency(load*ccCapacity, c.new, seed.Add(1))
				}
				ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
				goodput := float64(r.ok) / ccMeasured.Seconds()
				b.ReportMetric(goodput, "goodput/s")
				b.ReportMetric(100*goodput/ccCapacity, "%capacity")
				b.ReportMetric(ms(quantile(r.lat, 0.50)), "p50-ms")
				b.ReportMetric(ms(quantile(r.lat, 0.99)), "p99-ms")
				b.ReportMetric(100*float64(r.refused)/float64(max(r.ops, 1)), "%refused")
				b.ReportMetric(100*float64(r.timedOut)/float64(max(r.ops, 1)), "%timed-out")
				b.ReportMetric(100*float64(r.abandoned)/float64(max(r.served, 1)), "%server-work-wasted")
				b.ReportMetric(0, "ns/op") // the wall time of a run says nothing here
			})
		}
	}
}

func loadName(l float64) string {
	switch l {
	case 1:
		return "1x"
	case 2:
		return "2x"
	}
	return "5x"
}

// TestConcurrencyVirtual runs BenchmarkConcurrency's workload in a
// synctest bubble, on a virtual clock: the clients' own CPU time does not
// count, so a busy machine cannot make a server look slow, and the
// figures measure the limits' rules alone. It prints the table with -v,
// and checks sturdy's promise: at 2× and 5× capacity at least 85% of it
// as successful operations, their p99 within 5× the unloaded latency.
func TestConcurrencyVirtual(t *testing.T) {
	t.Logf("%-8s %-18s %10s %10s %8s %8s %9s %10s %14s", "load", "client", "goodput/s", "%capacity", "p50", "p99", "%refused", "%timedout", "%server-waste")
	for _, load := range []float64{1, 2, 5, -2} {
		for _, c := range concurrencyClients {
			var r ccResult
			shape, capacity, name, rate := ccSteady, ccCapacity, loadName(load), load*ccCapacity
			if load < 0 { // 2× the healthy capacity, through an incident
				shape, capacity, name, rate = ccIncident, ccCapacity/3, "incident", -load*ccCapacity
			}
			synctest.Test(t, func(t *testing.T) {
				r = runConcurrencyShape(rate, c.new, 7, shape)
			})
			goodput := float64(r.ok) / shape.measured.Seconds()
			p99 := quantile(r.lat, 0.99)
			t.Logf("%-8s %-18s %10.0f %9.0f%% %8v %8v %8.1f%% %9.1f%% %13.1f%%", name, c.name, goodput, 100*goodput/capacity,
				quantile(r.lat, 0.50).Round(100*time.Microsecond), p99.Round(100*time.Microsecond),
				100*float64(r.refused)/float64(max(r.ops, 1)), 100*float64(r.timedOut)/float64(max(r.ops, 1)),
				100*float64(r.abandoned)/float64(max(r.served, 1)))
			if c.name == "sturdy" && load >= 2 {
				if goodput < 0.85*ccCapacity {
					t.Errorf("sturdy at %s: goodput %.0f/s, want at least %.0f/s", loadName(load), goodput, 0.85*ccCapacity)
				}
				if p99 > 5*ccService {
					t.Errorf("sturdy at %s: p99 %v, want at most %v", loadName(load), p99, 5*ccService)
				}
			}
		}
	}
}
