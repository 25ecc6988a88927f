package policy_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// The decision transport.Retry carries out after each attempt, made by
// hand with Retry.Next: another attempt and after how long, or the end
// of the operation and why. A GET that got a 503 is retried after the
// server's Retry-After, or else after the Backoff curve's wait; a POST
// nobody vouched for is not, since the server may have acted on it,
// unless the outcome proves it did not (a 429); a 404 is final.
func Example() {
	p := policy.Retry{Backoff: policy.Exponential(200*time.Millisecond, time.Second)}
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	respond := func(status int, h ...string) *http.Response {
		resp := &http.Response{StatusCode: status, Header: http.Header{}}
		for i := 0; i+1 < len(h); i += 2 {
			resp.Header.Set(h[i], h[i+1])
		}
		return resp
	}
	get, _ := http.NewRequest(http.MethodGet, "https://api.example.com/v1/items", nil)
	post, _ := http.NewRequest(http.MethodPost, "https://api.example.com/v1/charges", nil)

	for _, o := range []policy.Outcome{
		{Request: get, Response: respond(503, "Retry-After", "3")},
		{Request: get, Response: respond(503)},
		{Request: post, Response: respond(503)},
		{Request: post, Response: respond(429)},
		{Request: get, Response: respond(404)},
	} {
		o.Attempt, o.Now = 1, now
		step := p.Next(policy.State{Outcome: o, SafeToResend: policy.SafeToResend(o.Request, ""), Replayable: true})
		fmt.Printf("%s %d: ", o.Request.Method, o.Response.StatusCode)
		if step.Retry {
			fmt.Printf("retry after %v (%s)\n", step.Wait, step.Decision.Reason)
		} else {
			fmt.Printf("stop: %s (%s)\n", step.Reason, step.Decision.Reason)
		}
	}
	// Output:
	// GET 503: retry after 3s (status 503)
	// GET 503: retry after 200ms (status 503)
	// POST 503: stop: not safe to resend (status 503)
	// POST 429: retry after 200ms (status 429)
	// GET 404: stop: final outcome (status 404)
}

// A host's limit falls when its latency rises past Tolerance times its
// healthy level, and the reference it is judged against does not follow
// the latency up while the host is pressed.
func ExampleConcurrencyLimit() {
	start := time.Now()
	l := (&policy.Concurrency{Initial: 20}).NewLimit(start)
	now := start
	serve := func(rtt time.Duration) {
		for range 20 { // 20 requests at once, each answered after rtt
			if ok, _ := l.Acquire(); !ok {
				l.Full()
			}
		}
		now = now.Add(rtt)
		for range l.InFlight() {
			l.Release(now, rtt, policy.ConcurrencyServed)
		}
	}
	for range 50 {
		serve(20 * time.Millisecond)
	}
	fmt.Println("healthy:", l.Limit() >= 20, l.Reference())
	for range 50 {
		serve(100 * time.Millisecond)
	}
	fmt.Println("slow:", l.Limit() < 10, l.Reference())
	// Output:
	// healthy: true 20ms
	// slow: true 20ms
}
