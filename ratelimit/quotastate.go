package ratelimit

import (
	"strings"
	"time"
)

// This file holds one quota's state: what the responses told of its
// window (update), the next window (roll), and when a spent quota holds
// its requests (holdEnd) or lets one go first to find out whether it
// refills (probeAt).

// quotaState is one quota of a host, counted down between responses.
type quotaState struct {
	resource, policy string
	family           Family
	limit            int // Unknown when not known
	remaining        int // counted down as requests go; Unknown when not known
	reset            time.Time
	window           time.Duration
	// gen changes whenever a new window starts, so that a cancelled
	// reservation gives its unit back only to the window it took it from.
	gen uint32
	// sent counts the units the Tracker has let requests take since the
	// window began (or since the state first knew it).
	sent int
	// awaiting is set when a window ended with no known next reset;
	// sentSinceRoll counts the requests let through since.
	awaiting      bool
	sentSinceRoll int
	// guessed is set when reset was rolled forward a window from the
	// last one, not read from a server: a server's sooner reset then
	// replaces it.
	guessed bool
	used    int64
	// said is the Remaining the last response told, at saidAt, of a
	// window that resets at saidReset; refills is set once a later
	// response told more before then (see update).
	said              int
	saidAt, saidReset time.Time
	refills           bool
	// probe is set while one request goes before the reset of a spent
	// quota whose rate is known, to find out whether it refills; refused
	// counts such probes refused in a row.
	probe   bool
	refused int
	// span is the furthest ahead a reset was said to be, and spanFrom
	// when the first reset was said: see rateWindow.
	span     time.Duration
	spanFrom time.Time
	// holdFrom is when the hold of a reset further than maxPause began:
	// the quota holds its routes until holdFrom+maxPause, then lets one
	// request go to ask again.
	holdFrom time.Time
}

// probeAt returns when a request may go before the reset of q, spent,
// to find out whether it refills, and false when none is to go: only
// while the window the last response told of is still running, the
// quota's rate is known (limit a window of a second or less: a longer
// window is held to its reset, exactly) or the host refuses only the
// excess (excess) and the reset is a second or two away, and fewer than
// probeRefusals probes in a row were refused. One goes an interval of
// that rate after the last response; while it is out, the others look
// again an interval later. A probe accepted shows the quota refills.
func (q *quotaState) probeAt(now time.Time, excess bool) (time.Time, bool) {
	w := q.rateWindow(now)
	if w == 0 && excess && q.saidReset.Sub(q.saidAt) <= 2*time.Second {
		// No window said, a reset a second or two away, on a host that
		// refuses only the excess: a quota a second, counted as a
		// sliding window or a bucket most likely.
		w = time.Second
	}
	if q.refused >= probeRefusals || q.limit <= 0 || w <= 0 || w > maxOwnWait || q.tokens() ||
		!now.Before(q.reset) || !now.Before(q.saidReset) {
		return time.Time{}, false
	}
	iv := w / time.Duration(q.limit)
	at := q.saidAt.Add(iv)
	if q.probe {
		at = later(at, now.Add(iv))
	}
	return at, true
}

// rateWindow returns the quota's window: the one the server said, or,
// when it said none, a second or two guessed from its resets, and zero
// when neither is known. A reset said always at most a second or two
// ahead, for longer than that, is a window that short: a longer window
// would have said a reset further ahead when it moved on.
// (go-chi/httprate sends the next second's start, and no window.)
func (q *quotaState) rateWindow(now time.Time) time.Duration {
	if q.window > 0 || q.span <= 0 || q.span > maxGuessedWindow || now.Sub(q.spanFrom) <= max(q.span, time.Second) {
		return q.window
	}
	return max(q.span.Round(time.Second), time.Second)
}

// windowGuess returns the quota's window when it is said, else, when
// every reset said was at most a second or two ahead, that long, even
// before rateWindow would believe it: for a spread of a second at most,
// a wrong guess costs little. Zero when neither.
func (q *quotaState) windowGuess() time.Duration {
	if q.window > 0 || q.span <= 0 || q.span > maxGuessedWindow {
		return q.window
	}
	return max(q.span.Round(time.Second), time.Second)
}

// short reports whether the quota's window (see windowGuess) is a
// second or two: what a reset's spread releases (see resetSpread).
func (q *quotaState) short() bool {
	w := q.windowGuess()
	return w > 0 && w <= maxGuessedWindow
}

// maxGuessedWindow is the longest window rateWindow guesses from resets.
const maxGuessedWindow = 2 * time.Second

// probeRefusals is how many probes in a row a quota refuses before it
// is taken for a fixed window, spent until its reset.
const probeRefusals = 3

// holdEnd returns until when q, spent, holds the requests it counts at
// now: its reset, or when that is more than max away, the end of a hold
// of max. It returns the zero time when such a hold is over: the request
// then goes to ask the server, and, with probe, a new hold starts now.
func (q *quotaState) holdEnd(now time.Time, max time.Duration, probe bool) time.Time {
	if !q.reset.After(holdUntil(now, q.reset, max)) {
		return q.reset
	}
	if q.holdFrom.IsZero() || q.holdFrom.After(now) {
		q.holdFrom = now
	}
	if end := q.holdFrom.Add(max); now.Before(end) {
		return end
	}
	if probe {
		q.holdFrom = now
	}
	return time.Time{}
}

