package transport

import (
	"net/http"

	"github.com/sturdyhttp/sturdy/internal/hosts"
)

// Middleware wraps a RoundTripper with one concern, such as a deadline,
// retries or a circuit breaker. Middlewares compose with [Chain].
type Middleware func(next http.RoundTripper) http.RoundTripper

// Func is an adapter to allow the use of ordinary functions as
// RoundTrippers, as [http.HandlerFunc] is for handlers. If f is a function
// with the appropriate signature, Func(f) is a RoundTripper that calls f.
type Func func(*http.Request) (*http.Response, error)

// RoundTrip calls f(r).
func (f Func) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Chain stacks mws around base, mws[0] outermost. A request passes through
// mws[0], then mws[1], and so on, then base. A nil base means
// [http.DefaultTransport]. Nil middlewares are skipped, so passing nil
// switches a layer off.
func Chain(base http.RoundTripper, mws ...Middleware) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	rt := base
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			rt = mws[i](rt)
		}
	}
	return rt
}

// orDefault returns rt, or [http.DefaultTransport] when rt is nil, so that
// a middleware applied by hand to a nil RoundTripper behaves as [Chain]
// does.
func orDefault(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		return http.DefaultTransport
	}
	return rt
}

// closeIdler is what [http.Client.CloseIdleConnections] looks for.
type closeIdler interface{ CloseIdleConnections() }

// closeIdle forwards CloseIdleConnections to rt when it supports it. Every
// RoundTripper of this package calls it from its own CloseIdleConnections,
// so the call reaches the pooled base through the whole stack.
func closeIdle(rt http.RoundTripper) {
	if c, ok := rt.(closeIdler); ok {
		c.CloseIdleConnections()
	}
}

// HostKey returns the key that per-host state is kept under: breakers,
// quotas and retry budgets. It is the request URL's scheme and host,
// lowercased, with the port unless it is the scheme's default. So
// "https://API.example.com:443/v1" gives "https://api.example.com", and
// "http://localhost:8080/" gives "http://localhost:8080".
func HostKey(r *http.Request) string {
	if r.URL == nil {
		return ""
	}
	return hosts.KeyOf(r.URL).String()
}
