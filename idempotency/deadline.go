package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sturdyhttp/sturdy/internal/lex"
)

// DefaultDeadlineHeader is the request header in which a client says how
// long it will wait for the response, in whole milliseconds: the header
// that the transport's PropagateDeadline sends and [DeadlineHandler]
// reads. Its value is relative, as gRPC's grpc-timeout and Connect's
// Connect-Timeout-Ms are, so that the clocks of client and server need
// not agree.
const DefaultDeadlineHeader = "Request-Timeout"

// maxDeadlineDigits bounds the digits of a deadline header value: 12
// digits of milliseconds are over 31 years, so longer values are noise,
// and the bound keeps the arithmetic from overflowing.
const maxDeadlineDigits = 12

// ErrCallerDeadline is the cause ([context.Cause]) of the context that
// [DeadlineHandler] gives a handler, once the caller's deadline passes.
// The context's Err is then [context.DeadlineExceeded], as for any
// deadline.
var ErrCallerDeadline = errors.New("idempotency: the caller's deadline passed")

// DeadlineOptions configures [DeadlineHandler]. The zero value is ready to
// use.
type DeadlineOptions struct {
	// Header is the request header that carries the caller's time left,
	// in milliseconds. Empty means [DefaultDeadlineHeader],
	// "Request-Timeout".
	Header string

	// Transit is taken off the caller's time left, for the time its
	// request's head took to arrive, which the server cannot see: the
	// caller's clock started when it sent the head. Without it, the
	// server's deadline is later than the caller's by that transit, and a
	// body that completes in between is acted on after the caller gave
	// up. Set it to the slowest transit you expect (a slow uplink's, a
	// proxy's buffering). Zero or negative means none; a request whose
	// time left is Transit or less is refused as expired.
	Transit time.Duration
}

// DeadlineHandler returns a handler that holds next to the caller's
// deadline, sent in the Request-Timeout header (o.Header) as the
// milliseconds the caller will wait, counted from when the request's
// headers reach the server:
//
//   - A request whose caller's deadline has already passed (a value of 0,
//     or of o.Transit or less) gets 504 Gateway Timeout, as gRPC and
//     Connect map an expired deadline, and a problem body that says it
//     was not acted on ([WriteDeadlineProblem]); next does not run and
//     the body is not read.
//   - Any other request with a deadline runs next with a context that
//     ends at it (less o.Transit), with [ErrCallerDeadline] as its cause:
//     a handler that passes r.Context() to its work (a query, an outbound
//     call, a check before a side effect) stops when nobody waits for the
//     answer any more. The server also stops reading the request's body at the
//     deadline (through [http.ResponseController.SetReadDeadline]): a
//     body still arriving over a slow link after its caller gave up
//     fails to read, with an error that is a timeout and wraps
//     [ErrCallerDeadline], so even a handler that ignores its context
//     does not act on it. ([Handler] answers such a request with
//     [WriteDeadlineProblem]; a handler of yours may do the same.) A deadline the
//     request's context already has, if earlier, is kept.
//   - A request without the header, or with a value that is not a plain
//     non-negative integer of at most 12 digits (a sign, a unit, a
//     fraction, garbage), or with the header more than once, runs next
//     unchanged: a client's mistake never refuses a request.
//
// Place it outermost, before [Handler], so that a late request is refused
// before its key is locked or its body read.
func DeadlineHandler(next http.Handler, o DeadlineOptions) http.Handler {
	header := o.Header
	if header == "" {
		header = DefaultDeadlineHeader
	}
	header = http.CanonicalHeaderKey(header)
	transit := max(o.Transit, 0) // a negative one would lengthen the caller's deadline, or wrap it around
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		d, ok := ParseDeadline(r.Header[header])
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		if d -= transit; d <= 0 {
			WriteDeadlineProblem(w, "idempotency: the caller's deadline ("+header+") passed before the request was handled")
			return
		}
		deadline := now.Add(d)
		ctx, cancel := context.WithDeadlineCause(r.Context(), deadline, ErrCallerDeadline)
		defer cancel()
		r = r.WithContext(ctx)
		if r.Body != nil && r.Body != http.NoBody {
			// Not every ResponseWriter supports it (a wrapper without
			// Unwrap): then the context alone holds the deadline.
			rc := http.NewResponseController(w)
			if rc.SetReadDeadline(deadline) == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// ParseDeadline parses the values of a deadline header such as
// Request-Timeout: exactly one value, a non-negative integer of at most 12
// ASCII digits (optional white space around it), in milliseconds. It
// reports false for anything else, which [DeadlineHandler] ignores.
func ParseDeadline(values []string) (time.Duration, bool) {
	if len(values) != 1 {
		return 0, false
	}
	v := lex.TrimOWS(values[0])
	if v == "" || len(v) > maxDeadlineDigits {
		return 0, false
	}
	var ms int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		ms = ms*10 + int64(c-'0')
	}
	return time.Duration(ms) * time.Millisecond, true
}

// deadlineBody is a request body read under the caller's deadline. At its
// end (EOF) it lifts the connection's read deadline, so that neither the
// server's watch for a closed connection nor the next request on the
// connection is cut by it; a read that times out says why.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case err == io.EOF:
		if !b.done {
			b.done = true
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	default:
		// After a timeout the deadline stays, so that every later read
		// fails at once too.
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			err = fmt.Errorf("%w: %w", ErrCallerDeadline, err)
		}
	}
	return n, err
}

// WriteDeadlineProblem answers a request that was not acted on because
// its caller's deadline passed: 504 Gateway Timeout with an RFC 9457
// problem body whose is_retriable is true, since nothing was done: a
// client with time left may send it again, even one that may not resend a
// POST on a bare 504 (sturdy's transport reads is_retriable). Written
// inside a [Handler], it releases the request's key, as [NothingDone] does.
func WriteDeadlineProblem(w http.ResponseWriter, detail string) {
	nothingDoneFor(w)
	b, _ := json.Marshal(struct {
		problem
		Retriable bool `json:"is_retriable"`
	}{problem{Type: "about:blank", Title: http.StatusText(http.StatusGatewayTimeout), Status: http.StatusGatewayTimeout, Detail: detail}, true})
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusGatewayTimeout)
	w.Write(b)
}
