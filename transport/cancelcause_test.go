package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
)

// errUserLeft is the cause a caller cancels its request with.
var errUserLeft = errors.New("user left")

// TestCallerCancelWithCause: a request its caller cancels mid-flight
// with context.WithCancelCause ends as a plain cancel does, through a
// stack with a low breaker threshold, outlier ejection over two
// addresses and a concurrency limit, beside the bare net/http client.
// The stack returns an error that matches the cause, as bare does; sends
// the request once, not again; never counts it against the host (the
// breaker stays closed, no address is ejected, the limit learns no
// loss); and reports "canceled". A caller's own deadline with a cause
// stays a deadline. A server that answers 503 the same number of times
// opens the breaker and ejects an address: the thresholds are reached.
func TestCallerCancelWithCause(t *testing.T) {
	const ops = 4 // the breaker's threshold
	for _, tc := range []struct {
		name   string
		method string
		// ctx makes the request's context and the function that ends it.
		ctx    func() (context.Context, func())
		cancel bool // the caller ends it mid-flight, once the server has it
		status int  // the server's answer when the caller does not end it
		// wantIs is what the error of bare and of the stack matches.
		wantIs     error
		wantReason policy.Reason
		wantOpen   bool
		wantEject  bool
	}{
		{name: "cancel(nil)", method: http.MethodGet, cancel: true,
			ctx: func() (context.Context, func()) {
				ctx, cancel := context.WithCancelCause(context.Background())
				return ctx, func() { cancel(nil) }
			},
			wantIs: context.Canceled, wantReason: policy.ReasonCanceled},
		{name: "cancel(cause)", method: http.MethodGet, cancel: true,
			ctx: func() (context.Context, func()) {
				ctx, cancel := context.WithCancelCause(context.Background())
				return ctx, func() { cancel(errUserLeft) }
			},
			wantIs: errUserLeft, wantReason: policy.ReasonCanceled},
		{name: "cancel(cause) of a POST", method: http.MethodPost, cancel: true,
			ctx: func() (context.Context, func()) {
				ctx, cancel := context.WithCancelCause(context.Background())
				return ctx, func() { cancel(errUserLeft) }
			},
			wantIs: errUserLeft, wantReason: policy.ReasonCanceled},
		{name: "caller's deadline with a cause", method: http.MethodGet,
			ctx: func() (context.Context, func()) {
				ctx, cancel := context.WithTimeoutCause(context.Background(), time.Second, errUserLeft)
				return ctx, cancel
			},
			wantIs: errUserLeft, wantReason: policy.ReasonDeadline},
		{name: "server answers 503", method: http.MethodPost, status: http.StatusServiceUnavailable,
			ctx:        func() (context.Context, func()) { return context.Background(), func() {} },
			wantReason: policy.ReasonNotSafe, wantOpen: true, wantEject: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := httptestutil.NewNetwork()
				var hits atomic.Int64
				arrived := make(chan struct{}, 1)
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					hits.Add(1)
					io.Copy(io.Discard, r.Body) // read whole: net/http then sees the client go
					if tc.status != 0 {
						w.WriteHeader(tc.status)
						return
					}
					arrived <- struct{}{}
					<-r.Context().Done() // the client went away
				})
				// The stack sends to the host's two addresses; bare, which
				// resolves nothing, to its name.
				addrs := []string{"10.0.0.1", "10.0.0.2"}
				var srvs []*httptestutil.Server
				for _, a := range append(addrs, "api.test") {
					srvs = append(srvs, n.Serve(a+":80", h))
				}
				base := n.Transport()
				t.Cleanup(func() {
					base.CloseIdleConnections()
					for _, s := range srvs {
						s.Close()
					}
				})

				var mu sync.Mutex
				var giveUps []policy.Reason
				var retries, ejections, lowered int
				breakers := NewBreakers(BreakerSettings{ConsecutiveFailures: ops, Cooldown: time.Hour})
				stack := &http.Client{Transport: New(Options{
					Base:        base,
					Retry:       policy.Retry{MaxAttempts: 3, Backoff: constant(10 * time.Millisecond)},
					Breakers:    breakers,
					Concurrency: &policy.Concurrency{},
					Endpoints: Endpoints{PerAddress: true,
						LookupHost: func(context.Context, string) ([]string, error) { return addrs, nil },
						Outlier:    policy.Outlier{ConsecutiveFailures: 2}},
					Hooks: Hooks{
						OnGiveUp: func(e policy.GiveUpEvent) { mu.Lock(); giveUps = append(giveUps, e.Reason); mu.Unlock() },
						OnRetry:  func(policy.RetryEvent) { mu.Lock(); retries++; mu.Unlock() },
						OnEject:  func(EjectionEvent) { mu.Lock(); ejections++; mu.Unlock() },
						OnConcurrencyChange: func(e ConcurrencyEvent) {
							if e.Limit < e.From {
								mu.Lock()
								lowered++
								mu.Unlock()
							}
						},
					},
				})}
				bare := &http.Client{Transport: base}

				// do sends one operation through c, ending it as the row
				// says, and returns its outcome and how often the server
				// had it.
				do := func(c *http.Client) (*http.Response, error, int64) {
					t.Helper()
					before := hits.Load()
					ctx, end := tc.ctx()
					defer end()
					req, err := http.NewRequestWithContext(ctx, tc.method, "http://api.test/", strings.NewReader("x"))
					if err != nil {
						t.Fatal(err)
					}
					type outcome struct {
						resp *http.Response
						err  error
					}
					got := make(chan outcome, 1)
					go func() {
						resp, err := c.Do(req)
						got <- outcome{resp, err}
					}()
					if tc.status == 0 {
						<-arrived // mid-flight: the server has the request
						if tc.cancel {
							end()
						}
					}
					o := <-got
					if o.resp != nil {
						readAll(t, o.resp)
					}
					synctest.Wait() // the handler has seen the client go
					return o.resp, o.err, hits.Load() - before
				}

				for i := range ops {
					bresp, berr, bhits := do(bare)
					resp, err, shits := do(stack)
					if tc.wantIs != nil {
						if !errors.Is(berr, tc.wantIs) {
							t.Fatalf("op %d: bare: err = %v, want one matching %v", i, berr, tc.wantIs)
						}
						if !errors.Is(err, tc.wantIs) {
							t.Fatalf("op %d: stack: err = %v, want one matching %v, as bare", i, err, tc.wantIs)
						}
						var re *RetryError
						if !errors.As(err, &re) {
							t.Fatalf("op %d: stack: err = %v, want a *RetryError", i, err)
						}
						if got, want := re.Reason, tc.wantReason; got != want {
							t.Errorf("op %d: RetryError.Reason = %q, want %q (%v)", i, got, want, err)
						}
					} else {
						if berr != nil || err != nil {
							t.Fatalf("op %d: bare err = %v, stack err = %v, want none", i, berr, err)
						}
						if got, want := resp.StatusCode, bresp.StatusCode; got != want {
							t.Fatalf("op %d: stack status %d, want %d, as bare", i, got, want)
						}
						op, _ := OperationOf(resp)
						if got, want := op.Reason, tc.wantReason; got != want {
							t.Errorf("op %d: OperationOf(resp).Reason = %q, want %q", i, got, want)
						}
					}
					if bhits != 1 || shits != 1 {
						t.Errorf("op %d: the server had the request %d times from bare, %d from the stack; want 1 and 1", i, bhits, shits)
					}
				}

				mu.Lock()
				defer mu.Unlock()
				if retries != 0 {
					t.Errorf("%d retries, want none", retries)
				}
				if len(giveUps) != ops {
					t.Errorf("OnGiveUp called %d times, want %d", len(giveUps), ops)
				}
				for i, r := range giveUps {
					if r != tc.wantReason {
						t.Errorf("OnGiveUp %d: Reason = %q, want %q", i, r, tc.wantReason)
					}
				}
				u, _ := url.Parse("http://api.test/")
				if got, want := breakers.State(u) == BreakerOpen, tc.wantOpen; got != want {
					t.Errorf("after %d operations the breaker is %v; want open: %v", ops, breakers.State(u), want)
				}
				if got, want := ejections > 0, tc.wantEject; got != want {
					t.Errorf("%d ejections; want some: %v", ejections, want)
				}
				if tc.cancel && lowered != 0 {
					t.Errorf("the concurrency limit was lowered %d times by canceled requests, want never", lowered)
				}
				stack.CloseIdleConnections()
			})
		})
	}
}

