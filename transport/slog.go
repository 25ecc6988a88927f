package transport

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// The attribute keys that [SlogHooks] writes. They are stable: dashboards
// and alerts may rely on them. Request attributes follow OpenTelemetry's
// semantic conventions; the URL's query is never logged, as it may carry
// credentials.
const (
	AttrMethod   = "http.request.method"       // GET, POST, ...
	AttrServer   = "server.address"            // the request's host (and port)
	AttrPath     = "url.path"                  // the request's path
	AttrStatus   = "http.response.status_code" // the attempt's status; absent on error
	AttrError    = "error"                     // the attempt's error; absent on a response
	AttrAttempt  = "sturdy.attempt"            // 1 for the first attempt
	AttrAttempts = "sturdy.attempts"           // attempts made, on give-up
	AttrDuration = "sturdy.duration"           // an attempt's duration
	AttrWait     = "sturdy.wait"               // a wait about to happen
	AttrReason   = "sturdy.reason"             // why a retry, a give-up or a wait
	AttrKey      = "sturdy.key"                // a breaker's or a quota's key
	AttrFrom     = "sturdy.breaker.from"       // a breaker's previous state
	AttrTo       = "sturdy.breaker.to"         // a breaker's new state
)

// The messages that [SlogHooks] writes, one per kind of event.
const (
	MsgAttempt         = "sturdy: attempt"
	MsgRetry           = "sturdy: retry"
	MsgGiveUp          = "sturdy: give up"
	MsgBreaker         = "sturdy: breaker state change"
	MsgRateLimitWait   = "sturdy: rate limit wait"
	MsgRateLimitReject = "sturdy: rate limit reject"
)

// SlogHooks returns hooks that log every event of the stack to l: attempts
// at Debug; retries and rate-limit waits at Info; give-ups, rate-limit
// rejections and breakers opening at Warn; other breaker changes at Info.
// A nil l means [slog.Default]. An event at a level that l does not
// enable costs only the enabled check.
//
//	transport.New(transport.Options{Hooks: transport.SlogHooks(logger)})
func SlogHooks(l *slog.Logger) Hooks {
	if l == nil {
		l = slog.Default()
	}
	log := func(level slog.Level, msg string, r *http.Request, attrs ...slog.Attr) {
		ctx := context.Background()
		if r != nil {
			ctx = r.Context()
		}
		if !l.Enabled(ctx, level) {
			return
		}
		if r != nil {
			attrs = append(attrs, slog.String(AttrMethod, r.Method), slog.String(AttrServer, r.URL.Host), slog.String(AttrPath, r.URL.Path))
		}
		l.LogAttrs(ctx, level, msg, attrs...)
	}
	outcome := func(status int, err error) slog.Attr {
		if err != nil {
			return slog.String(AttrError, err.Error())
		}
		return slog.Int(AttrStatus, status)
	}
	return Hooks{
		OnAttempt: func(e policy.AttemptEvent) {
			log(slog.LevelDebug, MsgAttempt, e.Request, slog.Int(AttrAttempt, e.Attempt), outcome(e.Status, e.Err), slog.Duration(AttrDuration, e.Duration))
		},
		OnRetry: func(e policy.RetryEvent) {
			log(slog.LevelInfo, MsgRetry, e.Request, slog.Int(AttrAttempt, e.Attempt), slog.Duration(AttrWait, e.Wait), slog.String(AttrReason, e.Reason), outcome(e.Status, e.Err))
		},
		OnGiveUp: func(e policy.GiveUpEvent) {
			log(slog.LevelWarn, MsgGiveUp, e.Request, slog.Int(AttrAttempts, e.Attempts), slog.String(AttrReason, e.Reason), outcome(e.Status, e.Err))
		},
		OnBreakerStateChange: func(key string, from, to BreakerState) {
			level := slog.LevelInfo
			if to == BreakerOpen {
				level = slog.LevelWarn
			}
			log(level, MsgBreaker, nil, slog.String(AttrKey, key), slog.String(AttrFrom, from.String()), slog.String(AttrTo, to.String()))
		},
		OnRateLimitWait: func(e ratelimit.WaitEvent) {
			log(slog.LevelInfo, MsgRateLimitWait, e.Request, slog.String(AttrKey, e.Key), slog.Duration(AttrWait, e.Wait), slog.String(AttrReason, e.Reason))
		},
		OnRateLimitReject: func(e ratelimit.RejectEvent) {
			log(slog.LevelWarn, MsgRateLimitReject, e.Request, slog.String(AttrKey, e.Key), slog.Duration(AttrWait, e.Wait), slog.String(AttrReason, e.Reason))
		},
	}
}
