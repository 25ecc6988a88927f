package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// Four defects once found in RateLimitAware, each through New over an in-memory base
// in a synctest bubble.

// scenarioLoad runs workers goroutines sending GETs to url through c
// until stop is closed.
func scenarioLoad(c *http.Client, url string, workers int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", url, nil)
				if resp, err := c.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	return &wg
}

// perSecond counts the arrivals (offsets from the start) in [from, from+1s).
func perSecond(at []time.Duration, from time.Duration) int {
	n := 0
	for _, d := range at {
		if d >= from && d < from+time.Second {
			n++
		}
	}
	return n
}

// Defect 1: one Retry-After: 1 must not throttle a busy client for good.
// 30 workers against a server that takes 10 ms per request (3000/s); at
// 2 s it answers one 503 with Retry-After: 1. Within 3 s of it the
// client is back above 500 requests a second.
func TestIssue17OneRetryAfterThenFullSpeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		arr := &rlArrivals{start: start}
		var once atomic.Bool
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(10 * time.Millisecond)
			if time.Since(start) >= 2*time.Second && once.CompareAndSwap(false, true) {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			arr.add()
		})
		base := httptestutil.NewHandlerTransport(h)
		c := &http.Client{Transport: New(Options{Base: base})}
		stop := make(chan struct{})
		wg := scenarioLoad(c, "http://api.test/v1/items", 30, stop)
		time.Sleep(8 * time.Second)
		close(stop)
		wg.Wait()
		at := arr.sorted()
		for s := 0; s < 8; s++ {
			t.Logf("second %d: %d requests", s, perSecond(at, time.Duration(s)*time.Second))
		}
		// The 503 came at 2 s: by 5 s, and from then on, full speed.
		for s := 5; s < 8; s++ {
			if got := perSecond(at, time.Duration(s)*time.Second); got <= 500 {
				t.Errorf("second %d: %d requests, want more than 500", s, got)
			}
		}
	})
}

// tokenBucket is a plain limiter: rate per second, burst, 429 with no
// header when empty.
type tokenBucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func (b *tokenBucket) allow(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() {
		b.tokens, b.last = b.burst, now
	}
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Defect 3: a plain 429 (no Retry-After, no quota headers) must slow the
// client down. A limiter of 20/s with a burst of 5; 20 workers through
// New. Within 5 s the client's attempts fall to within 2× of 20/s, and
// it keeps about the limiter's rate of successes.
func TestIssue17PlainLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		attempts, oks := &rlArrivals{start: start}, &rlArrivals{start: start}
		lim := &tokenBucket{rate: 20, burst: 5}
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(5 * time.Millisecond)
			attempts.add()
			if !lim.allow(time.Now()) {
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			oks.add()
		})
		base := httptestutil.NewHandlerTransport(h)
		c := &http.Client{Transport: New(Options{Base: base})}
		stop := make(chan struct{})
		wg := scenarioLoad(c, "http://api.test/v1/items", 20, stop)
		time.Sleep(15 * time.Second)
		close(stop)
		wg.Wait()
		at, ok := attempts.sorted(), oks.sorted()
		for s := 0; s < 15; s++ {
			t.Logf("second %d: %d attempts, %d successes", s, perSecond(at, time.Duration(s)*time.Second), perSecond(ok, time.Duration(s)*time.Second))
		}
		for s := 5; s < 15; s++ {
			if got := perSecond(at, time.Duration(s)*time.Second); got > 40 {
				t.Errorf("second %d: %d attempts, want at most 40 (2× the limiter's 20/s)", s, got)
			}
		}
		if got := len(ok) - perSecond(ok, 0) - perSecond(ok, time.Second) - perSecond(ok, 2*time.Second) -
			perSecond(ok, 3*time.Second) - perSecond(ok, 4*time.Second); got < 10*16 {
			t.Errorf("%d successes from 5 s to 15 s, want at least 160 (80%% of the limiter's 20/s)", got)
		}
	})
}

