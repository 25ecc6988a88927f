package ratelimit

import (
	"slices"
	"time"
)

// This file learns the rate a host accepts from its 429s, as TCP learns
// a path's capacity from its losses, and keeps just under it, as TCP
// CUBIC keeps a plateau below the window of its last loss.
//
// The rate a limiter accepts is measured by the requests in flight when
// a 429 came back that then succeed: a limiter that queues rather than
// refuses (nginx's limit_req without nodelay) answers its queue one
// request per interval of its rate, so when throttleEvenN of them come
// back evenly spaced (see drain.rate), their spacing is the limiter's
// rate M. The host is then held
// at drainBelow·M, just under the limit so that the limiter's burst
// is kept for jitter (a rate measured otherwise is held at
// throttleBelow of it), for throttlePlateau; then the cap grows, slowly at
// first (quadratically in time, doubling after another throttleRamp),
// to find out whether the limit was raised, and goes once it has doubled.
//
// Without a measure, the rate is learned as TCP does: the first 429
// caps the host at a guess (the successes of the last second less
// throttleCut, or DefaultReleaseRate without a second of history) that
// grows by guessStep requests a second per success while it is under
// guessAhead times the successes of the last second; each later 429
// cuts the rate by throttleCut, and each success raises it by
// throttleGrowth (about 5% a second at full use), or by throttleApproach
// of the gap to throttleBelow·the rate the 429 refused when that is
// more, up to the plateau of the last measure if there is one. Such a
// cap goes after throttleForget without a 429.
//
// A limiter that refuses only the excess (nginx's nodelay) refuses when
// its bucket is full: what it accepted between two 429s, with no pause
// between and a cap never below it, is its rate (see refusal), a
// measure held as the drain's is. A refused probe costs the probe and
// drainSlots slots of the pace, not a pause.
//
// A 429 of a request sent before the last cut says nothing new. 429s
// with Retry-After pause the host as asked and teach the rate as well,
// but a guess caps the host only from the second of them, or once the
// host has shown that it refuses only the excess while the requests the
// pause held are released: the next request then starts a blind guess
// (see guessFrom), which grows as slow start does, blindStep a success
// while requests queue for it, its queued slots taken again as it grows
// (see pacer.respace), and whose first 429 cuts it from what the host
// accepted in the last quarter second (see recent).

const (
	// throttlePause is how long a host pauses after a 429 that names no
	// wait: time for a limiter's queue to drain.
	throttlePause = 250 * time.Millisecond
	// throttleCut is the multiplicative decrease of a rate at a 429.
	throttleCut = 0.9
	// throttleGrowth is the additive increase per success, as a fraction
	// of a request a second per request a second of rate.
	throttleGrowth = 0.05
	// throttleBelow is the fraction of a measured rate the cap keeps.
	throttleBelow = 0.97
	// drainBelow is the fraction of a rate measured from a queue's drain
	// (see drain.rate) the cap keeps: a limiter that answers a queue
	// delays a request sent a little above its rate rather than refuse
	// it, and the drain's spacing, late by its timers, is a little under
	// its rate already.
	drainBelow = 0.99
	// throttlePlateau is how long a measured cap holds before it grows.
	throttlePlateau = 20 * time.Second
	// throttleRamp is how long after the plateau the cap takes to double.
	throttleRamp = 10 * time.Second
	// throttleEvenN is how many evenly spaced successes of requests in
	// flight at a 429 measure a limiter's rate.
	throttleEvenN = 4
	// guessTail is how soon after a guess another 429 is taken for the
	// tail of the release that the guess measured, not for the limit.
	guessTail = 100 * time.Millisecond
	// refusalSpan is the shortest span between two 429s that measures
	// the host's rate (see refusal).
	refusalSpan = 500 * time.Millisecond
	// guessAhead is how far above the successes of the last second a
	// guess may grow, and guessStep how much it grows a success: a
	// guess finds the limit from below within a second or two, as TCP's
	// slow start does.
	guessAhead = 2
	guessStep  = 1.5
	// blindStep is how much a blind guess (see guessFrom) grows a
	// success: from the floor it starts at, it reaches a hundred
	// requests a second within a second.
	blindStep = 3
	// guessQueued is how many requests waiting for the pace show that a
	// guess is used whole, whatever the last second's successes: it
	// grows as TCP's slow start grows a window the sender fills.
	guessQueued = 4
	// drainSlots is how many slots of the pace a refused probe leaves
	// empty.
	drainSlots = 4
	// throttleApproach is the share of the gap to the ceiling a cap
	// closes a second, at full use.
	throttleApproach = 1.0
	// throttleForget is how long a cap that is not a measure lasts
	// without a 429.
	throttleForget = 10 * time.Second
	// throttleNear is how far above the successes of the last second a
	// cap is still taken to be about the host's rate.
	throttleNear = 1.1
	// throttleAhead is how far above the successes of the last second
	// a cap may grow: as TCP grows a window only while it is used.
	throttleAhead = 1.5
	// paceLate is how many intervals late a paced request may go in
	// its slot; later, it takes another.
	paceLate = 3
	// minThrottleRate is the lowest rate a cut goes to, requests a second:
	// pacing at it costs a lone request at most a second.
	minThrottleRate = 1
	// maxOwnWait bounds every wait of the Tracker's own making (the
	// pause after a bare 429, pacing at the learned rate, the release
	// spread after a pause): only a server's reset or Retry-After makes a
	// request wait longer.
	maxOwnWait = time.Second
)

