package httptestutil

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// OutageMode is how an [Outage] fails while it is down: [Outage503],
// [OutageReset] or [OutageRefuse].
type OutageMode int

const (
	// Outage503 answers 503 Service Unavailable, with Retry-After when
	// [OutageConfig.RetryAfter] is set.
	Outage503 OutageMode = iota
	// OutageReset drops each connection without a response, as [Reset]
	// does.
	OutageReset
	// OutageRefuse refuses connections: plug [Outage.Refusing] into
	// [Network.RefuseWhen] so dials fail with ECONNREFUSED while the
	// outage lasts. A request that reaches the handler anyway (a kept-alive
	// connection, or a server without the hook) is dropped as with
	// OutageReset.
	OutageRefuse
)

// OutageConfig configures an [Outage]. The zero value is a server that is
// always healthy and counts requests in 100 ms buckets.
type OutageConfig struct {
	// Start is when the outage begins, after the emulator's start time;
	// 0 means at the start.
	Start time.Duration
	// Duration is how long the outage lasts; 0 means no outage.
	Duration time.Duration
	// Mode is how the server fails while down; the zero value is
	// [Outage503].
	Mode OutageMode
	// RetryAfter is sent as Retry-After (whole seconds, rounded up) on the
	// 503s of [Outage503]; 0 sends none.
	RetryAfter time.Duration
	// Bucket is the width of the time buckets requests are counted in;
	// 0 means 100 ms.
	Bucket time.Duration
	// Horizon is how long after the start requests are counted in their
	// own buckets; later ones count in the last bucket. 0 means
	// 2 × (Start + Duration), and at least 10 minutes.
	Horizon time.Duration
	// Handler answers while the server is healthy; nil means 200 with the
	// body "ok\n".
	Handler http.Handler

	// Capacity, when positive, is how many requests a second the server
	// can serve while it is up; beyond it, requests fail with 503. Zero
	// or negative means no limit.
	Capacity float64
	// Burst is how much work, counted in requests, the server absorbs at
	// once beyond Capacity. It is also the work it must do to warm up when
	// the outage ends. Zero or negative means a tenth of a second of
	// Capacity.
	Burst float64
	// OverloadCost is the share of a request's work that the server still
	// spends on one it fails for overload. Zero means 0.5; negative means
	// none.
	OverloadCost float64
}

// OutageBucket is the load an [Outage] saw in one time bucket.
type OutageBucket struct {
	// Start is the bucket's start, as an offset from the emulator's start.
	Start time.Duration
	// Requests is how many requests (and, for [OutageRefuse], refused
	// dials) arrived in the bucket.
	Requests int64
	// Failed is how many of them the server failed: answered 503, dropped
	// or refused, for the outage or for overload.
	Failed int64
	// Overloaded is how many of the failed ones the server failed while
	// up, for lack of capacity.
	Overloaded int64
}

// Outage is an [http.Handler] that emulates a server outage: healthy, then
// down for a window, then healthy again. It counts every request in a
// time bucket, so a test or a demo can see the load a server gets during
// an outage and its recovery (a thundering herd at the end of the window,
// or a well-behaved client's spread).
//
// With [OutageConfig.Capacity] set, the server has finite capacity, and
// what it spends on the requests it fails counts against it. Its capacity
// is a budget of work, refilled at Capacity requests a second up to
// Burst. A request served takes one unit. A request that finds less than
// one unit left fails with 503 and still takes OverloadCost units (the
// server read it, authenticated it, logged it and answered it), down to a
// backlog of Burst units. The budget is full at the start. When the
// outage ends the server comes back cold, with that backlog: Burst units
// of work (filling caches, opening connections) before it serves
// anything. So a load above Capacity / OverloadCost fails every request
// for as long as it lasts, and a server that came back is kept down by
// retries alone although it could serve every caller's first attempt:
// the metastable state of a retry storm.
//
// Counting is a few atomic adds per request, cheap enough for hundreds
// of concurrent clients. The emulator reads time.Now, so it runs
// on virtual time in a synctest bubble. It is safe for concurrent use by
// multiple goroutines.
type Outage struct {
	start      time.Time
	from, to   time.Duration // the down window, as offsets from start
	mode       OutageMode
	retryAfter string
	width      time.Duration
	handler    http.Handler

	requests   []atomic.Int64
	failed     []atomic.Int64
	overloaded []atomic.Int64
	last       atomic.Int64 // highest bucket index used, -1 for none

	capacity     float64 // work units a second; 0 for no limit
	burst        float64 // the most work units in hand, and the deepest backlog
	overloadCost float64 // work units a request failed for overload takes

	mu     sync.Mutex
	level  float64   // work units in hand; negative: a backlog
	filled time.Time // when level was last brought up to date
}

