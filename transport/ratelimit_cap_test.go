package transport

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// A year-long Retry-After on a 503 holds the host for MaxPause only: the
// requests that come during the hold fail at once (the server's own end
// is past their budget) with an error that says what paused the host and
// for how long it is held; the first request after the hold reaches the
// server, which still counts: its answer holds the host again.
func TestRateLimitAwareYearLongRetryAfterHeldForTheCap(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxPause time.Duration
		hold     time.Duration
	}{
		{"default", 0, ratelimit.DefaultMaxPause},
		{"MaxPause 5s", 5 * time.Second, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hits atomic.Int32
				var down atomic.Bool
				down.Store(true)
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					hits.Add(1)
					if down.Load() {
						w.Header().Set("Retry-After", "31536000")
						w.WriteHeader(http.StatusServiceUnavailable)
					}
				})
				c, url, stop := rlServer(h, RateLimitAware(ratelimit.Options{MaxPause: tc.maxPause}))
				defer stop()
				if code, err := rlGet(context.Background(), c, url+"/a"); err != nil || code != 503 {
					t.Fatalf("first GET = %d, %v; want the 503", code, err)
				}
				// During the hold, any path: refused at once, and said why.
				time.Sleep(tc.hold - time.Millisecond)
				start := time.Now()
				_, err := rlGet(context.Background(), c, url+"/b")
				if took := time.Since(start); took != 0 {
					t.Errorf("refused GET took %v, want 0", took)
				}
				var qe *ratelimit.QuotaError
				if !errors.As(err, &qe) {
					t.Fatalf("GET during the hold: err = %v, want a *ratelimit.QuotaError", err)
				}
				want := "paused by the server's Retry-After on a 503 for 8760h0m0s; holding " + tc.hold.String() + " (resumes in 1ms)"
				if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "quota exhausted") {
					t.Errorf("err = %q, want it to say %q and not that a quota is exhausted", err, want)
				}
				if qe.Reason != ratelimit.ReasonRetryAfter || qe.Status != 503 || qe.Hold != tc.hold || qe.RetryAfter != 365*24*time.Hour {
					t.Errorf("QuotaError = %+v, want reason %q, status 503, Hold %v, RetryAfter 8760h", qe, ratelimit.ReasonRetryAfter, tc.hold)
				}
				if got := hits.Load(); got != 1 {
					t.Errorf("server saw %d requests during the hold, want 1", got)
				}
				// After the hold, a request goes to ask again; the server
				// still says a year, and the host is held again.
				time.Sleep(time.Millisecond)
				if code, err := rlGet(context.Background(), c, url+"/c"); err != nil || code != 503 {
					t.Fatalf("GET after the hold = %d, %v; want it sent, and the 503", code, err)
				}
				if _, err := rlGet(context.Background(), c, url+"/d"); !errors.Is(err, ratelimit.ErrQuotaExhausted) {
					t.Errorf("GET right after the second 503: err = %v, want it held again", err)
				}
				// The server is back: the next hold ends, and requests go.
				down.Store(false)
				time.Sleep(tc.hold)
				if code, err := rlGet(context.Background(), c, url+"/e"); err != nil || code != 200 {
					t.Errorf("GET once the server is back = %d, %v; want 200", code, err)
				}
				if got := hits.Load(); got != 3 {
					t.Errorf("server saw %d requests, want 3", got)
				}
			})
		})
	}
}

// A quota whose reset is a day away holds its host for MaxPause, then
// lets one request ask again; the refusals in between say both the reset
// and the hold.
func TestRateLimitAwareDayLongQuotaHeldForTheCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hits atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-RateLimit-Limit", "100")
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset", "86400")
			if hits.Add(1) > 1 { // the last unit went to the first
				w.WriteHeader(http.StatusTooManyRequests)
			}
		})
		c, url, stop := rlServer(h, RateLimitAware(ratelimit.Options{}))
		defer stop()
		if code, err := rlGet(context.Background(), c, url); err != nil || code != 200 {
			t.Fatalf("first GET = %d, %v; want 200", code, err)
		}
		_, err := rlGet(context.Background(), c, url)
		if want := "quota exhausted for http://api.test (resets in 24h0m0s; holding 1m0s)"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to say %q", err, want)
		}
		time.Sleep(time.Minute)
		if code, err := rlGet(context.Background(), c, url); err != nil || code != 429 {
			t.Errorf("GET after the hold = %d, %v; want it sent, and the 429", code, err)
		}
		if _, err := rlGet(context.Background(), c, url); !errors.Is(err, ratelimit.ErrQuotaExhausted) {
			t.Errorf("GET right after: err = %v, want the quota to hold again", err)
		}
		if got := hits.Load(); got != 2 {
			t.Errorf("server saw %d requests, want 2", got)
		}
	})
}

// The call after a Retry-After was waited out goes at once: the retry of
// the request told to pause is not counted twice in the release spread,
// which made the next call wait a slot (50 ms) for nobody.
func TestRateLimitAwareNoReleaseWaitAfterRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		})
		var waits []string
		c := &http.Client{Transport: New(Options{
			Base:  httptestutil.NewHandlerTransport(h),
			Hooks: Hooks{OnRateLimitWait: func(e ratelimit.WaitEvent) { waits = append(waits, e.Reason+" "+e.Wait.String()) }},
		})}
		for i, want := range []time.Duration{time.Second, 0, 0} {
			start := time.Now()
			code, err := rlGet(context.Background(), c, "http://api.test/x")
			if took := time.Since(start); err != nil || code != 200 || took != want {
				t.Errorf("call %d = %d, %v after %v; want 200 after %v", i, code, err, took, want)
			}
		}
		if len(waits) != 0 {
			t.Errorf("rate-limit waits = %q, want none (the Retry layer waits out the Retry-After)", waits)
		}
	})
}
