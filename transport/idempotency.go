package transport

import (
	"net/http"

	"github.com/sturdyhttp/sturdy/idempotency"
)

// IdempotencyKey gives each logical operation an idempotency key: a
// request whose method is in o.Methods (POST and PATCH by default) and
// that has no key header yet is passed on as a copy carrying one, taken
// from the context ([idempotency.WithKey]) or else made by o.NewKey (a
// random UUIDv4 by default). The caller's request is not modified.
//
// Place it outside [Retry], as [New] does, so that the key is made once per
// operation and every attempt carries the same one; a server that honours
// the key then performs the operation at most once however often it is
// retried. A key the caller set, in the header or the context, is kept.
func IdempotencyKey(o idempotency.Options) Middleware {
	header := http.CanonicalHeaderKey(o.HeaderName())
	newKey := o.NewKey
	if newKey == nil {
		newKey = idempotency.NewKey
	}
	return func(next http.RoundTripper) http.RoundTripper {
		return &idemKey{next: next, o: o, header: header, newKey: newKey}
	}
}

type idemKey struct {
	next   http.RoundTripper
	o      idempotency.Options
	header string
	newKey func() string
}

func (t *idemKey) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.o.Applies(req.Method) || len(req.Header[t.header]) > 0 {
		return t.next.RoundTrip(req)
	}
	key, ok := idempotency.KeyFromContext(req.Context())
	if !ok {
		key = t.newKey()
	}
	r := *req // a shallow copy with its own header map: req stays untouched
	r.Header = req.Header.Clone()
	if r.Header == nil {
		r.Header = make(http.Header, 1)
	}
	r.Header[t.header] = []string{key}
	return t.next.RoundTrip(&r)
}

func (t *idemKey) CloseIdleConnections() { closeIdle(t.next) }
