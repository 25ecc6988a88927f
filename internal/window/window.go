// Package window counts two kinds of events (successes and failures,
// operations and retries) over a sliding window of time, without a lock.
package window

import "sync/atomic"

// Buckets is how many buckets a window is cut into: it forgets events a
// tenth of a window at a time.
const Buckets = 10

// A bucket is one word: the bucket's number (its start divided by the
// bucket width, modulo 2^24) and two 20-bit counts, which stop at
// maxCount rather than wrap.
const (
	countBits = 20
	maxCount  = 1<<countBits - 1
	stampBits = 64 - 2*countBits
	stampMask = 1<<stampBits - 1
)

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

// Width returns the bucket width.
func (c *Counter) Width() int64 { return c.width }

func pack(stamp, a, b uint64) uint64 { return stamp<<(2*countBits) | a<<countBits | b }

func unpack(w uint64) (stamp, a, b uint64) {
	return w >> (2 * countBits), w >> countBits & maxCount, w & maxCount
}

// slot returns the bucket number of now and its bucket.
func (c *Counter) slot(now int64) (uint64, *atomic.Uint64) {
	n := now / c.width
	if now < 0 && now%c.width != 0 {
		n-- // floor, for times before the epoch
	}
	return uint64(n) & stampMask, &c.buckets[uint64(n)%Buckets]
}

// Add counts a events of kind A and b of kind B at now.
func (c *Counter) Add(now int64, a, b uint64) {
	stamp, bk := c.slot(now)
	for {
		w := bk.Load()
		s, ca, cb := unpack(w)
		if s != stamp { // a bucket of an older window: start it again
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
	stamp, bk := c.slot(now)
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
	stamp, _ := c.slot(now)
	return c.sumExcept(stamp, nil)
}

// sumExcept sums the buckets of the window that ends in bucket stamp,
// but skip.
func (c *Counter) sumExcept(stamp uint64, skip *atomic.Uint64) (a, b uint64) {
	for i := range c.buckets {
		if &c.buckets[i] == skip {
			continue
		}
		s, ca, cb := unpack(c.buckets[i].Load())
		if age := (stamp - s) & stampMask; age < Buckets && (ca != 0 || cb != 0) {
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
