package ratelimit

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// This file holds a host's quota state and every change made to it:
// admit (a request asks to go), settle (its response arrives), cancel (it
// never reached the server), pause (the server asks for one). They are
// the only places the state changes, each under the host's lock.

// hostState is the quota state of one host (or one Options.Key).
type hostState struct {
	waiters atomic.Int32

	mu     sync.Mutex
	quotas [maxQuotas]quotaState
	nq     int
	routes [maxRoutes]route
	nr     int
	common quotaSet // the quotas every known route is counted against
	tick   int64    // counts updates, to find the least recently updated

	pause time.Time  // end of the pause in force (server-asked, or after a bare 429)
	cause pauseCause // what asked for it
	// maxPause is Options.MaxPause: the longest a pause or a spent
	// quota's reset holds the host (or the quota's routes) at once.
	maxPause time.Duration
	// held counts the responses that asked for the pause in force: the
	// requests likely to come back when it ends.
	held    int
	release spread
	thr     throttle
	// refusedSent is when the latest request refused by a 429 with
	// Retry-After was let through; excess is when the host last accepted
	// a request let through after it (see excessOnly); cutsInRow counts
	// such 429s taken as the excess since the last success.
	refusedSent, excess time.Time
	cutsInRow           int
	bare                barePause
	client              *rate.Limiter // Options.Rate; nil when off
	news                chan struct{} // closed by the next response; nil when nobody waits
}

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

// maxGuessedWindow is the longest window rateWindow guesses from resets.
const maxGuessedWindow = 2 * time.Second

// probeRefusals is how many probes in a row a quota refuses before it
// is taken for a fixed window, spent until its reset.
const probeRefusals = 3

// pauseCause is what asked for a host's pause, for the error of a
// request it refuses.
type pauseCause struct {
	status     int           // the response's status; 0 for Tracker.Pause
	retryAfter time.Duration // what its Retry-After asked; 0 when it named no wait
	asked      time.Time     // the end the server asked for, when later than the pause's
}

