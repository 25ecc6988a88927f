package policy

import (
	"context"
	"errors"
	"time"
)

// Reason says why an operation goes on to another attempt or stops. The
// values are constants: stable words that tests compare and logs print.
// [Decision].Reason carries the classifier's own words beside it.
type Reason string

// The reasons of [Retry.Next], in the order it checks them.
const (
	// ReasonRetry: another attempt follows.
	ReasonRetry Reason = "retry"
	// ReasonCanceled: the caller canceled the operation.
	ReasonCanceled Reason = "canceled"
	// ReasonDeadline: the operation's deadline passed.
	ReasonDeadline Reason = "deadline exceeded"
	// ReasonCallerError: the request cannot be sent as written
	// ([IsCallerError]); it is the caller's error, not the host's.
	ReasonCallerError Reason = "caller error"
	// ReasonFinal: the classifier found the outcome not worth another
	// attempt (a success, a 404, a problem with is_retriable: false, ...).
	ReasonFinal Reason = "final outcome"
	// ReasonNotSafe: the outcome is transient, but the server may have
	// acted on a request that is not [SafeToResend], so it is sent once.
	ReasonNotSafe Reason = "not safe to resend"
	// ReasonAttemptsUsed: MaxAttempts attempts were made.
	ReasonAttemptsUsed Reason = "attempts used"
	// ReasonBodyNotReplayable: the body was too long to keep for replay,
	// or GetBody failed to give it again.
	ReasonBodyNotReplayable Reason = "body not replayable"
	// ReasonRetryAfterTooLong: the server asked for a wait longer than
	// MaxRetryAfter.
	ReasonRetryAfterTooLong Reason = "retry-after too long"
	// ReasonWaitPastDeadline: the wait before the next attempt would not
	// end before the operation's deadline.
	ReasonWaitPastDeadline Reason = "wait would pass the deadline"
	// ReasonTooLittleTime: the wait before the next attempt would end
	// with less time left before the deadline than the fastest attempt of
	// the operation took: the attempt could not use it.
	ReasonTooLittleTime Reason = "too little time left for an attempt"
	// ReasonRefused: a layer beneath (an open circuit breaker) would
	// refuse the next attempt when the wait ends.
	ReasonRefused Reason = "next attempt refused"
	// ReasonBudgetSpent: the host's retry budget has no retry left.
	ReasonBudgetSpent Reason = "retry budget spent"
	// ReasonCircuitOpen: an open circuit breaker refused the request
	// unsent.
	ReasonCircuitOpen Reason = "circuit open"
	// ReasonRateLimited: a spent quota or a host paused by its server
	// refused the request unsent.
	ReasonRateLimited Reason = "rate limited"
	// ReasonThrottled: the client's adaptive throttle shed the request
	// unsent.
	ReasonThrottled Reason = "throttled"
)

// State is what [Retry.Next] knows after an attempt.
type State struct {
	// Outcome is the attempt's outcome; Outcome.Attempt is its number.
	Outcome Outcome
	// SafeToResend reports whether the request may be sent again whatever
	// became of it ([SafeToResend]).
	SafeToResend bool
	// Replayable reports whether the request's body can be sent again
	// (it has none, has GetBody, or was kept in memory).
	Replayable bool
	// PrevWait is the wait before this attempt; 0 before the first retry.
	PrevWait time.Duration
	// Done is the cause of the operation's context once it is done (see
	// [context.Cause]); nil while it lives. The operation was canceled
	// when Done is [context.Canceled] or Outcome.Canceled says so (a
	// cancel with a cause); else its deadline passed.
	Done error
	// Deadline is the operation's deadline; zero means none.
	Deadline time.Time
	// Fastest is the shortest time an attempt of this operation took, from
	// its sending to its outcome; zero when not known. No attempt is
	// started with less time left before Deadline than Fastest: it could
	// not use what it would have.
	Fastest time.Duration
	// Refused, when set, tells whether a layer beneath would refuse an
	// attempt made at the time at, and with what error; nil means no.
	Refused func(at time.Time) error
	// FreeResends is how many free resends (see [Step].Free) the
	// operation has made so far.
	FreeResends int
	// Budget, when set, takes one retry from the host's retry budget and
	// reports whether there was one. Next calls it last, only when
	// everything else allows the retry. So a retry that does not happen is
	// never taken from the budget.
	Budget func() bool
}

