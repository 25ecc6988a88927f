package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// drainLimit is how much of a failed attempt's body is read before it is
// closed, so that the connection goes back to the pool: a few KiB of JSON
// or HTML error page always fit, and so do 64 KiB error bodies. A longer
// body is closed unread, which costs a new connection.
const drainLimit = 256 << 10

// Retry retries failed attempts as policy p says, and only when sending
// the request again is safe. [policy.Retry.Next] decides each step (which
// outcomes are retried, how many attempts, how long between them, why an
// operation stops); Retry carries the decisions out.
//
// A request is sent more than once only when that is safe: its method is
// idempotent or it carries an idempotency key ([policy.SafeToResend];
// [IdempotencyKey] adds keys only to requests that are vouched for), or
// the outcome proves that the server did not act on it (the connection
// was never made, a 429, x-should-retry: true, Stripe-Should-Retry: true,
// a problem with is_retriable: true). A POST nobody vouched for that
// fails in any other way (a 500, a reset, an attempt timeout) is sent
// once and its outcome handed back as it is. To learn whether a
// connection was made, Retry watches such requests with
// [net/http/httptrace]. Their attempts carry no GetBody, so that
// net/http cannot send the body again by itself either: its HTTP/2
// client does after a RST_STREAM with PROTOCOL_ERROR, which does not
// prove that the server skipped the request. The cost is net/http's
// safe replays of them: a stream refused (REFUSED_STREAM) or above a
// graceful GOAWAY's last stream, or an HTTP/1 write on a reused
// connection that failed before its first byte, is handed back as an
// error, since net/http tells these apart only in its error text.
//
// A request that cannot be sent as written is the caller's error
// ([policy.IsCallerError]): it is returned at once and never retried.
// Retry hands each attempt's body to the next RoundTripper wrapped so
// that a body shorter or longer than its ContentLength, or whose reader
// fails, ends the attempt with a [*policy.BodyError] (net/http reports
// both with errors of no type), which a [Breaker] beneath does not count
// against the host.
//
// Every attempt is a copy of the caller's request, which is never
// modified. Bodies are replayed byte for byte: through GetBody when the
// request has it (the body is never copied); otherwise its bytes are kept
// as the first attempt sends them, up to p.MaxBufferedBody (1 MiB by
// default), and replayed from there. Nothing is read ahead of the wire:
// the first attempt is sent at once and a full-duplex body flows as it is
// written. A body that runs past the limit is sent once, as it streams,
// and not retried.
//
// Waits draw on the request context's deadline: when the next wait could
// not end before the deadline, Retry stops at once and returns what it
// has, rather than waiting only to fail. It does the same when a [Breaker]
// beneath it will still be open when the wait ends and, in [New], when
// the host's pause or a spent quota that counts the request would hold
// the next attempt past the deadline ([ratelimit.Tracker.RefusedAt]).
// Waits end at once when the
// context is canceled. A failed attempt's response body is drained (up to
// 256 KiB) and closed before the wait, so its connection is reused; a
// problem body (RFC 9457) is read up to p.MaxProblemBody to learn whether
// the server says the error is retriable, and handed to the caller
// intact when that response is the last one.
//
// When retries end on a response, Retry returns it with a nil error, as a
// RoundTripper must, and OnGiveUp says why when it is an error status.
// When they end on an error, the error is a [*RetryError] that says how
// many attempts were made and why no further one was (its
// [policy.Reason]), and wraps the last cause, so errors.Is(err,
// context.DeadlineExceeded) keeps working through [http.Client].
func Retry(p policy.Retry) Middleware {
	defaultCls := p.Classify == nil
	p = p.WithDefaults()
	c := &retryConfig{
		p:          p,
		attempts:   p.MaxAttempts,
		defaultCls: defaultCls,
		bufLimit:   p.MaxBufferedBody,
		probLimit:  p.MaxProblemBody,
		keyHeader:  http.CanonicalHeaderKey(p.IdempotencyHeader),
		budget:     budgetOf(p.Budget),
		onAttempt:  p.OnAttempt,
		onRetry:    p.OnRetry,
		onGiveUp:   p.OnGiveUp,
	}
	return func(next http.RoundTripper) http.RoundTripper {
		if h, ok := next.(*hedger); ok {
			h.underRetry = true // a judged stream is restored here
			if c.budget != nil && h.c.budget == c.budget {
				h.opsCounted = true // one Budget: its operations are counted here
			}
		}
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
	refuses    func(*http.Request, time.Time) error // set by New: asks its breakers and its quota tracker
	idleCut    *DeadlineError                       // set by New: IdleTimeout's cut, for the failed bodies it reads
	onAttempt  func(policy.AttemptEvent)
	onRetry    func(policy.RetryEvent)
	onGiveUp   func(policy.GiveUpEvent)
}

type retrier struct {
	next http.RoundTripper
	c    *retryConfig
}

func (t *retrier) CloseIdleConnections() { closeIdle(t.next) }

// RetryError is the error of an operation that [Retry] ended on an
// error: how many attempts were made (0 when the request could not be
// sent as written), why no further attempt was, and the last attempt's
// error, which it wraps. Find it with errors.As through
// [http.Client]'s *url.Error.
type RetryError struct {
	Attempts int           // attempts made
	Reason   policy.Reason // why no further attempt was made
	Err      error         // the last attempt's error
	// Refusal is, when Reason is [policy.ReasonRefused], the error the
	// next attempt would have met (a [*CircuitOpenError]); nil otherwise.
	Refusal error
}

// Error says what ended the operation: "transport: giving up after 2
// attempts (retry budget spent): <last error>". When a layer beneath
// would refuse the next attempt, it names the refusal instead of the last
// error: "transport: giving up after 2 attempts: next attempt refused:
// transport: circuit open for ...".
func (e *RetryError) Error() string {
	if e.Attempts == 0 {
		return "transport: not sent (" + string(e.Reason) + "): " + e.Err.Error()
	}
	head := "transport: giving up after " + strconv.Itoa(e.Attempts) + " attempt"
	if e.Attempts != 1 {
		head += "s"
	}
	if e.Refusal != nil {
		return head + ": " + string(e.Reason) + ": " + e.Refusal.Error()
	}
	if e.Reason == "" || e.Reason == policy.ReasonAttemptsUsed {
		return head + ": " + e.Err.Error()
	}
	return head + " (" + string(e.Reason) + "): " + e.Err.Error()
}

// Unwrap returns the last attempt's error and, when there is one, the
// refusal that ended the operation, so that errors.Is(err,
// [ErrCircuitOpen]) and errors.Is(err, context.DeadlineExceeded) answer
// for both.
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

var errNilResponse = errors.New("transport: RoundTripper returned a nil *Response with a nil error")

type attemptKey struct{}

// AttemptFromContext returns the number of the attempt that a request
// belongs to, as set by [Retry] on its requests' contexts: 1 for the
// first attempt (and for requests that did not pass through Retry), 2 for
// the first retry, and so on. RoundTrippers beneath Retry, such as an
// SDK's logging transport, and hooks can use it.
func AttemptFromContext(ctx context.Context) int {
	if n, ok := ctx.Value(attemptKey{}).(int); ok {
		return n
	}
	return 1
}

func (t *retrier) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.c
	if req.URL == nil { // nothing to retry: let the base report the error
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
	} else if c.onAttempt == nil && c.onGiveUp == nil {
		r, err := checkBody(req, false)
		if err != nil {
			closeBody(req)
			return nil, &RetryError{Reason: policy.ReasonCallerError, Err: err}
		}
		if c.budget != nil { // an operation still, and a Hedge beneath may share the budget
			c.budget.request(req.URL, startOf(req.Context()))
		}
		if r.GetBody != nil && !policy.SafeToResend(req, c.keyHeader) {
			r = withoutGetBody(r, r != req)
		}
		return restoreStreamErr(t.next.RoundTrip(r))
	}
	ctx := req.Context()
	safe := policy.SafeToResend(req, c.keyHeader)
	if c.budget != nil {
		c.budget.request(req.URL, startOf(ctx))
	}
	// base is what each attempt copies: the caller's request, or a copy
	// whose context tells whether a connection was made, for a request
	// that may be sent again only if none was.
	var (
		base  = req
		watch *connWatch
	)
	if !safe {
		if c.attempts > 1 {
			watch = newConnWatch()
			base = req.WithContext(httptrace.WithClientTrace(ctx, &watch.trace))
		}
		// Every attempt goes without GetBody: see withoutGetBody.
		if base.GetBody != nil {
			base = withoutGetBody(base, base != req)
		}
		body.noGetBody = true
	}

	var (
		resp *http.Response
		prev time.Duration
		r    = base
		rec  *opRecord // what layers beneath say, from the second attempt on
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
		if c.onAttempt != nil {
			start = time.Now()
		}
		if watch != nil {
			watch.reset()
		}
		resp, err = t.next.RoundTrip(r)
		if resp == nil && err == nil { // a broken RoundTripper beneath: say so, as http.Client does
			err = errNilResponse
		}
		if c.onAttempt != nil {
			c.onAttempt(attemptEvent(req, n, resp, err, time.Since(start)))
		}
		if err == nil && resp.StatusCode < 400 && c.defaultCls {
			return resp, nil // success: the fast path
		}
		var problem *policy.Problem
		if err == nil && ctx.Err() == nil {
			problem = readProblem(resp, c.probLimit, c.idleCut)
		}
		now := time.Now()
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
		}
		if dl, ok := ctx.Deadline(); ok {
			s.Deadline = dl
		}
		attempt, record := r, rec // not r and rec themselves: a closure over them would move them to the heap on every call
		s.Refused = func(at time.Time) error { return t.refusal(record, attempt, at) }
		if c.budget != nil {
			s.Budget = func() bool { return c.budget.retry(req.URL, clockOf(now)) }
		}
		step := c.p.Next(s)
		if !step.Retry {
			return t.giveUp(req, n, resp, err, step)
		}
		next, gerr := body.request(recorded(&rec, base), n+1)
		if gerr != nil { // GetBody failed: no further attempt can be made
			return t.giveUp(req, n, resp, err, policy.Step{Reason: policy.ReasonBodyNotReplayable, Decision: policy.Decision{Reason: "GetBody: " + gerr.Error()}})
		}
		if c.onRetry != nil {
			c.onRetry(policy.RetryEvent{Request: req, Attempt: n + 1, Wait: step.Wait, Reason: step.Decision.Reason, Status: status(resp), Err: err})
		}
		if resp != nil {
			drain(watchIdle(resp.Body, c.idleCut))
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
			return t.giveUp(req, n, nil, serr, policy.Step{Reason: reason})
		}
		if r, err = checkBody(next, true); err != nil {
			closeBody(next)
			return t.giveUp(req, n, nil, err, policy.Step{Reason: policy.ReasonCallerError})
		}
		prev = step.Wait
	}
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

// closeBody closes r's body, as a RoundTripper must even when it sends
// nothing.
func closeBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}

// connWatch learns, through net/http/httptrace, whether an attempt got a
// connection: one that did not cannot have reached the server.
type connWatch struct {
	asked atomic.Bool // GetConn: the transport reports its connections
	got   atomic.Bool // GotConn
	trace httptrace.ClientTrace
}

func newConnWatch() *connWatch {
	w := &connWatch{}
	w.trace.GetConn = func(string) { w.asked.Store(true) }
	w.trace.GotConn = func(httptrace.GotConnInfo) { w.got.Store(true) }
	return w
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
func readProblem(resp *http.Response, limit int64, idleCut *DeadlineError) *policy.Problem {
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
