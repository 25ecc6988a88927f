package transport

import (
	"net/http"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// A RoundTripper beneath Retry that answers with a request of its own
// (a cache, a fake; not the one it was sent) still lets OperationOf tell
// how the operation went: Retry gives the response's request the
// operation.
func TestOperationOfForeignResponseRequest(t *testing.T) {
	calls := 0
	base := Func(func(r *http.Request) (*http.Response, error) {
		calls++
		own, _ := http.NewRequest(r.Method, r.URL.String(), nil) // not r: no context of the stack's
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{}, Body: http.NoBody, Request: own}, nil
	})
	rt := Chain(base, Retry(policy.Retry{MaxAttempts: 2, Backoff: policy.Exponential(time.Millisecond, time.Millisecond)}))
	req, _ := http.NewRequest("GET", "http://api.test/", nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	op, ok := OperationOf(resp)
	if !ok || op.Attempts != 2 || calls != 2 {
		t.Errorf("OperationOf = %+v, %v after %d calls; want 2 attempts, true", op, ok, calls)
	}
}
