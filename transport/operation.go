package transport

import (
	"context"
	"github.com/sturdyhttp/sturdy/internal/timecut"
	"github.com/sturdyhttp/sturdy/internal/verdict"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
	"github.com/sturdyhttp/sturdy/ratelimit"
)

// The layers of a stack cooperate through each operation's context, never
// by reference: context values pass through any RoundTripper in between
// (an OpenTelemetry transport, an SDK's logger, an oauth2 transport),
// since a clone keeps them. So a stack built with [Chain] from the same
// layers behaves as [New], whatever stands between them.
//
// One value travels there, under one key: a scope, which names the
// operation (made once, by the first sturdy layer that finds none) and
// the innermost bound above (whose deadline waits draw on, whose idle cut
// failed bodies are read with, and whose deadline a stream's read ahead
// holds off), and each attempt's verdict (see verdictOf). Nothing is
// written into a layer by the requests that pass it: what a layer learns
// of the others as an operation runs is written into that operation.

// operation is what the layers of a stack know of one operation.
type operation struct {
	start time.Duration // clockNow when the first sturdy layer met it
	// retry is the Retry layer that counted the operation in its budget:
	// a Hedge beneath draws its hedges from the same budget. Written by
	// that Retry before it sends anything.
	retry *retryConfig
	// breakers and tracker are the Breaker and RateLimitAware that
	// judged the operation's last failed attempt: Retry and Hedge ask
	// them whether a later attempt would be refused, so that nothing
	// waits only to be refused.
	breakers atomic.Pointer[Breakers]
	tracker  atomic.Pointer[ratelimit.Tracker]
	// ep is what Endpoints keeps of the operation; nil without them.
	ep *endpointOp
	// What Retry says of how the operation ended, for OperationOf.
	attempts int
	reason   policy.Reason
	waited   time.Duration
}

// scope is the value under opKey: the operation as the layer that reads
// it sees it. A layer that adds to it (a bound, an attempt, a hedge copy,
// a Throttle, a judged stream) puts a copy with its part set under the
// same key.
type scope struct {
	op        *operation
	bound     *timecut.Watch // the innermost bound of New above; nil: none
	attempt   int            // the attempt's number (see AttemptFromContext); 0: the first
	copy      int            // the hedge copy's number (see HedgeCopyFromContext); 0: none
	throttled bool           // a Throttle above passed the request
	held      *heldStream    // the stream a failed attempt holds (see restoreStream)
	readBody  int64          // WithReadBody's limit; 0: the stack's
	attempts  int            // WithAttempts's attempts; 0: the stack's
	addr      string         // the address Endpoints.PerAddress sent the attempt to
	judged    *verdict.Kept  // the attempt's verdict (see verdictOf); nil: none kept
}

// withScope returns ctx with a copy of its scope (an empty one when it
// has none) changed by set. A new attempt or hedge copy gets a verdict of
// its own; a scope of no operation (the caller's, maybe shared) none.
func withScope(ctx context.Context, set func(*scope)) context.Context {
	s := &scope{}
	p := scopeOf(ctx)
	if p != nil {
		*s = *p
	}
	set(s)
	switch {
	case s.op == nil:
		s.judged = nil
	case p == nil || s.judged == nil || s.attempt != p.attempt || s.copy != p.copy:
		s.judged = &verdict.Kept{} // a retry's attempt or a hedge's copy, which allocate more already
	}
	return context.WithValue(ctx, opKey{}, s)
}

// verdictOf returns the verdict of the attempt req that ended with resp
// and err, judged once per attempt and kept on its scope (see
// verdict.Of); where no scope keeps one (a layer used alone), by the
// same rule.
func verdictOf(req *http.Request, resp *http.Response, err error) policy.Verdict {
	var k *verdict.Kept
	if s := scopeOf(req.Context()); s != nil {
		k = s.judged
	}
	return verdict.Of(k, req, resp, err, callerEnded)
}

type opKey struct{}

// scopeOf returns the scope that ctx carries, nil when none does.
func scopeOf(ctx context.Context) *scope {
	s, _ := ctx.Value(opKey{}).(*scope)
	return s
}

// opOf returns the operation that ctx carries, nil when none does.
func opOf(ctx context.Context) *operation {
	if s := scopeOf(ctx); s != nil {
		return s.op
	}
	return nil
}

// opScope is a scope, its operation and its first attempt's kept verdict,
// allocated together.
type opScope struct {
	s  scope
	op operation
	j  verdict.Kept
}

// withOp returns req's operation, and req with it: req itself when its
// context carries one, else a copy whose context carries a new one.
func withOp(req *http.Request) (*operation, *http.Request) {
	ps := scopeOf(req.Context())
	if ps != nil && ps.op != nil {
		return ps.op, req
	}
	o := &opScope{}
	if ps != nil {
		o.s = *ps
	}
	o.op.start = timecut.Now()
	o.s.op, o.s.judged = &o.op, &o.j
	return &o.op, req.WithContext(context.WithValue(req.Context(), opKey{}, &o.s))
}

