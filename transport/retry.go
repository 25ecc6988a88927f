package transport

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sturdyhttp/sturdy/internal/retry"
	"github.com/sturdyhttp/sturdy/internal/timecut"

	"github.com/sturdyhttp/sturdy/policy"
)

// Retry returns a middleware that retries failed attempts as p says.
// [policy.Retry.Next] decides each step, and Retry carries it out.
//
// A request is sent again only when that is safe. Its method is idempotent,
// or it carries an idempotency key. Otherwise the outcome must prove that the
// server did not act on it: no connection, a 429, x-should-retry: true.
// Attempts of other requests carry no GetBody, so that net/http cannot
// replay them.
//
// After an outcome that proves the server did not process the request
// ([policy.NotProcessed]), Retry sends it again at once. Such a resend is
// free: no backoff, no budget, and it does not count against MaxAttempts. At
// most 3 are made per operation. With MaxAttempts 1, only a body that is empty
// or has GetBody goes again.
//
// A request that cannot be sent as written is the caller's error. It fails at
// once and is never retried.
//
// Every attempt is a copy of the caller's request, which is never modified.
// Bodies are replayed byte for byte, through GetBody or from the bytes kept as
// the first attempt sends them. A body longer than p.MaxBufferedBody is sent
// once.
//
// Waits draw on the context's deadline. Retry stops at once, rather than wait
// only to fail, when the wait would end past the deadline. It also stops when
// a [Breaker] or [RateLimitAware] beneath would refuse the next attempt. A
// failed attempt's body is drained and closed first.
//
// When retries end on a response, Retry returns it with a nil error.
// [OperationOf] tells how many attempts were made and why they stopped. When
// retries end on an error, it is a [*RetryError]. See docs/design.md in the
// repository for the reasons behind each rule.
func Retry(p policy.Retry) Middleware {
	return retryMiddleware(p, budgetOf(p.Budget))
}

// retryMiddleware is Retry drawing on budget, nil for none.
func retryMiddleware(p policy.Retry, budget retryBudget) Middleware {
	defaultCls := p.Classify == nil
	p = p.WithDefaults()
	c := &retryConfig{
		Config: retry.Config{
			P:          p,
			Attempts:   p.MaxAttempts,
			DefaultCls: defaultCls,
			BufLimit:   p.MaxBufferedBody,
			ProbLimit:  p.MaxProblemBody,
			KeyHeader:  http.CanonicalHeaderKey(p.IdempotencyHeader),
			OnAttempt:  p.OnAttempt,
			OnRetry:    p.OnRetry,
			OnGiveUp:   p.OnGiveUp,
		},
		budget: budget,
	}
	return func(next http.RoundTripper) http.RoundTripper {
		return &retrier{next: orDefault(next), c: c}
	}
}

// retryConfig is what the operations of one Retry layer share.
type retryConfig struct {
	retry.Config
	budget retryBudget
}

type retrier struct {
	next http.RoundTripper
	c    *retryConfig
}

func (t *retrier) CloseIdleConnections() { closeIdle(t.next) }

// RetryError is the error of an operation that [Retry] ended on an error.
// It says how many attempts were made and why no further one was. Attempts
// is 0 when nothing was sent: the request could not be sent as written, or
// a layer beneath refused it. It wraps the last attempt's error. Find it
// with errors.As through [http.Client]'s *url.Error.
type RetryError struct {
	Attempts int           // attempts made
	Reason   policy.Reason // why no further attempt was made
	Err      error         // the last attempt's error
	// Refusal is, when Reason is [policy.ReasonRefused], the error the
	// next attempt would have met (a [*CircuitOpenError]); nil otherwise.
	Refusal error
}

// Error says what ended the operation, in one format: "transport: giving up
// after 2 attempts (retry budget spent): <last error>". When nothing was sent,
// it reads "transport: not sent (circuit open): <refusal>". When a layer
// beneath would refuse the next attempt, the message ends with that refusal
// instead of the last error.
func (e *RetryError) Error() string {
	var b strings.Builder
	b.WriteString("transport: ")
	if e.Attempts == 0 {
		b.WriteString("not sent")
	} else {
		b.WriteString("giving up after ")
		b.WriteString(strconv.Itoa(e.Attempts))
		b.WriteString(" attempt")
		if e.Attempts != 1 {
			b.WriteString("s")
		}
	}
	if e.Reason != "" && (e.Reason != policy.ReasonAttemptsUsed || e.Attempts == 0) {
		b.WriteString(" (")
		b.WriteString(string(e.Reason))
		b.WriteString(")")
	}
	cause := e.Err
	if e.Refusal != nil {
		cause = e.Refusal
	}
	if cause != nil {
		b.WriteString(": ")
		// The cause's own "transport: " is said once already.
		b.WriteString(strings.TrimPrefix(cause.Error(), "transport: "))
	}
	return b.String()
}

// Unwrap returns the last attempt's error and the refusal that ended the
// operation, if any. So errors.Is(err, [ErrCircuitOpen]) and errors.Is(err,
// context.DeadlineExceeded) answer for both.
func (e *RetryError) Unwrap() []error {
	if e.Refusal != nil {
		return []error{e.Refusal, e.Err}
	}
	return []error{e.Err}
}

// Timeout reports whether the last attempt timed out, so that
// [url.Error.Timeout] answers through [http.Client].
func (e *RetryError) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.Is(e.Err, context.DeadlineExceeded) || errors.As(e.Err, &t) && t.Timeout()
}

