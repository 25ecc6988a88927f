package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"
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
// host, unlike the caller's own deadline.
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
}

// Error names the bound and its limit, as in "transport: Timeout of 10m0s
// exceeded".
func (e *DeadlineError) Error() string {
	switch e.Bound {
	case "":
		return "transport: deadline of " + e.Limit.String() + " exceeded"
	case boundIdle:
		return "transport: IdleTimeout of " + e.Limit.String() + " exceeded: the response body delivered no byte for " + e.Limit.String()
	}
	return "transport: " + e.Bound + " of " + e.Limit.String() + " exceeded" + e.after()
}

// after says how many attempts were made, when that is known.
func (e *DeadlineError) after() string {
	switch {
	case e.op == nil:
		return ""
	case e.Attempts == 1:
		return " after 1 attempt"
	}
	return " after " + strconv.Itoa(e.Attempts) + " attempts"
}

// Unwrap returns Retry's [*RetryError] for the operation the bound ended,
// when there is one, so that errors.As finds it; nil otherwise.
func (e *DeadlineError) Unwrap() error {
	if e.op == nil {
		return nil
	}
	return e.op
}

// Is reports whether target is [context.DeadlineExceeded].
func (e *DeadlineError) Is(target error) bool { return target == context.DeadlineExceeded }

// Timeout reports true: the request timed out.
func (e *DeadlineError) Timeout() bool { return true }

// cancel ends op's context as canceled (its Err is context.Canceled),
// unless it has ended already.
func (op *boundOp) cancel() { op.ctx.end(endReleased) }

// hold hands back an outcome of a request sent with op's context, and
// keeps that context until the response's body is done with: it is
// released at once on error or for a response without a body, else when
// the body is read to EOF or closed.
func (op *boundOp) hold(resp *http.Response, err error) (*http.Response, error) {
	c := &op.ctx
	if err != nil || resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		c.release()
		return resp, err
	}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &boundBodyRW{boundBody{rc: rw, c: c}, rw}
		return resp, nil
	}
	op.body = boundBody{rc: resp.Body, c: c}
	resp.Body = &op.body
	return resp, nil
}

func closeWrite(w io.Writer) error {
	if cw, ok := w.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
