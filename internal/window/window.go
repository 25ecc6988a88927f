// Package window is the module's one sliding window, which counts events
// without a lock. The breaker, the retry budget and the throttle count
// over time; the latency histogram counts over a number of samples.
//
// Every window here follows one rule. A tick is a time (or a sample
// number) divided by the bucket width. Tick t writes to bucket t mod n
// of a ring of n buckets, and stamps it with t. A bucket stamped with
// another tick is left from an earlier turn of the ring. It reads as
// empty, and the next write restarts it. The window that ends at tick t
// sums the buckets stamped t−n+1 to t.
package window

import "sync/atomic"

// Buckets is how many buckets a [Counter] is cut into: it forgets events
// a tenth of a window at a time.
const Buckets = 10

// A Counter bucket is one word: its stamp (the tick modulo 2^24) and
// two 20-bit counts, which stop at maxCount rather than wrap. A
// [Histogram] bucket keeps its stamp, modulo 2^24 too, in a word apart.
const (
	countBits = 20
	maxCount  = 1<<countBits - 1
	stampBits = 64 - 2*countBits
	stampMask = 1<<stampBits - 1
)

// at is the arithmetic of the rule: it returns the stamp of the tick of
// now (now divided by width, rounded down) and the index of its bucket
// in a ring of n.
func at(now, width int64, n uint64) (stamp, i uint64) {
	t := now / width
	if now < 0 && now%width != 0 {
		t-- // floor, for times before the epoch
	}
	return uint64(t) & stampMask, uint64(t) % n
}

// live reports whether a bucket stamped s is in the window of n buckets
// that ends at the tick stamped cur.
func live(cur, s, n uint64) bool { return (cur-s)&stampMask < n }

// Counter counts events of two kinds, A and B, over the last Buckets
// bucket widths. The zero value is not usable: call [Counter.Init]. It is
// safe for concurrent use; Add is a compare-and-swap on one word, Sum
// reads ten. Counts are exact up to 1,048,575 events of a kind per bucket
// and stop there.
type Counter struct {
	width   int64 // bucket width, in the unit of the times given
	buckets [Buckets]atomic.Uint64
}

// Init sets the bucket width: the window is Buckets × width long, in
// the unit of the times given to Add and Sum (nanoseconds, usually). A
// width under 1 means 1.
func (c *Counter) Init(width int64) { c.width = max(1, width) }

// NewCounter returns a Counter whose buckets are width wide.
func NewCounter(width int64) *Counter {
	c := new(Counter)
	c.Init(width)
	return c
}

// Width returns the bucket width.
func (c *Counter) Width() int64 { return c.width }

func pack(stamp, a, b uint64) uint64 { return stamp<<(2*countBits) | a<<countBits | b }

func unpack(w uint64) (stamp, a, b uint64) {
	return w >> (2 * countBits), w >> countBits & maxCount, w & maxCount
}

// Add counts a events of kind A and b of kind B at now.
func (c *Counter) Add(now int64, a, b uint64) {
	stamp, i := at(now, c.width, Buckets)
	bk := &c.buckets[i]
	for {
		w := bk.Load()
		s, ca, cb := unpack(w)
		if s != stamp { // a bucket of an earlier turn: start it again
			ca, cb = 0, 0
		}
		nw := pack(stamp, min(ca+a, maxCount), min(cb+b, maxCount))
		if nw == w || bk.CompareAndSwap(w, nw) {
			return
		}
	}
}

// AddIf counts a events of kind A and b of kind B at now if allow, given
// the counts of the window that ends at now before them, says so, and
// reports whether it did. The check and the count are one step: events
// counted concurrently at now are never both admitted past allow.
func (c *Counter) AddIf(now int64, a, b uint64, allow func(a, b uint64) bool) bool {
	stamp, i := at(now, c.width, Buckets)
	bk := &c.buckets[i]
	for {
		w := bk.Load()
		s, ca, cb := unpack(w)
		if s != stamp {
			ca, cb = 0, 0
		}
		// The other buckets, then this one as it was read.
		sa, sb := c.sumExcept(stamp, bk)
		if !allow(sa+ca, sb+cb) {
			return false
		}
		nw := pack(stamp, min(ca+a, maxCount), min(cb+b, maxCount))
		if nw == w || bk.CompareAndSwap(w, nw) {
			return true
		}
	}
}

// Sum returns the counts of the window that ends at now.
func (c *Counter) Sum(now int64) (a, b uint64) {
	stamp, _ := at(now, c.width, Buckets)
	return c.sumExcept(stamp, nil)
}

// sumExcept sums the buckets of the window that ends at the tick stamped
// stamp, but skip.
func (c *Counter) sumExcept(stamp uint64, skip *atomic.Uint64) (a, b uint64) {
	for i := range c.buckets {
		if &c.buckets[i] == skip {
			continue
		}
		s, ca, cb := unpack(c.buckets[i].Load())
		if (ca != 0 || cb != 0) && live(stamp, s, Buckets) {
			a += ca
			b += cb
		}
	}
	return a, b
}

// Reset forgets every event.
func (c *Counter) Reset() {
	for i := range c.buckets {
		c.buckets[i].Store(0)
	}
}

// Histogram counts events of many kinds, such as a latency histogram's
// buckets, over a ring of n buckets. The zero value is not usable: call
// [Histogram.Init]. It is safe for concurrent use without a lock. Add
// loads the bucket's stamp and adds to one count, both atomically. An
// event that races with its bucket's restart may be lost: a histogram
// of a thousand samples does not notice.
type Histogram struct {
	width  int64 // bucket width, in ticks
	kinds  int
	stamps []atomic.Uint64 // one per bucket of the ring
	counts []atomic.Uint64 // bucket i's counts are [i×kinds, (i+1)×kinds)
}

// Init makes a histogram of kinds kinds whose ring has n buckets, each
// width ticks wide. A width under 1 means 1; n under 1 means 1.
func (h *Histogram) Init(kinds int, width int64, n int) {
	n = max(1, n)
	h.width = max(1, width)
	h.kinds = kinds
	h.stamps = make([]atomic.Uint64, n)
	h.counts = make([]atomic.Uint64, n*kinds)
}

// Add counts one event of kind k at now.
func (h *Histogram) Add(now int64, k int) {
	stamp, i := at(now, h.width, uint64(len(h.stamps)))
	if s := h.stamps[i].Load(); s != stamp && h.stamps[i].CompareAndSwap(s, stamp) {
		for j := range h.counts[int(i)*h.kinds : int(i+1)*h.kinds] { // a bucket of an earlier turn
			h.counts[int(i)*h.kinds+j].Store(0)
		}
	}
	h.counts[int(i)*h.kinds+k].Add(1)
}

// Sum adds the counts of the window that ends at now to into, which
// holds one count per kind, and returns their total.
func (h *Histogram) Sum(now int64, into []uint64) (total uint64) {
	stamp, _ := at(now, h.width, uint64(len(h.stamps)))
	for i := range h.stamps {
		if !live(stamp, h.stamps[i].Load(), uint64(len(h.stamps))) {
			continue
		}
		counts := h.counts[i*h.kinds : (i+1)*h.kinds]
		for k := range counts {
			n := counts[k].Load()
			into[k] += n
			total += n
		}
	}
	return total
}
