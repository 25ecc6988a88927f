package policy

import "errors"

// Refusal is implemented by the errors of requests that a layer refused
// before sending them. The layer is an open circuit breaker, a spent quota
// or a throttle. Such a request never reached the server. It is no attempt,
// uses no quota and says nothing of the host.
type Refusal interface {
	error
	// RefusedBy names what refused the request, as a [Reason]:
	// "circuit open", "rate limited" or "throttled".
	RefusedBy() string
}

// RefusedBy reports whether err, or an error it wraps, is a layer's
// refusal of a request it never sent, and names the refusal.
func RefusedBy(err error) (Reason, bool) {
	if err == nil {
		return "", false
	}
	var r Refusal
	if !errors.As(err, &r) {
		return "", false
	}
	return Reason(r.RefusedBy()), true
}
