package ratelimit

import (
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hosts"
)

// waiter is one request going through Reserve.
type waiter struct {
	t     *Tracker
	r     *http.Request
	k     hosts.Key
	st    *hostState
	start time.Time
	// deadline is the operation's, beside the context's (zero: none).
	deadline time.Time
	// waited is set once the request has waited: a wait of the
	// Tracker's own making that would then run past its budget is
	// skipped rather than refused, so that no request waits only to fail.
	waited bool
	// counted is set once the request is counted in hostState.waiters:
	// from its first wait until Reserve returns, so that a spread sized
	// when a pause ends counts the requests woken with the one asking,
	// whether or not they have taken the host's lock yet.
	counted bool
}

// count counts the request among its host's waiters, once.
func (w *waiter) count() {
	if !w.counted {
		w.counted = true
		w.st.waiters.Add(1)
	}
}

// done ends the count that count began.
func (w *waiter) done() {
	if w.counted {
		w.counted = false
		w.st.waiters.Add(-1)
	}
}

// admit asks the host's state until it lets the request go, waiting as
// it says.
func (w *waiter) admit(res *Reservation) error {
	var a admission
	for {
		now := time.Now()
		a.counted = w.counted
		v := w.st.admit(now, res, &a, w.t.o.Reserve)
		switch v.reason {
		case "":
			return nil
		case ReasonAwaitQuota:
			waited, err := w.awaitNews(now, v.news, v.until)
			if err != nil {
				return err
			}
			if !v.out {
				a.giveUp = true // one round of news of a new window at most; then go on what is known
			}
			// The answers of requests sent before the host had state are
			// waited for while they come, not past the budget nor a
			// second after the last.
			a.outDone = a.outDone || !waited
			continue
		}
		if !v.asked.IsZero() && w.pastBudget(v.asked, serverAsked(v.reason)) {
			// The server's own end is past the budget: MaxPause holds
			// the host for less, but this request would wait to fail.
			return w.reject(v.asked.Sub(now), v.asked, v.reason, w.refusal(now, v))
		}
		if err := w.sleepFor(now, v); err != nil {
			return err
		}
	}
}

// budget returns the latest time a wait may end: start+MaxWait, or the
// request's deadline if sooner. server says the wait is one a server
// asked for (see serverAsked), which MaxServerWait bounds too. ok is
// false when no wait is allowed.
func (w *waiter) budget(server bool) (limit time.Time, strict bool, ok bool) {
	mw := w.t.o.maxWait()
	if server {
		mw = w.t.o.maxServerWait()
	}
	if mw < 0 {
		return time.Time{}, false, false
	}
	limit = w.start.Add(mw)
	d, has := w.r.Context().Deadline()
	if !w.deadline.IsZero() && (!has || w.deadline.Before(d)) {
		d, has = w.deadline, true
	}
	if has && !d.After(limit) {
		return d, true, true
	}
	return limit, false, true
}

// pastBudget reports whether a wait until until would end past the
// budget (see budget): after start+MaxWait (or MaxServerWait, for a
// server-asked wait), or at or after the request's deadline.
func (w *waiter) pastBudget(until time.Time, server bool) bool {
	limit, strict, ok := w.budget(server)
	return !ok || until.After(limit) || (strict && !until.Before(limit))
}

// sleep waits until until, or fails fast when that is past the budget.
// own says the wait is of the Tracker's own making (see waiter.waited).
func (w *waiter) sleep(now, until time.Time, reason string, own bool) error {
	return w.sleepFor(now, verdict{until: until, reason: reason, own: own})
}

// sleepFor waits until v.until, or fails fast when that is past the
// budget, with an error that says what v holds the request for.
func (w *waiter) sleepFor(now time.Time, v verdict) error {
	until, reason, own := v.until, v.reason, v.own
	d := until.Sub(now)
	if d <= 0 {
		return nil
	}
	if w.pastBudget(until, serverAsked(reason)) {
		if own && w.waited {
			return nil
		}
		return w.reject(d, until, reason, w.refusal(now, v))
	}
	w.waited = true
	if f := w.t.o.OnWait; f != nil {
		f(WaitEvent{Request: w.r, Key: w.k.String(), Wait: d, Reason: reason})
	}
	w.count()
	timer := time.NewTimer(d)
	defer timer.Stop()
	ctx := w.r.Context()
	select {
	case <-timer.C:
		return nil
	case <-v.wake:
		return nil // the state changed: ask again
	case <-ctx.Done():
		return ctx.Err()
	}
}

