// Package verdict keeps one attempt's verdict where every layer of a
// stack finds it, so that the attempt is judged once (by policy.Judge)
// and read by the rest.
package verdict

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"

	"github.com/sturdyhttp/sturdy/internal/connwatch"
	"github.com/sturdyhttp/sturdy/policy"
)

// Of returns the verdict of the attempt req that ended with resp and err.
// An attempt is judged once: the first layer to ask (the innermost, as
// the outcome travels up) judges it with [policy.Judge] and every fact
// (status, error, whether the caller ended it, as callerEnded says of
// req's context, whether it was canceled ([Canceled]), whether a
// connection was made, as a watch of
// [connwatch.NewShared] says) and keeps the verdict in k, the attempt's;
// the layers above read it there. With a nil k (a layer used alone), or
// an outcome other than the one kept, the attempt is judged here, by the
// same rule.
func Of(k *Kept, req *http.Request, resp *http.Response, err error, callerEnded func(context.Context) bool) policy.Verdict {
	if v, ok := k.Load(resp, err); ok {
		return v
	}
	v := judge(req, resp, err, callerEnded)
	k.Keep(resp, err, v)
	return v
}

// judge is [policy.Judge] on an attempt of req, with the facts its
// context holds.
func judge(req *http.Request, resp *http.Response, err error, callerEnded func(context.Context) bool) policy.Verdict {
	if f := Hook.Load(); f != nil {
		(*f)(req)
	}
	if err == nil && resp != nil {
		return policy.JudgeStatus(resp.StatusCode) // Judge's rule for a response; builds no Outcome
	}
	ctx := req.Context()
	var notConnected bool
	if w := connwatch.Of(ctx); w != nil {
		notConnected = w.NotConnected()
	}
	return policy.Judge(policy.Outcome{Request: req, Response: resp, Err: err,
		CallerEnded: err != nil && callerEnded(ctx), Canceled: err != nil && Canceled(ctx),
		NotConnected: notConnected})
}

// Canceled reports whether ctx was canceled rather than cut by a
// deadline: it ended as [context.Canceled], with a cause that does not
// match [context.DeadlineExceeded]. A caller's cancel(cause) is a cancel;
// a bound of the stack, which cancels with a *transport.DeadlineError,
// and a deadline of the caller's, cause or none, are not. It is the one
// rule: net/http returns the cause, so the error cannot tell.
func Canceled(ctx context.Context) bool {
	return ctx.Err() == context.Canceled && !errors.Is(context.Cause(ctx), context.DeadlineExceeded)
}

// Hook, when set, is called each time an attempt is judged: tests count
// the judgments of an attempt with it.
var Hook atomic.Pointer[func(*http.Request)]

// Kept is one attempt's verdict and the outcome it judged. It is
// written once: by the caller of Keep that wins it from empty; the
// outcome (resp, err) is kept beside the verdict, so that a layer whose
// outcome differs (one that a layer between changed) judges its own.
// Its zero value is empty and ready to use; it is safe for concurrent
// use. It is 32 bytes: the verdict's flags share the word that
// publishes them, and a refusal's name is read again from the error it
// was found in.
type Kept struct {
	state atomic.Uint32 // writing, or done with the verdict's flags; 0: empty
	resp  *http.Response
	err   error
}

// The bits of Kept.state.
const (
	writing = 1 << iota
	done
	sent
	accepted
	overloaded
	lost
	refused
	hostShift = iota // Verdict.Host, in the bits from here
)

// Load returns the verdict kept for the outcome (resp, err); false when
// none is, or the one kept is another outcome's. A nil k keeps nothing.
func (k *Kept) Load(resp *http.Response, err error) (policy.Verdict, bool) {
	if k == nil {
		return policy.Verdict{}, false
	}
	st := k.state.Load()
	if st&done == 0 || k.resp != resp || !sameError(k.err, err) {
		return policy.Verdict{}, false
	}
	var refusal policy.Reason
	if st&refused != 0 {
		refusal, _ = policy.RefusedBy(err) // the name of the refusal Judge found in err
	}
	return policy.Verdict{
		Sent:       st&sent != 0,
		Refusal:    refusal,
		Host:       policy.HostVerdict(st >> hostShift),
		Accepted:   st&accepted != 0,
		Overloaded: st&overloaded != 0,
		Lost:       st&lost != 0,
	}, true
}

// Keep keeps v, [policy.Judge]'s verdict on the outcome (resp, err),
// unless a verdict is kept already. A nil k keeps nothing.
func (k *Kept) Keep(resp *http.Response, err error, v policy.Verdict) {
	if k == nil || !k.state.CompareAndSwap(0, writing) {
		return
	}
	k.resp, k.err = resp, err
	st := uint32(done) | uint32(uint8(v.Host))<<hostShift
	for _, f := range [...]struct {
		on  bool
		bit uint32
	}{{v.Sent, sent}, {v.Accepted, accepted}, {v.Overloaded, overloaded}, {v.Lost, lost}, {v.Refusal != "", refused}} {
		if f.on {
			st |= f.bit
		}
	}
	k.state.Store(st)
}

// sameError reports whether a and b are the same error value. Errors
// that cannot be compared (== panics on them) are never the same.
func sameError(a, b error) (same bool) {
	if a == nil || b == nil {
		return a == b
	}
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}
