package transport

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
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
)

// The finite-capacity server of the overload tests: 8 workers of 20 ms
// each, 400 requests a second, behind a queue that keeps working for
// callers who left.
const (
	capWorkers  = 8
	capService  = 20 * time.Millisecond
	capacity    = float64(capWorkers) / 0.020 // requests a second
	capOpBound  = 250 * time.Millisecond
	capWarmUp   = time.Second
	capMeasured = 4 * time.Second
)

// overloadResult is what callers got from a run at a given load.
type overloadResult struct {
	ops       int             // operations started in the measured period
	successes int             // of these, 200s
	refused   int             // refused by a concurrency limit
	other     int             // other failures (timeouts)
	p50, p99  time.Duration   // latency of the successes
	badRefuse []error         // refusals that do not match as documented
	latencies []time.Duration // of the successes
}

func (r overloadResult) goodput() float64 { return float64(r.successes) / capMeasured.Seconds() }

// runOverload sends open-loop Poisson arrivals at rate a second to a
// finite-capacity server through the client that mk makes, each
// operation bounded at 250 ms, for a warm-up and a measured period, in a
// synctest bubble.
func runOverload(t *testing.T, rate float64, mk func(base *http.Transport) *http.Client) overloadResult {
	t.Helper()
	return runPhases(t, capWarmUp, rate, rate, mk)
}

// runPhases is runOverload with arrivals at warmRate for warm (not
// measured), then at rate for the measured period.
func runPhases(t *testing.T, warm time.Duration, warmRate, rate float64, mk func(base *http.Transport) *http.Client) overloadResult {
	t.Helper()
	var res overloadResult
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		w := httptestutil.NewWorkers(capWorkers, capService)
		srv := n.Serve("capacity.test", w)
		base := n.Transport()
		client := mk(base)
		rng := rand.New(rand.NewPCG(42, uint64(rate)))
		start := time.Now()
		var mu sync.Mutex
		var wg sync.WaitGroup
		for {
			r := rate
			if time.Since(start) < warm {
				r = warmRate
			}
			time.Sleep(time.Duration(rng.ExpFloat64() / r * float64(time.Second)))
			at := time.Since(start)
			if at >= warm+capMeasured {
				break
			}
			measured := at >= warm
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), capOpBound)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/work", nil)
				began := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = errors.New(resp.Status)
					}
				}
				took := time.Since(began)
				if !measured {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				res.ops++
				switch {
				case err == nil:
					res.successes++
					res.latencies = append(res.latencies, took)
				case errors.Is(err, ErrConcurrencyLimit):
					res.refused++
					var ce *ConcurrencyLimitError
					if !errors.As(err, &ce) || ce.Limit <= 0 || policy.ReasonConcurrencyLimit != mustRefusal(err) {
						res.badRefuse = append(res.badRefuse, err)
					}
				default:
					res.other++
				}
			})
		}
		wg.Wait()
		base.CloseIdleConnections()
		srv.Close()
		w.Close()
	})
	slices.Sort(res.latencies)
	if k := len(res.latencies); k > 0 {
		res.p50 = res.latencies[k/2]
		res.p99 = res.latencies[min(k-1, k*99/100)]
	}
	return res
}

func mustRefusal(err error) policy.Reason {
	r, _ := policy.RefusedBy(err)
	return r
}

// The three clients of the overload tests.
var overloadClients = []struct {
	name string
	mk   func(base *http.Transport) *http.Client
}{
	{"bare net/http", func(base *http.Transport) *http.Client { return &http.Client{Transport: base} }},
	{"sturdy", func(base *http.Transport) *http.Client {
		return &http.Client{Transport: New(Options{Base: base})}
	}},
	{"sturdy with Concurrency", func(base *http.Transport) *http.Client {
		return &http.Client{Transport: New(Options{Base: base, Concurrency: &policy.Concurrency{}})}
	}},
}

