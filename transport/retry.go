package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// drainLimit is how much of a failed attempt's body is read before it is
// closed, so that the connection goes back to the pool: a few KiB of JSON
// or HTML error page always fit, and so do 64 KiB error bodies. A longer
// body is closed unread, which costs a new connection.
const drainLimit = 256 << 10

// Retry retries failed attempts as policy p says: which outcomes are
// retried ([policy.DefaultClassifier] by default), how many attempts
// (4 by default), how long between them (the longer of p.Backoff's wait
// and the server's Retry-After or retry-after-ms).
//
// Every attempt is a copy of the caller's request, which is never
// modified; the first attempt of a request whose body need not be
// buffered is the request itself. Bodies are replayed byte for byte:
// through GetBody when the request has it (the body is never copied);
// otherwise the body is read into memory up to p.MaxBufferedBody (1 MiB by
// default) and replayed from there; a longer body is sent once, as it
// streams, and not retried.
//
// Waits draw on the request context's deadline: when the next wait could
// not end before the deadline, Retry stops at once and returns what it
// has, rather than waiting only to fail. It does the same when a [Breaker]
// beneath it will still be open when the wait ends. Waits end at once when the
// context is canceled. A failed attempt's response body is drained (up to
// 256 KiB) and closed before the wait, so its connection is reused; a
// problem body (RFC 9457) is read up to p.MaxProblemBody to learn whether
// the server says the error is retriable, and handed to the caller
// intact when that response is the last one.
//
// When retries end on a response, Retry returns it with a nil error, as a
// RoundTripper must. When they end on an error after more than one
// attempt, the error is a [*RetryError] that says how many attempts were
// made and wraps the last cause, so errors.Is(err,
// context.DeadlineExceeded) keeps working through [http.Client].
func Retry(p policy.Retry) Middleware {
	c := &retryConfig{
		attempts:   p.Attempts(),
		backoff:    p.BackoffFunc(),
		raLimit:    p.RetryAfterLimit(),
		classify:   p.Classifier(),
		defaultCls: p.Classify == nil,
		bufLimit:   p.BufferLimit(),
		probLimit:  p.ProblemLimit(),
		keyHeader:  http.CanonicalHeaderKey(p.KeyHeader()),
		budget:     p.Budget,
		onAttempt:  p.OnAttempt,
		onRetry:    p.OnRetry,
		onGiveUp:   p.OnGiveUp,
	}
	return func(next http.RoundTripper) http.RoundTripper {
		return &retrier{next: orDefault(next), c: c}
	}
}

type retryConfig struct {
	attempts   int
	backoff    policy.Backoff
	raLimit    time.Duration
	classify   policy.Classifier
	defaultCls bool
	bufLimit   int64
	probLimit  int64
	keyHeader  string
	budget     *policy.Budget
	onAttempt  func(policy.AttemptEvent)
	onRetry    func(policy.RetryEvent)
	onGiveUp   func(policy.GiveUpEvent)
}

type retrier struct {
	next http.RoundTripper
	c    *retryConfig
}

func (t *retrier) CloseIdleConnections() { closeIdle(t.next) }

// RetryError is returned when an operation of more than one attempt ends
// on an error. It wraps the last attempt's error.
type RetryError struct {
	Attempts int   // attempts made
	Err      error // the last attempt's error
}

func (e *RetryError) Error() string {
	return "transport: giving up after " + strconv.Itoa(e.Attempts) + " attempts: " + e.Err.Error()
}

