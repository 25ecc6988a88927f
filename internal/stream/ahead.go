// Package stream holds the body of a streamed response read ahead to its
// first content event: the bytes read, then the rest of the stream.
// transport.FirstEvent reads ahead and wires it to requests.
package stream

import (
	"io"
	"sync/atomic"
)

// Ahead is a stream's body after its read ahead: the bytes read, then,
// when open, the rest of the stream. A judged stream's body is not open
// until it is restored: a layer that drains it reads what was read ahead
// and closes the connection, without waiting on the server.
type Ahead struct {
	buf  []byte
	pos  int
	rest io.ReadCloser
	open atomic.Bool
}

// NewAhead returns the body that gives buf, then, once open, rest.
func NewAhead(buf []byte, rest io.ReadCloser, open bool) *Ahead {
	b := &Ahead{buf: buf, rest: rest}
	b.open.Store(open)
	return b
}

// Open lets b read on past the bytes read ahead.
func (b *Ahead) Open() { b.open.Store(true) }

// IsOpen reports whether b reads on past the bytes read ahead.
func (b *Ahead) IsOpen() bool { return b.open.Load() }

func (b *Ahead) Read(p []byte) (int, error) {
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

// Close closes the rest of the stream.
func (b *Ahead) Close() error { return b.rest.Close() }
