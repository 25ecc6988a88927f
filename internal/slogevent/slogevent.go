// Package slogevent writes the events of a sturdy stack to a
// [slog.Logger]: the attribute keys and messages that
// transport.SlogHooks documents as stable, and the events of the policy
// and ratelimit packages. transport.SlogHooks wires them to hooks, with
// those of transport's own events.
package slogevent

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// The attribute keys and messages that transport.SlogHooks writes,
// listed in its doc.
const (
	AttrMethod   = "http.request.method"
	AttrServer   = "server.address"
	AttrPath     = "url.path"
	AttrStatus   = "http.response.status_code"
	AttrError    = "error"
	AttrAttempt  = "sturdy.attempt"
	AttrAttempts = "sturdy.attempts"
	AttrDuration = "sturdy.duration"
	AttrWait     = "sturdy.wait"
	AttrReason   = "sturdy.reason"
	AttrKey      = "sturdy.key"
	AttrFrom     = "sturdy.breaker.from"
	AttrTo       = "sturdy.breaker.to"
	AttrCopy     = "sturdy.hedge.copy"
	AttrElapsed  = "sturdy.hedge.elapsed"
	AttrProb     = "sturdy.throttle.probability"
	AttrLimFrom  = "sturdy.concurrency.from"
	AttrLimit    = "sturdy.concurrency.limit"
	AttrInFlight = "sturdy.concurrency.in_flight"
	AttrPeer     = "network.peer.address"
	AttrEjected  = "sturdy.ejections"
	AttrEjection = "sturdy.ejection"
	AttrFailures = "sturdy.failures"
	AttrOrigin   = "sturdy.origin"

	MsgAttempt         = "sturdy: attempt"
	MsgRetry           = "sturdy: retry"
	MsgGiveUp          = "sturdy: give up"
	MsgBreaker         = "sturdy: breaker state change"
	MsgRateLimitWait   = "sturdy: rate limit wait"
	MsgRateLimitReject = "sturdy: rate limit reject"
	MsgHedge           = "sturdy: hedge"
	MsgHedgeWon        = "sturdy: hedge won"
	MsgCopyCanceled    = "sturdy: copy canceled"
	MsgThrottle        = "sturdy: throttle"
	MsgConcLimit       = "sturdy: concurrency limit"
	MsgConcRefuse      = "sturdy: concurrency refuse"
	MsgEject           = "sturdy: address ejected"
	MsgFailover        = "sturdy: failover"
)

// Logger writes events to L.
type Logger struct{ L *slog.Logger }

// On returns the context to log an event of r at level with, and
// whether the logger logs it: an event's attributes are built only then.
func (s Logger) On(level slog.Level, r *http.Request) (context.Context, bool) {
	ctx := context.Background()
	if r != nil {
		ctx = r.Context()
	}
	return ctx, s.L.Enabled(ctx, level)
}

// Log writes an event of r (nil for none) with attrs and r's method,
// host and path.
func (s Logger) Log(ctx context.Context, level slog.Level, msg string, r *http.Request, attrs ...slog.Attr) {
	if r != nil {
		attrs = append(attrs, slog.String(AttrMethod, r.Method))
		if r.URL != nil {
			attrs = append(attrs, slog.String(AttrServer, r.URL.Host), slog.String(AttrPath, r.URL.Path))
		}
	}
	s.L.LogAttrs(ctx, level, msg, attrs...)
}

// Outcome is the attribute of an attempt's outcome: its error, else its
// status.
func Outcome(status int, err error) slog.Attr {
	if err != nil {
		return slog.String(AttrError, err.Error())
	}
	return slog.Int(AttrStatus, status)
}

// Attempt logs an attempt at Debug.
func (s Logger) Attempt(e policy.AttemptEvent) {
	if ctx, ok := s.On(slog.LevelDebug, e.Request); ok {
		s.Log(ctx, slog.LevelDebug, MsgAttempt, e.Request, slog.Int(AttrAttempt, e.Attempt), Outcome(e.Status, e.Err), slog.Duration(AttrDuration, e.Duration))
	}
}

// Retry logs a retry at Info.
func (s Logger) Retry(e policy.RetryEvent) {
	if ctx, ok := s.On(slog.LevelInfo, e.Request); ok {
		s.Log(ctx, slog.LevelInfo, MsgRetry, e.Request, slog.Int(AttrAttempt, e.Attempt), slog.Duration(AttrWait, e.Wait), slog.String(AttrReason, string(e.Reason)), Outcome(e.Status, e.Err))
	}
}

// GiveUp logs a give-up at Warn.
func (s Logger) GiveUp(e policy.GiveUpEvent) {
	if ctx, ok := s.On(slog.LevelWarn, e.Request); ok {
		s.Log(ctx, slog.LevelWarn, MsgGiveUp, e.Request, slog.Int(AttrAttempts, e.Attempts), slog.String(AttrReason, string(e.Reason)), Outcome(e.Status, e.Err))
	}
}

