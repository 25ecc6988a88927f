package ratelimit

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/internal/hosts"
)

// Tracker keeps the rate-limit quotas of each host (or each key, see
// [Options.Key]) from the responses it has seen, and holds requests back
// when a quota that counts them is spent.
//
// Each request takes a [Reservation] with [Tracker.Reserve] before it is
// sent, and settles it once: with [Reservation.Settle] and the response,
// or with [Reservation.Cancel] when it never reached the server (an open
// breaker refused it, it was invalid, the dial failed, the caller gave up
// first), which gives its unit of quota back.
//
//   - Quotas are kept per host and per quota the server names (GitHub's
//     X-RateLimit-Resource, OpenAI's and Anthropic's requests and tokens,
//     IETF policy names; see [ParseAll]). A request waits only for the
//     quotas that count it: those its route (the first segment of its
//     path) was counted against the last time the server said, or, on a
//     route the server has not named yet, those every known route of the
//     host is counted against.
//   - When such a quota has Remaining at or below [Options.Reserve] and its
//     reset is ahead, the request waits until the reset. Between
//     responses, the Tracker counts the requests it lets through against
//     the last Remaining it saw, so that many goroutines sharing a quota
//     stop at its end instead of each learning about it from a 429. When
//     a window ends and the server has not said when the next one ends,
//     requests beyond Limit wait (at most a second) for a response of the
//     new window to tell. The requests sent before the host had state
//     and not yet answered count too: a request that the quota would not
//     admit with them waits (at most a second after the last of their
//     answers) for the next answer. A quota whose reset is a second or two
//     away lets the requests it held go at its rate, the first an
//     interval after the reset, as a window that slides frees them; a
//     lone request goes at the reset.
//   - A 429 or 503 with Retry-After pauses the whole host until the time
//     the server named: every request to it, from every goroutine, waits
//     for the same moment. (Unless the response reports a named quota
//     that is spent until then, a GitHub resource or an IETF policy: that
//     quota's routes wait, as above, and the host's others go on.) The requests held are then let go at the rate
//     the host was measured to accept (below), or else spread over at
//     most a second, at the host's known rate (20 a second when unknown),
//     in a spread whose end is fixed when the pause ends; requests that
//     come later go at once. A pause lasts as long as the server asked,
//     never longer, and at most [Options.MaxPause] (a minute): a longer
//     ask, or a spent quota whose reset is further away, holds the host
//     (or the quota's routes) that long, then lets a request ask again.
//     A request whose budget ends before the server's own end fails at
//     once, with an error that says what paused the host.
//   - A host that has shown it refuses only the excess (it accepted a
//     request let through after one it refused with Retry-After, or it
//     reports a quota that refills at a rate the host is paced below) is
//     not paused by a 429's Retry-After: the request that got it waits it
//     out (transport.Retry does), and the others go on at a pace cut by
//     a tenth, until two such 429s in a row say the host means it. A
//     quota that refills by itself (its Remaining rose before its reset,
//     or a probe sent at its rate before the reset was accepted) holds
//     nothing; it paces the host at 97% of its rate when that is known.
//     So does a quota that says no window but whose reset has never been
//     more than a second or two ahead (go-chi/httprate): its window is
//     taken to be that long. See docs/rate-limits.md for the evidence and
//     the reasons.
//   - 429s teach the host's rate. The requests in flight at a 429 that
//     then succeed evenly spaced, as a limiter answers its queue
//     (nginx's limit_req), measure the rate it accepts. The host is then
//     paced at 99% of that rate (a queue delays a request sent a little
//     above it rather than refuse it), so that the limiter's burst is
//     left for jitter, for twenty seconds; then the cap grows, slowly at first,
//     to find out whether the limit was raised, and goes once it has
//     doubled (thirty seconds after the last 429). Without such a
//     measure, a 429 that gives no hint (no Retry-After, no exhausted
//     quota) caps the host at a guess that grows by 1.5 a second per
//     success while it is used, until the next 429, and each later 429
//     cuts the rate by a tenth, which then grows back toward the rate
//     the 429 refused (quickly far below it, by about 5% a second near
//     it); that cap goes after ten seconds without a 429. Two 429s at
//     least half a second apart, with no pause between and a cap never
//     below what the host accepted between them, measure its rate (a
//     limiter that refuses only the excess refuses when its bucket is
//     full): the host is then paced at 97% of it, as above. A 429 with
//     Retry-After caps the host with a guess only from the second one.
//     A 429 that gives no hint pauses the host for a quarter of a
//     second only when nothing was learned yet; a later one costs the
//     probe and four slots of the pace. A paced request woken up more
//     than three intervals late takes a new slot rather than go in a
//     burst.
//
// A wait that cannot end before the request's context deadline or
// [Options.MaxWait] (for a pause or a quota's reset, also
// [Options.MaxServerWait]) is not started: Reserve returns a [*QuotaError] at
// once. Cancelling the context ends every wait at once. Apart from the
// server's resets and Retry-After, no wait of the Tracker's own making
// (the pause after a bare 429, the release spread) lasts more than a
// second, and pacing at a learned rate costs a request at most one
// interval of that rate plus its place in the queue.
//
// A Tracker starts no goroutines. It is safe for use by multiple
// goroutines; hosts that have sent no quota headers and no 429 cost one
// lookup and two atomic adds (the count of their requests still out)
// per request, and allocate nothing.
type Tracker struct {
	o    Options
	slot *hosts.Slot[hostState]
	// made counts the states made by a response to a request sent
	// without one, so that the responses of requests sent before can
	// tell that their host has state now.
	made atomic.Uint32
	// burst counts the successes of hosts without state: the first
	// burst that a host's first 429 learns from.
	burst firstBursts
}

