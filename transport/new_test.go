package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// newStack is New over a fake network's transport, with a constant
// backoff so that tests can tell when each attempt happens.
func newStack(env *fakeEnv, o Options) *http.Client {
	o.Base = env.base
	if o.Retry.Backoff == nil {
		o.Retry.Backoff = constant(time.Second)
	}
	return &http.Client{Transport: New(o)}
}

// closeTracker wraps a base transport and counts the response bodies it
// hands out and those closed.
type closeTracker struct {
	base           http.RoundTripper
	opened, closed atomic.Int64
}

func (c *closeTracker) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		c.opened.Add(1)
		resp.Body = &trackedBody{ReadCloser: resp.Body, c: c}
	}
	return resp, err
}

type trackedBody struct {
	io.ReadCloser
	c    *closeTracker
	once sync.Once
}

func (b *trackedBody) Close() error {
	b.once.Do(func() { b.c.closed.Add(1) })
	return b.ReadCloser.Close()
}

// Promise: the caller's request is never modified; every body not handed
// back is closed; the response handed back has a readable body.
func TestNewRoundTripContract(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := newFakeEnv(t, httptestutil.Script(
			httptestutil.Status(503, strings.Repeat("e", 3000)).Times(2),
			httptestutil.Status(201, "created"),
		))
		tracker := &closeTracker{base: env.base}
		c := &http.Client{Transport: New(Options{Base: tracker, Retry: policy.Retry{Backoff: constant(time.Second)}, Idempotency: idempotency.Options{Hosts: []string{"api.test"}}})}
		req, _ := http.NewRequest("POST", env.url+"/charges?x=1", strings.NewReader("amount=10"))
		req.Header.Set("X-Caller", "yes")
		before := req.Clone(context.Background())
		bodyBefore, ctxBefore := req.Body, req.Context()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != "created" {
			t.Errorf("body = %q, want %q", got, "created")
		}
		if !reflect.DeepEqual(req.Header, before.Header) {
			t.Errorf("caller's header changed: %v, want %v", req.Header, before.Header)
		}
		if req.URL.String() != before.URL.String() || req.Method != before.Method || req.Body != bodyBefore || req.Context() != ctxBefore {
			t.Error("caller's request changed")
		}
		if got, want := tracker.closed.Load(), tracker.opened.Load(); got != want || want != 3 {
			t.Errorf("closed %d of %d response bodies, want all 3", got, want)
		}
	})
}

// Promise: cancel the caller's context and the socket closes and every
// sleep wakes now.
func TestNewCancelStopsEverything(t *testing.T) {
	t.Run("during an attempt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rec := httptestutil.NewRecorder(httptestutil.Hang())
			env := newFakeEnv(t, rec)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(2*time.Second, cancel)
			req, _ := http.NewRequestWithContext(ctx, "GET", env.url, nil)
			start := time.Now()
			_, err := newStack(env, Options{}).Do(req)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if got, want := time.Since(start), 2*time.Second; got != want {
				t.Errorf("returned after %v, want %v", got, want)
			}
			synctest.Wait()
			reqs := rec.Requests()
			if len(reqs) != 1 || reqs[0].Disconnected.Sub(start) != 2*time.Second {
				t.Errorf("server saw %+v, want one request disconnected at 2s", reqs)
			}
		})
	})
	t.Run("during a wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			env := newFakeEnv(t, httptestutil.RetryAfterSeconds(503, 30).Forever())
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(2*time.Second, cancel)
			req, _ := http.NewRequestWithContext(ctx, "GET", env.url, nil)
			start := time.Now()
			_, err := newStack(env, Options{}).Do(req)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if got, want := time.Since(start), 2*time.Second; got != want {
				t.Errorf("returned after %v, want %v", got, want)
			}
		})
	})
}

// Promise: a deadline is released when the body is read, not when
// RoundTrip returns: a streaming body stays readable.
func TestNewStreamingBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		want := strings.Repeat("data: token\n\n", 20)
		env := newFakeEnv(t, httptestutil.SlowBody(200, want, 13, 500*time.Millisecond))
		resp, err := newStack(env, Options{AttemptTimeout: time.Minute}).Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, resp); got != want {
			t.Errorf("streamed body = %q, want %q", trunc(got), trunc(want))
		}
	})
}

