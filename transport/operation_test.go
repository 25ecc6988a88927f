package transport_test

import (
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
