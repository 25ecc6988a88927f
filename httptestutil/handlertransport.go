package httptestutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// HandlerTransport is an [http.RoundTripper] that serves each request by
// calling an [http.Handler] directly, with no connection at all: the
// cheapest way to put a server under a client in a test, and one that runs
// on a [testing/synctest] bubble's virtual clock.
//
// It behaves like a client and server joined by a wire:
//
//   - The handler runs in its own goroutine with a server-side copy of the
//     request whose context ends when the client's does, when the client
//     closes the response body before its end, or when the handler returns.
//   - RoundTrip returns once the response headers are sent: when the
//     handler flushes, writes more than 2 KiB, or returns, as
//     [http.Server] does. So a streamed body can be read while the handler
//     still writes, and a handler that hangs keeps RoundTrip waiting until
//     the request's context ends; RoundTrip then returns the context's
//     cause ([context.Cause]), as net/http does.
//   - The body reaches the client through a 64 KiB buffer. When the
//     request's context ends, reading the body fails with the context's
//     cause; a handler that sent fewer bytes than its declared
//     Content-Length leaves the client with [io.ErrUnexpectedEOF].
//   - A handler that panics, or aborts with [http.ErrAbortHandler] (as
//     [Reset] does here, where there is no connection to hijack), ends the
//     exchange with an error that wraps [syscall.ECONNRESET]: from
//     RoundTrip before the headers, from the body read after.
//   - The request body is closed when the handler returns.
//
// There are no connections, so no keep-alive, Hijack, trailers or 1xx
// responses; [Network] gives a real server and transport for those.
// Every goroutine it starts ends when the handler returns.
//
// A HandlerTransport is safe for concurrent use by multiple goroutines.
type HandlerTransport struct {
	h http.Handler
}

// NewHandlerTransport returns a transport that serves requests with h.
// A nil h answers 404 to everything.
func NewHandlerTransport(h http.Handler) *HandlerTransport {
	if h == nil {
		h = http.NotFoundHandler()
	}
	return &HandlerTransport{h: h}
}

// errConnReset is the cause of the error a HandlerTransport returns when
// its handler aborts or panics, so errors.Is(err, syscall.ECONNRESET) holds.
var errConnReset = &net.OpError{Op: "read", Net: "tcp", Addr: pipeAddr("handler"), Err: syscall.ECONNRESET}

// errBodyClosed is what reading a body after Close returns, as in net/http.
var errBodyClosed = errors.New("http: read on closed response body")

// errClientGone is what a handler's Write returns once the client closed
// the body.
var errClientGone = errors.New("httptestutil: client closed the response body")

const (
	bufferBeforeCommit = 2048     // as http.Server's bufferBeforeChunkingSize
	pipeBuffer         = 64 << 10 // body bytes in transit before Write blocks
)

// RoundTrip serves req with the transport's handler.
func (t *HandlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		closeReqBody(req)
		return nil, errors.New("httptestutil: nil Request.URL")
	}
	ctx := req.Context()
	if ctx.Err() != nil {
		closeReqBody(req)
		return nil, context.Cause(ctx)
	}
	hctx, cancel := context.WithCancel(ctx)
	sreq, err := serverRequest(req, hctx)
	if err != nil {
		cancel()
		closeReqBody(req)
		return nil, err
	}
	p := &bodyPipe{
		ctx:      ctx,
		readable: make(chan struct{}, 1),
		writable: make(chan struct{}, 1),
		cancel:   cancel,
	}
	p.stop = context.AfterFunc(ctx, func() { p.fail(context.Cause(ctx)) })
	w := &handlerWriter{
		req:       req,
		header:    make(http.Header),
		declared:  -1,
		pipe:      p,
		head:      req.Method == http.MethodHead,
		committed: make(chan struct{}),
	}
	var sent <-chan struct{} // closed when the body could not be sent as written
	if wb, ok := sreq.Body.(*wireBody); ok {
		sent = wb.bad
	}
	go w.serve(t.h, sreq, req.Body, cancel)
	select {
	case <-w.committed:
		if err := sendError(sreq); err != nil {
			// The client found its body wrong as it sent it, before the
			// answer: it drops the connection and reports that.
			p.Close()
			return nil, err
		}
		if w.err != nil {
			p.stop()
			return nil, w.err
		}
		return w.resp, nil
	case <-sent:
		p.Close() // the connection is dropped: the handler's context ends
		return nil, sendError(sreq)
	case <-ctx.Done():
		// The handler sees hctx end; its writes fail through the pipe.
		return nil, context.Cause(ctx)
	}
}

