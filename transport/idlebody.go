package transport

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// idleBody is a failed attempt's response body as [Retry] and [Hedge]
// read it (for its problem, or to drain it) and, when it is the one
// handed back, as the caller reads it. The Timeout layer's idle watch
// covers only the body handed back, above Retry; this gives the bodies
// read beneath it the same cut, so that a failed attempt whose body
// stalls holds the operation for IdleTimeout, not for as long as the
// server keeps it open.
//
// A timer runs while a Read is blocked. When it fires, the body is
// closed, which ends a Read blocked on a connection, and that Read and
// every later one fail with the IdleTimeout's [*DeadlineError]. Time
// between Reads is the reader's, and is never cut.
type idleBody struct {
	rc    io.ReadCloser
	cut   *DeadlineError
	timer *time.Timer
	fired atomic.Bool
}

// watchIdle returns rc with the stall cut of idle, cut's Limit; rc
// itself when there is no limit or no body.
func watchIdle(rc io.ReadCloser, cut *DeadlineError) io.ReadCloser {
	if cut == nil || rc == nil || rc == http.NoBody {
		return rc
	}
	switch b := rc.(type) {
	case *idleBody:
		return rc
	case *prefixedBody: // a problem body put back, watched already
		if _, ok := b.body.(*idleBody); ok {
			return rc
		}
	}
	b := &idleBody{rc: rc, cut: cut}
	b.timer = time.AfterFunc(cut.Limit, b.fire)
	b.timer.Stop() // armed only while a Read is blocked
	return b
}

func (b *idleBody) fire() {
	b.fired.Store(true)
	b.rc.Close()
}

func (b *idleBody) Read(p []byte) (int, error) {
	if b.fired.Load() {
		return 0, b.cut
	}
	b.timer.Reset(b.cut.Limit)
	n, err := b.rc.Read(p)
	if !b.timer.Stop() && b.fired.Load() {
		return n, b.cut // the body was closed under this Read
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	if b.fired.Load() {
		return nil // closed when it was cut
	}
	return b.rc.Close()
}
