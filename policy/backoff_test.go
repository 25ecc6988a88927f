package policy_test

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

const maxDuration = time.Duration(math.MaxInt64)

// refPow returns min(max, base·2^shift) by repeated doubling, an oracle
// written independently of the package's shift arithmetic.
func refPow(base, top time.Duration, shift int) time.Duration {
	c := base
	for i := 0; i < shift; i++ {
		if c > top/2 {
			return top
		}
		c *= 2
	}
	return min(c, top)
}

// attempts are the retry numbers every curve is checked at: the first
// few, the ones around the int64 shift limits, and absurd ones.
var attempts = []int{1, 2, 3, 4, 5, 10, 20, 30, 31, 32, 33, 62, 63, 64, 65, 100, 1000, math.MaxInt32, math.MaxInt}

func TestExponential(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		base, max time.Duration
		attempt   int
		want      time.Duration
	}{
		{100 * ms, 10 * time.Second, 1, 100 * ms},
		{100 * ms, 10 * time.Second, 2, 200 * ms},
		{100 * ms, 10 * time.Second, 3, 400 * ms},
		{100 * ms, 10 * time.Second, 7, 6400 * ms},
		{100 * ms, 10 * time.Second, 8, 10 * time.Second}, // 12.8s capped
		{100 * ms, 10 * time.Second, 1000, 10 * time.Second},
		{100 * ms, 10 * time.Second, math.MaxInt, 10 * time.Second},
		{100 * ms, 10 * time.Second, 0, 100 * ms},  // below 1 counts as 1
		{100 * ms, 10 * time.Second, -5, 100 * ms}, // below 1 counts as 1
		{1, maxDuration, 63, 1 << 62},
		{1, maxDuration, 64, maxDuration}, // 2^63 overflows int64: capped
		{1, maxDuration, 1000, maxDuration},
		{maxDuration, maxDuration, 2, maxDuration},
		{time.Second, 100 * ms, 1, 100 * ms}, // max below base caps
		{0, 10 * time.Second, 1, policy.DefaultBackoffBase},
		{-time.Second, 10 * time.Second, 2, 2 * policy.DefaultBackoffBase},
		{time.Minute, 0, 1, policy.DefaultBackoffMax},
		{0, -1, 1000, policy.DefaultBackoffMax},
	}
	for _, tt := range tests {
		got := policy.Exponential(tt.base, tt.max)(tt.attempt, 0)
		if got != tt.want {
			t.Errorf("Exponential(%v, %v)(%d, 0) = %v, want %v", tt.base, tt.max, tt.attempt, got, tt.want)
		}
	}
}

// bounds is the documented range [lo, hi] of a jittered curve; hiOpen
// says whether hi itself is excluded.
type bounds struct {
	lo, hi time.Duration
	hiOpen bool
}

func (b bounds) contains(d time.Duration) bool {
	if d < b.lo || d > b.hi {
		return false
	}
	return !b.hiOpen || d < b.hi || b.lo == b.hi
}

func (b bounds) String() string {
	if b.hiOpen {
		return fmt.Sprintf("[%v, %v)", b.lo, b.hi)
	}
	return fmt.Sprintf("[%v, %v]", b.lo, b.hi)
}

// curves lists each curve with the range its documentation promises for
// base, cap (the max argument), retry number n and previous wait prev.
var curves = []struct {
	name string
	new  func(base, max time.Duration) policy.Backoff
	want func(base, top time.Duration, n int, prev time.Duration) bounds
}{
	{"FullJitter", policy.FullJitter, func(base, top time.Duration, n int, _ time.Duration) bounds {
		return bounds{0, refPow(base, top, n), true}
	}},
	{"EqualJitter", policy.EqualJitter, func(base, top time.Duration, n int, _ time.Duration) bounds {
		c := refPow(base, top, n)
		return bounds{c / 2, c, true}
	}},
	{"AdditiveJitter", policy.AdditiveJitter, func(base, top time.Duration, n int, _ time.Duration) bounds {
		e := refPow(base, top, n-1)
		if e >= top-base { // e + base may reach the cap
			return bounds{e, top, false}
		}
		return bounds{e, e + base, true}
	}},
	{"DecorrelatedJitter", policy.DecorrelatedJitter, func(base, top time.Duration, _ int, prev time.Duration) bounds {
		p := max(prev, base)
		if p > maxDuration/3 || 3*p > top {
			return bounds{min(base, top), top, false}
		}
		return bounds{base, 3 * p, true}
	}},
	{"Exponential", policy.Exponential, func(base, top time.Duration, n int, _ time.Duration) bounds {
		e := refPow(base, top, n-1)
		return bounds{e, e, false}
	}},
}

func TestCurvesStayInRange(t *testing.T) {
	ms := time.Millisecond
	params := []struct{ base, max time.Duration }{
		{100 * ms, 10 * time.Second},
		{policy.DefaultBackoffBase, policy.DefaultBackoffMax},
		{1, maxDuration},               // no effective cap: overflow territory
		{maxDuration / 2, maxDuration}, // doubling overflows at once
		{maxDuration, maxDuration},     // base at the top: nothing to draw from
		{maxDuration, time.Second},     // and a cap below it
		{time.Second, 300 * ms},        // max below base
		{1, 1},                         // smallest possible
		{3, 7},                         // odd, tiny: integer halves
	}
	prevs := []time.Duration{0, -time.Second, 1, 50 * ms, time.Second, time.Hour, maxDuration / 3, maxDuration}
	for _, c := range curves {
		for _, p := range params {
			b := c.new(p.base, p.max)
			for _, n := range attempts {
				for _, prev := range prevs {
					want := c.want(p.base, p.max, n, prev)
					for range 20 {
						got := b(n, prev)
						if got < 0 || got > p.max || !want.contains(got) {
							t.Fatalf("%s(%v, %v)(%d, %v) = %v, want in %v", c.name, p.base, p.max, n, prev, got, want)
						}
					}
				}
			}
		}
	}
}

