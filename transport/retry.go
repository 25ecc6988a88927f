package transport

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sturdyhttp/sturdy/internal/reqbody"
	"github.com/sturdyhttp/sturdy/internal/respbody"
	"github.com/sturdyhttp/sturdy/internal/timecut"

	"github.com/sturdyhttp/sturdy/internal/connwatch"
	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/policy"
)

// drainLimit is how much of a failed attempt's body is read before it is
// closed, so that the connection goes back to the pool: a few KiB of JSON
// or HTML error page always fit, and so do 64 KiB error bodies. A longer
// body is closed unread, which costs a new connection.
const drainLimit = 256 << 10

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
		p:          p,
		attempts:   p.MaxAttempts,
		defaultCls: defaultCls,
		bufLimit:   p.MaxBufferedBody,
		probLimit:  p.MaxProblemBody,
		keyHeader:  http.CanonicalHeaderKey(p.IdempotencyHeader),
		budget:     budget,
		onAttempt:  p.OnAttempt,
		onRetry:    p.OnRetry,
		onGiveUp:   p.OnGiveUp,
	}
	return func(next http.RoundTripper) http.RoundTripper {
		return &retrier{next: orDefault(next), c: c}
	}
}

type retryConfig struct {
	p          policy.Retry // with its defaults
	attempts   int
	defaultCls bool
	bufLimit   int64
	probLimit  int64
	keyHeader  string
	budget     retryBudget
	onAttempt  func(policy.AttemptEvent)
	onRetry    func(policy.RetryEvent)
	onGiveUp   func(policy.GiveUpEvent)
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

var errNilResponse error = nilResponseError{} // final: see localfinal.go

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
	o := retryRun{t: t, c: t.c.forRequest(req), req: req} // WithAttempts
	r, err := o.begin()
	if err != nil {
		return t.giveUp(req, 0, nil, err, policy.Step{Reason: policy.ReasonCallerError})
	}
	defer o.body.Finish()
	for o.n = 1; ; o.n++ {
		resp, err := o.send(r)
		if err == nil && resp.StatusCode < 400 && o.c.defaultCls {
			o.op.attempts, o.op.reason, o.op.waited = o.n, "", o.waited
			return resp, nil // success: the fast path
		}
		step, now := o.decide(r, resp, err)
		if step.Free {
			if again := o.again(resp); again != nil {
				r = again
				o.n-- // the same attempt again: a free resend is not counted
				continue
			}
			o.free = policy.MaxFreeResends // the body cannot be had: decide without it
			step, now = o.decide(r, resp, err)
		}
		if !step.Retry {
			return t.end(o.op, req, o.n, o.waited, resp, err, step)
		}
		next, out, err := o.wait(step, now, resp, err)
		if next == nil {
			return out, err
		}
		r, o.prev = next, step.Wait
	}
}

// retryRun is one operation through Retry: what its attempts share.
type retryRun struct {
	t      *retrier
	c      *retryConfig  // t's, with WithAttempts's attempts
	req    *http.Request // the caller's
	base   *http.Request // what each attempt copies
	op     *operation
	ctx    context.Context
	body   reqbody.Replay
	watch  *connwatch.Watch // whether an attempt got a connection: for a request not safe to resend
	safe   bool
	n      int // the attempt's number
	free   int // free resends made
	prev   time.Duration
	waited time.Duration
	start  time.Time // when the last attempt was sent; zero when not timed
	// fastest is the operation's fastest answer: see policy.State.Fastest.
	fastest time.Duration
	// elsewhere are the hosts other than the request's own that the
	// operation was counted at in the budget: alternate origins it failed
	// over to (see charge).
	elsewhere []hosts.Key
}

// begin prepares the operation and returns its first attempt: it keeps
// the caller's body for replay, joins the operation (a Hedge beneath
// draws on the same budget), and strips GetBody from a request that is
// not safe to send again (see withoutGetBody).
func (o *retryRun) begin() (*http.Request, error) {
	c, req := o.c, o.req
	if c.attempts > 1 {
		var err error
		if o.body, err = reqbody.New(req, c.bufLimit); err != nil {
			// The caller's body failed as it was read to be kept: nothing
			// was sent.
			return nil, &policy.BodyError{ContentLength: max(req.ContentLength, -1), Err: errors.Unwrap(err)}
		}
	} else {
		// No copy of the body is kept, but a free resend can have it
		// again when it is empty or the caller can make it again.
		o.body = reqbody.Replay{None: req.Body == nil || req.Body == http.NoBody, Get: req.GetBody}
	}
	o.safe = policy.SafeToResend(req, c.keyHeader)
	o.op, o.base = withOp(req)
	o.op.retry = c
	o.ctx = o.base.Context()
	if c.budget != nil {
		c.budget.request(req.URL, o.op.start)
	}
	if !o.safe {
		if c.attempts > 1 {
			o.watch, o.base = connwatch.New(o.base)
		}
		if o.base.GetBody != nil {
			o.base = withoutGetBody(o.base, o.base != req)
		}
		o.body.NoGetBody = true
	}
	r := o.base
	if o.body.First != nil {
		r = o.body.FirstRequest(o.base)
	}
	r, err := reqbody.Check(r, r != req)
	if err != nil {
		reqbody.CloseBody(req)
		o.body.Finish()
	}
	return r, err
}

