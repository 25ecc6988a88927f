// Package retry carries out, for one operation, the steps that
// [policy.Retry.Next] decides: it keeps the caller's body for replay,
// makes each attempt's request, reads a failed attempt's problem, asks
// Next, drains the failed response and waits. transport.Retry makes a
// Run per operation and wires it to the operation ([Stack]).
package retry

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/sturdyhttp/sturdy/internal/connwatch"
	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/internal/reqbody"
	"github.com/sturdyhttp/sturdy/internal/respbody"
	"github.com/sturdyhttp/sturdy/internal/timecut"
	"github.com/sturdyhttp/sturdy/internal/verdict"
	"github.com/sturdyhttp/sturdy/policy"
)

// Config is what the operations of one Retry layer share.
type Config struct {
	P          policy.Retry // with its defaults
	Attempts   int
	DefaultCls bool // P.Classify is the default one: below 400 is success unread
	BufLimit   int64
	ProbLimit  int64
	KeyHeader  string
	OnAttempt  func(policy.AttemptEvent)
	OnRetry    func(policy.RetryEvent)
	OnGiveUp   func(policy.GiveUpEvent)
}

// Stack is what a Run learns from the stack it runs in, and what it
// tells it: the operation, as transport keeps it.
type Stack interface {
	// Attempt returns ctx marked as the context of attempt n.
	Attempt(ctx context.Context, n int) context.Context
	// IdleCut returns the watch whose idle cut failed bodies are read
	// with; nil: none.
	IdleCut(ctx context.Context) *timecut.Watch
	// DeadlineOf returns the deadline that bounds the work of ctx.
	DeadlineOf(ctx context.Context) (time.Time, bool)
	// Began returns when the operation began.
	Began() time.Time
	// Refused returns the error that attempt r made at at would meet
	// from the layers beneath; nil when it would be sent.
	Refused(r *http.Request, at time.Time) error
	// Route returns the URL that attempt r made at at would go to: its
	// own, or an alternate origin's.
	Route(r *http.Request, at time.Time) *url.URL
	// NoAttempt reports whether err is a refusal that is no attempt
	// (the concurrency limit's), of which OnAttempt is not told.
	NoAttempt(err error) bool
	// Succeeded records the operation's success after n attempts.
	Succeeded(n int, waited time.Duration)
	// End ends the operation of req after n attempts as step says, and
	// returns what the caller gets.
	End(req *http.Request, n int, waited time.Duration, resp *http.Response, err error, step policy.Step) (*http.Response, error)
}

// Run is one operation through Retry: what its attempts share.
type Run struct {
	C      *Config
	Next   http.RoundTripper // what sends each attempt
	Req    *http.Request     // the caller's
	Budget Budget            // what retries draw on; nil: none
	// St is the operation in the stack; set by the caller between Keep
	// and First, with Base, the request each attempt copies, which
	// carries it.
	St    Stack
	Base  *http.Request
	ctx   context.Context
	body  reqbody.Replay
	watch *connwatch.Watch // whether an attempt got a connection: for a request not safe to resend
	safe  bool
	n     int // the attempt's number
	free  int // free resends made
	prev  time.Duration
	// Waited is the time spent waiting between attempts.
	Waited time.Duration
	start  time.Time // when the last attempt was sent; zero when not timed
	// fastest is the operation's fastest answer: see policy.State.Fastest.
	fastest time.Duration
	// elsewhere are the hosts other than the request's own that the
	// operation was counted at in the budget: alternate origins it failed
	// over to (see charge).
	elsewhere []hosts.Key
}

// Keep keeps the caller's body for replay when more than one attempt
// may be made; an error says it failed as it was read: nothing was sent.
func (o *Run) Keep() error {
	c, req := o.C, o.Req
	if c.Attempts > 1 {
		var err error
		if o.body, err = reqbody.New(req, c.BufLimit); err != nil {
			// The caller's body failed as it was read to be kept: nothing
			// was sent.
			return &policy.BodyError{ContentLength: max(req.ContentLength, -1), Err: errors.Unwrap(err)}
		}
	} else {
		// No copy of the body is kept, but a free resend can have it
		// again when it is empty or the caller can make it again.
		o.body = reqbody.Replay{None: req.Body == nil || req.Body == http.NoBody, Get: req.GetBody}
	}
	o.safe = policy.SafeToResend(req, c.KeyHeader)
	return nil
}

// Finish closes the caller's body once no attempt reads it.
func (o *Run) Finish() { o.body.Finish() }

// First returns the operation's first attempt: it strips GetBody from a
// request that is not safe to send again (see WithoutGetBody).
func (o *Run) First() (*http.Request, error) {
	req := o.Req
	o.ctx = o.Base.Context()
	if !o.safe {
		if o.C.Attempts > 1 {
			o.watch, o.Base = connwatch.New(o.Base)
		}
		if o.Base.GetBody != nil {
			o.Base = WithoutGetBody(o.Base, o.Base != req)
		}
		o.body.NoGetBody = true
	}
	r := o.Base
	if o.body.First != nil {
		r = o.body.FirstRequest(o.Base)
	}
	r, err := reqbody.Check(r, r != req)
	if err != nil {
		reqbody.CloseBody(req)
		o.body.Finish()
	}
	return r, err
}

