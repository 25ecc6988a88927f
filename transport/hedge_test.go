package transport

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
)

// hedgeCounts counts the hedge hooks' calls.
type hedgeCounts struct {
	mu                   sync.Mutex
	sent, won, cancelled []policy.HedgeEvent
}

func (h *hedgeCounts) policy(p policy.Hedge) policy.Hedge {
	add := func(s *[]policy.HedgeEvent) func(policy.HedgeEvent) {
		return func(e policy.HedgeEvent) { h.mu.Lock(); *s = append(*s, e); h.mu.Unlock() }
	}
	p.OnHedge, p.OnHedgeWon, p.OnCopyCanceled = add(&h.sent), add(&h.won), add(&h.cancelled)
	return p
}

// sentCount is how many hedges were sent.
func (h *hedgeCounts) sentCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sent)
}

func (h *hedgeCounts) want(t *testing.T, sent, won, cancelled int) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.sent) != sent || len(h.won) != won || len(h.cancelled) != cancelled {
		t.Errorf("hooks: %d sent, %d won, %d cancelled; want %d, %d, %d",
			len(h.sent), len(h.won), len(h.cancelled), sent, won, cancelled)
	}
}

func TestHedgeSlowFirstFastHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Script(
			httptestutil.Delay(10*time.Second, httptestutil.Status(200, "slow")),
			httptestutil.Status(200, "fast"),
		))
		env := newFakeEnv(t, rec)
		var hooks hedgeCounts
		c := &http.Client{Transport: Chain(env.base, Hedge(hooks.policy(policy.Hedge{Delay: 50 * time.Millisecond})))}
		start := time.Now()
		resp, err := c.Get(env.url + "/item")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := time.Since(start), 50*time.Millisecond; got != want {
			t.Errorf("answered after %v, want %v", got, want)
		}
		if got, want := readAll(t, resp), "fast"; got != want {
			t.Errorf("body = %q, want %q", got, want)
		}
		synctest.Wait()
		reqs := rec.Requests()
		if got, want := len(reqs), 2; got != want {
			t.Fatalf("server got %d requests, want %d", got, want)
		}
		if got, want := reqs[0].Disconnected.Sub(start), 50*time.Millisecond; got != want {
			t.Errorf("slow copy disconnected after %v, want %v (at once)", got, want)
		}
		if got, want := reqs[1].Arrived.Sub(start), 50*time.Millisecond; got != want {
			t.Errorf("hedge arrived after %v, want %v", got, want)
		}
		hooks.want(t, 1, 1, 1)
	})
}

// lateBody records whether it was closed.
type lateBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *lateBody) Close() error { b.closed.Store(true); return nil }

// TestHedgeLateLoserClosed: a copy that answers after it lost (a
// RoundTripper that ignores cancellation for a while) has its body closed,
// and no goroutine is left behind (synctest.Test fails otherwise).
func TestHedgeLateLoserClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu     sync.Mutex
			bodies []*lateBody
			ctxs   []context.Context
		)
		base := Func(func(r *http.Request) (*http.Response, error) {
			b := &lateBody{Reader: strings.NewReader("copy")}
			mu.Lock()
			i := len(bodies)
			ctxs, bodies = append(ctxs, r.Context()), append(bodies, b)
			mu.Unlock()
			if i == 0 {
				time.Sleep(time.Second) // deaf to cancellation
			}
			return &http.Response{StatusCode: 200, Body: b, Request: r}, nil
		})
		rt := Chain(base, Hedge(policy.Hedge{Delay: 10 * time.Millisecond}))
		req, _ := http.NewRequest("GET", "http://api.test/x", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if ctxs[1].Err() != nil {
			t.Errorf("winner's context ended before its body was read: %v", ctxs[1].Err())
		}
		if ctxs[0].Err() == nil {
			t.Errorf("losing copy's context not canceled")
		}
		if got, want := readAll(t, resp), "copy"; got != want {
			t.Errorf("body = %q, want %q", got, want)
		}
		if ctxs[1].Err() == nil {
			t.Errorf("winner's context not released after its body was closed")
		}
		synctest.Wait() // the late copy answers at 1s
		time.Sleep(time.Second)
		synctest.Wait()
		if !bodies[0].closed.Load() {
			t.Errorf("late losing copy's body not closed")
		}
	})
}

func TestHedgeWinnerBodyReadableAfterRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var first atomic.Bool
		first.Store(true)
		env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if first.Swap(false) {
				<-r.Context().Done()
				return
			}
			w.WriteHeader(200)
			io.WriteString(w, "part one,")
			w.(http.Flusher).Flush()
			select {
			case <-time.After(5 * time.Second):
				io.WriteString(w, " part two")
			case <-r.Context().Done():
			}
		}))
		c := &http.Client{Transport: Chain(env.base, Hedge(policy.Hedge{Delay: 100 * time.Millisecond}))}
		resp, err := c.Get(env.url + "/stream")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the caller does other things first
		if got, want := readAll(t, resp), "part one, part two"; got != want {
			t.Errorf("body = %q, want %q", got, want)
		}
	})
}

