package transport_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

// foreignKey is the context key of cloner, a RoundTripper sturdy did not
// write.
type foreignKey struct{}

// cloner is what otelhttp, oauth2 and header injectors do between two
// layers: the request is cloned with a context of its own.
func cloner(next http.RoundTripper) http.RoundTripper {
	return transport.Func(func(r *http.Request) (*http.Response, error) {
		ctx := context.WithValue(r.Context(), foreignKey{}, r.URL.Path)
		c := r.Clone(ctx)
		c.Header.Set("X-Foreign", "1")
		return next.RoundTrip(c)
	})
}

// stackBuilders are the three ways to build the same stack: New, a Chain
// of its layers, and that Chain with a cloner between every two layers.
var stackBuilders = []struct {
	name  string
	build func(transport.Options) http.RoundTripper
}{
	{"New", transport.New},
	{"Chain", func(o transport.Options) http.RoundTripper {
		return transport.Chain(o.Base, transport.Layers(o)...)
	}},
	{"Chain with foreign wrappers", func(o transport.Options) http.RoundTripper {
		var mws []transport.Middleware
		for _, mw := range transport.Layers(o) {
			mws = append(mws, cloner, mw)
		}
		return transport.Chain(o.Base, append(mws, cloner)...)
	}},
}

// stackResult is what one scenario shows: what each call returned, what
// the server was sent, and how long it all took on the bubble's clock.
type stackResult struct {
	calls   []string // per call: "200 ok (1 attempt)", or the error text
	sent    int64    // requests the server got
	elapsed time.Duration
}

// TestStacksKeepTheSamePromises runs each layer's behaviour through New,
// through a Chain of the same layers, and through that Chain with a
// request-cloning RoundTripper between every two layers: each gives the
// same outcomes, the same requests at the server, and the same time.
func TestStacksKeepTheSamePromises(t *testing.T) {
	tests := []struct {
		name   string
		opts   transport.Options
		script func() http.Handler
		calls  []func(*http.Client) (*http.Response, error)
		want   stackResult
	}{
		{
			name: "503 then 200: retried after its backoff",
			opts: transport.Options{Retry: policy.Retry{Backoff: policy.Exponential(time.Second, time.Second)}},
			script: func() http.Handler {
				return httptestutil.Script(httptestutil.Status(503, "busy"), httptestutil.Status(200, "ok"))
			},
			calls: []func(*http.Client) (*http.Response, error){get("/a")},
			want:  stackResult{calls: []string{"200 ok (2 attempts, waited 1s)"}, sent: 2, elapsed: time.Second},
		},
		{
			name: "a breaker that opens: no wait only to be refused",
			opts: transport.Options{
				Retry:   policy.Retry{MaxAttempts: 3, Backoff: policy.Exponential(time.Second, time.Second)},
				Breaker: transport.BreakerSettings{ConsecutiveFailures: 1, Cooldown: 10 * time.Second},
			},
			script: func() http.Handler { return always(503, "down") },
			calls:  []func(*http.Client) (*http.Response, error){get("/a"), get("/b")},
			want: stackResult{calls: []string{
				"503 down (1 attempt, next attempt refused)",
				"transport: not sent (circuit open): circuit open for http://api.test (retry in …)",
			}, sent: 1},
		},
		{
			name: "a server's pause longer than the deadline: no wait only to fail",
			opts: transport.Options{Timeout: 10 * time.Second},
			script: func() http.Handler {
				return httptestutil.Script(httptestutil.RetryAfterSeconds(503, 30), httptestutil.Status(200, "ok"))
			},
			calls: []func(*http.Client) (*http.Response, error){get("/a")},
			want:  stackResult{calls: []string{"503 Service Unavailable (1 attempt, wait would pass the deadline)"}, sent: 1},
		},
		{
			name: "an unvouched POST that failed is sent once",
			opts: transport.Options{},
			script: func() http.Handler {
				return httptestutil.Script(httptestutil.Status(500, "oops"), httptestutil.Status(200, "ok"))
			},
			calls: []func(*http.Client) (*http.Response, error){post("/pay", "")},
			want:  stackResult{calls: []string{"500 oops (1 attempt, not safe to resend)"}, sent: 1},
		},
		{
			name: "a vouched POST is retried with one key",
			opts: transport.Options{Retry: policy.Retry{Backoff: policy.Exponential(time.Second, time.Second)}},
			script: func() http.Handler {
				return sameKey(httptestutil.Script(httptestutil.Status(500, "oops"), httptestutil.Status(200, "ok")))
			},
			calls: []func(*http.Client) (*http.Response, error){post("/pay", "order-1")},
			want:  stackResult{calls: []string{"200 ok (2 attempts, waited 1s)"}, sent: 2, elapsed: time.Second},
		},
		{
			name: "with a Throttle, an overloaded server's 503s do not open the breaker",
			opts: transport.Options{
				Retry:    policy.Retry{MaxAttempts: 1},
				Breaker:  transport.BreakerSettings{ConsecutiveFailures: 1, Cooldown: 10 * time.Second},
				Throttle: &policy.Throttle{K: 1000}, // sheds nothing here
			},
			script: func() http.Handler { return always(503, "busy") },
			calls:  []func(*http.Client) (*http.Response, error){get("/a"), get("/b"), get("/c")},
			want: stackResult{calls: []string{
				"503 busy (1 attempt, attempts used)", "503 busy (1 attempt, attempts used)", "503 busy (1 attempt, attempts used)",
			}, sent: 3},
		},
		{
			name: "a hedge shares Retry's budget: none is sent when it is spent",
			opts: transport.Options{
				Retry: policy.Retry{MaxAttempts: 1, Budget: &policy.Budget{Ratio: 0.0001, MinRetries: -1}},
				Hedge: &policy.Hedge{Delay: 100 * time.Millisecond},
			},
			script: func() http.Handler {
				return httptestutil.Script(httptestutil.Delay(time.Second, httptestutil.Status(200, "ok")))
			},
			calls: []func(*http.Client) (*http.Response, error){get("/a")},
			want:  stackResult{calls: []string{"200 ok (1 attempt)"}, sent: 1, elapsed: time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var results []stackResult
			for _, sb := range stackBuilders {
				synctest.Test(t, func(t *testing.T) {
					var sent atomic.Int64
					h := tt.script()
					o := tt.opts
					o.Base = httptestutil.NewHandlerTransport(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						sent.Add(1)
						h.ServeHTTP(w, r)
					}))
					c := &http.Client{Transport: sb.build(o)}
					start := time.Now()
					var got stackResult
					for _, call := range tt.calls {
						got.calls = append(got.calls, describe(call(c)))
					}
					got.elapsed = time.Since(start)
					got.sent = sent.Load()
					results = append(results, got)
				})
			}
			for i, got := range results {
				if !sameResult(got, tt.want) {
					t.Errorf("%s: got %+v, want %+v", stackBuilders[i].name, got, tt.want)
				}
			}
		})
	}
}

