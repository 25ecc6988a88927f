package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
)

// Promise: a key goes only on requests that are vouched for. Every cell
// of method × how the caller vouched: the key IdempotencyKey passes on,
// if any.
func TestKeyOnlyWhereVouched(t *testing.T) {
	hosts := idempotency.Options{Hosts: []string{"api.vouched.test", "*.dedup.test"}, NewKey: func() string { return "generated" }}
	vouching := []struct {
		name     string
		url      string
		header   string // the caller's own Idempotency-Key header
		ctxKey   string // idempotency.WithKey
		wantPOST string // the key a POST or PATCH carries
		wantGET  string // the key a GET or PUT carries
	}{
		{"nobody vouched", "http://api.other.test/x", "", "", "", ""},
		{"host in Hosts", "http://api.vouched.test:8443/x", "", "", "generated", ""},
		{"subdomain of a wildcard", "http://eu.dedup.test/x", "", "", "generated", ""},
		{"the wildcard's own domain is not listed", "http://dedup.test/x", "", "", "", ""},
		{"caller's header", "http://api.other.test/x", "caller-1", "", "caller-1", "caller-1"},
		{"caller's header beats WithKey and Hosts", "http://api.vouched.test/x", "caller-1", "ctx-1", "caller-1", "caller-1"},
		{"idempotency.WithKey", "http://api.other.test/x", "", "ctx-1", "ctx-1", "ctx-1"},
		{"WithKey beats a generated key", "http://api.vouched.test/x", "", "ctx-1", "ctx-1", "ctx-1"},
	}
	for _, v := range vouching {
		for _, method := range []string{"POST", "PATCH", "GET", "PUT"} {
			t.Run(v.name+"/"+method, func(t *testing.T) {
				var sent http.Header
				base := Func(func(r *http.Request) (*http.Response, error) {
					sent = r.Header
					return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
				})
				ctx := context.Background()
				if v.ctxKey != "" {
					ctx = idempotency.WithKey(ctx, v.ctxKey)
				}
				req, _ := http.NewRequestWithContext(ctx, method, v.url, strings.NewReader("x"))
				if v.header != "" {
					req.Header.Set("Idempotency-Key", v.header)
				}
				if _, err := Chain(base, IdempotencyKey(hosts)).RoundTrip(req); err != nil {
					t.Fatal(err)
				}
				want := v.wantGET
				if method == "POST" || method == "PATCH" {
					want = v.wantPOST
				}
				got, present := sent.Get("Idempotency-Key"), len(sent["Idempotency-Key"]) > 0
				if got != want || present != (want != "") {
					t.Errorf("key sent = %q (present %v), want %q", got, present, want)
				}
			})
		}
	}
}

// Promise: a 409 is retried only where it can mean "the same key is still
// in flight"; a 409 on a first attempt is the server's answer.
func TestConflictRetriedOnlyWhileKeyInFlight(t *testing.T) {
	tests := []struct {
		name  string
		key   string
		steps []httptestutil.Step
		sends int
		final int
	}{
		{"409 on a first attempt is returned", "k1", []httptestutil.Step{httptestutil.Status(409, "already exists")}, 1, 409},
		{"409 without a key is returned", "", []httptestutil.Step{httptestutil.Status(409, "busy", "Retry-After", "1")}, 1, 409},
		{"409 to a key an earlier attempt sent", "k1", []httptestutil.Step{httptestutil.Status(503, ""), httptestutil.Status(409, "in flight")}, 3, 201},
		{"409 with Retry-After: in flight", "k1", []httptestutil.Step{httptestutil.Status(409, "in flight", "Retry-After", "1")}, 2, 201},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(append(tt.steps, httptestutil.Status(201, "created").Forever())...))
				env := newFakeEnv(t, rec)
				req, _ := http.NewRequest("POST", env.url+"/orders", strings.NewReader("x"))
				if tt.key != "" {
					req.Header.Set("Idempotency-Key", tt.key)
				}
				resp, err := newStack(env, Options{}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				if resp.StatusCode != tt.final {
					t.Errorf("status = %d, want %d", resp.StatusCode, tt.final)
				}
				rec.WantCount(t, tt.sends)
			})
		})
	}
}

