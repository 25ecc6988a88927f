package transport

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/sturdyhttp/sturdy/internal/endpoint"
	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/policy"
)

// Endpoints says where the requests to a host may go: to which of its
// addresses, and to which other origins when it fails. Its zero value
// changes nothing: requests go where their URL says, through the base's
// own connection pool. See docs/endpoints.md for why it works as it does.
type Endpoints struct {
	// PerAddress keeps a connection pool per resolved address of each
	// host (TLS still verifies the host name; HTTP/2 as the base
	// negotiates it), spreads requests over them, ejects an address that
	// fails (see Outlier), and sends a retry or hedge to an address the
	// operation has not tried. Addresses are resolved again every
	// RefreshInterval, and soon after a connection fails. It needs a nil
	// Base or an *http.Transport: with another Base, [New] makes no pools
	// of its own, and a RoundTripper made by [PerAddress] beneath the
	// caller's wrapper does the work (sturdyotel's Apply does so). A host
	// given as an IP address, or sent through a proxy, uses the base.
	PerAddress bool
	// LookupHost resolves a host name; nil means net.DefaultResolver's.
	LookupHost func(ctx context.Context, host string) ([]string, error)
	// Alternates maps an origin ("https://api.example.com") to origins
	// that serve the same API, in order of preference. While the origin
	// fails (its circuit open, or an attempt failed in a way that proves
	// the request was not processed, or one safe to send again), attempts
	// go to the next alternate, path and query kept; traffic returns when
	// the origin's circuit closes. Each origin is a scheme and a host,
	// with a port when not the scheme's default, and nothing else. Nil
	// means none.
	Alternates map[string][]string
	// Outlier says when an address is ejected and for how long. Its zero
	// value has the defaults of [policy.Outlier].
	Outlier policy.Outlier
	// Adjust, when set, is called with each attempt sent to an alternate,
	// a copy that it may change, and the alternate's origin: for an
	// alternate that needs another auth header. Nil changes nothing.
	Adjust func(req *http.Request, origin string)
	// RefreshInterval is how often a host's addresses are resolved again.
	// Zero or negative means [DefaultRefreshInterval] (30s).
	RefreshInterval time.Duration
	// OnEject is called when an address is ejected. Nil means none;
	// Hooks.OnEject is called too.
	OnEject func(EjectionEvent)
	// OnFailover is called for each attempt sent to an alternate. Nil
	// means none; Hooks.OnFailover is called too.
	OnFailover func(FailoverEvent)
}

// DefaultRefreshInterval is how often [Endpoints.PerAddress] resolves a
// host's addresses again, when Endpoints.RefreshInterval is zero.
const DefaultRefreshInterval = 30 * time.Second

// ErrEndpoints is matched by errors.Is for every error about the
// configuration of [Endpoints].
var ErrEndpoints = errors.New("transport: bad Endpoints")

// EjectionEvent reports an address of a host ejected by
// [Endpoints.PerAddress] (see [policy.Outlier]).
type EjectionEvent struct {
	// Host is the host and port whose address is ejected.
	Host string
	// Address is the ejected address.
	Address string
	// Failures is how many failures in a row it had.
	Failures int
	// Ejections is how many times it was ejected, this one included.
	Ejections int
	// Duration is how long it is out.
	Duration time.Duration
}

// FailoverEvent reports an attempt sent to an alternate origin instead
// of its own (see [Endpoints.Alternates]).
type FailoverEvent struct {
	// Request is the attempt as it came, for its own origin.
	Request *http.Request
	// From is the request's own origin, To the alternate it goes to.
	From, To string
	// Reason says why: "circuit open", or "attempt failed" when an
	// earlier attempt of the operation failed.
	Reason string
}

// The reasons of a [FailoverEvent].
const (
	failoverOpen   = "circuit open"
	failoverFailed = "attempt failed"
)

// on reports whether e changes anything.
func (e *Endpoints) on() bool { return e.PerAddress || len(e.Alternates) > 0 }

// Validate reports what is wrong with e, as an error matching
// [ErrEndpoints]: an origin or alternate that is not an absolute http or
// https URL of a scheme and host only. [New] does not check: a request
// to an origin with a bad entry fails with this error, unsent.
func (e Endpoints) Validate() error {
	_, err := endpoint.ParseAlternates(e.Alternates, ErrEndpoints)
	return err
}

// configError is the error of every request through Endpoints that
// Validate rejects. It matches policy.ErrInvalidRequest too: a request
// that cannot be sent as configured is not retried and counts against no
// host.
type configError struct{ err error }

func (e configError) Error() string   { return e.err.Error() }
func (e configError) Unwrap() []error { return []error{e.err, policy.ErrInvalidRequest} }

// endpoints is the Endpoints of one stack, with its hooks.
type endpoints struct {
	e          Endpoints
	origins    map[hosts.Key][]endpoint.Origin
	err        error // Validate's error: requests fail with it
	onEject    func(EjectionEvent)
	onFailover func(FailoverEvent)
	breakers   *Breakers // the stack's, when Layers made them; else the stack's context tells
}

// useBreakers gives ep the Breakers of its stack; a nil ep ignores it.
func (ep *endpoints) useBreakers(b *Breakers) {
	if ep != nil {
		ep.breakers = b
	}
}

func newEndpoints(e Endpoints, h Hooks) *endpoints {
	ep := &endpoints{e: e, onEject: both(e.OnEject, h.OnEject), onFailover: both(e.OnFailover, h.OnFailover)}
	if ep.origins, ep.err = endpoint.ParseAlternates(e.Alternates, ErrEndpoints); ep.err != nil {
		ep.err = configError{ep.err}
	}
	ep.e.OnEject, ep.e.OnFailover = ep.onEject, ep.onFailover
	return ep
}