// RateLimitWait logs a rate-limit wait at Info.
func (s Logger) RateLimitWait(e ratelimit.WaitEvent) {
	if ctx, ok := s.On(slog.LevelInfo, e.Request); ok {
		s.Log(ctx, slog.LevelInfo, MsgRateLimitWait, e.Request, slog.String(AttrKey, e.Key), slog.Duration(AttrWait, e.Wait), slog.String(AttrReason, e.Reason))
	}
}

// RateLimitReject logs a rate-limit rejection at Warn.
func (s Logger) RateLimitReject(e ratelimit.RejectEvent) {
	if ctx, ok := s.On(slog.LevelWarn, e.Request); ok {
		s.Log(ctx, slog.LevelWarn, MsgRateLimitReject, e.Request, slog.String(AttrKey, e.Key), slog.Duration(AttrWait, e.Wait), slog.String(AttrReason, e.Reason))
	}
}

// Hedge logs a hedge sent at Info.
func (s Logger) Hedge(e policy.HedgeEvent) {
	if ctx, ok := s.On(slog.LevelInfo, e.Request); ok {
		s.Log(ctx, slog.LevelInfo, MsgHedge, e.Request, slog.Int(AttrCopy, e.Copy), slog.Duration(AttrElapsed, e.Elapsed))
	}
}

// HedgeWon logs a hedge that won at Info.
func (s Logger) HedgeWon(e policy.HedgeEvent) {
	if ctx, ok := s.On(slog.LevelInfo, e.Request); ok {
		s.Log(ctx, slog.LevelInfo, MsgHedgeWon, e.Request, slog.Int(AttrCopy, e.Copy), slog.Duration(AttrElapsed, e.Elapsed), slog.Int(AttrStatus, e.Status))
	}
}

// CopyCanceled logs a canceled copy at Debug.
func (s Logger) CopyCanceled(e policy.HedgeEvent) {
	if ctx, ok := s.On(slog.LevelDebug, e.Request); ok {
		s.Log(ctx, slog.LevelDebug, MsgCopyCanceled, e.Request, slog.Int(AttrCopy, e.Copy), slog.Duration(AttrElapsed, e.Elapsed))
	}
}

// The events of transport's own types, given by their fields.

// Breaker logs a breaker's change from from to to: at Warn when it
// opens, else at Info.
func (s Logger) Breaker(key, from, to string, open bool) {
	level := slog.LevelInfo
	if open {
		level = slog.LevelWarn
	}
	if ctx, ok := s.On(level, nil); ok {
		s.Log(ctx, level, MsgBreaker, nil, slog.String(AttrKey, key), slog.String(AttrFrom, from), slog.String(AttrTo, to))
	}
}

// Throttle logs a request throttled locally at Warn.
func (s Logger) Throttle(r *http.Request, host string, prob float64) {
	if ctx, ok := s.On(slog.LevelWarn, r); ok {
		s.Log(ctx, slog.LevelWarn, MsgThrottle, r, slog.String(AttrKey, host), slog.Float64(AttrProb, prob))
	}
}

// Eject logs an address ejected at Warn.
func (s Logger) Eject(host, addr string, failures, ejections int, d time.Duration) {
	if ctx, ok := s.On(slog.LevelWarn, nil); ok {
		s.Log(ctx, slog.LevelWarn, MsgEject, nil, slog.String(AttrKey, host), slog.String(AttrPeer, addr),
			slog.Int(AttrFailures, failures), slog.Int(AttrEjected, ejections), slog.Duration(AttrEjection, d))
	}
}

// Failover logs an attempt sent to an alternate origin at Info.
func (s Logger) Failover(r *http.Request, from, to, reason string) {
	if ctx, ok := s.On(slog.LevelInfo, r); ok {
		s.Log(ctx, slog.LevelInfo, MsgFailover, r, slog.String(AttrKey, from), slog.String(AttrOrigin, to), slog.String(AttrReason, reason))
	}
}

// ConcurrencyChange logs a host's concurrency limit's change at Debug.
func (s Logger) ConcurrencyChange(host string, from, limit, inFlight int) {
	if ctx, ok := s.On(slog.LevelDebug, nil); ok {
		s.Log(ctx, slog.LevelDebug, MsgConcLimit, nil, slog.String(AttrKey, host), slog.Int(AttrLimFrom, from), slog.Int(AttrLimit, limit), slog.Int(AttrInFlight, inFlight))
	}
}

// ConcurrencyRefuse logs a request refused for its host's concurrency
// limit at Warn.
func (s Logger) ConcurrencyRefuse(r *http.Request, host string, limit, inFlight int, waited time.Duration) {
	if ctx, ok := s.On(slog.LevelWarn, r); ok {
		s.Log(ctx, slog.LevelWarn, MsgConcRefuse, r, slog.String(AttrKey, host), slog.Int(AttrLimit, limit), slog.Int(AttrInFlight, inFlight), slog.Duration(AttrWait, waited))
	}
}