// send makes one attempt, r, and tells the hooks.
func (o *retryRun) send(r *http.Request) (*http.Response, error) {
	c := o.c
	o.start = time.Time{}
	if c.onAttempt != nil || o.n > 1 {
		o.start = time.Now()
	}
	if o.watch != nil {
		o.watch.Reset()
	}
	resp, err := o.t.next.RoundTrip(r)
	if resp == nil && err == nil { // a broken RoundTripper beneath: say so, as http.Client does
		err = errNilResponse
	}
	answered(resp, r)
	if c.onAttempt != nil && !concurrencyRefused(err) { // a request refused for the limit is no attempt
		c.onAttempt(attemptEvent(o.req, o.n, resp, err, time.Since(o.start)))
	}
	return resp, err
}

// decide asks [policy.Retry.Next] what follows attempt r's outcome.
func (o *retryRun) decide(r *http.Request, resp *http.Response, err error) (policy.Step, time.Time) {
	c := o.c
	var problem *policy.Problem
	if err == nil && o.ctx.Err() == nil {
		problem = respbody.ReadProblem(resp, c.probLimit, idleCut(o.ctx))
	}
	now := time.Now()
	o.fastest = fastestAnswer(o.ctx, o.fastest, o.start, now, err)
	s := policy.State{
		Outcome: policy.Outcome{
			Request:      r,
			Response:     resp,
			Err:          err,
			Problem:      problem,
			Attempt:      o.n,
			Keyed:        policy.HasKey(o.req, c.keyHeader),
			NotConnected: o.watch != nil && err != nil && o.watch.NotConnected(),
			Now:          now,
		},
		SafeToResend: o.safe,
		Replayable:   o.body.Replayable(),
		PrevWait:     o.prev,
		Done:         context.Cause(o.ctx),
		FreeResends:  o.free,
		Fastest:      o.fastest,
	}
	if dl, ok := deadlineOf(o.ctx); ok {
		s.Deadline = dl
	}
	op := o.op
	s.Refused = func(at time.Time) error { return op.refusedAt(r, at) }
	// moved is the host the retry goes to, when that is the operation's
	// first request there (see charge). The closure captures no field of
	// o, which would move o to the heap on the success path too.
	var moved hosts.Key
	if c.budget != nil {
		budget, own, seen := c.budget, o.req.URL, o.elsewhere
		s.Budget = func() bool {
			var ok bool
			ok, moved = charge(budget, r, own, seen, now)
			return ok
		}
	}
	step := c.p.Next(s)
	if moved != (hosts.Key{}) {
		o.elsewhere = append(o.elsewhere, moved)
	}
	return step, now
}

// charge reports whether budget allows the retry that attempt r's
// outcome asks for at now, and counts it if so. The budget is that of the
// host the retry goes to: own, the request's, or the alternate origin
// that Endpoints sends it to. The operation's first attempt at an
// alternate (one not in seen) is, for that host, an operation and no
// retry: it brings the alternate no more load than the operation would
// have brought its own host, so failing over from an origin that refuses
// connections spends no budget. Further retries there draw on the
// alternate's budget. It returns the alternate's key when it counted
// such a first attempt.
func charge(budget retryBudget, r *http.Request, own *url.URL, seen []hosts.Key, now time.Time) (bool, hosts.Key) {
	u := routeOf(r, now).URL
	at := timecut.Of(now)
	if k := hosts.KeyOf(u); k != hosts.KeyOf(own) && !slices.Contains(seen, k) {
		budget.request(u, at)
		return true, k
	}
	return budget.retry(u, at), hosts.Key{}
}

// again returns the request of a free resend, nil when its body cannot
// be had again.
func (o *retryRun) again(resp *http.Response) *http.Request {
	r, err := attemptRequest(&o.body, o.base, o.n)
	if err != nil {
		return nil
	}
	if r, err = reqbody.Check(r, true); err != nil {
		reqbody.CloseBody(r)
		return nil
	}
	if resp != nil && resp.Body != nil { // a response and an error both: a broken RoundTripper
		resp.Body.Close()
	}
	o.free++
	return r
}