func TestHedgeOnlySafeRequests(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		key      string
		wantReqs int
	}{
		{"GET is hedged", "GET", "", 2},
		{"PUT is hedged", "PUT", "", 2},
		{"POST without a key is never hedged", "POST", "", 1},
		{"PATCH without a key is never hedged", "PATCH", "", 1},
		{"POST with a key is hedged", "POST", "k-1", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(
					httptestutil.Delay(time.Second, httptestutil.Status(200, "ok")).Forever(),
				))
				env := newFakeEnv(t, rec)
				c := &http.Client{Transport: Chain(env.base, Hedge(policy.Hedge{Delay: 100 * time.Millisecond}))}
				req, _ := http.NewRequest(tt.method, env.url+"/x", strings.NewReader("payload"))
				if tt.key != "" {
					req.Header.Set("Idempotency-Key", tt.key)
				}
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				synctest.Wait()
				if got := rec.Count(); got != tt.wantReqs {
					t.Errorf("server got %d requests, want %d", got, tt.wantReqs)
				}
				if tt.key != "" {
					if got := rec.WantSameHeader(t, "Idempotency-Key"); got != tt.key {
						t.Errorf("every copy's Idempotency-Key = %q, want %q", got, tt.key)
					}
				}
			})
		})
	}
}

// TestHedgeFailureDoesNotWin: a response the retry classifier would retry
// does not beat a copy still running; when every copy fails, the first
// failed response comes back.
func TestHedgeFailureDoesNotWin(t *testing.T) {
	tests := []struct {
		name       string
		script     []httptestutil.Step
		wantStatus int
		wantBody   string
		wantAfter  time.Duration
	}{
		{"503 from the hedge does not beat a later 200", []httptestutil.Step{
			httptestutil.Delay(2*time.Second, httptestutil.Status(200, "first")),
			httptestutil.Status(503, "busy"),
		}, 200, "first", 2 * time.Second},
		{"404 from the hedge wins (not retriable)", []httptestutil.Step{
			httptestutil.Delay(2*time.Second, httptestutil.Status(200, "first")),
			httptestutil.Status(404, "gone"),
		}, 404, "gone", 100 * time.Millisecond},
		{"both fail: the first failure to arrive is returned", []httptestutil.Step{
			httptestutil.Delay(2*time.Second, httptestutil.Status(502, "first")),
			httptestutil.Status(503, "second"),
		}, 503, "second", 2 * time.Second},
		{"a quick 503 from the first copy is returned, unhedged", []httptestutil.Step{
			httptestutil.Delay(10*time.Millisecond, httptestutil.Status(503, "first")),
		}, 503, "first", 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(tt.script...))
				env := newFakeEnv(t, rec)
				c := &http.Client{Transport: Chain(env.base, Hedge(policy.Hedge{Delay: 100 * time.Millisecond}))}
				start := time.Now()
				resp, err := c.Get(env.url + "/x")
				if err != nil {
					t.Fatal(err)
				}
				if got := time.Since(start); got != tt.wantAfter {
					t.Errorf("answered after %v, want %v", got, tt.wantAfter)
				}
				if got := resp.StatusCode; got != tt.wantStatus {
					t.Errorf("status = %d, want %d", got, tt.wantStatus)
				}
				if got := readAll(t, resp); got != tt.wantBody {
					t.Errorf("body = %q, want %q", got, tt.wantBody)
				}
				synctest.Wait()
				if got, want := rec.Count(), len(tt.script); got != want {
					t.Errorf("server got %d requests, want %d", got, want)
				}
			})
		})
	}
}

func TestHedgeBudgetSpent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Script(
			httptestutil.Delay(time.Second, httptestutil.Status(200, "ok")).Forever(),
		))
		env := newFakeEnv(t, rec)
		// One extra request allowed per window, and (almost) none earned.
		budget := &policy.Budget{MinRetries: 1, Ratio: 1e-9}
		var hooks hedgeCounts
		c := &http.Client{Transport: Chain(env.base, Hedge(hooks.policy(policy.Hedge{Delay: 100 * time.Millisecond, Budget: budget})))}
		for range 3 {
			resp, err := c.Get(env.url + "/x")
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
		}
		synctest.Wait()
		if got, want := rec.Count(), 3+1; got != want {
			t.Errorf("server got %d requests, want %d (one hedge, then the budget is spent)", got, want)
		}
		hooks.want(t, 1, 0, 1)
	})
}

// A hedge whose body cannot be had (GetBody fails) is not sent, and
// takes nothing from the budget: the next request's hedge still goes.
func TestHedgeUnsentTakesNoBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Script(
			httptestutil.Delay(time.Second, httptestutil.Status(200, "ok")).Forever(),
		))
		env := newFakeEnv(t, rec)
		budget := &policy.Budget{MinRetries: 1, Ratio: 1e-9} // one hedge per window
		var hooks hedgeCounts
		c := &http.Client{Transport: Chain(env.base, Hedge(hooks.policy(policy.Hedge{Delay: 100 * time.Millisecond, Budget: budget})))}
		for _, failGetBody := range []bool{true, false} {
			req, _ := http.NewRequest("PUT", env.url+"/x", strings.NewReader("body"))
			if failGetBody {
				req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
		}
		synctest.Wait()
		if got, want := rec.Count(), 2+1; got != want {
			t.Errorf("server got %d requests, want %d (the second request's hedge)", got, want)
		}
		hooks.want(t, 1, 0, 1)
	})
}

func TestHedgeCallerCancelCancelsEveryCopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Script(httptestutil.Hang().Forever()))
		env := newFakeEnv(t, rec)
		c := &http.Client{Transport: Chain(env.base, Hedge(policy.Hedge{Delay: 100 * time.Millisecond, MaxHedges: 2}))}
		ctx, cancel := context.WithCancel(t.Context())
		start := time.Now()
		time.AfterFunc(time.Second, cancel)
		req, _ := http.NewRequestWithContext(ctx, "GET", env.url+"/x", nil)
		_, err := c.Do(req)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		if got, want := time.Since(start), time.Second; got != want {
			t.Errorf("returned after %v, want %v", got, want)
		}
		synctest.Wait()
		reqs := rec.Requests()
		if got, want := len(reqs), 3; got != want {
			t.Fatalf("server got %d requests, want %d", got, want)
		}
		for i, r := range reqs {
			if got, want := r.Disconnected.Sub(start), time.Second; got != want {
				t.Errorf("copy %d disconnected after %v, want %v", i+1, got, want)
			}
		}
	})
}

func TestHedgeBodiesReplayed(t *testing.T) {
	const payload = `{"amount":1200,"currency":"eur"}`
	tests := []struct {
		name string
		body func() io.Reader
	}{
		{"strings.Reader (GetBody)", func() io.Reader { return strings.NewReader(payload) }},
		{"plain io.Reader (buffered)", func() io.Reader { return onlyReader{strings.NewReader(payload)} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(
					httptestutil.Delay(time.Second, httptestutil.Status(200, "one")),
					httptestutil.Delay(time.Second, httptestutil.Status(200, "two")),
					httptestutil.Status(200, "three"),
				))
				env := newFakeEnv(t, rec)
				c := &http.Client{Transport: Chain(env.base, Hedge(policy.Hedge{Delay: 100 * time.Millisecond, MaxHedges: 2}))}
				req, _ := http.NewRequest("PUT", env.url+"/x", tt.body())
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := readAll(t, resp), "three"; got != want {
					t.Errorf("body = %q, want %q", got, want)
				}
				synctest.Wait()
				reqs := rec.Requests()
				if got, want := len(reqs), 3; got != want {
					t.Fatalf("server got %d requests, want %d", got, want)
				}
				for i, r := range reqs {
					if got := string(r.Body); got != payload {
						t.Errorf("copy %d body = %q, want %q", i+1, got, payload)
					}
				}
			})
		})
	}
}

func TestHedgeBodyOverLimitNotHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Script(
			httptestutil.Delay(time.Second, httptestutil.Status(200, "ok")),
		))
		env := newFakeEnv(t, rec)
		c := &http.Client{Transport: Chain(env.base, Hedge(policy.Hedge{Delay: 100 * time.Millisecond, MaxBufferedBody: 4}))}
		req, _ := http.NewRequest("PUT", env.url+"/x", onlyReader{strings.NewReader("longer than four")})
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		reqs := rec.Requests()
		if got, want := len(reqs), 1; got != want {
			t.Fatalf("server got %d requests, want %d", got, want)
		}
		if got, want := string(reqs[0].Body), "longer than four"; got != want {
			t.Errorf("body = %q, want %q", got, want)
		}
	})
}

// TestHedgeAdaptiveDelay: the delay follows the host's 95th percentile
// once it is known; before that nothing is hedged.
func TestHedgeAdaptiveDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var slow atomic.Bool
		rec := httptestutil.NewRecorder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d := 20 * time.Millisecond
			if slow.Swap(false) {
				d = 5 * time.Second
			}
			select {
			case <-time.After(d):
				io.WriteString(w, "ok")
			case <-r.Context().Done():
			}
		}))
		env := newFakeEnv(t, rec)
		var hooks hedgeCounts
		c := &http.Client{Transport: Chain(env.base, Hedge(hooks.policy(policy.Hedge{})))}
		get := func() time.Duration {
			start := time.Now()
			resp, err := c.Get(env.url + "/x")
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			return time.Since(start)
		}
		// Unknown host: a slow request is not hedged.
		slow.Store(true)
		if got, want := get(), 5*time.Second; got != want {
			t.Errorf("first request took %v, want %v (unhedged)", got, want)
		}
		for range policy.DefaultLatencyMinSamples {
			get()
		}
		slow.Store(true)
		// 20ms falls in the bucket [16.384ms, 20.48ms): its upper edge is
		// the delay, and the hedge takes its own 20ms.
		if got, want := get(), 20480*time.Microsecond+20*time.Millisecond; got != want {
			t.Errorf("slow request took %v, want %v (hedged at the p95)", got, want)
		}
		hooks.want(t, 1, 1, 1)
	})
}

