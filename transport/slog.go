package transport

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// The attribute keys and messages that [SlogHooks] writes, listed in its
// doc.
const (
	attrMethod   = "http.request.method"
	attrServer   = "server.address"
	attrPath     = "url.path"
	attrStatus   = "http.response.status_code"
	attrError    = "error"
	attrAttempt  = "sturdy.attempt"
	attrAttempts = "sturdy.attempts"
	attrDuration = "sturdy.duration"
	attrWait     = "sturdy.wait"
	attrReason   = "sturdy.reason"
	attrKey      = "sturdy.key"
	attrFrom     = "sturdy.breaker.from"
	attrTo       = "sturdy.breaker.to"
	attrCopy     = "sturdy.hedge.copy"
	attrElapsed  = "sturdy.hedge.elapsed"
	attrProb     = "sturdy.throttle.probability"
	attrLimFrom  = "sturdy.concurrency.from"
	attrLimit    = "sturdy.concurrency.limit"
	attrInFlight = "sturdy.concurrency.in_flight"
	attrPeer     = "network.peer.address"
	attrEjected  = "sturdy.ejections"
	attrEjection = "sturdy.ejection"
	attrFailures = "sturdy.failures"
	attrOrigin   = "sturdy.origin"

	msgAttempt         = "sturdy: attempt"
	msgRetry           = "sturdy: retry"
	msgGiveUp          = "sturdy: give up"
	msgBreaker         = "sturdy: breaker state change"
	msgRateLimitWait   = "sturdy: rate limit wait"
	msgRateLimitReject = "sturdy: rate limit reject"
	msgHedge           = "sturdy: hedge"
	msgHedgeWon        = "sturdy: hedge won"
	msgCopyCanceled    = "sturdy: copy canceled"
	msgThrottle        = "sturdy: throttle"
	msgConcLimit       = "sturdy: concurrency limit"
	msgConcRefuse      = "sturdy: concurrency refuse"
	msgEject           = "sturdy: address ejected"
	msgFailover        = "sturdy: failover"
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
	s := slogHooks{l}
	return Hooks{
		OnAttempt: s.attempt, OnRetry: s.retry, OnGiveUp: s.giveUp,
		OnBreakerStateChange: s.breaker,
		OnRateLimitWait:      s.rateLimitWait, OnRateLimitReject: s.rateLimitReject,
		OnHedge: s.hedge, OnHedgeWon: s.hedgeWon, OnCopyCanceled: s.copyCanceled,
		OnThrottle: s.throttle, OnEject: s.eject, OnFailover: s.failover,
		OnConcurrencyChange: s.concurrencyChange, OnConcurrencyRefuse: s.concurrencyRefuse,
	}
}

// slogHooks are the hooks of SlogHooks, on one logger.
type slogHooks struct{ l *slog.Logger }

// on returns the context to log an event of r at level with, and
// whether the logger logs it: an event's attributes are built only then.
func (s slogHooks) on(level slog.Level, r *http.Request) (context.Context, bool) {
	ctx := context.Background()
	if r != nil {
		ctx = r.Context()
	}
	return ctx, s.l.Enabled(ctx, level)
}

func (s slogHooks) log(ctx context.Context, level slog.Level, msg string, r *http.Request, attrs ...slog.Attr) {
	if r != nil {
		attrs = append(attrs, slog.String(attrMethod, r.Method))
		if r.URL != nil {
			attrs = append(attrs, slog.String(attrServer, r.URL.Host), slog.String(attrPath, r.URL.Path))
		}
	}
	s.l.LogAttrs(ctx, level, msg, attrs...)
}

func outcomeAttr(status int, err error) slog.Attr {
	if err != nil {
		return slog.String(attrError, err.Error())
	}
	return slog.Int(attrStatus, status)
}

func (s slogHooks) attempt(e policy.AttemptEvent) {
	if ctx, ok := s.on(slog.LevelDebug, e.Request); ok {
		s.log(ctx, slog.LevelDebug, msgAttempt, e.Request, slog.Int(attrAttempt, e.Attempt), outcomeAttr(e.Status, e.Err), slog.Duration(attrDuration, e.Duration))
	}
}

func (s slogHooks) retry(e policy.RetryEvent) {
	if ctx, ok := s.on(slog.LevelInfo, e.Request); ok {
		s.log(ctx, slog.LevelInfo, msgRetry, e.Request, slog.Int(attrAttempt, e.Attempt), slog.Duration(attrWait, e.Wait), slog.String(attrReason, string(e.Reason)), outcomeAttr(e.Status, e.Err))
	}
}

