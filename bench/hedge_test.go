package bench

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cristalhq/hedgedhttp"
	"github.com/failsafe-go/failsafe-go/failsafehttp"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// The hedging benchmarks run against latencyEmulator, an in-memory
// RoundTripper that answers after a random latency on a real timer (and
// at once when the request's context ends). In memory rather than on
// loopback: what is measured is how each client copes with a server's
// slow tail, and on a small shared machine loopback sockets add
// scheduling noise of the same order as the 5 ms the fast requests take;
// the cost of a client per request is measured by BenchmarkSuccess.
// Real sleeps rather than virtual time: the clients under test run their
// own goroutines and timers, and tail latency is a wall-clock figure.

// hedgeDelay is the fixed delay given to every client that takes one:
// four times the fast requests' latency, so that scheduling noise on a
// small shared machine (a goroutine waiting 5 ms or more for a CPU) does
// not pass for a slow server, and well under the slow requests' 500 ms.
const hedgeDelay = 20 * time.Millisecond

// hedgeOps and hedgeWorkers shape one run: enough operations for a
// p99.9 drawn from 10 samples above it, 64 at a time.
const (
	hedgeOps     = 10000
	hedgeWorkers = 64
)

// latencyShape draws the latency of a request sent to backend b of n.
type latencyShape struct {
	name     string
	backends int
	latency  func(b int) time.Duration
	// capacity bounds the requests a backend serves at once; beyond it,
	// it answers 503 at once. Zero means unbounded.
	capacity int
}

// uniform returns a random duration in [lo, hi).
func uniform(lo, hi time.Duration) time.Duration {
	return lo + rand.N(hi-lo)
}

var (
	// shapeTail: 98% of requests in 5 ms ±1, 2% in 500 ms to 2 s.
	shapeTail = latencyShape{name: "tail", backends: 1, latency: func(int) time.Duration {
		if rand.IntN(100) < 2 {
			return uniform(500*time.Millisecond, 2*time.Second)
		}
		return uniform(4*time.Millisecond, 6*time.Millisecond)
	}}
	// shapeSlowBackend: three backends behind one host; requests go to
	// one at random; one of them is degraded and answers in 50 ms ±10,
	// the others in 5 ms ±1.
	shapeSlowBackend = latencyShape{name: "slow-backend", backends: 3, latency: func(b int) time.Duration {
		if b == 0 {
			return uniform(40*time.Millisecond, 60*time.Millisecond)
		}
		return uniform(4*time.Millisecond, 6*time.Millisecond)
	}}
	// shapeOverload: every backend is slow (100 to 400 ms) and serves
	// at most 16 requests at once, answering 503 beyond that.
	shapeOverload = latencyShape{name: "overload", backends: 3, capacity: 16, latency: func(int) time.Duration {
		return uniform(100*time.Millisecond, 400*time.Millisecond)
	}}
)

// latencyEmulator is a server of the given shape, as a RoundTripper.
type latencyEmulator struct {
	shape    latencyShape
	inFlight []atomic.Int64
	seen     []atomic.Bool // by operation (the X-Op header): reached the server
	ops      atomic.Int64  // operations that reached the server
	requests atomic.Int64  // requests received
	rejected atomic.Int64  // 503s for lack of capacity
	open     atomic.Int64  // response bodies handed out and not closed
}

func newLatencyEmulator(s latencyShape, ops int) *latencyEmulator {
	return &latencyEmulator{shape: s, inFlight: make([]atomic.Int64, s.backends), seen: make([]atomic.Bool, ops)}
}

func (e *latencyEmulator) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	e.requests.Add(1)
	if i, err := strconv.Atoi(r.Header.Get("X-Op")); err == nil && i >= 0 && i < len(e.seen) && !e.seen[i].Swap(true) {
		e.ops.Add(1)
	}
	b := rand.IntN(e.shape.backends)
	if n := e.inFlight[b].Add(1); e.shape.capacity > 0 && n > int64(e.shape.capacity) {
		e.inFlight[b].Add(-1)
		e.rejected.Add(1)
		return e.respond(r, http.StatusServiceUnavailable), nil
	}
	defer e.inFlight[b].Add(-1)
	t := time.NewTimer(e.shape.latency(b))
	defer t.Stop()
	select {
	case <-t.C:
		return e.respond(r, http.StatusOK), nil
	case <-r.Context().Done():
		return nil, context.Cause(r.Context())
	}
}

