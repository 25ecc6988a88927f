package transport

import (
	"context"
	"errors"
	"io"
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

// Promise: WithAttempts sets the attempts of one call: 1 sends it once
// (no retry, no hedge), more gives it more than the stack's. The bare
// client beside it gets the same final answer.
func TestWithAttempts(t *testing.T) {
	tests := []struct {
		name  string
		n     int // WithAttempts's n; 0: not called
		hedge bool
		want  int // requests the server gets
	}{
		{"stack's setting", 0, false, 4},
		{"retries off", 1, false, 1},
		{"more attempts", 5, false, 5}, // the breaker opens after 5 failures in a row
		{"fewer attempts", 2, false, 2},
		{"retries and hedges off", 1, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				busy := httptestutil.Delay(100*time.Millisecond, httptestutil.Status(503, "busy")).Forever()
				var served atomic.Int32
				env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					served.Add(1)
					busy.ServeHTTP(w, r)
				}))
				o := Options{Retry: policy.Retry{Backoff: constant(10 * time.Millisecond)}}
				if tt.hedge {
					o.Hedge = &policy.Hedge{Delay: 20 * time.Millisecond}
				}
				c := newStack(env, o)
				ctx := context.Background()
				if tt.n != 0 {
					ctx = WithAttempts(ctx, tt.n)
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", env.url, nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				op, _ := OperationOf(resp)
				if got := op.Attempts; resp.StatusCode != 503 || got != tt.want {
					t.Errorf("got %d after %d attempts (%s), want 503 after %d", resp.StatusCode, got, op.Reason, tt.want)
				}
				bare := &http.Client{Transport: env.base}
				bresp, err := bare.Do(req.Clone(context.Background()))
				if err != nil {
					t.Fatalf("bare client: %v", err)
				}
				readAll(t, bresp)
				if bresp.StatusCode != resp.StatusCode {
					t.Errorf("bare client got %d, the stack %d", bresp.StatusCode, resp.StatusCode)
				}
				if got := int(served.Load()) - 1; got != tt.want {
					t.Errorf("server got %d requests from the stack, want %d", got, tt.want)
				}
			})
		})
	}
}

// Promise: an operation that the Timeout ends says how many attempts it
// made and why it ended: a *DeadlineError with Attempts, through which
// errors.As finds Retry's *RetryError.
func TestDeadlineErrorCountsAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := newFakeEnv(t, httptestutil.Script(
			httptestutil.Delay(100*time.Millisecond, httptestutil.Status(503, "busy")).Times(2),
			httptestutil.Hang().Forever(),
		))
		c := newStack(env, Options{Timeout: time.Second, Retry: policy.Retry{Backoff: constant(10 * time.Millisecond)}})
		_, err := c.Get(env.url)
		var de *DeadlineError
		if !errors.As(err, &de) {
			t.Fatalf("err = %v, want a *DeadlineError", err)
		}
		if de.Bound != "Timeout" || de.Attempts != 3 {
			t.Errorf("DeadlineError = {Bound %q, Attempts %d}, want {Timeout, 3}", de.Bound, de.Attempts)
		}
		var re *RetryError
		if !errors.As(err, &re) || re.Attempts != 3 || re.Reason != policy.ReasonDeadline {
			t.Errorf("errors.As(*RetryError) = %v (%+v), want 3 attempts ended by %q", re != nil, re, policy.ReasonDeadline)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false", err)
		}
		if want := "transport: Timeout of 1s exceeded after 3 attempts"; !strings.Contains(err.Error(), want) {
			t.Errorf("err = %q, want it to say %q", err, want)
		}
	})
}

// Promise: no attempt is started with less time left before the
// deadline than the fastest answer of the operation took: it could not
// use it. The last answer is handed back instead, and OnGiveUp says why.
func TestNoAttemptWithTooLittleTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var starts []time.Time
		slow := httptestutil.Delay(400*time.Millisecond, httptestutil.Status(503, "busy")).Forever()
		env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			slow.ServeHTTP(w, r)
		}))
		var giveUp policy.GiveUpEvent
		c := newStack(env, Options{
			Timeout: time.Second,
			Retry:   policy.Retry{Backoff: constant(50 * time.Millisecond)},
			Hooks:   Hooks{OnGiveUp: func(e policy.GiveUpEvent) { giveUp = e }},
		})
		begin := time.Now()
		resp, err := c.Get(env.url)
		if err != nil {
			t.Fatalf("err = %v, want the last 503", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || giveUp.Reason != policy.ReasonTooLittleTime || giveUp.Attempts != 2 {
			t.Errorf("got %d, OnGiveUp (%q after %d), want 503 and (%q after 2)", resp.StatusCode, giveUp.Reason, giveUp.Attempts, policy.ReasonTooLittleTime)
		}
		mu.Lock()
		defer mu.Unlock()
		for i, s := range starts {
			if left := begin.Add(time.Second).Sub(s); left < 400*time.Millisecond {
				t.Errorf("attempt %d started with %v left, less than the 400ms an answer takes", i+1, left)
			}
		}
	})
}
