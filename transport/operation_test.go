package transport_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/httptestutil"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/transport"
)

// TestOperationOfEveryRetry: a response that passed a Retry layer has an
// operation, whatever the Retry's MaxAttempts and budget and however the
// operation ended; one that passed none has none.
func TestOperationOfEveryRetry(t *testing.T) {
	tests := []struct {
		name   string
		mws    []transport.Middleware
		status int
		want   transport.Operation
		wantOK bool
	}{
		{"Retry, a success", []transport.Middleware{transport.Retry(policy.Retry{})}, 200, transport.Operation{Attempts: 1}, true},
		{"Retry with one attempt, a success", []transport.Middleware{transport.Retry(policy.Retry{MaxAttempts: 1})}, 200, transport.Operation{Attempts: 1}, true},
		{"Retry with one attempt, a failure", []transport.Middleware{transport.Retry(policy.Retry{MaxAttempts: 1})}, 503, transport.Operation{Attempts: 1, Reason: policy.ReasonAttemptsUsed}, true},
		{"Retry with one attempt and a budget, a success", []transport.Middleware{transport.Retry(policy.Retry{MaxAttempts: 1, Budget: &policy.Budget{}})}, 200, transport.Operation{Attempts: 1}, true},
		{"no Retry", []transport.Middleware{transport.Breaker(transport.BreakerSettings{})}, 200, transport.Operation{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := httptestutil.NewHandlerTransport(always(tc.status, "body"))
				bare, err := (&http.Client{Transport: base}).Get("http://api.test/")
				if err != nil {
					t.Fatalf("bare client: %v", err)
				}
				bare.Body.Close()
				c := &http.Client{Transport: transport.Chain(base, tc.mws...)}
				resp, err := c.Get("http://api.test/")
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if got, want := resp.StatusCode, bare.StatusCode; got != want {
					t.Errorf("status = %d, want %d (as the bare client)", got, want)
				}
				if op, ok := transport.OperationOf(resp); op != tc.want || ok != tc.wantOK {
					t.Errorf("OperationOf = %+v, %v; want %+v, %v", op, ok, tc.want, tc.wantOK)
				}
			})
		})
	}
}

// TestOperationOfBaseWithoutResponseRequest: a base RoundTripper that
// leaves Response.Request unset (a fake, an SDK's test transport) still
// gives every response that passed a Retry its operation.
func TestOperationOfBaseWithoutResponseRequest(t *testing.T) {
	tests := []struct {
		name     string
		mws      []transport.Middleware
		statuses []int
		want     transport.Operation
	}{
		{"a success at once", []transport.Middleware{transport.Retry(policy.Retry{})}, []int{200}, transport.Operation{Attempts: 1}},
		{"a success at the second attempt", []transport.Middleware{transport.Retry(policy.Retry{Backoff: policy.Exponential(time.Second, time.Second)})}, []int{503, 200}, transport.Operation{Attempts: 2, Waited: time.Second}},
		{"a failure", []transport.Middleware{transport.Retry(policy.Retry{MaxAttempts: 2, Backoff: policy.Exponential(time.Second, time.Second)})}, []int{503, 503}, transport.Operation{Attempts: 2, Reason: policy.ReasonAttemptsUsed, Waited: time.Second}},
		{"a success beneath a Deadline", []transport.Middleware{transport.Deadline(time.Minute), transport.Retry(policy.Retry{})}, []int{200}, transport.Operation{Attempts: 1}},
		{"a failure with one attempt", []transport.Middleware{transport.Retry(policy.Retry{MaxAttempts: 1})}, []int{503}, transport.Operation{Attempts: 1, Reason: policy.ReasonAttemptsUsed}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var n int
				base := transport.Func(func(r *http.Request) (*http.Response, error) {
					code := tc.statuses[min(n, len(tc.statuses)-1)]
					n++
					return &http.Response{StatusCode: code, Status: http.StatusText(code), Header: http.Header{}, Body: http.NoBody}, nil
				})
				c := &http.Client{Transport: transport.Chain(base, tc.mws...)}
				resp, err := c.Get("http://api.test/")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if got, want := n, len(tc.statuses); got != want {
					t.Errorf("requests sent = %d, want %d", got, want)
				}
				if op, ok := transport.OperationOf(resp); op != tc.want || !ok {
					t.Errorf("OperationOf = %+v, %v; want %+v, true", op, ok, tc.want)
				}
			})
		})
	}
}

// TestRetryOneAttemptReasons: a Retry with MaxAttempts 1 says why its
// operation ended as policy.Retry.Next decides it, the same reason with
// hooks as without (a hook only watches), in RetryError and OperationOf
// alike.
func TestRetryOneAttemptReasons(t *testing.T) {
	tests := []struct {
		name string
		// status is the server's answer; 0 means it holds the request
		// until the caller gives up.
		status int
		method string
		// cancelAfter cancels the caller's context; 0 lets its 10s
		// deadline pass.
		cancelAfter time.Duration
		want        policy.Reason
	}{
		{"a 503", 503, "GET", 0, policy.ReasonAttemptsUsed},
		{"a 404", 404, "GET", 0, policy.ReasonFinal},
		{"a POST's 500", 500, "POST", 0, policy.ReasonNotSafe},
		{"the caller cancels", 0, "GET", time.Second, policy.ReasonCanceled},
		{"the caller's deadline passes", 0, "GET", 0, policy.ReasonDeadline},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				base := httptestutil.NewHandlerTransport(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if tc.status != 0 {
						w.WriteHeader(tc.status)
						return
					}
					<-r.Context().Done()
				}))
				run := func(p policy.Retry) (policy.Reason, string) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if tc.cancelAfter > 0 {
						time.AfterFunc(tc.cancelAfter, cancel)
					}
					req, _ := http.NewRequestWithContext(ctx, tc.method, "http://api.test/", nil)
					resp, err := (&http.Client{Transport: transport.Chain(base, transport.Retry(p))}).Do(req)
					if err != nil {
						var re *transport.RetryError
						if !errors.As(err, &re) {
							t.Fatalf("err = %v, want a *RetryError", err)
						}
						return re.Reason, re.Error()
					}
					resp.Body.Close()
					op, _ := transport.OperationOf(resp)
					return op.Reason, resp.Status
				}
				// The bare client meets the same outcome.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if tc.cancelAfter > 0 {
					time.AfterFunc(tc.cancelAfter, cancel)
				}
				req, _ := http.NewRequestWithContext(ctx, tc.method, "http://api.test/", nil)
				if resp, err := (&http.Client{Transport: base}).Do(req); err == nil {
					resp.Body.Close()
					if got, want := resp.StatusCode, tc.status; got != want {
						t.Errorf("bare client: status %d, want %d", got, want)
					}
				}
				got, gotText := run(policy.Retry{MaxAttempts: 1})
				hooked, hookedText := run(policy.Retry{MaxAttempts: 1, OnGiveUp: func(policy.GiveUpEvent) {}})
				if got != tc.want || hooked != tc.want {
					t.Errorf("reason = %q without hooks, %q with; want %q", got, hooked, tc.want)
				}
				if gotText != hookedText {
					t.Errorf("outcome = %q without hooks, %q with; want the same", gotText, hookedText)
				}
			})
		})
	}
}
