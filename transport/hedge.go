package transport

import (
	"context"
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hedge"
	"github.com/sturdyhttp/sturdy/internal/timecut"

	"github.com/sturdyhttp/sturdy/policy"
)

// Hedge returns a middleware that sends hedged requests as policy h says:
// when the first copy of a request that is safe to send twice (the rule
// [Retry] uses: [policy.SafeToResend]) has no response headers after a
// delay, another copy is sent, up to h.MaxHedges (1 by default) more. The
// delay is h.Delay, or, when it is zero, the 95th percentile of the
// host's recent latencies (see [policy.Latencies]). A stream beneath a
// [FirstEvent] layer (as in [New]) answers at its first content event, so
// its hedges, and the latencies learned, are timed to that event.
//
//   - The first acceptable response wins: a response that h.Classify (the
//     retry classifier) would retry, or an error, does not win while
//     another copy is still running. When every copy has failed, the
//     first failed response is returned (or the first error when none
//     got a response), and no further hedge is sent after a failure:
//     trying again is [Retry]'s job, with its backoff.
//   - Every other copy is canceled at once; a response it had already is
//     drained (bounded) and closed in the background, and canceled if its
//     body does not end within a second; one that arrives after the
//     cancel is closed (its connection is being torn down: a drain would
//     read nothing). The race never waits on a losing copy.
//   - The winner is handed back as it came: its context is not canceled
//     by the hedge (it is released when its body is read to the end or
//     closed), so its body stays readable after RoundTrip returns.
//   - Each copy's body is the caller's, byte for byte: through GetBody when
//     the request has it, else from a copy kept in memory (up to
//     h.MaxBufferedBody) as the first copy sends it; a request with a
//     longer body is not hedged, nor is one whose first copy is still
//     sending its body (it is hedged once the body has been sent whole).
//   - Each hedge draws on h.Budget, when set, as a retry does; when it is
//     spent, no hedge is sent. The caller's context is the parent of every
//     copy: canceling it cancels them all at once.
//
// Place it inside Retry and outside [RateLimitAware] and [Breaker]: each
// copy is a request the server counts and the breaker judges (in [New],
// a hedge is sent only while its host's breaker is closed; a copy that a
// breaker beneath refuses unsent never replaces another copy's outcome).
// With a nil h.Budget, hedges draw on the budget of a [Retry] above,
// when it has one; a Retry above that shares h.Budget counts the
// operations, and the Hedge then counts only its hedges.
func Hedge(h policy.Hedge) Middleware {
	return hedgeMiddleware(h, budgetOf(h.Budget))
}

// hedgeMiddleware is Hedge drawing on budget when no Retry above shares
// its own.
func hedgeMiddleware(h policy.Hedge, budget retryBudget) Middleware {
	c := &hedgeConfig{
		Config: hedge.Config{
			Policy:     h,
			Hedges:     h.Hedges(),
			Classify:   h.Classifier(),
			DefaultCls: h.Classify == nil,
			ProbLimit:  h.ProblemLimit(),
			KeyHeader:  h.KeyHeader(),
			OnHedge:    h.OnHedge,
			OnWon:      h.OnHedgeWon,
			OnCancel:   h.OnCopyCanceled,
			HostKey:    HostKey,
		},
		fixed:    h.Delay,
		floor:    h.DelayFloor(),
		budget:   budget,
		bufLimit: h.BufferLimit(),
	}
	return func(next http.RoundTripper) http.RoundTripper {
		t := &hedger{next: orDefault(next), c: c}
		if h.Adaptive() {
			t.lat = &policy.Latencies{Quantile: h.Quantile}
		}
		return t
	}
}

// hedgeConfig is what a Hedge layer's races share, and what decides
// whether a request races.
type hedgeConfig struct {
	hedge.Config
	fixed, floor time.Duration
	budget       retryBudget
	bufLimit     int64
}

type hedger struct {
	next http.RoundTripper
	c    *hedgeConfig
	lat  *policy.Latencies // nil with a fixed delay
}

// out returns a copy's outcome to the layer above: a stream judged a
// failed attempt is restored unless a Retry above (found through the
// operation, whatever stands between) may still try again.
func (t *hedger) out(req *http.Request, resp *http.Response, err error) (*http.Response, error) {
	if err != nil || resp == nil || resp.StatusCode < 400 || opOf(req.Context()).retryConfig() != nil {
		return resp, err
	}
	return restoreStreamErr(resp, err)
}

func (t *hedger) CloseIdleConnections() { closeIdle(t.next) }

// The operation is the [hedge.Stack] of its Hedge's race.

// HedgeRefused is hedgeRefusedAt.
func (op *operation) HedgeRefused(r *http.Request, at time.Time) error {
	return op.hedgeRefusedAt(r, at)
}

// Copy returns ctx marked as the context of hedge copy i.
func (op *operation) Copy(ctx context.Context, i int) context.Context {
	return withScope(ctx, func(s *scope) { s.copy = i })
}

// AttemptOf is [AttemptFromContext].
func (op *operation) AttemptOf(ctx context.Context) int { return AttemptFromContext(ctx) }

// HedgeCopyFromContext returns which copy of a hedged request a request
// is, as set by [Hedge] on each copy's context: 1 for the first copy, 2
// for the first hedge, and so on; 0 for a request that no hedge race
// sent. RoundTrippers beneath Hedge, such as a tracing transport, can
// use it; a copy's attempt is [AttemptFromContext].
func HedgeCopyFromContext(ctx context.Context) int {
	if s := scopeOf(ctx); s != nil {
		return s.copy
	}
	return 0
}

func (t *hedger) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.c
	if req.URL == nil || c.Hedges == 0 || attemptsOf(req.Context()) == 1 { // WithAttempts(ctx, 1): sent once
		resp, err := t.next.RoundTrip(req)
		return t.out(req, resp, err)
	}
	op, req := withOp(req)
	start := time.Now()
	budget := c.budget
	if rc := op.retryConfig(); rc != nil && rc.budget != nil && (budget == nil || budget == rc.budget) {
		budget = rc.budget // the Retry above counted the operation in it
	} else if budget != nil {
		budget.Request(req.URL, timecut.Of(start))
	}
	h := &hedge.Race{C: &c.Config, Next: t.next, Lat: t.lat, Req: req, St: op, Budget: budget,
		Start: start, Delay: c.fixed, Floor: c.floor, BufLimit: c.bufLimit}
	resp, err := h.Do()
	return t.out(req, resp, err)
}
