package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// A failed attempt's body that stalls is cut after IdleTimeout, as every
// body is, though the Timeout layer above Retry never sees it: Retry
// reads it (its problem, or a drain before the next attempt) beneath.
// The first attempt answers 503 with 9 of its 100 bytes, then stalls;
// the second answers 200. With the cut, the GET succeeds at 1 s; without
// it, it waited for the caller's hour, or for Timeout's 10 minutes. An
// unvouched POST, which a 503 does not make safe to resend, gets the 503
// back, and reading its body fails with the IdleTimeout's error.
func TestFailedAttemptStalledBodyIsCut(t *testing.T) {
	for _, tc := range []struct {
		name        string
		method      string
		contentType string
		timeout     time.Duration
		wantStatus  int
	}{
		{"drained, Timeout off", "GET", "text/plain", -1, 200},
		{"drained, Timeout 10m", "GET", "text/plain", 10 * time.Minute, 200},
		{"problem, Timeout off", "GET", "application/problem+json", -1, 200},
		{"problem, given back", "POST", "application/problem+json", -1, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var n atomic.Int64
				env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if n.Add(1) == 1 {
						w.Header().Set("Content-Type", tc.contentType)
						w.Header().Set("Content-Length", "100")
						w.WriteHeader(503)
						w.Write([]byte(`{"title":`))
						http.NewResponseController(w).Flush()
						<-r.Context().Done() // the body stalls
						return
					}
					w.Write([]byte("ok"))
				}))
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				c := newStack(env, Options{
					Timeout: tc.timeout, IdleTimeout: time.Second,
					Retry: policy.Retry{Backoff: constant(0)},
				})
				req, _ := http.NewRequestWithContext(ctx, tc.method, env.url, nil)
				start := time.Now()
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("err = %v after %v; want a response", err, time.Since(start))
				}
				body, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if got, want := time.Since(start), time.Second+time.Second/8; got > want {
					t.Errorf("took %v; want the stall cut within %v", got, want)
				}
				if resp.StatusCode != tc.wantStatus {
					t.Fatalf("status = %d; want %d", resp.StatusCode, tc.wantStatus)
				}
				if tc.wantStatus == 200 {
					if rerr != nil || string(body) != "ok" {
						t.Errorf("body = %q, %v; want \"ok\", nil", body, rerr)
					}
					return
				}
				var de *DeadlineError
				if string(body) != `{"title":` || !errors.As(rerr, &de) || de.Bound != boundIdle {
					t.Errorf("body = %q, %v; want the 9 bytes sent, then the IdleTimeout's *DeadlineError", body, rerr)
				}
			})
		})
	}
}
