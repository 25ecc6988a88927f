// Package reqbody keeps a request's body for replay, byte for byte, and
// finds the bodies that cannot be sent as written (the caller's error)
// before anything is sent.
package reqbody

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sturdyhttp/sturdy/policy"
)

// Replay knows how to give each attempt the caller's body again.
type Replay struct {
	Get   func() (io.ReadCloser, error) // nil: the body cannot be replayed
	First io.ReadCloser                 // the first attempt's body when it is not req.Body
	None  bool                          // the request has no body
	tee   *Tee                          // the body is kept as it is sent
	// upstream is the Tee of a layer above (Retry) whose GetBody this
	// Replay uses: the body is kept as it is sent there, and is whole,
	// or turns out too long, only as that Tee says.
	upstream *Tee
	// NoGetBody: the requests made here carry no GetBody, so that
	// net/http never sends their body again by itself (Retry's attempts
	// of a request that is not safe to send twice).
	NoGetBody bool
}

// New prepares req's body for Replay. Nothing is read ahead: a body
// without a body, or with GetBody, needs nothing; a body longer than
// limit by its ContentLength is sent once as it is; any other body is
// sent through a Tee that keeps its bytes as the first attempt reads
// them, up to limit, so that the first attempt is sent at once and its
// Read calls reach the wire as they happen (a full-duplex body flows). A
// body that turns out longer than limit is not replayed.
//
// The caller of New calls finish when the operation is over.
func New(req *http.Request, limit int64) (Replay, error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return Replay{None: true}, nil
	case req.GetBody != nil:
		return Replay{Get: req.GetBody, upstream: TeeOf(req.Body)}, nil
	case limit < 0 || req.ContentLength > limit:
		return Replay{}, nil
	}
	t := &Tee{src: req.Body, limit: limit, declared: req.ContentLength}
	if req.ContentLength > 0 {
		// The declared length is the caller's word, and may be wrong: no
		// more than the default limit is allocated before bytes arrive.
		t.buf = make([]byte, 0, min(req.ContentLength, policy.DefaultMaxBufferedBody))
	}
	first, _ := t.reader()
	return Replay{Get: t.reader, First: first, tee: t}, nil
}

// complete reports whether another attempt can be given the whole body
// now: it needs nothing more from the caller's body (a body kept as it is
// sent has been read to its end).
func (b *Replay) Complete() bool {
	if t := b.kept(); t != nil {
		return t.Complete()
	}
	return b.None || b.Get != nil
}

// replayable reports whether another attempt can be given the body.
func (b *Replay) Replayable() bool {
	if t := b.kept(); t != nil {
		return t.Replayable()
	}
	return b.None || b.Get != nil
}

// kept returns the Tee that keeps the body as it is sent, this Replay's
// own or a Retry's above; nil when none does.
func (b *Replay) kept() *Tee {
	if b.tee != nil {
		return b.tee
	}
	return b.upstream
}

// TeeOf returns the Tee that body is read from when it is an attempt's
// view of a body kept as it is sent (a Retry above made it), checked or
// not; nil for any other body.
func TeeOf(body io.ReadCloser) *Tee {
	if c, ok := body.(*checkedBody); ok {
		body = c.body // checked once: Check leaves a checked body as it is
	}
	if r, ok := body.(*teeReader); ok {
		return r.t
	}
	return nil
}

// finish says that the operation is over: the caller's body is closed
// once no attempt reads it any more. It may be called more than once.
func (b *Replay) Finish() {
	if b.tee != nil {
		b.tee.Finish()
	}
}

// firstRequest is the first attempt when its body is not req.Body.
func (b *Replay) FirstRequest(req *http.Request) *http.Request {
	r := *req
	r.Body = b.First
	if !b.NoGetBody {
		r.GetBody = b.Get
	}
	return &r
}

// Request gives r, a request copy of the caller's, a fresh body, and
// returns it.
func (b *Replay) Request(r *http.Request) (*http.Request, error) {
	if b.None {
		return r, nil
	}
	body, err := b.Get()
	if err != nil {
		return nil, err
	}
	r.Body = body
	if !b.NoGetBody {
		r.GetBody = b.Get
	}
	return r, nil
}

// errOverLimit is the error of a replayed body whose bytes could not all
// be kept: the body ran past the Replay limit.
var errOverLimit = errors.New("transport: request body is longer than the Replay limit (Retry.MaxBufferedBody) and cannot be sent again")

// Tee keeps the bytes of a request body as they are read from it, up to
// a limit, so that every attempt can be sent the same bytes. Each attempt
// reads through its own teeReader: from what is kept, then from the
// caller's body, one reader at a time, so that a reader never waits on
// anything but the caller's body itself. Attempts may overlap (net/http
// may still be reading a failed attempt's body when the next one starts):
// whichever reader is ahead pulls the next bytes, and the others find
// them kept.
type Tee struct {
	src      io.ReadCloser
	limit    int64
	declared int64 // the request's ContentLength; 0 or less: unknown

	pull sync.Mutex // held across src.Read: one puller at a time

	mu       sync.Mutex
	buf      []byte // what was read, while not over
	n        int64  // how many bytes were read from src
	over     bool   // more than limit bytes were read: buf is dropped
	err      error  // src's terminal error (io.EOF when it ended well)
	open     int    // readers not yet closed
	final    bool   // the operation is over
	srcClose bool   // src is closed, or will be by the one who set this
}

