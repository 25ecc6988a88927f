package transport

import (
	"github.com/sturdyhttp/sturdy/internal/connwatch"
	"github.com/sturdyhttp/sturdy/internal/reqbody"
	"net/http"

	"github.com/sturdyhttp/sturdy/ratelimit"
)

// RateLimitAware returns a middleware that reads the quotas servers report
// and holds requests back before they hit the limit. It uses a new
// [ratelimit.Tracker] configured by o, whose doc gives the rules:
//
//   - Every response's quota headers update the quotas of its host, per
//     resource: X-RateLimit-*, OpenAI, Anthropic and IETF RateLimit (see
//     [ratelimit.ParseAll]).
//   - A request counted by a spent quota waits for its reset. A quota is
//     spent when Remaining is at or below o.Reserve and the reset is
//     ahead. Requests counted by other quotas of the host go on.
//   - A 429 or 503 with Retry-After pauses the whole host until the time
//     the server named. Every request to it, from every goroutine, waits
//     for that moment. Then they go at the rate the host was measured to
//     accept, or spread over at most a second. When the response reports a
//     named quota spent until then, only that quota's routes wait.
//   - 429s teach the host's rate, and the host is paced just under it.
//     Once the host has shown that it refuses only the excess, a 429's
//     Retry-After slows that pace instead of pausing the host. One pause
//     lasts at most o.MaxPause (a minute by default).
//   - A wait that cannot end before the request's deadline or o.MaxWait
//     (for a pause or a quota's reset, also o.MaxServerWait) is not
//     started. RoundTrip returns at once a [*ratelimit.QuotaError]
//     that matches [ratelimit.ErrQuotaExhausted] and says when the quota
//     resets. [Retry] does not retry it.
//   - A request that never reached the server uses no quota: its
//     reservation is cancelled. That is a request refused by a [Breaker]
//     beneath, an invalid one, a failed dial, or a context ended before it
//     was sent.
//
// Place it inside [Retry], since each attempt is a request the server
// counts. Responses are handed back unchanged, whatever their status. See
// docs/rate-limits.md in the repository for the reasons.
func RateLimitAware(o ratelimit.Options) Middleware {
	return func(next http.RoundTripper) http.RoundTripper {
		return newRateLimiter(next, ratelimit.NewTracker(o))
	}
}

// RateLimitTracker is [RateLimitAware] with a tracker the caller owns.
// Several clients or stacks that call the same API can share one view of
// its quota. The caller reads it with [ratelimit.Tracker.Quota].
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
	req, err := reqbody.CheckCaller(req, false) // even beneath a Retry: see breakerTransport.RoundTrip
	if err != nil {
		return nil, err // the caller's error uses no quota
	}
	dl, _ := deadlineOf(req.Context()) // a bound of New's, which a stream may outlive, is not the context's
	res, err := l.t.ReserveWithin(req, dl)
	if err != nil || res.Holds() {
		joinTracker(req.Context(), l.t) // Retry above asks it before it waits
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
	r := req
	if res.Holds() {
		_, r = connwatch.NewShared(req) // the attempt's verdict reads it, whichever layer judges
	}
	resp, err := l.next.RoundTrip(r)
	if err != nil || resp == nil || resp.StatusCode >= 400 {
		// Retry above asks the tracker before a wait, which only a
		// failure starts: a success need not tell it.
		joinTracker(req.Context(), l.t)
	}
	switch {
	case err != nil && !verdictOf(r, resp, err).Sent:
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