// The ways a throttle's rate changes between 429s.
const (
	growGuess = iota // a guess: doubles every second
	growAIMD         // cut by a 429: grows throttleGrowth, up to plateau
	growHeld         // a measure: holds, then probes
)

// throttle is a host's learned rate. h.mu guards it.
type throttle struct {
	rate    float64 // requests a second; 0 when there is no cap
	grow    uint8
	plateau float64 // throttleBelow·the last measure; 0 when none
	// announced is the last rate adopted from the host's own word.
	announced float64
	cut       time.Time // when a 429 last cut the rate
	// quiet is until when 429s of requests let through are taken for the
	// tail of the excess that the last cut answered, and cut no further.
	quiet   time.Time
	set     time.Time // when the rate was last held at its plateau
	last429 time.Time
	pace    pacer
	// resumed is when the last pause of the host ended (or ends).
	resumed time.Time
	drain   drain // successes since cut of requests sent before it
	// oks are the times of the last successes, a ring; nok counts them
	// all.
	oks [okRing]time.Time
	nok int
	// burst is the successes of the first burst: those the host had in
	// the second before it had state (see firstBursts).
	burst int
	// ceiling is the rate of the last guess a 429 refused: the host's
	// rate is below it. A cap cut from a guess grows back toward it
	// quickly, then slowly near it (see success).
	ceiling float64
	// anchor is when a 429 found the host's bucket full, and okAt the
	// successes counted then (see refusal).
	anchor time.Time
	okAt   int
	// blind is set while the guess in force started from nothing
	// measured (see guessFrom), until a 429 cuts it.
	blind bool
}

// okRing is how many successes the throttle remembers: a second's worth
// at 256 requests a second; at a higher rate, the last 256.
const okRing = 256

// on reports whether a cap is in force at now, growing it once its
// plateau is over and removing it when it is no longer needed.
func (t *throttle) on(now time.Time) bool {
	switch {
	case t.rate == 0:
	case t.grow != growHeld:
		if now.Sub(t.last429) > throttleForget {
			t.rate, t.plateau = 0, 0
		}
	default:
		if s := now.Sub(t.set) - throttlePlateau; s > 0 {
			x := s.Seconds() / throttleRamp.Seconds()
			t.rate = t.plateau * (1 + x*x)
			if t.rate >= 2*t.plateau {
				t.rate, t.plateau = 0, 0
			} else {
				t.pace.setRate(t.rate)
			}
		}
	}
	return t.rate > 0
}

// measured reports whether the cap in force is held at a measure.
func (t *throttle) measured() bool { return t.rate > 0 && t.grow == growHeld }