// Promise: the error says which limit or which layer ended the operation.
// When an open breaker ends the retries, the error is ErrCircuitOpen and
// says so, not "deadline exceeded" from the last attempt.
func TestErrorNamesTheBreakerThatEndedRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := newFakeEnv(t, httptestutil.Hang())
		var giveUp policy.GiveUpEvent
		c := newStack(env, Options{
			AttemptTimeout: time.Second,
			Breaker:        BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Minute},
			Hooks:          Hooks{OnGiveUp: func(e policy.GiveUpEvent) { giveUp = e }},
		})
		_, err := c.Get(env.url)
		var re *RetryError
		if !errors.As(err, &re) || re.Reason != policy.ReasonRefused || re.Attempts != 1 {
			t.Fatalf("err = %v, want a *RetryError after 1 attempt with reason %q", err, policy.ReasonRefused)
		}
		if !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("errors.Is(%v, ErrCircuitOpen) = false, want true", err)
		}
		if msg := err.Error(); strings.Contains(msg, "deadline") || !strings.Contains(msg, "circuit open") {
			t.Errorf("message %q: want it to name the open circuit and not a deadline", msg)
		}
		if giveUp.Reason != policy.ReasonRefused || !strings.Contains(giveUp.Detail, "circuit open") {
			t.Errorf("OnGiveUp = (%q, %q), want (%q, the refusal)", giveUp.Reason, giveUp.Detail, policy.ReasonRefused)
		}
	})
}

// Promise: the retry budget's effect on MaxAttempts is visible
// where the user looks. Sequential calls to a host that always resets:
// once the budget is spent, calls end after fewer attempts, with
// ReasonBudgetSpent in the error and in OnGiveUp.
func TestErrorNamesTheSpentBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := newFakeEnv(t, httptestutil.Reset().Forever())
		var mu sync.Mutex
		reasons := map[policy.Reason]int{}
		c := newStack(env, Options{
			Disable: LayerBreaker,
			Retry:   policy.Retry{Backoff: constant(10 * time.Millisecond)},
			Hooks: Hooks{OnGiveUp: func(e policy.GiveUpEvent) {
				mu.Lock()
				reasons[e.Reason]++
				mu.Unlock()
			}},
		})
		var spent *RetryError
		for range 12 {
			_, err := c.Get(env.url)
			var re *RetryError
			if !errors.As(err, &re) {
				t.Fatalf("err = %v, want a *RetryError", err)
			}
			if re.Reason == policy.ReasonBudgetSpent && spent == nil {
				spent = re
			}
		}
		if spent == nil {
			t.Fatalf("no call ended on the budget; give-up reasons: %v", reasons)
		}
		if spent.Attempts >= 4 || !strings.Contains(spent.Error(), "retry budget spent") {
			t.Errorf("err = %v after %d attempts, want fewer than 4 and a message naming the budget", spent, spent.Attempts)
		}
		if reasons[policy.ReasonAttemptsUsed] == 0 || reasons[policy.ReasonBudgetSpent] == 0 {
			t.Errorf("give-up reasons = %v, want both %q (first calls) and %q", reasons, policy.ReasonAttemptsUsed, policy.ReasonBudgetSpent)
		}
	})
}

// Promise: a wait that cannot end inside the deadline is not started, and
// the hooks say so for a response handed back.
func TestGiveUpNamesTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := newFakeEnv(t, httptestutil.RetryAfterSeconds(503, 30).Forever())
		var giveUp policy.GiveUpEvent
		c := newStack(env, Options{Timeout: 10 * time.Second, Hooks: Hooks{OnGiveUp: func(e policy.GiveUpEvent) { giveUp = e }}})
		start := time.Now()
		resp, err := c.Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || time.Since(start) != 0 {
			t.Errorf("got %d after %v, want the 503 at once", resp.StatusCode, time.Since(start))
		}
		if giveUp.Reason != policy.ReasonWaitPastDeadline || giveUp.Attempts != 1 {
			t.Errorf("OnGiveUp = (%q after %d), want (%q after 1)", giveUp.Reason, giveUp.Attempts, policy.ReasonWaitPastDeadline)
		}
	})
}

