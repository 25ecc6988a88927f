// Package connwatch learns, through net/http/httptrace, whether an
// attempt got a connection: one that did not cannot have reached the
// server, so a request that is not safe to send twice may be sent again.
package connwatch

import (
	"context"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// Watch watches the connections of the attempts of one request.
type Watch struct {
	asked atomic.Bool // GetConn: the transport reports its connections
	got   atomic.Bool // GotConn
	trace httptrace.ClientTrace
}

// New returns a copy of req whose context reports its attempts'
// connections to the returned watch. A trace of the caller's is
// composed with it by httptrace.
func New(req *http.Request) (*Watch, *http.Request) {
	w := newWatch()
	return w, req.WithContext(httptrace.WithClientTrace(req.Context(), &w.trace))
}

func newWatch() *Watch {
	w := &Watch{}
	w.trace.GetConn = func(string) { w.asked.Store(true) }
	w.trace.GotConn = func(httptrace.GotConnInfo) { w.got.Store(true) }
	return w
}

// Reset forgets the last attempt's connection.
func (w *Watch) Reset() {
	w.asked.Store(false)
	w.got.Store(false)
}

// NotConnected reports whether the attempt is known to have got no
// connection: the transport began to look for one (net/http's, and
// x/net/http2's, report GetConn first) and never got it. A transport
// that reports neither (an HTTP/3 or custom transport, a fake) proves
// nothing: the request may have reached the server.
func (w *Watch) NotConnected() bool { return w.asked.Load() && !w.got.Load() }

type watchKey struct{}

// NewShared is [New], with the watch kept in the context too, where [Of]
// finds it: the layers beneath that judge the attempt learn from it
// whether a connection was made.
func NewShared(req *http.Request) (*Watch, *http.Request) {
	w := newWatch()
	ctx := httptrace.WithClientTrace(req.Context(), &w.trace)
	return w, req.WithContext(context.WithValue(ctx, watchKey{}, w))
}

// Of returns the watch that [NewShared] kept in ctx, nil when none is.
func Of(ctx context.Context) *Watch {
	w, _ := ctx.Value(watchKey{}).(*Watch)
	return w
}
