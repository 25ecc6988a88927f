package transport

import (
	"context"
	"github.com/sturdyhttp/sturdy/internal/reqbody"
	"github.com/sturdyhttp/sturdy/internal/timecut"
	"io"
	"net/http"
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
}

// copyLimits are those of a hedge copy's watch: no deadline, no idle
// cut; it ends when canceled or released.
var copyLimits timecut.Limits

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

// hedgeCopy is one copy of a hedged request.
type hedgeCopy struct {
	op *boundOp // the copy's watch, request and body, in one allocation
	// detach stops the copy's context from following the request's: a
	// losing copy is detached before its response is drained in the
	// background, so that the end of the operation (the winner's body
	// read or closed releases the bounds above) does not cut the drain
	// and close a connection that would have gone back to the pool. The
	// drain is bounded by discardWait. Nil: nothing to detach.
	detach func() bool
	done   bool
}

// copyContext returns the context of copy i of a request whose context
// is ctx, the function that cancels it alone, and the one that detaches
// it from ctx (nil when ctx never ends). It keeps ctx's values and its
// deadline; ctx's end reaches it until it is detached.
func copyContext(ctx context.Context, i int) (context.Context, context.CancelCauseFunc, func() bool) {
	base := withScope(ctx, func(s *scope) { s.copy = i })
	if ctx.Done() == nil {
		c, cancel := context.WithCancelCause(base)
		return c, cancel, nil
	}
	c, cancel := context.WithCancelCause(context.WithoutCancel(base))
	detach := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	if dl, ok := ctx.Deadline(); ok {
		// The parent's deadline is reported, and its end forwarded:
		// net/http reads a deadline off the context it is given.
		var stop context.CancelFunc
		c, stop = context.WithDeadlineCause(c, dl, context.DeadlineExceeded)
		prev := cancel
		cancel = func(err error) { prev(err); stop() }
	}
	return c, cancel, detach
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
	h := hedgeRace{t: t, start: time.Now(), delay: c.fixed}
	h.op, req = withOp(req)
	h.req, h.budget = req, c.budget
	if rc := h.op.retryConfig(); rc != nil && rc.budget != nil && (h.budget == nil || h.budget == rc.budget) {
		h.budget = rc.budget // the Retry above counted the operation in it
	} else if h.budget != nil {
		h.budget.request(req.URL, timecut.Of(h.start))
	}
	s := policy.HedgeStart{SafeToResend: policy.SafeToResend(req, c.keyHeader), DelayKnown: true, Replayable: true}
	if t.lat != nil && s.SafeToResend {
		h.key = HostKey(req)
		d, ok := t.lat.Delay(h.key)
		h.delay, s.DelayKnown = max(d, c.floor), ok
	}
	if !c.policy.Race(s) {
		resp, err := t.next.RoundTrip(req)
		if err == nil && s.SafeToResend && !s.DelayKnown {
			t.lat.Observe(h.key, time.Since(h.start)) // nothing known of the host yet: learn
		}
		return t.out(req, resp, err)
	}
	body, err := reqbody.New(req, c.bufLimit)
	if err != nil {
		return nil, err
	}
	defer body.Finish() // the caller's body is closed once no copy reads it
	if s.Replayable = body.Replayable(); !c.policy.Race(s) {
		r := req
		if body.First != nil {
			r = body.FirstRequest(req)
		}
		resp, err := t.next.RoundTrip(r)
		return t.out(req, resp, err)
	}
	h.body = &body
	resp, err := h.race()
	return t.out(req, resp, err)
}

// hedgeRace is one race of a request's copies.
type hedgeRace struct {
	t       *hedger
	op      *operation
	req     *http.Request
	budget  retryBudget
	key     string // the latency sketch's key, with an adaptive delay
	body    *reqbody.Replay
	start   time.Time
	delay   time.Duration
	copies  []hedgeCopy
	results chan hedgeResult
	// answered is set when a copy's round trip returns, before it is
	// judged (which may read a problem body): from then on no hedge is
	// sent, as none is once a copy has its headers.
	answered atomic.Bool
	running  int
	held     *hedgeResult // the first failure, returned if nothing wins
	failed   bool         // a copy failed: send no more hedges
}

// race sends the first copy, then a hedge every delay while none has
// answered, and returns the winner.
func (h *hedgeRace) race() (*http.Response, error) {
	// Room for the copies a race usually sends, not for all that
	// MaxHedges allows (it may be huge): copies grow as they are sent,
	// and a copy whose result finds the channel full waits only until
	// the race, or the reaper after it, receives it.
	n := min(h.t.c.hedges, maxHedgeRoom) + 1
	h.copies = make([]hedgeCopy, 0, n)
	h.results = make(chan hedgeResult, n)
	if h.body.First != nil {
		h.send(h.body.First)
	} else {
		h.send(h.req.Body)
	}
	// A new timer per race, not a pooled one: a timer belongs to the
	// synctest bubble that made it, and callers test in bubbles.
	timer := time.NewTimer(h.delay)
	defer timer.Stop()
	var win *hedgeResult
	for win == nil {
		select {
		case <-timer.C:
			if h.tick() {
				timer.Reset(h.delay)
			}
		case r := <-h.results:
			win = h.result(r)
		}
	}
	return h.finish(win)
}