// serverRequest makes the request as a server would read it off the wire.
func serverRequest(req *http.Request, ctx context.Context) (*http.Request, error) {
	s := req.Clone(ctx)
	s.RequestURI = req.URL.RequestURI()
	u, err := url.ParseRequestURI(s.RequestURI)
	if err != nil {
		return nil, fmt.Errorf("httptestutil: bad request URI %q: %w", s.RequestURI, err)
	}
	s.URL = u
	if s.Host == "" {
		s.Host = req.URL.Host
	}
	s.Proto, s.ProtoMajor, s.ProtoMinor = "HTTP/1.1", 1, 1
	s.RemoteAddr = "client:1"
	s.GetBody = nil
	s.Close = false
	if s.ContentLength > 0 && s.Body == nil {
		return nil, fmt.Errorf("http: Request.ContentLength=%d with nil Body", s.ContentLength)
	}
	switch {
	case s.Body == nil || s.Body == http.NoBody:
		s.Body = http.NoBody
		s.ContentLength = 0
	case s.ContentLength <= 0:
		// A client body of unknown length (ContentLength 0 or -1 with a
		// Body) goes chunked, and a server reads its length as unknown.
		s.ContentLength = -1
		s.TransferEncoding = []string{"chunked"}
	}
	if s.Body != http.NoBody {
		s.Body = &wireBody{body: s.Body, declared: s.ContentLength, bad: make(chan struct{})}
	}
	if s.Header == nil {
		s.Header = make(http.Header)
	}
	canonicalize(s.Header)
	return s, nil
}

// canonicalize renames h's keys as a reader of the wire does: whatever
// case one end wrote a field name in, the other end sees it canonical.
func canonicalize(h http.Header) {
	for k, vs := range h {
		if ck := http.CanonicalHeaderKey(k); ck != k {
			delete(h, k)
			h[ck] = append(h[ck], vs...)
		}
	}
}

// sendError is why the client could not send sreq's body as written, or
// nil.
func sendError(sreq *http.Request) error {
	if wb, ok := sreq.Body.(*wireBody); ok {
		return wb.failed()
	}
	return nil
}

// wireBody is the request body as the server reads it off the wire: at
// most its declared length. A body that turns out shorter or longer than
// its ContentLength, or whose reader fails, cannot be sent as written: as
// with http.Transport, the client's RoundTrip fails ("http:
// ContentLength=N with Body length M", or the reader's error) and the
// server sees the body end early. Only the handler's goroutine reads it.
type wireBody struct {
	body     io.ReadCloser // the client's body; closed by serve
	declared int64         // ContentLength, or -1 when sent chunked
	read     int64
	closed   atomic.Bool // Close may come from any goroutine, as a server's body allows
	done     error       // what Read returns once the body ended

	mu   sync.Mutex
	err  error // why the client could not send the body
	bad  chan struct{}
	once sync.Once
}

func (b *wireBody) fail(err error) {
	b.once.Do(func() {
		b.mu.Lock()
		b.err = err
		b.mu.Unlock()
		close(b.bad)
	})
}

func (b *wireBody) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

func (b *wireBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errors.New("http: invalid Read on closed Body")
	}
	if b.done != nil {
		return 0, b.done
	}
	if b.declared >= 0 && int64(len(p)) > b.declared-b.read {
		p = p[:b.declared-b.read]
	}
	n, err := 0, error(nil)
	if len(p) > 0 {
		n, err = b.body.Read(p)
		b.read += int64(n)
	}
	switch {
	case err != nil && err != io.EOF:
		b.fail(err)
		b.done = io.ErrUnexpectedEOF
	case b.declared < 0:
		b.done = err
	case b.read < b.declared && err == io.EOF:
		b.fail(fmt.Errorf("http: ContentLength=%d with Body length %d", b.declared, b.read))
		b.done = io.ErrUnexpectedEOF
	case b.read == b.declared:
		if err != io.EOF {
			// The client checks for bytes beyond the declared length.
			extra, rerr := io.Copy(io.Discard, b.body)
			switch {
			case rerr != nil:
				b.fail(rerr)
			case extra > 0:
				b.fail(fmt.Errorf("http: ContentLength=%d with Body length %d", b.declared, b.declared+extra))
			}
		}
		b.done = io.EOF
	}
	if n > 0 {
		return n, nil
	}
	return 0, b.done
}

