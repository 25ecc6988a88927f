package transport

import (
	"context"
	"github.com/sturdyhttp/sturdy/internal/reqbody"
	"github.com/sturdyhttp/sturdy/internal/timecut"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/sturdyhttp/sturdy/internal/lex"
	"github.com/sturdyhttp/sturdy/internal/stream"
	"github.com/sturdyhttp/sturdy/policy"
)

// boundFirstEvent names the first-event bound in a [*DeadlineError].
const boundFirstEvent = "FirstEventTimeout"

// maxAhead is how much of a stream is read, at most, while no content
// event has come: past it the stream is handed back as it is.
const maxAhead = 1 << 20

// aheadChunk is the first read buffer's size: an opening envelope and a
// first event fit in it.
const aheadChunk = 4 << 10

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
	f := formatOf(streamMediaType(resp))
	if f == 0 || !bodyDone(req) {
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

// bodyDone reports whether req's body is known to be whole and on its
// way: none, one that GetBody can make again or whose length is declared
// (the transport sends it by itself), or one kept as it is sent that has
// been read to its end. Any other body may be a full-duplex stream that
// its caller writes only once the response is handed back: waiting for
// the first event before then would wait for ever.
func bodyDone(req *http.Request) bool {
	if req.Body == nil || req.Body == http.NoBody || req.GetBody != nil || req.ContentLength > 0 {
		return true
	}
	t := reqbody.TeeOf(req.Body)
	return t != nil && t.Complete()
}

// formatOf returns how a response whose streamMediaType is ct frames its
// events when it is a stream whose first event can be told: server-sent
// events or NDJSON (JSON Lines included); 0 for any other response.
func formatOf(ct string) lex.EventFormat {
	f, _ := streamFormat(ct)
	return f
}

// readAhead reads resp's body until its first content event, and hands
// resp back with a body that gives the bytes read, then the rest; or
// returns the failed attempt that the events before it make. The
// Timeout of [New] above is held off meanwhile (see holdDeadline).
func (c *firstEventConfig) readAhead(req *http.Request, resp *http.Response, f lex.EventFormat) (*http.Response, error) {
	a := aheadRead{hold: holdDeadline(req.Context()), w: c.watch(resp.Body), buf: make([]byte, 0, aheadChunk)}
	defer a.w.Release()
	body := resp.Body
	sc := lex.EventScanner{Format: f}
	for {
		if len(a.buf) == cap(a.buf) {
			a.buf = append(a.buf, 0)[:len(a.buf)] // grow
		}
		a.w.Enter()
		n, rerr := body.Read(a.buf[len(a.buf):cap(a.buf)])
		a.w.Leave()
		a.buf = a.buf[:len(a.buf)+n]
		for {
			ev, ok := sc.Next(a.buf)
			switch {
			case !ok:
			case ev.Comment:
				continue
			case ev.Other: // not SSE after all: handed back as it is
				return a.commit(resp), nil
			default:
				v := c.s.Judge(ev.Name, ev.Data)
				switch {
				case v.Kind == policy.EventKeepalive:
					continue
				case v.Kind == policy.EventContent || v.Final || !c.judge:
					return a.commit(resp), nil
				}
				return a.fail(req, resp, v.Status, "stream error event "+v.Type), nil
			}
			break
		}
		if rerr == io.EOF && c.judge {
			// The end of the stream: an NDJSON record at EOF needs no
			// line end; a stream that carried nothing at all is a
			// complete empty result, handed back as a success; one that
			// opened and ended before its content is a failed attempt.
			if ev, ok := sc.Finish(a.buf); ok {
				v := c.s.Judge(ev.Name, ev.Data)
				switch {
				case v.Kind == policy.EventContent || v.Final:
					return a.commit(resp), nil
				case v.Kind == policy.EventError:
					return a.fail(req, resp, v.Status, "stream error event "+v.Type), nil
				}
			}
			if sc.Blank() {
				return a.commit(resp), nil
			}
			return a.fail(req, resp, http.StatusBadGateway, "stream ended before its first event"), nil
		}
		switch {
		case rerr == io.EOF, len(a.buf) >= maxAhead:
			return a.commit(resp), nil
		case rerr != nil:
			if cut := a.w.Release(); cut != nil {
				rerr = cut
			}
			a.hold.Unhold(false)
			body.Close()
			return nil, &ResponseBodyError{Status: resp.StatusCode, Read: int64(len(a.buf)), Err: rerr}
		}
	}
}

// aheadRead is the state of one read ahead.
type aheadRead struct {
	hold *timecut.Watch // the Timeout bound above, its deadline held off; nil: none
	w    *timecut.Watch // the read ahead's limits
	buf  []byte         // every byte read
}

// commit ends the read ahead with resp handed back, its body read from
// the start.
func (a *aheadRead) commit(resp *http.Response) *http.Response {
	a.w.Release()
	a.hold.Unhold(true)
	return commitStream(resp, a.buf, resp.Body)
}

// fail ends the read ahead with a failed attempt judged as status.
func (a *aheadRead) fail(req *http.Request, resp *http.Response, status int, why string) *http.Response {
	a.w.Release()
	a.hold.Unhold(false)
	return judgedStream(req, resp, a.buf, resp.Body, status, why)
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

// commitStream hands resp back with its body read from the start.
func commitStream(resp *http.Response, buf []byte, body io.ReadCloser) *http.Response {
	resp.Body = stream.NewAhead(buf, body, true)
	return resp
}

// judgedStream returns the failed attempt that resp's opening events
// make: a copy of resp with the status they stand for, whose body gives
// the bytes read and then ends. The original is kept in the copy's
// request context, for [restoreStream] to hand back whole.
func judgedStream(req *http.Request, resp *http.Response, buf []byte, body io.ReadCloser, status int, why string) *http.Response {
	h := &heldStream{orig: resp, status: status, body: stream.NewAhead(buf, body, false)}
	j := *resp
	j.StatusCode = status
	j.Status = strconv.Itoa(status) + " " + why
	j.Body = h.body
	j.ContentLength = -1
	base := req
	if resp.Request != nil {
		base = resp.Request
	}
	j.Request = base.WithContext(withScope(base.Context(), func(s *scope) { s.held = h }))
	return &j
}

// heldStream is a stream judged a failed attempt, kept so that it can be
// handed back as it came when no attempt follows.
type heldStream struct {
	orig   *http.Response
	status int // the status it was judged as
	body   *stream.Ahead
}

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
	h := s.held
	if h == nil || h.status != resp.StatusCode || h.body.IsOpen() {
		return resp
	}
	h.body.Open()
	resp.StatusCode, resp.Status = h.orig.StatusCode, h.orig.Status
	resp.ContentLength, resp.Request = h.orig.ContentLength, h.orig.Request
	return resp
}

// restoreStreamErr is restoreStream for a RoundTrip's results.
func restoreStreamErr(resp *http.Response, err error) (*http.Response, error) {
	if err == nil {
		resp = restoreStream(resp)
	}
	return resp, err
}

// watch returns a watch over a read ahead of body: its cut closes the
// body, which ends a Read blocked on it.
func (c *firstEventConfig) watch(body io.Closer) *timecut.Watch {
	w := &timecut.Watch{}
	w.Start(&c.l, timecut.Now(), func(err error) {
		if err != nil {
			body.Close()
		}
	})
	w.BodyStarts(true, true)
	return w
}