// TestCallerCancelWithCauseBetweenAttempts: an operation its caller
// cancels between attempts, with a cause or without, ends "canceled": in
// the wait before a retry, the error matches the cause; as a 503
// arrives, the 503 is handed back and [OperationOf] says why it was not
// retried. The bare client, beside, gets the 503 once; the stack sends
// the request once too.
func TestCallerCancelWithCauseBetweenAttempts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause error // cancel's; nil: a plain cancel
		// inWait: the caller cancels in the wait before the retry (at
		// OnRetry); else as the 503 arrives (at OnAttempt).
		inWait bool
		wantIs error
	}{
		{"in the wait, cancel(nil)", nil, true, context.Canceled},
		{"in the wait, cancel(cause)", errUserLeft, true, errUserLeft},
		{"as the 503 arrives, cancel(nil)", nil, false, nil},
		{"as the 503 arrives, cancel(cause)", errUserLeft, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hits atomic.Int64
				env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					hits.Add(1)
					w.WriteHeader(http.StatusServiceUnavailable)
				}))
				ctx, cancel := context.WithCancelCause(context.Background())
				defer cancel(nil)
				var giveUps []policy.Reason
				end := func() { cancel(tc.cause) }
				hooks := Hooks{OnGiveUp: func(e policy.GiveUpEvent) { giveUps = append(giveUps, e.Reason) }}
				if tc.inWait {
					hooks.OnRetry = func(policy.RetryEvent) { end() }
				} else {
					hooks.OnAttempt = func(policy.AttemptEvent) { end() }
				}
				stack := &http.Client{Transport: New(Options{Base: env.base, Hooks: hooks,
					Retry: policy.Retry{MaxAttempts: 3, Backoff: constant(10 * time.Second)}})}
				bare := &http.Client{Transport: env.base}

				req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.url, nil)
				if err != nil {
					t.Fatal(err)
				}
				bresp, err := bare.Get(env.url)
				if err != nil {
					t.Fatalf("bare: %v", err)
				}
				readAll(t, bresp)
				if got := hits.Load(); got != 1 {
					t.Fatalf("bare: the server had the request %d times, want 1", got)
				}
				resp, err := stack.Do(req)
				if got := hits.Load() - 1; got != 1 {
					t.Errorf("stack: the server had the request %d times, want 1", got)
				}
				if tc.wantIs != nil {
					var re *RetryError
					if !errors.Is(err, tc.wantIs) || !errors.As(err, &re) {
						t.Fatalf("stack: err = %v, want a *RetryError matching %v", err, tc.wantIs)
					}
					if got, want := re.Reason, policy.ReasonCanceled; got != want {
						t.Errorf("RetryError.Reason = %q, want %q", got, want)
					}
				} else {
					if err != nil {
						t.Fatalf("stack: err = %v, want the 503, as bare", err)
					}
					readAll(t, resp)
					if got, want := resp.StatusCode, bresp.StatusCode; got != want {
						t.Errorf("stack: status %d, want %d, as bare", got, want)
					}
					if op, _ := OperationOf(resp); op.Reason != policy.ReasonCanceled {
						t.Errorf("OperationOf(resp).Reason = %q, want %q", op.Reason, policy.ReasonCanceled)
					}
				}
				if len(giveUps) != 1 || giveUps[0] != policy.ReasonCanceled {
					t.Errorf("OnGiveUp reasons %q, want [%q]", giveUps, policy.ReasonCanceled)
				}
				stack.CloseIdleConnections()
			})
		})
	}
}