func (e *latencyEmulator) respond(r *http.Request, code int) *http.Response {
	e.open.Add(1)
	return &http.Response{
		StatusCode:    code,
		Status:        http.StatusText(code),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"text/plain"}},
		Body:          &emulatorBody{Reader: strings.NewReader("ok"), e: e},
		ContentLength: 2,
		Request:       r,
	}
}

// emulatorBody counts itself closed once.
type emulatorBody struct {
	*strings.Reader
	e    *latencyEmulator
	once sync.Once
}

func (b *emulatorBody) Close() error {
	b.once.Do(func() { b.e.open.Add(-1) })
	return nil
}

// hedgeClient is one way of hedging, over the emulator.
type hedgeClient struct {
	name string
	new  func(base http.RoundTripper, hooks *stackEvents) http.RoundTripper
}

// stackEvents counts what sturdy's stack reports through its hooks.
type stackEvents struct {
	start          time.Time
	hedges         atomic.Int64
	throttled      atomic.Int64
	firstThrottle  atomic.Int64 // ns since start, 0 if none
	firstOpen      atomic.Int64 // ns since start, 0 if none
	breakerRefused atomic.Int64
}

func (s *stackEvents) hooks() transport.Hooks {
	first := func(v *atomic.Int64) {
		v.CompareAndSwap(0, int64(max(time.Since(s.start), 1)))
	}
	return transport.Hooks{
		OnHedge:    func(policy.HedgeEvent) { s.hedges.Add(1) },
		OnThrottle: func(transport.ThrottleEvent) { s.throttled.Add(1); first(&s.firstThrottle) },
		OnBreakerStateChange: func(_ string, _, to transport.BreakerState) {
			if to == transport.BreakerOpen {
				first(&s.firstOpen)
			}
		},
	}
}

var hedgeClients = []hedgeClient{
	{"none", func(base http.RoundTripper, _ *stackEvents) http.RoundTripper { return base }},
	{"sturdy-fixed", func(base http.RoundTripper, ev *stackEvents) http.RoundTripper {
		return transport.New(transport.Options{Base: base, Hedge: &policy.Hedge{Delay: hedgeDelay}, Hooks: ev.hooks()})
	}},
	{"sturdy-adaptive", func(base http.RoundTripper, ev *stackEvents) http.RoundTripper {
		return transport.New(transport.Options{Base: base, Hedge: &policy.Hedge{}, Hooks: ev.hooks()})
	}},
	{"failsafe", func(base http.RoundTripper, _ *stackEvents) http.RoundTripper {
		return failsafehttp.NewRoundTripper(base, hedgepolicy.NewWithDelay[*http.Response](hedgeDelay))
	}},
	{"hedgedhttp", func(base http.RoundTripper, _ *stackEvents) http.RoundTripper {
		rt, err := hedgedhttp.NewRoundTripper(hedgeDelay, 2, base) // upto counts the first request
		if err != nil {
			panic(err)
		}
		return rt
	}},
}

// hedgeResult is what one run measured.
type hedgeResult struct {
	lat      []time.Duration // per operation, sorted
	failed   int             // operations that ended in an error or a non-200
	requests int64           // requests the server received
	reached  int64           // operations that reached the server
	rejected int64           // of which 503s for lack of capacity
	open     int64           // response bodies never closed, after a grace period
}

// runHedge runs ops operations of GET, workers at a time (or, with
// rate > 0, started at that rate whatever the answers: an open loop, as
// traffic arrives at an overloaded server), and measures each one from
// its start to the end of its body.
func runHedge(s latencyShape, c hedgeClient, ops, workers int, rate float64, ev *stackEvents) hedgeResult {
	emu := newLatencyEmulator(s, ops)
	ev.start = time.Now()
	hc := &http.Client{Transport: c.new(emu, ev)}
	lat := make([]time.Duration, ops)
	var failed atomic.Int64
	one := func(i int) {
		start := time.Now()
		req, _ := http.NewRequest("GET", "http://backend.test/item", nil)
		req.Header.Set("X-Op", strconv.Itoa(i))
		resp, err := hc.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
		}
		lat[i] = time.Since(start)
		if err != nil {
			failed.Add(1)
		}
	}
	var wg sync.WaitGroup
	if rate > 0 {
		every := time.Duration(float64(time.Second) / rate)
		next := time.Now()
		for i := range ops {
			time.Sleep(time.Until(next))
			next = next.Add(every)
			wg.Go(func() { one(i) })
		}
	} else {
		var n atomic.Int64
		for range workers {
			wg.Go(func() {
				for i := int(n.Add(1) - 1); i < ops; i = int(n.Add(1) - 1) {
					one(i)
				}
			})
		}
	}
	wg.Wait()
	// Losers still running were canceled: give them a moment to close
	// what they got, then count what no one closed.
	time.Sleep(50 * time.Millisecond)
	slices.Sort(lat)
	return hedgeResult{lat: lat, failed: int(failed.Load()), requests: emu.requests.Load(), reached: emu.ops.Load(), rejected: emu.rejected.Load(), open: emu.open.Load()}
}

