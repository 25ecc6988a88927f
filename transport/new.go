package transport

import (
	"net/http"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// Defaults of [Options]. See docs/design.md in the repository for why they
// are what they are.
const (
	// DefaultTimeout is the Timeout used when Options.Timeout is zero.
	DefaultTimeout = 10 * time.Minute
	// DefaultAttemptTimeout is zero: no attempt is cut before Timeout.
	DefaultAttemptTimeout = 0
	// DefaultIdleTimeout is the IdleTimeout used when Options.IdleTimeout
	// is zero.
	DefaultIdleTimeout = 10 * time.Minute
	// DefaultMaxIdleConnsPerHost is how many idle connections per host the
	// default base keeps.
	DefaultMaxIdleConnsPerHost = 100
	// DefaultMaxResponseHeaderBytes is the most response header bytes the
	// default base accepts, a tenth of net/http's own default.
	DefaultMaxResponseHeaderBytes = 1 << 20
)

// Layer names a part of the stack that [New] builds. Set it in
// Options.Disable to switch that part off: the one way to do so. The
// layers, outermost first, are [LayerIdempotencyKey], [LayerTimeout],
// [LayerRetry], [LayerRateLimit], [LayerBreaker], [LayerFirstEvent] and
// [LayerAttemptTimeout]. [LayerIdleTimeout] and [LayerRetryBudget] are
// parts of layers. [LayerHedge] and [LayerThrottle] switch off a Hedge or
// Throttle whose settings are set (they are off while their settings are
// nil). A negative duration, a negative Hedge.MaxHedges and
// DisableRetryBudget still switch their part off, as before; Disable is
// the spelling to use.
type Layer uint16

// Each Layer constant is declared on its own so that go doc lists them all.

// LayerIdempotencyKey is [IdempotencyKey].
const LayerIdempotencyKey Layer = 1 << 0

// LayerTimeout is [Deadline](Options.Timeout).
const LayerTimeout Layer = 1 << 1

// LayerRetry is [Retry].
const LayerRetry Layer = 1 << 2

// LayerRateLimit is [RateLimitAware].
const LayerRateLimit Layer = 1 << 4

// LayerBreaker is [Breaker].
const LayerBreaker Layer = 1 << 5

// LayerAttemptTimeout is [Deadline](Options.AttemptTimeout).
const LayerAttemptTimeout Layer = 1 << 6

// LayerIdleTimeout is the IdleTimeout watch of the Timeout layer.
const LayerIdleTimeout Layer = 1 << 7

// LayerRetryBudget is the retry budget that Retry and Hedge share. Without
// it, each operation may use all its attempts however many of its host's
// requests fail. It does not switch off a Retry.Budget set by the caller.
const LayerRetryBudget Layer = 1 << 8

// LayerFirstEvent is [FirstEvent]. Without it, streams are handed back at
// their headers, as with a negative Options.FirstEventTimeout.
const LayerFirstEvent Layer = 1 << 9

// LayerHedge is [Hedge], when Options.Hedge is set.
const LayerHedge Layer = 1 << 10

// LayerThrottle is [Throttle], when Options.Throttle is set.
const LayerThrottle Layer = 1 << 11

// Options configures [New]. The zero value is the recommended stack. Each
// field says its default.
type Options struct {
	// Base is the transport that sends each attempt. Nil means a new
	// cleanhttp.DefaultPooledTransport() that keeps up to
	// [DefaultMaxIdleConnsPerHost] idle connections per host. It accepts at
	// most [DefaultMaxResponseHeaderBytes] of response headers.
	Base http.RoundTripper

	// Timeout bounds the operation until its final response's headers,
	// attempts and waits included. It also bounds the reading of a body
	// that is not a stream. A stream (server-sent events, NDJSON and the
	// like) is bounded by IdleTimeout instead. Zero means [DefaultTimeout],
	// 10 minutes. Negative means no limit beyond the caller's context.
	// The context of the requests beneath is canceled when it runs out
	// (context.Cause is a [*DeadlineError]); it is not that context's
	// Deadline, since a stream outlives it: the layers read it from the
	// operation.
	Timeout time.Duration

	// AttemptTimeout bounds one attempt until its response headers. It does
	// not bound the body. An attempt that runs out is retried when the
	// request is safe to send again and Timeout leaves time. Zero or
	// negative means no per-attempt limit ([DefaultAttemptTimeout]).
	AttemptTimeout time.Duration

	// IdleTimeout is the longest a response body may go without delivering
	// a byte. A Read blocked this long fails with a [*DeadlineError], and
	// the connection is closed. A stream (SSE, NDJSON, gRPC and the like)
	// is bounded by nothing else: it is read while it makes progress. The
	// failed bodies that Retry and Hedge drain are cut the same way. Zero
	// means [DefaultIdleTimeout], 10 minutes. Negative means none.
	IdleTimeout time.Duration

	// ReadBody, when positive, makes each attempt read a body that is not a
	// stream, up to ReadBody bytes, before it hands the response back. A
	// body cut or stalled half way is then a failed attempt, a
	// [*ResponseBodyError], that the retry rules try again. The caller gets
	// a complete body or an error. A longer body is handed back as it
	// streams after its first ReadBody bytes. Zero means off.
	// [WithReadBody] sets it per request.
	ReadBody int64

	// Retry is the retry policy. Its zero value means 4 attempts with
	// full-jitter backoff (see [policy.Retry]). A nil Retry.Budget means a
	// retry budget per host with [policy.Budget]'s defaults, unless Disable
	// has [LayerRetryBudget]. An empty Retry.IdempotencyHeader follows
	// Idempotency.Header.
	Retry policy.Retry

	// DisableRetryBudget is Disable: LayerRetryBudget.
	//
	// Deprecated: set Disable: LayerRetryBudget, the one way to switch a
	// part of the stack off.
	DisableRetryBudget bool

	// Breaker configures the per-host circuit breakers. Its zero value has
	// the defaults of [BreakerSettings].
	Breaker BreakerSettings

	// Breakers, when set, are the circuit breakers the stack uses instead
	// of new ones made from Breaker. The caller can then read their state
	// with [Breakers.State]. Hooks.OnBreakerStateChange is then not called:
	// set Breaker.OnStateChange before [NewBreakers]. Nil means new
	// breakers.
	Breakers *Breakers

	// GoBreaker, when set, puts circuits of github.com/sony/gobreaker/v2,
	// made from its settings, in place of the default circuits (see
	// [GoBreaker]). Breaker and Breakers are then unused. Nil means the
	// default circuits.
	GoBreaker *GoBreakerSettings

	// RateLimit configures how server quotas are honoured; see
	// [ratelimit.Options] for its defaults. Its MaxHosts also bounds the
	// one table that holds every layer's per-host state. Zero MaxHosts
	// means 10,000 hosts here. Its MaxServerWait is made the same as
	// Retry.MaxRetryAfter (see policy.ServerWaitLimit); its MaxWait, the
	// bound of the client-side rate, is kept as set.
	RateLimit ratelimit.Options

	// Idempotency configures the idempotency keys; see
	// [idempotency.Options] for its defaults. List in Idempotency.Hosts the
	// hosts whose POSTs and PATCHes are safe to send again. Nil Hosts means
	// only requests the caller keyed itself carry a key.
	Idempotency idempotency.Options

	// Hedge, when set, adds a [Hedge] layer beneath Retry. A slow request
	// that is safe to send twice is sent again, and the first acceptable
	// response wins. Hedges draw on Retry's budget unless Hedge.Budget is
	// set. An empty IdempotencyHeader and a nil Classify follow Retry's.
	// Nil means no hedging.
	Hedge *policy.Hedge

	// Throttle, when set, adds a [Throttle] layer beneath Retry and Hedge.
	// When a host fails more than half of what it is sent, requests to it
	// are shed locally, unsent, with a [*ThrottleError]. The breaker then
	// leaves an overloaded server's 503 and 529 to it. Nil means none.
	Throttle *policy.Throttle

	// Disable switches parts of the stack off, as in Disable:
	// LayerBreaker|LayerRateLimit. Zero means every layer is on.
	Disable Layer

	// PropagateDeadline, when true, sends each attempt's time left to the
	// server in the Request-Timeout header, in milliseconds (see
	// [PropagateDeadline]). A server behind [idempotency.DeadlineHandler]
	// then refuses a request that arrives after its caller gave up. False,
	// the default, sends nothing.
	PropagateDeadline bool

	// FirstEventTimeout bounds a stream (server-sent events, NDJSON) from
	// its headers to its first content event. Past it, the attempt fails
	// and may be tried again. Streams are handed back at that event (see
	// [FirstEvent]). Timeout does not bound this wait, so a model may think
	// past it. Zero means none beyond IdleTimeout. Negative means streams
	// are handed back at their headers.
	FirstEventTimeout time.Duration

	// Stream says which events open a stream without committing it. Its
	// zero value uses [policy.DefaultStreamPreambles].
	Stream policy.Stream

	// Concurrency, when set, adds a [Concurrency] layer beneath
	// RateLimitAware and above Breaker. It bounds the attempts in flight
	// to each host and learns the bound from the host's latency and
	// losses. A request that finds the bound full waits while its
	// operation's time allows, else fails unsent with
	// [ErrConcurrencyLimit]. Its zero value has the defaults of
	// [policy.Concurrency]. Nil means no bound.
	Concurrency *policy.Concurrency

	// Endpoints says where requests to a host may go: a connection pool
	// per address of the host, with failing addresses ejected, and
	// alternate origins while one fails. Its zero value changes nothing
	// and costs nothing.
	Endpoints Endpoints

	// Hooks observe what the stack does. They are added to any hooks set
	// in Retry, Breaker and RateLimit, which still run.
	Hooks Hooks
}

// Hooks are functions called as the stack works, for logs, metrics and
// traces. Each may be nil, which costs nothing. They run synchronously on
// the goroutine of the request, never with a lock held. So a hook may log,
// export metrics or even send a request through the same stack. [SlogHooks]
// makes a set that logs with log/slog.
type Hooks struct {
	// OnAttempt is called after each attempt, with its outcome and
	// duration.
	OnAttempt func(policy.AttemptEvent)
	// OnRetry is called before each wait for a retry, with the wait and the
	// reason.
	OnRetry func(policy.RetryEvent)
	// OnGiveUp is called when an operation ends on a failure, with the
	// reason no further attempt is made.
	OnGiveUp func(policy.GiveUpEvent)
	// OnBreakerStateChange is called when a host's breaker changes state.
	OnBreakerStateChange func(key string, from, to BreakerState)
	// OnRateLimitWait is called before a request waits for a quota.
	OnRateLimitWait func(ratelimit.WaitEvent)
	// OnRateLimitReject is called when a request fails fast because its
	// quota wait cannot finish in time.
	OnRateLimitReject func(ratelimit.RejectEvent)
	// OnHedge is called when a hedge (a copy after the first) is sent.
	OnHedge func(policy.HedgeEvent)
	// OnHedgeWon is called when a hedge's response wins.
	OnHedgeWon func(policy.HedgeEvent)
	// OnCopyCanceled is called for each copy of a hedged request that is
	// canceled because another copy's response won.
	OnCopyCanceled func(policy.HedgeEvent)
	// OnThrottle is called when a [Throttle] rejects a request locally.
	OnThrottle func(ThrottleEvent)
	// OnStreamCommit is called when a stream's read ahead ends. That is at
	// its first content event, or at an error event, an end or a stall
	// before it (see Options.FirstEventTimeout).
	OnStreamCommit func(StreamEvent)
	// OnConcurrencyChange is called when a host's concurrency limit
	// changes (see Options.Concurrency).
	OnConcurrencyChange func(ConcurrencyEvent)
	// OnConcurrencyRefuse is called when a request is refused unsent
	// because its host's concurrency limit was full.
	OnConcurrencyRefuse func(ConcurrencyEvent)
	// OnEject is called when Endpoints.PerAddress ejects an address.
	OnEject func(EjectionEvent)
	// OnFailover is called for each attempt sent to an alternate origin
	// (see Endpoints.Alternates).
	OnFailover func(FailoverEvent)
}

// New returns the recommended stack, outermost first:
//
//	IdempotencyKey, Deadline(Timeout), Retry, RateLimitAware, Breaker, FirstEvent, Deadline(AttemptTimeout), base
//
// Options.Hedge adds [Hedge], then Options.Throttle adds [Throttle],
// between Retry and RateLimitAware. Options.Concurrency adds
// [Concurrency] between RateLimitAware and Breaker: each attempt takes a
// slot after its quota wait, and a stream holds it until its first
// event. Options.Endpoints adds a layer
// outermost, its alternates above Throttle, and its per-address pools
// beneath everything. Options.PropagateDeadline adds
// [PropagateDeadline] just above base. Options.Disable switches layers off.
// New is Chain(base, Layers(o)...).
//
// Unlike a [Deadline] in a Chain, the two deadline layers let a stream run
// for as long as it makes progress. See Options.Timeout, AttemptTimeout and
// IdleTimeout. The package documentation tells why each layer sits where it
// does. Adopt it with one line:
//
//	client := &http.Client{Transport: transport.New(transport.Options{})}
//
// Each call builds its own breakers, quotas and budget. The returned
// RoundTripper is safe for concurrent use: share it rather than call New
// per request.
func New(o Options) http.RoundTripper {
	base := o.Base
	if base == nil {
		t := cleanhttp.DefaultPooledTransport()
		t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
		t.MaxResponseHeaderBytes = DefaultMaxResponseHeaderBytes
		base = t
	}
	return Chain(base, Layers(o)...)
}

// Layers returns the layers of [New], outermost first, for [Chain]. A stack
// built from them behaves as New does, even with RoundTrippers of the
// caller's between two of them. The layers share one table of per-host
// state (breakers, quotas, budgets), made here. They learn of each other
// through the request's context, never by reference.
func Layers(o Options) []Middleware {
	p := newParts(o)
	var mws []Middleware
	for _, mw := range [...]Middleware{
		p.endpoints(), p.idempotency(), p.timeout(), p.retry(), p.hedge(),
		p.ep.alternates(), p.throttle(), p.rateLimit(), p.concurrency(), p.breaker(),
		p.firstEvent(), p.attempt(), p.propagate(), p.perAddress(),
	} {
		if mw != nil {
			mws = append(mws, mw)
		}
	}
	return mws
}

// parts are what the layers of [New] share, made once by [Layers] and
// handed to each layer as it is built: the per-host table (breakers,
// quotas, budgets), the retry budget that Retry and Hedge draw on, and
// the bounds' limits. A layer used alone makes its own.
type parts struct {
	o      Options
	reg    *hosts.Registry
	ep     *endpoints    // Endpoints: the outermost layer, one above the per-host layers, and the base's pools; nil: none
	budget retryBudget   // nil: none
	limit  time.Duration // Timeout, its default applied; 0: off
	idle   time.Duration // IdleTimeout, its default applied; 0: off
}

func newParts(o Options) *parts {
	if on := o.Disable & (LayerRetry | LayerRateLimit); on == 0 {
		// One limit on a server-asked wait, for the request that got the
		// ask and those its host holds after it (policy.ServerWait).
		// MaxWait keeps bounding the client-side limiter on its own: a
		// cap on what servers may ask does not fail the caller's rate.
		lim := policy.ServerWaitLimit(o.Retry.MaxRetryAfter, o.RateLimit.MaxServerWait)
		lim = policy.ServerWaitLimit(lim, o.RateLimit.MaxWait)
		o.Retry.MaxRetryAfter, o.RateLimit.MaxServerWait = lim, lim
	}
	p := &parts{o: o, reg: hosts.New(hosts.Options{MaxHosts: o.RateLimit.MaxHosts}), limit: o.Timeout, idle: o.IdleTimeout}
	if p.limit == 0 {
		p.limit = DefaultTimeout
	}
	if p.idle == 0 {
		p.idle = DefaultIdleTimeout
	}
	if !p.on(LayerTimeout) {
		p.limit = 0
	}
	if !p.on(LayerIdleTimeout) {
		p.idle = 0
	}
	if o.Endpoints.on() {
		p.ep = newEndpoints(o.Endpoints, o.Hooks)
	}
	switch {
	case o.Retry.Budget != nil:
		p.budget = budgetOf(o.Retry.Budget)
	case p.on(LayerRetryBudget) && !o.DisableRetryBudget:
		p.budget = newSharedBudget(&policy.Budget{}, p.reg)
	}
	return p
}

// on reports whether the layer l is on.
func (p *parts) on(l Layer) bool { return p.o.Disable&l == 0 }

func (p *parts) endpoints() Middleware {
	if p.ep == nil {
		return nil
	}
	return p.ep.operation()
}

func (p *parts) perAddress() Middleware {
	if p.ep == nil || !p.o.Endpoints.PerAddress {
		return nil
	}
	return p.ep.perAddressMiddleware()
}

func (p *parts) idempotency() Middleware {
	if !p.on(LayerIdempotencyKey) {
		return nil
	}
	return IdempotencyKey(p.o.Idempotency)
}

func (p *parts) timeout() Middleware {
	if p.limit <= 0 && p.idle <= 0 {
		return nil
	}
	return boundMiddleware(boundOperation, p.limit, p.idle, boundTimeout, 0)
}

func (p *parts) retry() Middleware {
	if !p.on(LayerRetry) {
		return nil
	}
	o, h := p.o, p.o.Hooks
	r := o.Retry
	if r.IdempotencyHeader == "" {
		r.IdempotencyHeader = o.Idempotency.HeaderName()
	}
	r.OnAttempt = both(r.OnAttempt, h.OnAttempt)
	r.OnRetry = both(r.OnRetry, h.OnRetry)
	r.OnGiveUp = both(r.OnGiveUp, h.OnGiveUp)
	return retryMiddleware(r, p.budget)
}

func (p *parts) hedge() Middleware {
	o, h := p.o, p.o.Hooks
	if o.Hedge == nil || !p.on(LayerHedge) {
		return nil
	}
	hp := *o.Hedge
	b := p.budget // Retry's, unless the caller gave the hedges their own
	if hp.Budget != nil && hp.Budget != o.Retry.Budget {
		b = budgetOf(hp.Budget)
	}
	if hp.IdempotencyHeader == "" {
		hp.IdempotencyHeader = o.Retry.IdempotencyHeader // Retry's, as documented
	}
	if hp.IdempotencyHeader == "" {
		hp.IdempotencyHeader = o.Idempotency.HeaderName()
	}
	if hp.Classify == nil {
		hp.Classify = o.Retry.Classify
	}
	hp.OnHedge = both(hp.OnHedge, h.OnHedge)
	hp.OnHedgeWon = both(hp.OnHedgeWon, h.OnHedgeWon)
	hp.OnCopyCanceled = both(hp.OnCopyCanceled, h.OnCopyCanceled)
	return hedgeMiddleware(hp, b)
}

func (p *parts) throttle() Middleware {
	if p.o.Throttle == nil || !p.on(LayerThrottle) {
		return nil
	}
	return throttleMiddleware(p.o.Throttle, p.o.Hooks.OnThrottle)
}

func (p *parts) rateLimit() Middleware {
	if !p.on(LayerRateLimit) {
		return nil
	}
	r := p.o.RateLimit
	r.OnWait = both(r.OnWait, p.o.Hooks.OnRateLimitWait)
	r.OnReject = both(r.OnReject, p.o.Hooks.OnRateLimitReject)
	return RateLimitTracker(ratelimit.NewTrackerOn(r, p.reg)) // its quotas beside the breakers
}

func (p *parts) concurrency() Middleware {
	if p.o.Concurrency == nil {
		return nil
	}
	return concurrencyMiddleware(p.o.Concurrency, p.reg, p.o.Hooks)
}

func (p *parts) breaker() Middleware {
	if !p.on(LayerBreaker) {
		return nil
	}
	if p.o.GoBreaker != nil {
		return GoBreaker(*p.o.GoBreaker) // gobreaker's circuits in place of the default ones
	}
	b := p.o.Breakers
	if b == nil {
		s := p.o.Breaker
		if f, g := s.OnStateChange, p.o.Hooks.OnBreakerStateChange; g != nil {
			s.OnStateChange = g
			if f != nil {
				s.OnStateChange = func(k string, from, to BreakerState) { f(k, from, to); g(k, from, to) }
			}
		}
		b = newBreakers(s, p.reg)
	}
	p.ep.useBreakers(b) // the alternates ask them whether an origin's circuit is open
	return b.Middleware()
}

// firstEvent has streams commit at their first event.
func (p *parts) firstEvent() Middleware {
	o := p.o
	if !p.on(LayerFirstEvent) {
		return nil
	}
	return firstEventMiddleware(o.FirstEventTimeout, p.idle, o.Stream, p.on(LayerRetry) || o.Hedge != nil && p.on(LayerHedge), o.Hooks.OnStreamCommit)
}

// attempt is the attempt bound. It stays in place with no
// AttemptTimeout, so that WithReadBody works on any stack; with neither,
// it passes requests through.
func (p *parts) attempt() Middleware {
	d := p.o.AttemptTimeout
	if !p.on(LayerAttemptTimeout) {
		d = 0
	}
	return boundMiddleware(boundHeaders, d, p.idle, boundAttempt, p.o.ReadBody)
}

func (p *parts) propagate() Middleware {
	if !p.o.PropagateDeadline {
		return nil
	}
	return PropagateDeadline("")
}

// boundMiddleware returns a middleware that bounds what is beneath it
// (see [bound]).
func boundMiddleware(mode boundMode, d, idle time.Duration, name string, readMax int64) Middleware {
	return func(next http.RoundTripper) http.RoundTripper {
		return newBound(orDefault(next), mode, d, idle, name, readMax)
	}
}

// both returns a function that calls f then g, skipping a nil one.
func both[E any](f, g func(E)) func(E) {
	switch {
	case f == nil:
		return g
	case g == nil:
		return f
	}
	return func(e E) { f(e); g(e) }
}
