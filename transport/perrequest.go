package transport

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
)

// attemptsUsed is set once WithAttempts has made a context with attempts:
// until then no layer looks for it, which costs a walk up the request's
// context chain.
var attemptsUsed atomic.Bool

// WithAttempts returns a copy of ctx that sets, for the requests made
// with it, how many attempts [Retry] may make, the first included. It
// overrides Retry.MaxAttempts for one call: 1 sends the request once (no
// retry, no hedge), more gives the call more attempts than the stack's.
// n of 0 or less keeps the stack's setting.
//
// It changes only how many attempts may be made. A request is still sent
// again only when that is safe, and only while the retry budget, the
// deadline and the breaker allow. A free resend of a request that net/http
// proves the server did not process is not an attempt, and is still made.
// For a shorter timeout for one call, give its context a deadline
// ([context.WithTimeout]).
func WithAttempts(ctx context.Context, n int) context.Context {
	if n <= 0 {
		return ctx
	}
	if !attemptsUsed.Load() {
		attemptsUsed.Store(true)
	}
	return withScope(ctx, func(s *scope) { s.attempts = n })
}

// attemptsOf returns the attempts that [WithAttempts] set in ctx, or 0.
func attemptsOf(ctx context.Context) int {
	if !attemptsUsed.Load() {
		return 0
	}
	if s := scopeOf(ctx); s != nil {
		return s.attempts
	}
	return 0
}

// forRequest returns c with the attempts that req's context sets with
// [WithAttempts], or c itself.
func (c *retryConfig) forRequest(req *http.Request) *retryConfig {
	n := attemptsOf(req.Context())
	if n <= 0 || n == c.Attempts {
		return c
	}
	cc := *c
	cc.Attempts, cc.P.MaxAttempts = n, n
	return &cc
}

// withAttempts returns the error a bound reports when its deadline, cut,
// ended an operation whose error beneath was err: cut itself, or, when
// err says how many attempts were made (a [*RetryError]) or that the
// operation waited for a concurrency slot (a [*ConcurrencyLimitError]), a
// copy of cut that says so too and wraps err.
func withAttempts(cut, err error) error {
	var re *RetryError
	var ce *ConcurrencyLimitError
	de, ok := cut.(*DeadlineError)
	hasRe, hasCe := ok && errors.As(err, &re), ok && errors.As(err, &ce)
	if !hasRe && !hasCe {
		return cut
	}
	d := *de
	if hasRe {
		d.Attempts, d.op = re.Attempts, re
	}
	d.slot = ce
	return &d
}
