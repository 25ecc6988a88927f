package transport

import (
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// RateLimitAware returns a middleware that listens to the quota servers
// report and holds requests back before they hit the limit, with a new
// [ratelimit.Tracker] configured by o:
//
//   - Every response's quota headers (X-RateLimit-*, OpenAI, Anthropic,
//     IETF RateLimit) update the quota of its host; see
//     [ratelimit.ParseHeaders].
//   - A request to a host whose quota is spent (Remaining at or below
//     o.Reserve, reset ahead) waits for the reset.
//   - A 429 or 503 with Retry-After pauses the whole host: every request
//     to it, from every goroutine, waits for the same moment, and is then
//     let go spread over time rather than in one burst.
//   - A wait that cannot end before the request's deadline or o.MaxWait
//     is not started: RoundTrip returns at once an error matching
//     [ratelimit.ErrQuotaExhausted], a [*ratelimit.QuotaError] that says
//     when the quota resets and that [Retry] does not retry.
//
// Place it inside [Retry]: each attempt is a request the server counts,
// and each must wait its turn. Responses are handed back unchanged,
// whatever their status.
func RateLimitAware(o ratelimit.Options) Middleware {
	return func(next http.RoundTripper) http.RoundTripper {
		return newRateLimiter(next, ratelimit.NewTracker(o))
	}
}

// RateLimitTracker is [RateLimitAware] with a tracker the caller owns, so
// that several clients (or stacks) calling the same API share one view of
// its quota, and the caller can read it with [ratelimit.Tracker.Quota].
func RateLimitTracker(t *ratelimit.Tracker) Middleware {
	return func(next http.RoundTripper) http.RoundTripper {
		return newRateLimiter(next, t)
	}
}

func newRateLimiter(next http.RoundTripper, t *ratelimit.Tracker) *rateLimiter {
	next = orDefault(next)
	return &rateLimiter{next: next, t: t}
}

type rateLimiter struct {
	next http.RoundTripper
	t    *ratelimit.Tracker
}

// RoundTrip waits for the request's host to have quota, sends the
// request, and records what the response says about the quota.
func (l *rateLimiter) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := l.t.Wait(req); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	resp, err := l.next.RoundTrip(req)
	if err != nil || resp == nil {
		l.t.Observe(req, nil)
		return resp, err
	}
	l.t.Observe(req, resp.Header)
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		now := time.Now()
		if d, ok := policy.ResponseRetryAfter(resp.Header, now); ok && d > 0 {
			l.t.Pause(req, now.Add(d))
		}
	}
	return resp, nil
}

// CloseIdleConnections forwards to the wrapped RoundTripper.
func (l *rateLimiter) CloseIdleConnections() { closeIdle(l.next) }
