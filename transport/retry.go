package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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
	own  stack // the stack beneath, when no layer above carries one
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

type attemptKey struct{}

// AttemptFromContext returns the number of the attempt a request belongs
// to, as [Retry] sets it. The first attempt is 1, the first retry 2, and so
// on. It returns 1 for a request that did not pass through Retry.
// RoundTrippers beneath Retry and hooks can use it, such as an SDK's logging
// transport.
func AttemptFromContext(ctx context.Context) int {
	if n, ok := ctx.Value(attemptKey{}).(int); ok {
		return n
	}
	return 1
}

func (t *retrier) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.c.forRequest(req) // WithAttempts
	if req.URL == nil {      // nothing to retry: let the base report the error
		return t.next.RoundTrip(req)
	}
	var (
		body replay // one attempt only: nothing to replay
		err  error
	)
	if c.attempts > 1 {
		if body, err = newReplay(req, c.bufLimit); err != nil {
			// The caller's body failed as it was read to be kept: nothing
			// was sent.
			err = &policy.BodyError{ContentLength: max(req.ContentLength, -1), Err: errors.Unwrap(err)}
			return t.giveUp(req, 0, nil, err, policy.Step{Reason: policy.ReasonCallerError})
		}
		defer body.finish()
	} else if c.onAttempt != nil || c.onGiveUp != nil {
		// No copy of the body is kept, but a free resend can have it
		// again when it is empty or the caller can make it again.
		body = replay{none: req.Body == nil || req.Body == http.NoBody, get: req.GetBody}
	} else {
		r, err := checkBody(req, false)
		if err != nil {
			closeBody(req)
			return nil, &RetryError{Reason: policy.ReasonCallerError, Err: err}
		}
		s := stackOf(r.Context())
		if s == nil { // an operation still, for OperationOf, and a Hedge beneath may share the budget
			s, r = withStack(r, &t.own)
		}
		s.joinRetry(c)
		if c.budget != nil {
			c.budget.request(req.URL, startOf(req.Context()))
		}
		if r.GetBody != nil && !policy.SafeToResend(req, c.keyHeader) {
			r = withoutGetBody(r, r != req)
		}
		resp, err := t.next.RoundTrip(r)
		if err != nil {
			// The caller's own body, if it can be had again: see freeResend.
			b := replay{none: req.Body == nil || req.Body == http.NoBody, get: req.GetBody, noGetBody: r.GetBody == nil}
			for free := 0; free < maxFreeResends; free++ {
				again := freeResend(req.Context(), &b, r, 1, err)
				if again == nil {
					break
				}
				r = again
				resp, err = t.next.RoundTrip(r)
			}
		}
		answered(resp, r)
		if err == nil && resp != nil && resp.StatusCode < 400 {
			return resp, nil
		}
		if resp == nil && err == nil {
			err = errNilResponse
		}
		return t.end(nil, req, 1, 0, resp, err, t.lastStep(s, req, r, resp, err))
	}
	safe := policy.SafeToResend(req, c.keyHeader)
	// base is what each attempt copies: the caller's request, or a copy
	// whose context carries the operation, or tells whether a
	// connection was made, for a request that may be sent again only if
	// none was.
	st, base, rec := t.stackOf(req) // rec: the operation's record, from the second attempt on
	st.joinRetry(c)                 // a Hedge beneath draws on the same budget
	ctx := base.Context()
	if c.budget != nil {
		c.budget.request(req.URL, startOf(ctx))
	}
	var watch *connWatch
	if !safe {
		if c.attempts > 1 {
			watch, base = watchConns(base)
		}
		// Every attempt goes without GetBody: see withoutGetBody.
		if base.GetBody != nil {
			base = withoutGetBody(base, base != req)
		}
		body.noGetBody = true
	}

	var (
		resp    *http.Response
		prev    time.Duration
		waited  time.Duration
		fastest time.Duration // the operation's fastest answer: see policy.State.Fastest
		r       = base
		free    int // free resends made: see freeResend
	)
	if body.first != nil {
		r = body.firstRequest(base)
	}
	if r, err = checkBody(r, r != req); err != nil {
		closeBody(req)
		return t.giveUp(req, 0, nil, err, policy.Step{Reason: policy.ReasonCallerError})
	}
	for n := 1; ; n++ {
		var start time.Time
		if c.onAttempt != nil || n > 1 {
			start = time.Now()
		}
		if watch != nil {
			watch.reset()
		}
		resp, err = t.next.RoundTrip(r)
		if resp == nil && err == nil { // a broken RoundTripper beneath: say so, as http.Client does
			err = errNilResponse
		}
		answered(resp, r)
		if c.onAttempt != nil && !concurrencyRefused(err) { // a request refused for the limit is no attempt
			c.onAttempt(attemptEvent(req, n, resp, err, time.Since(start)))
		}
		if err != nil && free < maxFreeResends {
			if again := freeResend(ctx, &body, base, n, err); again != nil {
				if resp != nil && resp.Body != nil { // a response and an error both: a broken RoundTripper
					resp.Body.Close()
				}
				free++
				r = again
				n-- // the same attempt again: a free resend is not counted
				continue
			}
		}
		if err == nil && resp.StatusCode < 400 && c.defaultCls {
			if rec != nil {
				rec.attempts, rec.reason, rec.waited = n, "", waited
			}
			return resp, nil // success: the fast path
		}
		idleCut := st.cut()
		var problem *policy.Problem
		if err == nil && ctx.Err() == nil {
			problem = readProblem(resp, c.probLimit, idleCut)
		}
		now := time.Now()
		fastest = fastestAnswer(ctx, fastest, start, now, err)
		s := policy.State{
			Outcome: policy.Outcome{
				Request:      r,
				Response:     resp,
				Err:          err,
				Problem:      problem,
				Attempt:      n,
				Keyed:        policy.HasKey(req, c.keyHeader),
				NotConnected: watch != nil && err != nil && watch.notConnected(),
				Now:          now,
			},
			SafeToResend: safe,
			Replayable:   body.replayable(),
			PrevWait:     prev,
			Done:         context.Cause(ctx),
			Fastest:      fastest,
		}
		if dl, ok := ctx.Deadline(); ok {
			s.Deadline = dl
		}
		attempt := r // not r itself: a closure over it would move it to the heap on every call
		s.Refused = func(at time.Time) error { return st.refusedAt(attempt, at) }
		if c.budget != nil {
			s.Budget = func() bool { return c.budget.retry(req.URL, clockOf(now)) }
		}
		step := c.p.Next(s)
		if !step.Retry {
			return t.end(rec, req, n, waited, resp, err, step)
		}
		if rec == nil {
			base = record(&rec, base, nil)
		}
		next, gerr := body.request(base, n+1)
		if gerr != nil { // GetBody failed: no further attempt can be made
			return t.end(rec, req, n, waited, resp, err, policy.Step{Reason: policy.ReasonBodyNotReplayable, Decision: policy.Decision{Reason: "GetBody: " + gerr.Error()}})
		}
		if c.onRetry != nil {
			e := policy.RetryEvent{Request: req, Attempt: n + 1, Wait: step.Wait, Reason: step.Decision.Reason, Status: status(resp), Err: err}
			if step.Decision.HasRetryAfter {
				e.RetryAfter = step.Decision.RetryAfter
			}
			c.onRetry(e)
		}
		if resp != nil {
			drain(watchIdle(resp.Body, idleCut))
		}
		// The wait runs from the decision, which found that it ends
		// inside the deadline: the time spent since (draining a slow
		// error body, the hook) is part of it, not added to it.
		if serr := sleep(ctx, step.Wait-time.Since(now)); serr != nil {
			if next.Body != nil {
				next.Body.Close()
			}
			reason := policy.ReasonDeadline
			if errors.Is(serr, context.Canceled) {
				reason = policy.ReasonCanceled
			}
			return t.end(rec, req, n, waited+time.Since(now), nil, serr, policy.Step{Reason: reason})
		}
		waited += time.Since(now)
		if r, err = checkBody(next, true); err != nil {
			closeBody(next)
			return t.end(rec, req, n, waited, nil, err, policy.Step{Reason: policy.ReasonCallerError})
		}
		prev = step.Wait
	}
}

