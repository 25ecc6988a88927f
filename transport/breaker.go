package transport

import (
	"context"
	"errors"
	"github.com/sturdyhttp/sturdy/internal/circuit"
	"github.com/sturdyhttp/sturdy/internal/reqbody"
	"net/http"
	"net/url"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/policy"
)

// Breaker returns a middleware that keeps a circuit breaker per host and
// stops sending to a host that is down. While a host's breaker is open,
// its requests are not sent: they fail at once with a
// [*CircuitOpenError] that matches [ErrCircuitOpen]. See
// [BreakerSettings] for when a breaker opens and how it closes again.
//
// It is shorthand for NewBreakers(s).Middleware(); use [NewBreakers] to
// read a host's breaker state.
func Breaker(s BreakerSettings) Middleware { return NewBreakers(s).Middleware() }

// Breakers are the circuit breakers of many hosts, one per host (or per
// key, see BreakerSettings.Key), made on first use and forgotten when
// unused for a while (an open breaker is kept until its open period has
// passed), so that a client talking to many hosts keeps a bounded map.
//
// Breakers is safe for concurrent use. A request through a closed
// breaker takes no lock and adds no allocation.
type Breakers struct {
	c     breakerConfig
	epoch time.Time
	slot  *hosts.Slot[circuit.Circuit]
}

// NewBreakers returns the breakers of settings s, none made yet.
func NewBreakers(s BreakerSettings) *Breakers { return newBreakers(s, nil) }

// newBreakers keeps the breakers in reg, the per-host registry that [New]
// shares between its layers; nil means a registry of their own.
func newBreakers(s BreakerSettings, reg *hosts.Registry) *Breakers {
	b := &Breakers{c: s.config(), epoch: time.Now()}
	newState := func(h *hosts.Host) *circuit.Circuit { return circuit.New(&b.c.Config, b.epoch, h.Name()) }
	if reg != nil {
		b.slot = hosts.NewSlotOf(reg, newState, (*circuit.Circuit).LiveAt)
	}
	if b.slot == nil { // no registry given, or no slot left in it
		b.slot = hosts.NewSlotOf(hosts.New(hosts.Options{}), newState, (*circuit.Circuit).LiveAt)
	}
	return b
}

// Middleware returns a middleware that sends requests through b's
// breakers. Every RoundTripper it makes shares them.
func (b *Breakers) Middleware() Middleware {
	return func(next http.RoundTripper) http.RoundTripper {
		return &breakerTransport{b: b, next: orDefault(next)}
	}
}

// State returns the state of the breaker of a GET of u (u's host, by
// default): BreakerClosed for a host b has not seen, or has forgotten.
// An open breaker whose open period has passed reports BreakerHalfOpen:
// its next request is a probe.
//
// With a [BreakerStore] (BreakerSettings.Store), the fleet's view counts
// too, as it does for requests: a host the fleet holds open is
// BreakerOpen, and one whose fleet-wide open period has passed is
// BreakerHalfOpen, even if this process has not sent to it. The more
// restrictive of the two views is reported.
func (b *Breakers) State(u *url.URL) BreakerState {
	k, ok := b.key(&http.Request{Method: http.MethodGet, URL: u, Header: http.Header{}})
	if !ok {
		return BreakerClosed
	}
	st := BreakerClosed
	if e := b.slot.Peek(k); e != nil {
		st = e.State()
		if st == BreakerOpen && !e.IsOpen(e.Since()) {
			st = BreakerHalfOpen
		}
	}
	if s := b.c.store; s != nil {
		now := time.Now()
		st = max(st, fleetState(fleetView(s, k.String(), now, b.c.Cooldown), now))
	}
	return st
}

// refusedAt returns the error that req would meet at the time at: its
// breaker is open and will still be then. [New] gives it to its Retry.
func (b *Breakers) refusedAt(req *http.Request, at time.Time) error {
	k, ok := b.key(req)
	if !ok {
		return nil
	}
	e := b.slot.Peek(k)
	if e != nil && b.c.store != nil {
		if err := fleetRefusedAt(b.c.store, e.Name(), at, b.c.Cooldown); err != nil {
			return err
		}
	}
	if e == nil || !e.IsOpen(at.Sub(e.Epoch())) {
		return nil
	}
	return openError(e, e.Refusal(e.Since(), false))
}

// hedgeRefusedAt is refusedAt for a hedge, a copy beside one sent
// already: it is refused whenever req's breaker is not closed. A hedge is
// never needed as a probe (the first copy is one), and a half-open
// breaker whose probes are all taken would refuse it unsent.
func (b *Breakers) hedgeRefusedAt(req *http.Request, at time.Time) error {
	if err := b.refusedAt(req, at); err != nil {
		return err
	}
	k, ok := b.key(req)
	if !ok {
		return nil
	}
	if e := b.slot.Peek(k); e != nil && e.State() != BreakerClosed {
		return openError(e, e.Refusal(e.Since(), true))
	}
	if s := b.c.store; s != nil && fleetState(fleetView(s, k.String(), at, b.c.Cooldown), at) != BreakerClosed {
		// The fleet's view counts too: half-open there, the first copy
		// is the fleet's probe, and a hedge would be refused unsent.
		return &CircuitOpenError{Key: k.String(), State: BreakerHalfOpen}
	}
	return nil
}

