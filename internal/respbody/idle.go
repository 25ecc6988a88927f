package respbody

import (
	"io"
	"net/http"
	"sync/atomic"

	"github.com/sturdyhttp/sturdy/internal/timecut"
)

// idleBody is a failed attempt's response body as Retry and Hedge
// read it (for its problem, or to drain it) and, when it is the one
// handed back, as the caller reads it. The Timeout layer's idle watch
// covers only the body handed back, above Retry; this gives the bodies
// read beneath it the same cut, with the same mechanism (a watch), which
// closes the body when a Read has been blocked for IdleTimeout. That
// Read and every later one fail with the IdleTimeout's error; time
// between Reads is the reader's, and is never cut.
type idleBody struct {
	Body
	watch  timecut.Watch
	closed atomic.Bool // rc was closed, by the cut or by Close
}

func (b *idleBody) Close() error {
	var err error
	if !b.closed.Swap(true) {
		err = b.rc.Close()
	}
	b.w.Release()
	return err
}

// WatchIdle returns rc with the idle cut of cut, the Timeout layer's
// watch; rc itself when there is none or no body.
func WatchIdle(rc io.ReadCloser, cut *timecut.Watch) io.ReadCloser {
	if cut == nil || cut.L.Idle <= 0 || rc == nil || rc == http.NoBody {
		return rc
	}
	switch t := rc.(type) {
	case *idleBody:
		return rc
	case *Prefixed: // a problem body put back, watched already
		if _, ok := t.body.(*idleBody); ok {
			return rc
		}
	}
	b := &idleBody{}
	b.Body = Body{rc: rc, w: &b.watch}
	b.watch.StartIdle(cut.L, func(err error) { // no deadline: the idle watch only
		if err != nil && !b.closed.Swap(true) {
			rc.Close() // ends a Read blocked on the connection
		}
	})
	return b
}
