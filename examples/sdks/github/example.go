// Package github shows sturdy under go-github
// (github.com/google/go-github/v84): GitHub's x-ratelimit-* headers and
// its rate-limit rejections (403 or 429) are honoured by waiting for the
// reset inside the call's budget, instead of go-github failing fast.
package github

import (
	"net/http"
	"strings"

	gh "github.com/google/go-github/v84/github"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
	"github.com/sturdyhttp/sturdy/transport"
)

// NewClient returns a go-github client whose HTTP calls go through
// sturdy's stack, [transport.New] built from o, fitted to GitHub:
//
//   - go-github's own rate-limit check is switched off
//     (Client.DisableRateLimitCheck): it fails a call at once with a
//     *github.RateLimitError while it believes the quota is spent,
//     where sturdy waits for X-RateLimit-Reset when the reset is inside
//     the call's budget (ratelimit.Options.MaxWait, 60s by default). The
//     headers are still parsed into each Response.Rate.
//   - [Classify] retries GitHub's rate-limit rejections (403 or 429 with
//     X-RateLimit-Remaining: 0 or Retry-After), waiting for the reset.
//   - the IdempotencyKey layer is off: GitHub does not deduplicate by
//     Idempotency-Key, so a POST (a new issue, a comment) that may have
//     reached GitHub is never sent twice.
//
// go-github has no retries of its own. An o.Retry.Classify already set
// is kept. Set the token with the returned client's WithAuthToken.
func NewClient(o transport.Options) *gh.Client {
	o.Disable |= transport.LayerIdempotencyKey
	if o.Retry.Classify == nil {
		o.Retry.Classify = Classify
	}
	c := gh.NewClient(&http.Client{Transport: transport.New(o)})
	c.DisableRateLimitCheck = true
	return c
}

// Classify is a [policy.Classifier] for GitHub. A 403 or 429 that is a
// rate-limit rejection is retried, for any method, since GitHub refused
// the request before acting on it:
//
//   - X-RateLimit-Remaining: 0 (the primary rate limit): after
//     X-RateLimit-Reset;
//   - Retry-After (a secondary rate limit): after that many seconds.
//
// A wait longer than policy.Retry.MaxRetryAfter (60s by default) is not
// waited for: the response is handed back at once, and go-github turns it
// into a *github.RateLimitError or *github.AbuseRateLimitError. Anything
// else, a 403 for a missing permission included, is decided by
// [policy.DefaultClassifier].
func Classify(o policy.Outcome) policy.Decision {
	if o.Err != nil || o.Response == nil {
		return policy.DefaultClassifier(o)
	}
	resp := o.Response
	if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusTooManyRequests {
		return policy.DefaultClassifier(o)
	}
	if wait, ok := policy.ParseRetryAfter(resp.Header, o.Now); ok {
		return policy.Decision{Retry: true, DidNotAct: true, Reason: "github secondary rate limit", RetryAfter: wait, HasRetryAfter: true}
	}
	if strings.TrimSpace(resp.Header.Get("X-RateLimit-Remaining")) == "0" {
		d := policy.Decision{Retry: true, DidNotAct: true, Reason: "github rate limit"}
		if q, ok := ratelimit.ParseHeaders(resp.Header, o.Now); ok && !q.Reset.IsZero() {
			d.RetryAfter, d.HasRetryAfter = q.Reset.Sub(o.Now), true
		}
		return d
	}
	return policy.DefaultClassifier(o)
}