// The promise of Retry's doc, with two public layers and a cloner
// between them: a Retry does not wait when the Breaker beneath will
// still be open.
func TestChainRetryOverBreakerDoesNotWaitToBeRefused(t *testing.T) {
	for _, between := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var sent atomic.Int64
			base := httptestutil.NewHandlerTransport(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sent.Add(1)
				w.WriteHeader(503)
			}))
			mws := []transport.Middleware{
				transport.Retry(policy.Retry{MaxAttempts: 3, Backoff: policy.Exponential(time.Second, time.Second)}),
				transport.Breaker(transport.BreakerSettings{ConsecutiveFailures: 1, Cooldown: 10 * time.Second}),
			}
			if between {
				mws = []transport.Middleware{mws[0], cloner, mws[1]}
			}
			c := &http.Client{Transport: transport.Chain(base, mws...)}
			start := time.Now()
			resp, err := c.Get("http://api.test/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got, want := time.Since(start), time.Duration(0); got != want {
				t.Errorf("cloner between: %v: took %v, want %v (no wait only to be refused)", between, got, want)
			}
			if got, want := sent.Load(), int64(1); got != want {
				t.Errorf("cloner between: %v: server got %d requests, want %d", between, got, want)
			}
			op, ok := transport.OperationOf(resp)
			if want := (transport.Operation{Attempts: 1, Reason: policy.ReasonRefused}); !ok || op != want {
				t.Errorf("cloner between: %v: OperationOf = %+v, %v; want %+v, true", between, op, ok, want)
			}
		})
	}
}