// lastSecond returns the successes a second over the last second, and
// false with less than a second of history to measure on. (A shorter
// span would count a limiter's burst as its rate.) When a pause took
// part of the second, the successes since it ended measure the host,
// once half a second has passed: the pause measures nothing.
func (t *throttle) lastSecond(now time.Time) (float64, bool) {
	from := now.Add(-time.Second)
	if t.resumed.After(from) {
		if now.Sub(t.resumed) < time.Second/2 {
			return 0, false
		}
		from = t.resumed
	}
	n := 0
	for i := 1; i <= min(t.nok, okRing); i++ {
		at := t.oks[(t.nok-i)%okRing]
		if !at.After(from) {
			break
		}
		n++
		if i == okRing {
			from = at // the ring holds less than the span: measure on it
		}
	}
	oldest := t.oks[0]
	if t.nok > okRing {
		oldest = t.oks[t.nok%okRing]
	}
	if t.nok == 0 || now.Sub(oldest) < time.Second {
		return 0, false
	}
	return float64(n) / now.Sub(from).Seconds(), true
}

// recentSpan is the span over which recent measures what a host
// accepted just before a guess was refused.
const recentSpan = 250 * time.Millisecond

// recent returns the successes a second over the last recentSpan, and
// false when fewer than throttleEvenN came in it or a pause took part
// of it. A span this short counts the limiter's burst as well as its
// rate: the first burst, what the host accepted at once before anything
// was known, is taken for that burst and not counted.
func (t *throttle) recent(now time.Time) (float64, bool) {
	from := now.Add(-recentSpan)
	if t.resumed.After(from) {
		return 0, false
	}
	n := 0
	for i := 1; i <= min(t.nok, okRing); i++ {
		if !t.oks[(t.nok-i)%okRing].After(from) {
			break
		}
		n++
	}
	if n -= t.burst; n < throttleEvenN {
		return 0, false
	}
	return float64(n) / recentSpan.Seconds(), true
}

// success records a response that was not a 429, to a request let
// through at sent (the zero Time when the host had no state then).
func (t *throttle) success(now, sent time.Time) {
	t.oks[t.nok%okRing] = now
	t.nok++
	if sent.IsZero() {
		t.burst++ // sent before the host had state: the first burst
	}
	on := t.on(now)
	if sent.Before(t.cut) && (on || now.Sub(t.cut) < throttleForget) {
		t.drain.add(now)
		if m, ok := t.drain.rate(); ok {
			t.plateau = max(m*drainBelow, minThrottleRate)
			t.hold(now)
		}
		return
	}
	// A cap far above what the host is sent (the pace's queue lags a
	// rising rate, or the client wants less) does not grow: it would
	// let a burst through.
	m, ok := t.lastSecond(now)
	unused := ok && t.rate >= throttleAhead*m
	switch {
	case !on:
	case t.grow == growGuess:
		if !ok || t.rate < guessAhead*m || t.blind && t.pace.backlog(now) >= guessQueued {
			step := guessStep
			if t.blind {
				step = blindStep
			}
			t.rate += step
			t.pace.setRate(t.rate)
			if t.blind {
				t.pace.respace(now, guessQueued)
			}
		}
	case t.grow == growAIMD:
		if t.plateau > 0 && t.rate+throttleGrowth >= t.plateau {
			t.hold(now)
		} else if !unused {
			g := throttleGrowth
			if c := t.ceiling * throttleBelow; c > t.rate {
				// Far below the rate the last guess was refused at: the
				// host's rate lies between; close a share of the gap.
				g = max(g, throttleApproach*(c-t.rate)/t.rate)
			}
			t.rate += g
			t.pace.setRate(t.rate)
		}
	}
}

// adopt holds the rate at r, a rate the host announced: as a measure,
// and without the probes above it, since the host says what it is. A
// rate announced for the first time (or changed) replaces one guessed
// from 429s, lower or higher; a 429 after it cuts it as usual.
func (t *throttle) adopt(now time.Time, r float64) {
	if t.announced != r {
		t.announced, t.plateau = r, r
		t.hold(now)
		return
	}
	if t.plateau != r || t.grow != growHeld {
		t.plateau = r
		if t.rate == 0 || t.rate > r || t.grow == growHeld {
			t.hold(now)
		}
		return
	}
	t.set = now // the plateau holds while the host says so
}

// holdBurst holds the rate just under the first burst's successes, a
// measure of a limiter that counts a second (and the requests it
// refuses), and reports whether it did: only when the burst was at least
// DefaultReleaseRate, the guess it replaces (a burst smaller than that
// is a bucket's, not a second's count).
func (t *throttle) holdBurst(now time.Time) bool {
	if t.burst < int(DefaultReleaseRate) || t.measured() {
		return false
	}
	// A count of a second is of whole requests: a pace half a request
	// under it keeps the count under the limit whatever the jitter.
	t.plateau = max(float64(t.burst)*throttleBelow-0.5, minThrottleRate)
	t.hold(now)
	return true
}

