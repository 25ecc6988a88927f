package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand/v2"
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
	// Hosts are the hosts where a POST or PATCH is safe to send again;
	// requests to them get a key. A hostname matches on any port,
	// case-insensitively; "*.example.com" matches its subdomains (not
	// example.com itself); "*" matches all. List a host whose server
	// deduplicates by the key, or whose requests have no side effect
	// beyond their cost (a completion API). Nil means none.
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
// is listed in o.Hosts: a hostname matches on any port,
// case-insensitively; "*.example.com" matches its subdomains; "*" matches
// all.
func (o Options) MatchesHost(host string) bool {
	if len(o.Hosts) == 0 {
		return false
	}
	host = trimDot(hostname(host))
	for _, h := range o.Hosts {
		switch {
		case h == "":
		case h == "*":
			return true
		case strings.HasPrefix(h, "*."):
			suffix := trimDot(hostname(h))[1:] // ".example.com", on any port
			if len(host) > len(suffix) && strings.EqualFold(host[len(host)-len(suffix):], suffix) {
				return true
			}
		case strings.EqualFold(host, trimDot(hostname(h))):
			return true
		}
	}
	return false
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