// NewOutage returns an outage emulator whose clock starts at start:
// [OutageConfig.Start] and the buckets count from there. Pass time.Now()
// to start now, or a shared time to align several emulators and a
// client's own measurements.
func NewOutage(start time.Time, c OutageConfig) *Outage {
	o := &Outage{
		start:   start,
		from:    c.Start,
		to:      c.Start + max(c.Duration, 0),
		mode:    c.Mode,
		width:   c.Bucket,
		handler: c.Handler,
	}
	if o.width <= 0 {
		o.width = 100 * time.Millisecond
	}
	if c.RetryAfter > 0 {
		o.retryAfter = strconv.FormatInt(ceilSeconds(c.RetryAfter), 10)
	}
	if o.handler == nil {
		o.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Write([]byte("ok\n"))
		})
	}
	horizon := c.Horizon
	if horizon <= 0 {
		horizon = max(2*o.to, 10*time.Minute)
	}
	n := int(min(horizon/o.width+1, 1<<22)) // at most 4M buckets (64 MiB)
	o.requests = make([]atomic.Int64, n)
	o.failed = make([]atomic.Int64, n)
	o.overloaded = make([]atomic.Int64, n)
	o.last.Store(-1)
	if c.Capacity > 0 {
		o.capacity = c.Capacity
		o.burst = c.Burst
		if o.burst <= 0 {
			o.burst = c.Capacity / 10
		}
		switch {
		case c.OverloadCost == 0:
			o.overloadCost = 0.5
		case c.OverloadCost > 0:
			o.overloadCost = c.OverloadCost
		}
		o.level, o.filled = o.burst, start
	}
	return o
}

// Down reports whether the outage is on at t.
func (o *Outage) Down(t time.Time) bool {
	d := t.Sub(o.start)
	return d >= o.from && d < o.to
}

// ServeHTTP counts the request and answers it as the time requires.
func (o *Outage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	down := o.Down(now)
	if !down && !o.admit(now) {
		o.count(now, true, true)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("httptestutil: overloaded\n"))
		return
	}
	o.count(now, down, false)
	if !down {
		o.handler.ServeHTTP(w, r)
		return
	}
	if o.mode != Outage503 {
		cut(w)
		return
	}
	if o.retryAfter != "" {
		w.Header().Set("Retry-After", o.retryAfter)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	w.Write([]byte("httptestutil: outage\n"))
}

// Refusing reports whether a dial now should be refused: the mode is
// [OutageRefuse] and the outage is on. A refused dial is counted as a
// failed request. It has the signature [Network.RefuseWhen] wants.
func (o *Outage) Refusing() bool {
	if o.mode != OutageRefuse {
		return false
	}
	now := time.Now()
	if !o.Down(now) {
		return false
	}
	o.count(now, true, false)
	return true
}

// admit takes the work of a request that arrives at now, while the
// server is up, from the budget, and reports whether there was enough to
// serve it. Without a Capacity it admits everything.
func (o *Outage) admit(now time.Time) bool {
	if o.capacity <= 0 {
		return true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if back := o.start.Add(o.to); o.to > o.from && o.filled.Before(back) && !now.Before(back) {
		o.level, o.filled = -o.burst, back // back from the outage, cold
	}
	if elapsed := now.Sub(o.filled); elapsed > 0 {
		o.level = min(o.burst, o.level+o.capacity*elapsed.Seconds())
		o.filled = now
	}
	if o.level >= 1 {
		o.level--
		return true
	}
	o.level = max(-o.burst, o.level-o.overloadCost)
	return false
}

func (o *Outage) count(now time.Time, failed, overloaded bool) {
	i := o.index(now.Sub(o.start))
	o.requests[i].Add(1)
	if failed {
		o.failed[i].Add(1)
	}
	if overloaded {
		o.overloaded[i].Add(1)
	}
	for {
		last := o.last.Load()
		if int64(i) <= last || o.last.CompareAndSwap(last, int64(i)) {
			return
		}
	}
}

// index is the bucket of offset d: requests before the start count in the
// first, after the horizon in the last.
func (o *Outage) index(d time.Duration) int {
	if d < 0 {
		return 0
	}
	return int(min(int64(d/o.width), int64(len(o.requests)-1)))
}

// Buckets returns the counts of every bucket from the start to the last
// one that saw a request.
func (o *Outage) Buckets() []OutageBucket {
	n := int(o.last.Load()) + 1
	out := make([]OutageBucket, n)
	for i := range out {
		out[i] = OutageBucket{
			Start:      time.Duration(i) * o.width,
			Requests:   o.requests[i].Load(),
			Failed:     o.failed[i].Load(),
			Overloaded: o.overloaded[i].Load(),
		}
	}
	return out
}

// Between sums the buckets that start in [from, to), offsets from the
// emulator's start; its Start is from.
func (o *Outage) Between(from, to time.Duration) OutageBucket {
	sum := OutageBucket{Start: from}
	for i := range int(o.last.Load()) + 1 {
		if s := time.Duration(i) * o.width; s >= from && s < to {
			sum.Requests += o.requests[i].Load()
			sum.Failed += o.failed[i].Load()
			sum.Overloaded += o.overloaded[i].Load()
		}
	}
	return sum
}

// Total sums every bucket.
func (o *Outage) Total() OutageBucket {
	return o.Between(0, time.Duration(len(o.requests))*o.width)
}