// lastStep is [policy.Retry.Next]'s decision on the one attempt r of
// req that a Retry with MaxAttempts 1 made: the reason it gives is the
// one the attempt loop gives for the same outcome.
func (t *retrier) lastStep(st *stack, req, r *http.Request, resp *http.Response, err error) policy.Step {
	c := t.c
	ctx := req.Context()
	var problem *policy.Problem
	if err == nil && ctx.Err() == nil {
		problem = readProblem(resp, c.probLimit, st.cut())
	}
	s := policy.State{
		Outcome: policy.Outcome{
			Request:  r,
			Response: resp,
			Err:      err,
			Problem:  problem,
			Attempt:  1,
			Keyed:    policy.HasKey(req, c.keyHeader),
			Now:      time.Now(),
		},
		SafeToResend: policy.SafeToResend(req, c.keyHeader),
		Done:         context.Cause(ctx),
	}
	return c.p.Next(s)
}

// stackOf returns the stack of req's operation and req with it, with
// the operation's record when t made both: when no layer above carries a
// stack, the layers beneath meet in t.own.
func (t *retrier) stackOf(req *http.Request) (*stack, *http.Request, *opRecord) {
	if st := stackOf(req.Context()); st != nil {
		return st, req, nil
	}
	var rec *opRecord
	base := record(&rec, req, &t.own)
	return &t.own, base, rec
}