// refusedAt returns the error that an attempt of req made at the time
// at would meet from the layers beneath: an open breaker, a host paused
// or a quota spent past at. Nil means it would be sent.
func (op *operation) refusedAt(req *http.Request, at time.Time) error {
	if op == nil {
		return nil
	}
	req = routeOf(req, at) // the origin an attempt would go to (Endpoints.Alternates)
	if b := op.breakers.Load(); b != nil {
		if err := b.refusedAt(req, at); err != nil {
			return err
		}
	}
	if t := op.tracker.Load(); t != nil {
		dl, _ := deadlineOf(req.Context())
		return t.RefusedAtWithin(req, at, dl)
	}
	return nil
}

// hedgeRefusedAt is refusedAt for a hedge: a copy beside one sent
// already, which a breaker that is not closed refuses (see
// Breakers.hedgeRefusedAt).
func (op *operation) hedgeRefusedAt(req *http.Request, at time.Time) error {
	if op == nil {
		return nil
	}
	req = routeOf(req, at) // the origin a hedge would go to (Endpoints.Alternates)
	if b := op.breakers.Load(); b != nil {
		return b.hedgeRefusedAt(req, at)
	}
	return nil
}

// retryConfig returns the Retry layer above that counts the operation in
// its budget, nil when there is none.
func (op *operation) retryConfig() *retryConfig {
	if op == nil {
		return nil
	}
	return op.retry
}

// joinBreakers tells the operation that ctx carries of the Breakers b,
// which judged one of its attempts: a Retry or Hedge above then asks b
// whether a later attempt would be refused.
func joinBreakers(ctx context.Context, b *Breakers) {
	if op := opOf(ctx); op != nil && op.breakers.Load() != b {
		op.breakers.Store(b)
	}
}

// joinTracker tells the operation that ctx carries of the quota tracker
// t beneath.
func joinTracker(ctx context.Context, t *ratelimit.Tracker) {
	if op := opOf(ctx); op != nil && op.tracker.Load() != t {
		op.tracker.Store(t)
	}
}

// idleCut returns the Timeout bound above whose idle cut failed bodies
// are read with, nil when there is none.
func idleCut(ctx context.Context) *timecut.Watch {
	s := scopeOf(ctx)
	if s == nil {
		return nil
	}
	for w := s.bound; w != nil; w = w.Up {
		if w.L.Idle > 0 && w.L.Name == boundTimeout {
			return w
		}
	}
	return nil
}

// deadlineOf returns the deadline that bounds the work of ctx: the
// sooner of its own and those of the bounds of [New] above, whose
// deadlines a stream may outlive and which are therefore enforced by
// their watch rather than by the context.
func deadlineOf(ctx context.Context) (time.Time, bool) {
	return deadlineOfScope(ctx, scopeOf(ctx))
}

// deadlineOfScope is deadlineOf with ctx's scope, s, found already.
func deadlineOfScope(ctx context.Context, s *scope) (time.Time, bool) {
	dl, ok := ctx.Deadline()
	if s == nil {
		return dl, ok
	}
	for w := s.bound; w != nil; w = w.Up {
		if due, armed := w.Deadline(); armed {
			if t := timecut.Time(due); !ok || t.Before(dl) {
				dl, ok = t, true
			}
		}
	}
	return dl, ok
}

// startOf returns when the operation of ctx began, on the bounds' clock.
func startOf(ctx context.Context) time.Duration {
	if op := opOf(ctx); op != nil {
		return op.start
	}
	return timecut.Now()
}

// Operation is how an operation through [Retry] ended. [OperationOf] gives
// it for a response.
type Operation struct {
	// Attempts is the number of attempts sent.
	Attempts int
	// Reason is why the operation ended on a failure status; empty on
	// success.
	Reason policy.Reason
	// Waited is the time spent waiting between attempts.
	Waited time.Duration
	// Origin is the origin ("https://api.example.com") that served the
	// operation's response, an alternate's when one did (see
	// [Endpoints]); empty without Endpoints.
	Origin string
	// Address is the address that served it, with
	// Endpoints.PerAddress; empty otherwise.
	Address string
}

// OperationOf returns how the operation that resp ends went, when it passed
// a [Retry] layer; ok is false otherwise. It answers through [http.Client]
// and any RoundTripper above the stack. So a caller who gets a 503 after
// retries learns how many attempts were made and why they stopped.
func OperationOf(resp *http.Response) (op Operation, ok bool) {
	if resp == nil || resp.Request == nil {
		return Operation{}, false
	}
	op, ok = operationOf(resp)
	if servedBy(resp, &op) { // Endpoints: which origin and address served it
		op.Attempts, ok = max(op.Attempts, 1), true
	}
	return op, ok
}

// operationOf is OperationOf without Endpoints.
func operationOf(resp *http.Response) (Operation, bool) {
	op := opOf(resp.Request.Context())
	if op == nil || op.retry == nil {
		return Operation{}, false
	}
	return Operation{Attempts: max(op.attempts, 1), Reason: op.reason, Waited: op.waited}, true
}
