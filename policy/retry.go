package policy

import (
	"net/http"
	"time"
)

// Defaults of [Retry], used where a field is zero.
const (
	DefaultMaxAttempts     = 4
	DefaultBackoffBase     = 200 * time.Millisecond
	DefaultBackoffMax      = 30 * time.Second
	DefaultMaxRetryAfter   = 60 * time.Second
	DefaultMaxBufferedBody = 1 << 20  // 1 MiB
	DefaultMaxProblemBody  = 64 << 10 // 64 KiB
)

// Retry is a retry policy: how many attempts, how long between them, what
// is worth another attempt, and how much of a body is kept to replay it.
// The zero value is ready to use, with the defaults each field gives.
type Retry struct {
	// MaxAttempts is the number of attempts, the first one included. Zero
	// or negative means [DefaultMaxAttempts] (4); 1 means no retries. It is
	// an upper bound, and these end an operation sooner:
	//
	//   - The retry budget, when there is one, ends it with
	//     [ReasonBudgetSpent]. It bounds each host's retries to 10 + 20%
	//     of its recent operations. transport.New sets one by default.
	//   - A request that is not [SafeToResend] goes again only after an
	//     outcome that proves the server did not act. A POST nobody
	//     vouched for that fails with a 503 is sent once
	//     ([ReasonNotSafe]).
	//   - An open breaker, a deadline or a long Retry-After end it early
	//     ([ReasonRefused], [ReasonWaitPastDeadline],
	//     [ReasonTooLittleTime], [ReasonRetryAfterTooLong]).
	//
	// net/http itself may send one attempt twice, below this count and
	// unseen by OnAttempt. See docs/design.md in the repository.
	MaxAttempts int

	// Backoff gives the wait before each retry. The wait used is the longer
	// of Backoff's and the server's (Retry-After, retry-after-ms). Nil
	// means FullJitter(DefaultBackoffBase, DefaultBackoffMax): a uniform
	// random wait in [0, min(30s, 200ms*2^attempt)).
	Backoff Backoff

	// MaxRetryAfter is the longest server-asked wait that is honoured. A
	// response that asks for a longer one is handed back to the caller at
	// once. Zero means [DefaultMaxRetryAfter] (60s). Negative means no
	// server-asked wait is ever waited on. It is the Limit of
	// [ServerWait]; in a stack built by transport.New, the rate-limit
	// layer's MaxServerWait is made the same (see [ServerWaitLimit]),
	// so that it bounds the waits a server asked for (a Retry-After, a
	// spent quota's reset) and never those of the client-side rate.
	MaxRetryAfter time.Duration

	// Classify decides whether an attempt's outcome is worth another
	// attempt. Nil means [DefaultClassifier]. A Decision that leaves
	// HasRetryAfter false still waits for the response's Retry-After,
	// within MaxRetryAfter. To retry sooner than the server asked, a
	// classifier sets HasRetryAfter with the wait it wants.
	Classify Classifier

	// MaxBufferedBody is how many bytes of a request body without GetBody
	// are kept in memory to replay it. A longer body is sent once, as it
	// streams, and not retried. Zero means [DefaultMaxBufferedBody] (1
	// MiB). Negative means bodies without GetBody are never kept, so never
	// retried.
	MaxBufferedBody int64

	// MaxProblemBody is how many bytes of an RFC 9457 problem body are read
	// to learn whether the server says the error is retriable. The caller
	// still receives the whole body. Zero means [DefaultMaxProblemBody] (64
	// KiB). Negative means problem bodies are not read.
	MaxProblemBody int64

	// IdempotencyHeader is the request header whose key makes a POST or
	// PATCH safe to send again ([SafeToResend]). Empty means
	// "Idempotency-Key".
	IdempotencyHeader string

	// Budget bounds each host's retries to a fraction of its recent
	// traffic, so a fleet of clients does not multiply the load on a
	// failing server. Nil means no budget.
	Budget *Budget

	// OnAttempt, when set, is called after each attempt with its outcome.
	OnAttempt func(AttemptEvent)

	// OnRetry, when set, is called before each wait for a retry.
	OnRetry func(RetryEvent)

	// OnGiveUp, when set, is called when an operation ends on an error or
	// an error status (400 and above). It gets the reason no further
	// attempt is made.
	OnGiveUp func(GiveUpEvent)
}

// AttemptEvent describes one finished attempt.
type AttemptEvent struct {
	Request  *http.Request // the caller's request
	Attempt  int           // 1 for the first attempt
	Status   int           // the response's status, 0 when the attempt ended in an error
	Err      error         // the attempt's error
	Duration time.Duration // from sending the attempt to its response headers or error
}

// GiveUpEvent describes an operation that ends on a failure.
type GiveUpEvent struct {
	Request  *http.Request // the caller's request
	Attempts int           // attempts made
	Reason   Reason        // why no further attempt is made
	Detail   string        // the classifier's words on the last outcome ("status 503"), or the refusal
	Status   int           // the last attempt's status, 0 when it ended in an error
	Err      error         // the last attempt's error
}

// RetryEvent describes a retry about to happen.
type RetryEvent struct {
	Request *http.Request // the caller's request
	Attempt int           // the attempt that is about to be made, 2 for the first retry
	Wait    time.Duration // how long until it is made
	Reason  string        // why the previous attempt is retried
	Status  int           // the previous attempt's status, 0 when it ended in an error
	Err     error         // the previous attempt's error, nil when it got a response

	// RetryAfter is the wait the server asked for (Retry-After,
	// retry-after-ms), or the classifier's in its place. It is 0 when
	// neither asked. Wait is the longer of it and the backoff.
	RetryAfter time.Duration
}

// WithDefaults returns p with each zero field set to its documented
// default: MaxAttempts, Backoff, MaxRetryAfter, Classify, MaxBufferedBody,
// MaxProblemBody and IdempotencyHeader. Negative limits stay negative: they
// mean "none". Package transport reads a policy through it.
func (p Retry) WithDefaults() Retry {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.Backoff == nil {
		p.Backoff = FullJitter(DefaultBackoffBase, DefaultBackoffMax)
	}
	if p.MaxRetryAfter == 0 {
		p.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if p.Classify == nil {
		p.Classify = DefaultClassifier
	}
	if p.MaxBufferedBody == 0 {
		p.MaxBufferedBody = DefaultMaxBufferedBody
	}
	if p.MaxProblemBody == 0 {
		p.MaxProblemBody = DefaultMaxProblemBody
	}
	if p.IdempotencyHeader == "" {
		p.IdempotencyHeader = "Idempotency-Key"
	}
	return p
}