func (r hedgeResult) report(b *testing.B, ops int) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(quantile(r.lat, 0.50)), "p50-ms")
	b.ReportMetric(ms(quantile(r.lat, 0.99)), "p99-ms")
	b.ReportMetric(ms(quantile(r.lat, 0.999)), "p999-ms")
	// Extra requests: those beyond the first of each operation that
	// reached the server (an operation shed by the client sends none).
	b.ReportMetric(float64(r.requests-r.reached)/float64(ops), "extra-req/op")
	b.ReportMetric(float64(r.open), "unclosed-bodies")
	b.ReportMetric(0, "ns/op") // the wall time of a run says nothing here
}

// BenchmarkHedge compares hedging clients against a server whose
// requests take 5 ms ±1, but 2% of them 500 ms to 2 s: p50, p99 and
// p99.9 of 10,000 operations (64 at a time) per iteration, and the
// extra requests each operation cost. Every hedging client waits 20 ms
// before its one hedge, except sturdy-adaptive, which waits for the p95
// of the host's recent latencies.
func BenchmarkHedge(b *testing.B) {
	benchHedge(b, shapeTail, hedgeOps, hedgeWorkers, 0)
}

// BenchmarkHedgeSlowBackend is BenchmarkHedge against three backends
// behind one host, one of which is degraded (50 ms ±10); requests go to
// one at random.
func BenchmarkHedgeSlowBackend(b *testing.B) {
	benchHedge(b, shapeSlowBackend, hedgeOps/2, hedgeWorkers, 0)
}

// BenchmarkHedgeOverload is the same set against an overloaded server:
// every backend slow (100 to 400 ms) and serving at most 16 requests at
// once each (48 in all, about 190 per second), with 2,000 operations
// arriving at 400 per second whatever the answers. It reports, besides
// the latencies and extra requests, the operations that failed
// (fail/op), the requests the server refused for lack of capacity
// (rejected/op) and, for sturdy, the requests its throttle shed
// (throttled/op) and when the throttle first shed and the breaker first
// opened (first-shed-ms, first-open-ms; 0: never). sturdy-throttle is
// sturdy-fixed with Options.Throttle.
func BenchmarkHedgeOverload(b *testing.B) {
	clients := slices.Clone(hedgeClients)
	clients = append(clients, hedgeClient{"sturdy-throttle", func(base http.RoundTripper, ev *stackEvents) http.RoundTripper {
		return transport.New(transport.Options{Base: base, Hedge: &policy.Hedge{Delay: hedgeDelay}, Throttle: &policy.Throttle{}, Hooks: ev.hooks()})
	}})
	const ops = 2000
	for _, c := range clients {
		b.Run("client="+c.name, func(b *testing.B) {
			var r hedgeResult
			var ev stackEvents
			for b.Loop() {
				ev = stackEvents{}
				r = runHedge(shapeOverload, c, ops, 0, 400, &ev)
			}
			r.report(b, ops)
			b.ReportMetric(float64(r.failed)/ops, "fail/op")
			b.ReportMetric(float64(r.rejected)/ops, "rejected/op")
			b.ReportMetric(float64(ev.throttled.Load())/ops, "throttled/op")
			b.ReportMetric(float64(ev.firstThrottle.Load())/float64(time.Millisecond), "first-shed-ms")
			b.ReportMetric(float64(ev.firstOpen.Load())/float64(time.Millisecond), "first-open-ms")
		})
	}
}

func benchHedge(b *testing.B, s latencyShape, ops, workers int, rate float64) {
	for _, c := range hedgeClients {
		b.Run("client="+c.name, func(b *testing.B) {
			var r hedgeResult
			for b.Loop() {
				var ev stackEvents
				r = runHedge(s, c, ops, workers, rate, &ev)
			}
			r.report(b, ops)
			if r.failed > 0 {
				b.ReportMetric(float64(r.failed)/float64(ops), "fail/op")
			}
		})
	}
}
