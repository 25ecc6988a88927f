package transport

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/internal/lex"
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
	c := &firstEventConfig{s: s, timeout: timeout, idle: max(idle, 0), judge: judge, onCommit: onCommit}
	if c.timeout > 0 {
		c.timeoutErr = &DeadlineError{Bound: boundFirstEvent, Limit: c.timeout}
	}
	if c.idle > 0 {
		c.idleErr = &DeadlineError{Bound: boundIdle, Limit: c.idle}
	}
	return func(next http.RoundTripper) http.RoundTripper {
		return &firstEvent{next: orDefault(next), c: c}
	}
}

type firstEventConfig struct {
	s          policy.Stream
	timeout    time.Duration // from the headers to the first content event; 0: none
	idle       time.Duration // the longest the read ahead may go without a byte; 0: none
	judge      bool
	onCommit   func(StreamEvent)
	timeoutErr *DeadlineError
	idleErr    *DeadlineError
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
	ct := streamMediaType(resp)
	judgedMedia(req, resp, ct) // the bound above need not look again
	f := formatOf(ct)
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
	t := teeOf(req.Body)
	return t != nil && t.complete()
}

// formatOf returns how a response whose streamMediaType is ct frames its
// events when it is a stream whose first event can be told: server-sent
// events or NDJSON (JSON Lines included); 0 for any other response.
func formatOf(ct string) lex.EventFormat {
	if ct == "" {
		return 0 // text/plain, application/json: no parsing needed
	}
	if len(ct) == len("text/event-stream") && strings.EqualFold(ct, "text/event-stream") {
		return lex.SSE
	}
	for _, s := range ndjsonTypes {
		if len(ct) == len(s) && strings.EqualFold(ct, s) {
			return lex.NDJSON
		}
	}
	return 0
}

var ndjsonTypes = [...]string{
	"application/x-ndjson",
	"application/ndjson",
	"application/jsonl",
	"application/x-jsonl",
	"application/jsonlines",
	"application/x-jsonlines",
}

// readAhead reads resp's body until its first content event, and hands
// resp back with a body that gives the bytes read, then the rest; or
// returns the failed attempt that the events before it make. The
// Timeout of [New] above is held off meanwhile (see holdDeadline).
func (c *firstEventConfig) readAhead(req *http.Request, resp *http.Response, f lex.EventFormat) (*http.Response, error) {
	a := aheadRead{hold: holdDeadline(req.Context()), w: c.watch(resp.Body), buf: make([]byte, 0, aheadChunk)}
	body := resp.Body
	sc := lex.EventScanner{Format: f}
	for {
		if len(a.buf) == cap(a.buf) {
			a.buf = append(a.buf, 0)[:len(a.buf)] // grow
		}
		n, rerr := body.Read(a.buf[len(a.buf):cap(a.buf)])
		a.buf = a.buf[:len(a.buf)+n]
		if n > 0 && a.w != nil {
			a.w.progress()
		}
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
			if cut := a.w.stop(); cut != nil {
				rerr = cut
			}
			a.hold.releaseDeadline(false)
			body.Close()
			return nil, &ResponseBodyError{Status: resp.StatusCode, Read: int64(len(a.buf)), Err: rerr}
		}
	}
}

// aheadRead is the state of one read ahead.
type aheadRead struct {
	hold *boundCtx   // the Timeout bound above, its deadline held off; nil: none
	w    *aheadWatch // nil: no limit
	buf  []byte      // every byte read
}

// commit ends the read ahead with resp handed back, its body read from
// the start.
func (a *aheadRead) commit(resp *http.Response) *http.Response {
	a.w.stop()
	a.hold.releaseDeadline(true)
	return commitStream(resp, a.buf, resp.Body)
}

// fail ends the read ahead with a failed attempt judged as status.
func (a *aheadRead) fail(req *http.Request, resp *http.Response, status int, why string) *http.Response {
	a.w.stop()
	a.hold.releaseDeadline(false)
	return judgedStream(req, resp, a.buf, resp.Body, status, why)
}

// The bits of boundCtx.ahead.
const (
	aheadCount  = 1<<5 - 1 // how many streams beneath read ahead
	aheadLapsed = 1 << 5   // the deadline passed while held: it is reported, and cuts only what Timeout bounds (see releaseDeadline)
	aheadHeld   = 1 << 6   // the deadline was armed when the first began, and is held off
	aheadWon    = 1 << 7   // a stream was committed: the deadline stays off
)