func TestConcurrencyHoldsGoodputUnderOverload(t *testing.T) {
	unloaded := capService
	for _, load := range []float64{2, 5} {
		for _, c := range overloadClients {
			r := runOverload(t, load*capacity, c.mk)
			t.Logf("%.0f× capacity, %-24s goodput %5.0f/s (%3.0f%% of capacity), p50 %v, p99 %v, refused %d, other failures %d of %d",
				load, c.name, r.goodput(), 100*r.goodput()/capacity, r.p50, r.p99, r.refused, r.other, r.ops)
			if c.name != "sturdy with Concurrency" {
				if r.goodput() >= 0.85*capacity {
					t.Errorf("%.0f× capacity, %s: goodput %.0f/s, want the collapse that the limit prevents (below %.0f/s)", load, c.name, r.goodput(), 0.85*capacity)
				}
				continue
			}
			if got, want := r.goodput(), 0.85*capacity; got < want {
				t.Errorf("%.0f× capacity: goodput %.0f/s, want at least %.0f/s (85%% of capacity)", load, got, want)
			}
			if got, want := r.p99, 5*unloaded; got > want {
				t.Errorf("%.0f× capacity: p99 of successes %v, want at most %v (5× unloaded)", load, got, want)
			}
			if r.refused == 0 {
				t.Errorf("%.0f× capacity: no request refused, want the excess refused with ErrConcurrencyLimit", load)
			}
			for _, err := range r.badRefuse {
				t.Errorf("%.0f× capacity: refusal %v: want a *ConcurrencyLimitError with its limit, RefusedBy %q", load, err, policy.ReasonConcurrencyLimit)
			}
		}
	}
}

// TestConcurrencyHoldsGoodputWhenOverloadStarts: an overload that starts
// after a long calm (the limit waits and doubles as for a host that
// keeps up, until the host strains) or with the limit still unlearnt is
// held as a steady one is, measured from its first request: goodput at
// least 85% of capacity, p99 of successes within 5× the unloaded
// latency.
func TestConcurrencyHoldsGoodputWhenOverloadStarts(t *testing.T) {
	tests := []struct {
		name           string
		warm           time.Duration
		warmRate, rate float64
	}{
		{"0.25× for 35s, then 3×", 35 * time.Second, capacity / 4, 3 * capacity},
		{"0.25× for 35s, then 5×", 35 * time.Second, capacity / 4, 5 * capacity},
		{"3× from the start", 0, 0, 3 * capacity},
		{"5× from the start", 0, 0, 5 * capacity},
	}
	for _, tt := range tests {
		r := runPhases(t, tt.warm, tt.warmRate, tt.rate, overloadClients[2].mk)
		t.Logf("%s: goodput %.0f/s, p50 %v, p99 %v, refused %d, other failures %d of %d",
			tt.name, r.goodput(), r.p50, r.p99, r.refused, r.other, r.ops)
		if got, want := r.goodput(), 0.85*capacity; got < want {
			t.Errorf("%s: goodput %.0f/s, want at least %.0f/s", tt.name, got, want)
		}
		if got, want := r.p99, 5*capService; got > want {
			t.Errorf("%s: p99 of successes %v, want at most %v (5× unloaded)", tt.name, got, want)
		}
	}
}

func TestConcurrencyCostsNothingBelowCapacity(t *testing.T) {
	without := runOverload(t, capacity/2, overloadClients[1].mk)
	with := runOverload(t, capacity/2, overloadClients[2].mk)
	t.Logf("half capacity: without limit goodput %.0f/s p50 %v p99 %v; with limit goodput %.0f/s p50 %v p99 %v, refused %d",
		without.goodput(), without.p50, without.p99, with.goodput(), with.p50, with.p99, with.refused)
	if with.refused != 0 || with.other != 0 {
		t.Errorf("half capacity: %d refused and %d other failures, want none", with.refused, with.other)
	}
	if with.successes != without.successes {
		t.Errorf("half capacity: %d successes with the limit, %d without; want the same", with.successes, without.successes)
	}
	if with.p50 > without.p50+time.Millisecond || with.p99 > without.p99+time.Millisecond {
		t.Errorf("half capacity: p50/p99 %v/%v with the limit, %v/%v without; want no added latency", with.p50, with.p99, without.p50, without.p99)
	}
}

// holdServer answers "/hold" when release is closed, anything else at
// once, and counts what reached it.
type holdServer struct {
	release chan struct{}
	mu      sync.Mutex
	paths   []string
}

