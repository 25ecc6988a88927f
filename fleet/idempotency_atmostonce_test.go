package fleet_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/fleet"
	"github.com/sturdyhttp/sturdy/fleet/internal/redisproc"
	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// ledger counts the charges and runs of a payments handler per key.
type ledger struct {
	mu            sync.Mutex
	charges, runs map[string]int
}

func newLedger() *ledger { return &ledger{charges: map[string]int{}, runs: map[string]int{}} }

// handler returns a handler whose run n answers as behave does; behave
// reports whether the run charged.
func (l *ledger) handler(behave func(run int, w http.ResponseWriter, r *http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(idempotency.DefaultHeader)
		io.Copy(io.Discard, r.Body)
		l.mu.Lock()
		l.runs[key]++
		run := l.runs[key]
		l.mu.Unlock()
		if behave(run, w, r) {
			l.mu.Lock()
			l.charges[key]++
			l.mu.Unlock()
		}
		if w.Header().Get("X-Then") == "panic" {
			panic(http.ErrAbortHandler) // after the charge, as net/http's handlers may
		}
	})
}

func (l *ledger) count(key string) (charges, runs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.charges[key], l.runs[key]
}

// The behaviours of a payments handler that must run once per key.
var redisAtMostOnce = []struct {
	name     string
	behave   func(run int, w http.ResponseWriter, r *http.Request) bool
	wantRuns int
	// want is the retry's answer: its status and whether it is a replay.
	wantStatus   int
	wantReplayed bool
}{
	{"500 after the charge", func(run int, w http.ResponseWriter, r *http.Request) bool {
		http.Error(w, "ledger timeout", 500)
		return true
	}, 1, 500, true},
	{"nothing done, then 201", func(run int, w http.ResponseWriter, r *http.Request) bool {
		if run == 1 {
			idempotency.NothingDone(r.Context())
			http.Error(w, "ledger refused", 503)
			return false
		}
		w.WriteHeader(201)
		return true
	}, 2, 201, true},
	{"over MaxResponseBytes", func(run int, w http.ResponseWriter, r *http.Request) bool {
		io.WriteString(w, strings.Repeat("x", 4<<10))
		return true
	}, 1, 422, false},
	{"over the store's MaxStoredBytes", func(run int, w http.ResponseWriter, r *http.Request) bool {
		io.WriteString(w, strings.Repeat("x", 3<<10))
		return true
	}, 1, 422, false},
	{"panic after the charge", func(run int, w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("X-Then", "panic") // the ledger panics once it has booked the charge
		return true
	}, 1, 422, false},
}

