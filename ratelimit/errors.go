package ratelimit

import (
	"errors"
	"time"
)

// ErrQuotaExhausted is matched, with [errors.Is], by every error of a
// request that failed fast because the wait for its quota could not end in
// time. The error is a [*QuotaError], which says when the quota resets.
var ErrQuotaExhausted = errors.New("ratelimit: quota exhausted")

// QuotaError is the error of a request that was not sent because its wait
// (for a quota reset, a server-asked pause or the client-side limiter)
// would have run past the request's deadline or [Options.MaxWait].
type QuotaError struct {
	// Key is the quota key of the request, by default "scheme://host".
	Key string
	// Reset is when the quota is expected to have room again.
	Reset time.Time
	// Wait is how long the request would have had to wait, from the
	// moment it was rejected.
	Wait time.Duration
	// Reason says what the wait was for: one of the Reason constants
	// ([ReasonQuota], [ReasonRetryAfter], ...).
	Reason string
}

// Error returns a message such as
// "ratelimit: quota exhausted for https://api.example.com (resets in 4.2s)".
func (e *QuotaError) Error() string {
	return "ratelimit: quota exhausted for " + e.Key + " (resets in " + roundWait(e.Wait).String() + ")"
}

// Unwrap returns [ErrQuotaExhausted].
func (e *QuotaError) Unwrap() error { return ErrQuotaExhausted }

// Is reports whether target is [ErrQuotaExhausted].
func (e *QuotaError) Is(target error) bool { return target == ErrQuotaExhausted }

// Retriable returns false: a quota that cannot be waited out in time will
// not be there sooner on a second attempt, so a retry layer must hand the
// error to the caller rather than try again.
func (e *QuotaError) Retriable() bool { return false }

// roundWait rounds d for a message: tenths of a second above a second,
// milliseconds below.
func roundWait(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// RefusedBy returns "rate limited": the request was refused unsent (see
// policy.Refusal in package policy).
func (e *QuotaError) RefusedBy() string { return "rate limited" }