// TestCurvesFallbacks checks the documented fallback of base <= 0 and
// max <= 0: the curve behaves as with the defaults.
func TestCurvesFallbacks(t *testing.T) {
	for _, c := range curves {
		for _, arg := range []struct{ base, max time.Duration }{{0, 0}, {-1, -1}, {0, policy.DefaultBackoffMax}, {policy.DefaultBackoffBase, -time.Hour}} {
			b := c.new(arg.base, arg.max)
			for _, n := range attempts {
				want := c.want(policy.DefaultBackoffBase, policy.DefaultBackoffMax, n, 0)
				if got := b(n, 0); !want.contains(got) {
					t.Errorf("%s(%v, %v)(%d, 0) = %v, want in %v (the defaults' range)", c.name, arg.base, arg.max, n, got, want)
				}
			}
		}
	}
}

// TestJitterSpreads checks that the jittered curves are random over their
// whole range, not stuck at one end: over many draws the mean is near the
// middle and draws land near both ends. The tolerances are many standard
// deviations wide, so the test does not flake.
func TestJitterSpreads(t *testing.T) {
	const draws = 10000
	base, top := 100*time.Millisecond, time.Hour
	for _, c := range curves {
		if c.name == "Exponential" {
			continue
		}
		b := c.new(base, top)
		n, prev := 3, 200*time.Millisecond
		r := c.want(base, top, n, prev)
		width := float64(r.hi - r.lo)
		var sum float64
		lo, hi := maxDuration, time.Duration(0)
		for range draws {
			d := b(n, prev)
			sum += float64(d)
			lo, hi = min(lo, d), max(hi, d)
		}
		mean := (sum/draws - float64(r.lo)) / width // 0.5 for a uniform draw
		if mean < 0.45 || mean > 0.55 {
			t.Errorf("%s: mean position in %v = %.3f, want 0.5 ± 0.05", c.name, r, mean)
		}
		if float64(lo-r.lo) > 0.05*width || float64(r.hi-hi) > 0.05*width {
			t.Errorf("%s: draws spanned [%v, %v], want close to both ends of %v", c.name, lo, hi, r)
		}
	}
}

func TestDecorrelatedJitterChain(t *testing.T) {
	base, top := 100*time.Millisecond, 5*time.Second
	b := policy.DecorrelatedJitter(base, top)
	prev := time.Duration(0)
	reachedCap := false
	for n := 1; n <= 200; n++ {
		d := b(n, prev)
		if hi := min(top, 3*max(prev, base)); d < base || d > hi {
			t.Fatalf("step %d: DecorrelatedJitter(%d, %v) = %v, want in [%v, %v]", n, n, prev, d, base, hi)
		}
		reachedCap = reachedCap || d == top
		prev = d
	}
	if !reachedCap {
		t.Errorf("200 chained waits never reached max %v, want the chain to grow to the cap", top)
	}
}

func TestCurvesConcurrent(t *testing.T) {
	b := policy.FullJitter(time.Millisecond, time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for n := 1; n < 1000; n++ {
				if d := b(n, 0); d < 0 || d >= time.Second {
					t.Errorf("FullJitter(%d, 0) = %v, want in [0, 1s)", n, d)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestCurvesDoNotAllocate(t *testing.T) {
	for _, c := range curves {
		b := c.new(100*time.Millisecond, 10*time.Second)
		n := 0
		got := testing.AllocsPerRun(1000, func() {
			n++
			_ = b(n%40, time.Duration(n)*time.Millisecond)
		})
		if got != 0 {
			t.Errorf("%s: %v allocations per call, want 0", c.name, got)
		}
	}
}

func BenchmarkFullJitter(b *testing.B) {
	bo := policy.FullJitter(policy.DefaultBackoffBase, policy.DefaultBackoffMax)
	b.ReportAllocs()
	var sink time.Duration
	n := 0
	for b.Loop() {
		n++
		sink += bo(n&7+1, sink)
	}
	_ = sink
}

func BenchmarkCurves(b *testing.B) {
	for _, c := range curves {
		b.Run(c.name, func(b *testing.B) {
			bo := c.new(policy.DefaultBackoffBase, policy.DefaultBackoffMax)
			b.ReportAllocs()
			var prev time.Duration
			n := 0
			for b.Loop() {
				n++
				prev = bo(n&7+1, prev)
			}
		})
	}
}

func ExampleExponential() {
	b := policy.Exponential(100*time.Millisecond, time.Second)
	for n := 1; n <= 6; n++ {
		fmt.Println(n, b(n, 0))
	}
	fmt.Println(1000, b(1000, 0))
	// Output:
	// 1 100ms
	// 2 200ms
	// 3 400ms
	// 4 800ms
	// 5 1s
	// 6 1s
	// 1000 1s
}

func ExampleFullJitter() {
	b := policy.FullJitter(100*time.Millisecond, time.Second)
	for n := 1; n <= 5; n++ {
		d := b(n, 0)
		ceiling := min(time.Second, 100*time.Millisecond<<n)
		fmt.Printf("retry %d: wait in [0, %v): %t\n", n, ceiling, d >= 0 && d < ceiling)
	}
	// Output:
	// retry 1: wait in [0, 200ms): true
	// retry 2: wait in [0, 400ms): true
	// retry 3: wait in [0, 800ms): true
	// retry 4: wait in [0, 1s): true
	// retry 5: wait in [0, 1s): true
}
