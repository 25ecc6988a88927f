package transport

import (
	"context"
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/internal/reqbody"
	"github.com/sturdyhttp/sturdy/internal/timecut"

	"github.com/sturdyhttp/sturdy/internal/lex"
	"github.com/sturdyhttp/sturdy/internal/stream"
	"github.com/sturdyhttp/sturdy/policy"
)

// boundFirstEvent names the first-event bound in a [*DeadlineError].
const boundFirstEvent = "FirstEventTimeout"

// FirstEvent returns a middleware that hands a streamed response back at
// its first content event rather than at its headers. It acts on
// server-sent events and NDJSON. Before that event, these are failed
// attempts for the [Retry] or [Hedge] above:
//
//   - An error event is judged as the status it stands for
//     ([policy.StreamErrorStatus]). The attempt's response carries that
//     status, and Retry and Hedge try again under their usual rules. A
//     request not safe to send twice goes again only after a rate limit.
//   - An end after the stream opened (a comment, a ping, a preamble, an
//     SSE event cut before its blank line) and before any content event
//     is judged as a 502. An NDJSON record at the end needs no final
//     newline. A stream with no event at all (empty, or blank lines only)
//     is a complete, empty answer, handed back as a success.
//   - A stall past timeout is a [*ResponseBodyError] wrapping a
//     [*DeadlineError] named "FirstEventTimeout". The connection is
//     closed.
//
// A request whose body may still be being written is handed back at its
// headers. That is a full-duplex stream, with no declared length and no
// GetBody.
//
// Comments, pings and the events in s.Preambles commit nothing. The caller
// reads every byte of the stream handed back, preamble included. When Retry
// or Hedge gives up on a judged stream, it hands back that stream as it
// came, its status and every byte. An error whose type is final, such as a malformed request, is
// handed back at once.
//
// A zero timeout means no limit of its own; a negative one turns the layer
// off. Place FirstEvent beneath Retry, Hedge and Breaker, as [New] does.
// Without a Retry or Hedge above, a judged stream's status is not restored.
func FirstEvent(timeout time.Duration, s policy.Stream) Middleware {
	return firstEventMiddleware(timeout, 0, s, true, nil)
}

// firstEventMiddleware is FirstEvent with an idle limit on the read
// ahead (New's IdleTimeout), judging streams only when judge is set (a
// Retry or Hedge above will try again); nil when timeout is negative.
func firstEventMiddleware(timeout, idle time.Duration, s policy.Stream, judge bool, onCommit func(StreamEvent)) Middleware {
	if timeout < 0 {
		return nil
	}
	c := &firstEventConfig{s: s, l: newLimits(timeout, idle, boundFirstEvent), judge: judge, onCommit: onCommit}
	return func(next http.RoundTripper) http.RoundTripper {
		return &firstEvent{next: orDefault(next), c: c}
	}
}

type firstEventConfig struct {
	s        policy.Stream
	l        timecut.Limits // from the headers to the first content event, and the longest a Read may block; 0: none
	judge    bool
	onCommit func(StreamEvent)
}

type firstEvent struct {
	next http.RoundTripper
	c    *firstEventConfig
}

func (t *firstEvent) CloseIdleConnections() { closeIdle(t.next) }

func (t *firstEvent) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp == nil || resp.StatusCode < 200 || resp.StatusCode > 299 ||
		resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	f := stream.Format(resp)
	if f == 0 || !reqbody.Done(req) {
		return resp, nil
	}
	if t.c.onCommit == nil {
		return t.c.readAhead(req, resp, f)
	}
	start, status := time.Now(), resp.StatusCode
	resp, err = t.c.readAhead(req, resp, f)
	e := StreamEvent{Request: req, Wait: time.Since(start), Err: err}
	if err == nil {
		e.Committed, e.Status = resp.StatusCode == status, resp.StatusCode
	}
	t.c.onCommit(e)
	return resp, err
}

