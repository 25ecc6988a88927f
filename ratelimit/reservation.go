package ratelimit

import (
	"net/http"
	"net/url"
	"time"

	"golang.org/x/time/rate"

	"github.com/sturdyhttp/sturdy/internal/hosts"
)

// Reservation is one request's place in its host's quotas, taken by
// [Tracker.Reserve] before the request is sent. It is settled exactly
// once: [Reservation.Settle] with the response (or nil when the request
// was sent and no response came), or [Reservation.Cancel] when the request
// never reached the server, which gives back the unit of quota it took.
// Calls after the first do nothing, as do calls on the zero Reservation.
//
// A Reservation is a value so that taking one allocates nothing; keep it
// in one variable and settle that one (a copy settled as well would count
// twice). It is not safe for concurrent use.
type Reservation struct {
	t     *Tracker
	st    *hostState // nil: the host had no state when the request went
	key   hosts.Key
	route string
	// u, when set, is the request's URL, from which key and route are
	// made only if they are needed: the common case (nothing known of
	// the host, nothing learnt from the response) never needs them.
	u *url.URL
	// at is when the request was let through; the zero Time when the
	// host had no state then.
	at         time.Time
	counted    quotaSet // quotas it took a unit of
	gens       [maxQuotas]uint32
	pacedAt    time.Time // its slot at the learned rate
	releasedAt time.Time // its slot in a release spread
	placed     bool      // asleep in its place in a reset's spread (see hostState.placed)
	client     *rate.Reservation
	fleet      fleetPlace // its place in the fleet's quota (Options.Store)
	made       uint32     // Tracker.made when it was taken without state
	out        uint8      // its slot in Tracker.burst plus one, when it went without state
	done       bool
}

// Reserve waits until r may be sent to its host, as the [Tracker] doc
// describes, and returns its [Reservation], to be settled once r has been
// sent or given up. The error is a [*QuotaError] (matching
// [ErrQuotaExhausted]) when the wait would not end before r's context
// deadline or [Options.MaxWait] ([Options.MaxServerWait] for a
// server-asked one), and r's context error when the context
// has ended by the time the host's quotas let r go (a host with nothing
// known lets it go at once, without a look at the context); the
// Reservation is then the zero one, with nothing to settle.
func (t *Tracker) Reserve(r *http.Request) (Reservation, error) {
	return t.ReserveWithin(r, time.Time{})
}

// ReserveWithin is Reserve for a request whose operation must also end
// by deadline (zero: no deadline beside its context's). A layer that
// enforces a deadline without putting it in the context (one that a
// stream may outlive) gives it here, so that no wait runs past it.
func (t *Tracker) ReserveWithin(r *http.Request, deadline time.Time) (Reservation, error) {
	var st *hostState
	if t.o.Key == nil && r.URL != nil {
		st = t.slot.PeekURL(r.URL)
		if st == nil && t.o.Rate <= 0 && t.o.Store == nil {
			return Reservation{t: t, u: r.URL, made: t.made.Load(), out: t.burst.went(r.URL.Host)}, nil // the common case: nothing known, nothing to count
		}
	}
	k := t.key(r)
	res := Reservation{t: t, key: k, route: routeOf(r)}
	if t.o.Key != nil || r.URL == nil {
		st = t.slot.Peek(k)
	}
	if st == nil && t.o.Rate <= 0 && t.o.Store == nil {
		res.made, res.out = t.made.Load(), t.burst.went(k.Host)
		return res, nil // nothing known, nothing to count
	}
	if st = t.slot.Get(k); st == nil {
		return res, nil // the registry is full of live hosts
	}
	res.st = st
	w := waiter{t: t, r: r, k: k, st: st, start: time.Now(), deadline: deadline}
	defer w.done()
	// The client-rate place is taken first, and waited for once the
	// host's quotas have admitted the request: a request that its quotas
	// would refuse fails at once, not after waiting for its place.
	if st.client != nil {
		if err := w.clientPlace(&res); err != nil {
			return Reservation{}, err
		}
	}
	if err := w.admit(&res); err != nil {
		res.Cancel()
		return Reservation{}, err
	}
	if res.client != nil {
		now := time.Now()
		if err := w.sleep(now, now.Add(res.client.DelayFrom(now)), ReasonClientRate, false); err != nil {
			res.Cancel()
			return Reservation{}, err
		}
	}
	if t.o.Store != nil {
		if err := w.fleetTake(&res); err != nil {
			res.Cancel()
			return Reservation{}, err
		}
	}
	if err := r.Context().Err(); err != nil { // gave up during the wait: do not send
		res.Cancel()
		return Reservation{}, err
	}
	res.at = time.Now()
	return res, nil
}

