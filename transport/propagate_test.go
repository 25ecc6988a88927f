package transport

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
)

// TestPropagateDeadline checks the header PropagateDeadline sends: the
// time left until the request context's deadline, in whole milliseconds
// rounded down, and nothing without a deadline.
func TestPropagateDeadline(t *testing.T) {
	tests := []struct {
		name     string
		header   string        // PropagateDeadline's argument
		deadline time.Duration // from now; 0: none
		preset   string        // the caller's own Request-Timeout value
		wantName string
		want     []string // values the server sees
	}{
		{name: "1.5s left", deadline: 1500 * time.Millisecond, wantName: "Request-Timeout", want: []string{"1500"}},
		{name: "rounded down", deadline: 1999*time.Millisecond + 999*time.Microsecond, wantName: "Request-Timeout", want: []string{"1999"}},
		{name: "under 1ms", deadline: 999 * time.Microsecond, wantName: "Request-Timeout", want: []string{"0"}},
		{name: "no deadline", wantName: "Request-Timeout", want: nil},
		{name: "no deadline keeps the caller's", preset: "250", wantName: "Request-Timeout", want: []string{"250"}},
		{name: "deadline replaces the caller's", deadline: time.Second, preset: "250", wantName: "Request-Timeout", want: []string{"1000"}},
		{name: "other header", header: "connect-timeout-ms", deadline: 2 * time.Second, wantName: "Connect-Timeout-Ms", want: []string{"2000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var got []string
				base := Func(func(r *http.Request) (*http.Response, error) {
					got = r.Header.Values(tt.wantName)
					return &http.Response{StatusCode: 204, Body: http.NoBody, Request: r}, nil
				})
				rt := PropagateDeadline(tt.header)(base)
				ctx := t.Context()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://api.test/", nil)
				if tt.preset != "" {
					req.Header.Set("Request-Timeout", tt.preset)
				}
				before := req.Header.Clone()
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if !slices.Equal(got, tt.want) {
					t.Errorf("server saw %s: %q, want %q", tt.wantName, got, tt.want)
				}
				if len(req.Header) != len(before) || req.Header.Get("Request-Timeout") != before.Get("Request-Timeout") {
					t.Errorf("caller's header changed to %v, want %v", req.Header, before)
				}
			})
		})
	}
}

// TestPropagateDeadlinePerAttempt checks that, in New, each attempt sends
// what is left of its own deadline: the first the AttemptTimeout, the
// retry what remains of the operation's Timeout after the first attempt
// hung and the backoff.
func TestPropagateDeadlinePerAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu  sync.Mutex
			got []string
		)
		env := newFakeEnv(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got = append(got, r.Header.Get("Request-Timeout"))
			n := len(got)
			mu.Unlock()
			if n == 1 {
				<-r.Context().Done() // hangs until the attempt is cut
				return
			}
			w.WriteHeader(204)
		}))
		c := newStack(env, Options{
			Timeout: 3 * time.Second, AttemptTimeout: 2 * time.Second, PropagateDeadline: true,
			Retry: policy.Retry{Backoff: constant(500 * time.Millisecond)},
		})
		resp, err := c.Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		// Attempt 1 at 0 s: min(3 s, 2 s) left. It is cut at 2 s; the
		// backoff is 500 ms; attempt 2 at 2.5 s has 500 ms left.
		if want := []string{"2000", "500"}; !slices.Equal(got, want) {
			t.Errorf("attempts sent Request-Timeout %q, want %q", got, want)
		}
	})
}

// TestPropagateDeadlineToHandler shows both ends together: New with
// PropagateDeadline under a 3 s Timeout, and a server behind
// idempotency.DeadlineHandler. The server's handler runs with a context
// whose deadline is the caller's, and whose cause, once it passes, says
// so. (The Timeout is 3 s and 0.5 ms: the header rounds down to 3000, so
// the server's deadline comes first and its handler can still answer.)
func TestPropagateDeadlineToHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			gotDeadline time.Time
			hasDeadline bool
			gotCause    error
		)
		h := idempotency.DeadlineHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			gotDeadline, hasDeadline = r.Context().Deadline()
			<-r.Context().Done() // works until nobody waits
			gotCause = context.Cause(r.Context())
			w.WriteHeader(http.StatusGatewayTimeout)
		}), idempotency.DeadlineOptions{})
		env := newFakeEnv(t, h)
		c := newStack(env, Options{
			Timeout: 3*time.Second + 500*time.Microsecond, PropagateDeadline: true,
			Retry: policy.Retry{MaxAttempts: 1},
		})
		start := time.Now()
		resp, err := c.Get(env.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("got status %d, want %d", resp.StatusCode, http.StatusGatewayTimeout)
		}
		if want := start.Add(3 * time.Second); !hasDeadline || !gotDeadline.Equal(want) {
			t.Errorf("handler's context deadline = %v (set: %v), want the caller's %v", gotDeadline, hasDeadline, want)
		}
		if gotCause != idempotency.ErrCallerDeadline {
			t.Errorf("handler's context cause = %v, want %v", gotCause, idempotency.ErrCallerDeadline)
		}
	})
}
