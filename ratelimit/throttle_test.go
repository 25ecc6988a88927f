package ratelimit

import (
	"math"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestThrottleDrain: after a 429, the successes of the requests that
// were in flight measure the limiter's rate when they come back evenly
// spaced, as nginx's limit_req answers its queue, and only then.
func TestThrottleDrain(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ms := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, m := range n {
			out = append(out, time.Duration(m)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		asked     bool            // the 429 had Retry-After
		successes []time.Duration // after the 429, of requests sent before it
		wantRate  float64         // 0: no cap
		wantHeld  bool            // the rate is a measure
	}{
		{"a queue answered at 100/s", false, ms(10, 20, 30, 40, 50), 100 * drainBelow, true},
		{"a queue answered at 20/s, Retry-After", true, ms(50, 100, 150, 200, 250), 20 * drainBelow, true},
		{"a queue with jitter", false, ms(9, 21, 29, 42, 50), 100 * drainBelow, true},
		// Two drains that nginx's queue at 100/s gave a loaded process.
		{"a queue read late, then in a clump", false, ms(3, 18, 23, 29, 39, 49), 100 * drainBelow, true},
		{"a queue whose last answer is read late", false, ms(10, 20, 30, 39, 56), 100 * drainBelow, true},
		{"answered at once (token bucket)", false, ms(5, 5, 5, 5, 5), float64(DefaultReleaseRate), false},
		{"answered at once, Retry-After", true, ms(5, 5, 5, 5, 5), 0, false},
		{"uneven latencies", false, ms(5, 45, 55, 150), float64(DefaultReleaseRate), false},
		{"a stall, then a clump", false, ms(4, 183, 183, 183, 183), float64(DefaultReleaseRate), false},
		{"too few", true, ms(10, 20, 30), 0, false},
	} {
		var th throttle
		th.tooMany(t0, t0, tc.asked)
		for _, d := range tc.successes {
			th.success(t0.Add(d), time.Time{})
		}
		now := t0.Add(time.Second)
		got := 0.0
		if th.on(now) {
			got = th.rate
		}
		if math.Abs(got-tc.wantRate) > 0.01 || th.measured() != tc.wantHeld {
			t.Errorf("%s: rate %.2f (measured %v), want %.2f (measured %v)", tc.name, got, th.measured(), tc.wantRate, tc.wantHeld)
		}
	}
}

// TestThrottlePlateau: a measured cap holds for throttlePlateau, then
// grows, and is removed once it has doubled; a 429 during the growth
// sets it again.
func TestThrottlePlateau(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	var th throttle
	th.tooMany(t0, t0, false)
	for i := range 5 {
		th.success(t0.Add(time.Duration(10*(i+1))*time.Millisecond), time.Time{})
	}
	measured := t0.Add(50 * time.Millisecond) // the last of the drain
	const p = 100 * drainBelow                // the plateau: the drain's 100/s, less its margin
	for _, step := range []struct {
		at   time.Duration // after measured
		want float64       // 0: no cap
	}{
		{time.Second, p},
		{20 * time.Second, p},
		{25 * time.Second, p * 1.25},
		{29 * time.Second, p * 1.81},
		{30 * time.Second, 0},
		{60 * time.Second, 0},
	} {
		got := 0.0
		if th.on(measured.Add(step.at)) {
			got = th.rate
		}
		if math.Abs(got-step.want) > 0.01 {
			t.Errorf("at %v: rate %.2f, want %.2f", step.at, got, step.want)
		}
	}

	// A 429 of the probe at 25 s cuts the rate by 10%; it grows back
	// to the plateau and holds there again (no drain measured a new one).
	var th2 throttle
	th2.tooMany(t0, t0, false)
	for i := range 5 {
		th2.success(t0.Add(time.Duration(10*(i+1))*time.Millisecond), time.Time{})
	}
	at := measured.Add(25 * time.Second)
	th2.on(at)
	th2.tooMany(at, at, false)
	if want := p * 1.25 * throttleCut; math.Abs(th2.rate-want) > 0.01 {
		t.Errorf("the probe's 429: rate %.2f, want %.2f", th2.rate, want)
	}
	th2.success(at.Add(time.Millisecond), at)
	for _, d := range []time.Duration{time.Second, 19 * time.Second} {
		if !th2.on(at.Add(d)) || th2.rate != p {
			t.Errorf("%v after the probe's 429: rate %.2f, want %.2f", d, th2.rate, p)
		}
	}
}

// TestThrottleRetryAfterAlone: a 429 with Retry-After and nothing to
// measure caps nothing (the pause alone is asked for); a second one
// within throttleForget caps the host with a guess. A host that never
// sends a 429 is never capped.
func TestThrottleRetryAfterAlone(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	var th throttle
	for i := range 100 {
		th.success(t0.Add(time.Duration(i)*time.Millisecond), time.Time{})
	}
	if th.on(t0.Add(time.Second)) {
		t.Fatalf("no 429: rate %v, want no cap", th.rate)
	}
	at := t0.Add(2 * time.Second)
	th.tooMany(at, at, true)
	if th.on(at) {
		t.Errorf("one 429 with Retry-After: rate %v, want no cap", th.rate)
	}
	at2 := at.Add(2 * time.Second)
	th.tooMany(at2, at2, true)
	if !th.on(at2) || th.grow != growGuess {
		t.Errorf("a second 429 with Retry-After: rate %v (grow %v), want a guess", th.rate, th.grow)
	}
}

// TestTrackerPauseReleasedAtMeasuredRate: a 429 with Retry-After: 1 from
// a limiter whose queue drains at 20/s; the ten requests that arrive
// during the pause go from its end at the measured rate (19.4/s), one
// every 51.5 ms, not in a burst and not in the one-second spread.
func TestTrackerPauseReleasedAtMeasuredRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Options{})
		url := "https://api.example.com/x"
		var inFlight []Reservation
		for range 6 {
			res, err := tr.Reserve(newReq(t, nil, url))
			if err != nil {
				t.Fatal(err)
			}
			inFlight = append(inFlight, res)
		}
		time.Sleep(time.Millisecond)
		start := time.Now()
		inFlight[0].Settle(&http.Response{StatusCode: 429, Header: hdr("Retry-After", "1")})
		for _, res := range inFlight[1:] {
			time.Sleep(50 * time.Millisecond)
			res.Settle(&http.Response{StatusCode: 200, Header: http.Header{}})
		}
		var (
			mu  sync.Mutex
			out []time.Duration
			wg  sync.WaitGroup
		)
		for range 10 {
			wg.Go(func() {
				if err := waitFor(tr, newReq(t, nil, url)); err != nil {
					t.Errorf("Wait = %v, want nil", err)
				}
				mu.Lock()
				out = append(out, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		slices.Sort(out)
		rate := 20 * drainBelow
		interval := time.Duration(float64(time.Second) / rate)
		for i, got := range out {
			if want := time.Second + time.Duration(i)*interval; got != want {
				t.Errorf("request %d let through at %v, want %v", i, got, want)
			}
		}
	})
}

// TestPacer: slots one interval apart from now or the last one taken; a
// cancel gives back the last; a restart starts the schedule anew; a slot
// woken more than paceLate intervals late is to be taken again.
func TestPacer(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	var p pacer
	p.setRate(100) // 10 ms
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for i, step := range []struct {
		op   string
		now  int // ms
		want int // ms: the slot, or 1 for true
	}{
		{"reserve", 0, 0},
		{"reserve", 0, 10},
		{"reserve", 5, 20},
		{"cancel 20", 5, 20}, // next is 20 again
		{"reserve", 5, 20},
		{"reserve", 100, 100},
		{"restart 500", 100, 500},
		{"reserve", 100, 500},
		{"late 500", 530, 0},
		{"late 500", 531, 1},
	} {
		var got int
		switch step.op {
		case "reserve":
			got = int(p.reserve(at(step.now)).Sub(t0) / time.Millisecond)
		case "cancel 20":
			p.cancel(at(20))
			got = int(p.next.Sub(t0) / time.Millisecond)
		case "restart 500":
			p.restart(at(500))
			got = int(p.next.Sub(t0) / time.Millisecond)
		case "late 500":
			if p.late(at(500), at(step.now)) {
				got = 1
			}
		}
		if got != step.want {
			t.Errorf("step %d: %s at %d ms = %d, want %d", i, step.op, step.now, got, step.want)
		}
	}
}

// TestThrottleAdoptAndPausedSecond: a rate the host announces for the
// first time replaces a lower one guessed from 429s; and a 429 within a
// second of a pause's end does not cut the cap to the successes of that
// second, which measure the pause, not the host.
func TestThrottleAdoptAndPausedSecond(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		run  func(th *throttle)
		want float64
	}{
		{"announced above a guess", func(th *throttle) {
			th.tooMany(t0, t0, false) // a guess: DefaultReleaseRate
			th.tooMany(t0.Add(time.Millisecond), t0.Add(time.Millisecond), false)
			th.adopt(t0.Add(2*time.Millisecond), 97)
		}, 97},
		{"announced, then cut", func(th *throttle) {
			th.adopt(t0, 97)
			th.tooMany(t0.Add(time.Millisecond), t0.Add(time.Millisecond), false)
			th.adopt(t0.Add(2*time.Millisecond), 97) // the same word: the cut stands
		}, 97 * throttleCut},
		{"a 429 just after a pause", func(th *throttle) {
			for i := range 100 { // a second at 100/s
				th.success(t0.Add(time.Duration(i)*10*time.Millisecond), time.Time{})
			}
			th.adopt(t0.Add(time.Second), 97)
			th.resumed = t0.Add(2 * time.Second) // paused for a second
			th.success(th.resumed.Add(time.Millisecond), th.resumed)
			at := th.resumed.Add(5 * time.Millisecond)
			th.tooMany(at, at, false)
		}, 97 * throttleCut},
	} {
		var th throttle
		tc.run(&th)
		if math.Abs(th.rate-tc.want) > 0.01 {
			t.Errorf("%s: rate %.2f, want %.2f", tc.name, th.rate, tc.want)
		}
	}
}

// TestThrottleSecondCutWithinAGuessKeepsProbing: a guess made at a 429
// is what the host let through in a second that a pause and its release
// took, not its limit. A second 429 at once (within guessTail: the tail
// of the same release) cuts it, and the cap keeps doubling at full use;
// a later cut says the rate is near the limit, and it grows slowly from
// there: back toward the rate the 429 refused (quickly far below it,
// slowly near it), never above 97% of it.
func TestThrottleSecondCutWithinAGuessKeepsProbing(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		secondCut time.Duration // after the guess
		wantMin   float64       // the cap a second after the second cut, as a multiple of the cap it set
		wantMax   float64       // 0: throttleBelow·the rate the second 429 refused
	}{
		{"second cut 50 ms after the guess", 50 * time.Millisecond, 1.5, math.Inf(1)},
		{"second cut 300 ms after the guess", 300 * time.Millisecond, 1, 0},
		{"second cut 1.5 s after the guess", 1500 * time.Millisecond, 1, 0},
	} {
		var th throttle
		// A second of history at 20/s, then the guess.
		for i := range 20 {
			th.success(t0.Add(time.Duration(i)*50*time.Millisecond), time.Time{})
		}
		guess := t0.Add(time.Second)
		th.tooMany(guess, guess, false)
		now := guess
		// Full use at the cap until the second cut.
		for now.Before(guess.Add(tc.secondCut)) {
			now = now.Add(time.Duration(float64(time.Second) / th.rate))
			th.success(now, now)
		}
		cut := guess.Add(tc.secondCut)
		refused := th.rate
		if !th.tooMany(cut, cut, false) {
			t.Fatalf("%s: the second 429 did not cut", tc.name)
		}
		r0 := th.rate
		if tc.wantMax == 0 {
			tc.wantMax = throttleBelow * refused / r0
		}
		for now = cut; now.Before(cut.Add(time.Second)); {
			now = now.Add(time.Duration(float64(time.Second) / th.rate))
			th.success(now, now)
		}
		if got := th.rate / r0; got < tc.wantMin || got > tc.wantMax {
			t.Errorf("%s: cap %.1f/s a second after the cut set it to %.1f/s (×%.2f), want ×%.1f to ×%v", tc.name, th.rate, r0, got, tc.wantMin, tc.wantMax)
		}
	}
}