// holdDeadline holds off the deadline of the Timeout bound of [New] above
// (found in ctx) while a stream beneath waits for its first event: that
// wait is bounded by FirstEventTimeout and IdleTimeout, as the stream's
// body would be, so that a model thinking for longer than Timeout before
// its first token is not cut. It returns nil when there is no such bound.
// The deadline comes back, as it was, when every stream that held it has
// failed; once one is committed it stays off.
func holdDeadline(ctx context.Context) *boundCtx {
	c, ok := ctx.Value(boundCtxKey{}).(*boundCtx)
	// A bound with no deadline of its own between (a hedge copy's, which
	// only cancels the copy) is looked through: the Timeout bound is above
	// it.
	for ok && c.b.mode != boundOperation && c.b.d == 0 {
		c, ok = c.parent.Value(boundCtxKey{}).(*boundCtx)
	}
	if !ok || c.b.mode != boundOperation {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended() != live || c.ahead&aheadCount == aheadCount || c.ahead&aheadWon != 0 {
		return nil
	}
	c.ahead++
	if c.dlArmed {
		c.dlArmed = false
		c.ahead |= aheadHeld
		if c.watched {
			c.rearmLocked(clockNow())
		}
	}
	return c
}

// releaseDeadline ends a hold of holdDeadline: committed says whether
// the stream was handed back.
func (c *boundCtx) releaseDeadline(committed bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ahead--
	if committed {
		c.ahead |= aheadWon
	}
	if c.ahead&aheadCount != 0 || c.ahead&(aheadHeld|aheadWon) != aheadHeld {
		return
	}
	c.ahead &^= aheadHeld
	if c.ended() == live {
		c.dlArmed = true
		if clockNow() >= c.due() {
			// The deadline passed while streams held it off. It comes back
			// for the layers above (Deadline reports it, so Retry sends
			// nothing more), but it does not cut the context now: what
			// is left to hand back is the last stream, which Timeout does
			// not bound. bodyStarts cuts a body that Timeout bounds, and
			// settle a failure.
			c.ahead |= aheadLapsed
		} else if c.watched {
			c.rearmLocked(clockNow())
		}
	}
}

// commitStream hands resp back with its body read from the start.
func commitStream(resp *http.Response, buf []byte, body io.ReadCloser) *http.Response {
	b := &aheadBody{buf: buf, rest: body}
	b.open.Store(true)
	resp.Body = b
	return resp
}

// judgedStream returns the failed attempt that resp's opening events
// make: a copy of resp with the status they stand for, whose body gives
// the bytes read and then ends. The original is kept in the copy's
// request context, for [restoreStream] to hand back whole.
func judgedStream(req *http.Request, resp *http.Response, buf []byte, body io.ReadCloser, status int, why string) *http.Response {
	h := &heldStream{orig: resp, status: status, body: &aheadBody{buf: buf, rest: body}}
	j := *resp
	j.StatusCode = status
	j.Status = strconv.Itoa(status) + " " + why
	j.Body = h.body
	j.ContentLength = -1
	base := req
	if resp.Request != nil {
		base = resp.Request
	}
	j.Request = base.WithContext(&heldCtx{Context: base.Context(), h: h})
	return &j
}

// heldStream is a stream judged a failed attempt, kept so that it can be
// handed back as it came when no attempt follows.
type heldStream struct {
	orig   *http.Response
	status int // the status it was judged as
	body   *aheadBody
}

type heldKey struct{}

// heldCtx carries a heldStream: one allocation for both.
type heldCtx struct {
	context.Context
	h *heldStream
}

func (c *heldCtx) Value(key any) any {
	if key == (heldKey{}) {
		return c.h
	}
	return c.Context.Value(key)
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
	h, ok := resp.Request.Context().Value(heldKey{}).(*heldStream)
	if !ok || h.status != resp.StatusCode || h.body.open.Load() {
		return resp
	}
	h.body.open.Store(true)
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

// aheadBody is a stream's body after its read ahead: the bytes read,
// then, when open, the rest of the stream. A judged stream's body is not
// open until it is restored: a layer that drains it reads what was read
// ahead and closes the connection, without waiting on the server.
type aheadBody struct {
	buf  []byte
	pos  int
	rest io.ReadCloser
	open atomic.Bool
}

func (b *aheadBody) Read(p []byte) (int, error) {
	if b.pos < len(b.buf) {
		n := copy(p, b.buf[b.pos:])
		b.pos += n
		if b.pos == len(b.buf) {
			b.buf = nil // let the bytes go once read
			b.pos = 0
		}
		return n, nil
	}
	if !b.open.Load() {
		return 0, io.EOF
	}
	return b.rest.Read(p)
}

func (b *aheadBody) Close() error { return b.rest.Close() }

// aheadWatch cuts a read ahead that waits too long: past the first-event
// limit from the headers, or for the idle limit without a byte. It
// closes the body, which ends a Read blocked on it. One timer serves
// both; a byte read moves the idle limit without touching it.
type aheadWatch struct {
	c     *firstEventConfig
	body  io.Closer
	due   time.Duration // clockNow of the first-event limit; valid when c.timeout > 0
	mu    sync.Mutex
	last  time.Duration // clockNow of the last byte
	timer *time.Timer
	cut   *DeadlineError
	done  bool
}

// watch returns a watch over body, nil when there is no limit.
func (c *firstEventConfig) watch(body io.Closer) *aheadWatch {
	if c.timeout == 0 && c.idle == 0 {
		return nil
	}
	now := clockNow()
	w := &aheadWatch{c: c, body: body, last: now, due: now + c.timeout}
	w.mu.Lock()
	w.timer = time.AfterFunc(w.wait(now), w.fire)
	w.mu.Unlock()
	return w
}

// wait returns how long from now until the nearer limit.
func (w *aheadWatch) wait(now time.Duration) time.Duration {
	d := time.Duration(-1)
	if w.c.idle > 0 {
		d = w.last + w.c.idle - now
	}
	if w.c.timeout > 0 {
		if dd := w.due - now; d < 0 || dd < d {
			d = dd
		}
	}
	return max(d, 0)
}

func (w *aheadWatch) progress() {
	now := clockNow()
	w.mu.Lock()
	w.last = now
	w.mu.Unlock()
}

func (w *aheadWatch) fire() {
	now := clockNow()
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return
	}
	switch {
	case w.c.timeout > 0 && now >= w.due:
		w.cut = w.c.timeoutErr
	case w.c.idle > 0 && now-w.last >= w.c.idle:
		w.cut = w.c.idleErr
	default:
		w.timer.Reset(w.wait(now))
		w.mu.Unlock()
		return
	}
	w.done = true
	w.mu.Unlock()
	w.body.Close()
}

// stop ends the watch, and returns the limit that cut the body, if one
// did.
func (w *aheadWatch) stop() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	w.timer.Stop()
	if w.cut != nil {
		return w.cut
	}
	return nil
}
