package transport

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sturdyhttp/sturdy/idempotency"
)

// PropagateDeadline tells the server how long the caller will wait for
// each attempt, so that it can refuse, or stop, work that nobody waits
// for any more: a request whose context has a deadline is passed on as a
// copy carrying header (empty means [idempotency.DefaultDeadlineHeader],
// "Request-Timeout") set to the time left until that deadline, in whole
// milliseconds, rounded down, so the server's deadline is never later
// than the caller's by more than the request's transit time. A request
// without a deadline passes unchanged (a value the caller set stays); a
// deadline that has passed is sent as 0. The caller's request is not
// modified. [idempotency.DeadlineHandler] is the server's half.
//
// The value is relative, as gRPC's grpc-timeout and Connect's
// Connect-Timeout-Ms are, so that clocks of client and server need not
// agree. It is computed when the attempt starts, from the attempt's own
// context: place PropagateDeadline innermost, beneath every [Deadline],
// as [New] does with Options.PropagateDeadline, so that it sends what is
// left of the shortest of the caller's deadline, the operation's Timeout
// and the attempt's AttemptTimeout. Send it only to servers you trust
// with the figure: it tells them how long you are prepared to wait.
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
	deadline, ok := req.Context().Deadline()
	if !ok {
		return t.next.RoundTrip(req)
	}
	ms := max(time.Until(deadline).Milliseconds(), 0)
	r := *req // a shallow copy with its own header map: req stays untouched
	r.Header = cloneWith(req.Header, t.header, strconv.FormatInt(ms, 10))
	return t.next.RoundTrip(&r)
}

func (t *propagate) CloseIdleConnections() { closeIdle(t.next) }