// Close closes the body for the handler; the client's body is closed when
// the handler returns.
func (b *wireBody) Close() error {
	b.closed.Store(true)
	return nil
}

func closeReqBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// handlerWriter is the http.ResponseWriter a HandlerTransport's handler
// writes to. Only the handler's goroutine touches its fields until
// committed is closed; after that RoundTrip reads resp and err.
type handlerWriter struct {
	req    *http.Request
	header http.Header
	pipe   *bodyPipe
	head   bool

	status      int
	wroteHeader bool
	snapshot    http.Header // header as of WriteHeader
	noBody      bool        // status that allows no body
	declared    int64       // Content-Length declared, or -1
	written     int64
	buf         []byte // body written before the commit

	committed chan struct{}
	done      bool
	resp      *http.Response
	err       error
}

func (w *handlerWriter) Header() http.Header { return w.header }

func (w *handlerWriter) WriteHeader(code int) {
	if w.wroteHeader || w.done {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		return // informational: not sent by this transport
	}
	w.wroteHeader = true
	w.status = code
	w.snapshot = w.header.Clone()
	canonicalize(w.snapshot)
	w.noBody = code == http.StatusNoContent || code == http.StatusNotModified || code < 200
	if cl := w.snapshot.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.declared = v
		} else {
			w.snapshot.Del("Content-Length")
		}
	}
}

func (w *handlerWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(len(b)) > w.declared {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(b))
	if w.head {
		return len(b), nil
	}
	if !w.done {
		w.buf = append(w.buf, b...)
		if len(w.buf) > bufferBeforeCommit {
			w.commit(false)
		}
		return len(b), nil
	}
	return w.pipe.write(b)
}

// Flush sends the headers, if not sent yet; body bytes are visible to the
// client as soon as they are written.
func (w *handlerWriter) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.done {
		w.commit(false)
	}
}