func (s *holdServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.paths = append(s.paths, r.URL.Path)
	s.mu.Unlock()
	if r.URL.Path == "/hold" {
		select {
		case <-s.release:
		case <-r.Context().Done():
		}
	}
	w.Write([]byte("ok"))
}

func (s *holdServer) reached() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.paths)
}

func TestConcurrencyRefusal(t *testing.T) {
	tests := []struct {
		name         string
		deadline     time.Duration // of the second request; 0: none
		releaseAfter time.Duration // when the first request's slot frees; 0: never
		wantErr      bool
		wantDeadline bool // the error matches context.DeadlineExceeded too
		wantWait     time.Duration
	}{
		{"time runs out while waiting", 100 * time.Millisecond, 0, true, true, 100 * time.Millisecond},
		{"no deadline: waits 10s at most while the host shows no strain", 0, 0, true, false, 10 * time.Second},
		{"a slot frees in time", 100 * time.Millisecond, 30 * time.Millisecond, false, false, 30 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := httptestutil.NewNetwork()
				hs := &holdServer{release: make(chan struct{})}
				srv := n.Serve("limit.test", hs)
				base := n.Transport()
				var attempts, refusals []string
				var mu sync.Mutex
				b := NewBreakers(BreakerSettings{ConsecutiveFailures: 1})
				rt := New(Options{Base: base, Breakers: b, Concurrency: &policy.Concurrency{Initial: 1, Min: 1, Max: 1},
					Hooks: Hooks{
						OnAttempt: func(e policy.AttemptEvent) {
							mu.Lock()
							attempts = append(attempts, e.Request.URL.Path)
							mu.Unlock()
						},
						OnConcurrencyRefuse: func(e ConcurrencyEvent) {
							mu.Lock()
							refusals = append(refusals, e.Request.URL.Path)
							mu.Unlock()
						},
					}})
				client := &http.Client{Transport: rt}
				first := make(chan error, 1)
				go func() {
					resp, err := client.Get(srv.URL + "/hold")
					if err == nil {
						resp.Body.Close()
					}
					first <- err
				}()
				synctest.Wait() // the first request holds the one slot
				if tt.releaseAfter > 0 {
					time.AfterFunc(tt.releaseAfter, func() { close(hs.release) })
				}
				ctx := context.Background()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/second", nil)
				start := time.Now()
				resp, err := client.Do(req)
				if got := time.Since(start); got != tt.wantWait {
					t.Errorf("second request ended after %v, want %v", got, tt.wantWait)
				}
				if tt.releaseAfter == 0 {
					close(hs.release)
				}
				if e := <-first; e != nil {
					t.Fatalf("first request: %v", e)
				}
				if !tt.wantErr {
					if err != nil {
						t.Fatalf("second request: %v, want it served once a slot freed", err)
					}
					resp.Body.Close()
					if got, want := hs.reached(), []string{"/hold", "/second"}; !slices.Equal(got, want) {
						t.Errorf("server saw %v, want %v", got, want)
					}
				} else {
					if !errors.Is(err, ErrConcurrencyLimit) {
						t.Fatalf("second request: %v, want ErrConcurrencyLimit", err)
					}
					if got := errors.Is(err, context.DeadlineExceeded); got != tt.wantDeadline {
						t.Errorf("errors.Is(%v, context.DeadlineExceeded) = %v, want %v", err, got, tt.wantDeadline)
					}
					var ce *ConcurrencyLimitError
					if !errors.As(err, &ce) || ce.Limit != 1 || ce.InFlight != 1 || ce.Host != "http://limit.test" {
						t.Errorf("error %#v, want a *ConcurrencyLimitError of http://limit.test with limit 1 and 1 in flight", ce)
					}
					for _, s := range []string{"concurrency limit", "http://limit.test", "limit 1"} {
						if !strings.Contains(err.Error(), s) {
							t.Errorf("error %q does not say %q", err, s)
						}
					}
					if got, want := hs.reached(), []string{"/hold"}; !slices.Equal(got, want) {
						t.Errorf("server saw %v, want %v: a refused request is never sent", got, want)
					}
					if !slices.Equal(refusals, []string{"/second"}) {
						t.Errorf("OnConcurrencyRefuse saw %v, want [/second]", refusals)
					}
				}
				if slices.Contains(attempts, "/second") != !tt.wantErr {
					t.Errorf("OnAttempt saw %v: a refused request is no attempt, a served one is", attempts)
				}
				if got := b.State(req.URL); got != BreakerClosed {
					t.Errorf("breaker %v after a refusal, want closed: a refusal is not counted against the host", got)
				}
				base.CloseIdleConnections()
				srv.Close()
			})
		})
	}
}

