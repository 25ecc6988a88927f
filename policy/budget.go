package policy

import (
	"math"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/internal/window"
)

// Defaults of [Budget], used where a field is zero.
const (
	DefaultBudgetRatio      = 0.2
	DefaultBudgetMinRetries = 10
	DefaultBudgetWindow     = 10 * time.Second
	DefaultBudgetMaxHosts   = 4096
)

// Budget bounds retries per host to a fraction of recent traffic, the way
// Envoy's retry budgets and gRPC's retry throttling do: over the last
// Window, a host may see at most MinRetries + Ratio × operations retries.
// When a server fails everything, a fleet of clients using budgets adds at
// most Ratio more load (20% by default) instead of multiplying it by the
// number of attempts; when it fails a few requests, every one of them is
// still retried.
//
// A retry refused by the budget is not an error: the failed response or
// error is handed back as it is.
//
// The zero value is ready to use with the documented defaults; a Budget
// must not be copied after first use. It is safe for concurrent use by
// multiple goroutines and meant to be shared by every [Retry] that talks
// to the same hosts. transport.New keeps the budget of each host beside
// its breaker and its quota; a Budget set in Retry.Budget keeps its own.
type Budget struct {
	// Ratio is how many retries each operation earns: 0.2 allows one
	// retry for every five operations. Zero means [DefaultBudgetRatio];
	// a negative or NaN Ratio earns no retry beyond MinRetries.
	Ratio float64
	// MinRetries are allowed per Window whatever the traffic, so that a
	// quiet client can still retry. Zero means [DefaultBudgetMinRetries].
	MinRetries int
	// Window is how far back traffic counts. Zero means
	// [DefaultBudgetWindow] (10s).
	Window time.Duration
	// MaxHosts bounds how many hosts are tracked; beyond it, hosts unused
	// for a while are forgotten. Zero means [DefaultBudgetMaxHosts].
	MaxHosts int
	// Store, when set, keeps the counts where other processes see them
	// too, so that one budget bounds the retries a whole fleet sends to a
	// host. The Budget counts in this process as well: when the Store
	// cannot decide in time, this process's own counts decide. Nil means
	// this process alone.
	Store BudgetStore

	once sync.Once
	slot atomic.Pointer[hosts.Slot[window.Counter]] // A: operations, B: retries
}

// BudgetStore keeps the counts of a [Budget] somewhere other processes
// share, such as Redis (the fleet module's Fleet.Budgets), so that the
// retries every process sends to a host are bounded together by the
// Budget's rule, over the operations of every process.
//
// A store may count in batches and hand out retries ahead: it must never
// allow more than [BudgetRule.Allowance] of the fleet's operations over
// the Window, and should not wait on its backend for long, since Retry
// is called before a retry is sent.
type BudgetStore interface {
	// Request counts one operation (a first attempt) to host key at now,
	// under rule: the store counts it in rule's Window, even before any
	// retry to key is asked for.
	Request(key string, now time.Time, rule BudgetRule)
	// Retry reports whether a retry to host key at now fits in rule over
	// every process's counts, and counts it if so. When the store cannot
	// tell in time (its backend slow or down) it returns ok false, and
	// the Budget decides on this process's own counts instead.
	Retry(key string, now time.Time, rule BudgetRule) (allowed, ok bool)
}

// BudgetRule is a [Budget]'s rule with its defaults filled in: over the
// last Window, a host may see at most MinRetries + Ratio × operations
// retries.
type BudgetRule struct {
	// Ratio is what each operation earns, never negative nor NaN.
	Ratio float64
	// MinRetries are allowed whatever the traffic.
	MinRetries int
	// Window is how far back traffic counts.
	Window time.Duration
}

// Rule returns b's rule, with the defaults of the zero fields.
func (b *Budget) Rule() BudgetRule {
	r := BudgetRule{Ratio: b.Ratio, MinRetries: b.MinRetries, Window: b.Window}
	if r.Ratio == 0 {
		r.Ratio = DefaultBudgetRatio
	}
	if !(r.Ratio > 0) {
		r.Ratio = 0
	}
	if r.MinRetries == 0 {
		r.MinRetries = DefaultBudgetMinRetries
	}
	if r.Window <= 0 {
		r.Window = DefaultBudgetWindow
	}
	return r
}

// Allowance returns how many retries ops operations allow over the
// Window: MinRetries plus Ratio × ops, rounded down, as a float64 so that
// huge settings do not overflow.
func (r BudgetRule) Allowance(ops int) float64 {
	// What operations earn is never below zero, so no Ratio takes
	// MinRetries away: +Inf times no operation (NaN) earns nothing.
	earned := r.Ratio * float64(ops)
	if !(earned > 0) {
		earned = 0
	}
	return float64(r.MinRetries) + math.Trunc(earned)
}

// Allows reports whether one more retry fits in a budget that saw ops
// operations and retries retries over its Window: whether retries <
// MinRetries + Ratio × ops. It is the decision that Retry applies, pure.
func (b *Budget) Allows(ops, retries int) bool {
	// In float64: a huge Ratio or MinRetries must not overflow into a
	// negative allowance.
	return float64(retries) < b.Rule().Allowance(ops)
}

// BucketWidth returns the width of the buckets that a host's traffic is
// counted in: a tenth of Window.
func (b *Budget) BucketWidth() time.Duration {
	w := b.Window
	if w <= 0 {
		w = DefaultBudgetWindow
	}
	return max(1, w/window.Buckets) // a Window under 10ns still has buckets
}

