package transport

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

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
		policy:     h,
		fixed:      h.Delay,
		floor:      h.DelayFloor(),
		hedges:     h.Hedges(),
		budget:     budget,
		classify:   h.Classifier(),
		defaultCls: h.Classify == nil,
		bufLimit:   h.BufferLimit(),
		probLimit:  h.ProblemLimit(),
		keyHeader:  h.KeyHeader(),
		onHedge:    h.OnHedge,
		onWon:      h.OnHedgeWon,
		onCancel:   h.OnCopyCanceled,
	}
	return func(next http.RoundTripper) http.RoundTripper {
		t := &hedger{next: orDefault(next), c: c}
		if h.Adaptive() {
			t.lat = &policy.Latencies{Quantile: h.Quantile}
		}
		return t
	}
}

type hedgeConfig struct {
	policy       policy.Hedge // decides when a copy is sent
	fixed, floor time.Duration
	hedges       int
	budget       retryBudget
	classify     policy.Classifier
	defaultCls   bool
	bufLimit     int64
	probLimit    int64
	keyHeader    string
	onHedge      func(policy.HedgeEvent)
	onWon        func(policy.HedgeEvent)
	onCancel     func(policy.HedgeEvent)
}

type hedger struct {
	next http.RoundTripper
	c    *hedgeConfig
	lat  *policy.Latencies // nil with a fixed delay
	own  stack             // the stack beneath, when no layer above carries one
	copy bound             // the bound of copies' contexts: no deadline, no idle cut, ended by cancel
}

// out returns a copy's outcome to the layer above: a stream judged a
// failed attempt is restored unless a Retry above (found through the
// operation's stack, whatever stands between) may still try again.
func (t *hedger) out(req *http.Request, resp *http.Response, err error) (*http.Response, error) {
	if err != nil || resp == nil || resp.StatusCode < 400 || stackOf(req.Context()).retryConfig() != nil {
		return resp, err
	}
	return restoreStreamErr(resp, err)
}

func (t *hedger) CloseIdleConnections() { closeIdle(t.next) }

type hedgeCopyKey struct{}

// HedgeCopyFromContext returns which copy of a hedged request a request
// is, as set by [Hedge] on each copy's context: 1 for the first copy, 2
// for the first hedge, and so on; 0 for a request that no hedge race
// sent. RoundTrippers beneath Hedge, such as a tracing transport, can
// use it; a copy's attempt is [AttemptFromContext].
func HedgeCopyFromContext(ctx context.Context) int {
	n, _ := ctx.Value(hedgeCopyKey{}).(int)
	return n
}

// hedgeCopy is one copy of a hedged request.
type hedgeCopy struct {
	op     *boundOp    // the copy's context, request and body, in one allocation
	parent *detachable // the copy's context follows its end until detached
	done   bool
}

// detachable is the parent of a copy's context: the request's context,
// whose end the copy follows until detach is called. A losing copy is
// detached before its response is drained in the background, so that
// the end of the operation (the winner's body read or closed releases
// the deadlines above, the parent of every copy) does not cut the drain
// and close a connection that would have gone back to the pool. The
// drain is bounded by discardWait.
type detachable struct {
	context.Context
	copy     int // the copy's number, for HedgeCopyFromContext
	mu       sync.Mutex
	stop     func() bool // context.WithCancel asks once
	detached bool
}

// neverDone is the Done of every detachable: context.WithCancel then
// learns of the parent's end through AfterFunc, which detach stops.
var neverDone = make(chan struct{})

func (d *detachable) Done() <-chan struct{} { return neverDone }

// Err is the parent's until d is detached; nil after.
func (d *detachable) Err() error {
	d.mu.Lock()
	detached := d.detached
	d.mu.Unlock()
	if detached {
		return nil
	}
	return d.Context.Err()
}

// Value answers HedgeCopyFromContext with the copy's number, and asks the
// parent for any other key.
func (d *detachable) Value(key any) any {
	if key == (hedgeCopyKey{}) {
		return d.copy
	}
	return d.Context.Value(key)
}

// AfterFunc calls f when the parent ends, unless d is detached first.
func (d *detachable) AfterFunc(f func()) (stop func() bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.detached {
		return func() bool { return false }
	}
	d.stop = context.AfterFunc(d.Context, f)
	return d.stop
}

// detach stops following the parent's end.
func (d *detachable) detach() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.detached = true
	if d.stop != nil {
		d.stop()
	}
}

// hedgeResult is what one copy ended with.
type hedgeResult struct {
	i    int
	resp *http.Response
	err  error
	ok   bool // acceptable: it may win while other copies run
}