// Do makes the attempts, from r, the first, until one succeeds or
// policy.Retry.Next says to stop.
func (o *Run) Do(r *http.Request) (*http.Response, error) {
	for o.n = 1; ; o.n++ {
		resp, err := o.send(r)
		if err == nil && resp.StatusCode < 400 && o.C.DefaultCls {
			o.St.Succeeded(o.n, o.Waited)
			return resp, nil // success: the fast path
		}
		step, now := o.decide(r, resp, err)
		if step.Free {
			if again := o.again(resp); again != nil {
				r = again
				o.n-- // the same attempt again: a free resend is not counted
				continue
			}
			o.free = policy.MaxFreeResends // the body cannot be had: decide without it
			step, now = o.decide(r, resp, err)
		}
		if !step.Retry {
			return o.St.End(o.Req, o.n, o.Waited, resp, err, step)
		}
		next, out, err := o.wait(step, now, resp, err)
		if next == nil {
			return out, err
		}
		r, o.prev = next, step.Wait
	}
}

// send makes one attempt, r, and tells the hooks.
func (o *Run) send(r *http.Request) (*http.Response, error) {
	c := o.C
	o.start = time.Time{}
	if c.OnAttempt != nil || o.n > 1 {
		o.start = time.Now()
	}
	if o.watch != nil {
		o.watch.Reset()
	}
	resp, err := o.Next.RoundTrip(r)
	if resp == nil && err == nil { // a broken RoundTripper beneath: say so, as http.Client does
		err = ErrNilResponse
	}
	answered(resp, r)
	if c.OnAttempt != nil && !o.St.NoAttempt(err) { // a request refused for the limit is no attempt
		c.OnAttempt(policy.AttemptEvent{Request: o.Req, Attempt: o.n, Status: Status(resp), Err: err, Duration: time.Since(o.start)})
	}
	return resp, err
}

// decide asks [policy.Retry.Next] what follows attempt r's outcome.
func (o *Run) decide(r *http.Request, resp *http.Response, err error) (policy.Step, time.Time) {
	c, st := o.C, o.St
	var problem *policy.Problem
	if err == nil && o.ctx.Err() == nil {
		problem = respbody.ReadProblem(resp, c.ProbLimit, st.IdleCut(o.ctx))
	}
	now := time.Now()
	o.fastest = fastestAnswer(st, o.fastest, o.start, now, err)
	s := policy.State{
		Outcome: policy.Outcome{
			Request:      r,
			Response:     resp,
			Err:          err,
			Problem:      problem,
			Attempt:      o.n,
			Keyed:        policy.HasKey(o.Req, c.KeyHeader),
			NotConnected: o.watch != nil && err != nil && o.watch.NotConnected(),
			Canceled:     verdict.Canceled(r.Context()), // a cause's error cannot say
			Now:          now,
		},
		SafeToResend: o.safe,
		Replayable:   o.body.Replayable(),
		PrevWait:     o.prev,
		Done:         context.Cause(o.ctx),
		FreeResends:  o.free,
		Fastest:      o.fastest,
	}
	if dl, ok := st.DeadlineOf(o.ctx); ok {
		s.Deadline = dl
	}
	s.Refused = func(at time.Time) error { return st.Refused(r, at) }
	// moved is the host the retry goes to, when that is the operation's
	// first request there (see charge). The closure captures no
	// field of o, which would move o to the heap on the success path too.
	var moved hosts.Key
	if o.Budget != nil {
		budget, own, seen := o.Budget, o.Req.URL, o.elsewhere
		s.Budget = func() bool {
			var ok bool
			ok, moved = charge(budget, st.Route(r, now), own, seen, now)
			return ok
		}
	}
	step := c.P.Next(s)
	if moved != (hosts.Key{}) {
		o.elsewhere = append(o.elsewhere, moved)
	}
	return step, now
}

// again returns the request of a free resend, nil when its body cannot
// be had again.
func (o *Run) again(resp *http.Response) *http.Request {
	r, err := o.attemptRequest(o.n)
	if err != nil {
		return nil
	}
	if r, err = reqbody.Check(r, true); err != nil {
		reqbody.CloseBody(r)
		return nil
	}
	if resp != nil && resp.Body != nil { // a response and an error both: a broken RoundTripper
		resp.Body.Close()
	}
	o.free++
	return r
}