// endpointOp is what one operation carries for Endpoints, with the
// Endpoints of its stack.
type endpointOp struct {
	endpoint.Op
	ep *endpoints
}

// endpointOpOf returns the endpointOp of ctx's operation, nil if none.
func endpointOpOf(ctx context.Context) *endpointOp {
	if op := opOf(ctx); op != nil {
		return op.ep
	}
	return nil
}

// record returns op's record of the operation; nil for a nil op.
func (op *endpointOp) record() *endpoint.Op {
	if op == nil {
		return nil
	}
	return &op.Op
}

// operation returns the outermost layer of Endpoints: it gives each
// operation the record its attempts share.
func (ep *endpoints) operation() Middleware {
	return func(next http.RoundTripper) http.RoundTripper {
		return &endpointOpTransport{ep: ep, next: orDefault(next)}
	}
}

type endpointOpTransport struct {
	ep   *endpoints
	next http.RoundTripper
}

// CloseIdleConnections forwards to the next RoundTripper.
func (t *endpointOpTransport) CloseIdleConnections() { closeIdle(t.next) }

func (t *endpointOpTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op, r := withOp(req)
	if op.ep == nil { // the operation's first pass through Endpoints
		op.ep = &endpointOp{ep: t.ep}
	}
	return t.next.RoundTrip(r)
}

// alternates returns the layer that sends attempts to alternate origins,
// nil when there are none. It sits above the per-host layers (quotas,
// breakers), so that each origin has its own.
func (ep *endpoints) alternates() Middleware {
	if ep == nil || len(ep.origins) == 0 && ep.err == nil {
		return nil
	}
	return func(next http.RoundTripper) http.RoundTripper {
		t := &alternatesTransport{ep: ep, next: orDefault(next)}
		// What every request's send shares, made once: each request adds
		// its origins and its operation's record.
		t.send = endpoint.Alternates{Next: t.next, Adjust: ep.e.Adjust,
			Refused: func(req *http.Request, u *url.URL, at time.Time) bool {
				return ep.refusedOrigin(opOf(req.Context()), req, u, at)
			},
			Unsent: func(err error) bool { return errors.Is(err, ErrCircuitOpen) },
			Ended:  callerEnded,
		}
		if f := ep.onFailover; f != nil {
			t.send.OnFailover = func(req *http.Request, from, to string, open bool) {
				reason := failoverFailed
				if open {
					reason = failoverOpen
				}
				f(FailoverEvent{Request: req, From: from, To: to, Reason: reason})
			}
		}
		return t
	}
}

type alternatesTransport struct {
	ep   *endpoints
	next http.RoundTripper
	send endpoint.Alternates // without List and Op
}

// CloseIdleConnections forwards to the next RoundTripper.
func (t *alternatesTransport) CloseIdleConnections() { closeIdle(t.next) }

// refusedOrigin reports whether the origin u of req (req's own when
// nil) would be refused at at by the breakers beneath: ep's, else those
// the stack of req's context knows of.
func (ep *endpoints) refusedOrigin(st *operation, req *http.Request, u *url.URL, at time.Time) bool {
	b := ep.breakers
	if b == nil && st != nil {
		b = st.breakers.Load()
	}
	if b == nil {
		return false
	}
	if u != nil {
		req = &http.Request{Method: req.Method, URL: u, Header: req.Header}
	}
	return b.refusedAt(req, at) != nil
}

// pick returns the index in list of the origin an attempt of req goes to
// at now: the first from start, in turn, whose circuit is not open; start
// when every one is.
func (ep *endpoints) pick(st *operation, req *http.Request, list []endpoint.Origin, start int, now time.Time) int {
	return endpoint.Pick(list, start, func(u *url.URL) bool { return ep.refusedOrigin(st, req, u, now) })
}

func (t *alternatesTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.ep.err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, t.ep.err
	}
	if req.URL == nil {
		return t.next.RoundTrip(req)
	}
	list := t.ep.origins[hosts.KeyOf(req.URL)]
	if list == nil {
		return t.next.RoundTrip(req)
	}
	a := t.send
	a.List, a.Op = list, endpointOpOf(req.Context()).record()
	return a.Send(req)
}

// routeOf returns the request that an attempt of req made at at would
// send, when ctx's operation has alternates: a copy for the origin it
// would go to, so that a Retry or Hedge above asks that origin's breaker
// whether the attempt would be refused. Else req itself.
func routeOf(req *http.Request, at time.Time) *http.Request {
	if req.URL == nil {
		return req
	}
	ctx := req.Context()
	op := endpointOpOf(ctx)
	if op == nil || len(op.ep.origins) == 0 {
		return req
	}
	list := op.ep.origins[hosts.KeyOf(req.URL)]
	if list == nil {
		return req
	}
	i := op.ep.pick(opOf(ctx), req, list, int(op.Next.Load())%len(list), at)
	if i == 0 {
		return req
	}
	return &http.Request{Method: req.Method, URL: list[i].URL, Header: req.Header, Host: list[i].URL.Host}
}

// servedBy adds to op what the Endpoints of resp's operation say of it:
// the origin and address that served it. It reports whether there were
// Endpoints.
func servedBy(resp *http.Response, op *Operation) bool {
	e := endpointOpOf(resp.Request.Context())
	if e == nil {
		return false
	}
	op.Origin, op.Address = e.ServedBy()
	if op.Origin == "" && resp.Request.URL != nil {
		op.Origin = hosts.KeyOf(resp.Request.URL).String()
	}
	return true
}