// send starts a copy of the request with its own context, so that it can
// be canceled alone, and the given body.
func (h *hedgeRace) send(b io.ReadCloser) {
	i := len(h.copies)
	cctx, cancel, detach := copyContext(h.req.Context(), i+1)
	op := &boundOp{}
	end := cancel
	if detach != nil {
		// Once the copy's context ends, it stops following the request's:
		// a long-lived caller's context keeps no function of it.
		end = func(err error) { cancel(err); detach() }
	}
	op.w.Start(&copyLimits, 0, end)
	op.req = *h.req.WithContext(cctx)
	r := &op.req
	if !h.body.None {
		r.Body, r.GetBody = b, h.body.Get
	}
	h.copies = append(h.copies, hedgeCopy{op: op, detach: detach})
	h.running++
	go h.t.send(h.req, r, i, &h.answered, h.results)
}

// tick decides, as [policy.Hedge.Next] says, whether a hedge is sent
// when a delay ends; it reports whether to look again after another.
func (h *hedgeRace) tick() bool {
	c, req := h.t.c, h.req
	now := time.Now()
	op := h.op
	s := policy.HedgeState{
		Sent:     len(h.copies),
		Answered: h.answered.Load(),
		Failed:   h.failed,
		Done:     req.Context().Err(),
		// A body kept as the first copy sends it would stream twice at
		// once, and may yet prove too long to keep.
		BodySent: h.body.Complete(),
		Now:      now,
		Refused:  func(at time.Time) error { return op.hedgeRefusedAt(req, at) },
	}
	// Next decides twice: without the budget first, so that the body is
	// had only for a copy that may be sent; then with it, last, so that
	// a copy whose body cannot be had takes nothing from it.
	switch c.policy.Next(s) {
	case policy.HedgeLater:
		return true
	case policy.HedgeStop:
		return false
	}
	var b io.ReadCloser
	if !h.body.None {
		var err error
		if b, err = h.body.Get(); err != nil {
			return false // no copy can be made: none now or later
		}
	}
	if budget := h.budget; budget != nil {
		s.Budget = func() bool { return budget.retry(req.URL, timecut.Of(now)) }
		if c.policy.Next(s) != policy.HedgeSend {
			if b != nil {
				b.Close()
			}
			return false
		}
	}
	h.send(b)
	if c.onHedge != nil {
		c.onHedge(policy.HedgeEvent{Request: req, Copy: len(h.copies), Elapsed: now.Sub(h.start)})
	}
	return len(h.copies) <= c.hedges
}

// result takes a copy's outcome, and returns the winner once there is
// one: the first acceptable response, or, when every copy has failed,
// the best failure.
func (h *hedgeRace) result(r hedgeResult) *hedgeResult {
	t := h.t
	h.running--
	h.copies[r.i].done = true
	if t.lat != nil && r.i == 0 && r.err == nil {
		t.lat.Observe(h.key, time.Since(h.start))
	}
	switch {
	case r.ok:
		if h.held != nil {
			t.discard(h.copies, *h.held)
		}
		return &r
	case h.running > 0: // a failure does not win while a copy runs
		h.failed = true
		h.held = t.hold(h.copies, h.held, r)
		return nil
	}
	return t.hold(h.copies, h.held, r) // every copy failed: hand back the best failure
}

// finish cancels the copies that lost, and hands back the winner.
func (h *hedgeRace) finish(win *hedgeResult) (*http.Response, error) {
	t, c := h.t, h.t.c
	now := time.Now()
	for i := range h.copies {
		if i == win.i || h.copies[i].done {
			continue
		}
		h.copies[i].op.cancel()
		if i == 0 && t.lat != nil {
			// The first copy's latency is at least this long: record it
			// as such, so that the quantile still sees slow requests.
			t.lat.Observe(h.key, now.Sub(h.start))
		}
		if c.onCancel != nil {
			c.onCancel(policy.HedgeEvent{Request: h.req, Copy: i + 1, Elapsed: now.Sub(h.start)})
		}
	}
	if h.running > 0 {
		go reapHedges(h.results, h.running, h.copies)
	}
	if win.i > 0 && c.onWon != nil && win.err == nil {
		c.onWon(policy.HedgeEvent{Request: h.req, Copy: win.i + 1, Elapsed: now.Sub(h.start), Status: win.resp.StatusCode})
	}
	return h.copies[win.i].op.hold(win.resp, win.err)
}

// send sends copy i, r, of req, and delivers its outcome to results,
// judged here (a problem body may take time to read) so that the race
// never waits on one copy while another may win.
func (t *hedger) send(req, r *http.Request, i int, answered *atomic.Bool, results chan<- hedgeResult) {
	r, err := reqbody.CheckCaller(r, true) // a copy's body, from GetBody, is checked as Retry checks an attempt's
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
		problem = readProblem(r.resp, t.c.probLimit, idleCut(req.Context()))
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
	if d := copies[r.i].detach; d != nil {
		d() // the operation's end must not cut the drain
	}
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
