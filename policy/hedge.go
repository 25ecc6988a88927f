package policy

import (
	"net/http"
	"time"
)

// Defaults of [Hedge], used where a field is zero.
const (
	DefaultMaxHedges     = 1
	DefaultHedgeQuantile = DefaultLatencyQuantile
	DefaultHedgeMinDelay = time.Millisecond
)

// Hedge is a hedging policy. When the first copy of a request that is safe
// to send twice has no response headers after a delay, another copy is
// sent. The first acceptable response wins. The zero value is ready to use:
// one hedge, sent after the host's 95th percentile of recent latencies.
type Hedge struct {
	// Delay is how long a copy may go without response headers before the
	// next copy is sent. Zero means adaptive: the Quantile of the host's
	// recent latencies (see [Latencies]), but at least MinDelay. A host
	// with fewer than [DefaultLatencyMinSamples] known latencies is not
	// hedged until it has them.
	Delay time.Duration

	// Quantile is the quantile of recent latencies that an adaptive delay
	// waits for, in (0, 1). 0.95 hedges about one request in twenty. Zero
	// means [DefaultHedgeQuantile] (0.95).
	Quantile float64

	// MinDelay is the shortest adaptive delay, so that a very fast host
	// is not hedged on noise. Zero means [DefaultHedgeMinDelay] (1ms).
	MinDelay time.Duration

	// MaxHedges is how many copies may be sent beyond the first, one per
	// Delay. Zero means [DefaultMaxHedges] (1). Negative means none: the
	// middleware passes requests through.
	MaxHedges int

	// Budget, when set, is drawn on for every hedge as for a retry. When it
	// is spent, no hedge is sent. Share the [Retry] policy's Budget so that
	// retries and hedges together stay within one bound per host. With the
	// Hedge just beneath the Retry, as transport.New places it, the Retry
	// alone counts the operations. Nil means no budget.
	Budget *Budget

	// Classify decides which responses may not win while another copy is
	// still running: those it would retry. Nil means [DefaultClassifier].
	Classify Classifier

	// MaxBufferedBody is how many bytes of a request body without GetBody
	// are kept in memory to send it again. A request with a longer body is
	// not hedged. Zero means [DefaultMaxBufferedBody] (1 MiB). Negative
	// means bodies without GetBody are never kept, so such requests are
	// never hedged.
	MaxBufferedBody int64

	// MaxProblemBody is how many bytes of an RFC 9457 problem body are
	// read for Classify. Zero means [DefaultMaxProblemBody] (64 KiB);
	// negative means none.
	MaxProblemBody int64

	// IdempotencyHeader is the request header whose presence makes a POST
	// or PATCH safe to send twice. Empty means "Idempotency-Key".
	IdempotencyHeader string

	// OnHedge, when set, is called when a hedge (a copy after the first)
	// is sent.
	OnHedge func(HedgeEvent)

	// OnHedgeWon, when set, is called when a hedge's response wins over
	// the first copy.
	OnHedgeWon func(HedgeEvent)

	// OnCopyCanceled, when set, is called for every copy still running
	// when another copy's response won, as it is canceled.
	OnCopyCanceled func(HedgeEvent)
}

// HedgeEvent describes a copy of a hedged request.
type HedgeEvent struct {
	Request *http.Request // the caller's request
	Copy    int           // which copy: 1 for the first, 2 for the first hedge
	Elapsed time.Duration // since the first copy was sent
	Status  int           // the winning response's status (OnHedgeWon), else 0
}

// Hedges returns MaxHedges or its default; 0 means no hedging.
func (h Hedge) Hedges() int {
	switch {
	case h.MaxHedges < 0:
		return 0
	case h.MaxHedges == 0:
		return DefaultMaxHedges
	}
	return h.MaxHedges
}

// Adaptive reports whether the delay comes from recent latencies.
func (h Hedge) Adaptive() bool { return h.Delay <= 0 }

// DelayFloor returns MinDelay or its default.
func (h Hedge) DelayFloor() time.Duration {
	if h.MinDelay <= 0 {
		return DefaultHedgeMinDelay
	}
	return h.MinDelay
}