func (t *hedger) RoundTrip(req *http.Request) (*http.Response, error) {
	c := t.c
	if req.URL == nil || c.hedges == 0 || attemptsOf(req.Context()) == 1 { // WithAttempts(ctx, 1): sent once
		resp, err := t.next.RoundTrip(req)
		return t.out(req, resp, err)
	}
	start := time.Now()
	op, req := withStack(req, &t.own)
	budget := c.budget
	if rc := op.retryConfig(); rc != nil && rc.budget != nil && (budget == nil || budget == rc.budget) {
		budget = rc.budget // the Retry above counted the operation in it
	} else if budget != nil {
		budget.request(req.URL, clockOf(start))
	}
	if !policy.SafeToResend(req, c.keyHeader) {
		resp, err := t.next.RoundTrip(req)
		return t.out(req, resp, err)
	}
	var key string // the latency sketch's key, with an adaptive delay
	delay := c.fixed
	if t.lat != nil {
		key = HostKey(req)
		d, ok := t.lat.Delay(key)
		if !ok { // nothing known of the host yet: send once, and learn
			resp, err := t.next.RoundTrip(req)
			if err == nil {
				t.lat.Observe(key, time.Since(start))
			}
			return t.out(req, resp, err)
		}
		delay = max(d, c.floor)
	}
	body, err := newReplay(req, c.bufLimit)
	if err != nil {
		return nil, err
	}
	defer body.finish() // the caller's body is closed once no copy reads it
	if !body.replayable() {
		if body.first != nil {
			resp, err := t.next.RoundTrip(body.firstRequest(req))
			return t.out(req, resp, err)
		}
		resp, err := t.next.RoundTrip(req)
		return t.out(req, resp, err)
	}
	resp, err := t.race(op, budget, req, key, &body, start, delay)
	return t.out(req, resp, err)
}

// race sends the first copy, then a hedge every delay while none has
// answered, and returns the winner.
func (t *hedger) race(op *stack, budget retryBudget, req *http.Request, key string, body *replay, start time.Time, delay time.Duration) (*http.Response, error) {
	c := t.c
	ctx := req.Context()
	// Room for the copies a race usually sends, not for all that
	// MaxHedges allows (it may be huge): copies grow as they are sent,
	// and a copy whose result finds the channel full waits only until
	// the race, or the reaper after it, receives it.
	n := min(c.hedges, maxHedgeRoom) + 1
	copies := make([]hedgeCopy, 0, n)
	results := make(chan hedgeResult, n)
	// answered is set when a copy's round trip returns, before it is
	// judged (which may read a problem body): from then on no hedge is
	// sent, as none is once a copy has its headers.
	var answered atomic.Bool
	// send starts a copy of req with its own context, so that it can be
	// canceled alone, and the given body.
	send := func(b io.ReadCloser) {
		i := len(copies)
		parent := (*detachable)(nil) // nil: ctx never ends, and nothing need be detached
		var pctx context.Context
		if ctx.Done() != nil {
			parent = &detachable{Context: ctx, copy: i + 1} // it carries the copy's number too
			pctx = parent
		} else {
			pctx = context.WithValue(ctx, hedgeCopyKey{}, i+1)
		}
		op := &boundOp{}
		op.ctx.start(pctx, &t.copy, 0)
		op.req = *req.WithContext(&op.ctx)
		r := &op.req
		if !body.none {
			r.Body, r.GetBody = b, body.get
		}
		copies = append(copies, hedgeCopy{op: op, parent: parent})
		go t.send(req, r, i, &answered, results)
	}
	if body.first != nil {
		send(body.first)
	} else {
		send(req.Body)
	}

	// A new timer per race, not a pooled one: a timer belongs to the
	// synctest bubble that made it, and callers test in bubbles.
	timer := time.NewTimer(delay)
	defer timer.Stop()
	var (
		running = 1
		held    *hedgeResult // the first failure, returned if nothing wins
		failed  bool         // a copy failed: send no more hedges
		win     *hedgeResult
	)
	for win == nil {
		select {
		case <-timer.C:
			now := time.Now()
			s := policy.HedgeState{
				Sent:     len(copies),
				Answered: answered.Load(),
				Failed:   failed,
				Done:     ctx.Err(),
				// A body kept as the first copy sends it would stream
				// twice at once, and may yet prove too long to keep.
				BodySent: body.complete(),
				Now:      now,
				Refused:  func(at time.Time) error { return op.hedgeRefusedAt(req, at) },
			}
			// Next decides twice: without the budget first, so that the
			// body is had only for a copy that may be sent; then with
			// it, last, so that a copy whose body cannot be had takes
			// nothing from it.
			switch t.c.policy.Next(s) {
			case policy.HedgeLater:
				timer.Reset(delay)
				continue
			case policy.HedgeStop:
				continue
			}
			var b io.ReadCloser
			if !body.none {
				var gerr error
				if b, gerr = body.get(); gerr != nil {
					continue // no copy can be made: none now or later
				}
			}
			if budget != nil {
				s.Budget = func() bool { return budget.retry(req.URL, clockOf(now)) }
				if t.c.policy.Next(s) != policy.HedgeSend {
					if b != nil {
						b.Close()
					}
					continue
				}
			}
			send(b)
			running++
			if c.onHedge != nil {
				c.onHedge(policy.HedgeEvent{Request: req, Copy: len(copies), Elapsed: now.Sub(start)})
			}
			if len(copies) <= c.hedges {
				timer.Reset(delay)
			}
		case r := <-results:
			running--
			copies[r.i].done = true
			if t.lat != nil && r.i == 0 && r.err == nil {
				t.lat.Observe(key, time.Since(start))
			}
			switch {
			case r.ok:
				if held != nil {
					t.discard(copies, *held)
				}
				win = &r
			case running > 0: // a failure does not win while a copy runs
				failed = true
				held = t.hold(copies, held, r)
			default: // every copy failed: hand back the best failure
				win = t.hold(copies, held, r)
			}
		}
	}

	now := time.Now()
	for i := range copies {
		if i == win.i || copies[i].done {
			continue
		}
		copies[i].op.cancel()
		if i == 0 && t.lat != nil {
			// The first copy's latency is at least this long: record it
			// as such, so that the quantile still sees slow requests.
			t.lat.Observe(key, now.Sub(start))
		}
		if c.onCancel != nil {
			c.onCancel(policy.HedgeEvent{Request: req, Copy: i + 1, Elapsed: now.Sub(start)})
		}
	}
	if running > 0 {
		go reapHedges(results, running, copies)
	}
	if win.i > 0 && c.onWon != nil && win.err == nil {
		c.onWon(policy.HedgeEvent{Request: req, Copy: win.i + 1, Elapsed: now.Sub(start), Status: win.resp.StatusCode})
	}
	return copies[win.i].op.hold(win.resp, win.err)
}