// key returns the key of req's breaker; false when req bypasses them.
func (b *Breakers) key(req *http.Request) (hosts.Key, bool) {
	if b.c.key != nil {
		k := b.c.key(req)
		return hosts.Custom(k), k != ""
	}
	if req.URL == nil {
		return hosts.Key{}, false
	}
	return hosts.KeyOf(req.URL), true
}

// judge returns what an outcome says about the host: the attempt's
// verdict (see verdictOf), as b's settings read it.
func (b *Breakers) judge(req *http.Request, resp *http.Response, err error) policy.HostVerdict {
	v := verdictOf(req, resp, err)
	switch {
	case v.Host == policy.HostIgnored:
		return v.Host
	case b.c.isFailure != nil:
		if b.c.isFailure(resp, err) {
			return policy.HostFailing
		}
		return policy.HostHealthy
	case v.Overloaded && throttledAbove(req.Context()):
		return policy.HostHealthy // a Throttle above sheds an overloaded server's load, where a breaker would refuse it all
	}
	return v.Host
}

// callerEnded reports whether ctx ended for a reason of the caller's: it
// was canceled, or a deadline other than a [Deadline] layer's passed. A
// request that ran out of a Deadline's time counts against its host: the
// host did not answer within what the stack allows it.
func callerEnded(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	var de *DeadlineError
	return !errors.As(context.Cause(ctx), &de)
}

type breakerTransport struct {
	b    *Breakers
	next http.RoundTripper
}

// CloseIdleConnections forwards to the next RoundTripper.
func (t *breakerTransport) CloseIdleConnections() { closeIdle(t.next) }

// RoundTrip sends req through its host's breaker.
func (t *breakerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// Checked here even beneath a Retry, which checks its attempts'
	// bodies: a request may reach this layer by a way that passes no
	// Retry (a router above it), and a body checked already costs one
	// type assertion.
	req, err := reqbody.CheckCaller(req, false)
	if err != nil {
		return nil, err // the caller's error counts neither way
	}
	resp, err := t.roundTrip(req)
	if err != nil || resp == nil || resp.StatusCode >= 400 {
		// Retry and Hedge above ask the breakers before a wait, which
		// only a failure starts: a success need not tell them.
		joinBreakers(req.Context(), t.b)
	}
	return resp, err
}

func (t *breakerTransport) roundTrip(req *http.Request) (*http.Response, error) {
	var e *circuit.Circuit
	if t.b.c.key == nil && req.URL != nil {
		e = t.b.slot.GetURL(req.URL)
	} else if k, ok := t.b.key(req); ok {
		e = t.b.slot.Get(k)
	}
	if e == nil { // no key, or the registry is full of hosts that must be kept
		return t.next.RoundTrip(req)
	}
	if s := t.b.c.store; s != nil {
		joinBreakers(req.Context(), t.b) // the fleet may hold it half-open: a Hedge above asks first
		return t.fleetRoundTrip(req, e, s)
	}
	return t.circuitRoundTrip(req, e)
}

// circuitRoundTrip sends req through e: at once while it is closed, else
// through guarded.
func (t *breakerTransport) circuitRoundTrip(req *http.Request, e *circuit.Circuit) (*http.Response, error) {
	gen := e.Gen()
	if e.State() == BreakerClosed {
		// The fast path: no lock, one clock read when the outcome is
		// counted.
		seq := e.FailSeq()
		resp, err := t.next.RoundTrip(req)
		e.Record(gen, t.b.judge(req, resp, err), seq)
		return resp, err
	}
	return t.guarded(req, e)
}

// guarded sends req through a breaker that is not closed: refused while
// its open period lasts, then let through as a probe (see admit).
func (t *breakerTransport) guarded(req *http.Request, e *circuit.Circuit) (*http.Response, error) {
	joinBreakers(req.Context(), t.b) // a Hedge above asks before it sends a copy
	gen, probe, refusal := e.Admit()
	if refusal != nil {
		return nil, refuse(req, openError(e, refusal))
	}
	if !probe { // closed since the check: counted as on the fast path
		seq := e.FailSeq()
		resp, err := t.next.RoundTrip(req)
		e.Record(gen, t.b.judge(req, resp, err), seq)
		return resp, err
	}
	settled := false
	defer func() {
		if !settled { // the RoundTrip beneath panicked: the probe failed
			e.Settle(gen, policy.HostFailing)
		}
	}()
	resp, err := t.next.RoundTrip(req)
	settled = true
	e.Settle(gen, t.b.judge(req, resp, err))
	return resp, err
}

// refuse ends a request that a breaker refused: its body is closed, as a
// RoundTripper must.
func refuse(req *http.Request, err *CircuitOpenError) error {
	if req.Body != nil {
		req.Body.Close()
	}
	return err
}