// Classifier returns Classify or [DefaultClassifier].
func (h Hedge) Classifier() Classifier {
	if h.Classify == nil {
		return DefaultClassifier
	}
	return h.Classify
}

// BufferLimit returns MaxBufferedBody or its default; negative means none.
func (h Hedge) BufferLimit() int64 {
	return Retry{MaxBufferedBody: h.MaxBufferedBody}.WithDefaults().MaxBufferedBody
}

// ProblemLimit returns MaxProblemBody or its default; negative means none.
func (h Hedge) ProblemLimit() int64 {
	return Retry{MaxProblemBody: h.MaxProblemBody}.WithDefaults().MaxProblemBody
}

// KeyHeader returns IdempotencyHeader or "Idempotency-Key".
func (h Hedge) KeyHeader() string {
	return Retry{IdempotencyHeader: h.IdempotencyHeader}.WithDefaults().IdempotencyHeader
}

// HedgeState is what [Hedge.Next] knows when a copy's delay ends.
type HedgeState struct {
	// Sent is how many copies have been sent, the first included.
	Sent int
	// Answered reports that a copy has its response (or its error):
	// no further copy is needed.
	Answered bool
	// Failed reports that a copy failed: trying again is Retry's job,
	// with its backoff, not a hedge's.
	Failed bool
	// Done is the cause of the operation's context once it is done; nil
	// while it lives.
	Done error
	// BodySent reports that the first copy has sent its whole body, so
	// that the body kept as it went can be sent again.
	BodySent bool
	// Now is when the delay ended.
	Now time.Time
	// Refused, when set, tells whether a layer beneath would refuse a
	// copy sent at the time at (an open or half-open breaker).
	Refused func(at time.Time) error
	// Budget, when set, takes one retry from the host's budget and reports
	// whether there was one. Next calls it last.
	Budget func() bool
}

// HedgeStep is the decision of [Hedge.Next] when a copy's delay ends.
type HedgeStep int8

// The steps of [Hedge.Next].
const (
	// HedgeStop: no copy now, and none later.
	HedgeStop HedgeStep = iota
	// HedgeLater: no copy now; look again after another delay.
	HedgeLater
	// HedgeSend: send a copy now.
	HedgeSend
)

// Next decides whether a copy is sent when a delay ends. It checks, in
// order:
//
//   - no copy once one has answered or failed, the operation is done, or
//     MaxHedges copies beyond the first have been sent;
//   - none yet while the first copy still sends its body;
//   - none when a layer beneath would refuse it unsent;
//   - and last, none when the budget is spent.
func (h Hedge) Next(s HedgeState) HedgeStep {
	switch {
	case s.Answered || s.Failed || s.Done != nil || s.Sent > h.Hedges():
		return HedgeStop
	case !s.BodySent:
		return HedgeLater
	case s.Refused != nil && s.Refused(s.Now) != nil:
		return HedgeStop
	case s.Budget != nil && !s.Budget():
		return HedgeStop
	}
	return HedgeSend
}

// HedgeStart is what [Hedge.Race] decides on: what is known of a request
// before any copy of it is sent.
type HedgeStart struct {
	// SafeToResend reports whether the request may be sent twice
	// ([SafeToResend]).
	SafeToResend bool
	// DelayKnown reports whether the delay before a hedge is known: a
	// fixed Delay, or latencies learned from the host. With neither, the
	// request is sent once, and its latency learned.
	DelayKnown bool
	// Replayable reports whether the request's body can be had for a
	// second copy (none, GetBody, or kept in memory under the limit).
	Replayable bool
}

// Race reports whether a request is raced as hedged copies, rather than
// sent once: hedging is on (MaxHedges is not negative), the request is
// safe to send twice, the delay is known and the body can be had again.
func (h Hedge) Race(s HedgeStart) bool {
	return h.Hedges() > 0 && s.SafeToResend && s.DelayKnown && s.Replayable
}
