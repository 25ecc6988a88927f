package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

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
	d       time.Duration // the deadline; 0: none
	idle    time.Duration // the idle limit; 0: none
	tick    time.Duration // how often the idle watch looks: idle/8
	readMax int64         // boundHeaders: read bodies up to this many bytes in the attempt (0: not unless asked per request)
	dlErr   *DeadlineError
	idleErr *DeadlineError
	stack   stack // what the layers beneath learn of each other, when no layer above carries a stack
}

func newBound(next http.RoundTripper, mode boundMode, d, idle time.Duration, name string, readMax int64) *bound {
	b := &bound{next: next, mode: mode, d: max(d, 0), idle: max(idle, 0), readMax: readMax}
	b.dlErr = &DeadlineError{Bound: name, Limit: b.d}
	if b.idle > 0 {
		b.tick = max(b.idle/8, time.Millisecond)
		b.idleErr = &DeadlineError{Bound: boundIdle, Limit: b.idle}
		if mode == boundOperation {
			b.stack.idleCut.Store(b)
		}
	}
	return b
}

func (t *bound) CloseIdleConnections() { closeIdle(t.next) }

// boundOp is what a bound allocates per request, in one piece: the
// context, the request copy that carries it and the response body's
// wrapper.
type boundOp struct {
	ctx  boundCtx
	req  http.Request
	body boundBody
}

func (t *bound) RoundTrip(req *http.Request) (*http.Response, error) {
	parent := req.Context()
	readMax := t.readMax
	if t.mode == boundHeaders {
		if readBodyUsed.Load() { // else no context carries the key
			if v, ok := parent.Value(readBodyKey{}).(int64); ok {
				readMax = v
			}
		}
		if t.d == 0 && readMax <= 0 {
			return t.next.RoundTrip(req)
		}
	}
	var now time.Duration // clockNow, read once, and only when needed
	if t.d > 0 {
		now = clockNow()
	}
	watchBody := t.idle > 0 && (t.mode == boundOperation || readMax > 0)
	if pdl, ok := parent.Deadline(); ok && readMax <= 0 {
		// The caller's own deadline comes before anything this bound
		// could cut: it has nothing to add.
		if t.d == 0 {
			now = clockNow()
		}
		left := pdl.Sub(clockTime(now))
		if (t.d == 0 || left <= t.d) && (!watchBody || left <= t.idle) {
			return t.next.RoundTrip(req)
		}
	}
	op := &boundOp{}
	c := &op.ctx
	c.start(parent, t, now)
	if s := stackOf(parent); s == nil {
		c.ownsStack = true // the layers beneath meet in t.stack
	} else if t.mode == boundOperation {
		join(&s.idleCut, t)
	}
	op.req = *req.WithContext(c)
	resp, err := t.next.RoundTrip(&op.req)
	if err != nil || resp == nil {
		if err != nil {
			c.settle() // a failure after the deadline is the deadline's
		}
		if cut := c.release(); cut != nil && err != nil {
			err = withAttempts(cut, err) // the cut, and how many attempts it ended
		}
		return resp, err
	}
	body := resp.Body
	if body == nil || body == http.NoBody {
		c.release()
		return resp, nil
	}
	if rw, ok := body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		if t.mode != boundAll {
			c.bodyStarts(false, false) // an upgraded connection is neither bounded nor cut
		} else {
			// net/http stops watching the context after a 101: the
			// deadline closes the connection itself.
			c.AfterFunc(func() { rw.Close() })
		}
		resp.Body = &boundBodyRW{boundBody{rc: rw, c: c}, rw}
		return resp, nil
	}
	op.body = boundBody{rc: body, c: c}
	switch t.mode {
	case boundOperation:
		c.bodyStarts(!c.streamOf(resp), t.idle > 0)
	case boundHeaders:
		if readMax > 0 && !c.streamOf(resp) {
			c.bodyStarts(false, t.idle > 0)
			return readInAttempt(resp, &op.body, readMax)
		}
		c.bodyStarts(false, false)
	}
	resp.Body = &op.body
	return resp, nil
}

// boundBody is a response body under a bound: each Read is counted for
// the idle watch (two atomic adds), the bound is released at EOF or
// Close, and an error caused by a cut is the cut's [*DeadlineError].
type boundBody struct {
	rc io.ReadCloser
	c  *boundCtx
	w  io.Writer // where WriteTo writes
}

