package transport

import (
	"context"
	"errors"
	"github.com/sturdyhttp/sturdy/internal/reqbody"
	"net/http"
	"strconv"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/internal/slots"
	"github.com/sturdyhttp/sturdy/internal/stream"
	"github.com/sturdyhttp/sturdy/policy"
)

// ErrConcurrencyLimit is matched by errors.Is for every request that a
// [Concurrency] layer refused unsent, because its host's limit of
// requests in flight was full and the request's time did not allow it to
// wait for a slot.
var ErrConcurrencyLimit = errors.New("transport: concurrency limit")

// ConcurrencyLimitError is the error of a request that a [Concurrency]
// layer refused unsent. It matches [ErrConcurrencyLimit]; when the
// request waited for a slot until its operation's time ran out, it
// matches [context.DeadlineExceeded] too. [Retry] does not retry it, a
// [Breaker] never sees it, and it is no attempt.
type ConcurrencyLimitError struct {
	Host     string        // the host key, as in "https://api.example.com"
	Limit    int           // the host's limit when the request was refused
	InFlight int           // the host's requests in flight then
	Waited   time.Duration // how long the request waited for a slot
	// Err is [context.DeadlineExceeded], or the operation's deadline
	// error, when the request's time ran out while it waited; nil when
	// it was refused at once.
	Err error
}

// Error says what refused the request and the limit then.
func (e *ConcurrencyLimitError) Error() string {
	s := "transport: not sent: concurrency limit of " + e.Host + " full (limit " + strconv.Itoa(e.Limit) +
		", " + strconv.Itoa(e.InFlight) + " in flight"
	if e.Waited > 0 {
		s += ", waited " + e.Waited.String()
	}
	s += ")"
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is reports whether target is [ErrConcurrencyLimit].
func (e *ConcurrencyLimitError) Is(target error) bool { return target == ErrConcurrencyLimit }

// Unwrap returns Err.
func (e *ConcurrencyLimitError) Unwrap() error { return e.Err }

// Retriable returns false: the limit sheds load, and trying again at
// once would defeat it.
func (e *ConcurrencyLimitError) Retriable() bool { return false }

// RefusedBy returns "concurrency limit": the request was refused unsent
// (see [policy.Refusal]).
func (e *ConcurrencyLimitError) RefusedBy() string { return string(policy.ReasonConcurrencyLimit) }

// ConcurrencyEvent describes a change of a host's concurrency limit
// (Request is nil) or a request refused by it.
type ConcurrencyEvent struct {
	Request  *http.Request // the refused request; nil for a change of limit
	Host     string        // the host key
	From     int           // the limit before a change; for a refusal, the limit
	Limit    int           // the limit after a change; for a refusal, the limit
	InFlight int           // the host's requests in flight
	Waited   time.Duration // how long a refused request waited for a slot
	Err      error         // a refusal's error, a [*ConcurrencyLimitError]
}

// Concurrency returns a middleware that bounds the requests in flight to
// each host, and learns the bound from what the host does, with c's rule
// (see [policy.Concurrency]; nil means its defaults). A request that
// finds its host's limit full waits for a slot while its operation's
// time allows (see [policy.ConcurrencyLimit.Wait]); otherwise it fails at
// once, unsent, with a [*ConcurrencyLimitError].
//
// A request holds its slot until the layer beneath returns: until its
// response headers, or, with a [FirstEvent] beneath, a stream's first
// content event; never while its body is read. Canceled requests, hedges
// that lost and requests refused by a layer beneath teach the limit
// nothing. Place it inside [Retry] and [Hedge] (each attempt and copy
// takes a slot), beneath [RateLimitAware] (a request waiting for a quota
// holds no slot) and above [Breaker] (a request refused for the limit is
// never judged by it) and [FirstEvent].
//
// Each call makes its own limits, one per host.
func Concurrency(c *policy.Concurrency) Middleware {
	return concurrencyMiddleware(c, nil, Hooks{})
}

func concurrencyMiddleware(c *policy.Concurrency, reg *hosts.Registry, h Hooks) Middleware {
	if c == nil {
		c = &policy.Concurrency{}
	}
	newState := func(h *hosts.Host) *slots.Host {
		return &slots.Host{Lim: c.NewLimit(time.Now()), Key: h.Name()}
	}
	if reg == nil {
		reg = hosts.New(hosts.Options{})
	}
	slot := hosts.NewSlotOf(reg, newState, (*slots.Host).Live)
	if slot == nil { // the shared table has no room for another kind of state
		slot = hosts.NewSlotOf(hosts.New(hosts.Options{}), newState, (*slots.Host).Live)
	}
	cfg := &concConfig{slot: slot, onChange: h.OnConcurrencyChange, onRefuse: h.OnConcurrencyRefuse}
	return func(next http.RoundTripper) http.RoundTripper {
		return &concurrencyTransport{c: cfg, next: orDefault(next)}
	}
}

type concConfig struct {
	slot     *hosts.Slot[slots.Host]
	onChange func(ConcurrencyEvent)
	onRefuse func(ConcurrencyEvent)
}

type concurrencyTransport struct {
	c    *concConfig
	next http.RoundTripper
}

// CloseIdleConnections forwards to the next RoundTripper.
func (t *concurrencyTransport) CloseIdleConnections() { closeIdle(t.next) }

// RoundTrip sends req when its host has a slot free, or one frees while
// its time allows; else it refuses it unsent.
func (t *concurrencyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		return t.next.RoundTrip(req)
	}
	h := t.c.slot.GetURL(req.URL)
	if h == nil { // the registry is full of hosts that must be kept: no limit
		return t.next.RoundTrip(req)
	}
	ok, timed := h.Lim.Acquire() // a busy host times one attempt in a few: reading the clock costs more than the rest
	if !ok {
		if err := t.wait(req, h); err != nil {
			reqbody.CloseBody(req)
			return nil, err
		}
		timed = true
	}
	var start time.Time
	if timed {
		start = time.Now()
	}
	released := false
	defer func() {
		if !released { // the RoundTripper beneath panicked: give the slot back
			h.Release(time.Time{}, 0, policy.ConcurrencyIgnored)
		}
	}()
	resp, err := t.next.RoundTrip(req)
	released = true
	o := concOutcome(req, resp, err)
	var end time.Time
	var rtt time.Duration
	switch {
	case timed:
		end = time.Now()
		rtt = end.Sub(start)
		if o == policy.ConcurrencyServed && stream.Is(resp) { // by its media type: a wrapper may hide FirstEvent's body
			o = policy.ConcurrencyUntimed // a stream's wait is the model's, not the host's load
		}
	case o == policy.ConcurrencyLoss:
		end = time.Now() // a loss is always counted
	case o == policy.ConcurrencyServed:
		o = policy.ConcurrencyUntimed
	}
	if changed, from, to := h.Release(end, rtt, o); changed && t.c.onChange != nil {
		t.c.onChange(ConcurrencyEvent{Host: h.Key, From: from, Limit: to, InFlight: h.Lim.InFlight()})
	}
	return resp, err
}

