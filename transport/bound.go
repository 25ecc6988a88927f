package transport

import (
	"bytes"
	"context"
	"errors"
	"github.com/sturdyhttp/sturdy/internal/timecut"
	"github.com/sturdyhttp/sturdy/internal/verdict"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/internal/lex"
	"github.com/sturdyhttp/sturdy/policy"
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
	body boundBody
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
		resp.Body = &boundBodyRW{boundBody{rc: rw, w: w}, rw}
		return resp, nil
	}
	bo.body = boundBody{rc: body, w: w}
	switch t.mode {
	case boundOperation:
		w.BodyStarts(!isStream(resp), true)
	case boundHeaders:
		if readMax > 0 && !isStream(resp) {
			w.BodyStarts(false, true)
			return readInAttempt(resp, &bo.body, readMax)
		}
		w.BodyStarts(false, false)
	}
	resp.Body = &bo.body
	return resp, nil
}

// boundBody is a response body under a watch: each Read is counted for
// the idle watch (two atomic adds), the watch is released at EOF or
// Close, and an error caused by a cut is the cut's [*DeadlineError].
type boundBody struct {
	rc io.ReadCloser
	w  *timecut.Watch
	wr io.Writer // where WriteTo writes
}

func (b *boundBody) Read(p []byte) (int, error) {
	b.w.Enter()
	n, err := b.rc.Read(p)
	b.w.Leave()
	if err != nil {
		if err == io.EOF {
			b.w.Release()
		} else if cut := b.w.Settle(); cut != nil {
			err = cut
		}
	}
	return n, err
}

// WriteTo writes the body to w, for io.Copy. A body beneath that writes
// itself (an io.WriterTo) keeps its fast path: the time it spends between
// writes to w is time waiting on the server, each write is progress for
// the idle watch, and a write that blocks is the caller's time. Any other
// body is read through Read, as io.Copy would.
func (b *boundBody) WriteTo(w io.Writer) (int64, error) {
	wt, ok := b.rc.(io.WriterTo)
	if !ok {
		return io.Copy(w, (*bodyReader)(b))
	}
	b.wr = w
	b.w.Enter()
	n, err := wt.WriteTo((*bodyWriter)(b))
	b.w.Leave()
	if err == nil {
		b.w.Release()
	} else if cut := b.w.Settle(); cut != nil {
		err = cut
	}
	return n, err
}

// bodyReader is a boundBody seen as a plain reader, so that io.Copy does
// not come back to WriteTo.
type bodyReader boundBody

func (r *bodyReader) Read(p []byte) (int, error) { return (*boundBody)(r).Read(p) }

// bodyWriter is the writer a body's own WriteTo writes to (b.wr): each
// write leaves the body's wait on the server while it runs.
type bodyWriter boundBody

func (b *bodyWriter) Write(p []byte) (int, error) {
	b.w.Leave()
	n, err := b.wr.Write(p)
	b.w.Enter()
	return n, err
}

// WriteString keeps a body that writes strings (a strings.Reader) from
// copying them.
func (b *bodyWriter) WriteString(s string) (int, error) {
	b.w.Leave()
	n, err := io.WriteString(b.wr, s)
	b.w.Enter()
	return n, err
}

func (b *boundBody) Close() error {
	err := b.rc.Close()
	b.w.Release()
	return err
}

// boundBodyRW is the body of a 101 Switching Protocols response: the
// upgraded connection, readable and writable.
type boundBodyRW struct {
	boundBody
	wc io.Writer
}

func (b *boundBodyRW) Write(p []byte) (int, error) { return b.wc.Write(p) }

// CloseWrite half-closes the upgraded connection, as net/http's own 101
// body allows.
func (b *boundBodyRW) CloseWrite() error { return closeWrite(b.wc) }

// isStream reports whether resp's body is a stream: read for as long as
// it makes progress rather than inside a deadline. Streams are server-sent
// events, newline-delimited JSON in its several names, JSON text
// sequences, multipart replace streams, gRPC, Connect streaming and AWS
// event streams (Bedrock's streaming responses).
func isStream(resp *http.Response) bool { return isStreamType(streamMediaType(resp)) }

