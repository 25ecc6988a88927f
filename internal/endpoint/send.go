package endpoint

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// Alternates sends an attempt to an origin of a request's alternates.
type Alternates struct {
	Next http.RoundTripper // what sends the attempt
	List []Origin          // the request's origin, then its alternates
	Op   *Op               // the operation's record; nil: none
	// Adjust, when set, changes each attempt sent to an alternate.
	Adjust func(req *http.Request, origin string)
	// Refused reports whether the origin u of req (req's own when nil)
	// would be refused at at by the breakers beneath.
	Refused func(req *http.Request, u *url.URL, at time.Time) bool
	// Unsent reports whether err is a refusal unsent by the origin's
	// breaker (a half-open one whose probes are taken).
	Unsent func(err error) bool
	// Ended reports whether the caller ended the request whose context
	// it is given.
	Ended func(ctx context.Context) bool
	// OnFailover, when set, is called for each attempt sent to an
	// alternate, open telling whether for an open circuit rather than
	// for a failed attempt.
	OnFailover func(req *http.Request, from, to string, open bool)
}

// pick returns the index in a.List of the origin an attempt of req goes
// to at now: the first from start, in turn, whose circuit is not open;
// start when every one is.
func (a *Alternates) pick(req *http.Request, start int, now time.Time) int {
	return Pick(a.List, start, func(u *url.URL) bool { return a.Refused(req, u, now) })
}

// Send sends req to the origin its operation's next attempt starts at,
// or the next whose circuit is not open, path and query kept; when that
// origin's breaker refuses it unsent, to the next origin. It records in
// the operation whether the next attempt moves on (as
// [policy.FailsOver] says), or which origin served it.
func (a *Alternates) Send(req *http.Request) (*http.Response, error) {
	list, op := a.List, a.Op
	start := 0
	if op != nil {
		start = int(op.Next.Load()) % len(list)
	}
	i := a.pick(req, start, time.Now())
	for tries := 1; ; tries++ {
		r := req
		if i != 0 {
			r = Rewrite(req, list[i], a.Adjust)
			if f := a.OnFailover; f != nil {
				f(req, list[0].Name, list[i].Name, i != start || start == 0)
			}
		}
		resp, err := a.Next.RoundTrip(r)
		if err != nil && a.Unsent(err) && tries < len(list) {
			// Refused unsent by the origin's breaker (a half-open one
			// whose probes are taken): the next origin, when the body can
			// be sent again. Nothing was sent, so nothing is resent.
			if body, ok := FreshBody(req); ok {
				req = body
				i = a.pick(req, (i+1)%len(list), time.Now())
				continue
			}
		}
		if op != nil {
			o := policy.Outcome{Request: r, Response: resp, Err: err, CallerEnded: a.Ended(req.Context())}
			if policy.FailsOver(o) {
				op.Next.Store(int32((i + 1) % len(list)))
			} else if err == nil {
				op.Served(list[i].Name, "")
			}
		}
		return resp, err
	}
}
