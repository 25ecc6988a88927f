package respbody

import (
	"context"
	"io"
	"net/http"
)

// Cancel returns resp's body made to release ctx, with cancel, when it
// is read to its end or closed; cut is the cause ctx ends with at its
// deadline, which an error after it becomes. The body of a 101 Switching
// Protocols response is closed by ctx's end: net/http stops watching
// the context after a 101.
func Cancel(ctx context.Context, resp *http.Response, cancel context.CancelFunc, cut error) io.ReadCloser {
	b := &CancelBody{rc: resp.Body, ctx: ctx, cancel: cancel, cut: cut}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		// net/http stops watching the context after a 101: the deadline
		// closes the connection itself.
		context.AfterFunc(ctx, func() { rw.Close() })
		return &CancelBodyRW{CancelBody: b, wc: rw}
	}
	return b
}

// CancelBody releases a context when its body is read to the end or
// closed; an error after the context's deadline is the deadline's.
type CancelBody struct {
	rc     io.ReadCloser
	ctx    context.Context
	cancel context.CancelFunc
	cut    error // the cause the context ends with at its deadline
}

func (b *CancelBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil {
		if err != io.EOF && context.Cause(b.ctx) == b.cut {
			err = b.cut
		}
		b.cancel()
	}
	return n, err
}

// Close closes the body and releases its context.
func (b *CancelBody) Close() error {
	err := b.rc.Close()
	b.cancel()
	return err
}

// CancelBodyRW is a CancelBody over an upgraded connection.
type CancelBodyRW struct {
	*CancelBody
	wc io.Writer
}

func (b *CancelBodyRW) Write(p []byte) (int, error) { return b.wc.Write(p) }

// CloseWrite half-closes the upgraded connection.
func (b *CancelBodyRW) CloseWrite() error { return CloseWrite(b.wc) }
