package ratelimit

import (
	"errors"
	"strconv"
	"time"
)

// ErrQuotaExhausted is matched, with [errors.Is], by every error of a
// request that failed fast because the wait for its quota could not end in
// time. The error is a [*QuotaError], which says when the quota resets.
var ErrQuotaExhausted = errors.New("ratelimit: quota exhausted")

// QuotaError is the error of a request that was not sent because its wait
// (for a quota reset, a server-asked pause or the client-side limiter)
// would have run past the request's deadline, [Options.MaxWait], or, for a
// server-asked wait, [Options.MaxServerWait].
type QuotaError struct {
	// Key is the quota key of the request, by default "scheme://host".
	Key string
	// Reset is when the quota is expected to have room again; for a
	// server's pause ([ReasonRetryAfter]), when the host resumes, which
	// is the end of its Hold when it has one.
	Reset time.Time
	// Wait is how long the request would have had to wait, from the
	// moment it was rejected, until Reset.
	Wait time.Duration
	// Reason says what the wait was for: one of the Reason constants
	// ([ReasonQuota], [ReasonRetryAfter], ...).
	Reason string
	// Status is the status of the response that paused the host
	// ([ReasonRetryAfter]); zero when no response did (Tracker.Pause).
	Status int
	// RetryAfter is the pause the response's Retry-After asked for, as
	// read; zero for a pause after a 429 that named no wait.
	RetryAfter time.Duration
	// Hold is how long the host (or the quota's routes) is held when
	// the server asked for longer than [Options.MaxPause]; zero otherwise.
	Hold time.Duration
}

// Error returns a message that says what holds the request, such as
// "ratelimit: quota exhausted for https://api.example.com (resets in 4.2s)"
// or "ratelimit: https://api.example.com paused by the server's
// Retry-After on a 503 for 8760h0m0s; holding 1m0s (resumes in 59.9s)".
func (e *QuotaError) Error() string {
	wait := roundWait(e.Wait).String()
	hold := ""
	if e.Hold > 0 {
		hold = "; holding " + roundWait(e.Hold).String()
	}
	switch e.Reason {
	case ReasonRetryAfter:
		var by string
		switch {
		case e.RetryAfter > 0 && e.Status > 0:
			by = " by the server's Retry-After on a " + strconv.Itoa(e.Status) + " for " + roundWait(e.RetryAfter).String()
		case e.RetryAfter > 0:
			by = " for " + roundWait(e.RetryAfter).String()
		case e.Status > 0:
			by = " after a " + strconv.Itoa(e.Status) + " that named no wait"
		}
		return "ratelimit: " + e.Key + " paused" + by + hold + " (resumes in " + wait + ")"
	case ReasonClientRate, ReasonThrottle, ReasonReleaseRate, ReasonFleet:
		return "ratelimit: " + e.Key + " held by the " + reasonNames[e.Reason] + " for " + wait
	}
	return "ratelimit: quota exhausted for " + e.Key + " (resets in " + wait + hold + ")"
}

// reasonNames names the holds of the Tracker's own making in messages.
var reasonNames = map[string]string{
	ReasonClientRate:  "client-side rate",
	ReasonThrottle:    "rate learned from 429s",
	ReasonReleaseRate: "release after a pause",
	ReasonFleet:       "fleet's shared quota",
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
