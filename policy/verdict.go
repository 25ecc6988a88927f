package policy

import (
	"errors"
	"net"
	"net/http"
)

// Verdict is what one attempt's outcome says, as [Judge] decides it. Every
// layer that counts or judges an attempt reads these facts from here. So
// each fact has one rule, for the breaker, the quota, the throttle, the
// hedge and the retry alike.
type Verdict struct {
	// Sent reports whether the request may have reached the server and
	// been processed. It is false for a layer's refusal, the caller's
	// error, a connection never made and an outcome that proves the
	// server did not process the request ([NotProcessed]). Such a
	// request used no quota: a free resend of it costs one unit, not two.
	Sent bool
	// Refusal names what refused the request unsent (see [Refusal]);
	// empty when nothing did.
	Refusal Reason
	// Host is what the outcome says of the host's health.
	Host HostVerdict
	// Accepted reports whether the server took the request: a response
	// under 500 other than 429. Adaptive throttling counts it.
	Accepted bool
	// Overloaded reports an overloaded server's answer, a 503 or a 529:
	// what a client-side throttle sheds load for.
	Overloaded bool
	// Lost reports an attempt the host did not serve: a 5xx, a 429, or
	// an outcome that counts against the host (Host is HostFailing) or
	// would but for the caller's deadline. A timeout is a loss whoever
	// set it, which is how an adaptive concurrency limit reads it. A
	// cancel, a refusal, the caller's error and a request the server did
	// not process are not losses.
	Lost bool
}

// Judge decides the [Verdict] of the outcome o. o.CallerEnded says whether
// the caller's own context had ended, canceled or past its deadline;
// o.Canceled, whether it was canceled: a cancel is no loss, a deadline is.
// o.NotConnected says whether no connection was made. It is the one rule
// for an attempt: a stack judges each attempt once, and its layers read
// the one verdict.
//
// The outcome says nothing of the host (HostIgnored) when:
//
//   - the caller ended the attempt;
//   - the request could not be sent as written ([IsCallerError]);
//   - a layer refused it unsent;
//   - or net/http proves the server did not process it ([NotProcessed]).
//
// Otherwise an error or a 5xx is HostFailing. Any other response, 4xx
// included, is HostHealthy: a 429 is for rate limiting to handle, not for a
// breaker.
func Judge(o Outcome) Verdict {
	if o.Err == nil && o.Response != nil {
		return JudgeStatus(o.Response.StatusCode)
	}
	return judgeFailure(&o)
}

// JudgeStatus is [Judge]'s verdict on an attempt answered with the status
// code c, for callers that have a response and no error.
func JudgeStatus(c int) Verdict {
	v := Verdict{Sent: true, Host: HostHealthy}
	v.Accepted = StatusAccepted(c)
	v.Lost = !v.Accepted
	v.Overloaded = c == http.StatusServiceUnavailable || c == 529
	if c >= 500 {
		v.Host = HostFailing
	}
	return v
}

// StatusAccepted reports whether a response with the status code c
// shows the server took the request: a status under 500 other than 429
// ([Verdict].Accepted).
func StatusAccepted(c int) bool { return c < 500 && c != http.StatusTooManyRequests }

// judgeFailure is Judge's verdict on an error, or on no response.
func judgeFailure(o *Outcome) Verdict {
	req, err := o.Request, o.Err
	var v Verdict
	if err != nil {
		v.Refusal, _ = RefusedBy(err)
		caller := IsCallerError(req, err)
		_, unprocessed := NotProcessed(err)
		v.Sent = v.Refusal == "" && !caller && !unprocessed && !notConnected(o)
		if o.canceled() || caller || v.Refusal != "" {
			return v // HostIgnored
		}
		if unprocessed {
			return v // HostIgnored: a server draining its connections for a deploy is not failing
		}
		if _, ok := LocalFinal(err); ok {
			return v // HostIgnored: the host answered; the client could not take its answer
		}
		v.Lost = true // a timeout of the caller's too
		if !o.CallerEnded {
			v.Host = HostFailing
		}
		return v
	}
	v.Sent, v.Lost = true, true
	v.Host = HostFailing // no response and no error: a broken RoundTripper
	return v
}

// notConnected reports whether o's error proves that no connection was
// made: a dial that failed, or o.NotConnected.
func notConnected(o *Outcome) bool {
	if o.NotConnected {
		return true
	}
	var op *net.OpError
	return errors.As(o.Err, &op) && op.Op == "dial"
}