// awaitNews waits for the next response of the host, at most
// awaitNewsMax (and not past until, unless zero), and not at all when
// the request's deadline is nearer; it reports whether news came.
func (w *waiter) awaitNews(now time.Time, news <-chan struct{}, until time.Time) (bool, error) {
	limit, _, ok := w.budget(true)
	if !ok || limit.Sub(now) <= awaitNewsMax {
		return false, nil
	}
	d := awaitNewsMax
	if !until.IsZero() {
		if d = min(d, until.Sub(now)); d <= 0 {
			return false, nil
		}
	}
	if f := w.t.o.OnWait; f != nil {
		f(WaitEvent{Request: w.r, Key: w.k.String(), Reason: ReasonAwaitQuota})
	}
	w.count()
	timer := time.NewTimer(d)
	defer timer.Stop()
	ctx := w.r.Context()
	select {
	case <-news:
		return true, nil
	case <-timer.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// serverAsked reports whether a wait for reason is one a server asked
// for: a pause (Retry-After), a spent quota's reset, or the news of a
// quota's new window. [Options.MaxServerWait] bounds those; the waits of
// the Tracker's own making and the client-side limiter's, only MaxWait.
func serverAsked(reason string) bool {
	switch reason {
	case ReasonRetryAfter, ReasonQuota, ReasonAwaitQuota:
		return true
	}
	return false
}

// awaitNewsMax bounds a wait for the first response of a new window
// whose reset is not known yet; past it, the request goes anyway.
const awaitNewsMax = time.Second

// clientPlace takes the request's place in the client-side limiter
// (Options.Rate), keeping it in res so that a cancel gives it back; Reserve
// waits for it once the quotas have admitted the request. A place that
// comes past the budget is not taken: the request fails now.
func (w *waiter) clientPlace(res *Reservation) error {
	now := time.Now()
	cr := w.st.client.ReserveN(now, 1)
	if !cr.OK() {
		return w.reject(w.t.o.maxWait(), now.Add(w.t.o.maxWait()), ReasonClientRate, nil)
	}
	if d := cr.DelayFrom(now); d > 0 && w.pastBudget(now.Add(d), false) {
		cr.CancelAt(now)
		return w.reject(d, now.Add(d), ReasonClientRate, nil)
	}
	res.client = cr
	return nil
}

// refusal is the error of a request that v holds at now past its
// budget. When the server asked for longer than MaxPause, Hold says so;
// a pause then resumes at its hold's end, v.until (what the server asked
// is in RetryAfter), and a quota resets at v.asked, the server's word.
func (w *waiter) refusal(now time.Time, v verdict) *QuotaError {
	end := v.until
	err := &QuotaError{Key: w.k.String(), Reason: v.reason}
	if !v.asked.IsZero() && v.asked.After(v.until) {
		err.Hold = w.st.maxPause
		if v.reason != ReasonRetryAfter {
			end = v.asked
		}
	}
	err.Reset, err.Wait = end, end.Sub(now)
	if v.reason == ReasonRetryAfter {
		err.Status, err.RetryAfter = v.cause.status, v.cause.retryAfter
	}
	return err
}

// reject fails the request with err, made when nil for a wait of d
// until until for reason, and tells OnReject.
func (w *waiter) reject(d time.Duration, until time.Time, reason string, err *QuotaError) error {
	if err == nil {
		err = &QuotaError{Key: w.k.String(), Reset: until, Wait: d, Reason: reason}
	}
	if f := w.t.o.OnReject; f != nil {
		f(RejectEvent{Request: w.r, Key: err.Key, Wait: d, Reason: reason, Err: err})
	}
	return err
}
