package transport

import (
	"net/http"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// RateLimitAware returns a middleware that listens to the quota servers
// report and holds requests back before they hit the limit, with a new
// [ratelimit.Tracker] configured by o (its doc tells the rules):
//
//   - Every response's quota headers (X-RateLimit-*, OpenAI, Anthropic,
//     IETF RateLimit) update the quotas of its host, per resource; see
//     [ratelimit.ParseAll].
//   - A request counted by a quota that is spent (Remaining at or below
//     o.Reserve, reset ahead) waits for the reset; requests counted by
//     other quotas of the host go on.
//   - A 429 or 503 with Retry-After pauses the whole host until the time
//     the server named (unless a named quota the response reports spent
//     until then explains it: then that quota's routes wait, and only
//     they): every request to it, from every goroutine, waits
//     for the same moment, and is then let go at the rate the host was
//     measured to accept, or spread over at most a second, rather than
//     in one burst. 429s teach the host's rate, and the host is paced
//     just under it; once the host has shown that it refuses only the
//     excess, a 429's Retry-After slows that pace instead of pausing
//     the host (docs/rate-limits.md). One pause lasts at most
//     o.MaxPause (a minute).
//   - A wait that cannot end before the request's deadline or o.MaxWait
//     is not started: RoundTrip returns at once an error matching
//     [ratelimit.ErrQuotaExhausted], a [*ratelimit.QuotaError] that says
//     when the quota resets and that [Retry] does not retry.
//   - A request that never reached the server (refused by an open
//     [Breaker] beneath, invalid, a failed dial, a context ended before it
//     was sent) uses no quota: its reservation is cancelled.
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

// RoundTrip reserves the request's place in its host's quotas, sends the
// request, and settles the reservation with the response, or cancels it
// when the request never reached the server.
func (l *rateLimiter) RoundTrip(req *http.Request) (*http.Response, error) {
	req, err := checkCaller(req, false) // even beneath a Retry: see breakerTransport.RoundTrip
	if err != nil {
		return nil, err // the caller's error uses no quota
	}
	res, err := l.t.Reserve(req)
	if err != nil || res.Holds() {
		stackOf(req.Context()).joinTracker(l.t) // Retry above asks it before it waits
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	// Whether a failed request reached the server decides whether what
	// it holds is given back. A context that ends while net/http is
	// still dialing looks like one that ends after the request went:
	// only net/http's connection reports tell them apart, and they are
	// asked for only when something is held.
	r, watch := req, (*connWatch)(nil)
	if res.Holds() {
		watch, r = watchConns(req)
	}
	resp, err := l.next.RoundTrip(r)
	if err != nil || resp == nil || resp.StatusCode >= 400 {
		// Retry above asks the tracker before a wait, which only a
		// failure starts: a success need not tell it.
		stackOf(req.Context()).joinTracker(l.t)
	}
	switch {
	case err != nil && !policy.Judge(policy.Outcome{Request: req, Err: err, NotConnected: watch != nil && watch.notConnected()}).Sent:
		res.Cancel()
	case err != nil:
		res.Settle(nil)
	default:
		res.Settle(resp)
	}
	return resp, err
}

// CloseIdleConnections forwards to the wrapped RoundTripper.
func (l *rateLimiter) CloseIdleConnections() { closeIdle(l.next) }