// TestConcurrencyStreamsHoldASlotUntilTheirFirstEvent: a stream holds
// its slot until its first content event (or its headers, with
// FirstEvent off), not for the stream's life.
func TestConcurrencyStreamsHoldASlotUntilTheirFirstEvent(t *testing.T) {
	tests := []struct {
		name       string
		firstEvent time.Duration // Options.FirstEventTimeout
		wantWait   time.Duration // of a request sent 10ms after the stream
	}{
		{"FirstEvent on", 0, 40 * time.Millisecond},
		{"FirstEvent off", -1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := httptestutil.NewNetwork()
				srv := n.Serve("stream.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path != "/stream" {
						w.Write([]byte("ok"))
						return
					}
					w.Header().Set("Content-Type", "text/event-stream")
					w.WriteHeader(200)
					rc := http.NewResponseController(w)
					rc.Flush()
					time.Sleep(50 * time.Millisecond)
					io.WriteString(w, "data: {\"text\":\"first\"}\n\n")
					rc.Flush()
					time.Sleep(time.Hour) // the stream lives on
					io.WriteString(w, "data: {\"text\":\"last\"}\n\n")
				}))
				base := n.Transport()
				client := &http.Client{Transport: New(Options{Base: base, FirstEventTimeout: tt.firstEvent,
					Concurrency: &policy.Concurrency{Initial: 1, Min: 1, Max: 1}})}
				streamDone := make(chan struct{})
				go func() {
					defer close(streamDone)
					resp, err := client.Get(srv.URL + "/stream")
					if err != nil {
						t.Errorf("stream: %v", err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}()
				time.Sleep(10 * time.Millisecond)
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/short", nil)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("a request beside the stream: %v, want it served once the stream's slot frees", err)
				}
				resp.Body.Close()
				if got := time.Since(start); got != tt.wantWait {
					t.Errorf("a request beside the stream waited %v, want %v", got, tt.wantWait)
				}
				<-streamDone
				base.CloseIdleConnections()
				srv.Close()
			})
		})
	}
}

// TestConcurrencyLearnsFromTimeoutsNotCancels: an attempt its caller
// canceled teaches the limit nothing; one that ran out of time is a loss.
func TestConcurrencyLearnsFromTimeoutsNotCancels(t *testing.T) {
	tests := []struct {
		name     string
		end      func(ctx context.Context) (context.Context, context.CancelFunc)
		wantFall bool
	}{
		{"canceled by the caller", func(ctx context.Context) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, false},
		{"out of time", func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 50*time.Millisecond)
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := httptestutil.NewNetwork()
				hs := &holdServer{release: make(chan struct{})} // "/hold" never answers in time
				srv := n.Serve("learn.test", hs)
				base := n.Transport()
				var mu sync.Mutex
				limit := 10
				rt := New(Options{Base: base, Retry: policy.Retry{MaxAttempts: 1}, Disable: LayerBreaker,
					Concurrency: &policy.Concurrency{Initial: 10, Min: 1},
					Hooks: Hooks{OnConcurrencyChange: func(e ConcurrencyEvent) {
						mu.Lock()
						limit = e.Limit
						mu.Unlock()
					}}})
				client := &http.Client{Transport: rt}
				for range 20 {
					ctx, cancel := tt.end(context.Background())
					req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/hold", nil)
					if _, err := client.Do(req); err == nil {
						t.Fatal("a request the server never answered succeeded")
					}
					cancel()
					time.Sleep(10 * time.Millisecond)
				}
				mu.Lock()
				got := limit
				mu.Unlock()
				if fell := got < 10; fell != tt.wantFall {
					t.Errorf("limit after 20 attempts %s = %d (from 10); want it to fall: %v", tt.name, got, tt.wantFall)
				}
				close(hs.release)
				base.CloseIdleConnections()
				srv.Close()
			})
		})
	}
}