// NewTracker returns a Tracker with options o.
func NewTracker(o Options) *Tracker { return NewTrackerOn(o, nil) }

// NewTrackerOn is [NewTracker] keeping its per-host state in reg, the
// registry a stack built by transport.New shares among its layers, so
// that one bound and one eviction rule cover breakers, quotas and retry
// budgets alike. A nil reg (the only value a package outside this module
// can pass) gives the Tracker its own registry of [Options.MaxHosts].
func NewTrackerOn(o Options, reg *hosts.Registry) *Tracker {
	if reg == nil {
		reg = hosts.New(hosts.Options{MaxHosts: o.maxHosts()})
	}
	t := &Tracker{o: o}
	t.slot = hosts.NewSlot(reg,
		func(hosts.Key) *hostState { return newHostState(&t.o) },
		func(h *hostState, now time.Time) bool { return h.live(now, t.o.Reserve) })
	if t.slot == nil { // a registry without a free slot: use one of our own
		t.slot = hosts.NewSlot(hosts.New(hosts.Options{MaxHosts: o.maxHosts()}),
			func(hosts.Key) *hostState { return newHostState(&t.o) },
			func(h *hostState, now time.Time) bool { return h.live(now, t.o.Reserve) })
	}
	return t
}

func (t *Tracker) key(r *http.Request) hosts.Key {
	if t.o.Key != nil {
		return hosts.Custom(t.o.Key(r))
	}
	return hosts.KeyOf(r.URL)
}

// Observe records the quotas that the response headers h of request r
// report (see [ParseAll]), read at the current time, without settling any
// reservation: for responses to requests the Tracker did not let
// through, such as those of another client of the same API.
func (t *Tracker) Observe(r *http.Request, h http.Header) {
	now := time.Now()
	var buf [maxPolicies]Quota
	qs := ParseAll(h, now, buf[:0])
	if len(qs) == 0 {
		return
	}
	st := t.slot.Get(t.key(r))
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.observe(now, time.Time{}, routeOf(r), qs, false)
	st.wake()
}

// Pause holds every request to r's key until until, as a server's
// Retry-After asks: requests already waiting wait longer, and new ones
// wait too. A pause never shortens one already in force, and lasts at
// most [Options.MaxPause]. A pause more than 400 days ahead is taken for
// garbage and ignored, as ParseHeaders ignores such resets.
func (t *Tracker) Pause(r *http.Request, until time.Time) {
	now := time.Now()
	if !until.After(now) || until.Sub(now) > maxReset {
		return
	}
	st := t.slot.Get(t.key(r))
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.setPause(now, until, 0, false)
	st.wake()
}

// Quota returns the tightest quota tracked for r: of the quotas that
// count r (see [Tracker]), the last each reported, with Remaining counted
// down by the requests let through since; the tightest is chosen as
// [ParseHeaders] chooses. It reports false when no quota counts r.
func (t *Tracker) Quota(r *http.Request) (Quota, bool) {
	st := t.slot.Peek(t.key(r))
	if st == nil {
		return Quota{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	set := st.counting(routeOf(r))
	var buf [maxQuotas]Quota
	qs := buf[:0]
	for i := range st.quotas[:st.nq] {
		q := &st.quotas[i]
		if set&(1<<i) == 0 || (q.limit == Unknown && q.remaining == Unknown) {
			continue
		}
		qs = append(qs, Quota{
			Limit: q.limit, Remaining: q.remaining, Reset: q.reset, Window: q.window,
			Policy: q.policy, Resource: q.resource, Family: q.family,
		})
	}
	return tightest(qs)
}

// RefusedAt returns the error that Reserve would return at once for r
// if r came at the time at, as the host's quotas stand: the host's pause
// (a Retry-After), or a spent quota that counts r, holds it past what its
// wait may take (r's context deadline, or Options.MaxServerWait within
// Options.MaxWait after at). It
// reserves nothing, and asks no [QuotaStore]; nil when nothing known
// would refuse r then. (A pause's release spread, under a second, is not
// foreseen.) A Retry above asks it before it waits for its next attempt,
// so that it never waits only to be refused.
func (t *Tracker) RefusedAt(r *http.Request, at time.Time) error {
	return t.RefusedAtWithin(r, at, time.Time{})
}

// RefusedAtWithin is RefusedAt for a request whose operation must also
// end by deadline (zero: no deadline beside its context's); see
// [Tracker.ReserveWithin].
func (t *Tracker) RefusedAtWithin(r *http.Request, at, deadline time.Time) error {
	if r.URL == nil && t.o.Key == nil {
		return nil
	}
	k := t.key(r)
	st := t.slot.Peek(k)
	if st == nil {
		return nil
	}
	v := st.heldUntil(at, routeOf(r), t.o.Reserve)
	if v.until.IsZero() {
		return nil
	}
	w := waiter{t: t, r: r, k: k, st: st, start: at, deadline: deadline} // the wait Reserve would start at at
	if srv := serverAsked(v.reason); w.pastBudget(v.until, srv) || !v.asked.IsZero() && w.pastBudget(v.asked, srv) {
		return w.refusal(at, v)
	}
	return nil
}

// Paused returns the end of the pause of r's key, and whether one is in
// force at now.
func (t *Tracker) Paused(r *http.Request, now time.Time) (time.Time, bool) {
	st := t.slot.Peek(t.key(r))
	if st == nil {
		return time.Time{}, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.pause, now.Before(st.pause)
}

// Len returns the number of hosts the Tracker's registry holds.
func (t *Tracker) Len() int { return t.slot.Registry().Len() }
