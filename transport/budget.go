package transport

import (
	"net/url"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/internal/window"
	"github.com/sturdyhttp/sturdy/policy"
)

// retryBudget is the per-host retry budget that [Retry] draws on: the
// caller's own [policy.Budget], or the one [New] keeps in its per-host
// registry.
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

// budgetOf returns b as a retryBudget; nil when b is nil.
func budgetOf(b *policy.Budget) retryBudget {
	if b == nil {
		return nil
	}
	return ownBudget{b}
}

// ownBudget is a [policy.Budget] that keeps its own hosts, keyed as the
// registry keys them.
type ownBudget struct{ b *policy.Budget }

func (o ownBudget) request(u *url.URL, now time.Duration) {
	o.b.Request(hosts.KeyOf(u).String(), clockTime(now))
}

func (o ownBudget) retry(u *url.URL, now time.Duration) bool {
	return o.b.Retry(hosts.KeyOf(u).String(), clockTime(now))
}

// sharedBudget keeps the traffic of each host in a slot of the stack's
// registry, beside the host's breaker and quota, and decides with a
// [policy.Budget]'s settings. Its windows run on the bounds' clock.
type sharedBudget struct {
	b    *policy.Budget
	slot *hosts.Slot[window.Counter] // A: operations, B: retries
}

// newSharedBudget returns a budget with b's settings whose hosts live in
// reg; nil when reg has no slot left.
func newSharedBudget(b *policy.Budget, reg *hosts.Registry) retryBudget {
	width := int64(b.BucketWidth())
	slot := hosts.NewSlot(reg, func(hosts.Key) *window.Counter {
		c := new(window.Counter)
		c.Init(width)
		return c
	}, nil)
	if slot == nil {
		return budgetOf(b)
	}
	return &sharedBudget{b: b, slot: slot}
}

func (s *sharedBudget) request(u *url.URL, now time.Duration) {
	if c := s.slot.GetURL(u); c != nil {
		c.Add(int64(now), 1, 0)
	}
}

func (s *sharedBudget) retry(u *url.URL, now time.Duration) bool {
	c := s.slot.GetURL(u)
	if c == nil {
		return true
	}
	return c.AddIf(int64(now), 0, 1, func(ops, retries uint64) bool {
		return s.b.Allows(int(ops), int(retries))
	})
}
