package transport

import (
	"github.com/sturdyhttp/sturdy/internal/circuit"
	"net/http"
	"time"
)

// DefaultBreakerCooldown is the longest an open breaker refuses requests
// before it lets a probe through, when BreakerSettings.Cooldown is zero:
// each open period lasts between half of it and all of it, at random
// (150ms on average).
const DefaultBreakerCooldown = 200 * time.Millisecond

// BreakerState is the state of one circuit breaker.
type BreakerState = circuit.State

// The states of a circuit breaker.
const (
	// BreakerClosed: requests are sent and their outcomes counted.
	BreakerClosed BreakerState = circuit.Closed
	// BreakerHalfOpen: a few probes are sent to learn whether the host
	// has recovered; other requests are refused.
	BreakerHalfOpen BreakerState = circuit.HalfOpen
	// BreakerOpen: every request is refused until the open period ends.
	BreakerOpen BreakerState = circuit.Open
)

// BreakerSettings configures [Breaker] and [NewBreakers]. The zero value
// is ready to use; each field says its default.
//
// A breaker opens on evidence that its host is down, not on a few
// failures that retries absorb. A quiet host (fewer than MinRequests
// requests ended within Window) opens after ConsecutiveFailures failures
// in a row, each sent after the one before it failed (requests in flight
// together that fail together, such as connections hung by one fault,
// are one failure of the run). A busy host opens when FailureRatio of the requests that
// ended within Window failed, or when MinRequests requests in a row
// failed over at least 50 ms, each sent after the run's first failure
// (the host went down just now, and Window still holds its successes
// from before). Requests already in flight when a run begins do not
// count in it: a burst of timeouts of requests sent before the first of
// them ended (connections dialed together and hung by one fault, or every
// request of a client held up by a stall) is one event, not evidence
// that the host is down. So a busy client whose host fails 1% or even
// half of its requests keeps its breaker closed, while one whose host
// fails everything opens it within a few tens of requests (for a host
// that hangs, one attempt's timeout after the first timeout).
//
// An open breaker refuses every request of its host, at once and
// without sending it, with a [*CircuitOpenError] that matches
// [ErrCircuitOpen]. After its open period (Cooldown, jittered) it lets
// probes through, one at a time by default: a probe that succeeds closes
// the breaker, one that fails opens it again for another jittered
// Cooldown. The wait does not grow: a host that stays down gets one
// probe every Cooldown or so, and callers are back within about a
// Cooldown of its return.
//
// What counts against a host is [policy.JudgeHost]'s decision: an error
// or a 5xx response does; a 4xx response, 429 included, does not (the
// host is answering; [RateLimitAware] handles rate limits); and a request
// that the caller canceled, whose caller's own deadline passed, or that
// cannot be sent as written counts neither way. A request that ran out of
// the time a [Deadline] layer allows (a [*DeadlineError]), as [New]'s
// Timeout and AttemptTimeout do, counts against its host: it did not
// answer within what the stack allows.
type BreakerSettings struct {
	// ConsecutiveFailures opens the breaker of a quiet host after this
	// many failures in a row, each sent after the previous one failed.
	// Zero means 5.
	ConsecutiveFailures uint32

	// Cooldown is how long an open breaker refuses requests before it
	// lets a probe through: each open period lasts between Cooldown/2 and
	// Cooldown, at random, so that the probes of many clients do not
	// arrive together. Zero or negative means [DefaultBreakerCooldown]
	// (200ms): a down host gets about seven probes a second from each
	// client, and callers are back within 200ms of its return.
	Cooldown time.Duration

	// HalfOpenRequests is how many probes an open breaker lets through at
	// a time once its open period has passed. When that many succeed in a
	// row the breaker closes; the first that fails opens it again. A probe
	// that says nothing about the host (its caller canceled it) frees its
	// place. Zero means 1.
	HalfOpenRequests uint32

	// FailureRatio opens the breaker of a busy host when at least this
	// fraction of the requests that ended within Window failed. Zero
	// means 0.8: retries absorb a host that fails fewer requests than
	// that, and the breaker would refuse requests that would succeed. A
	// negative value, or one above 1, turns the ratio rule off.
	FailureRatio float64

	// MinRequests is how many requests must have ended within Window for
	// a host to count as busy, and how many failures in a row open a busy
	// host's breaker. Zero means 20.
	MinRequests uint32

	// Window is how far back requests count, kept in ten buckets of
	// Window/10 each. Zero or negative means 10s.
	Window time.Duration

	// IsFailure, when set, decides which outcomes that count
	// ([policy.JudgeHost] does not ignore them) are failures; resp is nil
	// when err is not. It is called once per request sent, when RoundTrip
	// returns (what happens while the body is read is not counted). A
	// response it calls a failure is still returned to the caller, body
	// intact. Nil means policy.JudgeHost's rule: an error or a 5xx.
	IsFailure func(resp *http.Response, err error) bool

	// Key gives the breaker a request belongs to. A request for which it
	// returns "" bypasses the breakers. Nil means one breaker per host:
	// scheme, host and port, the scheme's default port left out.
	Key func(*http.Request) string

	// OnStateChange, when set, is called on every change of a breaker's
	// state, with the breaker's key, in the order of the changes. It is
	// called after the breaker's locks are released, on the goroutine of
	// the request that caused the change: it may log, export metrics, or
	// even send a request through the same stack. Nil means no hook.
	OnStateChange func(key string, from, to BreakerState)

	// Store shares the breakers' states with the other processes of a
	// fleet (see [BreakerStore]; the fleet module implements it on
	// Redis): a host one process finds down is refused by all of them, and
	// while it is half-open one request in the whole fleet probes it. Nil
	// means each process knows only what it sees itself.
	Store BreakerStore
}

// breakerConfig is BreakerSettings with its defaults applied.
type breakerConfig struct {
	circuit.Config
	isFailure func(*http.Response, error) bool
	key       func(*http.Request) string
	store     BreakerStore
}

func (s BreakerSettings) config() breakerConfig {
	c := breakerConfig{
		Config: circuit.Config{
			Consecutive: s.ConsecutiveFailures,
			MinRequests: uint64(s.MinRequests),
			Ratio:       s.FailureRatio,
			Window:      s.Window,
			Cooldown:    s.Cooldown,
			HalfOpen:    s.HalfOpenRequests,
		}.WithDefaults(),
		isFailure: s.IsFailure,
		key:       s.Key,
		store:     s.Store,
	}
	if f, store := s.OnStateChange, c.store; f != nil || store != nil {
		c.OnChange = func(e *circuit.Circuit, from, to BreakerState) {
			if store != nil {
				publish(store, e, to)
			}
			if f != nil {
				f(e.Name(), from, to)
			}
		}
	}
	return c
}
