package httptestutil

import (
	"net/http"
	"strconv"
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
}

// OutageBucket is the load an [Outage] saw in one time bucket.
type OutageBucket struct {
	// Start is the bucket's start, as an offset from the emulator's start.
	Start time.Duration
	// Requests is how many requests (and, for [OutageRefuse], refused
	// dials) arrived in the bucket.
	Requests int64
	// Failed is how many of them the outage failed: answered 503, dropped
	// or refused.
	Failed int64
}

// Outage is an [http.Handler] that emulates a server outage: healthy, then
// down for a window, then healthy again. It counts every request in a
// time bucket, so a test or a demo can see the load a server gets during
// an outage and its recovery (a thundering herd at the end of the window,
// or a well-behaved client's spread).
//
// Counting is a pair of atomic adds per request, cheap enough for
// hundreds of concurrent clients. The emulator reads time.Now, so it runs
// on virtual time in a synctest bubble. It is safe for concurrent use by
// multiple goroutines.
type Outage struct {
	start      time.Time
	from, to   time.Duration // the down window, as offsets from start
	mode       OutageMode
	retryAfter string
	width      time.Duration
	handler    http.Handler

	requests []atomic.Int64
	failed   []atomic.Int64
	last     atomic.Int64 // highest bucket index used, -1 for none
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
	o.last.Store(-1)
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
	o.count(now, down)
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
	o.count(now, true)
	return true
}

func (o *Outage) count(now time.Time, failed bool) {
	i := o.index(now.Sub(o.start))
	o.requests[i].Add(1)
	if failed {
		o.failed[i].Add(1)
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
			Start:    time.Duration(i) * o.width,
			Requests: o.requests[i].Load(),
			Failed:   o.failed[i].Load(),
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
		}
	}
	return sum
}

// Total sums every bucket.
func (o *Outage) Total() OutageBucket {
	return o.Between(0, time.Duration(len(o.requests))*o.width)
}
