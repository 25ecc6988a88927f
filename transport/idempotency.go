package transport

import (
	"errors"
	"net/http"

	"github.com/sturdyhttp/sturdy/idempotency"
)

// IdempotencyKey returns a middleware that gives a key to each logical
// operation that is vouched for, and to no other. A request vouched for
// without a key header is passed on as a copy that carries one. It is
// vouched for when the caller gave its own key with [idempotency.WithKey].
// It is also vouched for when its method is in o.Methods and its host, or
// its route (host and path prefix), in o.Hosts. The key is then made by
// o.NewKey.
//
// The defaults are those of [idempotency.Options]: POST and PATCH, no
// hosts, and a random UUIDv4 key. A key the caller set in the header is
// kept. Any other request carries no key header. The caller's request is
// not modified.
//
// A key makes a request safe to send again, to [Retry]
// ([policy.SafeToResend]) and to net/http. Give keys only to hosts that
// deduplicate by them. Place IdempotencyKey outside Retry, as [New] does,
// so that every attempt carries the same key. See docs/idempotency.md in
// the repository for the reasons.
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
		if !t.o.Applies(req.Method) || !t.o.Matches(req.URL.Host, req.URL.Path) {
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
// operation that ended in err. A caller can retry the operation by hand
// with the same key, through [idempotency.WithKey]. It reports false when
// err does not come from an operation that was given a key. A response
// carries its key in resp.Request.Header.
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
