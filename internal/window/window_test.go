package window

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestCounterSlides(t *testing.T) {
	var c Counter
	c.Init(10) // a window of 100
	steps := []struct {
		at         int64
		addA, addB uint64
		wantA      uint64
		wantB      uint64
	}{
		{at: 0, addA: 1, wantA: 1},
		{at: 5, addB: 2, wantA: 1, wantB: 2},
		{at: 50, addA: 3, wantA: 4, wantB: 2},
		{at: 99, wantA: 4, wantB: 2},
		{at: 100, wantA: 3},           // bucket 0 (times 0-9) left the window
		{at: 149, addA: 1, wantA: 4},  // bucket 14 reuses bucket 4's word
		{at: 155, wantA: 1},           // bucket 5 (time 50) left too
		{at: 1000, addB: 1, wantB: 1}, // far later: only the new event
		{at: -5, addA: 1, wantA: 1},   // a clock step back: a separate window
		{at: 1000 + 1<<30, wantA: 0},  // stamps wrap, old buckets do not come back
	}
	for i, s := range steps {
		if s.addA != 0 || s.addB != 0 {
			c.Add(s.at, s.addA, s.addB)
		}
		if a, b := c.Sum(s.at); a != s.wantA || b != s.wantB {
			t.Errorf("step %d: Sum(%d) = %d, %d, want %d, %d", i, s.at, a, b, s.wantA, s.wantB)
		}
	}
	c.Reset()
	if a, b := c.Sum(1000); a != 0 || b != 0 {
		t.Errorf("after Reset: Sum = %d, %d, want 0, 0", a, b)
	}
}

func TestCounterSaturates(t *testing.T) {
	var c Counter
	c.Init(1000)
	c.Add(0, maxCount-1, 0)
	c.Add(0, 5, maxCount+7)
	if a, b := c.Sum(0); a != maxCount || b != maxCount {
		t.Errorf("Sum = %d, %d, want %d, %d (counts stop at the maximum)", a, b, maxCount, maxCount)
	}
}

func TestCounterConcurrentAddsAreExact(t *testing.T) {
	var c Counter
	c.Init(1 << 40)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Add(7, 1, 0)
				c.Add(7, 0, 2)
			}
		})
	}
	wg.Wait()
	if a, b := c.Sum(7); a != 8000 || b != 16000 {
		t.Errorf("Sum = %d, %d, want 8000, 16000", a, b)
	}
}

func TestCounterAddIfIsExactUnderRaces(t *testing.T) {
	var c Counter
	c.Init(1 << 40)
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				if c.AddIf(3, 0, 1, func(_, b uint64) bool { return b < 100 }) {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 100 {
		t.Errorf("admitted %d, want exactly 100", got)
	}
	if _, b := c.Sum(3); b != 100 {
		t.Errorf("Sum B = %d, want 100", b)
	}
}

func BenchmarkAdd(b *testing.B) {
	var c Counter
	c.Init(1e9)
	b.RunParallel(func(pb *testing.PB) {
		var now int64
		for pb.Next() {
			now++
			c.Add(now, 1, 0)
		}
	})
}

// TestHistogramSlides: the histogram follows the counter's rule, with a
// count of samples for a clock.
func TestHistogramSlides(t *testing.T) {
	var h Histogram
	h.Init(3, 10, 2) // three kinds; a window of two buckets of 10 ticks
	steps := []struct {
		at   int64
		add  int // kind added at at; -1 for none
		want [3]uint64
	}{
		{at: 0, add: 0, want: [3]uint64{1, 0, 0}},
		{at: 9, add: 2, want: [3]uint64{1, 0, 1}},
		{at: 10, add: 1, want: [3]uint64{1, 1, 1}},    // the second bucket
		{at: 19, add: -1, want: [3]uint64{1, 1, 1}},   // both still in the window
		{at: 20, add: -1, want: [3]uint64{0, 1, 0}},   // bucket 0 (ticks 0-9) left it
		{at: 20, add: 2, want: [3]uint64{0, 1, 1}},    // and is restarted by a write
		{at: 35, add: -1, want: [3]uint64{0, 0, 1}},   // bucket 1 (ticks 10-19) left too
		{at: 100, add: 1, want: [3]uint64{0, 1, 0}},   // far later: only the new event
		{at: -5, add: 0, want: [3]uint64{1, 0, 0}},    // a clock step back: a separate window
		{at: 100 + 1<<30, add: -1, want: [3]uint64{}}, // stamps wrap, old buckets do not come back
	}
	for i, s := range steps {
		if s.add >= 0 {
			h.Add(s.at, s.add)
		}
		var got [3]uint64
		total := h.Sum(s.at, got[:])
		if got != s.want || total != s.want[0]+s.want[1]+s.want[2] {
			t.Errorf("step %d: Sum(%d) = %v, %d, want %v", i, s.at, got, total, s.want)
		}
	}
}

func TestHistogramConcurrentAddsInOneBucket(t *testing.T) {
	var h Histogram
	h.Init(4, 1<<40, 2)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				h.Add(7, (g+i)%4)
			}
		})
	}
	wg.Wait()
	var got [4]uint64
	if total := h.Sum(7, got[:]); total != 8000 || got != [4]uint64{2000, 2000, 2000, 2000} {
		t.Errorf("Sum = %v, %d, want 2000 of each kind, 8000", got, total)
	}
}
