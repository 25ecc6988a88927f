package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/internal/respbody"
	"github.com/sturdyhttp/sturdy/internal/stream"
	"github.com/sturdyhttp/sturdy/internal/timecut"
	"github.com/sturdyhttp/sturdy/internal/verdict"
)

// The names a [*DeadlineError] gives the bounds of [New].
const (
	boundTimeout = "Timeout"
	boundAttempt = "AttemptTimeout"
	boundIdle    = "IdleTimeout"
)

// boundMode says what a bound covers once the response headers are in.
type boundMode uint8

const (
	// boundAll ([Deadline]) bounds the body too, whatever it is.
	boundAll boundMode = iota
	// boundOperation (New's Timeout and IdleTimeout) bounds a body that
	// is not a stream by the deadline, and every body by the idle limit.
	boundOperation
	// boundHeaders (New's AttemptTimeout) ends at the response headers;
	// it reads a body that is not a stream inside the attempt when asked.
	boundHeaders
)

// bound is the RoundTripper of [Deadline] and of the bounds of [New].
type bound struct {
	next    http.RoundTripper
	mode    boundMode
	l       timecut.Limits
	readMax int64 // boundHeaders: read bodies up to this many bytes in the attempt (0: not unless asked per request)
}

func newBound(next http.RoundTripper, mode boundMode, d, idle time.Duration, name string, readMax int64) *bound {
	return &bound{next: next, mode: mode, l: newLimits(d, idle, name), readMax: readMax}
}

func (t *bound) CloseIdleConnections() { closeIdle(t.next) }

// boundOp is what a bound of [New] allocates per request, in one piece:
// the watch that cuts it, the scope its context carries (and the
// operation, when no layer above made one), the request copy and the
// response body's wrapper.
type boundOp struct {
	w    timecut.Watch
	s    scope
	op   operation
	j    verdict.Kept // the attempt's, when the bound begins the operation
	req  http.Request
	body respbody.Body
}

func (t *bound) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.mode == boundAll {
		return t.hard(req)
	}
	parent := req.Context()
	readMax := t.readMax
	if t.mode == boundHeaders {
		if readBodyUsed.Load() { // else no context carries a limit
			if s := scopeOf(parent); s != nil && s.readBody != 0 {
				readMax = s.readBody
			}
		}
		if t.l.D == 0 && readMax <= 0 {
			return t.next.RoundTrip(req)
		}
	}
	now := timecut.Now()
	ps := scopeOf(parent)
	watchBody := t.l.Idle > 0 && (t.mode == boundOperation || readMax > 0)
	if pdl, ok := deadlineOfScope(parent, ps); ok && readMax <= 0 {
		// A deadline above comes before anything this bound could cut:
		// it has nothing to add.
		left := pdl.Sub(timecut.Time(now))
		if (t.l.D == 0 || left <= t.l.D) && (!watchBody || left <= t.l.Idle) {
			return t.next.RoundTrip(req)
		}
	}
	bo := &boundOp{}
	ctx, cancel := context.WithCancelCause(parent)
	w := &bo.w
	if ps != nil {
		bo.s, w.Up = *ps, ps.bound
	}
	if bo.s.op == nil {
		bo.op.start = now
		bo.s.op, bo.s.judged = &bo.op, &bo.j
	}
	bo.s.bound = w
	w.Start(&t.l, now, cancel)
	bo.req = *req.WithContext(context.WithValue(ctx, opKey{}, &bo.s))
	resp, err := t.next.RoundTrip(&bo.req)
	if err != nil || resp == nil {
		if err != nil {
			w.Settle() // a failure after the deadline is the deadline's
		}
		if cut := w.Release(); cut != nil && err != nil {
			err = withAttempts(cut, err) // the cut, and how many attempts it ended
		}
		return resp, err
	}
	body := resp.Body
	if body == nil || body == http.NoBody {
		w.Release()
		return resp, nil
	}
	if rw, ok := body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		w.BodyStarts(false, false) // an upgraded connection is neither bounded nor cut
		resp.Body = respbody.NewRW(rw, w)
		return resp, nil
	}
	bo.body.Set(body, w)
	switch t.mode {
	case boundOperation:
		w.BodyStarts(!stream.Is(resp), true)
	case boundHeaders:
		if readMax > 0 && !stream.Is(resp) {
			w.BodyStarts(false, true)
			return respbody.ReadInAttempt(resp, &bo.body, readMax, bodyError)
		}
		w.BodyStarts(false, false)
	}
	resp.Body = &bo.body
	return resp, nil
}

// readBodyUsed is set once WithReadBody has made a context with a
// limit: until then the attempt bound need not look for it, which costs a
// walk up the request's context chain.
var readBodyUsed atomic.Bool

// WithReadBody returns a copy of ctx that sets [Options.ReadBody] for the
// requests made with it. A limit above 0 reads bodies up to that limit
// inside the attempt. A limit below 0 turns the reading off, and 0 keeps
// the stack's setting.
func WithReadBody(ctx context.Context, limit int64) context.Context {
	if limit == 0 {
		return ctx
	}
	if !readBodyUsed.Load() {
		readBodyUsed.Store(true)
	}
	return withScope(ctx, func(s *scope) { s.readBody = limit })
}

// ResponseBodyError is the error of an attempt whose body failed while it
// was read inside the attempt ([Options.ReadBody]). The server sent its
// headers, then cut the body or stalled. [Retry] treats it as a network
// error: it tries again when the request is safe to send twice.
type ResponseBodyError struct {
	Status int   // the response's status
	Read   int64 // bytes of the body read before it failed
	Err    error // why it failed
}

// Error gives the status, the bytes read and why the body failed.
func (e *ResponseBodyError) Error() string {
	return "transport: response body (status " + strconv.Itoa(e.Status) + ") failed after " + strconv.FormatInt(e.Read, 10) + " bytes: " + e.Err.Error()
}

// bodyError is the [*ResponseBodyError] of a body read inside its attempt.
func bodyError(status int, read int64, err error) error {
	return &ResponseBodyError{Status: status, Read: read, Err: err}
}

// Unwrap returns why the body failed.
func (e *ResponseBodyError) Unwrap() error { return e.Err }

// Timeout reports whether the body failed for a bound's time.
func (e *ResponseBodyError) Timeout() bool { return isTimeout(e.Err) }

// isTimeout reports whether err says that something timed out.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}