// named reports whether the quota names its resource (GitHub's
// X-RateLimit-Resource, an IETF policy name): it counts only the routes
// whose responses named it.
func (q *quotaState) named() bool { return fleetName(q.resource, q.policy, q.family) != "" }

// spent reports whether the quota holds the requests it counts, as far as
// its count goes: at or below reserve (never, with reserve < 0); a
// tokens quota only at zero, since its count is not counted down here.
func (q *quotaState) spent(reserve int) bool {
	if reserve < 0 || q.remaining == Unknown || q.refills {
		return false
	}
	return q.remaining <= reserve && !(q.tokens() && q.remaining > 0)
}

// tokens reports whether the quota counts tokens rather than requests:
// the Tracker cannot count those down, only obey them.
func (q *quotaState) tokens() bool { return strings.HasSuffix(q.policy, "tokens") }

// roll starts the quota's next window once its reset has passed:
// Remaining is whole again. The next reset is one Window later when the
// window is known; otherwise it is unknown until a response says.
func (q *quotaState) roll(now time.Time) {
	q.remaining = q.limit
	q.gen++
	q.sent = 0
	q.holdFrom = time.Time{}
	q.probe = false
	if q.window > 0 {
		n := now.Sub(q.reset)/q.window + 1
		q.reset = q.reset.Add(n * q.window)
		q.guessed = true
		return
	}
	q.reset = time.Time{}
	q.awaiting, q.sentSinceRoll = true, 0
}

// update merges a quota read from a response into the state; sent is
// when the response's request was let through (zero when not known).
func (q *quotaState) update(r Quota, now, sent time.Time, accepted bool) {
	if r.Remaining != Unknown && !r.Reset.IsZero() {
		// A request let through after a response said n were left,
		// told of more (or accepted when none were left) before that
		// window's reset: the quota refills by itself (a token
		// bucket, GCRA, a sliding window), and is not one that is
		// spent until its reset.
		if !q.saidAt.IsZero() && sent.After(q.saidAt) && sent.Before(q.saidReset) &&
			(r.Remaining > q.said || accepted && q.said == 0) {
			q.refills = true
		}
		switch {
		case q.probe && !accepted:
			q.refused++ // enough of them, and it is spent until its reset
		case q.probe:
			q.refused, q.refills = 0, true // accepted before the reset of a spent quota
		}
		q.probe = false
		q.said, q.saidAt, q.saidReset = r.Remaining, now, r.Reset
		if !r.Reset.After(now) && q.reset.After(now) && q.reset.Sub(r.Reset) <= sameWindow {
			// A reset in whole seconds at the Date's own second ends
			// within this second: the state's reckoning of the window
			// still runs (go-chi/httprate's reset rounds down).
			q.saidReset = q.reset
		}
		if q.spanFrom.IsZero() {
			q.spanFrom = now
		}
		q.span = max(q.span, r.Reset.Sub(now))
	}
	if r.Limit != Unknown {
		q.limit = r.Limit
	}
	if r.Window > 0 {
		q.window = r.Window
	}
	q.family = r.Family
	if r.Remaining == Unknown || !r.Reset.IsZero() && !r.Reset.After(now) {
		return // nothing to count, or the window it describes is over: its Remaining is stale
	}
	if !q.reset.IsZero() && !now.Before(q.reset) {
		// The window the state counts is over, though no request has
		// come since to roll it: the response is news of a later one.
		q.roll(now)
	}
	switch {
	case q.reset.IsZero():
		// The first news of this window (or of this quota). After a
		// roll, the requests let through since count too.
		if q.awaiting {
			q.remaining = minKnown(q.remaining, r.Remaining)
		} else {
			q.remaining = r.Remaining
		}
		q.reset = r.Reset
		if !r.Reset.IsZero() {
			q.awaiting = false
		}
	case r.Reset.Sub(q.reset) > sameWindow:
		// The server has moved to another window.
		q.reset, q.remaining = r.Reset, r.Remaining
		q.gen++
		q.sent = 0
		q.holdFrom = time.Time{}
	case q.guessed && !r.Reset.IsZero() && q.reset.Sub(r.Reset) > sameWindow:
		// The server's window ends sooner than the state reckoned when
		// it rolled the reset forward a Window: the server's reset is
		// the one to wait for. (A server's own sooner reset is a
		// response that left before the last one, and changes nothing.)
		q.reset = r.Reset
		q.remaining = minKnown(q.remaining, r.Remaining)
	default:
		// The same window: what the server saw and what has gone since.
		q.remaining = minKnown(q.remaining, r.Remaining)
		if r.Reset.After(q.reset) {
			q.reset = r.Reset
		}
	}
	if !r.Reset.IsZero() {
		q.guessed = false // the state's reset is a server's word now
	}
}

func minKnown(a, b int) int {
	if a == Unknown {
		return b
	}
	return min(a, b)
}

// sameWindow is how far apart two resets may be and still be taken for
// the same window: servers that send delta seconds round them, so one
// window's reset moves by up to a second from response to response.
const sameWindow = time.Second