// wait carries out a step that retries: it makes the next attempt's
// request, drains the failed response and waits. When it returns no
// request, the operation ends with what it returns.
func (o *Run) wait(step policy.Step, now time.Time, resp *http.Response, err error) (*http.Request, *http.Response, error) {
	c, st := o.C, o.St
	next, gerr := o.attemptRequest(o.n + 1)
	if gerr != nil { // GetBody failed: no further attempt can be made
		resp, err = st.End(o.Req, o.n, o.Waited, resp, err, policy.Step{Reason: policy.ReasonBodyNotReplayable, Decision: policy.Decision{Reason: "GetBody: " + gerr.Error()}})
		return nil, resp, err
	}
	if c.OnRetry != nil {
		e := policy.RetryEvent{Request: o.Req, Attempt: o.n + 1, Wait: step.Wait, Reason: step.Decision.Reason, Status: Status(resp), Err: err}
		if step.Decision.HasRetryAfter {
			e.RetryAfter = step.Decision.RetryAfter
		}
		c.OnRetry(e)
	}
	if resp != nil {
		respbody.Drain(respbody.WatchIdle(resp.Body, st.IdleCut(o.ctx)))
	}
	// The wait runs from the decision, which found that it ends inside
	// the deadline: the time spent since (draining a slow error body,
	// the hook) is part of it, not added to it.
	if serr := Sleep(o.ctx, step.Wait-time.Since(now)); serr != nil {
		reqbody.CloseBody(next)
		reason := policy.ReasonDeadline
		if verdict.Canceled(o.ctx) {
			reason = policy.ReasonCanceled
		}
		resp, err := st.End(o.Req, o.n, o.Waited+time.Since(now), nil, serr, policy.Step{Reason: reason})
		return nil, resp, err
	}
	o.Waited += time.Since(now)
	r, cerr := reqbody.Check(next, true)
	if cerr != nil {
		reqbody.CloseBody(next)
		resp, err := st.End(o.Req, o.n, o.Waited, nil, cerr, policy.Step{Reason: policy.ReasonCallerError})
		return nil, resp, err
	}
	return r, nil, nil
}

// attemptRequest makes attempt n's request: a copy of the base request
// whose context says which attempt it is, with a fresh body.
func (o *Run) attemptRequest(n int) (*http.Request, error) {
	return o.body.Request(o.Base.WithContext(o.St.Attempt(o.Base.Context(), n)))
}

// charge reports whether budget allows the retry that attempt r's
// outcome asks for at now, and counts it if so. The budget is that of the
// host the retry goes to, u: own, the request's, or the alternate origin
// that Endpoints sends it to. The operation's first attempt at an
// alternate (one not in seen) is, for that host, an operation and no
// retry: it brings the alternate no more load than the operation would
// have brought its own host, so failing over from an origin that refuses
// connections spends no budget. Further retries there draw on the
// alternate's budget. It returns the alternate's key when it counted
// such a first attempt.
func charge(budget Budget, u, own *url.URL, seen []hosts.Key, now time.Time) (bool, hosts.Key) {
	at := timecut.Of(now)
	if k := hosts.KeyOf(u); k != hosts.KeyOf(own) && !slices.Contains(seen, k) {
		budget.Request(u, at)
		return true, k
	}
	return budget.Retry(u, at), hosts.Key{}
}

// fastestAnswer returns the shortest time an attempt of the operation
// took to get an answer (a response, or an error other than a deadline),
// counting the attempt sent at start whose outcome, err, came at now.
// A timed-out attempt says nothing of how long an answer takes. start is
// zero for a first attempt that was not timed; it is then timed from
// when the operation began, as a bound above knows it.
func fastestAnswer(st Stack, fastest time.Duration, start, now time.Time, err error) time.Duration {
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		return fastest
	}
	if start.IsZero() {
		start = st.Began()
	}
	took := now.Sub(start)
	if took > 0 && (fastest == 0 || took < fastest) {
		return took
	}
	return fastest
}

// answered sets resp.Request to r, the request it answers, when the
// RoundTripper beneath left it unset (a fake, an SDK's test transport),
// as net/http's Transport sets it: transport.OperationOf finds the
// operation through it.
func answered(resp *http.Response, r *http.Request) {
	if resp != nil && resp.Request == nil {
		resp.Request = r
	}
}

// WithoutGetBody returns r without GetBody (r itself when own, else a
// copy): what every attempt of a request that is not
// [policy.SafeToResend] is sent as.
// net/http sends a request's body again by itself whenever it has
// GetBody and its HTTP/2 transport retries the stream: after a
// RST_STREAM(PROTOCOL_ERROR), which does not say that the server did not
// act, it does so on a new connection again and again until the context
// ends. Without GetBody it sends such a body once; a request it has not
// begun to send (a connection found unusable) it still sends elsewhere,
// and Retry sends the body again when the outcome proves the server did
// not act.
func WithoutGetBody(r *http.Request, own bool) *http.Request {
	if !own {
		c := *r
		r = &c
	}
	r.GetBody = nil
	return r
}

// Status returns resp's status; 0 for none.
func Status(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

// Sleep waits for d or until ctx is done, whichever comes first.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