// Defect 2: quotas that share a host are kept apart. GitHub says search
// is exhausted for 40 s; the next core call, 4000 left, goes at once.
func TestIssue17ResourcesApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var searches atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hd := w.Header()
			hd.Set("X-RateLimit-Limit", "5000")
			if len(r.URL.Path) >= 7 && r.URL.Path[:7] == "/search" {
				searches.Add(1)
				hd.Set("X-RateLimit-Limit", "30")
				hd.Set("X-RateLimit-Remaining", "0")
				hd.Set("X-RateLimit-Reset", strconv.FormatInt(start.Add(40*time.Second).Unix(), 10))
				hd.Set("X-RateLimit-Resource", "search")
				return
			}
			hd.Set("X-RateLimit-Remaining", "4000")
			hd.Set("X-RateLimit-Reset", strconv.FormatInt(start.Add(50*time.Minute).Unix(), 10))
			hd.Set("X-RateLimit-Resource", "core")
		})
		base := httptestutil.NewHandlerTransport(h)
		c := &http.Client{Transport: New(Options{Base: base, Timeout: 10 * time.Second})}
		for _, path := range []string{"/repos/o/r", "/search/code?q=x", "/repos/o/r/issues", "/users/octocat", "/repos/o/r"} {
			t0 := time.Now()
			code, err := rlGet(context.Background(), c, "https://api.github.com"+path)
			if err != nil || code != 200 || time.Since(t0) != 0 {
				t.Errorf("GET %s = %d, %v after %v; want 200 at once", path, code, err, time.Since(t0))
			}
		}
		// A second search waits for its own reset, 40 s: past Timeout,
		// it fails fast.
		t0 := time.Now()
		_, err := rlGet(context.Background(), c, "https://api.github.com/search/code?q=y")
		var qe *ratelimit.QuotaError
		if !errors.As(err, &qe) || time.Since(t0) != 0 || qe.Wait != 40*time.Second {
			t.Errorf("second search: err %v after %v, want a QuotaError for 40s at once", err, time.Since(t0))
		}
		if got := searches.Load(); got != 1 {
			t.Errorf("server saw %d searches, want 1", got)
		}
	})
}

// Defect 4: requests refused by an open breaker use no quota. 20 left,
// reset in 30 s; the breaker opens; 30 refused requests each fail fast
// with ErrCircuitOpen, none waits for the reset.
func TestIssue17RefusedRequestsUseNoQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-RateLimit-Limit", "100")
			w.Header().Set("X-RateLimit-Remaining", "20")
			w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(start.Add(30*time.Second).Unix(), 10))
			w.WriteHeader(http.StatusInternalServerError)
		})
		base := httptestutil.NewHandlerTransport(h)
		c := &http.Client{Transport: New(Options{
			Base:    base,
			Retry:   policy.Retry{MaxAttempts: 1},
			Breaker: BreakerSettings{ConsecutiveFailures: 3, Cooldown: time.Minute},
		})}
		for range 3 {
			if code, err := rlGet(context.Background(), c, "http://api.test/x"); err != nil || code != 500 {
				t.Fatalf("GET = %d, %v; want 500 while the breaker closes", code, err)
			}
		}
		for i := range 30 {
			t0 := time.Now()
			_, err := rlGet(context.Background(), c, "http://api.test/x")
			if !errors.Is(err, ErrCircuitOpen) || time.Since(t0) != 0 {
				t.Fatalf("refused request %d: err %v after %v, want ErrCircuitOpen at once", i, err, time.Since(t0))
			}
		}
	})
}

// A request that never reached the server gives its unit of quota back:
// a failed dial, an invalid request, a context ended before it was
// sent. One unit left; each of these fails, and the unit is still there.
func TestRateLimitAwareCancelsWhatNeverLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		dialFails := atomic.Bool{}
		base := Func(func(r *http.Request) (*http.Response, error) {
			calls.Add(1)
			if policy.CheckRequest(r) != nil { // as net/http refuses it
				return nil, errors.New(`net/http: invalid header field value for "X-Bad"`)
			}
			if dialFails.Load() {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
			}
			h := http.Header{}
			h.Set("X-RateLimit-Limit", "10")
			h.Set("X-RateLimit-Remaining", "1")
			h.Set("X-RateLimit-Reset-After", "60")
			return &http.Response{StatusCode: 200, Header: h, Body: http.NoBody, Request: r}, nil
		})
		rt := RateLimitAware(ratelimit.Options{MaxWait: -1})(base)
		do := func(r *http.Request) error {
			resp, err := rt.RoundTrip(r)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		req := func() *http.Request { r, _ := http.NewRequest("GET", "http://api.test/x", nil); return r }
		if err := do(req()); err != nil {
			t.Fatal(err)
		}
		dialFails.Store(true)
		for range 3 {
			if err := do(req()); err == nil {
				t.Fatal("dial failure: err = nil")
			}
		}
		dialFails.Store(false)
		bad := req()
		bad.Header.Set("X-Bad", "a\nb")
		if err := do(bad); err == nil {
			t.Fatal("invalid request: err = nil")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r := req().WithContext(ctx)
		if err := do(r); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled request: err = %v, want context.Canceled", err)
		}
		if err := do(req()); err != nil {
			t.Errorf("the last unit after requests that never left: err = %v, want nil", err)
		}
		if err := do(req()); !errors.Is(err, ratelimit.ErrQuotaExhausted) {
			t.Errorf("with none left: err = %v, want ErrQuotaExhausted", err)
		}
	})
}