func (t *Tee) reader() (io.ReadCloser, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.over && t.n > 0 {
		return nil, errOverLimit
	}
	if t.err != nil && t.err != io.EOF {
		return nil, t.err
	}
	t.open++
	return &teeReader{t: t}, nil
}

// Complete reports whether the whole body was read from the caller and
// kept: every copy can be sent whole again.
func (t *Tee) Complete() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.over && t.err == io.EOF
}

// Replayable reports whether what was read so far is kept, so that a new
// reader can start the body again from its first byte.
func (t *Tee) Replayable() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.over && (t.err == nil || t.err == io.EOF)
}

// Finish says no new reader will be made: the caller's body is closed
// once the last open reader is.
func (t *Tee) Finish() {
	t.mu.Lock()
	t.final = true
	c := t.closeLocked()
	t.mu.Unlock()
	if c {
		t.src.Close()
	}
}

// closeLocked reports whether src should be closed now (by the caller,
// once t.mu is released): the operation is over, or src is read to its
// end, and no reader is open.
func (t *Tee) closeLocked() bool {
	if t.open > 0 || t.srcClose || !(t.final || t.err != nil) {
		return false
	}
	t.srcClose = true
	return true
}

// teeReader is one attempt's view of a tee'd body.
type teeReader struct {
	t      *Tee
	pos    int64
	closed atomic.Bool
}

func (r *teeReader) Read(p []byte) (int, error) {
	if r.closed.Load() {
		return 0, errors.New("transport: read on a closed request body")
	}
	t := r.t
	if n, err, done := r.fromKept(p); done {
		return n, err
	}
	t.pull.Lock()
	defer t.pull.Unlock()
	if n, err, done := r.fromKept(p); done { // another reader pulled meanwhile
		return n, err
	}
	var n int
	var err error
	if t.declared > 0 && r.pos >= t.declared {
		// Every declared byte is read (and handed on: none is held back
		// to look for one more, since the caller's body may end only
		// once the response is in). Past them, as net/http does, the
		// body must end: more is an error.
		err = t.checkEnd()
	} else {
		if t.declared > 0 {
			p = p[:min(int64(len(p)), t.declared-r.pos)] // no read runs past the declared end
		}
		n, err = t.src.Read(p)
	}
	t.mu.Lock()
	if n > 0 {
		if !t.over && t.n+int64(n) <= t.limit {
			t.buf = append(t.buf, p[:n]...)
		} else {
			t.over, t.buf = true, nil
		}
		t.n += int64(n)
		r.pos = t.n
	}
	if err != nil {
		t.err = err
	}
	t.mu.Unlock()
	return n, err
}

// checkEnd reads past the declared end of the body, once every declared
// byte has been handed on: io.EOF when it ends there, an error when it
// has more.
func (t *Tee) checkEnd() error {
	var one [1]byte
	for range 100 { // as io.ReadFull gives up on a reader stuck at 0, nil
		m, err := t.src.Read(one[:])
		switch {
		case m > 0:
			return errLongerThanDeclared
		case err != nil:
			return err
		}
	}
	return io.ErrNoProgress
}

var errLongerThanDeclared = errors.New("transport: request body is longer than its ContentLength")

// fromKept serves p from the kept bytes, or reports the body's end; done
// is false when the reader is at the front and must pull from src.
func (r *teeReader) fromKept(p []byte) (n int, err error, done bool) {
	t := r.t
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case r.pos < t.n && t.over:
		return 0, errOverLimit, true
	case r.pos < t.n:
		n = copy(p, t.buf[r.pos:])
		r.pos += int64(n)
		return n, nil, true
	case t.err != nil:
		return 0, t.err, true
	}
	return 0, nil, false
}

func (r *teeReader) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	t := r.t
	t.mu.Lock()
	t.open--
	c := t.closeLocked()
	t.mu.Unlock()
	if c {
		return t.src.Close()
	}
	return nil
}

// A request that cannot be sent as written is the caller's error, and
// must reach neither the server nor the host's accounting (breaker,
// budget, quota). net/http finds a ContentLength that does not match the
// body, or a body whose reader fails, only while it sends, and reports
// them with errors of no type ("http: ContentLength=10 with Body length
// 3", the reader's own error, or that error in a *net.OpError with Op
// "readfrom"). Check finds them first where it can, and makes the
// error a *policy.BodyError everywhere else.

