package fleet_test

import (
	"context"
	"errors"
	"github.com/redis/rueidis"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/fleet"
	"github.com/sturdyhttp/sturdy/fleet/internal/redisproc"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// failing is a server that answers 503 to everything and counts what it
// is sent.
type failing struct{ hits atomic.Int64 }

func (s *failing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.hits.Add(1)
	w.WriteHeader(http.StatusServiceUnavailable)
}

// budgetStack returns a stack that retries up to 3 times, quickly, with
// budget as its retry budget; its breakers are off, so that every
// operation reaches the host.
func budgetStack(budget *policy.Budget) http.RoundTripper {
	return transport.New(transport.Options{
		Retry: policy.Retry{
			MaxAttempts: 4,
			Backoff:     policy.FullJitter(time.Millisecond, 5*time.Millisecond),
			Budget:      budget,
		},
		Disable: transport.LayerBreaker,
	})
}

// fleetRun is what a run of processes against a failing host measured.
type fleetRun struct {
	ops, retries, trips int64
	perProcess          []int64 // operations of each process
	failedByRedis       int64   // operations that ended in an error, not the host's 503
}

// runProcesses runs a process per budget, of workers goroutines, each
// doing opsPerWorker operations, think apart, or more until run has
// passed, against srv.
func runProcesses(t *testing.T, srvURL string, hits *atomic.Int64, budgets []*policy.Budget, workers, opsPerWorker int, think, run time.Duration) fleetRun {
	t.Helper()
	var r fleetRun
	before, beforeHits := writes.Load(), hits.Load()
	var wg sync.WaitGroup
	r.perProcess = make([]int64, len(budgets))
	for pi, b := range budgets {
		rt := budgetStack(b)
		if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
			t.Cleanup(c.CloseIdleConnections)
		}
		for range workers {
			wg.Go(func() {
				start := time.Now()
				for i := 0; i < opsPerWorker || time.Since(start) < run; i++ {
					if i > 0 {
						time.Sleep(think)
					}
					req, _ := http.NewRequest("GET", srvURL+"/v1/models", nil)
					resp, err := rt.RoundTrip(req)
					atomic.AddInt64(&r.ops, 1)
					atomic.AddInt64(&r.perProcess[pi], 1)
					if err != nil {
						atomic.AddInt64(&r.failedByRedis, 1)
						t.Errorf("operation failed: %v", err)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
	r.retries = hits.Load() - beforeHits - r.ops
	r.trips = writes.Load() - before
	return r
}

// Ten processes, each with its own Fleet and client of one Redis, send
// operations to a host that answers 503 to everything. With the fleet's
// budget, the retries the host sees are within 10% of what one process's
// budget allows for the fleet's operations (MinRetries + Ratio × ops),
// against MinRetries per process more with per-process budgets.
func TestFleetBudgetTenProcesses(t *testing.T) {
	redis := redisproc.StartT(t)
	const procs = 10
	rule := policy.Budget{Window: time.Minute} // the run fits in one window; Ratio 0.2, MinRetries 10
	tests := []struct {
		name                  string
		workers, opsPerWorker int
		think, run            time.Duration
	}{
		{"quiet: 5 operations per process, 150ms apart", 1, 5, 150 * time.Millisecond, 0},
		// 50 RefreshIntervals: the retries the budget earns in the last
		// one or two are not leased before the run ends.
		{"busy: 4 workers per process for 5s", 4, 0, 0, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &failing{}
			ts := httptest.NewServer(srv)
			defer ts.Close()

			redisDo(t, newClient(t, redis), "FLUSHALL")
			shared := make([]*policy.Budget, procs)
			stores := make([]*observed, procs)
			for i := range shared {
				f, err := fleet.New(newCountingClient(t, redis), fleet.Options{Timeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close() })
				stores[i] = &observed{BudgetStore: f.Budgets()}
				shared[i] = &policy.Budget{Window: rule.Window, Store: stores[i]}
			}
			fl := runProcesses(t, ts.URL, &srv.hits, shared, tt.workers, tt.opsPerWorker, tt.think, tt.run)

			local := make([]*policy.Budget, procs)
			for i := range local {
				local[i] = &policy.Budget{Window: rule.Window}
			}
			pp := runProcesses(t, ts.URL, &srv.hits, local, tt.workers, tt.opsPerWorker, tt.think, tt.run)

			r := rule.Rule()
			wantFleet := r.Allowance(int(fl.ops))
			var wantLocal float64
			for _, ops := range pp.perProcess {
				wantLocal += r.Allowance(int(ops))
			}
			t.Logf("%d processes, %d operations: fleet budget %d retries (rule allows %.0f), per-process budgets %d (rule allows %.0f), %.1f×; "+
				"Redis round trips %d, %.4f per operation",
				procs, fl.ops, fl.retries, wantFleet, pp.retries, wantLocal, float64(pp.retries)/float64(fl.retries),
				fl.trips, float64(fl.trips)/float64(fl.ops))
			// A call to Redis slower than Timeout (1s) sends a process to
			// its own budget for that retry: none should on this run, but
			// a loaded machine under -race has seen it.
			fallbacks, byFleet := 0, 0
			for _, o := range stores {
				for _, d := range o.decisions {
					switch {
					case !d.ok:
						fallbacks++
					case d.allowed:
						byFleet++
					}
				}
			}
			if fallbacks > 0 {
				t.Logf("%d retries decided by a process's own budget: Redis did not answer within Timeout", fallbacks)
			}
			// What the fleet allowed is within its rule, whatever the
			// machine's load; the host saw those and at most one more
			// per retry decided by a process's own budget.
			if float64(byFleet) > wantFleet {
				t.Errorf("retries the fleet allowed: got %d, want at most %.0f", byFleet, wantFleet)
			}
			if got := fl.retries; got > int64(byFleet+fallbacks) {
				t.Errorf("retries the host saw: got %d, want at most the %d the fleet allowed and %d decided locally", got, byFleet, fallbacks)
			}
			if got := float64(fl.retries); got > wantFleet+float64(fallbacks) || got < 0.9*wantFleet {
				t.Errorf("retries with the fleet's budget: got %.0f, want within 10%% under %.0f", got, wantFleet)
			}
			if got := float64(pp.retries); got > wantLocal || got < 0.9*wantLocal {
				t.Errorf("retries with per-process budgets: got %.0f, want within 10%% under %.0f", got, wantLocal)
			}
		})
	}
}

// observed is a fleet BudgetStore whose decisions are recorded: when each
// Retry was asked, how long it took, and whether the fleet decided.
type observed struct {
	fleet.BudgetStore
	mu        sync.Mutex
	decisions []decision
}

type decision struct {
	at, took time.Duration // from the run's start
	ok       bool          // the fleet decided
	allowed  bool          // and allowed the retry
}

var runStart time.Time

func (o *observed) Retry(key string, now time.Time, rule policy.BudgetRule) (bool, bool) {
	start := time.Now()
	allowed, ok := o.BudgetStore.Retry(key, now, rule)
	o.mu.Lock()
	o.decisions = append(o.decisions, decision{at: start.Sub(runStart), took: time.Since(start), ok: ok, allowed: allowed})
	o.mu.Unlock()
	return allowed, ok
}

// Redis is killed mid-run and started again, empty, or paused and
// resumed: each process goes on under its own budget, having waited on
// Redis at most Timeout, and is back on the fleet's budget within
// RefreshInterval + Timeout of the restart. No operation fails because of Redis: each gets the host's 503,
// as the bare client beside does.
func TestFleetBudgetRedisDown(t *testing.T) {
	tests := []struct {
		name       string
		down, back func(*redisproc.Server) error
	}{
		{"killed, restarted empty", func(s *redisproc.Server) error { s.Kill(); return nil }, (*redisproc.Server).Restart},
		{"paused (answers nothing), resumed", func(s *redisproc.Server) error { s.Pause(); return nil }, func(s *redisproc.Server) error { s.Resume(); return nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { testBudgetRedisDown(t, tt.down, tt.back) })
	}
}

func testBudgetRedisDown(t *testing.T, down, back func(*redisproc.Server) error) {
	redis := redisproc.StartT(t)
	srv := &failing{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	bare := &http.Client{}
	defer bare.CloseIdleConnections()

	const (
		procs   = 10
		timeout = 100 * time.Millisecond
		killAt  = 800 * time.Millisecond
		downFor = 800 * time.Millisecond
		after   = 1600 * time.Millisecond // the run goes on this long once Redis is back
		// or longer, until every process has had a retry decided by the
		// fleet again, but no longer than maxAfter
		maxAfter = 10 * time.Second
	)
	type proc struct {
		f       *fleet.Fleet
		store   *observed
		rt      http.RoundTripper
		downs   int64 // Redis taken as unreachable, until rejoin-downFor after the return
		ops     atomic.Int64
		retries atomic.Int64 // until the restart
		opsTill atomic.Int64 // operations until the restart
		atKill  int64        // retries until the kill
	}
	ps := make([]*proc, procs)
	var restarted atomic.Bool
	var backAt, endAt atomic.Int64 // from runStart; 0 until Redis is back
	for i := range ps {
		f, err := fleet.New(newClient(t, redis), fleet.Options{Timeout: timeout, OnError: func(err error) {
			if at := time.Since(runStart); backAt.Load() > 0 && at > time.Duration(backAt.Load())+time.Second {
				t.Logf("%v (%v after the run began)", err, at.Round(time.Millisecond))
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		p := &proc{f: f, store: &observed{BudgetStore: f.Budgets()}}
		p.rt = transport.New(transport.Options{
			Retry: policy.Retry{
				MaxAttempts: 4,
				Backoff:     policy.FullJitter(time.Millisecond, 5*time.Millisecond),
				Budget:      &policy.Budget{Window: time.Minute, Store: p.store},
			},
			Disable: transport.LayerBreaker,
			Hooks: transport.Hooks{OnRetry: func(policy.RetryEvent) {
				if !restarted.Load() {
					p.retries.Add(1)
				}
			}},
		})
		ps[i] = p
	}
	runStart = time.Now()
	var wg sync.WaitGroup
	var hitsAtRestart, opsAtRestart atomic.Int64
	var ops atomic.Int64
	for _, p := range ps {
		wg.Go(func() {
			for end := time.Duration(endAt.Load()); end == 0 || time.Since(runStart) < end; end = time.Duration(endAt.Load()) {
				p.ops.Add(1) // counted as the budget counts it: before it is sent
				ops.Add(1)
				if !restarted.Load() {
					p.opsTill.Add(1)
				}
				req, _ := http.NewRequest("GET", ts.URL+"/v1/models", nil)
				resp, err := p.rt.RoundTrip(req)
				if err != nil {
					t.Errorf("stack: %v", err)
				} else {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 503 {
						t.Errorf("stack: status %d, want the host's 503", resp.StatusCode)
					}
				}
				srv.hits.Add(-1) // the bare client's request, below, is not the stack's
				resp, err = bare.Get(ts.URL + "/v1/models")
				if err != nil {
					t.Errorf("bare client: %v", err)
				} else {
					resp.Body.Close()
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	time.Sleep(killAt)
	for _, p := range ps {
		p.atKill = p.retries.Load()
	}
	// lag is how late a goroutine woke while Redis was down: on a loaded
	// machine, a retry's wait on Redis ends that late after Timeout.
	var lag atomic.Int64
	lagDone := make(chan struct{})
	var lagWG sync.WaitGroup
	lagWG.Go(func() {
		for {
			select {
			case <-lagDone:
				return
			default:
			}
			start := time.Now()
			time.Sleep(5 * time.Millisecond)
			if l := int64(time.Since(start) - 5*time.Millisecond); l > lag.Load() {
				lag.Store(l)
			}
		}
	})
	down(redis)
	time.Sleep(downFor)
	close(lagDone)
	lagWG.Wait()
	if err := back(redis); err != nil {
		t.Fatal(err)
	}
	// Times from Redis's return as it happened: starting a redis-server
	// on this loaded machine may take a while.
	restarted.Store(true) // first: a retry counted as before the restart was decided before backAt
	hitsAtRestart.Store(srv.hits.Load())
	opsAtRestart.Store(ops.Load())
	backAt.Store(int64(time.Since(runStart)))
	endAt.Store(backAt.Load() + int64(maxAfter))
	returned := time.Duration(backAt.Load())
	// RefreshInterval + Timeout, and this machine's slack: with -race on
	// two shared cores, a resumed Redis takes a while to answer the
	// backlog of every client.
	const rejoin = 100*time.Millisecond + timeout + 800*time.Millisecond
	// A call that fails takes Redis as unreachable for RefreshInterval +
	// 2 × Timeout (markedDown): a retry decided locally from rejoin on
	// follows a call that failed from rejoin-markedDown on.
	const markedDown = 100*time.Millisecond + 2*timeout
	time.Sleep(time.Until(runStart.Add(returned + rejoin - markedDown)))
	for _, p := range ps {
		p.downs = p.f.Downs()
	}
	// The run goes on for after, or until every process has had a retry
	// decided by the fleet from rejoin on: a loaded machine can keep
	// Redis's answers past Timeout for a while after its return.
	for time.Since(runStart) < returned+maxAfter {
		time.Sleep(50 * time.Millisecond)
		if time.Since(runStart) < returned+after {
			continue
		}
		rejoined := 0
		for _, p := range ps {
			p.store.mu.Lock()
			if slices.ContainsFunc(p.store.decisions, func(d decision) bool { return d.ok && d.at >= returned+rejoin }) {
				rejoined++
			}
			p.store.mu.Unlock()
		}
		if rejoined == len(ps) {
			break
		}
	}
	endAt.Store(int64(time.Since(runStart)))
	wg.Wait()

	rule := (&policy.Budget{Window: time.Minute}).Rule()
	var lastLocal time.Duration
	for i, p := range ps {
		p.store.mu.Lock()
		// The fleet's retries while Redis was down: sharedDuring before
		// the last retry decided locally, sharedTail after it (one worker
		// per process: its decisions are in order).
		var local, sharedDuring, sharedTail, sharedAfter, localAfter int
		var slowest time.Duration
		for _, d := range p.store.decisions {
			if !d.ok && d.at >= returned {
				lastLocal = max(lastLocal, d.at-returned)
			}
			if d.at >= killAt && d.at < returned {
				slowest = max(slowest, d.took)
				if !d.ok {
					local++
					sharedDuring += sharedTail
					sharedTail = 0
				} else if d.allowed {
					sharedTail++ // leased before, or before the fleet found Redis gone, or from the restarted Redis
				}
			}
			if d.at >= returned+rejoin && !d.ok {
				localAfter++
			}
			if d.at >= returned+rejoin && d.ok {
				sharedAfter++
			}
		}
		p.store.mu.Unlock()
		if local == 0 {
			t.Errorf("process %d: no retry decided on its own budget while Redis was down", i)
		}
		// Back on the fleet's budget. A call that runs past the 100ms
		// Timeout (as on a loaded machine) sends a process back to its
		// own budget for a while, as it should: a retry decided locally
		// then is one that follows such a call.
		failedAfter := p.f.Downs() - p.downs
		if sharedAfter == 0 || (localAfter > 0 && failedAfter == 0) {
			t.Errorf("process %d: %d retries decided by the fleet and %d locally from %v after Redis was returned (to %v), with %d calls failing from %v; want the fleet to decide, and locally only after a failed call",
				i, sharedAfter, localAfter, rejoin, time.Duration(endAt.Load())-returned, failedAfter, rejoin-markedDown)
		}
		if localAfter > 0 {
			t.Logf("process %d: %d retries decided locally from %v after Redis was returned, after %d calls to Redis failed", i, localAfter, rejoin, failedAfter)
		}
		// Timeout, and how late a goroutine woke meanwhile: two cores
		// shared by many processes, under -race, wake one late at times.
		if slowest > timeout+time.Duration(lag.Load())+50*time.Millisecond {
			t.Errorf("process %d: a retry waited %v on Redis, want at most Timeout %v (+ %v, the latest wake-up while Redis was down)",
				i, slowest, timeout, time.Duration(lag.Load()).Round(time.Millisecond))
		}
		// Its own budget held: while Redis was down it retried only while
		// its own count (the fleet's grants included) was under its own
		// rule over its own operations.
		// A local decision allows a retry only while the process's count
		// (the fleet's retries included) is under its own rule; the fleet
		// may allow more after the last local one.
		own := rule.Allowance(int(p.opsTill.Load()))
		if got, want := float64(p.retries.Load()), max(own, float64(p.atKill+int64(sharedDuring)))+float64(sharedTail); got > want {
			t.Errorf("process %d: %.0f retries until the restart, more than %.0f: its own budget's %.0f, or the %d before the kill and %d the fleet allowed after, and %d the fleet allowed after the last local decision",
				i, got, want, own, p.atKill, sharedDuring, sharedTail)
		}
		t.Logf("process %d: %d operations and %d retries until the restart, %d retries decided locally while Redis was down (slowest wait on Redis %v), %d by the fleet after",
			i, p.opsTill.Load(), p.retries.Load(), local, slowest.Round(time.Millisecond), sharedAfter)
	}
	t.Logf("the last retry decided locally came %v after Redis was back", lastLocal.Round(time.Millisecond))
	// Back on the fleet's budget: a restarted Redis is empty, so the fleet
	// may retry MinRetries + Ratio × the operations since the restart; a
	// resumed one has counted fewer operations than there were, which
	// allows no more.
	retriesAfter := srv.hits.Load() - hitsAtRestart.Load() - (ops.Load() - opsAtRestart.Load())
	want := rule.Allowance(int(ops.Load() - opsAtRestart.Load()))
	t.Logf("after the restart: %d operations, %d retries; the fleet's rule allows %.0f", ops.Load()-opsAtRestart.Load(), retriesAfter, want)
	// A retry decided locally after the return (a call that failed then)
	// is on the process's own counts, not the fleet's: each may add one.
	localSince := 0
	for _, p := range ps {
		for _, d := range p.store.decisions {
			if !d.ok && d.at >= returned {
				localSince++
			}
		}
	}
	if float64(retriesAfter) > want*1.1+float64(localSince) {
		t.Errorf("retries after the restart: got %d, want at most %.0f (+10%%: some were leased before it) + %d decided locally",
			retriesAfter, want, localSince)
	}
}

// The budget on a Redis Cluster: leases and the background sync of two
// processes (a pipeline across hosts' slots) bound the retries of both to
// one budget, per host; the idempotency store's WAIT (keyless) goes with
// the lock's slot.
func TestFleetBudgetCluster(t *testing.T) {
	c := startCluster(t)
	var stores []fleet.BudgetStore
	for range 2 {
		f, err := fleet.New(c, fleet.Options{RefreshInterval: 20 * time.Millisecond, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		stores = append(stores, f.Budgets())
	}
	rule := policy.BudgetRule{Ratio: 0.5, MinRetries: 4, Window: time.Minute}
	for _, h := range []string{"https://a.example.com", "https://b.example.com"} {
		allowed := 0
		for i := range 20 {
			time.Sleep(25 * time.Millisecond) // past a refresh: a refusal holds until the next
			s := stores[i%2]
			s.Request(h, time.Now(), rule)
			if ok, decided := s.Retry(h, time.Now(), rule); !decided {
				t.Fatalf("%s: the fleet did not decide", h)
			} else if ok {
				allowed++
			}
		}
		// 20 operations allow 4 + 10 retries over both processes; one
		// process may hold a retry or two leased ahead, unspent.
		if got := allowed; got > 14 || got < 12 {
			t.Errorf("%s: got %d retries, want 12 to 14", h, got)
		}
	}
	store := fleet.NewIdempotencyStore(c, fleet.IdempotencyOptions{Timeout: 300 * time.Millisecond, Replicas: 1})
	_, err := store.Begin(context.Background(), "order-1", "fp", time.Minute)
	if !errors.Is(err, fleet.ErrNotReplicated) {
		t.Errorf("Begin with Replicas 1 on a cluster node without replicas: got %v, want ErrNotReplicated", err)
	}
}

// A budget hash that fleet did not write: the retry is decided by the
// process's own budget, and the error names the key.
func TestFleetBudgetMalformed(t *testing.T) {
	redis := redisproc.StartT(t)
	var log errorLog
	c := newClient(t, redis)
	rule := (&policy.Budget{}).Rule()
	for _, bad := range [][]string{
		{"HSET", "sturdy:bud:{" + host + "}", "o:12", "many"},
		{"SET", "sturdy:bud:{" + host + "}", "x"},
	} {
		redisDo(t, c, "DEL", "sturdy:bud:{"+host+"}")
		redisDo(t, c, bad...)
		// A Fleet of its own: one that asked before leases again in the
		// background, and may have found the key deleted, between the
		// two commands above, and been granted retries.
		f := newFleet(t, redis, fleet.Options{OnError: log.add})
		if _, ok := f.Budgets().Retry(host, time.Now(), rule); ok {
			t.Errorf("%v: the fleet decided, want the process's own budget to", bad)
		}
	}
	if err := log.find(nil, "sturdy:bud:{"+host+"}"); err == nil {
		t.Errorf("no error named the key")
	}
}

// A process that counts operations but has not retried yet sends them
// under the rule of the budget that counted them: its operations add to
// the fleet's budget, and take away none of the retries other processes
// were granted.
func TestFleetBudgetOperationsBeforeRetries(t *testing.T) {
	redis := redisproc.StartT(t)
	quiet, retrying := newFleet(t, redis, fleet.Options{}).Budgets(), newFleet(t, redis, fleet.Options{}).Budgets()
	rule := policy.BudgetRule{Ratio: 1, MinRetries: 2, Window: time.Minute}
	allowed := 0
	retry := func(n int) {
		for range n {
			time.Sleep(25 * time.Millisecond) // past a refresh: a refusal holds until the next
			if ok, decided := retrying.Retry(host, time.Now(), rule); !decided {
				t.Fatalf("the fleet did not decide")
			} else if ok {
				allowed++
			}
		}
	}
	retry(5)
	if got, want := allowed, rule.MinRetries; got != want {
		t.Fatalf("retries before any operation: got %d, want %d", got, want)
	}
	const ops = 5
	b := &policy.Budget{Ratio: rule.Ratio, MinRetries: rule.MinRetries, Window: rule.Window, Store: quiet}
	for range ops {
		b.Request(host, time.Now())
	}
	// The quiet process's refresh sends its operations.
	c := newClient(t, redis)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if budgetOps(t, c) >= ops {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the quiet process's %d operations did not reach Redis in 5s", ops)
		}
	}
	retry(2 * ops)
	if got, want := float64(allowed), rule.Allowance(ops); got != want {
		t.Errorf("retries: got %.0f, want %.0f (MinRetries + Ratio × the quiet process's operations)", got, want)
	}
}

// budgetOps returns the operations counted in the budget of host.
func budgetOps(t *testing.T, c rueidis.Client) int {
	m, err := redisDo(t, c, "HGETALL", "sturdy:bud:{"+host+"}").AsIntMap()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k, v := range m {
		if strings.HasPrefix(k, "o:") {
			n += int(v)
		}
	}
	return n
}