// Promise: one budget. A wait that cannot end inside the deadline is not
// started.
func TestNewOneBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := httptestutil.NewRecorder(httptestutil.Script(
			httptestutil.Hang(),
			httptestutil.RetryAfterSeconds(503, 8),
			httptestutil.Status(200, "ok"),
		))
		env := newFakeEnv(t, rec)
		c := newStack(env, Options{Timeout: 10 * time.Second, AttemptTimeout: 3 * time.Second})
		start := time.Now()
		resp, err := c.Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		// Attempt 1 times out at 3s, attempt 2 at 4s gets 503 asking for 8s:
		// 12s is past the 10s budget, so the 503 comes back at once.
		if got, want := resp.StatusCode, 503; got != want {
			t.Errorf("status = %d, want %d", got, want)
		}
		if got, want := time.Since(start), 4*time.Second; got != want {
			t.Errorf("took %v, want %v", got, want)
		}
		rec.WantCount(t, 2)
	})
}

// Promise: bodies are replayed byte for byte; a body over the limit is
// sent once and not retried.
func TestNewBodyReplay(t *testing.T) {
	tests := []struct {
		name  string
		body  func() io.Reader
		sends int
	}{
		{"GetBody", func() io.Reader { return strings.NewReader("payload") }, 3},
		{"buffered", func() io.Reader { return onlyReader{strings.NewReader("payload")} }, 3},
		{"over the limit", func() io.Reader { return onlyReader{strings.NewReader(strings.Repeat("p", 300))} }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(httptestutil.Status(503, "").Times(2), httptestutil.Status(200, "")))
				env := newFakeEnv(t, rec)
				req, _ := http.NewRequest("POST", env.url, tt.body())
				want, _ := io.ReadAll(tt.body())
				resp, err := newStack(env, Options{Retry: policy.Retry{MaxBufferedBody: 256}, Idempotency: idempotency.Options{Hosts: []string{"api.test"}}}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				rec.WantCount(t, tt.sends)
				for i, r := range rec.Requests() {
					if string(r.Body) != string(want) {
						t.Errorf("attempt %d body = %q, want %q", i+1, trunc(string(r.Body)), trunc(string(want)))
					}
				}
			})
		})
	}
}

// Promise: failed attempts' bodies are drained and closed so that
// connections are reused.
func TestNewReusesConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		errBody := strings.Repeat("e", 64<<10)
		env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1)%2 == 1 {
				w.WriteHeader(503)
				io.WriteString(w, errBody)
				return
			}
			io.WriteString(w, "ok")
		}))
		c := newStack(env, Options{})
		for range 50 {
			resp, err := c.Get(env.url)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
		}
		if got := env.net.Dials(); got != 1 {
			t.Errorf("connections = %d, want 1", got)
		}
	})
}

// Promise: retry only what can succeed and is safe: a POST is sent again
// when it is vouched for (a host in Idempotency.Hosts) or the outcome
// proves the server did not act on it.
func TestNewRetriesOnlyWhatIsSafe(t *testing.T) {
	tests := []struct {
		name   string
		method string
		o      Options
		first  httptestutil.Step
		sends  int
	}{
		{"POST to a host in Hosts gets a key and is retried", "POST", Options{Idempotency: idempotency.Options{Hosts: []string{"api.test"}}}, httptestutil.Status(503, ""), 2},
		{"POST nobody vouched for is sent once", "POST", Options{}, httptestutil.Status(503, ""), 1},
		{"POST without the key layer is not retried", "POST", Options{Disable: LayerIdempotencyKey, Idempotency: idempotency.Options{Hosts: []string{"api.test"}}}, httptestutil.Status(503, ""), 1},
		{"POST after a 429 is retried", "POST", Options{}, httptestutil.Status(429, ""), 2},
		{"is_retriable false", "GET", Options{}, httptestutil.Problem(503, httptestutil.ProblemBody{Extensions: map[string]any{"is_retriable": false}}), 1},
		{"is_retriable true", "GET", Options{}, httptestutil.Problem(422, httptestutil.ProblemBody{Extensions: map[string]any{"is_retriable": true}}), 2},
		{"404 is final", "GET", Options{}, httptestutil.Status(404, ""), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(tt.first, httptestutil.Status(200, "ok")))
				env := newFakeEnv(t, rec)
				req, _ := http.NewRequest(tt.method, env.url, strings.NewReader("x"))
				resp, err := newStack(env, tt.o).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				rec.WantCount(t, tt.sends)
			})
		})
	}
}

