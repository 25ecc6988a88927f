// Package connwatch learns, through net/http/httptrace, whether an
// attempt got a connection: one that did not cannot have reached the
// server, so a request that is not safe to send twice may be sent again.
package connwatch

import (
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
	w := &Watch{}
	w.trace.GetConn = func(string) { w.asked.Store(true) }
	w.trace.GotConn = func(httptrace.GotConnInfo) { w.got.Store(true) }
	return w, req.WithContext(httptrace.WithClientTrace(req.Context(), &w.trace))
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
