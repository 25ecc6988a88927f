package transport

import (
	"context"
	"errors"
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

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	*strings.Reader
	closed *atomic.Int32
}

func (c closeCounter) Close() error { c.closed.Add(1); return nil }

func TestThrottleShedsLoad(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		wantShed   bool
		wantServed func(int) bool
	}{
		{"a host failing everything is shed", 503, true, func(n int) bool { return n < 100 && n >= 20 }},
		{"429 counts as a rejection", 429, true, func(n int) bool { return n < 100 && n >= 20 }},
		{"a 404 is accepted: nothing shed", 404, false, func(n int) bool { return n == 100 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(httptestutil.Status(tt.status, "").Forever()))
				env := newFakeEnv(t, rec)
				var rejects atomic.Int32
				c := &http.Client{Transport: Chain(env.base, throttleMiddleware(&policy.Throttle{}, func(e ThrottleEvent) {
					if want := breakerKey(env.url); e.Host != want || e.Probability <= 0 || e.Request == nil {
						t.Errorf("event = %+v, want host %s, probability > 0", e, want)
					}
					rejects.Add(1)
				}))}
				var shed, closed atomic.Int32
				for range 100 {
					req, _ := http.NewRequest("PUT", env.url+"/x", nil)
					req.Body = closeCounter{strings.NewReader("body"), &closed}
					resp, err := c.Do(req)
					if err == nil {
						readAll(t, resp)
						continue
					}
					var te *ThrottleError
					if !errors.Is(err, ErrThrottled) || !errors.As(err, &te) {
						t.Fatalf("err = %v, want a *ThrottleError matching ErrThrottled", err)
					}
					shed.Add(1)
				}
				if got := shed.Load() > 0; got != tt.wantShed {
					t.Errorf("%d requests shed, want some: %v", shed.Load(), tt.wantShed)
				}
				if got := rec.Count(); !tt.wantServed(got) {
					t.Errorf("server got %d requests", got)
				}
				if got, want := rejects.Load(), shed.Load(); got != want {
					t.Errorf("OnThrottle called %d times, want %d", got, want)
				}
				if got, want := closed.Load(), int32(100); got < want {
					t.Errorf("%d request bodies closed, want %d", got, want)
				}
			})
		})
	}
}

// TestThrottleCountsOnlyWhatReachedTheServer: caller cancellations and
// breaker refusals do not count as rejections by the server.
func TestThrottleCountsOnlyWhatReachedTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Script(httptestutil.Hang().Forever()))
		env := newFakeEnv(t, rec)
		th := &policy.Throttle{}
		c := &http.Client{Transport: Chain(env.base, Throttle(th))}
		for range 50 {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			req, _ := http.NewRequestWithContext(ctx, "GET", env.url+"/x", nil)
			go func() { time.Sleep(10 * time.Millisecond); cancel() }()
			if _, err := c.Do(req); !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
		}
		if got := th.Probability(env.url, time.Now()); got != 0 {
			t.Errorf("Probability = %v after 50 caller cancels, want 0", got)
		}

		open := &CircuitOpenError{}
		refused := Chain(Func(func(*http.Request) (*http.Response, error) { return nil, open }), Throttle(th))
		for range 50 {
			req, _ := http.NewRequest("GET", env.url+"/x", nil)
			refused.RoundTrip(req)
		}
		if got := th.Probability(env.url, time.Now()); got != 0 {
			t.Errorf("Probability = %v after 50 breaker refusals, want 0", got)
		}
	})
}

// TestNewThrottle: in New, a rejection fails fast, is not retried, and
// reaches Hooks.OnThrottle.
func TestNewThrottle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Script(httptestutil.Status(503, "").Forever()))
		env := newFakeEnv(t, rec)
		var hooked atomic.Int32
		c := newStack(env, Options{
			Throttle: &policy.Throttle{MinRequests: -1},
			Retry:    policy.Retry{MaxAttempts: 1},
			Disable:  LayerBreaker,
			Hooks:    Hooks{OnThrottle: func(ThrottleEvent) { hooked.Add(1) }},
		})
		var shed int32
		for range 50 {
			start := time.Now()
			resp, err := c.Get(env.url + "/x")
			if err == nil {
				readAll(t, resp)
				continue
			}
			if !errors.Is(err, ErrThrottled) {
				t.Fatalf("err = %v, want ErrThrottled", err)
			}
			if d := time.Since(start); d != 0 {
				t.Errorf("rejection took %v, want 0 (fail fast)", d)
			}
			shed++
		}
		if shed == 0 || hooked.Load() != shed {
			t.Errorf("%d shed, %d hooked; want some, equal", shed, hooked.Load())
		}
		if got, want := rec.Count(), 50-int(shed); got != want {
			t.Errorf("server got %d requests, want %d", got, want)
		}
	})
}

