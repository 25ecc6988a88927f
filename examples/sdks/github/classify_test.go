package github

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

func TestClassify(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	reset := strconv.FormatInt(now.Add(90*time.Second).Unix(), 10)
	tests := []struct {
		name      string
		method    string
		status    int
		header    []string
		wantRetry bool
		wantWait  time.Duration
		wantHas   bool
	}{
		{"403 primary limit", "GET", 403, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", reset}, true, 90 * time.Second, true},
		{"429 primary limit on a POST", "POST", 429, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", reset}, true, 90 * time.Second, true},
		{"403 secondary limit", "POST", 403, []string{"Retry-After", "30"}, true, 30 * time.Second, true},
		{"403 primary limit, garbage reset: retried on backoff", "GET", 403, []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "soon"}, true, 0, false},
		{"403 garbage Retry-After, quota left: a plain 403", "GET", 403, []string{"Retry-After", "soon", "X-RateLimit-Remaining", "12"}, false, 0, false},
		{"403 permission", "GET", 403, []string{"X-RateLimit-Remaining", "4999"}, false, 0, false},
		{"502 on a GET: the default", "GET", 502, nil, true, 0, false},
		{"502 on a POST: the default, not retried", "POST", 502, nil, false, 0, false},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, "https://api.github.com/repos/o/r", nil)
		h := http.Header{}
		for i := 0; i+1 < len(tt.header); i += 2 {
			h.Set(tt.header[i], tt.header[i+1])
		}
		d := Classify(policy.Outcome{
			Request:  req,
			Response: &http.Response{StatusCode: tt.status, Header: h},
			Attempt:  1,
			Now:      now,
		})
		// The request is sent again when the outcome is retriable and it is
		// safe to: a GET, or a rate-limit refusal (GitHub did not act).
		retry := d.Retry && (policy.SafeToResend(req, "") || d.DidNotAct)
		if retry != tt.wantRetry || d.HasRetryAfter != tt.wantHas || d.RetryAfter != tt.wantWait {
			t.Errorf("%s: got retry %v, wait %v (%v), reason %q; want retry %v, wait %v (%v)",
				tt.name, retry, d.RetryAfter, d.HasRetryAfter, d.Reason, tt.wantRetry, tt.wantWait, tt.wantHas)
		}
	}
}