// TestConcurrencyIgnoresHedgeLosers: a hedged copy that lost the race
// and was canceled teaches the limit nothing, as the caller's cancel.
func TestConcurrencyIgnoresHedgeLosers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := httptestutil.NewNetwork()
		var mu sync.Mutex
		seen := map[string]int{}
		srv := n.Serve("hedge.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[r.URL.RawQuery]++
			first := seen[r.URL.RawQuery] == 1
			mu.Unlock()
			if first { // each operation's first copy hangs until it loses
				<-r.Context().Done()
				return
			}
			w.Write([]byte("ok"))
		}))
		base := n.Transport()
		var changes []ConcurrencyEvent
		rt := New(Options{Base: base, Disable: LayerBreaker,
			Hedge:       &policy.Hedge{Delay: 10 * time.Millisecond, Budget: &policy.Budget{Ratio: 1, MinRetries: 1000}},
			Concurrency: &policy.Concurrency{Initial: 10, Min: 1},
			Hooks: Hooks{OnConcurrencyChange: func(e ConcurrencyEvent) {
				mu.Lock()
				changes = append(changes, e)
				mu.Unlock()
			}}})
		client := &http.Client{Transport: rt}
		for i := range 30 {
			resp, err := client.Get(srv.URL + "/x?op=" + strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			synctest.Wait() // the loser's cancel has reached the server
			time.Sleep(5 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, e := range changes {
			if e.Limit < 10 {
				t.Errorf("limit fell to %d: a hedge that lost counted as a loss", e.Limit)
			}
		}
		for op, copies := range seen {
			if copies != 2 {
				t.Errorf("operation %s: %d copies reached the server, want 2 (the hedge is the point)", op, copies)
			}
		}
		base.CloseIdleConnections()
		srv.Close()
	})
}