// end ends an operation after n attempts (the last refused unsent, when
// its error is a layer's refusal) as step says: it records the outcome in
// the operation's record rec, for [OperationOf], and hands it to giveUp.
func (t *retrier) end(rec *opRecord, req *http.Request, n int, waited time.Duration, resp *http.Response, err error, step policy.Step) (*http.Response, error) {
	if refusal, ok := policy.RefusedBy(err); ok {
		n, step.Reason = n-1, refusal // refused unsent: not an attempt
	} else if step.Reason == policy.ReasonCallerError {
		n = 0 // nothing could be sent
	}
	ok := resp != nil && resp.StatusCode < 400 // as judged: a stream that failed before its first event is not
	resp, err = t.giveUp(req, n, resp, err, step)
	switch {
	case resp == nil || resp.Request == nil:
	case rec == nil:
		// The first attempt's response: its request gets the record.
		resp.Request = record(&rec, resp.Request, nil)
	case opRecordOf(resp.Request.Context()) != rec:
		// A response of an attempt made before the record was (the
		// operation ended as the retry's body was made): its request
		// carries the record too, so that OperationOf finds it.
		resp.Request = resp.Request.WithContext(&recordRef{Context: resp.Request.Context(), rec: rec})
	}
	if rec != nil {
		rec.attempts, rec.reason, rec.waited = n, step.Reason, waited
		if ok {
			rec.reason = ""
		}
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

// maxFreeResends bounds the free resends of one operation (see
// freeResend): a server that refuses every stream is not asked forever,
// and its outcome then goes to the policy like any other.
const maxFreeResends = 3

// freeResend returns the request to send again at once, as the same
// attempt, after err: nil unless err proves that the server did not
// process the request ([policy.NotProcessed]) and body can be given
// again. net/http would have made this replay itself, had the attempt
// carried GetBody: it returns such an error only when it made none, so
// the request goes again once, never twice. base is what the attempt
// copies; n is its number.
func freeResend(ctx context.Context, body *replay, base *http.Request, n int, err error) *http.Request {
	if ctx.Err() != nil {
		return nil
	}
	if _, ok := policy.NotProcessed(err); !ok {
		return nil
	}
	if !body.none && body.get == nil {
		return nil
	}
	r, gerr := body.request(base, n)
	if gerr != nil {
		return nil
	}
	checked, gerr := checkBody(r, true)
	if gerr != nil {
		closeBody(r)
		return nil
	}
	return checked
}

// closeBody closes r's body, as a RoundTripper must even when it sends
// nothing.
func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}

// connWatch learns, through net/http/httptrace, whether an attempt got a
// connection: one that did not cannot have reached the server. It is the
// context of the request that it watches, and holds that request: one
// allocation for the watch, the trace and the request copy, where
// httptrace.WithClientTrace and Request.WithContext would make three.
type connWatch struct {
	context.Context
	asked atomic.Bool // GetConn: the transport reports its connections
	got   atomic.Bool // GotConn
	trace httptrace.ClientTrace
	req   http.Request
}

// clientTraceKey is the key with which httptrace.ContextClientTrace asks
// a context for its trace: unexported, it is learned once by watching
// what ContextClientTrace asks for.
var clientTraceKey = func() any {
	p := &keyProbe{Context: context.Background()}
	httptrace.ContextClientTrace(p)
	return p.key
}()

// watchConns returns a copy of req whose context reports its attempts'
// connections to the returned watch.
func watchConns(req *http.Request) (*connWatch, *http.Request) {
	parent := req.Context()
	w := &connWatch{Context: parent}
	w.trace.GetConn = func(string) { w.asked.Store(true) }
	w.trace.GotConn = func(httptrace.GotConnInfo) { w.got.Store(true) }
	if clientTraceKey == nil || httptrace.ContextClientTrace(parent) != nil {
		// The caller traces its requests too: httptrace composes the two
		// traces, and carries the caller's network hooks.
		w.Context = httptrace.WithClientTrace(parent, &w.trace)
	}
	w.req = *req.WithContext(w)
	return w, &w.req
}

// AfterFunc arranges for f to run once the watched context is done: it
// is the parent's, so that net/http, which derives a context of its own
// from each request's, follows a bound's through its AfterFunc instead of
// on a goroutine.
func (w *connWatch) AfterFunc(f func()) (stop func() bool) { return context.AfterFunc(w.Context, f) }

// Value answers httptrace's key with the watch's trace.
func (w *connWatch) Value(key any) any {
	if key == clientTraceKey && key != nil {
		return &w.trace
	}
	return w.Context.Value(key)
}

// reset forgets the last attempt's connection.
func (w *connWatch) reset() {
	w.asked.Store(false)
	w.got.Store(false)
}

// notConnected reports whether the attempt is known to have got no
// connection: the transport began to look for one (net/http's, and
// x/net/http2's, report GetConn first) and never got it. A transport
// that reports neither (an HTTP/3 or custom transport, a fake) proves
// nothing: the request may have reached the server.
func (w *connWatch) notConnected() bool { return w.asked.Load() && !w.got.Load() }

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

// drain reads what is left of a body, up to drainLimit, and closes it, so
// that its connection can be reused.
func drain(body io.ReadCloser) {
	if body == nil {
		return
	}
	io.CopyN(io.Discard, body, drainLimit)
	body.Close()
}

// readProblem reads up to limit bytes of an RFC 9457 problem body and
// parses them. The body is put back so the caller reads it whole; with
// idleCut, it is read, here and after, with that stall cut.
func readProblem(resp *http.Response, limit int64, idleCut *bound) *policy.Problem {
	if limit < 0 || resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	if !policy.IsProblem(ct) {
		return nil
	}
	// Preallocate what will be read, but no more than the default limit:
	// a huge limit (or a huge Content-Length under it) must not be
	// allocated up front.
	size := min(limit, policy.DefaultMaxProblemBody)
	if resp.ContentLength >= 0 && resp.ContentLength < size {
		size = resp.ContentLength
	}
	var buf bytes.Buffer
	buf.Grow(int(size) + bytes.MinRead)
	body := watchIdle(resp.Body, idleCut)
	_, rerr := buf.ReadFrom(io.LimitReader(body, limit))
	data := buf.Bytes()
	resp.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(data), body), body: body}
	if rerr != nil {
		return nil
	}
	p, err := policy.ParseProblem(ct, data)
	if err != nil {
		return nil
	}
	return p
}

// prefixedBody gives back a body whose first bytes were read already.
type prefixedBody struct {
	io.Reader
	body io.ReadCloser
}

func (b *prefixedBody) Close() error { return b.body.Close() }