// TestThrottleRefusalsMeasureTheRate: nginx's nodelay refuses only when
// its bucket is full, so what it accepted between two 429s, while the
// client sent above that all along, is its rate, whatever its burst: the
// second 429 holds the cap just under it. A cap that went below what
// was accepted, a pause between, or 429s too close together measure
// nothing.
func TestThrottleRefusalsMeasureTheRate(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		cap    float64       // the cap in force between the 429s
		span   time.Duration // between them
		paused bool          // a pause ended between them
		want   float64       // the cap after the second; 0: unchanged
	}{
		{"a cap above the limit", 25, time.Second, false, 20 * throttleBelow},
		{"a cap just above the limit, 600 ms", 21, 600 * time.Millisecond, false, 20 * throttleBelow},
		{"too close together", 25, 200 * time.Millisecond, false, 0},
		{"a cap below what was accepted", 18, time.Second, false, 0},
		{"a pause between", 25, time.Second, true, 0},
	} {
		var th throttle
		th.rate, th.grow, th.last429 = tc.cap, growAIMD, t0
		th.pace.setRate(th.rate)
		if th.refusedAtRate(t0) {
			t.Fatalf("%s: the first 429 measured a rate", tc.name)
		}
		// The limiter accepts 20 a second (plus its burst of 5 at once
		// when it was not full: it was).
		n := int(20 * tc.span.Seconds())
		for i := 1; i <= n; i++ {
			at := t0.Add(time.Duration(i) * tc.span / time.Duration(n))
			th.oks[th.nok%okRing] = at
			th.nok++
		}
		if tc.paused {
			th.resumed = t0.Add(tc.span / 2)
		}
		end := t0.Add(tc.span)
		got := th.refusedAtRate(end)
		if tc.want == 0 {
			if got || th.rate != tc.cap {
				t.Errorf("%s: measured %v, cap %.2f, want no measure, cap %.2f", tc.name, got, th.rate, tc.cap)
			}
			continue
		}
		if !got || math.Abs(th.rate-tc.want) > 0.01 || th.grow != growHeld {
			t.Errorf("%s: measured %v, cap %.2f (grow %d), want a measure, cap %.2f held", tc.name, got, th.rate, th.grow, tc.want)
		}
		if next := th.pace.reserve(end); next.Before(end.Add(drainSlots * th.pace.interval)) {
			t.Errorf("%s: next slot %v after the 429, want %d intervals (%v)", tc.name, next.Sub(end), drainSlots, drainSlots*th.pace.interval)
		}
	}
}

