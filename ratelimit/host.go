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
// the only places the state changes, each under the host's lock. The
// concepts they combine live beside it: a quota's state (quotastate.go),
// the pause rule (pause.go), the rate learned from 429s (throttle.go)
// and the pace kept at it (pacer.go).

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
	// heldTo is the latest reset of a spent quota of a second or two
	// that held requests: like a pause's end, it releases them in a
	// spread (see releaseSlot).
	heldTo time.Time
	// placed counts the requests asleep in their places in a reset's
	// spread: counted among waiters, they are not held by the next one.
	placed int
	// maxPause is Options.MaxPause: the longest a pause or a spent
	// quota's reset holds the host (or the quota's routes) at once.
	maxPause time.Duration
	// held counts the responses that asked for the pause in force: the
	// requests likely to come back when it ends.
	held int
	// late counts the requests told to wait for the pause in force at
	// or after firstEnd, the end of the wait its first response asked
	// for: the retries of the responses counted in held, come back
	// before a later response's pause ended (see releaseSlot).
	late     int
	firstEnd time.Time
	release  spread
	thr      throttle
	// refusedSent is when the latest request refused by a 429 with
	// Retry-After was let through; excess is when the host last accepted
	// a request let through after it (see excessOnly); cutsInRow counts
	// such 429s taken as the excess since the last success.
	refusedSent, excess time.Time
	cutsInRow           int
	// countsRefusals is when the host showed that it counts the
	// requests it refuses (see settle): each 429 then pauses it.
	countsRefusals time.Time
	bare           barePause
	// out is how many requests sent before the host had state were
	// still out at outAt, the last answer to one (see unknown).
	out    int
	outAt  time.Time
	client *rate.Limiter // Options.Rate; nil when off
	news   chan struct{} // closed by the next response; nil when nobody waits
	// outNews is closed by the next response or by a request sent
	// before the host had state that got none: what the requests
	// waiting for those requests' answers wait for (see unknown).
	outNews chan struct{}
	// respaced is closed when the pace restarts at a higher rate: the
	// requests asleep in its old slots take new ones. nil when nobody
	// waits.
	respaced chan struct{}
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
	// out is set when the news awaited is only the answers of requests
	// sent before the host had state (see unknown), until until.
	out bool
	// wake ends a wait of the Tracker's own making early: ask again.
	wake chan struct{}
}

