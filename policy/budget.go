package policy

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of [Budget], used where a field is zero.
const (
	DefaultBudgetRatio      = 0.2
	DefaultBudgetMinRetries = 10
	DefaultBudgetWindow     = 10 * time.Second
	DefaultBudgetMaxHosts   = 4096
)

// budgetSlots is how many slots the window is cut into: the budget forgets
// traffic one slot at a time.
const budgetSlots = 10

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
// to the same hosts.
type Budget struct {
	// Ratio is how many retries each operation earns: 0.2 allows one
	// retry for every five operations. Zero means [DefaultBudgetRatio].
	Ratio float64
	// MinRetries are allowed per Window whatever the traffic, so that a
	// quiet client can still retry. Zero means [DefaultBudgetMinRetries].
	MinRetries int
	// Window is how far back traffic counts. Zero means
	// [DefaultBudgetWindow] (10s).
	Window time.Duration
	// MaxHosts bounds how many hosts are tracked; beyond it, hosts idle
	// for a whole Window are forgotten. Zero means
	// [DefaultBudgetMaxHosts].
	MaxHosts int

	hosts     sync.Map // host key -> *budgetHost
	count     atomic.Int64
	sweep     sync.Mutex
	lastSweep atomic.Int64 // slot of the last sweep
}

type budgetHost struct {
	mu      sync.Mutex
	slot    int64 // index of the newest slot
	ops     [budgetSlots]int64
	retries [budgetSlots]int64
}

func (b *Budget) window() time.Duration {
	if b.Window <= 0 {
		return DefaultBudgetWindow
	}
	return b.Window
}

// Request counts one operation (a first attempt) to host key at now.
func (b *Budget) Request(key string, now time.Time) {
	h := b.host(key, now)
	h.mu.Lock()
	i := h.advance(b.slot(now))
	h.ops[i]++
	h.mu.Unlock()
}

// Retry reports whether a retry to host key at now fits in the budget,
// and counts it if so.
func (b *Budget) Retry(key string, now time.Time) bool {
	ratio := b.Ratio
	if ratio == 0 {
		ratio = DefaultBudgetRatio
	}
	floor := b.MinRetries
	if floor == 0 {
		floor = DefaultBudgetMinRetries
	}
	h := b.host(key, now)
	h.mu.Lock()
	defer h.mu.Unlock()
	i := h.advance(b.slot(now))
	var ops, retries int64
	for j := range budgetSlots {
		ops += h.ops[j]
		retries += h.retries[j]
	}
	// In float64: a huge Ratio or MinRetries must not overflow int64
	// into a negative allowance.
	if float64(retries) >= float64(floor)+math.Trunc(ratio*float64(ops)) {
		return false
	}
	h.retries[i]++
	return true
}

func (b *Budget) slot(now time.Time) int64 {
	width := max(1, int64(b.window()/budgetSlots)) // a Window under 10ns still has slots
	return now.UnixNano() / width
}

// ring is the index of slot s in the ring, for any s (before 1970 too).
func ring(s int64) int {
	i := s % budgetSlots
	if i < 0 {
		i += budgetSlots
	}
	return int(i)
}

// advance moves the ring to slot s, clearing the slots it passes, and
// returns the index of slot s.
func (h *budgetHost) advance(s int64) int {
	if s > h.slot {
		for k := h.slot + 1; k <= s && k <= h.slot+budgetSlots; k++ {
			h.ops[ring(k)] = 0
			h.retries[ring(k)] = 0
		}
		h.slot = s
	}
	if s < h.slot-budgetSlots+1 { // older than the window (a clock step back)
		s = h.slot
	}
	return ring(s)
}

func (b *Budget) host(key string, now time.Time) *budgetHost {
	if h, ok := b.hosts.Load(key); ok {
		return h.(*budgetHost)
	}
	h, loaded := b.hosts.LoadOrStore(key, &budgetHost{slot: b.slot(now)})
	if !loaded {
		max := b.MaxHosts
		if max <= 0 {
			max = DefaultBudgetMaxHosts
		}
		if b.count.Add(1) > int64(max) {
			b.forgetIdle(now)
		}
	}
	return h.(*budgetHost)
}

// forgetIdle drops the hosts that saw no traffic for a whole window. It
// sweeps at most once per slot, so the cost stays amortised when more than
// MaxHosts hosts are all busy (they are then all kept).
func (b *Budget) forgetIdle(now time.Time) {
	s := b.slot(now)
	if b.lastSweep.Load() == s || !b.sweep.TryLock() {
		return // swept in this slot already, or another goroutine is sweeping
	}
	defer b.sweep.Unlock()
	b.lastSweep.Store(s)
	b.hosts.Range(func(k, v any) bool {
		h := v.(*budgetHost)
		h.mu.Lock()
		idle := s-h.slot >= budgetSlots
		h.mu.Unlock()
		if idle {
			b.hosts.Delete(k)
			b.count.Add(-1)
		}
		return true
	})
}

// Hosts reports how many hosts the budget tracks.
func (b *Budget) Hosts() int { return int(b.count.Load()) }
