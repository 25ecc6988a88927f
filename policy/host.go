package policy

import (
	"context"
	"errors"
	"net/http"
)

// HostVerdict is what one attempt's outcome says about the health of
// the host it was sent to, as [JudgeHost] decides.
type HostVerdict int8

// The verdicts of [JudgeHost].
const (
	// HostIgnored: the outcome says nothing about the host, and is not
	// counted either way.
	HostIgnored HostVerdict = iota
	// HostHealthy: the host answered.
	HostHealthy
	// HostFailing: the outcome counts against the host.
	HostFailing
)

// JudgeHost decides what counts against a host, for circuit breakers and
// anything else that judges a host's health. resp is the attempt's
// response, nil when err is not.
//
// The outcome says nothing about the host (HostIgnored) when the attempt
// ended for a reason of the caller's: callerEnded (the caller canceled,
// or its own deadline passed: its context ended, and not because of a
// limit the stack set), an error that wraps [context.Canceled], or a
// request that cannot be sent as written ([IsCallerError]). A limit the
// stack sets on an attempt is not the caller's: a host that outlasts it
// is failing.
//
// Otherwise an error, or a response with a 5xx status, is HostFailing,
// and any other response, 4xx included, is HostHealthy: a 429 comes from
// a host that is up and answering, and is for rate limiting to handle,
// not for a breaker.
func JudgeHost(req *http.Request, resp *http.Response, err error, callerEnded bool) HostVerdict {
	if err != nil && (callerEnded || errors.Is(err, context.Canceled) || IsCallerError(req, err)) {
		return HostIgnored
	}
	if err != nil || resp == nil || resp.StatusCode >= 500 {
		return HostFailing
	}
	return HostHealthy
}
