// Package hedge runs the race of a hedged request's copies: it sends the
// first copy, then another each time a delay ends with none answered (as
// [policy.Hedge.Next] decides), hands back the first acceptable response,
// cancels the copies that lost and drains what they brought.
// transport.Hedge decides whether a request races, and wires the race to
// the request's operation.
package hedge

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/internal/reqbody"
	"github.com/sturdyhttp/sturdy/internal/respbody"
	"github.com/sturdyhttp/sturdy/internal/retry"
	"github.com/sturdyhttp/sturdy/internal/timecut"
	"github.com/sturdyhttp/sturdy/policy"
)

// Config is what the races of one Hedge layer share.
type Config struct {
	Policy     policy.Hedge // decides when a copy is sent
	Hedges     int          // the most copies sent after the first
	Classify   policy.Classifier
	DefaultCls bool   // Classify is the default one: below 400 is acceptable unread
	ProbLimit  int64  // how much of a problem body is read to classify it
	KeyHeader  string // the idempotency key's header
	OnHedge    func(policy.HedgeEvent)
	OnWon      func(policy.HedgeEvent)
	OnCancel   func(policy.HedgeEvent)
	// HostKey is the latency sketch's key for a request's host.
	HostKey func(*http.Request) string
}

// Stack is what a Race learns from the stack it runs in: the
// operation, as transport keeps it.
type Stack interface {
	// HedgeRefused returns the error a hedge of r sent at at would meet
	// from the layers beneath; nil when it would be sent.
	HedgeRefused(r *http.Request, at time.Time) error
	// Copy returns ctx marked as the context of copy i (1 for the
	// first).
	Copy(ctx context.Context, i int) context.Context
	// AttemptOf returns the number of the attempt that ctx's request is.
	AttemptOf(ctx context.Context) int
	// IdleCut returns the watch whose idle cut failed bodies are read
	// with; nil: none.
	IdleCut(ctx context.Context) *timecut.Watch
}

// Race is one race of a request's copies. The caller sets its exported
// fields, then calls Do once.
type Race struct {
	C    *Config
	Next http.RoundTripper // what sends each copy
	Lat  *policy.Latencies // the latency sketch that learns the delay; nil with a fixed delay
	// Req is the request, its context carrying the operation, St.
	Req *http.Request
	St  Stack
	// Budget is the retry budget hedges draw on; nil: none.
	Budget retry.Budget
	Start  time.Time
	Delay  time.Duration // between two copies: the fixed one, or the least learned one
	// Floor is the least delay learned from Lat.
	Floor time.Duration
	// BufLimit is the longest body kept in memory for the copies.
	BufLimit int64

	key     string // Lat's key for the request's host
	body    reqbody.Replay
	attempt int            // the number of the attempt that the race is
	idleCut *timecut.Watch // whose idle cut a failed copy's problem body is read with
	copies  []hedgeCopy
	results chan result
	// answered is set when a copy's round trip returns, before it is
	// judged (which may read a problem body): from then on no hedge is
	// sent, as none is once a copy has its headers.
	answered atomic.Bool
	running  int
	held     *result // the first failure, returned if nothing wins
	failed   bool    // a copy failed: send no more hedges
}

// copyLimits are those of a hedge copy's watch: no deadline, no idle
// cut; it ends when canceled or released.
var copyLimits timecut.Limits

// copyOp is what a copy allocates, in one piece: the watch that ends
// its context, its request and its response body's wrapper.
type copyOp struct {
	w    timecut.Watch
	req  http.Request
	body respbody.Body
}

// cancel ends a hedge copy's context as canceled, unless it has ended.
func (op *copyOp) cancel() { op.w.Release() }

// hold hands back an outcome of a hedge copy sent with op's context, and
// keeps that context until the response's body is done with: it is
// released at once on error or for a response without a body, else when
// the body is read to EOF or closed.
func (op *copyOp) hold(resp *http.Response, err error) (*http.Response, error) {
	w := &op.w
	if err != nil || resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		w.Release()
		return resp, err
	}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = respbody.NewRW(rw, w)
		return resp, nil
	}
	op.body.Set(resp.Body, w)
	resp.Body = &op.body
	return resp, nil
}

// hedgeCopy is one copy of a hedged request.
type hedgeCopy struct {
	op *copyOp // the copy's watch, request and body, in one allocation
	// detach stops the copy's context from following the request's: a
	// losing copy is detached before its response is drained in the
	// background, so that the end of the operation (the winner's body
	// read or closed releases the bounds above) does not cut the drain
	// and close a connection that would have gone back to the pool. The
	// drain is bounded by discardWait. Nil: nothing to detach.
	detach func() bool
	done   bool
}