// TestNewHedgeSharesRetryBudget: under New, hedges and retries draw on
// one budget per host.
func TestNewHedgeSharesRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/fail" {
				w.WriteHeader(503)
				return
			}
			select {
			case <-time.After(time.Second):
				io.WriteString(w, "ok")
			case <-r.Context().Done():
			}
		}))
		env := newFakeEnv(t, rec)
		var hooks hedgeCounts
		h := hooks.policy(policy.Hedge{Delay: 100 * time.Millisecond})
		c := newStack(env, Options{
			Retry:   policy.Retry{MaxAttempts: 2, Budget: &policy.Budget{MinRetries: 2, Ratio: 1e-9}},
			Hedge:   &h,
			Disable: LayerBreaker | LayerRateLimit,
		})
		for _, path := range []string{"/slow", "/fail", "/slow", "/fail"} {
			resp, err := c.Get(env.url + path)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
		}
		synctest.Wait()
		// 4 operations, then one hedge and one retry: the budget of 2 is spent.
		if got, want := rec.Count(), 4+2; got != want {
			t.Errorf("server got %d requests, want %d", got, want)
		}
		hooks.want(t, 1, 0, 1)
	})
}

// TestNewHedgeComposes: under the whole stack, the hooks of Options fire,
// copies canceled because another won never count against the host's
// breaker, and the Timeout ends every copy at once.
func TestNewHedgeComposes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		rec := httptestutil.NewRecorder(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hang" || n.Add(1)%2 == 1 { // every first copy hangs
				<-r.Context().Done()
				return
			}
			io.WriteString(w, "ok")
		}))
		env := newFakeEnv(t, rec)
		var hooks hedgeCounts
		var changes atomic.Int32
		o := Options{
			Timeout: 10 * time.Second,
			Hedge:   &policy.Hedge{Delay: 100 * time.Millisecond},
			Breaker: BreakerSettings{ConsecutiveFailures: 2},
		}
		hp := hooks.policy(policy.Hedge{})
		o.Hooks.OnHedge, o.Hooks.OnHedgeWon, o.Hooks.OnCopyCanceled = hp.OnHedge, hp.OnHedgeWon, hp.OnCopyCanceled
		o.Hooks.OnBreakerStateChange = func(string, BreakerState, BreakerState) { changes.Add(1) }
		c := newStack(env, o)
		for range 5 {
			resp, err := c.Get(env.url + "/x")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := readAll(t, resp), "ok"; got != want {
				t.Errorf("body = %q, want %q", got, want)
			}
		}
		synctest.Wait()
		hooks.want(t, 5, 5, 5)
		if got := changes.Load(); got != 0 {
			t.Errorf("breaker changed state %d times, want 0 (canceled copies are not failures)", got)
		}

		start := time.Now()
		_, err := c.Get(env.url + "/hang")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want context.DeadlineExceeded", err)
		}
		synctest.Wait()
		reqs := rec.Requests()
		for _, r := range reqs[len(reqs)-2:] {
			if got, want := r.Disconnected.Sub(start), 10*time.Second; got != want {
				t.Errorf("copy disconnected after %v, want %v", got, want)
			}
		}
	})
}

// BenchmarkHedgeFastPath measures what Hedge costs a GET that answers
// before the delay (the 95% or more that are never hedged), on the
// in-memory base, in parallel: the copy's goroutine, context and timer,
// and for the adaptive delay the latency sketch (an atomic add and an
// atomic load, no lock).
func BenchmarkHedgeFastPath(b *testing.B) {
	adaptive := Chain(memBase, Hedge(policy.Hedge{}))
	warm, _ := http.NewRequest("GET", "http://api.test/v1/things", nil)
	for range policy.DefaultLatencyMinSamples { // learn the host, so that requests are hedged
		resp, _ := adaptive.RoundTrip(warm)
		resp.Body.Close()
	}
	fixed := Chain(memBase, Hedge(policy.Hedge{Delay: time.Second}))
	stacks := []struct {
		name string
		rt   http.RoundTripper
		ctx  context.Context // the caller's
	}{
		{"bare", memBase, context.Background()},
		{"fixed", fixed, context.Background()},
		{"adaptive", adaptive, context.Background()},
		// A caller's context that can end (every request under New's
		// Timeout has one): each copy's context can then be detached.
		{"fixed-cancelable", fixed, b.Context()},
	}
	for _, s := range stacks {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				req, _ := http.NewRequestWithContext(s.ctx, "GET", "http://api.test/v1/things", nil)
				for pb.Next() {
					resp, err := s.rt.RoundTrip(req)
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}

// keyInFlight is a server that deduplicates by Idempotency-Key as the
// IETF draft and Stripe do: a request whose key is still being worked on
// gets 409. The work takes a second.
type keyInFlight struct {
	busy     atomic.Bool
	requests atomic.Int32
	done     atomic.Int32
}

func (s *keyInFlight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	io.Copy(io.Discard, r.Body)
	if !s.busy.CompareAndSwap(false, true) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error":{"code":"idempotency_key_in_use"}}`)
		return
	}
	defer s.busy.Store(false)
	select {
	case <-time.After(time.Second):
		s.done.Add(1)
		io.WriteString(w, "charged")
	case <-r.Context().Done():
	}
}

// A hedge of a keyed request that meets "key in flight" (409) has met the
// first copy at work: the 409 never wins, and the first copy is not
// canceled. Hedge alone and in New.
func TestHedgeKeyInFlightNeverWins(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stack func(base http.RoundTripper) http.RoundTripper
	}{
		{"Hedge", func(base http.RoundTripper) http.RoundTripper {
			return Chain(base, Hedge(policy.Hedge{Delay: 50 * time.Millisecond}))
		}},
		{"New", func(base http.RoundTripper) http.RoundTripper {
			return New(Options{Base: base, Hedge: &policy.Hedge{Delay: 50 * time.Millisecond}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := &keyInFlight{}
				env := newFakeEnv(t, srv)
				req, _ := http.NewRequest("POST", env.url+"/charge", strings.NewReader(`{"amount":1}`))
				req.Header.Set("Idempotency-Key", "k1")
				resp, err := (&http.Client{Transport: tc.stack(env.base)}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if body := readAll(t, resp); resp.StatusCode != 200 || body != "charged" {
					t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, "charged")
				}
				if got := srv.done.Load(); got != 1 {
					t.Errorf("charges done: got %d, want 1", got)
				}
				if got := srv.requests.Load(); got < 2 {
					t.Errorf("requests: got %d, want a hedge beside the first", got)
				}
				synctest.Wait()
			})
		})
	}
}