// TestConcurrencyAddsNoAllocation: a request that succeeds allocates as
// much with Options.Concurrency as without it.
func TestConcurrencyAddsNoAllocation(t *testing.T) {
	allocs := func(c *policy.Concurrency) float64 {
		rt := New(Options{Base: memBase, Concurrency: c})
		req, _ := http.NewRequest("GET", "http://api.test/v1/things", nil)
		return testing.AllocsPerRun(200, func() {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	off, on := allocs(nil), allocs(&policy.Concurrency{})
	if on != off {
		t.Errorf("allocations of a GET: %v with Concurrency, %v without; want equal", on, off)
	}
}

// TestConcurrencyAboveTheBreaker: with the limit on, in New and in a
// Chain of its layers with a wrapper that clones each request between
// every two, the Breaker beneath counts what the host does: a host that
// fails opens its breaker, and one that serves keeps it closed.
func TestConcurrencyAboveTheBreaker(t *testing.T) {
	o := Options{Concurrency: &policy.Concurrency{}, Retry: policy.Retry{MaxAttempts: 1},
		Breaker: BreakerSettings{ConsecutiveFailures: 3}}
	cloning := func(next http.RoundTripper) http.RoundTripper {
		return Func(func(r *http.Request) (*http.Response, error) {
			return next.RoundTrip(r.Clone(context.WithValue(r.Context(), struct{ k int }{1}, 1)))
		})
	}
	stacks := map[string]func(base http.RoundTripper) http.RoundTripper{
		"New": func(base http.RoundTripper) http.RoundTripper { o := o; o.Base = base; return New(o) },
		"Chain with wrappers": func(base http.RoundTripper) http.RoundTripper {
			var mws []Middleware
			for _, m := range Layers(o) {
				mws = append(mws, m, cloning)
			}
			return Chain(base, mws...)
		},
	}
	for name, stack := range stacks {
		for _, status := range []int{http.StatusOK, http.StatusInternalServerError} {
			t.Run(name+"/"+strconv.Itoa(status), func(t *testing.T) {
				base := Func(func(r *http.Request) (*http.Response, error) {
					return &http.Response{StatusCode: status, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
				})
				rt := stack(base)
				var errs []error
				for range 5 {
					req, _ := http.NewRequest("GET", "http://api.test/v1/things", nil)
					resp, err := rt.RoundTrip(req)
					if err == nil {
						resp.Body.Close()
					}
					errs = append(errs, err)
				}
				for i, err := range errs {
					open := status >= 500 && i >= 3
					if got := errors.Is(err, ErrCircuitOpen); got != open {
						t.Errorf("request %d of a host answering %d: err %v, want circuit open %v", i+1, status, err, open)
					}
				}
			})
		}
	}
}

// TestConcurrencyOutcomeOfACutAttempt: an attempt cut by a bound of
// New's (its context canceled with a *DeadlineError as cause) or by the
// caller's deadline is a loss the limit learns from; one its caller
// canceled, with a cause or without, or a hedge loser, teaches nothing.
func TestConcurrencyOutcomeOfACutAttempt(t *testing.T) {
	cut := &DeadlineError{Bound: boundAttempt, Limit: time.Second}
	mine := errors.New("the caller's own reason")
	tests := []struct {
		name  string
		cause error // the cause the attempt's context is canceled with; nil: a deadline
		err   error // what the base returned
		want  policy.ConcurrencyOutcome
	}{
		{"a bound of New's", cut, cut, policy.ConcurrencyLoss},
		{"the caller's deadline", nil, context.DeadlineExceeded, policy.ConcurrencyLoss},
		{"the caller's cancel", context.Canceled, context.Canceled, policy.ConcurrencyIgnored},
		{"the caller's cancel with a cause", mine, mine, policy.ConcurrencyIgnored},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ctx context.Context
			if tt.cause == nil {
				c, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
				defer cancel()
				ctx = c
			} else {
				c, cancel := context.WithCancelCause(context.Background())
				cancel(tt.cause)
				ctx = c
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.test/", nil)
			if got := concOutcome(req, nil, tt.err); got != tt.want {
				t.Errorf("concOutcome = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestConcurrencyNeverWorseOnAHostThatKeepsUp: callers far more than the
// initial limit, against a host that serves them all without slowing,
// get every operation the bare client gets, none refused: the requests
// that find the limit full wait while the limit doubles. Bursts of GETs
// (10 in a row per caller), and waves of streams whose first event comes
// after 1.5s (a slot is held to it; a stream's wait teaches no latency,
// but that it was needed).
func TestConcurrencyNeverWorseOnAHostThatKeepsUp(t *testing.T) {
	type load struct {
		name    string
		callers int
		rounds  int  // operations in a row per caller
		stream  bool // an event stream, first event after 1.5s
	}
	loads := []load{
		{"30 callers", 30, 10, false},
		{"45 callers", 45, 10, false},
		{"100 callers", 100, 10, false},
		{"3 waves of 30 streams", 30, 3, true},
	}
	for _, ld := range loads {
		t.Run(ld.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := httptestutil.NewNetwork()
				w := httptestutil.NewWorkers(1000, 20*time.Millisecond)
				srv := n.Serve("keepsup.test", thinkingStreams(1500*time.Millisecond, w))
				base := n.Transport()
				var refused atomic.Int64
				clients := []struct {
					name string
					c    *http.Client
				}{
					{"bare net/http", &http.Client{Transport: base}},
					{"sturdy with Concurrency", &http.Client{Transport: New(Options{Base: base, Concurrency: &policy.Concurrency{},
						Hooks: Hooks{OnConcurrencyRefuse: func(ConcurrencyEvent) { refused.Add(1) }}})}},
				}
				failed := make([]atomic.Int64, len(clients))
				took := make([]time.Duration, len(clients))
				for i, c := range clients {
					start := time.Now()
					path := "/work"
					if ld.stream {
						path = "/stream"
					}
					one := func() {
						resp, err := c.c.Get(srv.URL + path)
						if err == nil {
							_, err = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
						if err != nil {
							if failed[i].Add(1) == 1 {
								t.Logf("%s: %v", c.name, err)
							}
						}
					}
					if ld.stream { // waves: every caller at once, then the next wave
						for range ld.rounds {
							var wg sync.WaitGroup
							for range ld.callers {
								wg.Go(one)
							}
							wg.Wait()
						}
					} else {
						var wg sync.WaitGroup
						for range ld.callers {
							wg.Go(func() {
								for range ld.rounds {
									one()
								}
							})
						}
						wg.Wait()
					}
					took[i] = time.Since(start)
				}
				t.Logf("%s: bare %d failed in %v; sturdy with Concurrency %d failed (%d refused) in %v",
					ld.name, failed[0].Load(), took[0], failed[1].Load(), refused.Load(), took[1])
				if got, bare := failed[1].Load(), failed[0].Load(); got > bare || refused.Load() != 0 {
					t.Errorf("%s: %d failed (%d refused) with the limit, %d with the bare client; want none the bare client delivers",
						ld.name, got, refused.Load(), bare)
				}
				if took[1] > 2*took[0] {
					t.Errorf("%s: took %v with the limit, %v with the bare client; want at most twice", ld.name, took[1], took[0])
				}
				base.CloseIdleConnections()
				srv.Close()
				w.Close()
			})
		})
	}
}

// TestConcurrencyStreamsTeachNoLatency: streams whose first event comes
// long after their request, held to it by FirstEvent, do not lower the
// limit learnt from fast requests: in New, and in a Chain of its layers
// with a RoundTripper that wraps every response body between every two.
func TestConcurrencyStreamsTeachNoLatency(t *testing.T) {
	o := Options{Concurrency: &policy.Concurrency{}}
	wrapping := func(next http.RoundTripper) http.RoundTripper {
		return Func(func(r *http.Request) (*http.Response, error) {
			resp, err := next.RoundTrip(r)
			if err == nil {
				resp.Body = struct{ io.ReadCloser }{resp.Body} // as otelhttp does
			}
			return resp, err
		})
	}
	stacks := []struct {
		name  string
		stack func(o Options, base http.RoundTripper) http.RoundTripper
	}{
		{"New", func(o Options, base http.RoundTripper) http.RoundTripper { o.Base = base; return New(o) }},
		{"Chain with wrappers", func(o Options, base http.RoundTripper) http.RoundTripper {
			var mws []Middleware
			for _, m := range Layers(o) {
				mws = append(mws, m, wrapping)
			}
			return Chain(base, mws...)
		}},
	}
	for _, st := range stacks {
		t.Run(st.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := httptestutil.NewNetwork()
				srv := n.Serve("streams.test", thinkingStreams(150*time.Millisecond, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					time.Sleep(5 * time.Millisecond)
					io.WriteString(w, "ok")
				})))
				base := n.Transport()
				var changes [][2]int
				var mu sync.Mutex
				o := o
				o.Hooks.OnConcurrencyChange = func(e ConcurrencyEvent) {
					mu.Lock()
					changes = append(changes, [2]int{e.From, e.Limit})
					mu.Unlock()
				}
				client := &http.Client{Transport: st.stack(o, base)}
				get := func(path string) {
					resp, err := client.Get(srv.URL + path)
					if err != nil {
						t.Errorf("GET %s: %v", path, err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				for range 40 { // the healthy latency: 5ms
					get("/work")
				}
				var wg sync.WaitGroup
				for range 80 {
					wg.Go(func() { get("/stream") })
					time.Sleep(2 * time.Millisecond)
				}
				wg.Wait()
				for _, c := range changes {
					if c[1] < c[0] {
						t.Errorf("limit changes (from, to) %v: it fell, want streams to teach no latency", changes)
						break
					}
				}
				base.CloseIdleConnections()
				srv.Close()
			})
		})
	}
}

// thinkingStreams answers "/stream" with an event stream whose headers
// come at once and whose first event comes after think (a model
// thinking), and anything else with other.
func thinkingStreams(think time.Duration, other http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			other.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		http.NewResponseController(w).Flush()
		time.Sleep(think)
		io.WriteString(w, "data: {\"tok\":1}\n\n")
	})
}