// Settle records what the server answered: the quotas resp's headers
// report, and what its status asks of the host (see [ResponseVerdict]): a
// pause, a slower pace, or, for a success, a step back to full speed.
// resp is nil when the request was sent but no response came: its unit
// of quota stays spent, since the server may have counted it.
func (res *Reservation) Settle(resp *http.Response) {
	if res.done || res.t == nil {
		return
	}
	res.done = true
	if resp == nil {
		res.backUnanswered()
		return
	}
	h, status := resp.Header, resp.StatusCode
	seen := scan(h)
	if seen == 0 && status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		st := res.st
		if st == nil {
			// The host may have had state since the request went (a 429
			// of another): its success counts in what the host accepts.
			st = res.stateSince()
		}
		switch {
		case st != nil:
			st.settle(time.Now(), res.at, res.route, nil, status, VerdictNone, time.Time{}, res.stillOut())
		default:
			res.back()
			if status < 400 { // the first burst, before any state
				if res.out != 0 {
					res.t.burst.add(res.out - 1)
				} else {
					res.t.burst.add(slotOf(res.burstName()))
				}
			}
		}
		return // the common case: nothing to learn
	}
	now := time.Now()
	var buf [maxPolicies]Quota
	qs := parseSeen(h, seen, now, buf[:0])
	v, until := responseVerdict(status, h, qs, now, res.t.o.Reserve >= 0)
	if s := res.t.o.Store; s != nil {
		shared := until
		if held := holdUntil(now, until, res.t.o.maxPause()); shared.After(held) {
			shared = held // the fleet holds no longer than MaxPause either
		}
		fleetSettle(s, res.key.String(), qs, v, shared, now, res.t.o.Reserve)
	}
	st := res.st
	if st == nil {
		if len(qs) == 0 && v == VerdictNone {
			res.back()
			return
		}
		if res.u != nil {
			res.key, res.route = hosts.KeyOf(res.u), routeOfURL(res.u)
		}
		if st = res.t.slot.Get(res.key); st == nil {
			res.back()
			return
		}
		res.t.made.Add(1)
		st.firstBurst(res.t.burst.count(res.burstName(), now))
	}
	st.settle(now, res.at, res.route, qs, status, v, until, res.stillOut())
}

// Holds reports whether Cancel would give something back to the host's
// quotas or rates (beyond the count of a request sent before its host had
// state, which Settle gives back as well): a unit of a
// quota the host's responses report, a slot at its learned rate or in a
// release spread, a place in the client's rate (Options.Rate) or in the
// fleet's (Options.Store). A caller that must find out whether a failed
// request reached its server need only look when it does.
func (res *Reservation) Holds() bool {
	return !res.done && (res.counted != 0 || !res.pacedAt.IsZero() || !res.releasedAt.IsZero() ||
		res.client != nil || res.fleet.taken)
}

// Cancel gives back what the reservation took, for a request that never
// reached the server: its unit of each quota that counts it (unless a new
// window has started since), its slot at the host's learned rate and in a
// release spread, and its token of [Options.Rate].
func (res *Reservation) Cancel() {
	if res.done || res.t == nil {
		return
	}
	res.done = true
	res.backUnanswered()
	if res.client != nil {
		res.client.Cancel()
	}
	if res.fleet.taken {
		res.t.o.Store.Return(res.fleet.key, res.fleet.resource)
	}
	if res.st != nil {
		res.st.cancel(res)
	}
}

// back counts res's request, if it went without state, as settled in
// the first burst's count of requests still out.
func (res *Reservation) back() {
	if res.out != 0 {
		res.t.burst.back(res.out)
	}
}

// stillOut is where the requests sent without state that are still
// out are counted, for one of them: the host's state counts it back and
// reads the count under its lock (see hostState.unknown), so that the
// count never runs ahead of the answers recorded. The zero stillOut, for
// a request that went with state, tells nothing.
type stillOut struct {
	b    *firstBursts
	slot uint8
}

// stillOut returns where res's request, if it went without state, is
// counted among those still out.
func (res *Reservation) stillOut() stillOut {
	if res.out == 0 {
		return stillOut{}
	}
	return stillOut{&res.t.burst, res.out}
}

// backUnanswered is back for a request that got no answer (it never
// reached the server, or no response came): a host that has state since
// it went learns that one fewer is still out, as an answer would tell.
func (res *Reservation) backUnanswered() {
	if res.out == 0 {
		return
	}
	st := res.stateSince()
	if st == nil {
		res.back()
		return
	}
	st.unknown(time.Now(), res.stillOut())
}

// stateSince returns the state of res's host, for a request that went
// without one, when a host has had state made since; nil otherwise.
func (res *Reservation) stateSince() *hostState {
	if res.t.made.Load() == res.made {
		return nil
	}
	if res.u != nil {
		return res.t.slot.PeekURL(res.u)
	}
	return res.t.slot.Peek(res.key)
}

// burstName is the name the first burst of res's host is counted under.
func (res *Reservation) burstName() string {
	if res.u != nil {
		return res.u.Host
	}
	return res.key.Host
}
