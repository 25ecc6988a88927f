package transport

import (
	"context"
	"io"
	"net/http"
	"time"
)

// Deadline bounds everything beneath it to d: the request it passes on
// carries a context whose deadline is d from now, unless the caller's
// context already has a tighter one (then the request passes untouched).
//
// The deadline covers the response body too: it is released when the body
// is read to its end or closed, never when RoundTrip returns, so a
// streamed body stays readable (until d runs out). When RoundTrip fails it
// is released at once.
//
// Placed twice, Deadline gives a whole-operation budget and a per-attempt
// limit: Chain(base, Deadline(total), Retry(p), Deadline(perAttempt)). An
// attempt that runs out of its own time ends in [context.DeadlineExceeded]
// and is retried while the total budget remains.
//
// A d of zero or less means no deadline: the middleware passes requests
// through.
func Deadline(d time.Duration) Middleware {
	return func(next http.RoundTripper) http.RoundTripper {
		if d <= 0 {
			return next
		}
		return &deadline{next: next, d: d}
	}
}

type deadline struct {
	next http.RoundTripper
	d    time.Duration
}

func (t *deadline) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= t.d {
		return t.next.RoundTrip(req)
	}
	ctx, cancel := context.WithTimeout(ctx, t.d)
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	return releaseWithBody(resp, err, cancel)
}

func (t *deadline) CloseIdleConnections() { closeIdle(t.next) }

// releaseWithBody arranges for cancel to run when resp's body is done
// with: at once on error or for a response without a body, else when the
// body is read to EOF or closed.
func releaseWithBody(resp *http.Response, err error, cancel context.CancelFunc) (*http.Response, error) {
	if err != nil || resp == nil {
		cancel()
		return resp, err
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		cancel()
		return resp, nil
	}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok { // 101 Switching Protocols
		resp.Body = &cancelBodyRW{cancelBody{ReadCloser: rw, cancel: cancel}, rw}
		return resp, nil
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelBody releases a context when its body is read to the end or
// closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.cancel()
	}
	return n, err
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

type cancelBodyRW struct {
	cancelBody
	w io.Writer
}

func (b *cancelBodyRW) Write(p []byte) (int, error) { return b.w.Write(p) }