// TestHedgeCallerCancelWithCause: a hedged GET whose caller cancels it
// with a cause while both copies are in flight ends as the bare client's
// does, with an error matching the cause, reported "canceled"; neither
// copy counts against the host (a breaker whose threshold the copies
// would pass stays closed), none is retried, and no third copy is sent.
func TestHedgeCallerCancelWithCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ops = 3
		var hits atomic.Int64
		arrived := make(chan struct{}, 2)
		env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			arrived <- struct{}{}
			<-r.Context().Done()
		}))
		var mu sync.Mutex
		var giveUps []policy.Reason
		var retries, canceledCopies int
		breakers := NewBreakers(BreakerSettings{ConsecutiveFailures: ops, Cooldown: time.Hour})
		stack := &http.Client{Transport: New(Options{
			Base:     env.base,
			Retry:    policy.Retry{MaxAttempts: 3, Backoff: constant(10 * time.Millisecond)},
			Hedge:    &policy.Hedge{Delay: 100 * time.Millisecond, MaxHedges: 2},
			Breakers: breakers,
			Hooks: Hooks{
				OnGiveUp:       func(e policy.GiveUpEvent) { mu.Lock(); giveUps = append(giveUps, e.Reason); mu.Unlock() },
				OnRetry:        func(policy.RetryEvent) { mu.Lock(); retries++; mu.Unlock() },
				OnCopyCanceled: func(policy.HedgeEvent) { mu.Lock(); canceledCopies++; mu.Unlock() },
			},
		})}
		bare := &http.Client{Transport: env.base}
		do := func(c *http.Client, copies int) (error, int64) {
			t.Helper()
			before := hits.Load()
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				resp, err := c.Do(req)
				if resp != nil {
					resp.Body.Close()
				}
				got <- err
			}()
			for range copies {
				<-arrived
			}
			cancel(errUserLeft)
			err = <-got
			synctest.Wait()
			return err, hits.Load() - before
		}
		for i := range ops {
			if err, n := do(bare, 1); !errors.Is(err, errUserLeft) || n != 1 {
				t.Fatalf("op %d: bare: err = %v, sent %d times; want the cause, once", i, err, n)
			}
			err, n := do(stack, 2) // the first copy and one hedge
			var re *RetryError
			if !errors.Is(err, errUserLeft) || !errors.As(err, &re) {
				t.Fatalf("op %d: stack: err = %v, want a *RetryError matching the cause", i, err)
			}
			if re.Reason != policy.ReasonCanceled {
				t.Errorf("op %d: RetryError.Reason = %q, want %q", i, re.Reason, policy.ReasonCanceled)
			}
			if n != 2 {
				t.Errorf("op %d: the server had %d copies, want 2", i, n)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if retries != 0 || canceledCopies != 0 {
			t.Errorf("%d retries and %d copies canceled for a winner, want none", retries, canceledCopies)
		}
		for i, r := range giveUps {
			if r != policy.ReasonCanceled {
				t.Errorf("OnGiveUp %d: Reason = %q, want %q", i, r, policy.ReasonCanceled)
			}
		}
		if len(giveUps) != ops {
			t.Errorf("OnGiveUp called %d times, want %d", len(giveUps), ops)
		}
		if u, _ := url.Parse(env.url); breakers.State(u) != BreakerClosed {
			t.Errorf("after %d canceled hedged operations (%d copies) the breaker is %v, want closed", ops, 2*ops, breakers.State(u))
		}
		stack.CloseIdleConnections()
	})
}
