package retry

import (
	"net/url"
	"time"

	"github.com/sturdyhttp/sturdy/internal/timecut"
	"github.com/sturdyhttp/sturdy/policy"
)

// Budget is the per-host retry budget that Retry and Hedge draw on: a
// [policy.Budget], which counts and decides; this is only its wiring to
// requests and to the bounds' clock.
//
// Times are readings of the bounds' clock ([timecut.Now]), which a
// bound above has read already when the operation began: counting an
// operation reads no clock of its own.
type Budget interface {
	// Request counts an operation to u's host at now.
	Request(u *url.URL, now time.Duration)
	// Retry reports whether a retry to u's host fits at now, and counts
	// it if so.
	Retry(u *url.URL, now time.Duration) bool
}

// BudgetOf returns b as a Budget; nil when b is nil. Two results of one
// b are equal.
func BudgetOf(b *policy.Budget) Budget {
	if b == nil {
		return nil
	}
	return budget{b}
}

type budget struct{ b *policy.Budget }

func (o budget) Request(u *url.URL, now time.Duration) { o.b.RequestURL(u, unixNano(now)) }

func (o budget) Retry(u *url.URL, now time.Duration) bool { return o.b.RetryURL(u, unixNano(now)) }

// clockBaseUnix is timecut.Base in Unix nanoseconds.
var clockBaseUnix = timecut.Base.UnixNano()

// unixNano returns timecut.Time(now).UnixNano() without building a
// time.Time, which would cost the success path more than the count.
func unixNano(now time.Duration) int64 { return clockBaseUnix + int64(now) }