// Promise: an open circuit fails fast with ErrCircuitOpen and is not
// retried; errors keep their cause through http.Client.
func TestNewErrorsKeepTheirCause(t *testing.T) {
	t.Run("circuit open is not retried", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rec := httptestutil.NewRecorder(httptestutil.Status(500, "").Forever())
			env := newFakeEnv(t, rec)
			c := newStack(env, Options{Breaker: BreakerSettings{ConsecutiveFailures: 2, Cooldown: time.Minute}, Disable: LayerRetryBudget})
			start := time.Now()
			// 500, then 500 opens the breaker: Retry does not wait for a
			// third attempt that would be refused, it hands back the 500.
			resp, err := c.Get(env.url)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if got, want := resp.StatusCode, 500; got != want {
				t.Errorf("status = %d, want %d", got, want)
			}
			rec.WantCount(t, 2)
			if got, want := time.Since(start), time.Second; got != want {
				t.Errorf("took %v, want %v (one backoff, no wait for a refused attempt)", got, want)
			}
			// The next operation fails fast, not sent, and is not retried.
			start = time.Now()
			_, err = c.Get(env.url)
			if !errors.Is(err, ErrCircuitOpen) {
				t.Fatalf("err = %v, want ErrCircuitOpen", err)
			}
			rec.WantCount(t, 2)
			if got := time.Since(start); got != 0 {
				t.Errorf("fast failure took %v, want 0", got)
			}
		})
	})
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			env := newFakeEnv(t, httptestutil.Hang())
			_, err := newStack(env, Options{Timeout: 5 * time.Second}).Get(env.url)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want context.DeadlineExceeded", err)
			}
		})
	})
}

// Promise: every layer can be switched off, and what is left still works.
func TestNewLayersOff(t *testing.T) {
	tests := []struct {
		name    string
		disable Layer
		sends   int
		key     bool
	}{
		{"all on", 0, 3, true},
		{"no retry", LayerRetry, 1, true},
		{"no key", LayerIdempotencyKey, 3, false},
		{"only retry", LayerIdempotencyKey | LayerTimeout | LayerRateLimit | LayerBreaker | LayerAttemptTimeout, 3, false},
		{"everything off", ^Layer(0), 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Script(httptestutil.Status(503, "").Times(2), httptestutil.Status(200, "")))
				env := newFakeEnv(t, rec)
				req, _ := http.NewRequest("PUT", env.url, strings.NewReader("x"))
				resp, err := newStack(env, Options{Disable: tt.disable, Idempotency: idempotency.Options{Methods: []string{"PUT"}, Hosts: []string{"*"}}}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				rec.WantCount(t, tt.sends)
				if got := rec.Requests()[0].Header.Get("Idempotency-Key") != ""; got != tt.key {
					t.Errorf("key sent = %v, want %v", got, tt.key)
				}
			})
		})
	}
}

