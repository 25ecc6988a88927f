package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/fleet"
	"github.com/sturdyhttp/sturdy/fleet/internal/redisproc"
	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

// arrivals records when requests reach a server.
type arrivals struct {
	next http.Handler
	mu   sync.Mutex
	at   []time.Time
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.at = append(a.at, time.Now())
	a.mu.Unlock()
	a.next.ServeHTTP(w, r)
}

// maxIn returns the most arrivals within any window of length w.
func (a *arrivals) maxIn(w time.Duration) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	most, j := 0, 0
	for i := range a.at {
		for a.at[i].Sub(a.at[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// Four stacks, each with its own Fleet, share one fleet-wide rate: the
// emulator's org-wide quota (50 a second) is never exceeded, so it sends
// no 429, and no 1s window sees more than the limit plus the documented
// tolerance (Burst 5, one RefreshInterval's worth, and the callers' own
// lateness).
func TestFleetQuotaShared(t *testing.T) {
	redis := redisproc.StartT(t)
	api := httptestutil.NewRateLimitedAPI(httptestutil.RateLimitConfig{
		Limit: 50, Window: time.Second, Family: httptestutil.FamilyOpenAI,
		KeyFunc: func(*http.Request) string { return "org" },
	})
	srv := &arrivals{next: api}
	var wg sync.WaitGroup
	end := time.Now().Add(3 * time.Second)
	var errs atomic.Int64
	for range 4 {
		f := newFleet(t, redis, fleet.Options{Limits: []fleet.Limit{{Host: host, Requests: 50, Per: time.Second}}})
		rt := transport.RateLimitAware(ratelimit.Options{Store: f.Quotas()})(httptestutil.NewHandlerTransport(srv))
		for range 4 {
			wg.Go(func() {
				for time.Now().Before(end) {
					if _, err := get(rt); err != nil {
						errs.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	const tolerance = 5 + 1 + 5 // Burst, a 20ms RefreshInterval's worth, 100ms of lateness
	if got := srv.maxIn(time.Second); got > 50+tolerance {
		t.Errorf("busiest 1s window: %d requests, want at most 50 + %d", got, tolerance)
	}
	if got := api.Rejected(); got != 0 {
		t.Errorf("emulator sent %d 429s, want 0", got)
	}
	if got := api.Accepted(); got < 3*50*9/10 {
		t.Errorf("emulator accepted %d requests in 3s, want at least 90%% of 150", got)
	}
	t.Logf("accepted %d, rejected %d, busiest second %d, errors %d", api.Accepted(), api.Rejected(), srv.maxIn(time.Second), errs.Load())
}

// A 429 with Retry-After seen by one stack holds the others back until the
// pause ends: a stack with a limit from its next lease (the same round
// trip), one without from its next refresh.
func TestFleetRetryAfterHoldsOthers(t *testing.T) {
	redis := redisproc.StartT(t)
	var first atomic.Bool
	srv := &arrivals{next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(false, true) {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte("ok"))
	})}
	limits := []fleet.Limit{{Host: host, Requests: 1000, Per: time.Second}}
	type proc struct {
		f  *fleet.Fleet
		rt http.RoundTripper
	}
	procs := make([]proc, 4)
	for i := range procs {
		o := fleet.Options{}
		if i == 3 {
			o = fleet.Options{Limits: limits, RefreshInterval: time.Hour} // learns from its lease only
		}
		f := newFleet(t, redis, o)
		procs[i] = proc{f, transport.RateLimitAware(ratelimit.Options{Store: f.Quotas()})(httptestutil.NewHandlerTransport(srv))}
		if i > 0 {
			get(procs[i].rt) // each has seen the host
		}
	}
	srv.mu.Lock()
	srv.at = nil
	srv.mu.Unlock()
	first.Store(false)

	status, err := get(procs[0].rt)
	seen := time.Now()
	if err != nil || status != http.StatusTooManyRequests {
		t.Fatalf("first stack: %d, %v; want 429", status, err)
	}
	c := newClient(t, redis)
	eventually(t, "pause published", func() bool {
		n, _ := redisDo(t, c, "HEXISTS", "sturdy:q:{"+host+"}", "p:").AsInt64()
		return n == 1
	})
	nextRefresh(t, procs[1].f)
	nextRefresh(t, procs[2].f)
	var wg sync.WaitGroup
	for i, p := range procs[1:] {
		wg.Go(func() {
			start := time.Now()
			status, err := get(p.rt)
			if err != nil || status != 200 {
				t.Errorf("stack %d: %d, %v; want 200 after the pause", i+1, status, err)
			}
			if waited := time.Since(start); time.Since(seen) < 1900*time.Millisecond {
				t.Errorf("stack %d sent %v after the 429 (waited %v), want after the 2s pause", i+1, time.Since(seen), waited)
			}
		})
	}
	wg.Wait()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, at := range srv.at[1:] {
		if d := at.Sub(seen); d < 1900*time.Millisecond {
			t.Errorf("a request reached the server %v after the 429, want at least 2s", d)
		}
	}
}

// An exhausted IETF policy holds only the routes counted against it, in
// every process of the fleet, as a GitHub resource does: the fleet
// shares its pause under the policy's name, not as a pause of the whole
// host. Two processes have seen both policies; then "search" is spent
// for 60 s in the first one's response. In each process, a core request
// goes at once, and a search request with a 5 s deadline fails at once.
func TestFleetNamedPolicyHoldsOnlyItsRoutes(t *testing.T) {
	redis := redisproc.StartT(t)
	var searchLeft atomic.Int64
	searchLeft.Store(30)
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/search") {
			w.Header().Set("RateLimit-Policy", `"search";q=30;w=60`)
			w.Header().Set("RateLimit", fmt.Sprintf(`"search";r=%d;t=60`, searchLeft.Load()))
			return
		}
		w.Header().Set("RateLimit-Policy", `"core";q=5000;w=3600`)
		w.Header().Set("RateLimit", `"core";r=4000;t=3000`)
	})
	send := func(rt http.RoundTripper, path string) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", host+path, nil)
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return time.Since(start), err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(start), nil
	}
	var fleets []*fleet.Fleet
	var rts []http.RoundTripper
	for range 2 {
		f := newFleet(t, redis, fleet.Options{})
		fleets = append(fleets, f)
		rt := transport.RateLimitAware(ratelimit.Options{Store: f.Quotas()})(httptestutil.NewHandlerTransport(api))
		rts = append(rts, rt)
		for _, p := range []string{"/repos/o/r", "/search/code"} {
			if _, err := send(rt, p); err != nil {
				t.Fatalf("GET %s: %v", p, err)
			}
		}
	}
	searchLeft.Store(0)
	if _, err := send(rts[0], "/search/code"); err != nil {
		t.Fatalf("the search that spends the policy: %v", err)
	}
	c := newClient(t, redis)
	eventually(t, "the policy's pause published", func() bool {
		n, _ := redisDo(t, c, "HEXISTS", "sturdy:q:{"+host+"}", "p:policy:search").AsInt64()
		return n == 1
	})
	if n, _ := redisDo(t, c, "HEXISTS", "sturdy:q:{"+host+"}", "p:").AsInt64(); n != 0 {
		t.Errorf("a pause of the whole host was published; want the policy's only")
	}
	nextRefresh(t, fleets[1])
	for i, rt := range rts {
		if took, err := send(rt, "/repos/o/r/issues"); err != nil || took > time.Second {
			t.Errorf("process %d: core request: %v after %v; want it sent at once (core has 4000 left)", i, err, took)
		}
		if took, err := send(rt, "/search/code"); !errors.Is(err, ratelimit.ErrQuotaExhausted) || took > time.Second {
			t.Errorf("process %d: search request: %v after %v; want ErrQuotaExhausted at once (spent for 60s, deadline 5s)", i, err, took)
		}
	}
}
