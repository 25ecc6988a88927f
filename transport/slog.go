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
	s := slogHooks{slogevent.Logger{L: l}}
	return Hooks{
		OnAttempt: s.Attempt, OnRetry: s.Retry, OnGiveUp: s.GiveUp,
		OnBreakerStateChange: s.breaker,
		OnRateLimitWait:      s.RateLimitWait, OnRateLimitReject: s.RateLimitReject,
		OnHedge: s.Hedge, OnHedgeWon: s.HedgeWon, OnCopyCanceled: s.CopyCanceled,
		OnThrottle: s.throttle, OnEject: s.eject, OnFailover: s.failover,
		OnConcurrencyChange: s.concurrencyChange, OnConcurrencyRefuse: s.concurrencyRefuse,
	}
}

// slogHooks are the hooks of SlogHooks, on one logger.
type slogHooks struct{ slogevent.Logger }

func (s slogHooks) breaker(key string, from, to BreakerState) {
	level := slog.LevelInfo
	if to == BreakerOpen {
		level = slog.LevelWarn
	}
	if ctx, ok := s.On(level, nil); ok {
		s.Log(ctx, level, slogevent.MsgBreaker, nil, slog.String(slogevent.AttrKey, key), slog.String(slogevent.AttrFrom, from.String()), slog.String(slogevent.AttrTo, to.String()))
	}
}

func (s slogHooks) throttle(e ThrottleEvent) {
	if ctx, ok := s.On(slog.LevelWarn, e.Request); ok {
		s.Log(ctx, slog.LevelWarn, slogevent.MsgThrottle, e.Request, slog.String(slogevent.AttrKey, e.Host), slog.Float64(slogevent.AttrProb, e.Probability))
	}
}

func (s slogHooks) eject(e EjectionEvent) {
	if ctx, ok := s.On(slog.LevelWarn, nil); ok {
		s.Log(ctx, slog.LevelWarn, slogevent.MsgEject, nil, slog.String(slogevent.AttrKey, e.Host), slog.String(slogevent.AttrPeer, e.Address),
			slog.Int(slogevent.AttrFailures, e.Failures), slog.Int(slogevent.AttrEjected, e.Ejections), slog.Duration(slogevent.AttrEjection, e.Duration))
	}
}

func (s slogHooks) failover(e FailoverEvent) {
	if ctx, ok := s.On(slog.LevelInfo, e.Request); ok {
		s.Log(ctx, slog.LevelInfo, slogevent.MsgFailover, e.Request, slog.String(slogevent.AttrKey, e.From), slog.String(slogevent.AttrOrigin, e.To), slog.String(slogevent.AttrReason, e.Reason))
	}
}

func (s slogHooks) concurrencyChange(e ConcurrencyEvent) {
	if ctx, ok := s.On(slog.LevelDebug, nil); ok {
		s.Log(ctx, slog.LevelDebug, slogevent.MsgConcLimit, nil, slog.String(slogevent.AttrKey, e.Host), slog.Int(slogevent.AttrLimFrom, e.From), slog.Int(slogevent.AttrLimit, e.Limit), slog.Int(slogevent.AttrInFlight, e.InFlight))
	}
}

func (s slogHooks) concurrencyRefuse(e ConcurrencyEvent) {
	if ctx, ok := s.On(slog.LevelWarn, e.Request); ok {
		s.Log(ctx, slog.LevelWarn, slogevent.MsgConcRefuse, e.Request, slog.String(slogevent.AttrKey, e.Host), slog.Int(slogevent.AttrLimit, e.Limit), slog.Int(slogevent.AttrInFlight, e.InFlight), slog.Duration(slogevent.AttrWait, e.Waited))
	}
}