// guessFrom caps the host at a blind guess r from now: the host has
// shown only that it refuses the excess, and the guess grows by
// blindStep a success while requests queue for it, until a 429 cuts it
// from what the host accepted just before.
func (t *throttle) guessFrom(now time.Time, r float64) {
	t.rate, t.grow, t.blind = max(r, minThrottleRate), growGuess, true
	t.cut, t.last429, t.drain = now, now, drain{}
	t.pace.setRate(t.rate)
}

// hold holds the rate at its plateau from now.
func (t *throttle) hold(now time.Time) {
	t.rate, t.grow, t.set, t.blind = t.plateau, growHeld, now, false
	t.pace.setRate(t.rate)
}

// tooMany records a 429 of a request let through at sent, and reports
// whether it cut the rate (a 429 of a request sent before the last cut
// says nothing new). asked is set when the 429 named its wait
// (Retry-After): the host pauses as asked, and a guess caps it only from
// the second such 429.
func (t *throttle) tooMany(now, sent time.Time, asked bool) bool {
	t.last429 = now
	if sent.Before(t.cut) || sent.Before(t.quiet) {
		return false
	}
	switch m, ok := t.lastSecond(now); {
	case t.rate == 0 && asked && (t.cut.IsZero() || now.Sub(t.cut) > throttleForget):
		// The drain of the requests in flight may measure the rate; if
		// not, the next such 429 caps the host with a guess.
		t.cut, t.drain = now, drain{}
		return false
	case t.rate == 0 && ok && m > 0:
		// What the host accepted over the last second, a floor to probe
		// up from: the client may not have been sending at the limit
		// (or a pause took most of the second: never below the rate a
		// pause's requests are released at).
		t.rate, t.grow = max(m*throttleCut, float64(DefaultReleaseRate)), growGuess
	case t.rate == 0:
		// Less than a second of history: the first burst's successes,
		// what the host accepted in that second, seed the guess.
		t.rate, t.grow = max(float64(t.burst)*throttleCut, float64(DefaultReleaseRate)), growGuess
	default:
		if t.grow == growAIMD {
			t.plateau = 0 // a second cut without a measure: the plateau is stale
		}
		r := t.rate
		if ok && m > 0 {
			// The host accepted m a second lately while it refused the
			// excess: its rate is about m, whatever the cap said (the
			// pace's queue lags a cap that rose).
			r = min(r, m)
		}
		if q, qok := t.recent(now); qok && t.blind && q > r {
			// A blind guess grows fast: what the host accepted just
			// now, not over the last second, is about its rate.
			r = min(t.rate, q)
		}
		grow := uint8(growAIMD)
		t.ceiling = t.rate
		if t.grow == growGuess && now.Sub(t.cut) < guessTail {
			// A guess cut again at once: the guess was what a pause and
			// its release let through, not the host's limit, and this
			// 429 is the tail of the same release. The cap keeps probing
			// up as a guess does, or it would creep from far below the
			// limit.
			grow = growGuess
		}
		t.rate, t.grow = r*throttleCut, grow
	}
	t.rate = max(t.rate, minThrottleRate)
	t.cut, t.blind = now, false
	t.drain = drain{}
	t.pace.setRate(t.rate)
	return true
}

// probeRefused records a 429 of a request let through at sent while a
// learned rate is in force: a probe above the host's rate. When the cap
// was about what the host accepted over the last second, that is the
// host's rate: the cap holds just under it, as a measure. Otherwise the
// 429 cuts as tooMany does. Either way the requests let through within
// a pause's length meet the excess it found: their 429s change nothing.
func (t *throttle) probeRefused(now, sent time.Time) {
	if t.refusedAtRate(now) {
		t.quiet = later(t.quiet, now.Add(throttlePause))
		return
	}
	if sent.Before(t.cut) || sent.Before(t.quiet) {
		t.last429 = now
		t.skip(now)
		return
	}
	if !t.heldNear(now) {
		t.tooMany(now, sent, false)
	}
	t.skip(now)
	t.quiet = later(t.quiet, now.Add(throttlePause))
}

