// Package idemkey is the RoundTripper of transport.IdempotencyKey: it
// gives a key to each operation that is vouched for, in a copy of the
// request, and names the key in the operation's error.
package idemkey

import (
	"context"
	"errors"
	"net/http"

	"github.com/sturdyhttp/sturdy/idempotency"
)

// Transport is the RoundTripper of transport.IdempotencyKey.
type Transport struct {
	Next   http.RoundTripper
	O      idempotency.Options
	Header string        // the key's header, canonical
	NewKey func() string // makes a key
}

// RoundTrip sends req with a key when it is vouched for.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if v := req.Header[t.Header]; len(v) > 0 && v[0] != "" || req.URL == nil {
		return t.Next.RoundTrip(req) // the caller's key (an empty one is none)
	}
	key, ok := idempotency.KeyFromContext(req.Context())
	if !ok {
		if !t.O.Applies(req.Method) || !t.O.Matches(req.URL.Host, req.URL.Path) {
			return t.Next.RoundTrip(req)
		}
		key = t.NewKey()
	}
	r := *req // a shallow copy with its own header map: req stays untouched
	r.Header = CloneWith(req.Header, t.Header, key)
	resp, err := t.Next.RoundTrip(&r)
	if err != nil {
		err = &Error{Key: key, Err: err}
	}
	return resp, err
}

// Error is an operation's error with the key it was sent with. It
// says what Err says.
type Error struct {
	Key string
	Err error
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Timeout reports whether Err is a timeout, so that [url.Error.Timeout]
// answers through [http.Client].
func (e *Error) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.Is(e.Err, context.DeadlineExceeded) || errors.As(e.Err, &t) && t.Timeout()
}

// CloneWith returns a copy of h with name set to value, in two
// allocations: the map, sized for the new entry, and one array for all
// the values, as [http.Header.Clone] does.
func CloneWith(h http.Header, name, value string) http.Header {
	n := 1
	for _, vv := range h {
		n += len(vv)
	}
	sv := make([]string, n)
	h2 := make(http.Header, len(h)+1)
	for k, vv := range h {
		if vv == nil {
			h2[k] = nil // as Clone: nil and empty are not the same to net/http
			continue
		}
		n := copy(sv, vv)
		h2[k] = sv[:n:n]
		sv = sv[n:]
	}
	sv[0] = value
	h2[name] = sv[:1:1]
	return h2
}

// CloseIdleConnections forwards to the next RoundTripper.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.Next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
