package transport

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"
)

// opRecord is what the layers beneath [Retry] tell it about one
// operation, through the context of its attempts: context values pass
// through any RoundTripper in between (an OpenTelemetry transport, an
// SDK's logger), where an interface asked of the next layer would not.
// A [Breaker] that is open after an attempt records until when it will
// refuse the operation's next attempt, so that Retry does not wait only
// to be refused.
//
// Retry gives its attempts a record from the second on: the first
// attempt is the caller's request itself, with nothing added, so that a
// request that succeeds at once costs nothing. (Inside [New], Retry asks
// the stack's breakers directly, from the first attempt on.)
type opRecord struct {
	refusal atomic.Pointer[refusedUntil]
	base    *http.Request // the caller's request, its context carrying the record
}

type refusedUntil struct {
	err   error
	until time.Time
}

// recordCtx carries an opRecord: one allocation for the record and the
// context that holds it.
type recordCtx struct {
	context.Context
	rec opRecord
}

type opRecordKey struct{}

func (c *recordCtx) Value(key any) any {
	if key == (opRecordKey{}) {
		return &c.rec
	}
	return c.Context.Value(key)
}

// recorded returns req with a record in its context, making both when
// *rec is nil.
func recorded(rec **opRecord, req *http.Request) *http.Request {
	if *rec == nil {
		c := &recordCtx{Context: req.Context()}
		c.rec.base = req.WithContext(c)
		*rec = &c.rec
	}
	return (*rec).base
}

// opRecordOf returns the record in ctx, nil when there is none.
func opRecordOf(ctx context.Context) *opRecord {
	rec, _ := ctx.Value(opRecordKey{}).(*opRecord)
	return rec
}

// refuse records that the operation's next attempt will be refused with
// err until the time until.
func (o *opRecord) refuse(err error, until time.Time) {
	o.refusal.Store(&refusedUntil{err: err, until: until})
}

// refusedBeneath returns the error that an attempt of req's operation
// made at the time at would meet, as far as is known: from the record in
// req's context, or from refuses (New's breakers) when it is set; nil
// when it would be sent.
func refusedBeneath(refuses func(*http.Request, time.Time) error, req *http.Request, at time.Time) error {
	if err := opRecordOf(req.Context()).refused(at); err != nil {
		return err
	}
	if refuses != nil {
		return refuses(req, at)
	}
	return nil
}

// refused returns the error recorded for an attempt made at the time at,
// nil when none is.
func (o *opRecord) refused(at time.Time) error {
	if o == nil {
		return nil
	}
	if r := o.refusal.Load(); r != nil && at.Before(r.until) {
		return r.err
	}
	return nil
}

// refusal returns the error that req's next attempt, made at the time
// at, would meet, as far as the layers beneath have said (in rec, nil
// before the second attempt) or, inside [New], its breakers say; nil
// when it would be sent.
func (t *retrier) refusal(rec *opRecord, req *http.Request, at time.Time) error {
	if err := rec.refused(at); err != nil {
		return err
	}
	if t.c.refuses != nil {
		return t.c.refuses(req, at)
	}
	return nil
}
