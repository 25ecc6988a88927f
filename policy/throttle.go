package policy

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hosts"
	"github.com/sturdyhttp/sturdy/internal/window"
)

// Defaults of [Throttle], used where a field is zero.
const (
	DefaultThrottleK           = 2
	DefaultThrottleWindow      = 30 * time.Second
	DefaultThrottleMinRequests = 20
)

// Throttle is the client-side adaptive throttle of Google's SRE book
// ("Handling Overload"): each client counts, per host and over a sliding
// window, the requests it tried and those the server accepted, and when
// the server accepts less and less, it rejects new requests itself,
// before they are sent, with probability
//
//	max(0, (requests − K×accepts) / (requests + 1))
//
// With K = 2 a host may fail half of what it is sent before anything is
// rejected; then the client sends roughly K×accepts requests, so an
// overloaded server spends its time on requests it can serve instead of
// on rejecting the excess. Requests rejected locally count as requests,
// so the probability keeps up as the server recovers or degrades further.
//
// What "accepted" means is up to the caller of [Throttle.Record]: the
// transport's Throttle counts a response under 500 other than 429 as
// accepted, and 429, 5xx, timeouts and network errors as not.
//
// A host's traffic is counted in a sliding window of ten buckets, a tenth
// of Window each (the module's one window, as the breaker and [Budget]
// count theirs), exact up to 1,048,575 requests per bucket.
//
// The zero value is ready to use with the documented defaults; a
// Throttle must not be copied after first use. It is safe for concurrent
// use by multiple goroutines.
type Throttle struct {
	// K is how many requests per accepted one a host may be sent before
	// the throttle rejects any: 2 tolerates a server that fails half of
	// them; lower is more aggressive. Zero or less means
	// [DefaultThrottleK] (2).
	K float64
	// Window is how far back requests and accepts count. Zero means
	// [DefaultThrottleWindow] (30s).
	Window time.Duration
	// MinRequests is how many requests a host must have in the window
	// before any is rejected, so that a quiet client is not throttled on
	// one or two failures. Zero means [DefaultThrottleMinRequests] (20);
	// negative means none (the book's formula from the first request).
	MinRequests int
	// MaxHosts bounds how many hosts are tracked. Zero means
	// [hosts.DefaultMaxHosts] (10,000).
	MaxHosts int

	once sync.Once
	slot *hosts.Slot[window.Counter] // A: requests, B: accepts
}

func (t *Throttle) host(key string) *window.Counter {
	t.once.Do(func() {
		width := int64(t.window() / window.Buckets)
		reg := hosts.New(hosts.Options{MaxHosts: t.MaxHosts, IdleTimeout: 2 * t.window()})
		t.slot = hosts.NewSlot(reg, func(hosts.Key) *window.Counter { return window.NewCounter(width) }, nil)
	})
	return t.slot.Get(hosts.Custom(key))
}

func (t *Throttle) window() time.Duration {
	if t.Window <= 0 {
		return DefaultThrottleWindow
	}
	return t.Window
}

// Allow reports whether a request to host key may be sent at now, and the
// probability of rejection it was judged with. A rejected request counts
// as a request that was not accepted; an allowed one is counted when its
// outcome is recorded with [Throttle.Record].
func (t *Throttle) Allow(key string, now time.Time) (bool, float64) {
	return t.allow(key, now, rand.Float64())
}

// allow is Allow with the random draw given, in [0, 1).
func (t *Throttle) allow(key string, now time.Time, draw float64) (bool, float64) {
	c := t.host(key)
	if c == nil { // the registry is full: no state, no throttling
		return true, 0
	}
	var p float64
	// A rejection counts as a request, in one step with the decision.
	rejected := c.AddIf(now.UnixNano(), 1, 0, func(requests, accepts uint64) bool {
		p = t.probability(int64(requests), int64(accepts))
		return draw < p
	})
	return !rejected, p
}

// Probability returns the probability with which a request to host key
// would be rejected at now.
func (t *Throttle) Probability(key string, now time.Time) float64 {
	c := t.host(key)
	if c == nil {
		return 0
	}
	requests, accepts := c.Sum(now.UnixNano())
	return t.probability(int64(requests), int64(accepts))
}

func (t *Throttle) probability(requests, accepts int64) float64 {
	min := int64(t.MinRequests)
	if min == 0 {
		min = DefaultThrottleMinRequests
	}
	if requests < min {
		return 0
	}
	k := t.K
	if !(k > 0) || math.IsInf(k, 0) {
		k = DefaultThrottleK
	}
	return max(0, (float64(requests)-k*float64(accepts))/float64(requests+1))
}

// Record counts the outcome of a request to host key that [Throttle.Allow]
// let through: accepted when the server served it, not when it rejected
// it or failed. A request that never reached the server (canceled by the
// caller, refused by a breaker) should not be recorded at all.
func (t *Throttle) Record(key string, now time.Time, accepted bool) {
	c := t.host(key)
	if c == nil {
		return
	}
	var accepts uint64
	if accepted {
		accepts = 1
	}
	c.Add(now.UnixNano(), 1, accepts)
}