// TestPacerRespace: slots taken at a low rate would hold the pace below
// a higher one for as long as they last; once the rate has grown by a
// quarter, with more than a few requests queued, the schedule starts
// again at the new rate (and a new epoch, so that their holders take
// new slots). A smaller growth, or a short queue, keeps the schedule.
func TestPacerRespace(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		queued  int     // slots taken ahead of t0
		rate    float64 // the rate set after them
		respace bool
	}{
		{"grown by half, 10 queued", 10, 30, true},
		{"grown by a quarter, 10 queued", 10, 25, true},
		{"grown by a tenth, 10 queued", 10, 22, false},
		{"grown by half, 1 queued", 1, 30, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p pacer
			p.setRate(20)
			p.restart(t0)
			for range tc.queued + 1 {
				p.reserve(t0)
			}
			epoch := p.epoch
			p.setRate(tc.rate)
			p.respace(t0, 4)
			if got := p.epoch != epoch; got != tc.respace || p.respaced != tc.respace {
				t.Fatalf("restarted = %v, respaced = %v; want %v", got, p.respaced, tc.respace)
			}
			if !tc.respace {
				return
			}
			interval := time.Duration(float64(time.Second) / tc.rate)
			if got, want := p.reserve(t0), t0.Add(interval); !got.Equal(want) {
				t.Errorf("first slot after the respace = %v, want %v (an interval of the new rate)", got.Sub(t0), want.Sub(t0))
			}
			if got, want := p.reserve(t0), t0.Add(2*interval); !got.Equal(want) {
				t.Errorf("second slot = %v, want %v", got.Sub(t0), want.Sub(t0))
			}
		})
	}
}

