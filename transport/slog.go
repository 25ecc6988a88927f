package transport

import (
	"log/slog"

	"github.com/sturdyhttp/sturdy/internal/slogevent"
)

// SlogHooks returns hooks that log every event of the stack to l. A nil l
// means [slog.Default]. The levels are:
//
//   - Debug: attempts and canceled hedge copies.
//   - Info: retries, rate-limit waits, hedges and their wins, failovers
//     to alternate origins, and breaker changes other than opening.
//   - Warn: give-ups, rate-limit rejections, throttled requests, requests
//     refused for a concurrency limit, breakers opening and addresses
//     ejected.
//   - Concurrency limits' changes are logged at Debug.
//
// An event at a level that l does not enable costs only the enabled check.
// The messages and attribute keys are stable: dashboards and alerts may rely
// on them. Request attributes follow OpenTelemetry's semantic conventions.
// The URL's query is never logged, as it may carry credentials.
//
//	message                          attributes
//	"sturdy: attempt"                sturdy.attempt (1 for the first), http.response.status_code or error, sturdy.duration
//	"sturdy: retry"                  sturdy.attempt (the one about to be made), sturdy.wait, sturdy.reason, status or error
//	"sturdy: give up"                sturdy.attempts, sturdy.reason, status or error
//	"sturdy: breaker state change"   sturdy.key, sturdy.breaker.from, sturdy.breaker.to
//	"sturdy: rate limit wait"        sturdy.key, sturdy.wait, sturdy.reason
//	"sturdy: rate limit reject"      sturdy.key, sturdy.wait, sturdy.reason
//	"sturdy: hedge"                  sturdy.hedge.copy (2 for the first hedge), sturdy.hedge.elapsed
//	"sturdy: hedge won"              sturdy.hedge.copy, sturdy.hedge.elapsed, http.response.status_code
//	"sturdy: copy canceled"          sturdy.hedge.copy, sturdy.hedge.elapsed
//	"sturdy: throttle"               sturdy.key, sturdy.throttle.probability
//	"sturdy: concurrency limit"      sturdy.key, sturdy.concurrency.from, sturdy.concurrency.limit, sturdy.concurrency.in_flight
//	"sturdy: concurrency refuse"     sturdy.key, sturdy.concurrency.limit, sturdy.concurrency.in_flight, sturdy.wait
//	"sturdy: address ejected"        sturdy.key (host:port), network.peer.address, sturdy.failures, sturdy.ejections, sturdy.ejection (how long)
//	"sturdy: failover"               sturdy.key (the request's origin), sturdy.origin (the alternate), sturdy.reason
//
// Events of a request also carry http.request.method, url.path and
// server.address, the request's host and port.
//
//	transport.New(transport.Options{Hooks: transport.SlogHooks(logger)})
func SlogHooks(l *slog.Logger) Hooks {
	if l == nil {
		l = slog.Default()
	}
	s := slogevent.Logger{L: l}
	return Hooks{
		OnAttempt: s.Attempt, OnRetry: s.Retry, OnGiveUp: s.GiveUp,
		OnBreakerStateChange: func(key string, from, to BreakerState) {
			s.Breaker(key, from.String(), to.String(), to == BreakerOpen)
		},
		OnRateLimitWait: s.RateLimitWait, OnRateLimitReject: s.RateLimitReject,
		OnHedge: s.Hedge, OnHedgeWon: s.HedgeWon, OnCopyCanceled: s.CopyCanceled,
		OnThrottle: func(e ThrottleEvent) { s.Throttle(e.Request, e.Host, e.Probability) },
		OnEject: func(e EjectionEvent) {
			s.Eject(e.Host, e.Address, e.Failures, e.Ejections, e.Duration)
		},
		OnFailover: func(e FailoverEvent) { s.Failover(e.Request, e.From, e.To, e.Reason) },
		OnConcurrencyChange: func(e ConcurrencyEvent) {
			s.ConcurrencyChange(e.Host, e.From, e.Limit, e.InFlight)
		},
		OnConcurrencyRefuse: func(e ConcurrencyEvent) {
			s.ConcurrencyRefuse(e.Request, e.Host, e.Limit, e.InFlight, e.Waited)
		},
	}
}