// TestNewThrottleBeforeBreaker: against an overloaded server that can
// serve 3 requests per 100ms and is offered 10 (it answers 503 to the
// rest), the stack with a Throttle sheds part of the load and keeps its
// breaker closed, so the server still serves about all it can; without
// one, the breaker opens and refuses everything for a while.
func TestNewThrottleBeforeBreaker(t *testing.T) {
	tests := []struct {
		name        string
		throttle    *policy.Throttle
		wantOpen    bool
		wantShed    bool
		minAccepted int
	}{
		{"no throttle: the breaker opens", nil, true, false, 0},
		{"throttle: load shed, breaker closed", &policy.Throttle{}, false, true, 280},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var (
					mu     sync.Mutex
					window time.Time
					served int
				)
				env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					if now := time.Now().Truncate(100 * time.Millisecond); now != window {
						window, served = now, 0
					}
					ok := served < 3
					if ok {
						served++
					}
					mu.Unlock()
					if !ok {
						w.WriteHeader(503)
						return
					}
					w.Write([]byte("ok"))
				}))
				var opened, shed atomic.Int32
				c := newStack(env, Options{
					Throttle: tt.throttle,
					Retry:    policy.Retry{MaxAttempts: 1},
					Hooks: Hooks{
						OnBreakerStateChange: func(_ string, _, to BreakerState) {
							if to == BreakerOpen {
								opened.Add(1)
							}
						},
						OnThrottle: func(ThrottleEvent) { shed.Add(1) },
					},
				})
				accepted := 0
				for range 1000 {
					resp, err := c.Get(env.url + "/x")
					if err == nil {
						if readAll(t, resp) == "ok" {
							accepted++
						}
					}
					time.Sleep(10 * time.Millisecond)
				}
				if got := opened.Load() > 0; got != tt.wantOpen {
					t.Errorf("breaker opened %d times, want opened: %v", opened.Load(), tt.wantOpen)
				}
				if got := shed.Load() > 0; got != tt.wantShed {
					t.Errorf("throttle shed %d requests, want shed: %v", shed.Load(), tt.wantShed)
				}
				t.Logf("%d served, %d shed, breaker opened %d times", accepted, shed.Load(), opened.Load())
				if accepted < tt.minAccepted {
					t.Errorf("%d operations served, want at least %d", accepted, tt.minAccepted)
				}
			})
		})
	}
}

// TestHedgeThrottleCloseIdleConnections: both forward
// CloseIdleConnections to their base, alone and in New.
func TestHedgeThrottleCloseIdleConnections(t *testing.T) {
	tests := []struct {
		name string
		rt   func(http.RoundTripper) http.RoundTripper
	}{
		{"Hedge", func(b http.RoundTripper) http.RoundTripper { return Chain(b, Hedge(policy.Hedge{})) }},
		{"Throttle", func(b http.RoundTripper) http.RoundTripper { return Chain(b, Throttle(nil)) }},
		{"New with both", func(b http.RoundTripper) http.RoundTripper {
			return New(Options{Base: b, Hedge: &policy.Hedge{}, Throttle: &policy.Throttle{}})
		}},
	}
	for _, tt := range tests {
		base := &idleCounter{}
		(&http.Client{Transport: tt.rt(base)}).CloseIdleConnections()
		if base.n != 1 {
			t.Errorf("%s: base CloseIdleConnections called %d times, want 1", tt.name, base.n)
		}
	}
}

// A caller that ends its own request, by a cancel with a cause
// (errgroup.WithContext does, when a sibling fails; net/http then returns
// the cause, not context.Canceled) or by its own deadline, says nothing
// of the server: its requests are not rejections.
func TestThrottleCallerEndNotCounted(t *testing.T) {
	sibling := errors.New("a sibling failed")
	ends := []struct {
		name string
		ctx  func(context.Context) (context.Context, func())
		want error
	}{
		{"cancel with a cause", func(parent context.Context) (context.Context, func()) {
			ctx, cancel := context.WithCancelCause(parent)
			stop := time.AfterFunc(10*time.Millisecond, func() { cancel(sibling) })
			return ctx, func() { stop.Stop(); cancel(nil) }
		}, sibling},
		{"the caller's deadline", func(parent context.Context) (context.Context, func()) {
			return context.WithTimeout(parent, 10*time.Millisecond)
		}, context.DeadlineExceeded},
	}
	for _, end := range ends {
		t.Run(end.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(httptestutil.Hang().Forever()))
				env := newFakeEnv(t, rec)
				th := &policy.Throttle{}
				c := &http.Client{Transport: Chain(env.base, Throttle(th))}
				for range 50 {
					ctx, done := end.ctx(t.Context())
					req, _ := http.NewRequestWithContext(ctx, "GET", env.url+"/x", nil)
					_, err := c.Do(req)
					done()
					if !errors.Is(err, end.want) {
						t.Fatalf("err = %v, want %v: the host was never judged to have rejected anything", err, end.want)
					}
				}
				if got, want := th.Probability(env.url, time.Now()), 0.0; got != want {
					t.Errorf("Probability = %v after 50 requests the caller ended, want %v", got, want)
				}
			})
		})
	}
}