// isStreamType reports whether ct, a streamMediaType, names a stream.
func isStreamType(ct string) bool {
	_, ok := streamFormat(ct)
	return ok
}

// streamFormat looks ct, a streamMediaType, up in the one list of
// stream media types: ok reports a stream, and f how its events are
// framed when its first event can be told (0 otherwise).
func streamFormat(ct string) (f lex.EventFormat, ok bool) {
	if ct == "" {
		return 0, false // text/plain, application/json: no compare needed
	}
	for _, s := range streamTypes {
		if len(ct) == len(s.ct) && strings.EqualFold(ct, s.ct) {
			return s.f, true
		}
	}
	for _, p := range streamPrefixes {
		if len(ct) > len(p) && strings.EqualFold(ct[:len(p)], p) {
			return 0, true
		}
	}
	return 0, false
}

// streamMediaType returns resp's media type (its Content-Type without
// parameters), or "" when it is too short to name a stream: text/plain
// and application/json cost a header lookup and a few compares.
func streamMediaType(resp *http.Response) string {
	v := resp.Header["Content-Type"]
	if len(v) == 0 {
		return ""
	}
	ct := v[0]
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	const shortest = len("application/grpc") // the shortest stream type
	if len(ct) < shortest {
		return "" // no trimming needed
	}
	if ct = strings.TrimSpace(ct); len(ct) < shortest {
		return ""
	}
	return ct
}

// streamTypes are the media types of streams, with how the events of
// those whose first event [FirstEvent] can tell are framed.
var streamTypes = [...]struct {
	ct string
	f  lex.EventFormat
}{
	{"text/event-stream", lex.SSE},
	{"application/x-ndjson", lex.NDJSON},
	{"application/ndjson", lex.NDJSON},
	{"application/jsonl", lex.NDJSON},
	{"application/x-jsonl", lex.NDJSON},
	{"application/jsonlines", lex.NDJSON},
	{"application/x-jsonlines", lex.NDJSON},
	{"application/json-seq", 0},
	{"application/stream+json", 0},
	{"application/x-json-stream", 0},
	{"multipart/x-mixed-replace", 0},
	{"application/grpc", 0},
	{"application/grpc-web", 0},
	{"application/vnd.amazon.eventstream", 0},
}

var streamPrefixes = [...]string{
	"application/grpc+",    // application/grpc+proto, +json
	"application/grpc-web", // grpc-web+proto, grpc-web-text, grpc-web-text+proto
	"application/connect+", // Connect's streaming protocol
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

// readInAttempt reads resp's body (under its bound, b) up to limit bytes
// before resp is handed back, so that a body cut or stalled half way is
// a failed attempt that Retry may try again. A body longer than limit is
// handed back as it is: what was read, then the rest as it streams.
func readInAttempt(resp *http.Response, b *boundBody, limit int64) (*http.Response, error) {
	var buf bytes.Buffer
	if resp.ContentLength > 0 && resp.ContentLength <= limit {
		// The declared length is the server's word, and may be wrong: no
		// more than the default replay limit is allocated before bytes
		// arrive.
		buf.Grow(int(min(resp.ContentLength, policy.DefaultMaxBufferedBody)) + 1)
	}
	n := limit + 1 // one more, to learn whether the body is longer
	if n < 0 {
		n = limit
	}
	_, err := buf.ReadFrom(io.LimitReader(b, n))
	if err != nil {
		b.Close()
		return nil, &ResponseBodyError{Status: resp.StatusCode, Read: int64(buf.Len()), Err: err}
	}
	if int64(buf.Len()) > limit {
		resp.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(buf.Bytes()), b), body: b}
		return resp, nil
	}
	b.Close()
	resp.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	resp.ContentLength = int64(buf.Len())
	return resp, nil
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

// Unwrap returns why the body failed.
func (e *ResponseBodyError) Unwrap() error { return e.Err }

// Timeout reports whether the body failed for a bound's time.
func (e *ResponseBodyError) Timeout() bool { return isTimeout(e.Err) }

// isTimeout reports whether err says that something timed out.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &t) && t.Timeout()
}