// Unwrap returns the last attempt's error.
func (e *RetryError) Unwrap() error { return e.Err }

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
			return nil, err
		}
	} else if c.onAttempt == nil && c.onGiveUp == nil {
		return t.next.RoundTrip(req)
	}
	ctx := req.Context()
	idempotent := policy.IsIdempotent(req, c.keyHeader)
	if c.budget != nil {
		c.budget.Request(req.URL.Host, time.Now())
	}

	var (
		resp *http.Response
		prev time.Duration
		r    = req
	)
	if body.first != nil {
		r = body.firstRequest(req)
	}
	for n := 1; ; n++ {
		var start time.Time
		if c.onAttempt != nil {
			start = time.Now()
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
		if ctx.Err() != nil {
			return t.giveUp(req, n, resp, err, context.Cause(ctx).Error())
		}
		var problem *policy.Problem
		if err == nil {
			problem = readProblem(resp, c.probLimit)
		}
		now := time.Now()
		d := c.classify(policy.Outcome{
			Request:    r,
			Response:   resp,
			Err:        err,
			Problem:    problem,
			Idempotent: idempotent,
			Keyed:      idempotent && req.Header.Get(c.keyHeader) != "",
			Now:        now,
		})
		switch {
		case !d.Retry:
			return t.giveUp(req, n, resp, err, d.Reason)
		case n >= c.attempts:
			return t.giveUp(req, n, resp, err, d.Reason+", attempts exhausted")
		case !body.replayable():
			return t.giveUp(req, n, resp, err, d.Reason+", body not replayable")
		}
		wait := c.backoff(n, prev)
		if d.HasRetryAfter {
			if c.raLimit < 0 || d.RetryAfter > c.raLimit {
				return t.giveUp(req, n, resp, err, d.Reason+", retry-after "+d.RetryAfter.String()+" too long")
			}
			wait = max(wait, d.RetryAfter)
		}
		if dl, ok := ctx.Deadline(); ok && !now.Add(wait).Before(dl) {
			return t.giveUp(req, n, resp, err, d.Reason+", wait "+wait.String()+" exceeds deadline")
		}
		if rerr := refusal(t.next, r, now.Add(wait)); rerr != nil {
			return t.giveUp(req, n, resp, err, d.Reason+", next attempt would be refused: "+rerr.Error())
		}
		if c.budget != nil && !c.budget.Retry(req.URL.Host, now) {
			return t.giveUp(req, n, resp, err, d.Reason+", retry budget exhausted")
		}
		next, gerr := body.request(req, n+1)
		if gerr != nil { // GetBody failed: no further attempt can be made
			return t.giveUp(req, n, resp, err, d.Reason+", GetBody: "+gerr.Error())
		}
		if c.onRetry != nil {
			c.onRetry(policy.RetryEvent{Request: req, Attempt: n + 1, Wait: wait, Reason: d.Reason, Status: status(resp), Err: err})
		}
		if resp != nil {
			drain(resp.Body)
		}
		if serr := sleep(ctx, wait); serr != nil {
			if next.Body != nil {
				next.Body.Close()
			}
			return t.giveUp(req, n, nil, serr, serr.Error())
		}
		r, prev = next, wait
	}
}

// giveUp ends an operation: it reports the outcome to OnGiveUp when it is
// a failure and returns it, wrapping an error after several attempts.
func (t *retrier) giveUp(req *http.Request, attempts int, resp *http.Response, err error, reason string) (*http.Response, error) {
	if t.c.onGiveUp != nil && (err != nil || resp != nil && resp.StatusCode >= 400) {
		t.c.onGiveUp(policy.GiveUpEvent{Request: req, Attempts: attempts, Reason: reason, Status: status(resp), Err: err})
	}
	if err != nil && attempts > 1 {
		return nil, &RetryError{Attempts: attempts, Err: err}
	}
	return resp, err
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
// parses them. The body is put back so the caller reads it whole.
func readProblem(resp *http.Response, limit int64) *policy.Problem {
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
	_, rerr := buf.ReadFrom(io.LimitReader(resp.Body, limit))
	data := buf.Bytes()
	resp.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(data), resp.Body), body: resp.Body}
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

// replay knows how to give each attempt the caller's body again.
type replay struct {
	get   func() (io.ReadCloser, error) // nil: the body cannot be replayed
	first io.ReadCloser                 // the first attempt's body when it is not req.Body
	none  bool                          // the request has no body
}

// newReplay prepares req's body for replay: nothing to do without a body
// or with GetBody; otherwise the body is read up to limit bytes.
func newReplay(req *http.Request, limit int64) (replay, error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return replay{none: true}, nil
	case req.GetBody != nil:
		return replay{get: req.GetBody}, nil
	case limit < 0:
		return replay{}, nil
	}
	var buf bytes.Buffer
	if req.ContentLength > 0 && req.ContentLength <= limit {
		buf.Grow(int(req.ContentLength) + 1)
	}
	n := limit + 1 // one more, to learn whether the body is longer
	if n < 0 {     // limit is math.MaxInt64: no body is longer
		n = limit
	}
	_, err := buf.ReadFrom(io.LimitReader(req.Body, n))
	if err != nil {
		req.Body.Close()
		return replay{}, fmt.Errorf("transport: reading request body: %w", err)
	}
	data := buf.Bytes()
	if int64(len(data)) > limit {
		// Too long to keep: send it once, as it streams.
		return replay{first: &prefixedBody{Reader: io.MultiReader(bytes.NewReader(data), req.Body), body: req.Body}}, nil
	}
	req.Body.Close()
	get := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	first, _ := get()
	return replay{get: get, first: first}, nil
}

func (b *replay) replayable() bool { return b.none || b.get != nil }

// firstRequest is the first attempt when its body is not req.Body.
func (b *replay) firstRequest(req *http.Request) *http.Request {
	r := *req
	r.Body = b.first
	r.GetBody = b.get
	return &r
}

// request makes attempt n's request: a copy of req whose context says
// which attempt it is, with a fresh body.
func (b *replay) request(req *http.Request, n int) (*http.Request, error) {
	r := req.WithContext(context.WithValue(req.Context(), attemptKey{}, n))
	if b.none {
		return r, nil
	}
	body, err := b.get()
	if err != nil {
		return nil, err
	}
	r.Body = body
	r.GetBody = b.get
	return r, nil
}
