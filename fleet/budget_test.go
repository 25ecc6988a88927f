package fleet_test

import (
	"io"
	"net/http"
	"net/http/httptest"
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
	failedByRedis       int64 // operations that ended in an error, not the host's 503
}

// runProcesses runs procs processes of workers goroutines, each doing
// opsPerWorker operations against srv; budgets[i] is process i's budget.
func runProcesses(t *testing.T, srvURL string, hits *atomic.Int64, budgets []*policy.Budget, workers, opsPerWorker int, think time.Duration, during func(done int64)) fleetRun {
	t.Helper()
	var r fleetRun
	before, beforeHits := writes.Load(), hits.Load()
	var wg sync.WaitGroup
	var done atomic.Int64
	for _, b := range budgets {
		rt := budgetStack(b)
		if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
			t.Cleanup(c.CloseIdleConnections)
		}
		for range workers {
			wg.Go(func() {
				for i := range opsPerWorker {
					if i > 0 {
						time.Sleep(think)
					}
					req, _ := http.NewRequest("GET", srvURL+"/v1/models", nil)
					resp, err := rt.RoundTrip(req)
					atomic.AddInt64(&r.ops, 1)
					if err != nil {
						atomic.AddInt64(&r.failedByRedis, 1)
						t.Errorf("operation failed: %v", err)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if during != nil {
						during(done.Add(1))
					}
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
		think                 time.Duration
	}{
		{"quiet: 5 operations per process, 150ms apart", 1, 5, 150 * time.Millisecond},
		{"busy: 4 workers of 800 operations per process", 4, 800, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := &failing{}
			ts := httptest.NewServer(srv)
			defer ts.Close()

			redisDo(t, newClient(t, redis), "FLUSHALL")
			shared := make([]*policy.Budget, procs)
			for i := range shared {
				f, err := fleet.New(newCountingClient(t, redis), fleet.Options{Timeout: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close() })
				shared[i] = &policy.Budget{Window: rule.Window, Store: f.Budgets()}
			}
			fl := runProcesses(t, ts.URL, &srv.hits, shared, tt.workers, tt.opsPerWorker, tt.think, nil)

			local := make([]*policy.Budget, procs)
			for i := range local {
				local[i] = &policy.Budget{Window: rule.Window}
			}
			pp := runProcesses(t, ts.URL, &srv.hits, local, tt.workers, tt.opsPerWorker, tt.think, nil)

			r := rule.Rule()
			wantFleet := r.Allowance(int(fl.ops))
			wantLocal := float64(procs) * r.Allowance(int(pp.ops)/procs)
			t.Logf("%d processes, %d operations: fleet budget %d retries (rule allows %.0f), per-process budgets %d (rule allows %.0f), %.1f×; "+
				"Redis round trips %d, %.4f per operation",
				procs, fl.ops, fl.retries, wantFleet, pp.retries, wantLocal, float64(pp.retries)/float64(fl.retries),
				fl.trips, float64(fl.trips)/float64(fl.ops))
			if got := float64(fl.retries); got > wantFleet || got < 0.9*wantFleet {
				t.Errorf("retries with the fleet's budget: got %.0f, want within 10%% under %.0f", got, wantFleet)
			}
			if got := float64(pp.retries); got > wantLocal || got < 0.9*wantLocal {
				t.Errorf("retries with per-process budgets: got %.0f, want within 10%% under %.0f", got, wantLocal)
			}
		})
	}
}

