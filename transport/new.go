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
// parts of layers. Hedge and Throttle are off unless their settings are
// set.
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
	// means 10,000 hosts here.
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
	on := func(l Layer) bool { return o.Disable&l == 0 }
	h := o.Hooks
	reg := hosts.New(hosts.Options{MaxHosts: o.RateLimit.MaxHosts}) // every layer's per-host state

	var mws []Middleware
	var ep *endpoints // Endpoints: the outermost layer, one above the per-host layers, and the base's pools
	if o.Endpoints.on() {
		ep = newEndpoints(o.Endpoints, h)
		mws = append(mws, ep.operation())
	}
	if on(LayerIdempotencyKey) {
		mws = append(mws, IdempotencyKey(o.Idempotency))
	}
	timeout, idle := o.Timeout, o.IdleTimeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	if idle == 0 {
		idle = DefaultIdleTimeout
	}
	if !on(LayerTimeout) {
		timeout = 0
	}
	if !on(LayerIdleTimeout) {
		idle = 0
	}
	if timeout > 0 || idle > 0 {
		mws = append(mws, boundMiddleware(boundOperation, timeout, idle, boundTimeout, 0))
	}
	var budget retryBudget // the stack's one retry budget, shared by Retry and Hedge
	switch {
	case o.Retry.Budget != nil:
		budget = budgetOf(o.Retry.Budget)
	case on(LayerRetryBudget) && !o.DisableRetryBudget:
		budget = newSharedBudget(&policy.Budget{}, reg)
	}
	if on(LayerRetry) && on(LayerRateLimit) {
		// One limit on a server-asked wait, for the request that got the
		// ask and those its host holds after it (policy.ServerWait).
		lim := policy.ServerWaitLimit(o.Retry.MaxRetryAfter, o.RateLimit.MaxWait)
		o.Retry.MaxRetryAfter, o.RateLimit.MaxWait = lim, lim
	}
	if on(LayerRetry) {
		p := o.Retry
		if p.IdempotencyHeader == "" {
			p.IdempotencyHeader = o.Idempotency.HeaderName()
		}
		p.OnAttempt = both(p.OnAttempt, h.OnAttempt)
		p.OnRetry = both(p.OnRetry, h.OnRetry)
		p.OnGiveUp = both(p.OnGiveUp, h.OnGiveUp)
		mws = append(mws, retryMiddleware(p, budget))
	}
	if o.Hedge != nil {
		p := *o.Hedge
		b := budget // Retry's, unless the caller gave the hedges their own
		if p.Budget != nil && p.Budget != o.Retry.Budget {
			b = budgetOf(p.Budget)
		}
		if p.IdempotencyHeader == "" {
			p.IdempotencyHeader = o.Retry.IdempotencyHeader // Retry's, as documented
		}
		if p.IdempotencyHeader == "" {
			p.IdempotencyHeader = o.Idempotency.HeaderName()
		}
		if p.Classify == nil {
			p.Classify = o.Retry.Classify
		}
		p.OnHedge = both(p.OnHedge, h.OnHedge)
		p.OnHedgeWon = both(p.OnHedgeWon, h.OnHedgeWon)
		p.OnCopyCanceled = both(p.OnCopyCanceled, h.OnCopyCanceled)
		mws = append(mws, hedgeMiddleware(p, b))
	}
	if mw := ep.alternates(); mw != nil {
		mws = append(mws, mw)
	}
	if o.Throttle != nil {
		mws = append(mws, throttleMiddleware(o.Throttle, h.OnThrottle))
	}
	if on(LayerRateLimit) {
		r := o.RateLimit
		r.OnWait = both(r.OnWait, h.OnRateLimitWait)
		r.OnReject = both(r.OnReject, h.OnRateLimitReject)
		mws = append(mws, RateLimitTracker(ratelimit.NewTrackerOn(r, reg))) // its quotas beside the breakers
	}
	if o.Concurrency != nil {
		mws = append(mws, concurrencyMiddleware(o.Concurrency, reg, h))
	}
	if on(LayerBreaker) && o.GoBreaker != nil {
		mws = append(mws, GoBreaker(*o.GoBreaker)) // gobreaker's circuits in place of the default ones
	} else if on(LayerBreaker) {
		b := o.Breakers
		if b == nil {
			s := o.Breaker
			if f, g := s.OnStateChange, h.OnBreakerStateChange; g != nil {
				s.OnStateChange = g
				if f != nil {
					s.OnStateChange = func(k string, from, to BreakerState) { f(k, from, to); g(k, from, to) }
				}
			}
			b = newBreakers(s, reg)
		}
		ep.useBreakers(b) // the alternates ask them whether an origin's circuit is open
		mws = append(mws, b.Middleware())
	}
	attempt := o.AttemptTimeout
	if !on(LayerAttemptTimeout) {
		attempt = 0
	}
	if mw := firstEventMiddleware(o.FirstEventTimeout, idle, o.Stream, on(LayerRetry) || o.Hedge != nil, h.OnStreamCommit); mw != nil && on(LayerFirstEvent) {
		mws = append(mws, mw) // streams commit at their first event
	}
	// The attempt bound stays in place with no AttemptTimeout, so that
	// WithReadBody works on any stack; with neither, it passes requests
	// through.
	mws = append(mws, boundMiddleware(boundHeaders, attempt, idle, boundAttempt, o.ReadBody))
	if o.PropagateDeadline {
		mws = append(mws, PropagateDeadline(""))
	}
	if ep != nil && o.Endpoints.PerAddress {
		mws = append(mws, ep.perAddressMiddleware())
	}
	return mws
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
