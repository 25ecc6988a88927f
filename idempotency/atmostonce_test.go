package idempotency_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/transport"
)

// sideEffects is a payments handler whose runs, one way or another, book at
// most one charge each. It counts charges and runs per key, and the
// answers of idempotency.Handler that were replays (or the 422 of a key
// whose response was not kept).
type sideEffects struct {
	behave func(run int, w http.ResponseWriter, r *http.Request) bool // reports whether the run charged

	mu      sync.Mutex
	charges map[string]int // per key
	runs    map[string]int // per key
	replays map[string]int // per key
}

func newSideEffects(behave func(run int, w http.ResponseWriter, r *http.Request) bool) *sideEffects {
	return &sideEffects{behave: behave, charges: map[string]int{}, runs: map[string]int{}, replays: map[string]int{}}
}

func (s *sideEffects) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(idempotency.DefaultHeader)
	io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	s.runs[key]++
	run := s.runs[key]
	s.mu.Unlock()
	if s.behave(run, w, r) {
		s.mu.Lock()
		s.charges[key]++
		s.mu.Unlock()
	}
}

// watch wraps the idempotency handler h and counts the answers it gives
// without running the handler: replays, and keys spent without a response.
func (s *sideEffects) watch(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&replayWatcher{ResponseWriter: w, s: s, key: r.Header.Get(idempotency.DefaultHeader)}, r)
	})
}

type replayWatcher struct {
	http.ResponseWriter
	s    *sideEffects
	key  string
	seen bool
}

func (w *replayWatcher) WriteHeader(code int) {
	if !w.seen && (w.Header().Get(idempotency.ReplayedHeader) == "true" || code == 422) {
		w.s.mu.Lock()
		w.s.replays[w.key]++
		w.s.mu.Unlock()
	}
	w.seen = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *replayWatcher) Write(p []byte) (int, error) {
	if !w.seen {
		w.WriteHeader(200)
	}
	return w.ResponseWriter.Write(p)
}

func (w *replayWatcher) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// The behaviours of a payments handler that the at-most-once tests run.
var atMostOnceCases = []struct {
	name string
	// behave answers one run; it reports whether the run charged.
	behave     func(run int, w http.ResponseWriter, r *http.Request) bool
	wantStatus int // the caller's final status, when no fault cut the first charging run's answer
	wantCut    int // the caller's final status when one did
}{
	{"201", func(run int, w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(201)
		return true
	}, 201, 201},
	{"500 after the charge", func(run int, w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(500)
		io.WriteString(w, `{"title":"ledger timeout","status":500}`)
		return true
	}, 500, 500},
	{"503 with Retry-After after the charge", func(run int, w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "ledger busy", 503)
		return true
	}, 503, 503},
	{"nothing done (503), then 201", func(run int, w http.ResponseWriter, r *http.Request) bool {
		if run == 1 {
			idempotency.NothingDone(r.Context())
			w.Header().Set("Retry-After", "1")
			http.Error(w, "ledger refused", 503)
			return false
		}
		w.WriteHeader(201)
		return true
	}, 201, 201},
	{"response over MaxResponseBytes", func(run int, w http.ResponseWriter, r *http.Request) bool {
		io.WriteString(w, strings.Repeat("x", 4<<10))
		return true
	}, 200, 422},
}

// The faults in front of the Handler, from the fault kit.
var atMostOnceFaults = []struct {
	name  string
	steps func(h http.Handler) []httptestutil.Step
	cut   bool // the first run's answer is lost
}{
	{"none", func(h http.Handler) []httptestutil.Step {
		return []httptestutil.Step{httptestutil.Handler(h).Forever()}
	}, false},
	{"reset before", func(h http.Handler) []httptestutil.Step {
		return []httptestutil.Step{httptestutil.ResetAfterRead(), httptestutil.Handler(h).Forever()}
	}, false},
	{"502 before", func(h http.Handler) []httptestutil.Step {
		return []httptestutil.Step{httptestutil.Status(502, "bad gateway"), httptestutil.Handler(h).Forever()}
	}, false},
	{"answer lost", func(h http.Handler) []httptestutil.Step {
		return []httptestutil.Step{httptestutil.CutAfter(h), httptestutil.Handler(h).Forever()}
	}, true},
	{"answer lost, then 503", func(h http.Handler) []httptestutil.Step {
		return []httptestutil.Step{httptestutil.CutAfter(h), httptestutil.Status(503, "proxy: no upstream"), httptestutil.Handler(h).Forever()}
	}, true},
}

// atMostOnceResult is what one client saw of one operation.
type atMostOnceResult struct {
	status  int
	retry   string
	err     error
	charges map[string]int
	replays map[string]int
}

// runAtMostOnce makes one operation through client (nil: a bare
// net/http client that sends the key itself) to a payments handler that
// behaves as behave, behind idempotency.Handler behind the faults.
func runAtMostOnce(t *testing.T, stack func(base http.RoundTripper) http.RoundTripper, ctx context.Context,
	behave func(int, http.ResponseWriter, *http.Request) bool, fault func(http.Handler) []httptestutil.Step) atMostOnceResult {
	t.Helper()
	fx := newSideEffects(behave)
	idem := fx.watch(idempotency.Handler(fx, idempotency.HandlerOptions{MaxResponseBytes: 1 << 10}))
	n := httptestutil.NewNetwork()
	srv := n.Serve("payments.test", httptestutil.Script(fault(idem)...))
	defer srv.Close()
	base := n.Transport()
	defer base.CloseIdleConnections()
	var rt http.RoundTripper = base
	if stack != nil {
		rt = stack(base)
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/charges", strings.NewReader(`{"amount":100}`))
	if stack == nil {
		req.Header.Set(idempotency.DefaultHeader, "bare-1")
	}
	var res atMostOnceResult
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		res.err = err
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		res.status, res.retry = resp.StatusCode, resp.Header.Get("Stripe-Should-Retry")
	}
	fx.mu.Lock()
	res.charges, res.replays = fx.charges, fx.replays
	fx.mu.Unlock()
	return res
}