func (b *boundBody) Read(p []byte) (int, error) {
	b.c.activity.Add(1)
	n, err := b.rc.Read(p)
	b.c.activity.Add(1)
	if err != nil {
		if err == io.EOF {
			b.c.release()
		} else if cut := b.c.settle(); cut != nil {
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
	b.w = w
	b.c.activity.Add(1)
	n, err := wt.WriteTo((*bodyWriter)(b))
	b.c.activity.Add(1)
	if err == nil {
		b.c.release()
	} else if cut := b.c.settle(); cut != nil {
		err = cut
	}
	return n, err
}

// bodyReader is a boundBody seen as a plain reader, so that io.Copy does
// not come back to WriteTo.
type bodyReader boundBody

func (r *bodyReader) Read(p []byte) (int, error) { return (*boundBody)(r).Read(p) }

// bodyWriter is the writer a body's own WriteTo writes to (b.w): each
// write leaves the body's wait on the server while it runs.
type bodyWriter boundBody

func (b *bodyWriter) Write(p []byte) (int, error) {
	b.c.activity.Add(1)
	n, err := b.w.Write(p)
	b.c.activity.Add(1)
	return n, err
}

// WriteString keeps a body that writes strings (a strings.Reader) from
// copying them.
func (b *bodyWriter) WriteString(s string) (int, error) {
	b.c.activity.Add(1)
	n, err := io.WriteString(b.w, s)
	b.c.activity.Add(1)
	return n, err
}

func (b *boundBody) Close() error {
	err := b.rc.Close()
	b.c.release()
	return err
}

// boundBodyRW is the body of a 101 Switching Protocols response: the
// upgraded connection, readable and writable.
type boundBodyRW struct {
	boundBody
	w io.Writer
}

func (b *boundBodyRW) Write(p []byte) (int, error) { return b.w.Write(p) }

// CloseWrite half-closes the upgraded connection, as net/http's own 101
// body allows.
func (b *boundBodyRW) CloseWrite() error { return closeWrite(b.w) }

// isStream reports whether resp's body is a stream: read for as long as
// it makes progress rather than inside a deadline. Streams are server-sent
// events, newline-delimited JSON in its several names, JSON text
// sequences, multipart replace streams, gRPC, Connect streaming and AWS
// event streams (Bedrock's streaming responses).
func isStream(resp *http.Response) bool { return isStreamType(streamMediaType(resp)) }

// streamOf is isStream(resp), read from what a layer beneath learnt of
// resp when it judged its media type already (see judgedMedia): the
// header is looked up once per response.
func (c *boundCtx) streamOf(resp *http.Response) bool {
	if c.media == resp {
		return c.isStream
	}
	return isStream(resp)
}

// judgedMedia records in req's context, when req is a bound's own
// request, that resp is a stream or not, for the bound to read
// (streamOf); ct is resp's streamMediaType. Only the bound's own request
// records: one goroutine sends it at a time, and the bound reads what it
// recorded once it returns. A copy of it (a foreign layer's clone, a
// hedge's copy, an unvouched POST's watched attempt) records nothing, and
// the bound reads the header itself.
func judgedMedia(req *http.Request, resp *http.Response, ct string) {
	if c, ok := req.Context().(*boundCtx); ok && c.owns(req) {
		c.media, c.isStream = resp, isStreamType(ct)
	}
}

// owns reports whether req is the request copy allocated with c, in
// its boundOp. It compares addresses only, and reads nothing.
func (c *boundCtx) owns(req *http.Request) bool {
	return uintptr(unsafe.Pointer(c))+unsafe.Offsetof(boundOp{}.req) == uintptr(unsafe.Pointer(req))
}

// isStreamType reports whether ct, a streamMediaType, names a stream.
func isStreamType(ct string) bool {
	if ct == "" {
		return false
	}
	for _, s := range streamTypes {
		if len(ct) == len(s) && strings.EqualFold(ct, s) {
			return true
		}
	}
	for _, p := range streamPrefixes {
		if len(ct) > len(p) && strings.EqualFold(ct[:len(p)], p) {
			return true
		}
	}
	return false
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

var streamTypes = [...]string{
	"text/event-stream",
	"application/x-ndjson",
	"application/ndjson",
	"application/jsonl",
	"application/x-jsonl",
	"application/jsonlines",
	"application/x-jsonlines",
	"application/json-seq",
	"application/stream+json",
	"application/x-json-stream",
	"multipart/x-mixed-replace",
	"application/grpc",
	"application/grpc-web",
	"application/vnd.amazon.eventstream",
}

var streamPrefixes = [...]string{
	"application/grpc+",    // application/grpc+proto, +json
	"application/grpc-web", // grpc-web+proto, grpc-web-text, grpc-web-text+proto
	"application/connect+", // Connect's streaming protocol
}

// readBodyKey is the context key of [WithReadBody].
type readBodyKey struct{}

// readBodyUsed is set once WithReadBody has made a context with the
// key: until then the attempt bound need not look for it, which costs a
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
	return context.WithValue(ctx, readBodyKey{}, limit)
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