// slowUpload is a request body of unknown length that arrives in chunks,
// one every gap.
type slowUpload struct {
	chunks []string
	gap    time.Duration
}

func (u *slowUpload) Read(p []byte) (int, error) {
	if len(u.chunks) == 0 {
		return 0, io.EOF
	}
	time.Sleep(u.gap)
	n := copy(p, u.chunks[0])
	u.chunks = u.chunks[1:]
	return n, nil
}

// A body kept as it is sent is hedged only once the first copy has sent
// it whole: never streamed twice at once, and not at all when it proves
// longer than can be kept. The same beneath Retry (as New places the
// Hedge), where the body the Hedge is given is Retry's, kept as it is
// sent, with a GetBody that reads what Retry keeps: the Hedge asks
// Retry's copy whether it is whole, also beneath two Retries (a caller's
// Retry over New), each of which checks the body.
func TestHedgeWaitsForTheUpload(t *testing.T) {
	for _, tc := range []struct {
		name       string
		limit      int64
		wantCopies int
	}{
		{"kept whole: hedged after the upload", 1 << 10, 2},
		{"longer than the limit: not hedged", 4, 1},
	} {
		for _, stack := range []string{"Hedge", "Retry,Hedge", "New", "Retry,Retry,Hedge", "Retry,New"} {
			t.Run(stack+"/"+tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					type arrival struct {
						at   time.Duration
						body string
					}
					var (
						mu       sync.Mutex
						arrivals []arrival
					)
					start := time.Now()
					env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						b, _ := io.ReadAll(r.Body)
						mu.Lock()
						arrivals = append(arrivals, arrival{time.Since(start), string(b)})
						mu.Unlock()
						select {
						case <-time.After(time.Second):
						case <-r.Context().Done():
						}
					}))
					h := policy.Hedge{Delay: 50 * time.Millisecond, MaxBufferedBody: tc.limit}
					r := policy.Retry{MaxBufferedBody: tc.limit}
					var rt http.RoundTripper
					switch stack {
					case "Hedge":
						rt = Chain(env.base, Hedge(h))
					case "Retry,Hedge":
						rt = Chain(env.base, Retry(r), Hedge(h))
					case "Retry,Retry,Hedge":
						rt = Chain(env.base, Retry(r), Retry(r), Hedge(h))
					case "Retry,New":
						rt = Chain(New(Options{Base: env.base, Retry: r, Hedge: &h}), Retry(r))
					default:
						rt = New(Options{Base: env.base, Retry: r, Hedge: &h})
					}
					c := &http.Client{Transport: rt}
					up := &slowUpload{chunks: []string{"one ", "two ", "three"}, gap: 100 * time.Millisecond}
					req, _ := http.NewRequest("PUT", env.url+"/x", up)
					resp, err := c.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					readAll(t, resp)
					synctest.Wait()
					mu.Lock()
					defer mu.Unlock()
					if len(arrivals) != tc.wantCopies {
						t.Fatalf("server got %d copies %v, want %d", len(arrivals), arrivals, tc.wantCopies)
					}
					for i, a := range arrivals {
						if a.body != "one two three" {
							t.Errorf("copy %d: body %q, want %q", i, a.body, "one two three")
						}
						if a.at < 300*time.Millisecond {
							t.Errorf("copy %d arrived whole at %v, before the upload ended (300ms)", i, a.at)
						}
					}
				})
			})
		}
	}
}

