package transport

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/sturdyhttp/sturdy/internal/respbody"
	"github.com/sturdyhttp/sturdy/internal/timecut"
)

// Deadline returns a middleware that bounds everything beneath it to d. The
// request it passes on carries a context whose deadline is d from now. When
// the caller's context already has a tighter deadline, the request passes
// untouched.
//
// The deadline covers the response body too, whatever it is. It is released
// when the body is read to its end or closed, never when RoundTrip returns.
// So a streamed body stays readable until d runs out, and no longer. When
// RoundTrip fails, the deadline is released at once.
//
// Deadline is a hard limit. [New] uses finer bounds (Timeout,
// AttemptTimeout, IdleTimeout) that let a stream run for as long as it
// makes progress.
//
// Placed twice, Deadline gives a whole-operation budget and a per-attempt
// limit: Chain(base, Deadline(total), Retry(p), Deadline(perAttempt)). An
// attempt that runs out of its own time is retried while the total budget
// remains.
//
// When the deadline passes, the error is a [*DeadlineError] that names the
// limit; errors.Is(err, context.DeadlineExceeded) holds. A d of zero or
// less means no deadline: requests pass through.
func Deadline(d time.Duration) Middleware {
	return func(next http.RoundTripper) http.RoundTripper {
		next = orDefault(next)
		if d <= 0 {
			return next
		}
		return newBound(next, boundAll, d, 0, "", 0)
	}
}

// DeadlineError is the error of a request, or of its body, that ran out of
// a bound's time. The bound is a [Deadline], or the Timeout, AttemptTimeout
// or IdleTimeout of [New]. [context.Cause] of the request's context gives
// it too. It matches [context.DeadlineExceeded] with errors.Is, and its
// Timeout method reports true. A [Breaker] counts it as a failure of the
// host, unlike the caller's own deadline. When the bound ended a wait for
// a [Concurrency] slot, it says which limit, and matches
// [ErrConcurrencyLimit] too: errors.As finds the [*ConcurrencyLimitError].
type DeadlineError struct {
	// Bound names the bound: "Timeout", "AttemptTimeout" or
	// "IdleTimeout" for those of [New], empty for a [Deadline].
	Bound string
	// Limit is the bound's value: the deadline, or for IdleTimeout how
	// long a body may go without delivering a byte.
	Limit time.Duration
	// Attempts is how many attempts the operation made before the bound
	// ended it, when a [Retry] beneath counted them; zero otherwise. The
	// error then wraps Retry's [*RetryError] too.
	Attempts int

	op *RetryError // Retry's account of the operation, when Attempts is set
	// slot is the refusal of a [Concurrency] layer whose wait for a slot
	// the bound ended; nil when the bound ended something else.
	slot *ConcurrencyLimitError
}

// Error names the bound and its limit, as in "transport: Timeout of 10m0s
// exceeded", and what the operation was doing when that is known: how many
// attempts it made, or the concurrency limit whose slot it waited for.
func (e *DeadlineError) Error() string {
	switch e.Bound {
	case "":
		return "transport: deadline of " + e.Limit.String() + " exceeded" + e.waiting()
	case boundIdle:
		return "transport: IdleTimeout of " + e.Limit.String() + " exceeded: the response body delivered no byte for " + e.Limit.String()
	}
	return "transport: " + e.Bound + " of " + e.Limit.String() + " exceeded" + e.waiting()
}

// waiting says how many attempts were made, when that is known, and the
// concurrency limit the operation waited for a slot of, if any.
func (e *DeadlineError) waiting() string {
	var s string
	if e.op != nil && (e.slot == nil || e.Attempts > 0) {
		s = " after " + strconv.Itoa(e.Attempts) + " attempt"
		if e.Attempts != 1 {
			s += "s"
		}
	}
	if c := e.slot; c != nil {
		if s != "" {
			s += ","
		}
		s += " while waiting for a concurrency slot of " + c.Host + " (limit " + strconv.Itoa(c.Limit) +
			", " + strconv.Itoa(c.InFlight) + " in flight)"
		if e.Attempts == 0 {
			s += ": not sent"
		}
	}
	return s
}

// Unwrap returns Retry's [*RetryError] for the operation the bound ended,
// when there is one, else the [*ConcurrencyLimitError] of a wait for a
// slot the bound ended, so that errors.As finds them; nil otherwise.
func (e *DeadlineError) Unwrap() error {
	if e.op != nil {
		return e.op
	}
	if e.slot != nil {
		return e.slot
	}
	return nil
}

// Is reports whether target is [context.DeadlineExceeded].
func (e *DeadlineError) Is(target error) bool { return target == context.DeadlineExceeded }

// Timeout reports true: the request timed out.
func (e *DeadlineError) Timeout() bool { return true }

// hard is the RoundTrip of [Deadline]: the context's own deadline,
// released with the response body, as net/http's Client.Timeout does.
func (t *bound) hard(req *http.Request) (*http.Response, error) {
	parent := req.Context()
	dl := time.Now().Add(t.l.D)
	if pdl, ok := parent.Deadline(); ok && !pdl.After(dl) {
		return t.next.RoundTrip(req) // the caller's own deadline comes first
	}
	ctx, cancel := context.WithDeadlineCause(parent, dl, t.l.DlErr)
	if ps := scopeOf(parent); ps == nil || ps.op == nil { // the first sturdy layer makes the operation
		o := &opScope{}
		if ps != nil {
			o.s = *ps
		}
		o.op.start = timecut.Of(time.Now())
		o.s.op, o.s.judged = &o.op, &o.j
		ctx = context.WithValue(ctx, opKey{}, &o.s)
	}
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil || resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		if err != nil && context.Cause(ctx) == t.l.DlErr {
			err = t.l.DlErr // net/http may report the context's error only
		}
		cancel()
		return resp, err
	}
	resp.Body = respbody.Cancel(ctx, resp, cancel, t.l.DlErr)
	return resp, nil
}

// newLimits returns the limits of a bound named name: d and idle (0 or
// less: none), each with the *DeadlineError that names it.
func newLimits(d, idle time.Duration, name string) timecut.Limits {
	return timecut.NewLimits(d, idle, name,
		func(d time.Duration) error { return &DeadlineError{Bound: name, Limit: d} },
		func(d time.Duration) error { return &DeadlineError{Bound: boundIdle, Limit: d} })
}