// Check returns r ready to be sent, or the caller's error without
// sending anything: a positive ContentLength with no body, or an
// in-memory body (a *bytes.Reader, *strings.Reader or *bytes.Buffer, as
// http.NewRequest and Retry's own Replay buffer make) whose length differs
// from ContentLength. Any other body is wrapped so that its reader's
// errors and a length that turns out wrong arrive as a *policy.BodyError.
// own says that r is a copy made by this package, whose Body may be
// replaced; otherwise r is copied. A request whose body needs no wrapper
// is returned as it is.
func Check(r *http.Request, own bool) (*http.Request, error) {
	if _, ok := r.Body.(*checkedBody); ok {
		return r, nil // checked already, by a layer above
	}
	if r.Body == nil || r.Body == http.NoBody {
		if r.ContentLength > 0 {
			return nil, &policy.BodyError{ContentLength: r.ContentLength}
		}
		return r, nil
	}
	if n, ok := InMemoryLen(r.Body); ok {
		if r.ContentLength > 0 && n != r.ContentLength {
			return nil, &policy.BodyError{ContentLength: r.ContentLength, Read: n}
		}
		return r, nil // it cannot fail, and net/http sends it with its headers in one write
	}
	if own {
		r.Body = &checkedBody{body: r.Body, length: r.ContentLength}
		return r, nil
	}
	c := &checkedRequest{req: *r}
	c.body = checkedBody{body: r.Body, length: r.ContentLength}
	c.req.Body = &c.body
	return &c.req, nil
}

// CheckCaller is Check for the layers that count an outcome against
// its host (Breaker, RateLimitTracker, Throttle), and for Hedge's
// copies: a request that cannot be sent as written fails here, its body
// closed, and one whose body may still turn out wrong is sent with that
// body checked.
func CheckCaller(req *http.Request, own bool) (*http.Request, error) {
	r, err := Check(req, own)
	if err != nil {
		CloseBody(req)
		return nil, err
	}
	return r, nil
}

var (
	nopCloserType         = reflect.TypeOf(io.NopCloser(nil))
	nopCloserWriterToType = reflect.TypeOf(io.NopCloser(struct {
		io.Reader
		io.WriterTo
	}{}))
)

// nopCloserReader returns the reader that body, an io.NopCloser, wraps,
// as net/http finds it: io.NopCloser's types are a struct of one field,
// that reader.
func nopCloserReader(body io.Reader) io.Reader {
	v := reflect.ValueOf(body)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct || v.NumField() != 1 {
		return nil
	}
	r, _ := v.Field(0).Interface().(io.Reader)
	return r
}

// InMemoryLen returns the unread length of a body that is an in-memory
// reader, alone or in io.NopCloser (as net/http recognises them).
func InMemoryLen(body io.Reader) (int64, bool) {
	switch t := reflect.TypeOf(body); t {
	case nopCloserType, nopCloserWriterToType:
		body = nopCloserReader(body)
	}
	switch r := body.(type) {
	case *bytes.Reader:
		return int64(r.Len()), true
	case *strings.Reader:
		return int64(r.Len()), true
	case *bytes.Buffer:
		return int64(r.Len()), true
	}
	return 0, false
}

// checkedBody is an attempt's request body that reports as a
// [*policy.BodyError] what net/http would report with errors of no type:
// a reader that fails, and a body longer or shorter than the request's
// ContentLength.
type checkedBody struct {
	body   io.ReadCloser
	length int64 // the declared ContentLength; 0 or less: not checked
	read   int64
	spare  [1]byte // where the byte past the declared end is read
}

func (b *checkedBody) Read(p []byte) (int, error) {
	if b.length > 0 {
		// Never hand net/http a byte past ContentLength: its HTTP/2
		// transport reports a body that gives more than declared with an
		// error of its own ("http2: request body larger than specified
		// content length") in place of the one returned with those
		// bytes. Past the declared end, one byte is read to learn whether
		// the body ends there.
		if left := b.length - b.read; left <= 0 {
			p = b.spare[:]
		} else if int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := b.body.Read(p)
	b.read += int64(n)
	switch {
	case b.length > 0 && b.read > b.length:
		return 0, &policy.BodyError{ContentLength: b.length, Read: b.read}
	case err == io.EOF:
		if b.length > 0 && b.read < b.length {
			return n, &policy.BodyError{ContentLength: b.length, Read: b.read}
		}
		return n, io.EOF
	case err != nil:
		length := b.length
		if length <= 0 {
			length = -1
		}
		return n, &policy.BodyError{ContentLength: length, Read: b.read, Err: err}
	}
	return n, nil
}

func (b *checkedBody) Close() error { return b.body.Close() }

// checkedRequest holds a request copy and its checked body in one
// allocation.
type checkedRequest struct {
	req  http.Request
	body checkedBody
}

// CloseBody closes r's body, as a RoundTripper must even when it sends
// nothing.
func CloseBody(r *http.Request) {
	if r.Body != nil {
		r.Body.Close()
	}
}

// Done reports whether req's body is known to be whole and on its
// way: none, one that GetBody can make again or whose length is declared
// (the transport sends it by itself), or one kept as it is sent that has
// been read to its end. Any other body may be a full-duplex stream that
// its caller writes only once the response is handed back: waiting for
// the first event before then would wait for ever.
func Done(req *http.Request) bool {
	if req.Body == nil || req.Body == http.NoBody || req.GetBody != nil || req.ContentLength > 0 {
		return true
	}
	t := TeeOf(req.Body)
	return t != nil && t.Complete()
}