// A refusal before any attempt is no attempt: 0 attempts, a reason that
// names the refusal, the sentinel through http.Client, each prefix once;
// with the default Retry and with one attempt alike.
func TestRefusalBeforeAnyAttemptIsNotAnAttempt(t *testing.T) {
	tests := []struct {
		name     string
		opts     transport.Options
		server   http.Handler
		want     policy.Reason
		sentinel error
	}{
		{
			name:     "an open breaker",
			opts:     transport.Options{Breaker: transport.BreakerSettings{ConsecutiveFailures: 1, Cooldown: time.Minute}},
			server:   always(500, "down"),
			want:     policy.ReasonCircuitOpen,
			sentinel: transport.ErrCircuitOpen,
		},
		{
			name:     "a host paused past the deadline",
			opts:     transport.Options{Timeout: 5 * time.Second},
			server:   http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Header().Set("Retry-After", "30"); w.WriteHeader(503) }),
			want:     policy.ReasonRateLimited,
			sentinel: ratelimit.ErrQuotaExhausted,
		},
		{
			name:     "the throttle",
			opts:     transport.Options{Throttle: &policy.Throttle{K: 0.001, MinRequests: -1}, Disable: transport.LayerBreaker},
			server:   always(500, "down"),
			want:     policy.ReasonThrottled,
			sentinel: transport.ErrThrottled,
		},
	}
	for _, tt := range tests {
		for _, attempts := range []int{0, 1} {
			t.Run(tt.name+"/MaxAttempts="+strconv.Itoa(attempts), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					o := tt.opts
					o.Base = httptestutil.NewHandlerTransport(tt.server)
					o.Retry = policy.Retry{MaxAttempts: attempts, Backoff: policy.Exponential(time.Millisecond, time.Millisecond)}
					c := &http.Client{Transport: transport.New(o)}
					var re *transport.RetryError
					var err error
					for range 200 { // the throttle rejects at random: until it rejects a first attempt
						var resp *http.Response
						resp, err = c.Get("http://api.test/")
						if err == nil {
							resp.Body.Close()
							continue
						}
						if errors.As(err, &re) && re.Attempts == 0 {
							break
						}
					}
					if re == nil || re.Attempts != 0 {
						t.Fatalf("got %v, want a *RetryError with 0 attempts", err)
					}
					if re.Reason != tt.want {
						t.Errorf("reason %q, want %q", re.Reason, tt.want)
					}
					if !errors.Is(err, tt.sentinel) {
						t.Errorf("errors.Is(%v, %v) = false", err, tt.sentinel)
					}
					if want := "transport: not sent (" + string(tt.want) + "): "; !strings.Contains(err.Error(), want) {
						t.Errorf("%q does not say %q", err, want)
					}
					if got := strings.Count(err.Error(), "transport:"); got != 1 {
						t.Errorf("%q says \"transport:\" %d times, want once", err, got)
					}
				})
			})
		}
	}
}

// always answers every request with code and body.
func always(code int, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
		io.WriteString(w, body)
	})
}

func get(path string) func(*http.Client) (*http.Response, error) {
	return func(c *http.Client) (*http.Response, error) { return c.Get("http://api.test" + path) }
}

func post(path, key string) func(*http.Client) (*http.Response, error) {
	return func(c *http.Client) (*http.Response, error) {
		ctx := context.Background()
		if key != "" {
			ctx = idempotency.WithKey(ctx, key)
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://api.test"+path, strings.NewReader(`{"amount":1}`))
		return c.Do(req)
	}
}

// sameKey fails a request whose Idempotency-Key differs from the first
// one's, and one that came through a cloner without its header.
func sameKey(h http.Handler) http.Handler {
	var first atomic.Pointer[string]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := r.Header.Get("Idempotency-Key")
		first.CompareAndSwap(nil, &k)
		if k == "" || *first.Load() != k {
			w.WriteHeader(http.StatusTeapot)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// describe says what a call returned: the status, body and operation, or
// the error.
func describe(resp *http.Response, err error) string {
	if err != nil {
		// http.Client's *url.Error adds the method and URL: keep the cause.
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) {
			err = ue.Unwrap()
		}
		s := err.Error()
		// The breaker's cooldown is jittered: its time left is not compared.
		if i := strings.Index(s, "(retry in "); i >= 0 {
			s = s[:i] + "(retry in …)"
		}
		return s
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	s := resp.Status[:3] + " " + string(b)
	op, ok := transport.OperationOf(resp)
	if !ok {
		return s + " (no operation)"
	}
	s += " (" + plural(op.Attempts, "attempt")
	if op.Reason != "" {
		s += ", " + string(op.Reason)
	}
	if op.Waited > 0 {
		s += ", waited " + op.Waited.String()
	}
	return s + ")"
}

func plural(n int, what string) string {
	s := strconv.Itoa(n) + " " + what
	if n != 1 {
		s += "s"
	}
	return s
}

func sameResult(a, b stackResult) bool {
	if a.sent != b.sent || a.elapsed != b.elapsed || len(a.calls) != len(b.calls) {
		return false
	}
	for i := range a.calls {
		if a.calls[i] != b.calls[i] {
			return false
		}
	}
	return true
}