// TestIdempotencyRedisAtMostOnce: behind idempotency.Handler on the Redis
// store, a key runs the handler at most once whatever it answered; only a
// handler that says it did nothing runs again.
func TestIdempotencyRedisAtMostOnce(t *testing.T) {
	srv := redisproc.StartT(t)
	c := newClient(t, srv)
	for _, tt := range redisAtMostOnce {
		t.Run(tt.name, func(t *testing.T) {
			l := newLedger()
			store := fleet.NewIdempotencyStore(c, fleet.IdempotencyOptions{Prefix: t.Name(), MaxStoredBytes: 3 << 10})
			h := idempotency.Handler(l.handler(tt.behave), idempotency.HandlerOptions{Store: store, MaxResponseBytes: 3 << 10})
			post := func() *httptest.ResponseRecorder {
				w := httptest.NewRecorder()
				r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1}`))
				r.Header.Set(idempotency.DefaultHeader, "order-1")
				func() {
					defer func() { recover() }() // net/http's part, for the panic
					h.ServeHTTP(w, r)
				}()
				return w
			}
			post()
			var w *httptest.ResponseRecorder
			for range 3 {
				w = post()
			}
			if charges, runs := l.count("order-1"); charges != 1 || runs != tt.wantRuns {
				t.Errorf("charges %d, runs %d; want 1, %d", charges, runs, tt.wantRuns)
			}
			if replayed := w.Header().Get(idempotency.ReplayedHeader) == "true"; w.Code != tt.wantStatus || replayed != tt.wantReplayed {
				t.Errorf("retry: %d replayed %v, want %d replayed %v (body %.80s)", w.Code, replayed, tt.wantStatus, tt.wantReplayed, w.Body)
			}
			if w.Code == 422 {
				var p struct{ Type string }
				json.Unmarshal(w.Body.Bytes(), &p)
				if p.Type != idempotency.TypeNotKept {
					t.Errorf("retry: problem type %q, want %q", p.Type, idempotency.TypeNotKept)
				}
			}
			if w.Code >= 400 && w.Header().Get("Stripe-Should-Retry") != "false" {
				t.Errorf("retry: Stripe-Should-Retry %q, want false", w.Header().Get("Stripe-Should-Retry"))
			}
		})
	}
}

// TestIdempotencyRedisThroughTheStack puts sturdy's client (transport.New,
// the key the caller's through WithKey) in front of idempotency.Handler on
// the Redis store, over loopback, through a reset, a lost answer and a
// 502, with a bare net/http client beside it: each operation charges
// exactly once with the stack, at most once with the bare client, and the
// stack fails none that the bare client delivers.
func TestIdempotencyRedisThroughTheStack(t *testing.T) {
	srv := redisproc.StartT(t)
	c := newClient(t, srv)
	faults := []struct {
		name  string
		steps func(h http.Handler) []httptestutil.Step
	}{
		{"reset before", func(h http.Handler) []httptestutil.Step {
			return []httptestutil.Step{httptestutil.ResetAfterRead(), httptestutil.Handler(h).Forever()}
		}},
		{"answer lost", func(h http.Handler) []httptestutil.Step {
			return []httptestutil.Step{httptestutil.CutAfter(h), httptestutil.Handler(h).Forever()}
		}},
		{"502 before", func(h http.Handler) []httptestutil.Step {
			return []httptestutil.Step{httptestutil.Status(502, "bad gateway"), httptestutil.Handler(h).Forever()}
		}},
	}
	for _, tt := range redisAtMostOnce {
		for _, f := range faults {
			t.Run(tt.name+"/"+f.name, func(t *testing.T) {
				run := func(stack bool) (status int, err error, charges int) {
					l := newLedger()
					store := fleet.NewIdempotencyStore(c, fleet.IdempotencyOptions{Prefix: t.Name() + map[bool]string{true: "/stack"}[stack], MaxStoredBytes: 3 << 10})
					h := idempotency.Handler(l.handler(tt.behave), idempotency.HandlerOptions{Store: store, MaxResponseBytes: 3 << 10})
					ts := httptest.NewServer(httptestutil.Script(f.steps(h)...))
					defer ts.Close()
					ctx := idempotency.WithKey(context.Background(), "order-1")
					var rt http.RoundTripper = &http.Transport{DisableKeepAlives: true}
					if stack {
						rt = transport.New(transport.Options{Retry: policy.Retry{Backoff: policy.Exponential(time.Millisecond, 10*time.Millisecond)}})
					} else {
						ctx = context.Background()
					}
					defer rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
					req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/charges", strings.NewReader(`{"amount":1}`))
					if !stack {
						req.Header.Set(idempotency.DefaultHeader, "order-1")
					}
					resp, err := (&http.Client{Transport: rt}).Do(req)
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						status = resp.StatusCode
					}
					charges, _ = l.count("order-1")
					return status, err, charges
				}
				status, err, charges := run(true)
				bareStatus, bareErr, bareCharges := run(false)
				if err != nil || charges != 1 {
					t.Errorf("stack: %d, %v, %d charges; want an answer and 1 charge", status, err, charges)
				}
				if bareCharges > 1 {
					t.Errorf("bare client: %d charges, want at most 1", bareCharges)
				}
				if bareErr == nil && bareStatus < 300 && (err != nil || status >= 300) {
					t.Errorf("bare client delivered %d, the stack ended with %d, %v", bareStatus, status, err)
				}
			})
		}
	}
}

// TestIdempotencyRedisServerDies: a server that dies while its handler
// runs leaves its lock in Redis; retries are told the key is in flight
// until the lock expires after LockTTL, and the retry after that runs the
// handler again. It is the one way a key runs twice.
func TestIdempotencyRedisServerDies(t *testing.T) {
	srv := redisproc.StartT(t)
	c := newClient(t, srv)
	store := fleet.NewIdempotencyStore(c, fleet.IdempotencyOptions{})
	const lockTTL = 300 * time.Millisecond
	l := newLedger()
	dead := make(chan struct{})
	started := make(chan struct{})
	first := idempotency.Handler(l.handler(func(run int, w http.ResponseWriter, r *http.Request) bool {
		close(started)
		<-dead // killed: never completes
		return true
	}), idempotency.HandlerOptions{Store: store, LockTTL: lockTTL})
	second := idempotency.Handler(l.handler(func(run int, w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(201)
		return true
	}), idempotency.HandlerOptions{Store: store, LockTTL: lockTTL})
	post := func(h http.Handler) int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1}`))
		r.Header.Set(idempotency.DefaultHeader, "order-1")
		h.ServeHTTP(w, r)
		return w.Code
	}
	done := make(chan struct{})
	go func() { post(first); close(done) }()
	defer func() { close(dead); <-done }()
	<-started
	if got := post(second); got != http.StatusConflict {
		t.Errorf("while the dead server holds the lock: %d, want 409", got)
	}
	for n, _ := redisDo(t, c, "EXISTS", "sturdy:idem:{order-1}").AsInt64(); n != 0; n, _ = redisDo(t, c, "EXISTS", "sturdy:idem:{order-1}").AsInt64() {
		time.Sleep(20 * time.Millisecond) // until Redis has expired the lock
	}
	if got := post(second); got != http.StatusCreated {
		t.Errorf("after LockTTL: %d, want 201 from a second run", got)
	}
	if charges, _ := l.count("order-1"); charges != 1 { // the dead run's charge is not counted: it never returned
		t.Errorf("charges by the second server = %d, want 1", charges)
	}
	if _, runs := l.count("order-1"); runs != 2 {
		t.Errorf("runs = %d, want 2: the dead one and the one after LockTTL", runs)
	}
}