// leakyBucket is nginx's limit_req without nodelay, as
// ngx_http_limit_req_module counts: excess, in requests, drains at rate
// per whole millisecond since the last accepted request; a request adds
// one; when that would exceed burst it is refused (429) and changes
// nothing, else it is served after excess/rate.
type leakyBucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	excess float64
	last   int64 // ms; 0 before the first request
}

// admit returns how long the request is held, and false when refused.
func (b *leakyBucket) admit(now time.Time) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ms := now.UnixMilli()
	if b.last == 0 {
		b.last = ms
		return 0, true
	}
	excess := max(0, b.excess-b.rate*float64(ms-b.last)/1000+1)
	if excess > b.burst {
		return 0, false
	}
	b.excess = excess
	if ms != b.last {
		b.last = ms
	}
	return time.Duration(excess / b.rate * float64(time.Second)), true
}

// TestRateLimitAwareAgainstLeakyBucket is the nginx table of
// TestRateLimitAwareAgainstNginx in memory: 20 goroutines through New for
// 20 s against nginx's limit_req (burst 5), at 20 and 100 r/s, with and
// without Retry-After: 1 on its 429s, each way of the network taking
// 0.1 to 1 ms. The targets: 429s under 5% of attempts, successful
// operations within 10% of the limit. STURDY_SIM_RUN (a duration, say
// 600s) runs longer, to see what the hold and its probes cost.
func TestRateLimitAwareAgainstLeakyBucket(t *testing.T) {
	for _, tc := range []struct {
		rate       float64
		retryAfter bool
	}{{20, false}, {20, true}, {100, false}, {100, true}} {
		name := fmt.Sprintf("%v r/s, Retry-After %v", tc.rate, tc.retryAfter)
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				run := 20 * time.Second
				if d := os.Getenv("STURDY_SIM_RUN"); d != "" {
					run, _ = time.ParseDuration(d)
				}
				lim := &leakyBucket{rate: tc.rate, burst: 5}
				var mu sync.Mutex
				rng := rand.New(rand.NewPCG(1, 17))
				wire := func() {
					mu.Lock()
					d := time.Duration(100+rng.IntN(900)) * time.Microsecond
					mu.Unlock()
					time.Sleep(d)
				}
				var attempts, tooMany, ok atomic.Int64
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					wire()
					attempts.Add(1)
					delay, fits := lim.admit(time.Now())
					if !fits {
						tooMany.Add(1)
						if tc.retryAfter {
							w.Header().Set("Retry-After", "1")
						}
						wire()
						w.WriteHeader(http.StatusTooManyRequests)
						return
					}
					time.Sleep(delay)
					wire()
				})
				c := &http.Client{Transport: New(Options{Base: httptestutil.NewHandlerTransport(h)})}
				rlLoad(c, run, &ok)
				pct := 100 * float64(tooMany.Load()) / float64(attempts.Load())
				okPerS := float64(ok.Load()) / run.Seconds()
				t.Logf("%d attempts, %d 429s (%.1f%%), %.1f ok/s", attempts.Load(), tooMany.Load(), pct, okPerS)
				if pct >= 5 {
					t.Errorf("429s = %.1f%% of attempts, want under 5%%", pct)
				}
				if okPerS < 0.9*tc.rate || okPerS > 1.1*tc.rate {
					t.Errorf("successful operations = %.1f/s, want within 10%% of %v", okPerS, tc.rate)
				}
			})
		})
	}
}