// A hedge's body comes from GetBody; when that body cannot be sent as
// written (its reader fails), the copy fails with the caller's error,
// which the breaker beneath does not count against the host (in New,
// where the layers beneath Retry leave body checks to it, the Hedge
// checks its copies): the first copy answers, and the breaker, which one
// counted failure would open, stays closed.
func TestHedgeCopyBodyErrorIsTheCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Script(
			httptestutil.Delay(time.Second, httptestutil.Status(200, "ok")).Forever(),
		))
		env := newFakeEnv(t, rec)
		var opened atomic.Int64
		c := newStack(env, Options{
			Hedge:   &policy.Hedge{Delay: 100 * time.Millisecond},
			Breaker: BreakerSettings{ConsecutiveFailures: 1},
			Hooks: Hooks{OnBreakerStateChange: func(_ string, _, to BreakerState) {
				if to == BreakerOpen {
					opened.Add(1)
				}
			}},
		})
		req, _ := http.NewRequest("PUT", env.url+"/x", strings.NewReader("body"))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(&failingReader{n: 2}), nil }
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("hedged PUT: %v; want the first copy's answer", err)
		}
		readAll(t, resp)
		if got := opened.Load(); got != 0 {
			t.Errorf("the breaker opened %d times; want 0: the hedge's body failing is the caller's error", got)
		}
	})
}

// A hedge is sent only into a closed breaker. When the first copy is a
// half-open breaker's probe, a hedge would be refused unsent: it is not
// made (no OnHedge), and the operation's error is the probe's own, the
// AttemptTimeout that ended the only request that went out, not the
// hedge's refusal.
func TestHedgeNotIntoHalfOpenBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				w.WriteHeader(500) // opens the breaker
				return
			}
			<-r.Context().Done() // the probe hangs
		}))
		var hedges atomic.Int32
		c := newStack(env, Options{
			AttemptTimeout: time.Second,
			Breaker:        BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Second},
			Hedge:          &policy.Hedge{Delay: 100 * time.Millisecond},
			Hooks:          Hooks{OnHedge: func(policy.HedgeEvent) { hedges.Add(1) }},
			Retry:          policy.Retry{MaxAttempts: 1},
		})
		resp, err := c.Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		time.Sleep(2 * time.Second) // past the open period: the next request is a probe
		_, err = c.Get(env.url)
		if got := n.Load(); got != 2 {
			t.Errorf("server got %d requests, want 2", got)
		}
		if h := hedges.Load(); h != 0 {
			t.Errorf("OnHedge called %d times for a copy the half-open breaker refused unsent, want 0", h)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("errors.Is(err, DeadlineExceeded) = false: the probe ran out of AttemptTimeout")
		}
		var ce *CircuitOpenError
		if errors.As(err, &ce) && ce.State == BreakerHalfOpen {
			t.Errorf("err is the hedge's half-open refusal, not the probe's own failure")
		}
	})
}

// The same with New's default Retry: the retry after a 500 is the
// half-open probe; the operation ends on the probe's AttemptTimeout.
func TestHedgeHalfOpenProbeWithDefaultRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				w.WriteHeader(500)
				return
			}
			<-r.Context().Done()
		}))
		c := newStack(env, Options{
			AttemptTimeout: time.Second,
			Breaker:        BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Second},
			Hedge:          &policy.Hedge{Delay: 100 * time.Millisecond},
		})
		_, err := c.Get(env.url)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "AttemptTimeout") {
			t.Errorf("err = %v; want the probe's AttemptTimeout (errors.Is DeadlineExceeded)", err)
		}
	})
}

// In New, the Hedge's empty IdempotencyHeader follows Retry's: a POST
// that carries a key in Retry.IdempotencyHeader is vouched for, and
// hedged.
func TestHedgeKeyHeaderFollowsRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Script(
			httptestutil.Delay(time.Second, httptestutil.Status(200, "ok")).Forever(),
		))
		env := newFakeEnv(t, rec)
		c := newStack(env, Options{
			Retry: policy.Retry{IdempotencyHeader: "X-Request-Key"},
			Hedge: &policy.Hedge{Delay: 100 * time.Millisecond},
		})
		req, _ := http.NewRequest("POST", env.url+"/orders", strings.NewReader("x"))
		req.Header.Set("X-Request-Key", "k-1")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		synctest.Wait()
		if got := rec.Count(); got != 2 {
			t.Errorf("server got %d requests, want 2: the POST carries a key in Retry's IdempotencyHeader, which Hedge is documented to follow", got)
		}
	})
}

// Retry and Hedge sharing one Budget, chained as documented (Hedge just
// beneath Retry), keep the bound of a Retry alone: MinRetries + Ratio ×
// operations retries. The Retry counts the operations; each of its
// attempts through the Hedge is not counted again, or retries would earn
// budget. The host fails everything; no hedge is ever sent.
func TestSharedBudgetCountsOperationsOnce(t *testing.T) {
	for _, withHedge := range []bool{false, true} {
		name := "Retry alone"
		if withHedge {
			name = "Retry over Hedge, one Budget"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var served atomic.Int32
				base := Func(func(r *http.Request) (*http.Response, error) {
					served.Add(1)
					return &http.Response{StatusCode: 503, Body: http.NoBody, Request: r}, nil
				})
				b := &policy.Budget{}
				mws := []Middleware{Retry(policy.Retry{MaxAttempts: 10, Backoff: constant(time.Millisecond), Budget: b})}
				if withHedge {
					mws = append(mws, Hedge(policy.Hedge{Delay: time.Hour, Budget: b}))
				}
				c := &http.Client{Transport: Chain(base, mws...)}
				const ops = 100
				for range ops {
					resp, err := c.Get("http://api.test/x")
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
				}
				retries := int(served.Load()) - ops
				limit := policy.DefaultBudgetMinRetries + int(policy.DefaultBudgetRatio*ops)
				if retries > limit {
					t.Errorf("%d retries for %d operations, want at most MinRetries + Ratio × operations = %d", retries, ops, limit)
				}
			})
		})
	}
}