func TestNewRetryBudget(t *testing.T) {
	tests := []struct {
		name       string
		failEach   int64 // every failEach-th request fails
		off        func(*Options)
		minSends   int64
		maxSends   int64
		wantGiveUp bool
	}{
		// 1000 operations, each wanting 3 retries: the budget allows
		// 10 + 20% of 1000.
		{"host failing 100%", 1, nil, 1000, 1000 + 200 + 10, true},
		// About 5% fail, once each: every one is retried and succeeds.
		{"host failing 5%", 20, nil, 1000, 1000 + 60, false},
		// Without the budget every operation makes its 4 attempts.
		{"host failing 100%, Disable: LayerRetryBudget", 1, func(o *Options) { o.Disable |= LayerRetryBudget }, 4000, 4000, true},
		{"host failing 100%, DisableRetryBudget (deprecated)", 1, func(o *Options) { o.DisableRetryBudget = true }, 4000, 4000, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int64
				env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if calls.Add(1)%tt.failEach == 0 {
						w.WriteHeader(503)
					}
				}))
				var giveUps atomic.Int64
				o := Options{
					Retry:   policy.Retry{Backoff: constant(0)},
					Disable: LayerBreaker,
					Hooks:   Hooks{OnGiveUp: func(policy.GiveUpEvent) { giveUps.Add(1) }},
				}
				if tt.off != nil {
					tt.off(&o)
				}
				c := newStack(env, o)
				for range 1000 {
					resp, err := c.Get(env.url)
					if err != nil {
						t.Fatal(err)
					}
					readAll(t, resp)
					time.Sleep(5 * time.Millisecond) // 1000 operations in 5s, inside one budget window
				}
				if got := calls.Load(); got > tt.maxSends || got < tt.minSends {
					t.Errorf("server got %d requests, want between %d and %d", got, tt.minSends, tt.maxSends)
				}
				if got := giveUps.Load() > 0; got != tt.wantGiveUp {
					t.Errorf("gave up on %d operations, want any: %v", giveUps.Load(), tt.wantGiveUp)
				}
			})
		})
	}
}

func TestNewHooksSequence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := newFakeEnv(t, httptestutil.Script(
			httptestutil.Status(503, ""),
			httptestutil.RetryAfterSeconds(429, 5),
			httptestutil.Status(200, "ok"),
		))
		var mu sync.Mutex
		var events []string
		add := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
		hooks := Hooks{
			OnAttempt: func(e policy.AttemptEvent) {
				add("attempt " + itoa(e.Attempt) + " status " + itoa(e.Status) + " in " + e.Duration.String())
			},
			OnRetry: func(e policy.RetryEvent) {
				add("retry " + itoa(e.Attempt) + " after " + e.Wait.String() + " (" + e.Reason + ")")
			},
			OnGiveUp: func(e policy.GiveUpEvent) { add("give up: " + string(e.Reason) + " (" + e.Detail + ")") },
		}
		resp, err := newStack(env, Options{Hooks: hooks}).Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		want := []string{
			"attempt 1 status 503 in 0s",
			"retry 2 after 1s (status 503)",
			"attempt 2 status 429 in 0s",
			"retry 3 after 5s (status 429)",
			"attempt 3 status 200 in 0s",
		}
		if !reflect.DeepEqual(events, want) {
			t.Errorf("events:\n%s\nwant:\n%s", strings.Join(events, "\n"), strings.Join(want, "\n"))
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

// The defaults really build a pooled transport, over loopback.
func TestNewDefaultBase(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	rt := New(Options{})
	defer (&http.Client{Transport: rt}).CloseIdleConnections()
	resp, err := (&http.Client{Transport: rt}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "ok" {
		t.Errorf("body = %q, want ok", got)
	}
}

func TestNewHooksBreakerAndRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := newFakeEnv(t, httptestutil.Script(
			httptestutil.RateLimitHeaders(200, "", httptestutil.Quota{Limit: 10, Remaining: 0, Reset: 5 * time.Second}, httptestutil.FamilyGitHub),
			httptestutil.Status(200, ""),
			httptestutil.Status(500, "").Times(2),
		))
		var mu sync.Mutex
		var events []string
		add := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
		c := newStack(env, Options{
			Retry:   policy.Retry{MaxAttempts: 1},
			Breaker: BreakerSettings{ConsecutiveFailures: 2},
			Hooks: Hooks{
				OnRateLimitWait: func(e ratelimit.WaitEvent) { add("wait " + e.Wait.String() + " " + e.Reason) },
				OnBreakerStateChange: func(key string, from, to BreakerState) {
					add("breaker " + key + " " + from.String() + " -> " + to.String())
				},
				OnGiveUp: func(e policy.GiveUpEvent) { add("give up: " + string(e.Reason) + " (" + e.Detail + ")") },
			},
		})
		for range 4 {
			resp, err := c.Get(env.url)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
		}
		want := []string{
			"wait 5s quota",
			"give up: attempts used (status 500)",
			"breaker " + strings.TrimSuffix(env.url, ":80") + " closed -> open",
			"give up: attempts used (status 500)",
		}
		if !reflect.DeepEqual(events, want) {
			t.Errorf("events:\n%s\nwant:\n%s", strings.Join(events, "\n"), strings.Join(want, "\n"))
		}
	})
}

