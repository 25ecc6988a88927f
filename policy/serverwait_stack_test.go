package policy_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

// A newcomer's stack: Retry.MaxRetryAfter of 5 s, and a server whose
// 429 asks for 20 s. The request that got the 429 is handed back at
// once (the ask is over the limit); the next request to the host must
// not wait the 20 s the limit refused: it fails at once too, with the
// server's word, and a request after the ask goes. Before the rule was
// stated once, the first call came back at once and the next blocked
// 20 s (the rate-limit layer's own limit, MaxWait, was a minute).
func TestServerWaitOneLimitInAStack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				w.Header().Set("Retry-After", "20")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			io.WriteString(w, "ok")
		})
		c := &http.Client{Transport: transport.New(transport.Options{
			Base:  httptestutil.NewHandlerTransport(h),
			Retry: policy.Retry{MaxRetryAfter: 5 * time.Second},
		})}
		get := func() (int, error, time.Duration) {
			start := time.Now()
			req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://api.test/v1/items", nil)
			resp, err := c.Do(req)
			if err != nil {
				return 0, err, time.Since(start)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, nil, time.Since(start)
		}
		code, err, d := get()
		if err != nil || code != http.StatusTooManyRequests || d > time.Second {
			t.Fatalf("the first call: %d, %v after %v; want the 429 handed back at once", code, err, d)
		}
		code, err, d = get()
		if d > time.Second {
			t.Errorf("the second call came back after %v; want at once (the 20 s ask is over the 5 s limit)", d)
		}
		if !errors.Is(err, ratelimit.ErrQuotaExhausted) {
			t.Errorf("the second call: %d, %v; want a quota error that says the host is held", code, err)
		}
		time.Sleep(20 * time.Second)
		if code, err, _ := get(); err != nil || code != http.StatusOK {
			t.Errorf("a call after the ask: %d, %v; want 200", code, err)
		}
	})
}

// The rule's numbers, case by case.
func TestServerWaitRule(t *testing.T) {
	for _, tc := range []struct {
		w         policy.ServerWait
		ask       time.Duration
		wantWaits bool
		wantHold  time.Duration
	}{
		{policy.ServerWait{}, 20 * time.Second, true, 20 * time.Second},
		{policy.ServerWait{}, 2 * time.Minute, false, time.Minute},
		{policy.ServerWait{Limit: 5 * time.Second}, 20 * time.Second, false, 20 * time.Second},
		{policy.ServerWait{Limit: 5 * time.Second}, 5 * time.Second, true, 5 * time.Second},
		{policy.ServerWait{Limit: -1}, time.Second, false, time.Second},
		{policy.ServerWait{MaxHold: 10 * time.Second}, 20 * time.Second, true, 10 * time.Second},
		{policy.ServerWait{MaxHold: -1}, 24 * time.Hour, false, 24 * time.Hour},
		{policy.ServerWait{}, -time.Second, true, 0},
	} {
		if got := tc.w.Waits(tc.ask); got != tc.wantWaits {
			t.Errorf("%+v.Waits(%v) = %v, want %v", tc.w, tc.ask, got, tc.wantWaits)
		}
		if got := tc.w.Hold(tc.ask); got != tc.wantHold {
			t.Errorf("%+v.Hold(%v) = %v, want %v", tc.w, tc.ask, got, tc.wantHold)
		}
	}
	for _, tc := range []struct{ retry, wait, want time.Duration }{
		{0, 0, 0},
		{5 * time.Second, 0, 5 * time.Second},
		{0, 5 * time.Second, 5 * time.Second},
		{5 * time.Second, time.Minute, 5 * time.Second},
		{time.Minute, 5 * time.Second, 5 * time.Second},
		{-1, time.Minute, -1},
		{time.Minute, -1, -1},
	} {
		if got := policy.ServerWaitLimit(tc.retry, tc.wait); got != tc.want {
			t.Errorf("ServerWaitLimit(%v, %v) = %v, want %v", tc.retry, tc.wait, got, tc.want)
		}
	}
}