// A losing copy whose body stalls never holds back the winner: the first
// copy answers 503 at 150 ms and its body stalls (a plain one, which the
// race drains, or a problem, which it reads to judge it); the hedge, sent
// at 100 ms, answers 200 at 300 ms, and is handed back then.
func TestHedgeStalledLoserDoesNotHoldTheWinner(t *testing.T) {
	for _, ct := range []string{"text/plain", "application/problem+json"} {
		t.Run(ct, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var n atomic.Int32
				stop := make(chan struct{})
				env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if n.Add(1) == 1 {
						time.Sleep(150 * time.Millisecond)
						w.Header().Set("Content-Type", ct)
						w.Header().Set("Content-Length", "100")
						w.WriteHeader(503)
						w.Write([]byte(`{"title":`))
						http.NewResponseController(w).Flush()
						select { // the body stalls
						case <-r.Context().Done():
						case <-stop:
						}
						return
					}
					time.Sleep(200 * time.Millisecond)
					w.Write([]byte("ok"))
				}))
				defer close(stop)
				c := &http.Client{Transport: Chain(env.base, Hedge(policy.Hedge{Delay: 100 * time.Millisecond}))}
				start := time.Now()
				resp, err := c.Get(env.url)
				if err != nil {
					t.Fatal(err)
				}
				if got := time.Since(start); got != 300*time.Millisecond || resp.StatusCode != 200 {
					t.Errorf("got %d after %v; want the hedge's 200 at 300ms", resp.StatusCode, got)
				}
				readAll(t, resp)
			})
		})
	}
}

// A hedge is sent only while no copy has its response headers, even when
// a copy's verdict waits on its body: the first copy answers 503
// problem+json at 50 ms, and its body (read to judge it) takes until
// 400 ms. The hedge delay is 100 ms: no hedge is sent.
func TestHedgeNotSentOnceACopyHasHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			time.Sleep(50 * time.Millisecond)
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Content-Length", "16")
			w.WriteHeader(503)
			w.Write([]byte(`{"title":`))
			http.NewResponseController(w).Flush()
			time.Sleep(350 * time.Millisecond)
			w.Write([]byte(`"down"}`))
		}))
		c := &http.Client{Transport: Chain(env.base, Hedge(policy.Hedge{Delay: 100 * time.Millisecond}))}
		resp, err := c.Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if got := n.Load(); got != 1 {
			t.Errorf("server got %d requests; want 1: the first copy's 503 headers came at 50ms, before the 100ms hedge delay", got)
		}
	})
}

// slowCopies is a base whose every request takes a second, unless its
// context ends first; it counts the requests.
func slowCopies(served *atomic.Int32) http.RoundTripper {
	return Func(func(r *http.Request) (*http.Response, error) {
		served.Add(1)
		select {
		case <-time.After(time.Second):
			return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	})
}

// A Retry of one attempt (no retries, only hedges) over a Hedge that
// shares its budget still counts the operations: each earns Ratio hedges.
// With Ratio 1 and MinRetries 1, every operation may be hedged.
func TestHedgeBudgetCountsOperationsWithOneAttempt(t *testing.T) {
	for _, stack := range []string{"New", "Chain"} {
		t.Run(stack, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var served atomic.Int32
				base := slowCopies(&served)
				b := &policy.Budget{MinRetries: 1, Ratio: 1}
				var hooks hedgeCounts
				h := hooks.policy(policy.Hedge{Delay: 100 * time.Millisecond})
				var rt http.RoundTripper
				if stack == "New" {
					rt = New(Options{Base: base, Retry: policy.Retry{MaxAttempts: 1, Budget: b}, Hedge: &h})
				} else {
					h.Budget = b
					rt = Chain(base, Retry(policy.Retry{MaxAttempts: 1, Budget: b}), Hedge(h))
				}
				c := &http.Client{Transport: rt}
				const ops = 5
				for range ops {
					resp, err := c.Get("http://api.test/x")
					if err != nil {
						t.Fatal(err)
					}
					readAll(t, resp)
				}
				synctest.Wait()
				got := hooks.sentCount()
				if want := ops; got != want {
					t.Errorf("%d hedges for %d operations, want %d (MinRetries 1 + Ratio 1 × operations)", got, ops, want)
				}
			})
		})
	}
}

