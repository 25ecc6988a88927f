package policy

import (
	"math"
	"sync"
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

	once sync.Once
	slot *hosts.Slot[window.Counter] // A: operations, B: retries
}

// Allows reports whether one more retry fits in a budget that saw ops
// operations and retries retries over its Window: whether retries <
// MinRetries + Ratio × ops. It is the decision that Retry applies, pure.
func (b *Budget) Allows(ops, retries int) bool {
	ratio := b.Ratio
	if ratio == 0 {
		ratio = DefaultBudgetRatio
	}
	floor := b.MinRetries
	if floor == 0 {
		floor = DefaultBudgetMinRetries
	}
	// In float64: a huge Ratio or MinRetries must not overflow into a
	// negative allowance. What operations earn is never below zero, so no
	// Ratio takes MinRetries away: not a negative or NaN one, nor +Inf
	// times no operation (NaN).
	earned := ratio * float64(ops)
	if !(earned > 0) {
		earned = 0
	}
	return float64(retries) < float64(floor)+math.Trunc(earned)
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

func (b *Budget) host(key string) *window.Counter {
	b.init()
	return b.slot.Get(hosts.Custom(key))
}

// init makes the registry the budget keeps its hosts in, on first use.
func (b *Budget) init() {
	b.once.Do(func() {
		maxHosts := b.MaxHosts
		if maxHosts <= 0 {
			maxHosts = DefaultBudgetMaxHosts
		}
		width := int64(b.BucketWidth())
		reg := hosts.New(hosts.Options{MaxHosts: maxHosts, IdleTimeout: time.Duration(width) * window.Buckets})
		b.slot = hosts.NewSlot(reg, func(hosts.Key) *window.Counter {
			c := new(window.Counter)
			c.Init(width)
			return c
		}, nil)
	})
}

// Request counts one operation (a first attempt) to host key at now.
func (b *Budget) Request(key string, now time.Time) {
	if c := b.host(key); c != nil {
		c.Add(now.UnixNano(), 1, 0)
	}
}

// Retry reports whether a retry to host key at now fits in the budget,
// and counts it if so. A host the budget cannot track (every tracked
// host busy) is not held back.
func (b *Budget) Retry(key string, now time.Time) bool {
	c := b.host(key)
	if c == nil {
		return true
	}
	return c.AddIf(now.UnixNano(), 0, 1, func(ops, retries uint64) bool { return b.Allows(int(ops), int(retries)) })
}

// Hosts reports how many hosts the budget tracks.
func (b *Budget) Hosts() int {
	b.init()
	return b.slot.Registry().Len()
}
