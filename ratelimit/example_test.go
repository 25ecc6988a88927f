package ratelimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/ratelimit"
)

func ExampleParseHeaders() {
	// A response from an OpenAI-style API, as net/http hands it over.
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "60")
	h.Set("x-ratelimit-remaining-requests", "59")
	h.Set("x-ratelimit-reset-requests", "1s")
	h.Set("x-ratelimit-limit-tokens", "150000")
	h.Set("x-ratelimit-remaining-tokens", "0")
	h.Set("x-ratelimit-reset-tokens", "6m0s")

	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	q, ok := ratelimit.ParseHeaders(h, now)
	fmt.Println(ok, q.Family, q.Policy, q.Limit, q.Remaining, q.Reset.Sub(now))
	// Output: true openai tokens 150000 0 6m0s
}

func ExampleParseHeaders_structured() {
	// The current IETF draft: two policies, the daily one nearly spent.
	h := http.Header{}
	h.Set("RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`)
	h.Set("RateLimit", `"burst";r=50;t=30, "daily";r=5;t=3600`)

	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	q, _ := ratelimit.ParseHeaders(h, now)
	fmt.Printf("%s policy %q: %d of %d left per %v, resets in %v\n",
		q.Family, q.Policy, q.Remaining, q.Limit, q.Window, q.Reset.Sub(now))
	// Output: ratelimit policy "daily": 5 of 1000 left per 24h0m0s, resets in 1h0m0s
}

func ExampleTracker() {
	// A Tracker is what transport.RateLimitAware uses; here it is driven
	// by hand. The server said: 2 of 10 left, window resets in 30 s.
	tr := ratelimit.NewTracker(ratelimit.Options{MaxWait: 5 * time.Second})
	req, _ := http.NewRequest("GET", "https://api.example.com/v1/items", nil)
	h := http.Header{}
	h.Set("X-RateLimit-Limit", "10")
	h.Set("X-RateLimit-Remaining", "2")
	h.Set("X-RateLimit-Reset", "30")
	tr.Observe(req, h)

	for i := 1; i <= 3; i++ {
		res, err := tr.Reserve(req)
		res.Settle(nil) // sent; its response, if any, would go here
		var qe *ratelimit.QuotaError
		if errors.As(err, &qe) {
			// The reset is 30 s away, past MaxWait: fail now, not in 5 s.
			fmt.Printf("request %d: %v for %s, %s\n", i, errors.Is(err, ratelimit.ErrQuotaExhausted), qe.Key, qe.Reason)
			continue
		}
		fmt.Printf("request %d: %v\n", i, err)
	}
	// Output:
	// request 1: <nil>
	// request 2: <nil>
	// request 3: true for https://api.example.com, quota
}