// send sends copy i, r, of req, and delivers its outcome to results,
// judged here (a problem body may take time to read) so that the race
// never waits on one copy while another may win.
func (t *hedger) send(req, r *http.Request, i int, answered *atomic.Bool, results chan<- hedgeResult) {
	r, err := checkCaller(r, true) // a copy's body, from GetBody, is checked as Retry checks an attempt's
	if err != nil {
		results <- hedgeResult{i: i, err: err}
		return
	}
	resp, err := t.next.RoundTrip(r)
	answered.Store(true)
	if resp == nil && err == nil {
		err = errNilResponse
	}
	res := hedgeResult{i: i, resp: resp, err: err}
	res.ok = t.acceptable(req, &res)
	results <- res
}

// acceptable reports whether r may win while another copy still runs: a
// response that the classifier would not retry. A copy after the first
// is classified as a later attempt, since the first has sent the
// request (and its idempotency key) already: a 409 that says the key is
// in flight is the first copy at work, never an answer.
func (t *hedger) acceptable(req *http.Request, r *hedgeResult) bool {
	if r.err != nil {
		return false
	}
	if r.resp.StatusCode < 400 && t.c.defaultCls {
		return true
	}
	var problem *policy.Problem
	if r.resp.StatusCode >= 400 {
		problem = readProblem(r.resp, t.c.probLimit, stackOf(req.Context()).cut())
	}
	return !t.c.classify(policy.Outcome{
		Request:  req,
		Response: r.resp,
		Problem:  problem,
		Attempt:  AttemptFromContext(req.Context()) + r.i,
		Keyed:    req.Header.Get(t.c.keyHeader) != "",
		Now:      time.Now(),
	}).Retry
}

// hold keeps the better of two failures, held (nil at first) and r: a
// response over an error, an error over a hedge's refusal unsent (it
// says nothing of the host), else the first. The other is discarded.
func (t *hedger) hold(copies []hedgeCopy, held *hedgeResult, r hedgeResult) *hedgeResult {
	switch {
	case held == nil:
		return &r
	case held.err != nil && r.err == nil,
		held.err != nil && held.i > 0 && refusedUnsent(held.err) && !refusedUnsent(r.err):
		t.discard(copies, *held)
		return &r
	}
	t.discard(copies, r)
	return held
}

// refusedUnsent reports whether err is a layer's refusal of a copy it
// never sent ([policy.Refusal]): it says nothing of the host.
func refusedUnsent(err error) bool {
	_, refused := policy.RefusedBy(err)
	return refused
}

// discard drains and closes a copy's response, then releases its
// context. The drain runs on its own goroutine, so that a body that
// stalls never holds back the race or its winner, and for at most
// discardWait, after which the copy is canceled, which ends the read.
func (t *hedger) discard(copies []hedgeCopy, r hedgeResult) {
	cancel := copies[r.i].op.cancel
	if r.resp == nil || r.resp.Body == nil {
		cancel()
		return
	}
	body := r.resp.Body
	copies[r.i].parent.detach() // the operation's end must not cut the drain
	go func() {
		cut := time.AfterFunc(discardWait, cancel)
		drain(body)
		cut.Stop()
		cancel()
	}()
}

// maxHedgeRoom bounds the room a race makes ahead for its hedges.
const maxHedgeRoom = 8

// discardWait is how long a losing copy's body may take to drain (so that
// its connection is kept) before the copy is canceled.
const discardWait = time.Second

// reapHedges waits for the n copies still running, already canceled, and
// closes whatever response they bring.
func reapHedges(results <-chan hedgeResult, n int, copies []hedgeCopy) {
	for range n {
		r := <-results
		if r.resp != nil && r.resp.Body != nil {
			r.resp.Body.Close()
		}
		copies[r.i].op.cancel()
	}
}
