package transport_test

import (
	"io"
	"net/http"
	"testing"
	"testing/synctest"

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
