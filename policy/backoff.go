package policy

import (
	"math"
	"math/rand/v2"
	"time"
)

// Backoff returns how long to wait before retry number attempt, 1 for the
// first retry. prev is the wait chosen before the previous retry, 0 before
// the first, for curves that depend on it. An attempt below 1 counts as 1.
//
// The curves of this package share one shape. With base b, cap m and retry
// number n, the plain exponential curve is
//
//	e(n) = min(m, b·2^(n-1))   // b, 2b, 4b, ... for n = 1, 2, 3, ...
//
// and the jittered curves draw below the ceiling
//
//	c(n) = min(m, b·2^n)       // 2b, 4b, 8b, ...
//
// Below the cap, [FullJitter]'s mean wait is e(n), and [EqualJitter]'s
// shortest wait is e(n). Every curve is capped: no wait is longer than m,
// whatever n is. Attempt 1000 gives m, never an overflowed value.
//
// Constructors take base and max as given, with two fallbacks so that no
// argument panics. A base of zero or less means [DefaultBackoffBase]
// (200ms). A max of zero or less means [DefaultBackoffMax] (30s). A max
// below base caps every wait at max.
//
// The jittered curves draw from math/rand/v2's top-level source. They are
// safe for concurrent use, need no seeding and do not allocate.
type Backoff func(attempt int, prev time.Duration) time.Duration

// Exponential returns the curve without jitter:
//
//	wait(n) = min(max, base·2^(n-1))
//
// It waits base before the first retry, then twice as long each time, up to
// max. Without jitter, clients that failed together retry together. Prefer
// [FullJitter] unless the exact waits matter, as in tests. See [Backoff]
// for the fallbacks of base and max.
func Exponential(base, max time.Duration) Backoff {
	base, max = backoffBounds(base, max)
	return func(attempt int, _ time.Duration) time.Duration {
		return ceiling(base, max, retryNumber(attempt)-1)
	}
}

// FullJitter returns the default curve of [Retry], a uniform random wait
// below the exponential ceiling:
//
//	wait(n) = rand[0, min(max, base·2^n))
//
// Its mean, below the cap, is base·2^(n-1), the [Exponential] wait. It
// spreads the retries of many clients the most, for the least total work on
// the server. See [Backoff] for the fallbacks of base and max.
func FullJitter(base, max time.Duration) Backoff {
	base, max = backoffBounds(base, max)
	return func(attempt int, _ time.Duration) time.Duration {
		return rand.N(ceiling(base, max, retryNumber(attempt)))
	}
}

// EqualJitter returns a curve that keeps half of the exponential ceiling
// and draws the other half at random:
//
//	c = min(max, base·2^n)
//	wait(n) = c/2 + rand[0, c - c/2)
//
// Below the cap, a wait is at least the [Exponential] wait base·2^(n-1) and
// less than twice it. Use it when a retry must not come back almost at
// once. See [Backoff] for the fallbacks of base and max.
func EqualJitter(base, max time.Duration) Backoff {
	base, max = backoffBounds(base, max)
	return func(attempt int, _ time.Duration) time.Duration {
		c := ceiling(base, max, retryNumber(attempt))
		half := c / 2
		return half + rand.N(c-half)
	}
}

// DecorrelatedJitter returns the curve that grows from the previous wait
// rather than from the attempt number:
//
//	wait = min(max, rand[base, 3·p))   where p = max(prev, base)
//
// Before the first retry prev is 0, so the first wait is in [base, 3·base).
// The attempt number is not used. 3·p saturates instead of overflowing.
// See [Backoff] for the fallbacks of base and max.
func DecorrelatedJitter(base, max time.Duration) Backoff {
	base, max = backoffBounds(base, max)
	return func(_ int, prev time.Duration) time.Duration {
		p := prev
		if p < base {
			p = base
		}
		hi := time.Duration(math.MaxInt64)
		if p <= hi/3 {
			hi = 3 * p
		}
		// hi > base: p >= base > 0, so 3p > p >= base, and a saturated
		// hi is MaxInt64, above base unless base is MaxInt64 itself.
		if hi <= base {
			return min(base, max)
		}
		w := base + rand.N(hi-base)
		return min(w, max)
	}
}

// AdditiveJitter returns the [Exponential] curve with up to base of
// random delay added:
//
//	wait(n) = min(max, base·2^(n-1) + rand[0, base))
//
// Waits never fall below the exponential curve, and clients that failed
// together are spread over one base interval. See [Backoff] for the
// fallbacks of base and max.
func AdditiveJitter(base, max time.Duration) Backoff {
	base, max = backoffBounds(base, max)
	return func(attempt int, _ time.Duration) time.Duration {
		e := ceiling(base, max, retryNumber(attempt)-1)
		j := rand.N(base)
		if e > max-j { // e+j > max, without overflow: e <= max, j >= 0
			return max
		}
		return e + j
	}
}

// backoffBounds applies the documented fallbacks of base and max.
func backoffBounds(base, max time.Duration) (time.Duration, time.Duration) {
	if base <= 0 {
		base = DefaultBackoffBase
	}
	if max <= 0 {
		max = DefaultBackoffMax
	}
	return base, max
}

// retryNumber treats attempts below 1 as the first retry.
func retryNumber(attempt int) int {
	if attempt < 1 {
		return 1
	}
	return attempt
}

// ceiling returns min(max, base·2^shift) without overflow, for base > 0,
// max > 0 and shift >= 0. base·2^shift > max exactly when
// base > max>>shift, and max>>shift cannot overflow.
func ceiling(base, max time.Duration, shift int) time.Duration {
	if shift >= 63 || base > max>>shift {
		return max
	}
	return base << shift
}
