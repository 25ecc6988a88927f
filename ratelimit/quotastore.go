package ratelimit

import (
	"context"
	"time"
)

// QuotaStore shares quotas between the processes of a fleet: a rate the
// whole fleet may send to a host at (600 requests a minute to
// api.openai.com, whichever process sends them), and the pauses servers
// ask for, so that a 429 with Retry-After, or an exhausted quota, seen by
// one process holds back all of them. The fleet module
// (github.com/sturdyhttp/sturdy/fleet) implements it on Redis.
//
// Keys are the hosts' keys, "https://api.openai.com" by default;
// resources are those the [Tracker] tracks quotas by ("" for the whole
// host). Implementations must be safe for concurrent use by multiple
// goroutines; their methods are never called with a lock held.
type QuotaStore interface {
	// Take takes one request's place in the fleet's rate for key and
	// resource, and returns how long the request must wait before it is
	// sent: zero, most of the time; the time until its place comes when
	// the fleet's rate is spent; the time until a pause that a server
	// asked for ends. With a wait longer than maxWait, no place is taken
	// and the request should fail now rather than wait only to fail.
	// Take answers from memory when it can (places are leased from the
	// backend in batches) and otherwise waits for the backend for at most
	// its own short deadline. An error means the backend could not be
	// asked; the wait returned is then the process's own fallback.
	Take(ctx context.Context, key, resource string, maxWait time.Duration) (wait time.Duration, err error)

	// Return gives back a place taken by Take for a request that was
	// never sent (an open breaker refused it, or its caller gave up).
	Return(key, resource string)

	// Pause tells the fleet that the server asked for no more requests
	// counted against key and resource until until (a Retry-After, the
	// reset of an exhausted quota). It must not block: the store sends
	// it in the background.
	Pause(key, resource string, until time.Time)
}

// fleetPlace is a request's place in the fleet's quota, to give back when
// the request is never sent.
type fleetPlace struct {
	key, resource string
	taken         bool
}

// fleetTake takes the request's place in the fleet's quota
// ([Options.Store]) once the host's own quotas let it go, and waits as
// the store says, within the same budget as every other wait: a wait that
// cannot end in time is not started, and the request fails at once with
// a [*QuotaError]. A store that cannot be reached answers with its own
// fallback wait; the request is never failed for that. The budget is
// MaxWait's: the store's wait may be a place in the fleet's rate, which
// no server asked for, and Take does not say whether it is one or a pause.
func (w *waiter) fleetTake(res *Reservation) error {
	now := time.Now()
	var maxWait time.Duration // no wait allowed
	if limit, strict, ok := w.budget(false); ok {
		if maxWait = limit.Sub(now); strict {
			maxWait-- // must end before the deadline
		}
		maxWait = max(maxWait, 0)
	}
	key, resource := w.k.String(), w.fleetResource(res)
	d, _ := w.t.o.Store.Take(w.r.Context(), key, resource, maxWait)
	if err := w.r.Context().Err(); err != nil {
		return err
	}
	if d <= maxWait {
		res.fleet = fleetPlace{key: key, resource: resource, taken: true}
	}
	if d <= 0 {
		return nil
	}
	return w.sleep(now, now.Add(d), ReasonFleet, false)
}

// fleetResource returns the resource of the first quota the request was
// counted against, "" when none: the fleet's pauses of that resource, and
// of the whole host, hold the request.
func (w *waiter) fleetResource(res *Reservation) string {
	if res.counted == 0 {
		return ""
	}
	w.st.mu.Lock()
	defer w.st.mu.Unlock()
	for i := range w.st.quotas[:w.st.nq] {
		if res.counted&(1<<i) != 0 {
			q := &w.st.quotas[i]
			return fleetName(q.resource, q.policy, q.family)
		}
	}
	return ""
}

// fleetSettle tells the fleet what a response says that holds every
// process back: a pause (Retry-After) of the whole host, and each quota
// exhausted (at or below reserve) until its reset, by resource.
func fleetSettle(s QuotaStore, key string, qs []Quota, v Verdict, until, now time.Time, reserve int) {
	if v == VerdictPause && until.After(now) {
		s.Pause(key, "", until)
	}
	if reserve < 0 {
		return // quota headers never cause a wait
	}
	// The other processes ask the fleet for the pauses of one name per
	// request (fleetResource): a quota shares its pause under its own
	// name only when it is the one name the response reports; with
	// several (IETF policies counting the same routes), under the whole
	// host's.
	first, several := "", false
	for _, q := range qs {
		switch n := fleetName(q.Resource, q.Policy, q.Family); {
		case first == "":
			first = n
		case n != "" && n != first:
			several = true
		}
	}
	for _, q := range qs {
		if q.Remaining != Unknown && q.Remaining <= reserve && q.Reset.After(now) {
			name := fleetName(q.Resource, q.Policy, q.Family)
			if several {
				name = ""
			}
			s.Pause(key, name, q.Reset)
		}
	}
}

// fleetName is the resource under which the fleet shares a quota's
// pauses, and which the requests counted against it wait for: its
// Resource, or an IETF policy's name; "" (the whole host) for a quota
// that has no name of its own, as a provider's requests and tokens
// quotas, which every request counts against.
func fleetName(resource, policy string, family Family) string {
	switch {
	case resource != "":
		return resource
	case family == FamilyRateLimit && policy != "":
		return "policy:" + policy
	}
	return ""
}