// concOutcome returns what an attempt of req that ended with resp and
// err teaches the limit.
func concOutcome(req *http.Request, resp *http.Response, err error) policy.ConcurrencyOutcome {
	if err == nil && resp != nil {
		if !policy.StatusAccepted(resp.StatusCode) { // a 5xx or a 429
			return policy.ConcurrencyLoss
		}
		return policy.ConcurrencyServed // a stream is told by RoundTrip, when it is timed
	}
	// The attempt's one verdict: a cancel (the caller's, with a cause or
	// not, or a hedge's that won) is no loss; a timeout, the caller's or
	// a bound's, is one (Lost).
	return policy.ConcurrencyOutcomeOf(verdictOf(req, resp, err), 0, false)
}

// wait waits for a slot of h for req, as long as the limit's rule and
// req's time allow (see [slots.Host.Await]). It returns nil with a slot
// taken, or the error to end req with.
func (t *concurrencyTransport) wait(req *http.Request, h *slots.Host) error {
	h.Lim.Full()
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	dl, hasDeadline := deadlineOf(ctx) // New's Timeout included
	got, waited, done := h.Await(ctx, dl, hasDeadline)
	switch {
	case got:
		return nil
	case done == nil && waited > 0 && hasDeadline && time.Until(dl) <= h.Lim.Reference():
		return t.refuse(req, h, waited, context.DeadlineExceeded) // its time ran out while it waited
	case done == nil:
		return t.refuse(req, h, waited, nil)
	case errors.Is(done, context.DeadlineExceeded):
		return t.refuse(req, h, waited, done)
	}
	return done // canceled by the caller: not a refusal
}

// refuse returns the error of req refused by h's limit, and reports it.
func (t *concurrencyTransport) refuse(req *http.Request, h *slots.Host, waited time.Duration, cause error) error {
	limit := h.Lim.Limit()
	err := &ConcurrencyLimitError{Host: h.Key, Limit: limit, InFlight: h.Lim.InFlight(), Waited: waited, Err: cause}
	if t.c.onRefuse != nil {
		t.c.onRefuse(ConcurrencyEvent{Request: req, Host: h.Key, From: limit, Limit: limit, InFlight: err.InFlight, Waited: waited, Err: err})
	}
	return err
}

// concurrencyRefused reports whether err is a [Concurrency] layer's
// refusal, which is no attempt.
func concurrencyRefused(err error) bool {
	return err != nil && errors.Is(err, ErrConcurrencyLimit)
}