// wait carries out a step that retries: it makes the next attempt's
// request, drains the failed response and waits. When it returns no
// request, the operation ends with what it returns.
func (o *retryRun) wait(step policy.Step, now time.Time, resp *http.Response, err error) (*http.Request, *http.Response, error) {
	t, c := o.t, o.c
	next, gerr := attemptRequest(&o.body, o.base, o.n+1)
	if gerr != nil { // GetBody failed: no further attempt can be made
		resp, err = t.end(o.op, o.req, o.n, o.waited, resp, err, policy.Step{Reason: policy.ReasonBodyNotReplayable, Decision: policy.Decision{Reason: "GetBody: " + gerr.Error()}})
		return nil, resp, err
	}
	if c.onRetry != nil {
		e := policy.RetryEvent{Request: o.req, Attempt: o.n + 1, Wait: step.Wait, Reason: step.Decision.Reason, Status: status(resp), Err: err}
		if step.Decision.HasRetryAfter {
			e.RetryAfter = step.Decision.RetryAfter
		}
		c.onRetry(e)
	}
	if resp != nil {
		respbody.Drain(respbody.WatchIdle(resp.Body, idleCut(o.ctx)))
	}
	// The wait runs from the decision, which found that it ends inside
	// the deadline: the time spent since (draining a slow error body,
	// the hook) is part of it, not added to it.
	if serr := sleep(o.ctx, step.Wait-time.Since(now)); serr != nil {
		reqbody.CloseBody(next)
		reason := policy.ReasonDeadline
		if errors.Is(serr, context.Canceled) {
			reason = policy.ReasonCanceled
		}
		resp, err := t.end(o.op, o.req, o.n, o.waited+time.Since(now), nil, serr, policy.Step{Reason: reason})
		return nil, resp, err
	}
	o.waited += time.Since(now)
	r, cerr := reqbody.Check(next, true)
	if cerr != nil {
		reqbody.CloseBody(next)
		resp, err := t.end(o.op, o.req, o.n, o.waited, nil, cerr, policy.Step{Reason: policy.ReasonCallerError})
		return nil, resp, err
	}
	return r, nil, nil
}

// end ends an operation after n attempts (the last refused unsent, when
// its error is a layer's refusal) as step says: it records the outcome in
// the operation, for [OperationOf], and hands it to giveUp.
func (t *retrier) end(op *operation, req *http.Request, n int, waited time.Duration, resp *http.Response, err error, step policy.Step) (*http.Response, error) {
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
	resp, err = t.giveUp(req, n, resp, err, step)
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
func (t *retrier) giveUp(req *http.Request, attempts int, resp *http.Response, err error, step policy.Step) (*http.Response, error) {
	if t.c.onGiveUp != nil && (err != nil || resp != nil && resp.StatusCode >= 400) {
		detail := step.Decision.Reason
		if step.Refusal != nil {
			detail = step.Refusal.Error()
		}
		t.c.onGiveUp(policy.GiveUpEvent{Request: req, Attempts: attempts, Reason: step.Reason, Detail: detail, Status: status(resp), Err: err})
	}
	if err != nil {
		if resp != nil && resp.Body != nil { // a RoundTripper returns a response or an error, not both
			resp.Body.Close()
		}
		return nil, &RetryError{Attempts: attempts, Reason: step.Reason, Err: err, Refusal: step.Refusal}
	}
	return restoreStream(resp), nil // a stream judged a failed attempt goes back as it came
}

// answered sets resp.Request to r, the request it answers, when the
// RoundTripper beneath left it unset (a fake, an SDK's test transport),
// as net/http's Transport sets it: [OperationOf] finds the operation
// through it.
func answered(resp *http.Response, r *http.Request) {
	if resp != nil && resp.Request == nil {
		resp.Request = r
	}
}

// withoutGetBody returns r without GetBody (r itself when own, else a
// copy): what every attempt of a request that is not
// [policy.SafeToResend] is sent as.
// net/http sends a request's body again by itself whenever it has
// GetBody and its HTTP/2 transport retries the stream: after a
// RST_STREAM(PROTOCOL_ERROR), which does not say that the server did not
// act, it does so on a new connection again and again until the context
// ends. Without GetBody it sends such a body once; a request it has not
// begun to send (a connection found unusable) it still sends elsewhere,
// and Retry sends the body again when the outcome proves the server did
// not act.
func withoutGetBody(r *http.Request, own bool) *http.Request {
	if !own {
		c := *r
		r = &c
	}
	r.GetBody = nil
	return r
}

// attemptRequest makes attempt n's request: a copy of base whose context
// says which attempt it is, with a fresh body.
func attemptRequest(b *reqbody.Replay, base *http.Request, n int) (*http.Request, error) {
	return b.Request(base.WithContext(withScope(base.Context(), func(s *scope) { s.attempt = n })))
}

func attemptEvent(req *http.Request, n int, resp *http.Response, err error, d time.Duration) policy.AttemptEvent {
	return policy.AttemptEvent{Request: req, Attempt: n, Status: status(resp), Err: err, Duration: d}
}

func status(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

// sleep waits for d or until ctx is done, whichever comes first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
