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
	if !t.o.Applies(req.Method) || len(req.Header[t.header]) > 0 {
		return t.next.RoundTrip(req)
	}
	key, ok := idempotency.KeyFromContext(req.Context())
	if !ok {
		key = t.newKey()
	}
	r := *req // a shallow copy with its own header map: req stays untouched
	r.Header = cloneWith(req.Header, t.header, key)
	return t.next.RoundTrip(&r)
}

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