// TestAtMostOnceThroughTheStack puts sturdy's client (transport.New, the
// host vouched for by WithKey or Idempotency.Hosts) in front of a
// payments handler behind idempotency.Handler, through resets, lost
// answers and 5xx, and checks that every operation charges exactly once,
// however the handler answered: a 500 after the charge is replayed, not
// run again, and the client does not retry it; a handler that did nothing
// runs again; a response too large to keep is not run again. A bare
// net/http client runs beside it: the stack never fails what the bare
// client delivers, and never charges twice.
func TestAtMostOnceThroughTheStack(t *testing.T) {
	vouch := []struct {
		name  string
		ctx   func() context.Context
		hosts []string
		key   string // the key the charges must be booked under; "" any one
	}{
		{"WithKey", func() context.Context { return idempotency.WithKey(context.Background(), "order-1") }, nil, "order-1"},
		{"Hosts", context.Background, []string{"payments.test"}, ""},
	}
	for _, tc := range atMostOnceCases {
		for _, f := range atMostOnceFaults {
			for _, v := range vouch {
				t.Run(tc.name+"/"+f.name+"/"+v.name, func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						stack := func(base http.RoundTripper) http.RoundTripper {
							return transport.New(transport.Options{Base: base, Idempotency: idempotency.Options{Hosts: v.hosts}})
						}
						got := runAtMostOnce(t, stack, v.ctx(), tc.behave, f.steps)
						bare := runAtMostOnce(t, nil, context.Background(), tc.behave, f.steps)

						if got.err != nil {
							t.Fatalf("stack: %v", got.err)
						}
						want := tc.wantStatus
						if f.cut {
							want = tc.wantCut
						}
						// An error kept under the key says that a retry cannot help.
						wantRetry := map[bool]string{true: "false"}[want >= 400]
						if got.status != want || got.retry != wantRetry {
							t.Errorf("stack: %d with Stripe-Should-Retry %q, want %d with %q", got.status, got.retry, want, wantRetry)
						}
						if len(got.charges) != 1 {
							t.Fatalf("stack: charges per key %v, want one key charged once", got.charges)
						}
						for key, n := range got.charges {
							if n != 1 || v.key != "" && key != v.key {
								t.Errorf("stack: key %q charged %d times, want %q once", key, n, v.key)
							}
						}
						// The client stops at the first replay: a replayed
						// error says Stripe-Should-Retry: false.
						for key, n := range got.replays {
							if n > 1 || n > 0 && !f.cut {
								t.Errorf("stack: key %q got %d replays, want at most %d", key, n, map[bool]int{true: 1}[f.cut])
							}
						}
						// Beside it, the bare client: one attempt, never twice.
						for key, n := range bare.charges {
							if n > 1 {
								t.Errorf("bare client: key %q charged %d times", key, n)
							}
						}
						if bare.err == nil && bare.status < 300 && got.status >= 300 {
							t.Errorf("bare client delivered %d, the stack failed with %d", bare.status, got.status)
						}
					})
				})
			}
		}
	}
}

// A server that dies while its handler runs never completes the key: its
// lock expires after LockTTL, and a retry then runs the handler again.
// This is the one way a key runs twice; LockTTL must be longer than the
// slowest handler (see HandlerOptions.LockTTL).
func TestAtMostOnceServerDies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := idempotency.NewMemoryStore(idempotency.MemoryStoreOptions{})
		const lockTTL = time.Minute
		dead := make(chan struct{})
		var mu sync.Mutex
		charges := 0
		// Two servers share the store; the first dies mid-handler (its
		// handler never returns, as a killed process never completes).
		first := idempotency.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			charges++
			mu.Unlock()
			<-dead
		}), idempotency.HandlerOptions{Store: store, LockTTL: lockTTL})
		second := idempotency.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			charges++
			mu.Unlock()
			w.WriteHeader(201)
		}), idempotency.HandlerOptions{Store: store, LockTTL: lockTTL})
		post := func(h http.Handler) int {
			w := &statusRecorder{header: http.Header{}}
			r, _ := http.NewRequest("POST", "http://payments.test/charges", strings.NewReader(`{"amount":1}`))
			r.Header.Set(idempotency.DefaultHeader, "order-1")
			h.ServeHTTP(w, r)
			return w.status
		}
		go post(first)
		synctest.Wait()
		tests := []struct {
			after       time.Duration
			wantStatus  int
			wantCharges int
		}{
			{lockTTL - time.Second, http.StatusConflict, 1}, // still locked: in flight
			{time.Second, http.StatusCreated, 2},            // the lock expired: runs again
			{time.Second, http.StatusCreated, 2},            // and is replayed from then on
		}
		for i, tt := range tests {
			time.Sleep(tt.after)
			status := post(second)
			mu.Lock()
			n := charges
			mu.Unlock()
			if status != tt.wantStatus || n != tt.wantCharges {
				t.Errorf("step %d: status %d, charges %d; want %d, %d", i, status, n, tt.wantStatus, tt.wantCharges)
			}
		}
		close(dead)
	})
}

type statusRecorder struct {
	header http.Header
	status int
}

func (w *statusRecorder) Header() http.Header { return w.header }
func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *statusRecorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = 200
	}
	return len(p), nil
}