// AttemptFromContext returns the number of the attempt a request belongs
// to, as [Retry] sets it. The first attempt is 1, the first retry 2, and so
// on. It returns 1 for a request that did not pass through Retry.
// RoundTrippers beneath Retry and hooks can use it, such as an SDK's logging
// transport.
func AttemptFromContext(ctx context.Context) int {
	if s := scopeOf(ctx); s != nil && s.attempt > 0 {
		return s.attempt
	}
	return 1
}

func (t *retrier) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil { // nothing to retry: let the base report the error
		return t.next.RoundTrip(req)
	}
	c := t.c.forRequest(req) // WithAttempts
	o := retry.Run{C: &c.Config, Next: t.next, Req: req, Budget: c.budget}
	if err := o.Keep(); err != nil {
		return c.giveUp(req, 0, nil, err, policy.Step{Reason: policy.ReasonCallerError})
	}
	// Join the operation (a Hedge beneath draws on the same budget).
	op, base := withOp(req)
	op.retry = c
	if c.budget != nil {
		c.budget.Request(req.URL, op.start)
	}
	o.St, o.Base = op, base
	r, err := o.First()
	if err != nil {
		return c.giveUp(req, 0, nil, err, policy.Step{Reason: policy.ReasonCallerError})
	}
	defer o.Finish()
	return o.Do(r)
}

// The operation is the [retry.Stack] of its Retry's run.

// Attempt returns ctx marked as the context of attempt n.
func (op *operation) Attempt(ctx context.Context, n int) context.Context {
	return withScope(ctx, func(s *scope) { s.attempt = n })
}

// IdleCut returns the Timeout bound whose idle cut failed bodies are read
// with.
func (op *operation) IdleCut(ctx context.Context) *timecut.Watch { return idleCut(ctx) }

// DeadlineOf returns the deadline that bounds the work of ctx.
func (op *operation) DeadlineOf(ctx context.Context) (time.Time, bool) { return deadlineOf(ctx) }

// Began returns when the operation began.
func (op *operation) Began() time.Time { return timecut.Time(op.start) }

// Refused is refusedAt.
func (op *operation) Refused(r *http.Request, at time.Time) error { return op.refusedAt(r, at) }

// Route returns the URL that attempt r made at at would go to: its
// own, or the alternate origin Endpoints would send it to.
func (op *operation) Route(r *http.Request, at time.Time) *url.URL { return routeOf(r, at).URL }

// NoAttempt reports whether err is a refusal for the concurrency limit.
func (op *operation) NoAttempt(err error) bool { return concurrencyRefused(err) }

// Succeeded records a success after n attempts, for [OperationOf].
func (op *operation) Succeeded(n int, waited time.Duration) {
	op.attempts, op.reason, op.waited = n, "", waited
}

// End is end, with the hooks of the Retry that runs the operation.
func (op *operation) End(req *http.Request, n int, waited time.Duration, resp *http.Response, err error, step policy.Step) (*http.Response, error) {
	return op.retry.end(op, req, n, waited, resp, err, step)
}

// end ends an operation after n attempts (the last refused unsent, when
// its error is a layer's refusal) as step says: it records the outcome in
// the operation, for [OperationOf], and hands it to giveUp.
func (c *retryConfig) end(op *operation, req *http.Request, n int, waited time.Duration, resp *http.Response, err error, step policy.Step) (*http.Response, error) {
	if refusal, ok := policy.RefusedBy(err); ok {
		n, step.Reason = n-1, refusal // refused unsent: not an attempt
	} else if step.Reason == policy.ReasonCallerError {
		n = 0 // nothing could be sent
	}
	ok := resp != nil && resp.StatusCode < 400 // as judged: a stream that failed before its first event is not
	op.attempts, op.reason, op.waited = n, step.Reason, waited
	if ok {
		op.reason = ""
	}
	resp, err = c.giveUp(req, n, resp, err, step)
	if resp != nil && resp.Request != nil && opOf(resp.Request.Context()) != op {
		// A RoundTripper beneath answered with a request of its own: it
		// carries the operation too, so that OperationOf finds it.
		resp.Request = resp.Request.WithContext(withScope(resp.Request.Context(), func(s *scope) { s.op = op }))
	}
	return resp, err
}

// giveUp ends an operation as step says: it reports the outcome to
// OnGiveUp when it is a failure, and returns it, an error as a
// [*RetryError].
func (c *retryConfig) giveUp(req *http.Request, attempts int, resp *http.Response, err error, step policy.Step) (*http.Response, error) {
	if c.OnGiveUp != nil && (err != nil || resp != nil && resp.StatusCode >= 400) {
		detail := step.Decision.Reason
		if step.Refusal != nil {
			detail = step.Refusal.Error()
		}
		c.OnGiveUp(policy.GiveUpEvent{Request: req, Attempts: attempts, Reason: step.Reason, Detail: detail, Status: status(resp), Err: err})
	}
	if err != nil {
		if resp != nil && resp.Body != nil { // a RoundTripper returns a response or an error, not both
			resp.Body.Close()
		}
		return nil, &RetryError{Attempts: attempts, Reason: step.Reason, Err: err, Refusal: step.Refusal}
	}
	return restoreStream(resp), nil // a stream judged a failed attempt goes back as it came
}

// status returns resp's status; 0 for none.
func status(resp *http.Response) int { return retry.Status(resp) }
