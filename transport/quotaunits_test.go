package transport

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// An attempt that net/http proves the server did not process (a
// keep-alive connection the server closed before the request was
// written) uses no quota: Retry sends it again at once, for free, and
// the operation costs its quota one unit, not two.
func TestNotProcessedUsesNoQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reset := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
		quota := func(remaining int) *http.Response {
			h := http.Header{}
			h.Set("X-RateLimit-Limit", "10")
			h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
			h.Set("X-RateLimit-Reset", reset)
			return &http.Response{StatusCode: 200, Header: h, Body: http.NoBody}
		}
		closed := errors.New("http: server closed idle connection")
		if _, ok := policy.NotProcessed(closed); !ok {
			t.Fatal("the error is not one that proves nothing was processed")
		}
		calls := 0
		base := Func(func(r *http.Request) (*http.Response, error) {
			calls++
			switch calls {
			case 1:
				return quota(5), nil // the quota becomes known
			case 2:
				return nil, closed
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
		})
		tr := ratelimit.NewTracker(ratelimit.Options{})
		rt := Chain(base, Retry(policy.Retry{}), RateLimitTracker(tr))
		req, _ := http.NewRequest("GET", "http://api.test/x", nil)
		for i := range 2 {
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatalf("operation %d: %v", i+1, err)
			}
			resp.Body.Close()
		}
		q, ok := tr.Quota(req)
		if !ok {
			t.Fatal("no quota known")
		}
		if got, want := q.Remaining, 4; got != want {
			t.Errorf("quota remaining after one more operation = %d, want %d (one unit: the unprocessed attempt used none)", got, want)
		}
	})
}
