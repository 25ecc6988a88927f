package transport

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/internal/idemkey"
)

// PropagateDeadline returns a middleware that tells the server how long the
// caller will wait for each attempt. A request whose context has a deadline
// is passed on as a copy that carries header. Its value is the time left
// until that deadline, in whole milliseconds, rounded down. An empty header
// means [idempotency.DefaultDeadlineHeader], "Request-Timeout".
//
// A request without a deadline passes unchanged, so a value the caller set
// stays. A deadline that has passed is sent as 0. The caller's request is
// not modified. [idempotency.DeadlineHandler] is the server's half.
//
// The value is computed when the attempt starts, from the attempt's own
// context. Place PropagateDeadline innermost, beneath every [Deadline], as
// [New] does with Options.PropagateDeadline. Send it only to servers you
// trust with the figure: it tells them how long you will wait. See
// docs/design.md in the repository for the reasons.
func PropagateDeadline(header string) Middleware {
	if header == "" {
		header = idempotency.DefaultDeadlineHeader
	}
	header = http.CanonicalHeaderKey(header)
	return func(next http.RoundTripper) http.RoundTripper {
		return &propagate{next: orDefault(next), header: header}
	}
}

type propagate struct {
	next   http.RoundTripper
	header string
}

func (t *propagate) RoundTrip(req *http.Request) (*http.Response, error) {
	deadline, ok := deadlineOf(req.Context()) // the bounds of New above included
	if !ok {
		return t.next.RoundTrip(req)
	}
	ms := max(time.Until(deadline).Milliseconds(), 0)
	r := *req // a shallow copy with its own header map: req stays untouched
	r.Header = idemkey.CloneWith(req.Header, t.header, strconv.FormatInt(ms, 10))
	return t.next.RoundTrip(&r)
}

func (t *propagate) CloseIdleConnections() { closeIdle(t.next) }