// MaxHedges bounds the copies; a large one ("as many as it takes") is
// odd but valid input, and must not panic or allocate for copies that
// are never sent.
func TestHedgeHugeMaxHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var served atomic.Int32
		c := &http.Client{Transport: Chain(slowCopies(&served), Hedge(policy.Hedge{Delay: 30 * time.Millisecond, MaxHedges: math.MaxInt}))}
		resp, err := c.Get("http://api.test/x")
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		synctest.Wait()
		if got, want := served.Load(), int32(34); got != want {
			t.Errorf("%d copies sent, want %d (one every 30ms until the first answers at 1s)", got, want)
		}
	})
}

// In New, a hedge is sent only while its host's breaker is closed. With
// a fleet's store that holds the host half-open, the first copy is the
// fleet's one probe: a hedge would be refused unsent (the claim is
// taken), after asking the store, and would draw on the budget for
// nothing. None is sent.
func TestNewHedgeNotIntoFleetHalfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &claimStore{st: SharedBreakerState{State: BreakerOpen, Until: time.Now().Add(-time.Second), Version: 1}}
		var served atomic.Int32
		var hooks hedgeCounts
		h := hooks.policy(policy.Hedge{Delay: 100 * time.Millisecond})
		c := &http.Client{Transport: New(Options{
			Base:    slowCopies(&served),
			Breaker: BreakerSettings{Store: claimHandle{store, "a"}},
			Hedge:   &h,
		})}
		resp, err := c.Get("http://api.test/x")
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		synctest.Wait()
		got := hooks.sentCount()
		if want := 0; got != want {
			t.Errorf("%d hedges sent while the fleet's breaker was half-open, want %d", got, want)
		}
	})
}

// TestHedgeCopyFromContext: every copy of a hedged race carries its
// number in its context, and a request no race sent carries none.
func TestHedgeCopyFromContext(t *testing.T) {
	tests := []struct {
		name     string
		hedge    bool
		deadline bool  // the caller's context can end
		want     []int // the copies the base saw, in the order sent
	}{
		{name: "hedged", hedge: true, want: []int{1, 2}},
		{name: "hedged, with a deadline", hedge: true, deadline: true, want: []int{1, 2}},
		{name: "not hedged", want: []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var (
					mu   sync.Mutex
					seen []int
				)
				base := Func(func(req *http.Request) (*http.Response, error) {
					n := HedgeCopyFromContext(req.Context())
					mu.Lock()
					seen = append(seen, n)
					mu.Unlock()
					if n == 1 { // the first copy is slow: the hedge wins
						select {
						case <-time.After(10 * time.Second):
						case <-req.Context().Done():
							return nil, req.Context().Err()
						}
					}
					return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
				})
				mws := []Middleware{Retry(policy.Retry{MaxAttempts: 1})}
				if tt.hedge {
					mws = append(mws, Hedge(policy.Hedge{Delay: 50 * time.Millisecond}))
				}
				c := &http.Client{Transport: Chain(base, mws...)}
				ctx := context.Background()
				if tt.deadline {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, time.Minute)
					defer cancel()
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.test/item", nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				if len(seen) != len(tt.want) {
					t.Fatalf("copies seen %v, want %v", seen, tt.want)
				}
				for i := range seen {
					if seen[i] != tt.want[i] {
						t.Errorf("copies seen %v, want %v", seen, tt.want)
						break
					}
				}
			})
		})
	}
}

// GetBody is called only for a copy that may be sent: not when a delay
// ends after a copy failed (no hedge follows a failure). With MaxHedges
// 2, the first copy fails after the first hedge went: one hedge, one
// GetBody call. (The budget is asked last, so that a copy whose body
// cannot be had takes none: GetBody may be called for a copy the budget
// then refuses.)
func TestHedgeGetBodyOnlyForCopiesSent(t *testing.T) {
	tests := []struct {
		name   string
		budget *policy.Budget
		first  int // the first copy's status, after 1.5s
		copies int // copies the server gets
		gets   int64
	}{
		{"a copy failed before the next delay ended", nil, 503, 2, 1},
		{"a copy failed, with a budget", &policy.Budget{}, 503, 2, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var n atomic.Int64
				base := httptestutil.NewHandlerTransport(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body)
					if n.Add(1) == 1 {
						time.Sleep(1500 * time.Millisecond)
						w.WriteHeader(tc.first)
						return
					}
					select { // a hedge answers late, or is canceled
					case <-r.Context().Done():
					case <-time.After(5 * time.Second):
					}
					io.WriteString(w, "ok")
				}))
				rt := Chain(base, Hedge(policy.Hedge{Delay: time.Second, MaxHedges: 2, Budget: tc.budget}))
				var gets atomic.Int64
				req, _ := http.NewRequest("GET", "http://api.test/", strings.NewReader("body"))
				req.GetBody = func() (io.ReadCloser, error) {
					gets.Add(1)
					return io.NopCloser(strings.NewReader("body")), nil
				}
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				synctest.Wait()
				if got, want := n.Load(), int64(tc.copies); got != want {
					t.Errorf("copies the server got = %d, want %d", got, want)
				}
				if got, want := gets.Load(), tc.gets; got != want {
					t.Errorf("GetBody calls = %d, want %d (one per hedge sent)", got, want)
				}
			})
		})
	}
}