func init() {
	hosts.BudgetOn = func(b any, reg *hosts.Registry) any { return newBudgetOn(b.(*Budget), reg) }
}

// newBudgetOn returns a Budget with b's settings that keeps its hosts in
// reg. transport.New passes the registry its layers share (through
// hosts.BudgetOn: the registry is not part of this package's API), so
// that one bound and one eviction rule cover breakers, quotas and
// budgets. A nil reg gives the Budget a registry of its own, as the zero
// Budget has.
func newBudgetOn(b *Budget, reg *hosts.Registry) *Budget {
	nb := &Budget{Ratio: b.Ratio, MinRetries: b.MinRetries, Window: b.Window, MaxHosts: b.MaxHosts, Store: b.Store}
	nb.once.Do(func() { nb.slot.Store(nb.newSlot(reg)) })
	return nb
}

// hosts returns the slot the budget keeps its hosts' traffic in, made on
// first use.
func (b *Budget) hosts() *hosts.Slot[window.Counter] {
	if s := b.slot.Load(); s != nil {
		return s
	}
	return b.firstUse()
}

func (b *Budget) firstUse() *hosts.Slot[window.Counter] {
	b.once.Do(func() { b.slot.Store(b.newSlot(nil)) })
	return b.slot.Load()
}

// newSlot returns the slot of reg, or of a registry of the budget's own
// when reg is nil or has no slot left, that a host's traffic is kept in.
func (b *Budget) newSlot(reg *hosts.Registry) *hosts.Slot[window.Counter] {
	width := int64(b.BucketWidth())
	newCounter := func(hosts.Key) *window.Counter { return window.NewCounter(width) }
	if reg != nil {
		if slot := hosts.NewSlot(reg, newCounter, nil); slot != nil {
			return slot
		}
	}
	maxHosts := b.MaxHosts
	if maxHosts <= 0 {
		maxHosts = DefaultBudgetMaxHosts
	}
	reg = hosts.New(hosts.Options{MaxHosts: maxHosts, IdleTimeout: time.Duration(width) * window.Buckets})
	return hosts.NewSlot(reg, newCounter, nil)
}

// keyOf returns the registry key of host key: a host key of package
// transport ("https://api.example.com") is the key of its URL's host.
func keyOf(key string) hosts.Key {
	if scheme, host, ok := strings.Cut(key, "://"); ok {
		return hosts.Key{Scheme: scheme, Host: host}
	}
	return hosts.Custom(key)
}

// Request counts one operation (a first attempt) to host key at now, and
// in the Store when there is one.
func (b *Budget) Request(key string, now time.Time) {
	if b.Store != nil {
		b.Store.Request(key, now, b.Rule())
	}
	b.request(b.hosts().Get(keyOf(key)), now.UnixNano())
}

// Retry reports whether a retry to host key at now fits in the budget,
// and counts it if so. With a Store, the Store decides on the fleet's
// counts, unless it cannot in time. A host the budget cannot track
// (every tracked host busy) is not held back, unless the Store says so.
func (b *Budget) Retry(key string, now time.Time) bool {
	c := b.hosts().Get(keyOf(key))
	if b.Store != nil {
		if allowed, ok := b.Store.Retry(key, now, b.Rule()); ok {
			return b.counted(c, now.UnixNano(), allowed)
		}
	}
	return b.retry(c, now.UnixNano())
}

// RequestURL is [Budget.Request] for the host of u, named as
// transport.HostKey names it, at unixNano (as [time.Time.UnixNano]
// gives it). A caller that keeps a monotonic clock of its own, as
// package transport does, counts without building a time.Time.
func (b *Budget) RequestURL(u *url.URL, unixNano int64) {
	if b.Store != nil {
		b.Store.Request(hosts.KeyOf(u).String(), time.Unix(0, unixNano), b.Rule())
	}
	b.request(b.hosts().GetURL(u), unixNano)
}

// RetryURL is [Budget.Retry] for the host of u at unixNano, as
// [Budget.RequestURL] takes them.
func (b *Budget) RetryURL(u *url.URL, unixNano int64) bool {
	c := b.hosts().GetURL(u)
	if b.Store != nil {
		if allowed, ok := b.Store.Retry(hosts.KeyOf(u).String(), time.Unix(0, unixNano), b.Rule()); ok {
			return b.counted(c, unixNano, allowed)
		}
	}
	return b.retry(c, unixNano)
}

// counted counts in c a retry the Store allowed, so that this process's
// own counts are right should the Store fail later, and returns allowed.
func (b *Budget) counted(c *window.Counter, now int64, allowed bool) bool {
	if allowed && c != nil {
		c.Add(now, 0, 1)
	}
	return allowed
}

// request counts an operation at now in a host's window c; a nil c, an
// untracked host, counts none.
func (b *Budget) request(c *window.Counter, now int64) {
	if c != nil {
		c.Add(now, 1, 0)
	}
}

// retry decides a retry at now with Allows, and counts it, in one step
// on a host's window c; a nil c, an untracked host, is not held back.
func (b *Budget) retry(c *window.Counter, now int64) bool {
	if c == nil {
		return true
	}
	return c.AddIf(now, 0, 1, func(ops, retries uint64) bool { return b.Allows(int(ops), int(retries)) })
}

// Hosts reports how many hosts the budget tracks.
func (b *Budget) Hosts() int {
	return b.hosts().Registry().Len()
}