// holdEnd returns until when q, spent, holds the requests it counts at
// now: its reset, or when that is more than max away, the end of a hold
// of max. It returns the zero time when such a hold is over: the request
// then goes to ask the server, and, with probe, a new hold starts now.
func (q *quotaState) holdEnd(now time.Time, max time.Duration, probe bool) time.Time {
	if q.reset.Sub(now) <= max {
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

// spread releases the requests held by a pause gradually: at most one per
// interval from the pause's end, never later than end, which is fixed
// when the pause ends. Requests that come after end go at once.
type spread struct {
	of       time.Time // the end of the pause it releases
	end      time.Time
	next     time.Time
	interval time.Duration
}

// verdict is what the state of a host says to one request.
type verdict struct {
	until time.Time // wait until then, unless zero
	// asked is when the server's own word (a Retry-After, a reset) ends
	// the wait, when MaxPause made until sooner: a request whose budget
	// ends before it fails at once.
	asked  time.Time
	cause  pauseCause    // ReasonRetryAfter: what asked for the pause
	reason string        // why; "" means go
	own    bool          // a wait of the Tracker's own making (spread, pace)
	news   chan struct{} // ReasonAwaitQuota: wait for this to close
}

// admission is what one request has been through so far in admit.
type admission struct {
	paced    bool     // has its slot at the learned rate
	epoch    uint32   // of the schedule its slot is in
	released bool     // has its place in a release spread, or needs none
	waited   bool     // has waited for a pause
	giveUp   bool     // has waited for news of a new window once
	probes   quotaSet // the spent quotas it goes before the reset of, as a probe
}

func newHostState(o *Options) *hostState {
	h := &hostState{maxPause: o.maxPause()}
	if o.Rate > 0 {
		h.client = rate.NewLimiter(o.Rate, o.burst())
	}
	return h
}

// admit applies the host's state to a request at now: it lets the
// request go (and counts it in res) or says how long to wait.
func (h *hostState) admit(now time.Time, res *Reservation, a *admission, reserve int) verdict {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.counting(res.route)
	// Wait for the latest of the pause and the resets of the exhausted
	// quotas that count the request, all at once, so that a wait that
	// cannot end in time is refused before any of it is spent.
	var until, asked time.Time
	paused := now.Before(h.pause)
	await := false
	for i := range h.quotas[:h.nq] {
		if set&(1<<i) == 0 {
			continue
		}
		q := &h.quotas[i]
		if !q.reset.IsZero() && !now.Before(q.reset) {
			q.roll(now)
		}
		if !q.spent(reserve) {
			continue
		}
		probeAt, probing := q.probeAt(now, h.excessOnly(now))
		if a.probes&(1<<i) != 0 || probing && !q.probe && !now.Before(probeAt) {
			q.probe = true
			a.probes |= 1 << i
			continue // it goes to find out whether the quota refills
		}
		if !q.reset.IsZero() {
			end := q.holdEnd(now, h.maxPause, true)
			if end.IsZero() {
				continue // a capped hold is over: this request asks again
			}
			if probing && probeAt.Before(end) {
				end = probeAt
			}
			until, asked = later(until, end), later(asked, q.reset)
			continue
		}
		if q.awaiting && q.sentSinceRoll > 0 && !a.giveUp {
			await = true
		}
	}
	if paused && !h.pause.Before(until) {
		a.waited = true
		return verdict{until: h.pause, asked: later(asked, h.cause.asked), cause: h.cause, reason: ReasonRetryAfter}
	}
	if !until.IsZero() {
		a.waited = a.waited || paused
		if paused {
			asked = later(asked, h.cause.asked)
		}
		return verdict{until: until, asked: asked, reason: ReasonQuota}
	}
	// News of a new window is awaited only when nothing else holds the
	// request: a wait that cannot end in time is refused before any of
	// it is spent.
	if await {
		if h.news == nil {
			h.news = make(chan struct{})
		}
		return verdict{reason: ReasonAwaitQuota, news: h.news}
	}
	// A measured rate releases the requests a pause held by itself.
	if !a.released && !(h.thr.on(now) && h.thr.measured()) {
		a.released = true
		if slot, ok := h.releaseSlot(now, set, a.waited); ok && slot.After(now) {
			res.releasedAt = slot
			return verdict{until: slot, reason: ReasonReleaseRate, own: true}
		}
	}
	if h.thr.on(now) && (!a.paced || a.epoch != h.thr.pace.epoch || h.thr.pace.late(res.pacedAt, now)) {
		// A slot taken before a pause is void, and so is one woken up
		// late (a stalled process): take another on the schedule rather
		// than go in a burst with the other late ones.
		a.paced, a.epoch = true, h.thr.pace.epoch
		slot := h.thr.pace.reserve(now)
		res.pacedAt = slot
		if slot.After(now) {
			return verdict{until: slot, reason: ReasonThrottle, own: true}
		}
	}
	for i := range h.quotas[:h.nq] {
		if set&(1<<i) == 0 {
			continue
		}
		q := &h.quotas[i]
		if q.remaining > 0 && !q.tokens() {
			q.remaining--
			res.counted |= 1 << i
			res.gens[i] = q.gen
		}
		if q.awaiting {
			q.sentSinceRoll++
		}
	}
	return verdict{}
}

// refilling reports whether a quota that counts route refills by itself.
// h.mu is held.
func (h *hostState) refilling(route string) bool {
	set := h.counting(route)
	for i := range h.quotas[:h.nq] {
		if set&(1<<i) != 0 && h.quotas[i].refills {
			return true
		}
	}
	return false
}

// heldUntil returns until when the host's pause and its spent quotas
// that count route would hold a request that came at at, and why: the
// zero time when nothing would. It changes nothing.
func (h *hostState) heldUntil(at time.Time, route string, reserve int) verdict {
	h.mu.Lock()
	defer h.mu.Unlock()
	var v verdict
	if at.Before(h.pause) {
		v = verdict{until: h.pause, asked: h.cause.asked, cause: h.cause, reason: ReasonRetryAfter}
	}
	set := h.counting(route)
	for i := range h.quotas[:h.nq] {
		q := &h.quotas[i]
		if set&(1<<i) == 0 || !q.spent(reserve) || q.reset.IsZero() || !at.Before(q.reset) {
			continue
		}
		held := *q // holdEnd may start a hold: ask a copy
		end := held.holdEnd(at, h.maxPause, false)
		if end.IsZero() {
			continue
		}
		if end.After(v.until) {
			v.until, v.reason, v.cause = end, ReasonQuota, pauseCause{}
		}
		v.asked = later(v.asked, q.reset)
	}
	return v
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// releaseSlot returns the time a request may go in the spread that
// follows the last pause, and false when there is no spread to join.
func (h *hostState) releaseSlot(now time.Time, set quotaSet, waited bool) (time.Time, bool) {
	if h.pause.IsZero() {
		return time.Time{}, false
	}
	if !h.release.of.Equal(h.pause) {
		if !waited && now.Sub(h.pause) > maxOwnWait {
			return time.Time{}, false // a pause long over: nothing to spread
		}
		// The pause has just ended: fix the spread once, sized for the
		// requests it held.
		// The sleepers, and the requests told to pause or the one
		// asking: these are often one, the retry of a request told to
		// pause, which would otherwise be counted twice and make the
		// next request wait a slot for nobody.
		n := int(h.waiters.Load()) + max(h.held, 1)
		d := time.Duration(float64(n) / h.releaseRate(set) * float64(time.Second))
		d = min(d, maxOwnWait)
		h.release = spread{of: h.pause, end: h.pause.Add(d), next: h.pause, interval: d / time.Duration(n)}
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

// releaseRate is the rate at which requests held by a pause are let go:
// the learned rate, else the quota's own rate when known, else
// DefaultReleaseRate.
func (h *hostState) releaseRate(set quotaSet) float64 {
	if h.thr.rate > 0 {
		return h.thr.rate
	}
	best := -1.0
	for i := range h.quotas[:h.nq] {
		q := &h.quotas[i]
		if set&(1<<i) != 0 && q.limit > 0 && q.window > 0 && !q.tokens() {
			if r := float64(q.limit) / q.window.Seconds(); best < 0 || r < best {
				best = r
			}
		}
	}
	if best > 0 {
		return best
	}
	return float64(DefaultReleaseRate)
}

// cancel gives back what res took: its unit of each quota (when the
// window is still the one it was taken from), its slot at the learned
// rate and in a release spread.
func (h *hostState) cancel(res *Reservation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.quotas[:h.nq] {
		q := &h.quotas[i]
		if res.counted&(1<<i) == 0 || q.gen != res.gens[i] {
			continue
		}
		if q.remaining != Unknown && (q.limit == Unknown || q.remaining < q.limit) {
			q.remaining++
		}
		if q.awaiting && q.sentSinceRoll > 0 {
			q.sentSinceRoll--
		}
	}
	if !res.pacedAt.IsZero() {
		h.thr.pace.cancel(res.pacedAt)
	}
	if !res.releasedAt.IsZero() && h.release.next.Equal(res.releasedAt.Add(h.release.interval)) {
		h.release.next = res.releasedAt
	}
}

// settle records what a response of route said: its quotas, and the
// verdict v (with the pause's end) that ResponseVerdict gave. sent is when
// its request was let through. It reports whether anyone waited for news.
func (h *hostState) settle(now, sent time.Time, route string, qs []Quota, status int, v Verdict, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.observe(now, sent, route, qs, status < 400)
	if status == http.StatusTooManyRequests && v == VerdictNone && h.refilling(route) {
		// A quota that refills by itself explains the 429 but holds
		// nothing (see quotaState.refills): the 429 slows the pace. The
		// requests let through until the spent quota's reset (a second
		// at most) meet the same excess: their 429s cut no further.
		if h.thr.tooMany(now, sent, false) {
			end := now
			for _, q := range qs {
				if q.Remaining == 0 && q.Reset.After(end) {
					end = q.Reset
				}
			}
			if capped := now.Add(maxOwnWait); end.After(capped) {
				end = capped
			}
			h.thr.quiet = later(h.thr.quiet, end)
		}
	}
	switch v {
	case VerdictPause:
		if status == http.StatusTooManyRequests {
			// A request sent before the host had state went before
			// its 429 came back, at the latest.
			h.refusedSent = later(h.refusedSent, later(sent, now))
			if h.excessOnly(now) || h.thr.measured() && h.refilling(route) {
				// The host refuses only the excess (or the client paces
				// below the rate of a quota that refills): the request
				// that got the 429 waits its Retry-After (Retry does),
				// and the others go on at a slower pace, unless a second
				// such 429 in a row says the host means it.
				was := h.thr.rate
				if h.thr.tooMany(now, sent, false) {
					if m, ok := h.thr.lastSecond(now); ok && was <= throttleNear*m {
						// The cap was about what the host accepts: the
						// requests let through within the Retry-After (a
						// second at most) meet the excess this 429
						// answered, and their 429s cut no further.
						h.thr.quiet = now.Add(min(until.Sub(now), maxOwnWait))
					}
					h.cutsInRow++
				}
				if h.cutsInRow < excessCutsInRow {
					break
				}
				h.excess = time.Time{}
			}
			// Pause as asked, and learn the pace the server keeps, so
			// that the pause ends at that pace rather than in a burst.
			h.thr.tooMany(now, sent, true)
		}
		h.setPause(now, until, status, true)
		h.held++
	case VerdictThrottle:
		if !h.bare.end.IsZero() && !sent.Before(h.bare.end) && !h.bare.ok && now.Sub(h.bare.end) < maxOwnWait {
			// Refused though let through after the last such pause, with
			// no success since: the limiter had not drained (a sliding
			// window counts what came before), not a rate too high.
			// Pause again, twice as long, and cut nothing.
			h.bare.wait = min(2*h.bare.wait, maxOwnWait)
			h.setPause(now, now.Add(h.bare.wait), status, false)
			h.bare.end = h.pause
			h.held++
			break
		}
		if h.thr.tooMany(now, sent, false) {
			h.setPause(now, now.Add(throttlePause), status, false)
			h.bare = barePause{end: h.pause, wait: throttlePause}
			h.held++
		}
	default:
		if status != http.StatusTooManyRequests && status < 500 {
			if !h.refusedSent.IsZero() && sent.After(h.refusedSent) && now.Sub(h.thr.last429) < throttleForget {
				// Accepted though let through after a request the
				// host refused with a Retry-After: the host refuses
				// the excess, not every request. A pause that 429 set
				// ends now; the pace learned from 429s holds the host.
				h.excess, h.cutsInRow = now, 0
				if now.Before(h.pause) && h.cause.status == http.StatusTooManyRequests {
					h.pause, h.thr.resumed = now, now
					h.thr.pace.restart(now)
				}
			}
			if !sent.Before(h.bare.end) {
				h.bare.ok = true
			}
			h.thr.success(now, sent)
		}
	}
	h.wake()
}

// barePause is the last pause after a 429 that named no wait.
type barePause struct {
	end  time.Time     // its end
	wait time.Duration // its length
	ok   bool          // a request let through after it succeeded
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

// observe merges the quotas of a response of route into the state. h.mu
// is held.
func (h *hostState) observe(now, sent time.Time, route string, qs []Quota, accepted bool) {
	var (
		set  quotaSet
		pace *Quota // the policy of the shortest window, whose rate the limiter adopts
	)
	for k, q := range qs {
		i := h.slot(q)
		h.quotas[i].update(q, now, sent, accepted)
		if p := &h.quotas[i]; p.limit > 0 && !p.tokens() {
			// Its own rate, limit a window, paces the host, as a rate
			// measured from 429s would: a quota that refills, or one
			// of a second or two guessed from its resets.
			if w := p.rateWindow(now); w > 0 && (p.refills || p.window == 0) {
				// A window of a second or two guessed from the resets is
				// paced at its rate, not counted to its end: the pace
				// keeps within it whether it slides or not, while a
				// count spent early (a sliding window still counting the
				// last second) would hold the host to a reset a second
				// away.
				p.refills = true
				h.thr.adopt(now, float64(p.limit)/w.Seconds()*throttleBelow)
			}
		}
		if q.Limit != Unknown && q.Window > 0 && !h.quotas[i].tokens() && (pace == nil || q.Window < pace.Window) {
			pace = &qs[k]
		}
		h.tick++
		h.quotas[i].used = h.tick
		set |= 1 << i
	}
	if h.client != nil && pace != nil {
		// The server's own rate replaces Options.Rate: that of its
		// shortest window (a per-second policy, not a daily quota, which
		// is counted as a quota).
		if r := rate.Limit(float64(pace.Limit) / pace.Window.Seconds()); h.client.Limit() != r {
			h.client.SetLimitAt(now, r)
		}
	}
	if set != 0 {
		h.learn(route, set)
	}
}

// slot returns the index of the quota that q reports, making room for it
// when it is new. h.mu is held.
func (h *hostState) slot(q Quota) int {
	for i := range h.quotas[:h.nq] {
		if p := &h.quotas[i]; p.resource == q.Resource && p.policy == q.Policy {
			return i
		}
	}
	i := h.nq
	if h.nq < maxQuotas {
		h.nq++
	} else {
		i = 0
		for j := range h.quotas[:h.nq] {
			if h.quotas[j].used < h.quotas[i].used {
				i = j
			}
		}
		h.forget(i)
	}
	h.quotas[i] = quotaState{
		resource: strings.Clone(q.Resource), policy: strings.Clone(q.Policy), family: q.Family,
		limit: Unknown, remaining: Unknown, gen: h.quotas[i].gen + 1,
	}
	return i
}

// setPause holds every request until until, or for maxPause when that
// is sooner; a pause never shortens one in force. status is that of the
// response that asked (0 for none), and asked whether its Retry-After
// did. h.mu is held.
func (h *hostState) setPause(now, until time.Time, status int, asked bool) {
	if !now.Before(h.pause) {
		h.held = 0 // a new pause
	}
	c := pauseCause{status: status}
	if asked {
		c.retryAfter = until.Sub(now)
	}
	if capped := now.Add(h.maxPause); until.After(capped) {
		c.asked, until = until, capped
	}
	if until.After(h.pause) {
		h.pause, h.cause = until, c
	} else if c.asked.After(h.cause.asked) {
		h.cause.asked = c.asked // the server asks for longer still
	}
	h.thr.pace.restart(h.pause)
	h.thr.resumed = h.pause
}

// wake wakes the requests waiting for news. h.mu is held.
func (h *hostState) wake() {
	if h.news != nil {
		close(h.news)
		h.news = nil
	}
}

// live reports whether dropping h loses anything that holds a request
// back: a waiter, a pause, a spread or a learned rate in force, an
// exhausted quota whose reset is ahead, a request waiting for news. A
// window with quota left is not worth keeping a host for: the next
// response says it again.
func (h *hostState) live(now time.Time, reserve int) bool {
	if h.waiters.Load() > 0 {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if now.Before(h.pause) || now.Before(h.release.end) || h.news != nil || h.thr.on(now) {
		return true
	}
	for i := range h.quotas[:h.nq] {
		q := &h.quotas[i]
		if q.remaining != Unknown && q.remaining <= max(reserve, 0) && now.Before(q.reset) {
			return true
		}
	}
	return false
}

// roll starts the quota's next window once its reset has passed:
// Remaining is whole again. The next reset is one Window later when the
// window is known; otherwise it is unknown until a response says.
func (q *quotaState) roll(now time.Time) {
	q.remaining = q.limit
	q.gen++
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