// A host that hangs opens its breaker through New's defaults: running out
// of the stack's own Timeout counts against the host, running out of the
// caller's deadline does not.
func TestNewHangOpensBreaker(t *testing.T) {
	tests := []struct {
		name       string
		callerDL   time.Duration // 0: none
		wantOpened bool
	}{
		{"stack's timeout", 0, true},
		{"caller's deadline", 3 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := httptestutil.NewRecorder(httptestutil.Hang())
				env := newFakeEnv(t, rec)
				c := newStack(env, Options{Timeout: 5 * time.Second, Breaker: BreakerSettings{ConsecutiveFailures: 2}})
				var err error
				for range 3 {
					ctx := context.Background()
					if tt.callerDL > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, tt.callerDL)
						defer cancel()
					}
					req, _ := http.NewRequestWithContext(ctx, "GET", env.url, nil)
					_, err = c.Do(req)
					if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrCircuitOpen) {
						t.Fatalf("err = %v, want a deadline or an open circuit", err)
					}
				}
				if got := errors.Is(err, ErrCircuitOpen); got != tt.wantOpened {
					t.Errorf("third operation: %v; breaker open = %v, want %v", err, got, tt.wantOpened)
				}
				if tt.wantOpened {
					rec.WantCount(t, 2)
				}
			})
		})
	}
}

func TestDeadlineErrorSaysWhichLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := newFakeEnv(t, httptestutil.Hang())
		_, err := (&http.Client{Transport: Chain(env.base, Deadline(7*time.Second))}).Get(env.url)
		var de *DeadlineError
		if !errors.As(err, &de) || de.Limit != 7*time.Second {
			t.Fatalf("err = %v, want a *DeadlineError of 7s", err)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false", err)
		}
		if !strings.Contains(err.Error(), "transport: deadline of 7s exceeded") {
			t.Errorf("err = %q, want it to name the limit", err)
		}
	})
}

// The default base refuses response headers over 1 MiB, over loopback.
func TestNewDefaultBaseBoundsHeaders(t *testing.T) {
	big := strings.Repeat("h", 2<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("X-Big", big)
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	c := &http.Client{Transport: New(Options{Retry: policy.Retry{MaxAttempts: 1}})}
	defer c.CloseIdleConnections()
	if _, err := c.Get(srv.URL + "/big"); err == nil || !strings.Contains(err.Error(), "header") {
		t.Errorf("2 MiB of headers: err = %v, want the transport to refuse them", err)
	}
	resp, err := c.Get(srv.URL + "/small")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "ok" {
		t.Errorf("body = %q, want ok", got)
	}
}

// New keeps every layer's per-host state in one table, bounded by
// RateLimit.MaxHosts as the Tracker's own would be: with room for two
// hosts, both paused by a 429 (nothing of theirs can go), a third host is
// not tracked, and its next request is sent rather than held.
func TestNewHonoursRateLimitMaxHosts(t *testing.T) {
	tests := []struct {
		maxHosts int
		want     int // requests the third host gets
	}{
		{0, 1}, // 10,000 hosts: the third is paused too, and refused at once
		{2, 2},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.maxHosts), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				sent := map[string]int{}
				base := Func(func(r *http.Request) (*http.Response, error) {
					mu.Lock()
					sent[r.URL.Host]++
					mu.Unlock()
					return &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"30"}}, Body: http.NoBody, Request: r}, nil
				})
				c := &http.Client{Transport: New(Options{Base: base, Timeout: time.Second, RateLimit: ratelimit.Options{MaxHosts: tt.maxHosts}})}
				for _, u := range []string{"http://a.test/", "http://b.test/", "http://c.test/", "http://c.test/"} {
					if resp, err := c.Get(u); err == nil {
						resp.Body.Close()
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if got := sent["c.test"]; got != tt.want {
					t.Errorf("c.test got %d requests, want %d", got, tt.want)
				}
			})
		})
	}
}
