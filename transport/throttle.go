package transport

import (
	"context"
	"errors"
	"github.com/sturdyhttp/sturdy/internal/reqbody"
	"net/http"
	"strconv"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// ErrThrottled is matched by errors.Is for every request that a
// [Throttle] rejected locally, unsent.
var ErrThrottled = errors.New("transport: throttled")

// ThrottleError is the error of a request that a [Throttle] rejected
// locally, unsent, because its host has lately rejected or failed too many
// of the requests it was sent. It matches [ErrThrottled], and [Retry] does
// not retry it.
type ThrottleError struct {
	Host        string  // the host key, as in "https://api.example.com"
	Probability float64 // the probability of rejection it was judged with
}

// Error names the host and the rejection probability.
func (e *ThrottleError) Error() string {
	return "transport: throttled locally for " + e.Host + " (reject probability " +
		strconv.FormatFloat(e.Probability, 'f', 2, 64) + ")"
}

// Is reports whether target is [ErrThrottled].
func (e *ThrottleError) Is(target error) bool { return target == ErrThrottled }

// Retriable returns false: a rejection is the client shedding load, and
// trying again at once would defeat it.
func (e *ThrottleError) Retriable() bool { return false }

// RefusedBy returns "throttled": the request was shed unsent (see
// [policy.Refusal]).
func (e *ThrottleError) RefusedBy() string { return string(policy.ReasonThrottled) }

// ThrottleEvent describes a request that a [Throttle] rejected.
type ThrottleEvent struct {
	Request     *http.Request // the rejected request
	Host        string        // its host key
	Probability float64       // the probability of rejection it was judged with
}

// Throttle returns a middleware that sheds load locally when a host
// rejects or fails too much of it, with Google SRE's adaptive throttling
// (see [policy.Throttle]): a request is rejected, unsent, with
// probability max(0, (requests − K×accepts)/(requests + 1)) over the
// recent window, with a [*ThrottleError]. A response under 500 other than
// 429 counts as accepted; a 429, a 5xx, a timeout or a network error as
// not; a request ended by its caller (a cancel, or the caller's own
// deadline: a [*DeadlineError] of the stack's bounds is a timeout),
// refused by a [Breaker] or by a quota, or that net/http would not send
// is not counted.
//
// Share t between the stacks that talk to the same hosts. A nil t means
// a new [policy.Throttle] with the defaults. Place it inside [Retry] and
// [Hedge] (every attempt and copy is a request the server counts) and
// outside [RateLimitAware] and [Breaker], so that a request shed locally
// uses no quota and is never judged by the breaker.
func Throttle(t *policy.Throttle) Middleware {
	return throttleMiddleware(t, nil)
}

func throttleMiddleware(t *policy.Throttle, onReject func(ThrottleEvent)) Middleware {
	if t == nil {
		t = &policy.Throttle{}
	}
	return func(next http.RoundTripper) http.RoundTripper {
		return &throttler{next: orDefault(next), t: t, onReject: onReject}
	}
}

type throttler struct {
	next     http.RoundTripper
	t        *policy.Throttle
	onReject func(ThrottleEvent)
}

func (t *throttler) CloseIdleConnections() { closeIdle(t.next) }

func (t *throttler) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		return t.next.RoundTrip(req)
	}
	req, err := reqbody.CheckCaller(req, false) // even beneath a Retry: see breakerTransport.RoundTrip
	if err != nil {
		return nil, err // the caller's error counts neither way
	}
	req = t.mark(req)
	key := HostKey(req)
	if ok, p := t.t.Allow(key, time.Now()); !ok {
		if req.Body != nil {
			req.Body.Close()
		}
		if t.onReject != nil {
			t.onReject(ThrottleEvent{Request: req, Host: key, Probability: p})
		}
		return nil, &ThrottleError{Host: key, Probability: p}
	}
	resp, err := t.next.RoundTrip(req)
	if v := verdictOf(req, resp, err); v.Host != policy.HostIgnored && (resp != nil || err != nil) {
		t.t.Record(key, time.Now(), v.Accepted)
	}
	return resp, err
}

// mark returns a copy of req marked as passed by a Throttle, so that a
// Breaker beneath leaves the answers of an overloaded server (503, 529)
// to it. A mark on the request, not on the layer: a Breaker that some
// requests reach by another way (a router above it) still counts theirs.
func (t *throttler) mark(req *http.Request) *http.Request {
	return req.WithContext(withScope(req.Context(), func(s *scope) { s.throttled = true }))
}

// throttledAbove reports whether a Throttle above marked the request
// whose context is ctx.
func throttledAbove(ctx context.Context) bool {
	s := scopeOf(ctx)
	return s != nil && s.throttled
}
