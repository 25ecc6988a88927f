package transport

import (
	"errors"
	"net/http"

	"github.com/sturdyhttp/sturdy/idempotency"
)

// IdempotencyKey gives a key to each logical operation that is vouched
// for, and to no other. A request that has no key header yet is passed on
// as a copy carrying one when the caller gave its own key in the context
// ([idempotency.WithKey]), or when its method is in o.Methods (POST and
// PATCH by default) and its host is listed in o.Hosts; then the key is
// made by o.NewKey (a random UUIDv4 by default). A key the caller set in
// the header is kept. The caller's request is not modified.
//
// Any other request carries no key header. A key makes a request safe to
// send again, to [Retry] ([policy.SafeToResend]) and to net/http, which
// replays a request with an Idempotency-Key header on a new connection by
// itself; a key the server does not deduplicate by would turn each of
// those into a second side effect.
//
// Place it outside [Retry], as [New] does, so that the key is made once per
// operation and every attempt carries the same one; a server that honours
// the key then performs the operation at most once however often it is
// retried.
func IdempotencyKey(o idempotency.Options) Middleware {
	header := http.CanonicalHeaderKey(o.HeaderName())
	newKey := o.NewKey
	if newKey == nil {
		newKey = idempotency.NewKey
	}
	return func(next http.RoundTripper) http.RoundTripper {
		return &idemKey{next: orDefault(next), o: o, header: header, newKey: newKey}
	}
}

type idemKey struct {
	next   http.RoundTripper
	o      idempotency.Options
	header string
	newKey func() string
}

func (t *idemKey) RoundTrip(req *http.Request) (*http.Response, error) {
	if v := req.Header[t.header]; len(v) > 0 && v[0] != "" || req.URL == nil {
		return t.next.RoundTrip(req) // the caller's key (an empty one is none)
	}
	key, ok := idempotency.KeyFromContext(req.Context())
	if !ok {
		if !t.o.Applies(req.Method) || !t.o.MatchesHost(req.URL.Host) {
			return t.next.RoundTrip(req)
		}
		key = t.newKey()
	}
	r := *req // a shallow copy with its own header map: req stays untouched
	r.Header = cloneWith(req.Header, t.header, key)
	resp, err := t.next.RoundTrip(&r)
	if err != nil {
		err = &keyedError{key: key, err: err}
	}
	return resp, err
}

// KeyFromError returns the idempotency key that [IdempotencyKey] gave the
// operation that ended in err, so that a caller can retry it by hand
// with the same key (with [idempotency.WithKey]). A response carries its
// key in resp.Request.Header. It reports false when err does not come
// from an operation that was given a key.
func KeyFromError(err error) (string, bool) {
	var ke *keyedError
	if errors.As(err, &ke) {
		return ke.key, true
	}
	return "", false
}

// keyedError is an operation's error with the key it was sent with. It
// says what err says.
type keyedError struct {
	key string
	err error
}

func (e *keyedError) Error() string { return e.err.Error() }
func (e *keyedError) Unwrap() error { return e.err }

// Timeout reports whether err is a timeout, so that [url.Error.Timeout]
// answers through [http.Client].
func (e *keyedError) Timeout() bool { return isTimeout(e.err) }

// cloneWith returns a copy of h with name set to value, in two
// allocations: the map, sized for the new entry, and one array for all
// the values, as [http.Header.Clone] does.
func cloneWith(h http.Header, name, value string) http.Header {
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

func (t *idemKey) CloseIdleConnections() { closeIdle(t.next) }