// Promise: a request is sent again only when that is safe. A transport
// that does not report its connections through httptrace (an HTTP/3 or
// custom transport, a recording) proves nothing by not reporting one: an
// unvouched POST that fails there may have been acted on, and is not
// sent again.
func TestUnvouchedPostNotResentWithoutConnectionReports(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stack func(base http.RoundTripper) http.RoundTripper
	}{
		{"Retry", func(base http.RoundTripper) http.RoundTripper {
			return Chain(base, Retry(policy.Retry{Backoff: constant(time.Millisecond)}))
		}},
		{"New", func(base http.RoundTripper) http.RoundTripper { return New(Options{Base: base}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var served atomic.Int32
				base := Func(func(r *http.Request) (*http.Response, error) {
					io.Copy(io.Discard, r.Body)
					r.Body.Close()
					if served.Add(1) == 1 { // acted on, then the connection was reset
						return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
					}
					return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
				})
				c := &http.Client{Transport: tc.stack(base)}
				resp, err := c.Post("http://api.test/charge", "application/json", strings.NewReader(`{"amount":1}`))
				if err == nil {
					resp.Body.Close()
				}
				if got := served.Load(); got != 1 {
					t.Errorf("POST sent %d times, want 1 (err %v)", got, err)
				}
				if !errors.Is(err, syscall.ECONNRESET) {
					t.Errorf("err = %v, want the reset", err)
				}
			})
		})
	}
}

// A key given with idempotency.WithKey is sent on every attempt even when
// the request carries an empty Idempotency-Key header (an SDK's option
// left unset): an empty key is none, and the caller's key replaces it.
func TestWithKeyOverAnEmptyHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Script(
			httptestutil.Status(503, "busy"),
			httptestutil.Status(201, "created").Forever(),
		))
		env := newFakeEnv(t, rec)
		ctx := idempotency.WithKey(context.Background(), "order-42")
		req, _ := http.NewRequestWithContext(ctx, "POST", env.url+"/charges", strings.NewReader("amount=10"))
		req.Header.Set("Idempotency-Key", "") // an SDK's unset option
		resp, err := newStack(env, Options{}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		for i, r := range rec.Requests() {
			if got := r.Header.Get("Idempotency-Key"); got != "order-42" {
				t.Errorf("attempt %d sent Idempotency-Key %q, want the caller's WithKey key %q", i+1, got, "order-42")
			}
		}
	})
}

// An unvouched POST's attempts carry a context that watches their
// connections. net/http derives a context of its own from each request's;
// it follows the watch through the bound's AfterFunc, as it follows a
// GET's, without a goroutine per attempt.
// The same holds for a second attempt, whose context carries the
// operation's record, and beneath a lone Retry, whose context carries a
// stack of its own.
func TestWatchedAttemptStartsNoGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		stack        func(env *fakeEnv) *http.Client
		failFirst    bool
	}{
		{"GET", "GET", func(env *fakeEnv) *http.Client { return newStack(env, Options{}) }, false},
		{"POST", "POST", func(env *fakeEnv) *http.Client { return newStack(env, Options{}) }, false},
		{"GET, second attempt", "GET", func(env *fakeEnv) *http.Client { return newStack(env, Options{}) }, true},
		{"POST, lone Retry", "POST", func(env *fakeEnv) *http.Client {
			return &http.Client{Transport: Chain(env.base, Retry(policy.Retry{}))}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				var calls atomic.Int32
				env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if calls.Add(1) == 1 && tc.failFirst {
						w.WriteHeader(http.StatusServiceUnavailable)
						return
					}
					<-release
					io.WriteString(w, "ok")
				}))
				c := tc.stack(env)
				done := make(chan error)
				go func() {
					req, _ := http.NewRequest(method, env.url+"/charge", strings.NewReader("amount=1"))
					resp, err := c.Do(req)
					if err == nil {
						resp.Body.Close()
					}
					done <- err
				}()
				synctest.Wait() // the request waits at the server
				buf := make([]byte, 1<<20)
				stacks := string(buf[:runtime.Stack(buf, true)])
				if n := strings.Count(stacks, "context.(*cancelCtx).propagateCancel"); n != 0 {
					t.Errorf("%d goroutines follow a request's context; want 0", n)
				}
				close(release)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