// skip leaves a few slots of the pace empty from now, so that a
// limiter whose bucket the refused probe found full (nginx's nodelay)
// drains that many before the next request: a probe costs the probe and
// those slots, not a pause.
func (t *throttle) skip(now time.Time) {
	if t.pace.interval > 0 {
		t.pace.restart(now.Add(drainSlots * t.pace.interval))
	}
}

// refusedAtRate records a 429 at now while a learned rate is in force,
// and reports whether it measured the host's rate (see refusal): the cap
// then holds just under it, and the pace leaves drainSlots empty.
func (t *throttle) refusedAtRate(now time.Time) bool {
	r, ok := t.refusal(now)
	if !ok || t.rate == 0 {
		return false
	}
	t.last429, t.cut, t.drain = now, now, drain{}
	t.plateau = max(min(t.rate, r)*throttleBelow, minThrottleRate)
	t.hold(now)
	t.skip(now)
	return true
}

// refusal records a 429 at now and returns the rate the host accepted
// since an earlier 429, when that measures the host's rate: a 429 finds
// a limiter's bucket full (nginx's nodelay refuses only then), so
// between two 429s with no pause between and a cap never below what was
// accepted (the client sent at least that much all along, so the bucket
// never emptied), the limiter accepted exactly its rate. The span must
// be refusalSpan at least (a few requests give a coarse measure), and
// throttleForget at most.
func (t *throttle) refusal(now time.Time) (float64, bool) {
	span := now.Sub(t.anchor)
	if !t.anchor.IsZero() && !t.anchor.Before(t.resumed) && span < refusalSpan {
		return 0, false // too soon to measure: keep the anchor
	}
	n, low := t.nok-t.okAt, t.pace.low
	valid := !t.anchor.IsZero() && !t.anchor.Before(t.resumed) && span <= throttleForget
	t.anchor, t.okAt = now, t.nok
	t.pace.low = t.rate
	if !valid || n < throttleEvenN {
		return 0, false
	}
	r := float64(n) / span.Seconds()
	if low > 0 && low < r {
		return 0, false // the client sent less than that at times
	}
	return r, true
}

// heldNear holds the cap just under what the host accepted over the
// last second when the cap in force was about that (see nearMeasure),
// and reports whether it did.
func (t *throttle) heldNear(now time.Time) bool {
	if !t.nearMeasure(now) {
		return false
	}
	m, _ := t.lastSecond(now)
	t.last429, t.cut, t.drain = now, now, drain{}
	t.plateau = max(min(t.rate, m)*throttleBelow, minThrottleRate)
	t.hold(now)
	return true
}

// nearMeasure reports whether the cap in force is about what the host
// accepted over the last second: a measure of the host's rate.
func (t *throttle) nearMeasure(now time.Time) bool {
	m, ok := t.lastSecond(now)
	return ok && m > 0 && t.rate <= throttleNear*m
}

// drain is the spacing of a run of successes: its first gaps.
type drain struct {
	n    int // successes
	last time.Time
	gaps [8]time.Duration
}

func (d *drain) add(now time.Time) {
	if d.n > 0 && d.n <= len(d.gaps) {
		d.gaps[d.n-1] = now.Sub(d.last)
	}
	d.last = now
	d.n++
}

// rate returns the rate of the run, one a median gap, and false when the
// run is too short or too uneven to be a limiter's pace: fewer than
// throttleEvenN successes, a median gap under a millisecond, fewer than
// two gaps within a quarter of it, or a mean gap over a third away from
// it. A success that comes late (a stalled reader) lengthens one gap and
// shortens the next, which the median ignores.
func (d *drain) rate() (float64, bool) {
	if d.n < throttleEvenN {
		return 0, false
	}
	var buf [len(d.gaps)]time.Duration
	g := buf[:copy(buf[:], d.gaps[:min(d.n-1, len(d.gaps))])]
	slices.Sort(g)
	med := g[len(g)/2]
	if len(g)%2 == 0 {
		med = (g[len(g)/2-1] + med) / 2
	}
	var near int
	var sum time.Duration
	for _, x := range g {
		if x >= med*3/4 && x <= med*5/4 {
			near++
		}
		sum += x
	}
	mean := sum / time.Duration(len(g))
	if med < time.Millisecond || near < 2 || mean < med*2/3 || mean > med*4/3 {
		return 0, false
	}
	return float64(time.Second) / float64(med), true
}