// Step is the decision of [Retry.Next].
type Step struct {
	// Retry reports whether another attempt is made, after Wait.
	Retry bool
	// Wait is how long to wait before the next attempt: the longer of
	// Backoff's and the server's (Retry-After, retry-after-ms).
	Wait time.Duration
	// Reason is why: [ReasonRetry], or why the operation stops here.
	Reason Reason
	// Decision is the classifier's verdict on the outcome, when it was
	// asked (Decision.Reason says "status 503", "dial error", ...).
	Decision Decision
	// Refusal is the error a layer beneath would have returned, for
	// [ReasonRefused].
	Refusal error
	// Free reports a free resend: the outcome proves that the server did
	// not process the request ([NotProcessed]), so it is sent again at
	// once as the same attempt, with no wait, no budget, and not counted
	// against MaxAttempts. net/http would have made this replay itself,
	// had the attempt carried GetBody.
	Free bool
}

// MaxFreeResends bounds the free resends of one operation (see
// [Step].Free): a server that refuses every stream is not asked forever,
// and its outcome then goes through the usual rules.
const MaxFreeResends = 3

// Next decides what follows an attempt: another one after a wait, or the
// end of the operation, and why. It is pure: everything it knows is in s
// and p. transport.Retry only carries its decision out. It checks, in
// order:
//
//   - a canceled or expired operation stops;
//   - a request that cannot be sent as written stops ([IsCallerError]);
//   - an outcome that proves the server did not process the request
//     ([NotProcessed]) is sent again at once, for free ([Step].Free),
//     whoever vouched for it, when its body can be had again, up to
//     [MaxFreeResends] times;
//   - an outcome the classifier finds final stops;
//   - a request that is not [SafeToResend] stops, unless the outcome
//     proves that the server did not act ([Decision].DidNotAct);
//   - then MaxAttempts, a body that cannot be replayed, and a server-asked
//     wait over MaxRetryAfter;
//   - then a wait that would pass the deadline, or would leave less time
//     before it than the fastest attempt of the operation took
//     (State.Fastest), a layer beneath that would refuse the next
//     attempt, and last the retry budget.
//
// The zero fields of p mean their defaults.
func (p Retry) Next(s State) Step {
	p = p.WithDefaults()
	o := s.Outcome
	if s.Done != nil {
		if o.Canceled || errors.Is(s.Done, context.Canceled) {
			return Step{Reason: ReasonCanceled}
		}
		return Step{Reason: ReasonDeadline}
	}
	if o.Err != nil && IsCallerError(o.Request, o.Err) {
		return Step{Reason: ReasonCallerError, Decision: Decision{Reason: "invalid request"}}
	}
	if o.Err != nil && s.Replayable && s.FreeResends < MaxFreeResends {
		if row, ok := NotProcessed(o.Err); ok {
			return Step{Retry: true, Free: true, Reason: ReasonRetry,
				Decision: Decision{Retry: true, DidNotAct: true, Reason: "not processed: " + row.Name}}
		}
	}
	d := p.Classify(o)
	if !d.HasRetryAfter && o.Response != nil {
		// A custom classifier that says nothing of the wait still
		// retries a response whose server asked for one.
		d.RetryAfter, d.HasRetryAfter = ResponseRetryAfter(o.Response.Header, o.Now)
	}
	st := Step{Decision: d}
	switch {
	case !d.Retry:
		st.Reason = ReasonFinal
		return st
	case !s.SafeToResend && !d.DidNotAct:
		st.Reason = ReasonNotSafe
		return st
	case o.Attempt >= p.MaxAttempts:
		st.Reason = ReasonAttemptsUsed
		return st
	case !s.Replayable:
		st.Reason = ReasonBodyNotReplayable
		return st
	}
	wait := p.Backoff(o.Attempt, s.PrevWait)
	if d.HasRetryAfter {
		if !(ServerWait{Limit: p.MaxRetryAfter}).Waits(d.RetryAfter) {
			st.Reason = ReasonRetryAfterTooLong
			return st
		}
		wait = max(wait, d.RetryAfter)
	}
	st.Wait = wait
	at := o.Now.Add(wait)
	if !s.Deadline.IsZero() && !at.Before(s.Deadline) {
		st.Reason = ReasonWaitPastDeadline
		return st
	}
	if !s.Deadline.IsZero() && s.Fastest > 0 && s.Deadline.Sub(at) < s.Fastest {
		st.Reason = ReasonTooLittleTime
		return st
	}
	if s.Refused != nil {
		if err := s.Refused(at); err != nil {
			st.Reason, st.Refusal = ReasonRefused, err
			return st
		}
	}
	if s.Budget != nil && !s.Budget() {
		st.Reason = ReasonBudgetSpent
		return st
	}
	st.Retry, st.Reason = true, ReasonRetry
	return st
}