// copyContext returns the context of a copy whose request's context is
// ctx, base being ctx marked as the copy's, the function that cancels it
// alone, and the one that detaches it from ctx (nil when ctx never
// ends). It keeps ctx's values and its deadline; ctx's end reaches it
// until it is detached.
func copyContext(ctx, base context.Context) (context.Context, context.CancelCauseFunc, func() bool) {
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

// result is what one copy ended with.
type result struct {
	i    int
	resp *http.Response
	err  error
	ok   bool // acceptable: it may win while other copies run
}

// Do decides, as [policy.Hedge.Race] says, whether the request races:
// one not safe to send twice, or whose body cannot be had again, is sent
// once. A request sent once to a host whose latency is not known yet
// teaches it.
func (h *Race) Do() (*http.Response, error) {
	c, req := h.C, h.Req
	s := policy.HedgeStart{SafeToResend: policy.SafeToResend(req, c.KeyHeader), DelayKnown: true, Replayable: true}
	if h.Lat != nil && s.SafeToResend {
		h.key = c.HostKey(req)
		d, ok := h.Lat.Delay(h.key)
		h.Delay, s.DelayKnown = max(d, h.Floor), ok
	}
	if !c.Policy.Race(s) {
		resp, err := h.Next.RoundTrip(req)
		if err == nil && s.SafeToResend && !s.DelayKnown {
			h.Lat.Observe(h.key, time.Since(h.Start)) // nothing known of the host yet: learn
		}
		return resp, err
	}
	var err error
	if h.body, err = reqbody.New(req, h.BufLimit); err != nil {
		return nil, err
	}
	defer h.body.Finish() // the caller's body is closed once no copy reads it
	if s.Replayable = h.body.Replayable(); !c.Policy.Race(s) {
		r := req
		if h.body.First != nil {
			r = h.body.FirstRequest(req)
		}
		return h.Next.RoundTrip(r)
	}
	ctx := req.Context()
	h.attempt, h.idleCut = h.St.AttemptOf(ctx), h.St.IdleCut(ctx)
	return h.run()
}

// run sends the first copy, then a hedge every delay while none has
// answered, and returns the winner.
func (h *Race) run() (*http.Response, error) {
	// Room for the copies a race usually sends, not for all that
	// MaxHedges allows (it may be huge): copies grow as they are sent,
	// and a copy whose result finds the channel full waits only until
	// the race, or the reaper after it, receives it.
	n := min(h.C.Hedges, maxHedgeRoom) + 1
	h.copies = make([]hedgeCopy, 0, n)
	h.results = make(chan result, n)
	if h.body.First != nil {
		h.send(h.body.First)
	} else {
		h.send(h.Req.Body)
	}
	// A new timer per race, not a pooled one: a timer belongs to the
	// synctest bubble that made it, and callers test in bubbles.
	timer := time.NewTimer(h.Delay)
	defer timer.Stop()
	var win *result
	for win == nil {
		select {
		case <-timer.C:
			if h.tick() {
				timer.Reset(h.Delay)
			}
		case r := <-h.results:
			win = h.result(r)
		}
	}
	return h.finish(win)
}

// send starts a copy of the request with its own context, so that it can
// be canceled alone, and the given body.
func (h *Race) send(b io.ReadCloser) {
	i := len(h.copies)
	ctx := h.Req.Context()
	cctx, cancel, detach := copyContext(ctx, h.St.Copy(ctx, i+1))
	op := &copyOp{}
	end := cancel
	if detach != nil {
		// Once the copy's context ends, it stops following the request's:
		// a long-lived caller's context keeps no function of it.
		end = func(err error) { cancel(err); detach() }
	}
	op.w.Start(&copyLimits, 0, end)
	op.req = *h.Req.WithContext(cctx)
	r := &op.req
	if !h.body.None {
		r.Body, r.GetBody = b, h.body.Get
	}
	h.copies = append(h.copies, hedgeCopy{op: op, detach: detach})
	h.running++
	go h.sendCopy(r, i)
}

// tick decides, as [policy.Hedge.Next] says, whether a hedge is sent
// when a delay ends; it reports whether to look again after another.
func (h *Race) tick() bool {
	c, req := h.C, h.Req
	now := time.Now()
	s := policy.HedgeState{
		Sent:     len(h.copies),
		Answered: h.answered.Load(),
		Failed:   h.failed,
		Done:     req.Context().Err(),
		// A body kept as the first copy sends it would stream twice at
		// once, and may yet prove too long to keep.
		BodySent: h.body.Complete(),
		Now:      now,
		Refused:  func(at time.Time) error { return h.St.HedgeRefused(req, at) },
	}
	// Next decides twice: without the budget first, so that the body is
	// had only for a copy that may be sent; then with it, last, so that
	// a copy whose body cannot be had takes nothing from it.
	switch c.Policy.Next(s) {
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
	if budget := h.Budget; budget != nil {
		s.Budget = func() bool { return budget.Retry(req.URL, timecut.Of(now)) }
		if c.Policy.Next(s) != policy.HedgeSend {
			if b != nil {
				b.Close()
			}
			return false
		}
	}
	h.send(b)
	if c.OnHedge != nil {
		c.OnHedge(policy.HedgeEvent{Request: req, Copy: len(h.copies), Elapsed: now.Sub(h.Start)})
	}
	return len(h.copies) <= c.Hedges
}

// result takes a copy's outcome, and returns the winner once there is
// one: the first acceptable response, or, when every copy has failed,
// the best failure.
func (h *Race) result(r result) *result {
	h.running--
	h.copies[r.i].done = true
	if h.Lat != nil && r.i == 0 && r.err == nil {
		h.Lat.Observe(h.key, time.Since(h.Start))
	}
	switch {
	case r.ok:
		if h.held != nil {
			discard(h.copies, *h.held)
		}
		return &r
	case h.running > 0: // a failure does not win while a copy runs
		h.failed = true
		h.held = hold(h.copies, h.held, r)
		return nil
	}
	return hold(h.copies, h.held, r) // every copy failed: hand back the best failure
}

// finish cancels the copies that lost, and hands back the winner.
func (h *Race) finish(win *result) (*http.Response, error) {
	c := h.C
	now := time.Now()
	for i := range h.copies {
		if i == win.i || h.copies[i].done {
			continue
		}
		h.copies[i].op.cancel()
		if i == 0 && h.Lat != nil {
			// The first copy's latency is at least this long: record it
			// as such, so that the quantile still sees slow requests.
			h.Lat.Observe(h.key, now.Sub(h.Start))
		}
		if c.OnCancel != nil {
			c.OnCancel(policy.HedgeEvent{Request: h.Req, Copy: i + 1, Elapsed: now.Sub(h.Start)})
		}
	}
	if h.running > 0 {
		go reap(h.results, h.running, h.copies)
	}
	if win.i > 0 && c.OnWon != nil && win.err == nil {
		c.OnWon(policy.HedgeEvent{Request: h.Req, Copy: win.i + 1, Elapsed: now.Sub(h.Start), Status: win.resp.StatusCode})
	}
	return h.copies[win.i].op.hold(win.resp, win.err)
}

// sendCopy sends copy i, r, of the request, and delivers its outcome,
// judged here (a problem body may take time to read) so that the race
// never waits on one copy while another may win.
func (h *Race) sendCopy(r *http.Request, i int) {
	r, err := reqbody.CheckCaller(r, true) // a copy's body, from GetBody, is checked as Retry checks an attempt's
	if err != nil {
		h.results <- result{i: i, err: err}
		return
	}
	resp, err := h.Next.RoundTrip(r)
	h.answered.Store(true)
	if resp == nil && err == nil {
		err = retry.ErrNilResponse
	}
	res := result{i: i, resp: resp, err: err}
	res.ok = h.acceptable(&res)
	h.results <- res
}

// acceptable reports whether r may win while another copy still runs: a
// response that the classifier would not retry. A copy after the first
// is classified as a later attempt, since the first has sent the
// request (and its idempotency key) already: a 409 that says the key is
// in flight is the first copy at work, never an answer.
func (h *Race) acceptable(r *result) bool {
	c, req := h.C, h.Req
	if r.err != nil {
		return false
	}
	if r.resp.StatusCode < 400 && c.DefaultCls {
		return true
	}
	var problem *policy.Problem
	if r.resp.StatusCode >= 400 {
		problem = respbody.ReadProblem(r.resp, c.ProbLimit, h.idleCut)
	}
	return !c.Classify(policy.Outcome{
		Request:  req,
		Response: r.resp,
		Problem:  problem,
		Attempt:  h.attempt + r.i,
		Keyed:    policy.HasKey(req, c.KeyHeader),
		Now:      time.Now(),
	}).Retry
}

// hold keeps the better of two failures, held (nil at first) and r: a
// response over an error, an error over a hedge's refusal unsent (it
// says nothing of the host), else the first. The other is discarded.
func hold(copies []hedgeCopy, held *result, r result) *result {
	switch {
	case held == nil:
		return &r
	case held.err != nil && r.err == nil,
		held.err != nil && held.i > 0 && refusedUnsent(held.err) && !refusedUnsent(r.err):
		discard(copies, *held)
		return &r
	}
	discard(copies, r)
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
func discard(copies []hedgeCopy, r result) {
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
		respbody.Drain(body)
		cut.Stop()
		cancel()
	}()
}

// maxHedgeRoom bounds the room a race makes ahead for its hedges.
const maxHedgeRoom = 8

// discardWait is how long a losing copy's body may take to drain (so that
// its connection is kept) before the copy is canceled.
const discardWait = time.Second

// reap waits for the n copies still running, already canceled, and
// closes whatever response they bring.
func reap(results <-chan result, n int, copies []hedgeCopy) {
	for range n {
		r := <-results
		if r.resp != nil && r.resp.Body != nil {
			r.resp.Body.Close()
		}
		copies[r.i].op.cancel()
	}
}