// TestThrottleBlindGuess: a blind guess grows by blindStep a success
// while requests queue for it, and a 429 cuts it to 90% of what the host
// accepted over the last quarter second, the first burst not counted,
// not to what it accepted over the last second, which lags the growth.
// A guess made from a 429 grows by guessStep, as before.
func TestThrottleBlindGuess(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	var th throttle
	th.burst = 6 // the first burst: nginx's burst of 5, and one
	th.resumed = t0
	th.guessFrom(t0, 20)
	if !th.blind || th.rate != 20 {
		t.Fatalf("guessFrom: rate %v, blind %v; want 20, true", th.rate, th.blind)
	}
	// Twenty requests queue for the pace; the host accepts 40 a second
	// for a second, then 100 a second for 250 ms.
	th.pace.restart(t0)
	for range 20 {
		th.pace.reserve(t0)
	}
	now := t0
	for i := range 40 + 25 {
		d := 25 * time.Millisecond
		if i >= 40 {
			d = 10 * time.Millisecond
		}
		now = now.Add(d)
		for th.pace.backlog(now) < 20 {
			th.pace.reserve(now)
		}
		th.success(now, now.Add(-time.Millisecond))
	}
	if got, want := th.rate, 20+65*float64(blindStep); got != want {
		t.Errorf("after 65 successes with 20 queued: rate = %v, want %v", got, want)
	}
	m, _ := th.lastSecond(now)
	th.tooMany(now, now.Add(-time.Millisecond), false)
	want := (25 - 6) / recentSpan.Seconds() * throttleCut
	if got := th.rate; math.Abs(got-want) > 0.5 {
		t.Errorf("cut after the guess's first 429 = %.1f, want %.1f (90%% of the last quarter second's 25 less the first burst's 6; the last second's %.0f lags)", got, want, m)
	}
	if th.blind || th.grow != growAIMD {
		t.Errorf("after the cut: blind %v, grow %v; want false, %v", th.blind, th.grow, growAIMD)
	}

	var g throttle
	g.rate, g.grow, g.last429 = 20, growGuess, t0
	g.success(t0, t0.Add(-time.Millisecond))
	if got, want := g.rate, 20+guessStep; got != want {
		t.Errorf("a guess made from a 429, after a success: rate = %v, want %v", got, want)
	}
}