// TestIdempotencyRedisDownRunsNothing: while Redis is down, no keyed
// request runs without the lock: each gets 503 with Retry-After. Once
// Redis is back, the key runs once and is replayed.
func TestIdempotencyRedisDownRunsNothing(t *testing.T) {
	srv := redisproc.StartT(t)
	// Room for a loaded machine: a Complete that times out spends the key
	// (a retry then gets 422), which is not what this test is about.
	store := fleet.NewIdempotencyStore(newClient(t, srv), fleet.IdempotencyOptions{Timeout: 2 * time.Second})
	l := newLedger()
	h := idempotency.Handler(l.handler(func(run int, w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(201)
		return true
	}), idempotency.HandlerOptions{Store: store, OnStoreError: func(*http.Request, error) {}})
	post := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":1}`))
		r.Header.Set(idempotency.DefaultHeader, "order-1")
		h.ServeHTTP(w, r)
		return w
	}
	srv.Kill()
	for i := range 3 {
		if w := post(); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
			t.Errorf("Redis down, request %d: %d Retry-After %q, want 503 with Retry-After", i, w.Code, w.Header().Get("Retry-After"))
		}
	}
	if charges, runs := l.count("order-1"); charges != 0 || runs != 0 {
		t.Fatalf("Redis down: %d charges, %d runs; want none", charges, runs)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	var codes []int
	for range 100 { // the client reconnects on its own
		w := post()
		codes = append(codes, w.Code)
		if w.Code != http.StatusServiceUnavailable {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if w := post(); w.Code != 201 || w.Header().Get(idempotency.ReplayedHeader) != "true" {
		t.Errorf("after Redis came back (answers %v), a retry: %d replayed %q, want a replayed 201", codes, w.Code, w.Header().Get(idempotency.ReplayedHeader))
	}
	if charges, runs := l.count("order-1"); charges != 1 || runs != 1 {
		t.Errorf("after Redis came back: %d charges, %d runs; want 1, 1", charges, runs)
	}
}
