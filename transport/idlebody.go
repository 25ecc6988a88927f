package transport

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
)

// idleBody is a failed attempt's response body as [Retry] and [Hedge]
// read it (for its problem, or to drain it) and, when it is the one
// handed back, as the caller reads it. The Timeout layer's idle watch
// covers only the body handed back, above Retry; this gives the bodies
// read beneath it the same cut, with the same mechanism: a context of
// the Timeout layer's bound whose idle watch ticks while the body lives,
// and that closes the body when a Read has been blocked for IdleTimeout.
// That Read and every later one fail with the IdleTimeout's
// [*DeadlineError]; time between Reads is the reader's, and is never cut.
type idleBody struct {
	boundBody
	closed atomic.Bool // rc was closed, by the cut or by Close
}

func (b *idleBody) Close() error {
	var err error
	if !b.closed.Swap(true) {
		err = b.rc.Close()
	}
	b.c.release()
	return err
}

// idleWatch is an idleBody and its context, in one allocation.
type idleWatch struct {
	ctx  boundCtx
	body idleBody
}

// watchIdle returns rc with the stall cut of b, the Timeout layer's
// bound; rc itself when there is no idle limit or no body.
func watchIdle(rc io.ReadCloser, b *bound) io.ReadCloser {
	if b == nil || b.idle <= 0 || rc == nil || rc == http.NoBody {
		return rc
	}
	switch t := rc.(type) {
	case *idleBody:
		return rc
	case *prefixedBody: // a problem body put back, watched already
		if _, ok := t.body.(*idleBody); ok {
			return rc
		}
	}
	w := &idleWatch{}
	c := &w.ctx
	c.start(context.Background(), b, 0)
	c.bodyStarts(false, true) // no deadline: the idle watch only
	c.AfterFunc(func() {
		if c.cut() != nil && !w.body.closed.Swap(true) {
			rc.Close() // ends a Read blocked on the connection
		}
	})
	w.body.boundBody = boundBody{rc: rc, c: c}
	return &w.body
}
