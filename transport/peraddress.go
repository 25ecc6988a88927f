package transport

import (
	"net/http"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/sturdyhttp/sturdy/internal/endpoint"
)

// PerAddress returns a RoundTripper that sends each request through a
// connection pool of one resolved address of its host, as
// [Endpoints.PerAddress] describes: a clone of base dialing that address,
// which still verifies TLS for the host name and negotiates HTTP/2 as base
// does. A nil base means the default base of [New]. It reads e's
// PerAddress-related fields: LookupHost, Outlier, RefreshInterval and
// OnEject. [New] makes one when Options.Endpoints.PerAddress is set; use
// this function to put it beneath a RoundTripper of your own.
//
// Pools are kept for up to 10,000 hosts. To make room, hosts unused for
// two RefreshIntervals are forgotten and their idle connections closed;
// when none is, a new host uses base.
//
// The operation's record of the addresses it tried is kept by the
// outermost layer of [Layers]; without it, requests are still spread and
// addresses ejected, but a retry may go to an address already tried.
func PerAddress(base *http.Transport, e Endpoints) http.RoundTripper {
	if base == nil {
		base = defaultBase()
	}
	return newPerAddress(base, &e)
}

// defaultBase is the base of [New] when Options.Base is nil.
func defaultBase() *http.Transport {
	t := cleanhttp.DefaultPooledTransport()
	t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	t.MaxResponseHeaderBytes = DefaultMaxResponseHeaderBytes
	return t
}

// perAddressMiddleware returns the bottom layer of Endpoints.PerAddress:
// next, when it is an *http.Transport, behind per-address pools; any
// other next as it is (see Endpoints.PerAddress).
func (ep *endpoints) perAddressMiddleware() Middleware {
	return func(next http.RoundTripper) http.RoundTripper {
		if next == nil {
			next = http.DefaultTransport
		}
		if t, ok := next.(*http.Transport); ok {
			return newPerAddress(t, &ep.e)
		}
		return next
	}
}

// perAddress is [endpoint.Pools] wired to requests: to the operation's
// record of the addresses it tried, and to [AddressOf].
type perAddress struct{ pools *endpoint.Pools }

// CloseIdleConnections closes the idle connections of every pool.
func (p *perAddress) CloseIdleConnections() { p.pools.CloseIdleConnections() }

func newPerAddress(base *http.Transport, e *Endpoints) *perAddress {
	c := endpoint.Config{LookupHost: e.LookupHost, Outlier: e.Outlier, Refresh: e.RefreshInterval}
	if c.Refresh <= 0 {
		c.Refresh = DefaultRefreshInterval
	}
	if f := e.OnEject; f != nil {
		c.OnEject = func(e endpoint.Ejection) {
			f(EjectionEvent{Host: e.Host, Address: e.Address, Failures: e.Failures, Ejections: e.Ejections, Duration: e.Duration})
		}
	}
	return &perAddress{pools: endpoint.New(base, c)}
}

// AddressOf returns the address that the attempt whose response is resp
// was sent to by [Endpoints.PerAddress]: an IP address, or "" when the
// attempt was not sent through a per-address pool. [OperationOf] gives
// it for a whole operation.
func AddressOf(resp *http.Response) string {
	if resp == nil || resp.Request == nil {
		return ""
	}
	if s := scopeOf(resp.Request.Context()); s != nil {
		return s.addr
	}
	return ""
}

// RoundTrip sends req through the pool of one of its host's addresses.
func (p *perAddress) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Host == "" {
		return p.pools.Base().RoundTrip(req) // let the base report the error
	}
	h := p.pools.Host(req)
	if h.Direct() {
		return p.pools.Base().RoundTrip(req)
	}
	ctx := req.Context()
	op := endpointOpOf(ctx).record()
	pl, err := p.pools.Pick(ctx, h, op.Tried())
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	op.AddTried(pl)
	r := req.WithContext(withScope(ctx, func(s *scope) { s.addr = pl.IP() }))
	resp, err := pl.RoundTrip(r)
	p.pools.Record(h, pl, verdictOf(req, resp, err).Host, err) // the innermost layer: it judges the attempt
	if err == nil {
		op.Served("", pl.IP())
	}
	return resp, err
}