func (s slogHooks) giveUp(e policy.GiveUpEvent) {
	if ctx, ok := s.on(slog.LevelWarn, e.Request); ok {
		s.log(ctx, slog.LevelWarn, msgGiveUp, e.Request, slog.Int(attrAttempts, e.Attempts), slog.String(attrReason, string(e.Reason)), outcomeAttr(e.Status, e.Err))
	}
}

func (s slogHooks) breaker(key string, from, to BreakerState) {
	level := slog.LevelInfo
	if to == BreakerOpen {
		level = slog.LevelWarn
	}
	if ctx, ok := s.on(level, nil); ok {
		s.log(ctx, level, msgBreaker, nil, slog.String(attrKey, key), slog.String(attrFrom, from.String()), slog.String(attrTo, to.String()))
	}
}

func (s slogHooks) rateLimitWait(e ratelimit.WaitEvent) {
	if ctx, ok := s.on(slog.LevelInfo, e.Request); ok {
		s.log(ctx, slog.LevelInfo, msgRateLimitWait, e.Request, slog.String(attrKey, e.Key), slog.Duration(attrWait, e.Wait), slog.String(attrReason, e.Reason))
	}
}

func (s slogHooks) rateLimitReject(e ratelimit.RejectEvent) {
	if ctx, ok := s.on(slog.LevelWarn, e.Request); ok {
		s.log(ctx, slog.LevelWarn, msgRateLimitReject, e.Request, slog.String(attrKey, e.Key), slog.Duration(attrWait, e.Wait), slog.String(attrReason, e.Reason))
	}
}

func (s slogHooks) hedge(e policy.HedgeEvent) {
	if ctx, ok := s.on(slog.LevelInfo, e.Request); ok {
		s.log(ctx, slog.LevelInfo, msgHedge, e.Request, slog.Int(attrCopy, e.Copy), slog.Duration(attrElapsed, e.Elapsed))
	}
}

func (s slogHooks) hedgeWon(e policy.HedgeEvent) {
	if ctx, ok := s.on(slog.LevelInfo, e.Request); ok {
		s.log(ctx, slog.LevelInfo, msgHedgeWon, e.Request, slog.Int(attrCopy, e.Copy), slog.Duration(attrElapsed, e.Elapsed), slog.Int(attrStatus, e.Status))
	}
}

func (s slogHooks) copyCanceled(e policy.HedgeEvent) {
	if ctx, ok := s.on(slog.LevelDebug, e.Request); ok {
		s.log(ctx, slog.LevelDebug, msgCopyCanceled, e.Request, slog.Int(attrCopy, e.Copy), slog.Duration(attrElapsed, e.Elapsed))
	}
}

func (s slogHooks) throttle(e ThrottleEvent) {
	if ctx, ok := s.on(slog.LevelWarn, e.Request); ok {
		s.log(ctx, slog.LevelWarn, msgThrottle, e.Request, slog.String(attrKey, e.Host), slog.Float64(attrProb, e.Probability))
	}
}

func (s slogHooks) eject(e EjectionEvent) {
	if ctx, ok := s.on(slog.LevelWarn, nil); ok {
		s.log(ctx, slog.LevelWarn, msgEject, nil, slog.String(attrKey, e.Host), slog.String(attrPeer, e.Address),
			slog.Int(attrFailures, e.Failures), slog.Int(attrEjected, e.Ejections), slog.Duration(attrEjection, e.Duration))
	}
}

func (s slogHooks) failover(e FailoverEvent) {
	if ctx, ok := s.on(slog.LevelInfo, e.Request); ok {
		s.log(ctx, slog.LevelInfo, msgFailover, e.Request, slog.String(attrKey, e.From), slog.String(attrOrigin, e.To), slog.String(attrReason, e.Reason))
	}
}

func (s slogHooks) concurrencyChange(e ConcurrencyEvent) {
	if ctx, ok := s.on(slog.LevelDebug, nil); ok {
		s.log(ctx, slog.LevelDebug, msgConcLimit, nil, slog.String(attrKey, e.Host), slog.Int(attrLimFrom, e.From), slog.Int(attrLimit, e.Limit), slog.Int(attrInFlight, e.InFlight))
	}
}

func (s slogHooks) concurrencyRefuse(e ConcurrencyEvent) {
	if ctx, ok := s.on(slog.LevelWarn, e.Request); ok {
		s.log(ctx, slog.LevelWarn, msgConcRefuse, e.Request, slog.String(attrKey, e.Host), slog.Int(attrLimit, e.Limit), slog.Int(attrInFlight, e.InFlight), slog.Duration(attrWait, e.Waited))
	}
}
