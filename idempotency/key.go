package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand/v2"
	"path"
	"strings"
	"sync"
)

// DefaultHeader is the request header that carries the key, as named by the
// IETF Idempotency-Key HTTP header field draft and used by Stripe, Adyen,
// PayPal and others.
const DefaultHeader = "Idempotency-Key"

// Options configures the client side: which requests get a key, under which
// header, and how keys are made. The zero value is ready to use, and gives
// no request a key of its own: a key promises the server will not act
// twice, which only the caller can know.
//
// A key is what makes a POST or PATCH safe to send more than once (see
// policy.SafeToResend), so one goes only on requests that someone vouched
// for: a key the caller set in the header, or through [WithKey], is always
// kept and sent; a request to a host listed in Hosts gets a new one. Any
// other request carries no key header, so neither sturdy's retries nor
// net/http's own replay of keyed requests send it twice, unless the
// outcome proves the server did not act on it.
type Options struct {
	// Header is the request header that carries the key.
	// Empty means [DefaultHeader], "Idempotency-Key".
	Header string
	// Methods are the methods that get a key when the request has none.
	// Nil means POST and PATCH, the methods that are not idempotent by
	// themselves.
	Methods []string
	// Hosts are the hosts, or routes, where a POST or PATCH is safe to
	// send again; requests to them get a key. A hostname matches on any
	// port, case-insensitively; "*.example.com" matches its subdomains
	// (not example.com itself); "*" matches all. An entry with a path,
	// "api.openai.com/v1/chat/completions", is a route: it matches only
	// requests to that host whose cleaned path is that path or lies
	// beneath it (segment by segment, case-sensitively). List a host whose
	// server deduplicates by the key, or a route whose requests have no
	// side effect beyond their cost (a completion API). Nil means none.
	Hosts []string
	// NewKey makes a new key, once per logical operation.
	// Nil means [NewKey], a random UUIDv4.
	NewKey func() string
}

// HeaderName returns o.Header, or [DefaultHeader] when it is empty.
func (o Options) HeaderName() string {
	if o.Header == "" {
		return DefaultHeader
	}
	return o.Header
}

// Applies reports whether requests with this method get a key.
func (o Options) Applies(method string) bool {
	if o.Methods == nil {
		return method == "POST" || method == "PATCH"
	}
	for _, m := range o.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// MatchesHost reports whether host, a URL's host with or without a port,
// is listed in o.Hosts as a whole host: a hostname matches on any port,
// case-insensitively; "*.example.com" matches its subdomains; "*" matches
// all. An entry with a path (a route) does not vouch for a whole host:
// see [Options.Matches].
func (o Options) MatchesHost(host string) bool {
	if len(o.Hosts) == 0 {
		return false
	}
	host = trimDot(hostname(host))
	for _, h := range o.Hosts {
		if strings.IndexByte(h, '/') < 0 && matchHost(h, host) {
			return true
		}
	}
	return false
}

// Matches reports whether a request to host (a URL's host, with or
// without a port) and urlPath (its URL.Path) is vouched for by o.Hosts:
// by a whole host, as [Options.MatchesHost] says, or by a route, an entry
// with a path such as "api.openai.com/v1/chat/completions". A route
// matches when its host does and the cleaned urlPath is the route's path
// or lies beneath it, segment by segment: "/v1/chat/completions" matches
// itself and "/v1/chat/completions/x", not "/v1/chat/completionsx" nor
// "/v1/chat/completions/../../files".
func (o Options) Matches(host, urlPath string) bool {
	if len(o.Hosts) == 0 {
		return false
	}
	host = trimDot(hostname(host))
	cleaned := ""
	for _, h := range o.Hosts {
		i := strings.IndexByte(h, '/')
		if i < 0 {
			if matchHost(h, host) {
				return true
			}
			continue
		}
		if !matchHost(h[:i], host) {
			continue
		}
		if cleaned == "" {
			cleaned = path.Clean("/" + urlPath)
		}
		if underPath(cleaned, path.Clean(h[i:])) {
			return true
		}
	}
	return false
}

// matchHost reports whether the entry h (a hostname, "*.example.com" or
// "*", with or without a port) matches host, a hostname without a port.
func matchHost(h, host string) bool {
	switch {
	case h == "":
	case h == "*":
		return true
	case strings.HasPrefix(h, "*."):
		suffix := trimDot(hostname(h))[1:] // ".example.com", on any port
		return len(host) > len(suffix) && strings.EqualFold(host[len(host)-len(suffix):], suffix)
	default:
		return strings.EqualFold(host, trimDot(hostname(h)))
	}
	return false
}

// underPath reports whether p is prefix or lies beneath it; both are
// cleaned absolute paths.
func underPath(p, prefix string) bool {
	if prefix == "/" || p == prefix {
		return true
	}
	return strings.HasPrefix(p, prefix) && p[len(prefix)] == '/'
}

// hostname strips the port from host, and the brackets from an IPv6
// literal.
func hostname(host string) string {
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, ']'); i > 0 {
			return host[1:i]
		}
		return host
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.IndexByte(host, ':') == i {
		return host[:i] // one colon: host:port (more is a bare IPv6 address)
	}
	return host
}

func trimDot(host string) string { return strings.TrimSuffix(host, ".") }

type ctxKey struct{}

// WithKey returns a copy of ctx that carries the caller's own idempotency
// key for one logical operation. A request made with that context is sent
// with this key, on every attempt, whatever its host and method: the key
// vouches that the server will not act on it twice, so it may be retried. Use it when
// the key must survive a process restart or come from your own records (an
// order ID, a payment intent).
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, ctxKey{}, key)
}

// KeyFromContext returns the key stored by [WithKey], if any.
func KeyFromContext(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(ctxKey{}).(string)
	return k, ok && k != ""
}

// keyRand holds ChaCha8 generators, each seeded from crypto/rand. ChaCha8
// is a cryptographically strong generator (the one Go's runtime uses); a
// generator belongs to one goroutine at a time.
var keyRand = sync.Pool{New: func() any {
	var seed [32]byte
	rand.Read(seed[:]) // never fails (crypto/rand.Read documents so since Go 1.24)
	return mrand.NewChaCha8(seed)
}}

// NewKey returns a random UUID version 4 (RFC 9562), in its canonical
// 36-character form. Its 122 random bits come from a ChaCha8 generator
// seeded from crypto/rand, which costs a fraction of a crypto/rand read
// per key. It is safe for concurrent use.
func NewKey() string {
	g := keyRand.Get().(*mrand.ChaCha8)
	var u [16]byte
	g.Read(u[:])
	keyRand.Put(g)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}
