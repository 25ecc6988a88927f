package transport

import (
	"errors"
	"net/http"

	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/internal/idemkey"
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
		return &idemkey.Transport{Next: orDefault(next), O: o, Header: header, NewKey: newKey}
	}
}

// KeyFromError returns the idempotency key that [IdempotencyKey] gave the
// operation that ended in err. A caller can retry the operation by hand
// with the same key, through [idempotency.WithKey]. It reports false when
// err does not come from an operation that was given a key. A response
// carries its key in resp.Request.Header.
func KeyFromError(err error) (string, bool) {
	var ke *idemkey.Error
	if errors.As(err, &ke) {
		return ke.Key, true
	}
	return "", false
}
