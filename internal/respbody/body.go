// Package respbody holds response bodies as the transport's layers read
// them: under a watch ([timecut.Watch]) that bounds them, cut when a Read
// stalls, read ahead (a problem body, a body read inside its attempt) and
// put back, and drained before their connection is reused.
// transport wires them to requests.
package respbody

import (
	"errors"
	"io"

	"github.com/sturdyhttp/sturdy/internal/timecut"
)

// Body is a response body under a watch: each Read is counted for
// the idle watch (two atomic adds), the watch is released at EOF or
// Close, and an error caused by a cut is the cut's error.
type Body struct {
	rc io.ReadCloser
	w  *timecut.Watch
	wr io.Writer // where WriteTo writes
}

// Set makes b read rc under w.
func (b *Body) Set(rc io.ReadCloser, w *timecut.Watch) { *b = Body{rc: rc, w: w} }

func (b *Body) Read(p []byte) (int, error) {
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
func (b *Body) WriteTo(w io.Writer) (int64, error) {
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

// bodyReader is a Body seen as a plain reader, so that io.Copy does
// not come back to WriteTo.
type bodyReader Body

func (r *bodyReader) Read(p []byte) (int, error) { return (*Body)(r).Read(p) }

// bodyWriter is the writer a body's own WriteTo writes to (b.wr): each
// write leaves the body's wait on the server while it runs.
type bodyWriter Body

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

// Close closes the body and releases its watch.
func (b *Body) Close() error {
	err := b.rc.Close()
	b.w.Release()
	return err
}

// BodyRW is the body of a 101 Switching Protocols response: the
// upgraded connection, readable and writable.
type BodyRW struct {
	Body
	wc io.Writer
}

// NewRW returns the upgraded connection rw under w.
func NewRW(rw io.ReadWriteCloser, w *timecut.Watch) *BodyRW {
	return &BodyRW{Body{rc: rw, w: w}, rw}
}

func (b *BodyRW) Write(p []byte) (int, error) { return b.wc.Write(p) }

// CloseWrite half-closes the upgraded connection, as net/http's own 101
// body allows.
func (b *BodyRW) CloseWrite() error { return CloseWrite(b.wc) }

// CloseWrite half-closes w when it can; else it returns
// [errors.ErrUnsupported].
func CloseWrite(w io.Writer) error {
	if cw, ok := w.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
