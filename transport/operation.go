package transport

import (
	"context"
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
// Two things travel there:
//
//   - the stack: what its layers learn of each other as requests pass
//     (the Breaker and RateLimitAware beneath, which Retry and Hedge ask
//     before they wait; the budget of the Retry above, which a Hedge
//     shares; the Timeout's idle cut). The outermost layer that carries
//     it makes it once, with itself;
//   - the operation's record: what Retry says of how it ended, for
//     [OperationOf], made only when an operation needs a second attempt
//     or ends on a failure.

// stack is what the layers beneath one layer learn of each other. Every
// field is set once and read by any (requests run at once): the Retry
// and the Timeout by the first request that passes them, the Breaker and
// the quota tracker by the first that fails through them (or that a
// half-open breaker may refuse), since only a failure starts a wait.
type stack struct {
	// idleCut is the Timeout layer's bound, whose idle cut Retry and
	// Hedge read the failed bodies they judge with; nil means none.
	idleCut atomic.Pointer[bound]
	// retry is the Retry layer that counts operations in its budget: a
	// Hedge beneath draws its hedges from the same budget.
	retry atomic.Pointer[retryConfig]
	// breakers and tracker are the Breaker and RateLimitAware beneath:
	// Retry and Hedge ask them whether a later attempt would be
	// refused, so that nothing waits only to be refused.
	breakers atomic.Pointer[Breakers]
	tracker  atomic.Pointer[ratelimit.Tracker]
}

type stackKey struct{}

// stackOf returns the stack that ctx carries, nil when none does.
func stackOf(ctx context.Context) *stack {
	s, _ := ctx.Value(stackKey{}).(*stack)
	return s
}

// refusedAt returns the error that an attempt of req made at the time
// at would meet from the layers beneath: an open breaker, a host paused
// or a quota spent past at. Nil means it would be sent.
func (s *stack) refusedAt(req *http.Request, at time.Time) error {
	if s == nil {
		return nil
	}
	req = routeOf(req, at) // the origin an attempt would go to (Endpoints.Alternates)
	if b := s.breakersOf(req); b != nil {
		if err := b.refusedAt(req, at); err != nil {
			return err
		}
	}
	if t := s.tracker.Load(); t != nil {
		return t.RefusedAt(req, at)
	}
	return nil
}

// hedgeRefusedAt is refusedAt for a hedge: a copy beside one sent
// already, which a breaker that is not closed refuses (see
// Breakers.hedgeRefusedAt).
func (s *stack) hedgeRefusedAt(req *http.Request, at time.Time) error {
	if s == nil {
		return nil
	}
	req = routeOf(req, at) // the origin a hedge would go to (Endpoints.Alternates)
	if b := s.breakersOf(req); b != nil {
		return b.hedgeRefusedAt(req, at)
	}
	return nil
}

// retryConfig returns the Retry layer above that counts operations in
// its budget, nil when there is none.
func (s *stack) retryConfig() *retryConfig {
	if s == nil {
		return nil
	}
	return s.retry.Load()
}

// cut returns the bound whose idle cut failed bodies are read with, nil
// when there is none.
func (s *stack) cut() *bound {
	if s == nil {
		return nil
	}
	return s.idleCut.Load()
}

// join records v in f, once: the first request through a layer tells
// the stack of it.
func join[T any](f *atomic.Pointer[T], v *T) {
	if f.Load() == nil {
		f.Store(v)
	}
}

// breakersOf returns the Breakers that an attempt of req meets: the
// ones that judged its operation's last attempt, when a layer beneath a
// router told the operation; else the first that joined the stack.
func (s *stack) breakersOf(req *http.Request) *Breakers {
	if p := opBreakers(req.Context()); p != nil {
		if b := p.Load(); b != nil {
			return b
		}
	}
	return s.breakers.Load()
}

// opBreakersKey asks a context that carries an operation (a bound that
// carries the stack, a Retry's record, a Hedge's or Throttle's stack
// context) where it keeps the Breakers that judged its last attempt.
type opBreakersKey struct{}

// opBreakers returns where ctx's operation keeps the Breakers that
// judged its last attempt; nil when no layer above carries one.
func opBreakers(ctx context.Context) *atomic.Pointer[Breakers] {
	p, _ := ctx.Value(opBreakersKey{}).(*atomic.Pointer[Breakers])
	return p
}

// joinBreakers tells the stack and the operation that ctx carries of the
// Breakers b, which judged one of the operation's attempts: a Retry or
// Hedge above then asks b whether a later attempt would be refused, even
// when a router beneath sends other requests through other Breakers.
func joinBreakers(ctx context.Context, b *Breakers) {
	stackOf(ctx).joinBreakers(b)
	if p := opBreakers(ctx); p != nil && p.Load() != b {
		p.Store(b)
	}
}

// joinBreakers tells s (when set) of the Breaker b beneath.
func (s *stack) joinBreakers(b *Breakers) {
	if s != nil {
		join(&s.breakers, b)
	}
}

// joinTracker tells s (when set) of the quota tracker t beneath.
func (s *stack) joinTracker(t *ratelimit.Tracker) {
	if s != nil {
		join(&s.tracker, t)
	}
}

// joinRetry tells s (when set) of the Retry c above.
func (s *stack) joinRetry(c *retryConfig) {
	if s != nil {
		join(&s.retry, c)
	}
}

// opRecord is one operation's record: what Retry says of how it ended,
// for [OperationOf]. Its context also carries the stack when no layer
// above made one.
type opRecord struct {
	stack    *stack                   // the stack, when the layer that made the record carries it
	breakers atomic.Pointer[Breakers] // the Breakers that judged the last attempt (see joinBreakers)
	base     *http.Request            // the caller's request, its context carrying the record
	attempts int
	reason   policy.Reason
	waited   time.Duration
}

// recordCtx carries an opRecord: one allocation for the record and the
// context that holds it.
type recordCtx struct {
	context.Context
	rec opRecord
}

type opRecordKey struct{}

func (c *recordCtx) Value(key any) any {
	switch key.(type) { // a type switch: see boundCtx.Value
	case opRecordKey:
		return &c.rec
	case stackKey:
		if c.rec.stack != nil {
			return c.rec.stack
		}
	case opBreakersKey:
		if c.rec.stack != nil {
			return &c.rec.breakers
		}
	}
	return c.Context.Value(key)
}

// record returns req with a record in its context, making both when *rec
// is nil; the new context carries s too, when s is set.
func record(rec **opRecord, req *http.Request, s *stack) *http.Request {
	if *rec == nil {
		c := &recordCtx{Context: req.Context()}
		c.rec.stack = s
		c.rec.base = req.WithContext(c)
		*rec = &c.rec
	}
	return (*rec).base
}

// recordRef carries an opRecord made for another context.
type recordRef struct {
	context.Context
	rec *opRecord
}

func (c *recordRef) Value(key any) any {
	if _, ok := key.(opRecordKey); ok {
		return c.rec
	}
	return c.Context.Value(key)
}

// opRecordOf returns the record in ctx, nil when there is none.
func opRecordOf(ctx context.Context) *opRecord {
	rec, _ := ctx.Value(opRecordKey{}).(*opRecord)
	return rec
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
func operationOf(resp *http.Response) (op Operation, ok bool) {
	ctx := resp.Request.Context()
	if rec := opRecordOf(ctx); rec != nil {
		return Operation{Attempts: rec.attempts, Reason: rec.reason, Waited: rec.waited}, true
	}
	if stackOf(ctx).retryConfig() != nil {
		return Operation{Attempts: 1}, true // a success at the first attempt
	}
	return Operation{}, false
}

// stackCtx carries a stack made by a layer that found none above it.
type stackCtx struct {
	context.Context
	s        *stack
	breakers atomic.Pointer[Breakers] // the Breakers that judged the operation's last attempt
}

func (c *stackCtx) Value(key any) any {
	switch key.(type) { // a type switch: see boundCtx.Value
	case stackKey:
		return c.s
	case opBreakersKey:
		return &c.breakers
	}
	return c.Context.Value(key)
}

// withStack returns req's stack, and req with it: req itself when its
// context carries one already, else a copy whose context carries own.
func withStack(req *http.Request, own *stack) (*stack, *http.Request) {
	if s := stackOf(req.Context()); s != nil {
		return s, req
	}
	return own, req.WithContext(&stackCtx{Context: req.Context(), s: own})
}