// StreamEvent describes how a stream's read ahead to its first content
// event ended, for [Hooks].OnStreamCommit.
type StreamEvent struct {
	Request *http.Request // the attempt's request
	// Committed reports that a content event came, or that the stream
	// ended complete and empty: the stream was handed back, and nothing
	// of it is sent again.
	Committed bool
	// Status is the response's status: the stream's own when committed,
	// else the status an error event or an early end stands for.
	Status int
	// Err is the error of a stream that stalled before its first event.
	Err error
	// Wait is the time from the headers to the end of the read ahead.
	Wait time.Duration
}

// readAhead reads resp's body until its first content event, and hands
// resp back with a body that gives the bytes read, then the rest; or
// returns the failed attempt that the events before it make. The
// Timeout of [New] above is held off meanwhile (see holdDeadline).
func (c *firstEventConfig) readAhead(req *http.Request, resp *http.Response, f lex.EventFormat) (*http.Response, error) {
	hold, w := holdDeadline(req.Context()), stream.Watch(&c.l, resp.Body)
	a := stream.ReadAhead(resp.Body, f, c.s, c.judge, w)
	w.Release()
	hold.Unhold(a.Err == nil && a.Status == 0)
	switch {
	case a.Err != nil:
		return nil, &ResponseBodyError{Status: resp.StatusCode, Read: int64(len(a.Buf)), Err: a.Err}
	case a.Status != 0:
		return judgedStream(req, resp, a.Buf, a.Status, a.Why), nil
	}
	resp.Body = stream.NewAhead(a.Buf, resp.Body, true) // read from the start
	return resp, nil
}

// holdDeadline holds off the deadline of the Timeout bound of [New] above
// (found in ctx) while a stream beneath waits for its first event: that
// wait is bounded by FirstEventTimeout and IdleTimeout, as the stream's
// body would be, so that a model thinking for longer than Timeout before
// its first token is not cut. It returns nil when there is no such bound.
// The deadline comes back, as it was, when every stream that held it has
// failed; once one is committed it stays off.
func holdDeadline(ctx context.Context) *timecut.Watch {
	// A hedge copy's context, which only cancels the copy, is no bound:
	// the scope names the Timeout bound above it.
	s := scopeOf(ctx)
	if s == nil {
		return nil
	}
	for w := s.bound; w != nil; w = w.Up {
		if w.L.Name == boundTimeout {
			if w.Hold() {
				return w
			}
			return nil
		}
	}
	return nil
}

// judgedStream returns the failed attempt that resp's opening events
// make: a copy of resp with the status they stand for, whose body gives
// the bytes read and then ends. The original is kept in the copy's
// request context, for [restoreStream] to hand back whole.
func judgedStream(req *http.Request, resp *http.Response, buf []byte, status int, why string) *http.Response {
	j, h := stream.Judged(resp, buf, status, why)
	base := req
	if resp.Request != nil {
		base = resp.Request
	}
	j.Request = base.WithContext(withScope(base.Context(), func(s *scope) { s.held = h }))
	return j
}

// heldStream is a stream judged a failed attempt, kept so that it can be
// handed back as it came when no attempt follows.
type heldStream = stream.Held

// restoreStream hands back, in place of a stream judged a failed
// attempt, the stream as it came: its status, and a body that reads
// every byte (the one resp has, which may be wrapped by layers between,
// now reads on past the bytes read ahead). Any other resp is returned as
// it is. It is found through the response's request context, which
// survives RoundTrippers between the layers.
func restoreStream(resp *http.Response) *http.Response {
	if resp == nil || resp.StatusCode < 400 || resp.Request == nil {
		return resp
	}
	s := scopeOf(resp.Request.Context())
	if s == nil {
		return resp
	}
	s.held.Restore(resp)
	return resp
}

// restoreStreamErr is restoreStream for a RoundTrip's results.
func restoreStreamErr(resp *http.Response, err error) (*http.Response, error) {
	if err == nil {
		resp = restoreStream(resp)
	}
	return resp, err
}
