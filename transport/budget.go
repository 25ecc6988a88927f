package transport

import (
	"github.com/sturdyhttp/sturdy/internal/timecut"
	"net/url"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/policy"
)

// retryBudget is the per-host retry budget that [Retry] and [Hedge] draw
// on: a [policy.Budget], which counts and decides; this is only its
// wiring to requests and to the bounds' clock.
//
// Times are readings of the bounds' clock ([clockNow]), which a bound
// above has read already when the operation began: counting an
// operation reads no clock of its own.
type retryBudget interface {
	// request counts an operation to u's host at now.
	request(u *url.URL, now time.Duration)
	// retry reports whether a retry to u's host fits at now, and counts
	// it if so.
	retry(u *url.URL, now time.Duration) bool
}

// budgetOf returns b as a retryBudget; nil when b is nil. Two results of
// one b are equal.
func budgetOf(b *policy.Budget) retryBudget {
	if b == nil {
		return nil
	}
	return budget{b}
}

// newSharedBudget returns a budget with b's settings whose hosts live in
// reg, beside each host's breaker and quota.
func newSharedBudget(b *policy.Budget, reg *hosts.Registry) retryBudget {
	return budgetOf(hosts.BudgetOn(b, reg).(*policy.Budget))
}

type budget struct{ b *policy.Budget }

func (o budget) request(u *url.URL, now time.Duration) { o.b.RequestURL(u, unixNano(now)) }

func (o budget) retry(u *url.URL, now time.Duration) bool { return o.b.RetryURL(u, unixNano(now)) }

// clockBaseUnix is timecut.Base in Unix nanoseconds.
var clockBaseUnix = timecut.Base.UnixNano()

// unixNano returns timecut.Time(now).UnixNano() without building a
// time.Time, which would cost the success path more than the count.
func unixNano(now time.Duration) int64 { return clockBaseUnix + int64(now) }
