package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/sturdyhttp/sturdy/policy"
)

// replay knows how to give each attempt the caller's body again.
type replay struct {
	get   func() (io.ReadCloser, error) // nil: the body cannot be replayed
	first io.ReadCloser                 // the first attempt's body when it is not req.Body
	none  bool                          // the request has no body
	tee   *tee                          // the body is kept as it is sent
	// upstream is the tee of a layer above (Retry) whose GetBody this
	// replay uses: the body is kept as it is sent there, and is whole,
	// or turns out too long, only as that tee says.
	upstream *tee
	// noGetBody: the requests made here carry no GetBody, so that
	// net/http never sends their body again by itself (Retry's attempts
	// of a request that is not safe to send twice).
	noGetBody bool
}

// newReplay prepares req's body for replay. Nothing is read ahead: a body
// without a body, or with GetBody, needs nothing; a body longer than
// limit by its ContentLength is sent once as it is; any other body is
// sent through a tee that keeps its bytes as the first attempt reads
// them, up to limit, so that the first attempt is sent at once and its
// Read calls reach the wire as they happen (a full-duplex body flows). A
// body that turns out longer than limit is not replayed.
//
// The caller of newReplay calls finish when the operation is over.
func newReplay(req *http.Request, limit int64) (replay, error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return replay{none: true}, nil
	case req.GetBody != nil:
		return replay{get: req.GetBody, upstream: teeOf(req.Body)}, nil
	case limit < 0 || req.ContentLength > limit:
		return replay{}, nil
	}
	t := &tee{src: req.Body, limit: limit, declared: req.ContentLength}
	if req.ContentLength > 0 {
		// The declared length is the caller's word, and may be wrong: no
		// more than the default limit is allocated before bytes arrive.
		t.buf = make([]byte, 0, min(req.ContentLength, policy.DefaultMaxBufferedBody))
	}
	first, _ := t.reader()
	return replay{get: t.reader, first: first, tee: t}, nil
}

// complete reports whether another attempt can be given the whole body
// now: it needs nothing more from the caller's body (a body kept as it is
// sent has been read to its end).
func (b *replay) complete() bool {
	if t := b.kept(); t != nil {
		return t.complete()
	}
	return b.none || b.get != nil
}

// replayable reports whether another attempt can be given the body.
func (b *replay) replayable() bool {
	if t := b.kept(); t != nil {
		return t.replayable()
	}
	return b.none || b.get != nil
}

// kept returns the tee that keeps the body as it is sent, this replay's
// own or a Retry's above; nil when none does.
func (b *replay) kept() *tee {
	if b.tee != nil {
		return b.tee
	}
	return b.upstream
}

// teeOf returns the tee that body is read from when it is an attempt's
// view of a body kept as it is sent (a Retry above made it), checked or
// not; nil for any other body.
func teeOf(body io.ReadCloser) *tee {
	if c, ok := body.(*checkedBody); ok {
		body = c.body // checked once: checkBody leaves a checked body as it is
	}
	if r, ok := body.(*teeReader); ok {
		return r.t
	}
	return nil
}

// finish says that the operation is over: the caller's body is closed
// once no attempt reads it any more. It may be called more than once.
func (b *replay) finish() {
	if b.tee != nil {
		b.tee.finish()
	}
}

// firstRequest is the first attempt when its body is not req.Body.
func (b *replay) firstRequest(req *http.Request) *http.Request {
	r := *req
	r.Body = b.first
	if !b.noGetBody {
		r.GetBody = b.get
	}
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
	if !b.noGetBody {
		r.GetBody = b.get
	}
	return r, nil
}

// errOverLimit is the error of a replayed body whose bytes could not all
// be kept: the body ran past the replay limit.
var errOverLimit = errors.New("transport: request body is longer than the replay limit (Retry.MaxBufferedBody) and cannot be sent again")

// tee keeps the bytes of a request body as they are read from it, up to
// a limit, so that every attempt can be sent the same bytes. Each attempt
// reads through its own teeReader: from what is kept, then from the
// caller's body, one reader at a time, so that a reader never waits on
// anything but the caller's body itself. Attempts may overlap (net/http
// may still be reading a failed attempt's body when the next one starts):
// whichever reader is ahead pulls the next bytes, and the others find
// them kept.
type tee struct {
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

func (t *tee) reader() (io.ReadCloser, error) {
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

func (t *tee) complete() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.over && t.err == io.EOF
}

func (t *tee) replayable() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.over && (t.err == nil || t.err == io.EOF)
}

func (t *tee) finish() {
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
func (t *tee) closeLocked() bool {
	if t.open > 0 || t.srcClose || !(t.final || t.err != nil) {
		return false
	}
	t.srcClose = true
	return true
}

// teeReader is one attempt's view of a tee'd body.
type teeReader struct {
	t      *tee
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
func (t *tee) checkEnd() error {
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