// commit sends the response headers and what was buffered; finished
// reports that the handler has returned.
func (w *handlerWriter) commit(finished bool) {
	w.done = true
	h := w.snapshot
	if _, ok := h["Content-Type"]; !ok && !w.noBody && len(w.buf) > 0 {
		h.Set("Content-Type", http.DetectContentType(w.buf))
	}
	if _, ok := h["Date"]; !ok {
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	cl := w.declared
	switch {
	case w.noBody:
		cl = 0
	case cl < 0 && finished && !w.head:
		cl = int64(len(w.buf))
		h.Set("Content-Length", strconv.FormatInt(cl, 10))
	case cl < 0 && finished && w.written > 0 && w.written <= bufferBeforeCommit:
		// A HEAD whose handler wrote a short body and returned is
		// answered with the length the GET would have, as http.Server does.
		cl = w.written
		h.Set("Content-Length", strconv.FormatInt(cl, 10))
	}
	text := http.StatusText(w.status)
	if text == "" {
		text = "status code " + strconv.Itoa(w.status)
	}
	resp := &http.Response{
		Status:        strconv.Itoa(w.status) + " " + text,
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		ContentLength: cl,
		Request:       w.req,
	}
	if w.head || w.noBody {
		resp.Body = http.NoBody
		w.pipe.stop()
	} else {
		w.pipe.start(w.buf)
		resp.Body = w.pipe
	}
	w.buf = nil
	w.resp = resp
	close(w.committed)
}

// serve runs h and ends the exchange the way the server would.
func (w *handlerWriter) serve(h http.Handler, sreq *http.Request, body io.ReadCloser, cancel context.CancelFunc) {
	defer func() {
		p := recover()
		if body != nil {
			body.Close()
		}
		cancel() // the server ends the request's context when the handler returns
		if p != nil {
			err := fmt.Errorf("httptestutil: handler reset the connection: %w", errConnReset)
			if p != http.ErrAbortHandler {
				err = fmt.Errorf("httptestutil: handler panicked: %v: %w", p, errConnReset)
			}
			if !w.done {
				w.done = true
				w.err = err
				close(w.committed)
				return
			}
			w.pipe.closeWrite(err)
			return
		}
		if !w.wroteHeader {
			w.WriteHeader(http.StatusOK)
		}
		if !w.done {
			w.commit(true)
		}
		if w.declared >= 0 && w.written < w.declared && !w.head {
			w.pipe.closeWrite(io.ErrUnexpectedEOF)
		} else {
			w.pipe.closeWrite(io.EOF)
		}
	}()
	h.ServeHTTP(w, sreq)
}

// bodyPipe carries a response body from the handler to the client through
// a bounded buffer. Unlike io.Pipe, writes do not wait for a reader until
// the buffer is full, as with a socket.
type bodyPipe struct {
	mu       sync.Mutex
	buf      []byte
	werr     error // the writer is done: io.EOF or why not
	rerr     error // the reader closed
	eof      bool  // the reader saw the end
	readable chan struct{}
	writable chan struct{}
	ctx      context.Context    // the client's request context
	stop     func() bool        // stops watching ctx
	cancel   context.CancelFunc // ends the handler's context
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (p *bodyPipe) start(b []byte) {
	p.mu.Lock()
	if p.werr == nil {
		p.buf = b
	}
	p.mu.Unlock()
}

// Read reads the body as the handler writes it.
func (p *bodyPipe) Read(b []byte) (int, error) {
	for {
		p.mu.Lock()
		if p.rerr != nil {
			p.mu.Unlock()
			return 0, p.rerr
		}
		if len(p.buf) > 0 {
			n := copy(b, p.buf)
			p.buf = p.buf[n:]
			signal(p.writable)
			p.mu.Unlock()
			return n, nil
		}
		if err := p.werr; err != nil {
			if cerr := context.Cause(p.ctx); err == io.EOF && cerr != nil && !p.eof {
				// The client's context ended as the handler finished:
				// the client did not see the end in time.
				err, p.werr = cerr, cerr
			}
			first := !p.eof
			p.eof = true
			p.mu.Unlock()
			if first {
				p.stop()
			}
			return 0, err
		}
		p.mu.Unlock()
		<-p.readable
	}
}

// Close closes the body. Closing it before its end tells the handler that
// the client went away.
func (p *bodyPipe) Close() error {
	p.mu.Lock()
	if p.rerr != nil {
		p.mu.Unlock()
		return nil
	}
	p.rerr = errBodyClosed
	early := !p.eof
	p.buf = nil
	signal(p.writable)
	signal(p.readable)
	p.mu.Unlock()
	if early {
		p.cancel()
	}
	p.stop()
	return nil
}

// write is the handler's Write after the commit.
func (p *bodyPipe) write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		p.mu.Lock()
		if p.rerr != nil {
			p.mu.Unlock()
			return n, errClientGone
		}
		if p.werr != nil {
			err := p.werr
			p.mu.Unlock()
			return n, err
		}
		if room := pipeBuffer - len(p.buf); room > 0 {
			k := min(room, len(b))
			p.buf = append(p.buf, b[:k]...)
			b, n = b[k:], n+k
			signal(p.readable)
			p.mu.Unlock()
			continue
		}
		p.mu.Unlock()
		<-p.writable
	}
	return n, nil
}

// closeWrite ends the body with err (io.EOF for a whole body).
func (p *bodyPipe) closeWrite(err error) {
	p.mu.Lock()
	if p.werr == nil {
		p.werr = err
	}
	signal(p.readable)
	p.mu.Unlock()
}

// fail ends the body with the request context's error, unless the
// client has already read it to the end.
func (p *bodyPipe) fail(err error) {
	p.mu.Lock()
	if !p.eof && p.rerr == nil {
		p.buf = nil
		p.werr = err
	}
	signal(p.readable)
	signal(p.writable)
	p.mu.Unlock()
}
