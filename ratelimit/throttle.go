package ratelimit

import "time"

// This file learns the rate a host accepts from 429s that give no other
// hint: additive increase, multiplicative decrease of a client-side rate,
// as TCP does with its window.
//
// The first such 429 caps the host at the rate of successes it answered
// over the last second (DefaultReleaseRate when there is no second of
// history yet), and pauses it for throttlePause. That first rate is a
// guess, raised by one request a second per success (it doubles every
// second) until the next 429 of a request sent after the cut; that one
// sets the rate to what the host accepted over the last second, the
// limit, less throttleCut. From then on each such 429 cuts the rate by
// throttleCut, and each success raises it by throttleGrowth (about 5% a
// second at full use). A host that goes throttleForget without a 429
// loses its cap. A client meeting a plain limiter of R requests a second
// so settles at about R. 429s with Retry-After pause the host as asked,
// and teach the rate too once they come again and again.

const (
	// throttlePause is how long a host pauses after a 429 that names no
	// wait.
	throttlePause = 250 * time.Millisecond
	// throttleCut is the multiplicative decrease of a measured rate.
	throttleCut = 0.9
	// throttleGrowth is the additive increase per success, as a fraction
	// of a request a second per request a second of rate.
	throttleGrowth = 0.05
	// throttleForget is how long without a 429 until the cap is removed.
	throttleForget = 10 * time.Second
	// minThrottleRate is the lowest rate a cut goes to, requests a second:
	// pacing at it costs a lone request at most a second.
	minThrottleRate = 1
	// maxOwnWait bounds every wait of the Tracker's own making (the
	// pause after a bare 429, pacing at the learned rate, the release
	// spread after a pause): only a server's reset or Retry-After makes a
	// request wait longer.
	maxOwnWait = time.Second
)

// throttle is a host's learned rate. h.mu guards it.
type throttle struct {
	rate    float64   // requests a second; 0 when there is no cap
	guess   bool      // rate is a guess, not a measure
	lastCut time.Time // when the rate was last cut
	last429 time.Time
	pace    pacer
	// Successes in the current and the previous second of win.
	okCur, okPrev int
	win           time.Time
	since         time.Time // first success counted
}

// on reports whether a cap is in force at now, removing it when 429s
// have stopped.
func (t *throttle) on(now time.Time) bool {
	if t.rate > 0 && now.Sub(t.last429) > throttleForget {
		t.rate, t.guess = 0, false
	}
	return t.rate > 0
}

// repeated reports whether a 429 at now, of a request let through at
// sent, comes after another 429 (of a request sent earlier) within
// throttleForget, or while a cap is in force.
func (t *throttle) repeated(now, sent time.Time) bool {
	return t.rate > 0 || (!t.last429.IsZero() && sent.After(t.last429) && now.Sub(t.last429) < throttleForget)
}

// measured returns the successes a second over the last second, and
// false without a second of history.
func (t *throttle) measured(now time.Time) (float64, bool) {
	t.roll(now)
	if t.since.IsZero() || now.Sub(t.since) < time.Second {
		return 0, false
	}
	frac := float64(now.Sub(t.win)) / float64(time.Second)
	return float64(t.okPrev)*(1-frac) + float64(t.okCur), true
}

func (t *throttle) roll(now time.Time) {
	switch d := now.Sub(t.win); {
	case d < time.Second:
	case d < 2*time.Second:
		t.okPrev, t.okCur = t.okCur, 0
		t.win = t.win.Add(time.Second)
	default:
		t.okPrev, t.okCur = 0, 0
		t.win = now
	}
}

// success records a response that was not a 429.
func (t *throttle) success(now time.Time) {
	t.roll(now)
	if t.since.IsZero() {
		t.since, t.win = now, now
	}
	t.okCur++
	if t.on(now) {
		if t.guess {
			t.rate++ // a guess doubles a second until the next 429
		} else {
			t.rate += throttleGrowth
		}
		t.pace.setRate(t.rate)
	}
}

// tooMany records a 429 of a request reserved at sent, and reports
// whether it cut the rate (a 429 of a request sent before the last cut
// says nothing new).
func (t *throttle) tooMany(now, sent time.Time) bool {
	t.last429 = now
	if sent.Before(t.lastCut) {
		return false
	}
	m, ok := t.measured(now)
	switch {
	case t.rate == 0 && ok && m > 0:
		// What the host accepted over the last second, a floor to probe
		// up from: the client may not have been sending at the limit.
		t.rate, t.guess = m*throttleCut, true
	case t.rate == 0:
		t.rate, t.guess = float64(DefaultReleaseRate), true
	case t.guess:
		// Past the limit while probing: the limit lies between the rate
		// of a second ago (half this one) and this one.
		t.rate, t.guess = t.rate*throttleCut, false
	default:
		t.rate *= throttleCut
	}
	t.rate = max(t.rate, minThrottleRate)
	t.lastCut = now
	t.pace.setRate(t.rate)
	return true
}

// pacer spaces requests at a rate, as a virtual schedule (GCRA): each
// reservation takes the next slot; a cancelled one gives it back when no
// later slot was taken.
type pacer struct {
	interval time.Duration
	next     time.Time // the next free slot
}

func (p *pacer) setRate(r float64) {
	p.interval = time.Duration(float64(time.Second) / r)
}

// reserve takes the next slot at or after now and returns it.
func (p *pacer) reserve(now time.Time) time.Time {
	slot := p.next
	if slot.Before(now) {
		slot = now
	}
	p.next = slot.Add(p.interval)
	return slot
}

// cancel gives back slot, if it is the last one taken.
func (p *pacer) cancel(slot time.Time) {
	if p.next.Equal(slot.Add(p.interval)) {
		p.next = slot
	}
}
