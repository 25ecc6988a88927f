package ratelimit

import (
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// This file holds the pause rule: a host's pause (setPause), what asked
// for it (pauseCause), the pause after a 429 that named no wait
// (barePause), whether the host refuses only the excess (excessOnly),
// and how the requests a pause held are let go (releaseSlot).

// pauseCause is what asked for a host's pause, for the error of a
// request it refuses.
type pauseCause struct {
	status     int           // the response's status; 0 for Tracker.Pause
	retryAfter time.Duration // what its Retry-After asked; 0 when it named no wait
	asked      time.Time     // the end the server asked for, when later than the pause's
}

// spread releases the requests held by a pause gradually: at most one per
// interval from the pause's end, never later than end, which is fixed
// when the pause ends. Requests that come after end go at once.
type spread struct {
	of       time.Time // the end of the pause it releases
	end      time.Time
	next     time.Time
	interval time.Duration
	// reset is set when of is a spent quota's reset (see resetSpread).
	reset bool
}

// releaseSlot returns the time a request may go in the spread that
// follows the last pause, and false when there is no spread to join.
//
// The reset of a spent quota of a second or two that held requests is
// such an end too, once passed and when later than the pause's: the
// requests it held go at the quota's rate, the first an interval after
// the reset, since a window that slides still counts the whole of the
// last one at its reset (go-chi/httprate) and refuses there a burst
// that a fixed window would take. A fixed window loses nothing by it:
// its count is the same over the window.
// counted says the one asking is among h.waiters.
func (h *hostState) releaseSlot(now time.Time, set quotaSet, waited, counted bool) (time.Time, bool) {
	of, reset := h.pause, h.heldTo.After(h.pause) && !now.Before(h.heldTo)
	if reset {
		of = h.heldTo
	}
	if of.IsZero() {
		return time.Time{}, false
	}
	if !h.release.of.Equal(of) {
		if !waited && now.Sub(of) > maxOwnWait {
			return time.Time{}, false // a pause long over: nothing to spread
		}
		// The pause has just ended: fix the spread once, sized for the
		// requests it held.
		// The sleepers, the retries of the responses that asked for
		// the pause not back yet, and the one asking. A retry back
		// before the pause ended (late: told to wait for it once the
		// first ask's own wait had passed, a later 429 having ended it
		// later) sleeps here and is counted once. The one asking, when
		// it did not wait, is most often the first retry to come back,
		// which would otherwise be counted twice and make the next
		// request wait a slot for nobody.
		n, self := max(int(h.waiters.Load())-h.placed, 0), 1
		if counted {
			self = 0 // among the waiters
		}
		if back := max(h.held-h.late, 0); reset {
			n += self // the sleepers and the one asking; no retries owed
		} else if waited {
			n += back + self
		} else {
			n += max(back, self)
		}
		rate := h.releaseRate(set)
		d := time.Duration(float64(n) / rate * float64(time.Second))
		d = min(d, maxOwnWait)
		h.release = spread{of: of, end: of.Add(d), next: of, interval: d / time.Duration(n)}
		if reset {
			h.release = h.resetSpread(of, n, rate, set)
		}
	}
	s := &h.release
	if !now.Before(s.end) || !s.next.Before(s.end) {
		return time.Time{}, false
	}
	slot := s.next
	if slot.Before(now) {
		slot = now
	}
	s.next = slot.Add(s.interval)
	return slot, true
}

// resetSpread returns the spread that releases the n requests held by
// the spent quotas of a second or two in set until their reset at of,
// and those that come while it runs: a place for each unit of the
// window that begins at of, at their rate (a little faster when the
// window could not hold the last one otherwise), one an interval after
// the other from an interval after the reset, what a window that slides
// frees, all inside the window and within a second. Each place is a
// unit of the window, taken when it is given (see admit): the requests
// beyond the window's units wait for the next reset, and none goes in a
// burst. Fewer than two held, or fewer than two units: the requests go
// at the reset, as without a spread.
func (h *hostState) resetSpread(of time.Time, n int, rate float64, set quotaSet) spread {
	room, w := 1<<30, maxGuessedWindow
	for i := range h.quotas[:h.nq] {
		q := &h.quotas[i]
		if set&(1<<i) != 0 && q.remaining != Unknown && !q.tokens() && q.short() {
			room, w = min(room, q.remaining), min(w, q.windowGuess())
		}
	}
	if n < 2 || room < 2 || room == 1<<30 {
		return spread{of: of, next: of, end: of}
	}
	// A place for each unit of the window, for the requests held and
	// those that come while it runs, the last one inside the window.
	iv := time.Duration(float64(time.Second) / rate)
	if span := min(w, maxOwnWait) - time.Millisecond; time.Duration(room)*iv > span {
		iv = span / time.Duration(room)
	}
	return spread{of: of, interval: iv, next: of.Add(iv), end: of.Add(time.Duration(room)*iv + iv/2), reset: true}
}

// spreading reports whether the spread after the last pause is still
// releasing the requests it held at now.
func (h *hostState) spreading(now time.Time) bool {
	return !h.pause.IsZero() && h.release.of.Equal(h.pause) && now.Before(h.release.end)
}

// releaseRate is the rate at which requests held by a pause are let go:
// the learned rate, else the quota's own rate when known (or its window
// guessed, see windowGuess), else DefaultReleaseRate.
func (h *hostState) releaseRate(set quotaSet) float64 {
	if h.thr.rate > 0 {
		return h.thr.rate
	}
	best := -1.0
	for i := range h.quotas[:h.nq] {
		q := &h.quotas[i]
		if w := q.windowGuess(); set&(1<<i) != 0 && q.limit > 0 && w > 0 && !q.tokens() {
			if r := float64(q.limit) / w.Seconds(); best < 0 || r < best {
				best = r
			}
		}
	}
	if best > 0 {
		return best
	}
	return float64(DefaultReleaseRate)
}

// barePause is the last pause after a 429 that named no wait.
type barePause struct {
	end  time.Time     // its end
	wait time.Duration // its length
	ok   bool          // a request let through after it succeeded
	from time.Time     // when the first 429 of its run came
}

// excessOnly reports whether the host has shown, within throttleForget,
// that its 429s with Retry-After refuse only the requests beyond its
// rate: it accepted a request let through after one it refused.
func (h *hostState) excessOnly(now time.Time) bool {
	return !h.excess.IsZero() && now.Sub(h.excess) < throttleForget
}

// excessCutsInRow is how many 429s with Retry-After in a row, each of a
// request let through after the last cut, a host that refuses only the
// excess may answer before its Retry-After pauses the host again.
const excessCutsInRow = 2

// setPause holds every request until until, or for maxPause when that
// is sooner; a pause never shortens one in force. status is that of the
// response that asked (0 for none), and asked whether its Retry-After
// did. h.mu is held.
func (h *hostState) setPause(now, until time.Time, status int, asked bool) {
	fresh := !now.Before(h.pause)
	if fresh {
		h.held, h.late = 0, 0 // a new pause
	}
	c := pauseCause{status: status}
	if asked {
		c.retryAfter = until.Sub(now)
	}
	if held := holdUntil(now, until, h.maxPause); until.After(held) {
		c.asked, until = until, held
	}
	if fresh {
		h.firstEnd = until
	}
	if until.After(h.pause) {
		h.pause, h.cause = until, c
	} else if c.asked.After(h.cause.asked) {
		h.cause.asked = c.asked // the server asks for longer still
	}
	h.thr.pace.restart(h.pause)
	h.thr.resumed = h.pause
}

// holdUntil returns until when an ask that ends at until holds its host
// at now: the one rule for a server-asked wait, policy.ServerWait, with
// maxPause (Options.MaxPause, resolved) as its MaxHold.
func holdUntil(now, until time.Time, maxPause time.Duration) time.Time {
	return now.Add(policy.ServerWait{MaxHold: maxPause}.Hold(until.Sub(now)))
}
