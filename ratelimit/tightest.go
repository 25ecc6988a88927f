package ratelimit

// tightest returns the most restrictive of qs (the first of equals),
// and false when qs is empty.
func tightest(qs []Quota) (Quota, bool) {
	if len(qs) == 0 {
		return Quota{}, false
	}
	best := qs[0]
	for _, q := range qs[1:] {
		if tighter(q, best) {
			best = q
		}
	}
	return best, true
}

// tighter reports whether quota a leaves less room than b: a known
// Remaining before an unknown one; an exhausted quota before one with
// room, and the later reset among exhausted ones; then the smaller
// fraction of the limit left (the smaller Remaining when a limit is
// unknown); then the later reset.
func tighter(a, b Quota) bool {
	ak, bk := a.Remaining != Unknown, b.Remaining != Unknown
	if ak != bk {
		return ak
	}
	if !ak {
		return slower(a, b)
	}
	aOut, bOut := a.Remaining == 0, b.Remaining == 0
	if aOut != bOut {
		return aOut
	}
	if !aOut {
		if a.Limit > 0 && b.Limit > 0 {
			fa := float64(a.Remaining) / float64(a.Limit)
			fb := float64(b.Remaining) / float64(b.Limit)
			if fa != fb {
				return fa < fb
			}
		} else if a.Remaining != b.Remaining {
			return a.Remaining < b.Remaining
		}
	}
	return a.Reset.After(b.Reset)
}

// slower reports whether policy a allows a lower sustained rate than b;
// a policy with a known rate is slower than one without.
func slower(a, b Quota) bool {
	ra, rb := a.rate(), b.rate()
	if (ra >= 0) != (rb >= 0) {
		return ra >= 0
	}
	return ra < rb
}