// admission is what one request has been through so far in admit.
type admission struct {
	paced    bool     // has its slot at the learned rate
	epoch    uint32   // of the schedule its slot is in
	released bool     // has its place in a release spread, or needs none
	waited   bool     // has waited for a pause
	giveUp   bool     // has waited for news of a new window once
	outDone  bool     // has given up waiting for the answers of requests sent before the host had state
	counted  bool     // is counted in hostState.waiters (see waiter.counted)
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
	placed := res.placed
	if placed {
		res.placed = false // awake: its place has come (or is let go)
		h.placed--
	}
	set := h.counting(res.route)
	// Wait for the latest of the pause and the resets of the exhausted
	// quotas that count the request, all at once, so that a wait that
	// cannot end in time is refused before any of it is spent.
	var until, asked, reset time.Time
	paused := now.Before(h.pause)
	await, awaitOut := false, false
	for i := range h.quotas[:h.nq] {
		if set&(1<<i) == 0 {
			continue
		}
		q := &h.quotas[i]
		if !q.reset.IsZero() && !now.Before(q.reset) {
			q.roll(now)
		}
		if res.counted&(1<<i) != 0 && res.gens[i] == q.gen {
			continue // its unit of this window is taken, with its place in a reset's spread
		}
		if !q.spent(reserve) {
			if reserve >= 0 && !a.outDone && q.spent(reserve+h.unknownOut(now)) {
				// The quota is spent if the requests sent before the host
				// had state, still out, take their units: wait for their
				// answers, which tell.
				awaitOut = true
			}
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
			if end.Equal(q.reset) && q.short() {
				// A window of a second or two: a spread releases the
				// requests it held (see releaseSlot), and what the host
				// accepts until then measures nothing of its rate (see
				// throttle.lastSecond). (A longer window leaves the rest
				// of the host to measure.)
				reset = later(reset, end)
				h.thr.resumed = later(h.thr.resumed, end)
			}
			until, asked = later(until, end), later(asked, q.reset)
			continue
		}
		if q.awaiting && q.sentSinceRoll > 0 && !a.giveUp {
			await = true
		}
	}
	if paused && !h.pause.Before(until) {
		if !a.waited && !now.Before(h.firstEnd) {
			h.late++
		}
		a.waited = true
		return verdict{until: h.pause, asked: later(asked, h.cause.asked), cause: h.cause, reason: ReasonRetryAfter}
	}
	if !until.IsZero() {
		a.waited = a.waited || paused
		if paused {
			asked = later(asked, h.cause.asked)
		}
		if until.Equal(reset) {
			h.heldTo = later(h.heldTo, reset)
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
	if awaitOut {
		// Only the answers of the requests still out are awaited: at
		// most awaitNewsMax after the last one came.
		if h.outNews == nil {
			h.outNews = make(chan struct{})
		}
		return verdict{reason: ReasonAwaitQuota, news: h.outNews, until: h.outAt.Add(awaitNewsMax), out: true}
	}
	// A measured rate releases the requests a pause held by itself.
	if !a.released && !(h.thr.on(now) && h.thr.measured()) {
		a.released = true
		slot, ok := h.releaseSlot(now, set, a.waited, a.counted)
		if ok && slot.After(now) {
			res.releasedAt = slot
			if h.release.reset {
				// A place in a reset's spread is a unit of the window:
				// taken now, so that a request past the window's count
				// is held to the next reset, not let go at the spread's
				// end in a burst.
				h.take(res, set)
				res.placed = true
				h.placed++
				if h.thr.on(now) {
					h.thr.pace.next = later(h.thr.pace.next, h.release.next) // the pace goes on after the places
				}
			}
			return verdict{until: slot, reason: ReasonReleaseRate, own: true}
		}
		if !ok && h.nq == 0 && h.spreading(now) && h.excessOnly(now) && !h.thr.on(now) {
			// The spread's places are all taken and it still runs: this
			// request comes on top of the requests the pause held (the
			// next one of a client whose released request succeeded).
			// Rather than go at once, on top of the spread, it starts a
			// blind guess, from the rate the spread releases at, that
			// grows with its successes (see guessFrom): the host has
			// shown that it refuses only the excess. A host that
			// reports a quota is paced from what it reports instead.
			h.thr.guessFrom(now, h.releaseRate(set))
		}
	}
	if h.thr.on(now) && (!placed || h.thr.pace.late(res.releasedAt, now)) && (!a.paced || a.epoch != h.thr.pace.epoch || h.thr.pace.late(res.pacedAt, now)) {
		// (A request from its place in a reset's spread, unless woken
		// late, goes at the quota's pace already: see observe.)
		// A slot taken before a pause is void, and so is one woken up
		// late (a stalled process): take another on the schedule rather
		// than go in a burst with the other late ones.
		a.paced, a.epoch = true, h.thr.pace.epoch
		slot := h.thr.pace.reserve(now)
		res.pacedAt = slot
		if slot.After(now) {
			if h.respaced == nil {
				h.respaced = make(chan struct{})
			}
			return verdict{until: slot, reason: ReasonThrottle, own: true, wake: h.respaced}
		}
	}
	h.take(res, set)
	return verdict{}
}

// take counts res against each quota in set, for a request that goes:
// a unit of each that counts requests and has one left, unless it has
// taken one of the same window already (with its place in a reset's
// spread). h.mu is held.
func (h *hostState) take(res *Reservation, set quotaSet) {
	for i := range h.quotas[:h.nq] {
		if set&(1<<i) == 0 {
			continue
		}
		q := &h.quotas[i]
		if res.counted&(1<<i) != 0 && res.gens[i] == q.gen {
			continue
		}
		if q.remaining > 0 && !q.tokens() {
			q.remaining--
			q.sent++
			res.counted |= 1 << i
			res.gens[i] = q.gen
		}
		if q.awaiting {
			q.sentSinceRoll++
		}
	}
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
		q.sent = max(q.sent-1, 0)
		if q.awaiting && q.sentSinceRoll > 0 {
			q.sentSinceRoll--
		}
	}
	if !res.pacedAt.IsZero() {
		h.thr.pace.cancel(res.pacedAt)
	}
	if res.placed {
		res.placed = false
		h.placed--
	}
	if !res.releasedAt.IsZero() && h.release.next.Equal(res.releasedAt.Add(h.release.interval)) {
		h.release.next = res.releasedAt
	}
}

// settle records what a response of route said: its quotas, and the
// verdict v (with the pause's end) that ResponseVerdict gave. sent is when
// its request was let through. out, for an answer to a request sent
// before the host had state, is where those still out are counted (see
// unknown): counted back and read under the same lock as the quotas
// this answer tells.
func (h *hostState) settle(now, sent time.Time, route string, qs []Quota, status int, v Verdict, until time.Time, out stillOut) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if out.b != nil {
		out.b.back(out.slot)
		h.setOut(now, out.b.outstanding(out.slot))
	}
	h.observe(now, sent, route, qs, status < 400)
	if status == http.StatusTooManyRequests && v == VerdictNone && h.refilling(route) {
		// A quota that refills by itself explains the 429 but holds
		// nothing (see quotaState.refills): the 429 slows the pace. The
		// requests let through until the spent quota's reset (a second
		// at most) meet the same excess: their 429s cut no further.
		if h.thr.tooMany(now, sent, false) {
			// At least the requests let through within a quarter
			// second: a reset read to the millisecond can be that near,
			// and the requests paced behind the refused one meet the
			// same excess on either side of it.
			end := now.Add(throttlePause)
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
				switch {
				case h.thr.on(now) && (h.thr.refusedAtRate(now) || !sent.Before(h.thr.cut) && !sent.Before(h.thr.quiet) && h.thr.heldNear(now)):
					// What the host accepted since an earlier 429, or
					// over the last second when the cap was about that,
					// measures its rate: the cap holds under it, and
					// the requests let through within the Retry-After
					// (a second at most) meet the excess this 429
					// answered: their 429s cut no further.
					h.thr.quiet = later(h.thr.quiet, now.Add(min(until.Sub(now), maxOwnWait)))
					h.cutsInRow++
				case h.thr.tooMany(now, sent, false):
					if m, ok := h.thr.lastSecond(now); ok && was > 0 && was <= throttleNear*m {
						// The cap was about what the host accepts: the
						// requests let through within the Retry-After (a
						// second at most) meet the excess this 429
						// answered, and their 429s cut no further.
						h.thr.quiet = now.Add(min(until.Sub(now), maxOwnWait))
					}
					h.cutsInRow++
				}
				if h.thr.on(now) {
					h.thr.skip(now) // the bucket it found full drains a little
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
			// Such a limiter counts the requests it refuses: a pace
			// above its rate, refused, would keep its window full.
			// What it accepted before its first 429 is its rate.
			h.bare.wait = min(2*h.bare.wait, maxOwnWait)
			end := now.Add(h.bare.wait)
			if h.countsRefusals.IsZero() && h.thr.holdBurst(now) {
				// Its window counts a second: it holds the first
				// burst's refusals until a second after they began.
				// A refusal after that pauses a quarter second again.
				end = later(now.Add(throttlePause), h.bare.from.Add(burstSpan))
				h.bare.wait = throttlePause / 2
			}
			h.setPause(now, end, status, false)
			h.bare.end = h.pause
			h.countsRefusals = now
			h.held++
			break
		}
		// A request sent at a learned rate (a guess too) and refused
		// probed above the host's rate: it costs the probe and a few
		// slots of the pace, not a pause. What the host accepted since
		// an earlier 429, or over the last second, holds the host (see
		// throttle.probeRefused), or, without such a measure, the cut
		// answers it. Only a 429 with nothing learned yet, or from a
		// limiter that counts its refusals, pauses the host.
		if h.thr.on(now) && h.countsRefusals.IsZero() {
			h.thr.probeRefused(now, sent)
			break
		}
		if h.thr.tooMany(now, sent, false) {
			h.setPause(now, now.Add(throttlePause), status, false)
			h.bare = barePause{end: h.pause, wait: throttlePause, from: now}
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
			if h.thr.pace.respaced {
				h.thr.pace.respaced = false
				if h.respaced != nil {
					close(h.respaced)
					h.respaced = nil
				}
			}
		}
	}
	h.wake()
}

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
				counted := !p.refills
				p.refills = true
				h.thr.adopt(now, float64(p.limit)/w.Seconds()*throttleBelow)
				switch {
				case h.release.reset && now.Before(h.release.end):
					// A reset's spread gives the window's places at its
					// pace: the pace goes on after them.
					h.thr.pace.next = later(h.thr.pace.next, h.release.next)
				case counted && now.Before(p.reset):
					// Until now the window was counted: the requests let
					// through in it are slots of the pace, and the first
					// paced request comes after them (and after the one
					// answered now), not on top of a window spent at its
					// start (a fixed window's).
					h.thr.pace.taken(p.reset.Add(-w), p.sent, now)
				}
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

// firstBurst records n, the successes the host had in the second
// before it had state: what it accepted before anything was known.
func (h *hostState) firstBurst(n int) {
	if n <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.thr.burst += n
}

// unknown counts back a request sent before the host had state that got
// no answer, and records how many such requests are still out, as settle
// does at an answer to one: the host's quotas did not count them, and
// their answers will. Until they come (awaitNewsMax at most after the
// last one), a quota that would be spent if they took their units holds
// the host's requests for news (see admit), so that the requests sent
// after the first answer of a burst do not spend what the rest of it
// took.
func (h *hostState) unknown(now time.Time, out stillOut) {
	h.mu.Lock()
	defer h.mu.Unlock()
	out.b.back(out.slot)
	h.setOut(now, out.b.outstanding(out.slot))
	if h.outNews != nil { // a request waiting for the answers may go
		close(h.outNews)
		h.outNews = nil
	}
}

// setOut records n as the requests sent before the host had state that
// are still out, at now. n is read under h.mu, so that answers told one
// after the other tell counts in the same order. h.mu is held.
func (h *hostState) setOut(now time.Time, n int) {
	h.out, h.outAt = n, now
}

// unknownOut returns how many requests sent before the host had state
// are still out, as far as is known at now. h.mu is held.
func (h *hostState) unknownOut(now time.Time) int {
	if h.out == 0 || now.Sub(h.outAt) > awaitNewsMax {
		return 0
	}
	return h.out
}

// wake wakes the requests waiting for news. h.mu is held.
func (h *hostState) wake() {
	if h.news != nil {
		close(h.news)
		h.news = nil
	}
	if h.outNews != nil {
		close(h.outNews)
		h.outNews = nil
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
	if now.Before(h.pause) || now.Before(h.release.end) || h.news != nil || h.outNews != nil || h.thr.on(now) {
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
