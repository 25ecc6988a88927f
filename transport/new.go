package transport

import (
	"net/http"
	"time"

	"github.com/hashicorp/go-cleanhttp"

	"github.com/sturdyhttp/sturdy/idempotency"
	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// Defaults of [Options].
const (
	// DefaultTimeout is the whole-operation budget when Timeout is zero.
	DefaultTimeout = 2 * time.Minute
	// DefaultMaxIdleConnsPerHost is how many idle connections per host the
	// default base keeps.
	DefaultMaxIdleConnsPerHost = 100
	// DefaultMaxResponseHeaderBytes bounds the response headers the
	// default base accepts (net/http's own default is 10 MiB, and parsing
	// costs several times the header's size in memory).
	DefaultMaxResponseHeaderBytes = 1 << 20
)

// Layer names one layer of the stack that [New] builds, to switch it off
// with Options.Disable.
type Layer uint16

// The layers of [New], outermost first.
const (
	LayerIdempotencyKey Layer = 1 << iota // IdempotencyKey
	LayerTimeout                          // Deadline(Timeout)
	LayerRetry                            // Retry
	LayerRetryBudget                      // the per-host retry budget of Retry
	LayerRateLimit                        // RateLimitAware
	LayerBreaker                          // Breaker
	LayerAttemptTimeout                   // Deadline(AttemptTimeout)
)

// Options configures [New]. The zero value is the recommended stack with
// every default below.
type Options struct {
	// Base is the transport that sends each attempt. Nil means a new
	// cleanhttp.DefaultPooledTransport() (keep-alives on, no shared global
	// state) that keeps up to [DefaultMaxIdleConnsPerHost] idle
	// connections per host instead of cleanhttp's GOMAXPROCS+1, so that
	// many goroutines calling one API reuse connections rather than dial
	// again and again, and accepts at most
	// [DefaultMaxResponseHeaderBytes] of response headers.
	Base http.RoundTripper

	// Timeout bounds a whole operation: every attempt, every wait between
	// them and the reading of the final response's body. Zero means
	// [DefaultTimeout] (2 minutes); negative means no overall limit beyond
	// the caller's context. Raise it for long streamed responses.
	Timeout time.Duration

	// AttemptTimeout bounds one attempt, its body included; an attempt
	// that runs out is retried while Timeout allows. Zero or negative
	// means no per-attempt limit beyond Timeout.
	AttemptTimeout time.Duration

	// Retry is the retry policy; its zero value means 4 attempts with
	// full-jitter backoff (see [policy.Retry]). Unless LayerRetryBudget is
	// disabled or Retry.Budget is set, New gives the stack its own
	// [policy.Budget] with default settings, shared by all of its hosts.
	// An empty Retry.IdempotencyHeader follows Idempotency.Header.
	Retry policy.Retry

	// Breaker configures the per-host circuit breakers (see
	// [BreakerSettings] for the defaults).
	Breaker BreakerSettings

	// RateLimit configures how server quotas are honoured (see
	// [ratelimit.Options] for the defaults).
	RateLimit ratelimit.Options

	// Idempotency configures the idempotency keys given to POST and PATCH
	// (see [idempotency.Options]).
	Idempotency idempotency.Options

	// Disable switches layers off: Disable: LayerBreaker|LayerRateLimit.
	// Zero means every layer is on.
	Disable Layer

	// Hooks observe what the stack does. They are added to any hooks set
	// in Retry, Breaker and RateLimit, which still run.
	Hooks Hooks
}

// Hooks are functions called as the stack works, for logs, metrics and
// traces. Each may be nil, which costs nothing. They run synchronously on
// the goroutine of the request (the breaker's under its lock), so keep
// them short. [SlogHooks] makes a set that logs with log/slog.
type Hooks struct {
	// OnAttempt is called after each attempt with its outcome and
	// duration.
	OnAttempt func(policy.AttemptEvent)
	// OnRetry is called before each wait for a retry, with the wait and
	// the reason.
	OnRetry func(policy.RetryEvent)
	// OnGiveUp is called when an operation ends on a failure, with why no
	// further attempt is made.
	OnGiveUp func(policy.GiveUpEvent)
	// OnBreakerStateChange is called when a host's breaker changes state.
	OnBreakerStateChange func(key string, from, to BreakerState)
	// OnRateLimitWait is called before a request waits for a quota.
	OnRateLimitWait func(ratelimit.WaitEvent)
	// OnRateLimitReject is called when a request fails fast because its
	// quota wait cannot finish in time.
	OnRateLimitReject func(ratelimit.RejectEvent)
}

// New returns the recommended stack, outermost first:
//
//	IdempotencyKey, Deadline(Timeout), Retry, RateLimitAware, Breaker, Deadline(AttemptTimeout), base
//
// transport/doc.go tells why each layer sits where it does. Adopt it with
// one line:
//
//	client := &http.Client{Transport: transport.New(transport.Options{})}
//
// Each call builds its own breakers, quotas and budget: share the returned
// RoundTripper (it is safe for concurrent use) rather than calling New
// per request.
func New(o Options) http.RoundTripper {
	base := o.Base
	if base == nil {
		t := cleanhttp.DefaultPooledTransport()
		t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
		t.MaxResponseHeaderBytes = DefaultMaxResponseHeaderBytes
		base = t
	}
	on := func(l Layer) bool { return o.Disable&l == 0 }
	h := o.Hooks

	var mws []Middleware
	if on(LayerIdempotencyKey) {
		mws = append(mws, IdempotencyKey(o.Idempotency))
	}
	if on(LayerTimeout) {
		timeout := o.Timeout
		if timeout == 0 {
			timeout = DefaultTimeout
		}
		mws = append(mws, Deadline(timeout))
	}
	if on(LayerRetry) {
		p := o.Retry
		if p.IdempotencyHeader == "" {
			p.IdempotencyHeader = o.Idempotency.HeaderName()
		}
		if p.Budget == nil && on(LayerRetryBudget) {
			p.Budget = &policy.Budget{}
		}
		p.OnAttempt = both(p.OnAttempt, h.OnAttempt)
		p.OnRetry = both(p.OnRetry, h.OnRetry)
		p.OnGiveUp = both(p.OnGiveUp, h.OnGiveUp)
		mws = append(mws, Retry(p))
	}
	if on(LayerRateLimit) {
		r := o.RateLimit
		r.OnWait = both(r.OnWait, h.OnRateLimitWait)
		r.OnReject = both(r.OnReject, h.OnRateLimitReject)
		mws = append(mws, RateLimitAware(r))
	}
	if on(LayerBreaker) {
		b := o.Breaker
		if f, g := b.OnStateChange, h.OnBreakerStateChange; g != nil {
			b.OnStateChange = g
			if f != nil {
				b.OnStateChange = func(k string, from, to BreakerState) { f(k, from, to); g(k, from, to) }
			}
		}
		mws = append(mws, Breaker(b))
	}
	if on(LayerAttemptTimeout) && o.AttemptTimeout > 0 {
		mws = append(mws, Deadline(o.AttemptTimeout))
	}
	return Chain(base, mws...)
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
