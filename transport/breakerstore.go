package transport

import (
	"context"
	"errors"
	"github.com/sturdyhttp/sturdy/internal/circuit"
	"net/http"
	"time"

	"github.com/sturdyhttp/sturdy/policy"
)

// BreakerStore shares the state of a [Breaker]'s circuits between the
// processes of a fleet, so that when one process sees a host fail, the
// others stop sending to it too, and while the host is half-open one
// probe is sent for the whole fleet rather than one per process. The
// fleet module (github.com/sturdyhttp/sturdy/fleet) implements it on
// Redis.
//
// Each process still decides on its own with no I/O on the request path:
// the breaker reads the fleet's view with Load, which answers from memory,
// and tells the fleet about its own changes with Publish, which returns at
// once. Only a probe asks the store and waits for its answer, in
// ClaimProbe, bounded by the store's own short deadline. A store that
// cannot reach its backend leaves each process on its own state.
//
// Keys are the breakers' keys ([BreakerSettings.Key]), "https://api.example.com"
// by default. Implementations must be safe for concurrent use by multiple
// goroutines; their methods are never called with a lock held.
type BreakerStore interface {
	// Publish tells the fleet that key's circuit changed in this process:
	// it opened (s.State is BreakerOpen, until s.Until), or its probes
	// succeeded and it closed (BreakerClosed). s.Version is ignored. It
	// must not block: the store sends it in the background.
	Publish(key string, s SharedBreakerState)

	// Load returns the fleet's last known state of key from memory,
	// without I/O; the zero SharedBreakerState when nothing is known.
	// The view is refreshed in the background, so a change published by
	// one process reaches the others within a bound the store documents.
	Load(key string) SharedBreakerState

	// ClaimProbe asks for the right to send the fleet's one probe to key,
	// which expires after ttl if the probe's outcome is never published.
	// It reports false when another process holds it: the request is then
	// refused as by a half-open breaker whose probes are all taken. An
	// error (the store is unreachable or slow) leaves the decision to the
	// process's own breaker.
	ClaimProbe(ctx context.Context, key string, ttl time.Duration) (bool, error)
}

// A ProbeReleaser is a [BreakerStore] that can give up a probe claim
// before it expires. A probe whose outcome says nothing of the host (its
// caller canceled it) publishes nothing; with a ProbeReleaser, it gives
// its claim up at once, so that another process may probe; without one,
// the claim lasts until its ttl (as long as the probe could have run).
type ProbeReleaser interface {
	// ReleaseProbe gives up this process's claim on key's probe, if it
	// still holds it; a claim another process holds now stays. It must
	// not block: the store sends it in the background.
	ReleaseProbe(key string)
}

// SharedBreakerState is a circuit's state as the fleet knows it.
type SharedBreakerState struct {
	// State is BreakerOpen or BreakerClosed. An open state whose Until has
	// passed means the fleet is half-open: the next request must win
	// ClaimProbe to be sent.
	State BreakerState
	// Until is when an open circuit lets a probe through.
	Until time.Time
	// Version orders the changes of one key: it grows with every change
	// published by any process. Zero means that nothing is known.
	Version uint64
}

// fleetAdmit decides a request by the fleet's view of key, read from
// memory: it returns the refusal of a circuit the fleet holds open, or
// of a half-open one whose probe another process holds; or whether the
// request is the fleet's probe, whose outcome the caller then publishes
// with fleetSettle. The store is asked (with its own short deadline) only
// while the fleet's view is half-open: open, with its open period over,
// and no outcome published since.
func fleetAdmit(ctx context.Context, s BreakerStore, key string, cooldown time.Duration) (probe bool, refusal *CircuitOpenError) {
	now := time.Now()
	fs := fleetView(s, key, now, cooldown)
	if fs.State != BreakerOpen {
		return false, nil
	}
	if wait := fs.Until.Sub(now); wait > 0 {
		return false, &CircuitOpenError{Key: key, State: BreakerOpen, RetryIn: wait}
	}
	won, err := s.ClaimProbe(ctx, key, probeTTL(ctx, now, cooldown))
	switch {
	case err != nil: // the store cannot tell: the process decides alone
		return false, nil
	case !won:
		return false, &CircuitOpenError{Key: key, State: BreakerHalfOpen}
	}
	return true, nil
}

// probeTTL is how long the fleet's probe may hold its claim: as long as
// it may run (its context's deadline, or maxProbeClaim without one), so
// that no other process probes while it is out; at least cooldown. Its
// outcome, published, ends the claim sooner.
func probeTTL(ctx context.Context, now time.Time, cooldown time.Duration) time.Duration {
	ttl := maxProbeClaim
	if dl, ok := deadlineOf(ctx); ok {
		ttl = dl.Sub(now)
	}
	return max(ttl, cooldown)
}

// maxProbeClaim is how long a probe with no deadline holds the fleet's
// claim.
const maxProbeClaim = time.Minute

// fleetView is the fleet's state of key as Load gives it, unless it holds
// the circuit open further ahead than a process of the fleet opens it
// (fleetMaxOpen, or this process's cooldown if longer): such a value, one
// no process wrote, is treated as absent, and the process decides on its
// own state. Processes with other Cooldowns, or clocks ahead of this
// one, stay well inside the bound.
func fleetView(s BreakerStore, key string, now time.Time, cooldown time.Duration) SharedBreakerState {
	fs := s.Load(key)
	if fs.State == BreakerOpen && fs.Until.After(now.Add(max(cooldown, fleetMaxOpen))) {
		return SharedBreakerState{}
	}
	return fs
}

// fleetMaxOpen bounds how far ahead a fleet's open state is believed
// (see fleetView): the processes of a fleet sharing a store are expected
// to use Cooldowns, and to keep clocks, within it.
const fleetMaxOpen = 10 * time.Minute

// fleetSettle publishes the outcome of the fleet's probe: the host is
// back, or down for another cooldown. An outcome that says nothing about
// the host (the caller canceled) publishes nothing, which another
// process may have published meanwhile; it gives the claim up, when the
// store can (a [ProbeReleaser]).
func fleetSettle(s BreakerStore, key string, failed, ignored bool, cooldown time.Duration) {
	switch {
	case ignored:
		if r, ok := s.(ProbeReleaser); ok {
			r.ReleaseProbe(key)
		}
	case failed:
		s.Publish(key, SharedBreakerState{State: BreakerOpen, Until: time.Now().Add(cooldown)})
	default:
		s.Publish(key, SharedBreakerState{State: BreakerClosed})
	}
}

// fleetRoundTrip is the RoundTrip of a breaker with a [BreakerStore]: the
// fleet's view first (fleetAdmit), then the host's own circuit; the
// outcome of the fleet's probe is published.
func (t *breakerTransport) fleetRoundTrip(req *http.Request, e *circuit.Circuit, s BreakerStore) (*http.Response, error) {
	probe, refusal := fleetAdmit(req.Context(), s, e.Name(), t.b.c.Cooldown)
	if refusal != nil {
		return nil, refuse(req, refusal)
	}
	resp, err := t.circuitRoundTrip(req, e)
	if probe {
		v := t.b.judge(req, resp, err)
		ignored := v == policy.HostIgnored || errors.Is(err, ErrCircuitOpen) // not sent: says nothing
		fleetSettle(s, e.Name(), v == policy.HostFailing, ignored, t.b.c.Cooldown)
	}
	return resp, err
}

// publish tells the fleet, s, of a change of e's state to to; called
// after e's locks are released, in the order of the changes.
func publish(s BreakerStore, e *circuit.Circuit, to BreakerState) {
	switch to {
	case BreakerOpen:
		s.Publish(e.Name(), SharedBreakerState{State: BreakerOpen, Until: e.Epoch().Add(e.OpenUntil())})
	case BreakerClosed:
		s.Publish(e.Name(), SharedBreakerState{State: BreakerClosed})
	}
}

// fleetState is the state that the fleet's view fs (see fleetView) gives
// a circuit at now: open until fs.Until, half-open after it, else closed.
// The states' order (closed, half-open, open) is that of how much they
// refuse.
func fleetState(fs SharedBreakerState, now time.Time) BreakerState {
	switch {
	case fs.State != BreakerOpen:
		return BreakerClosed
	case now.Before(fs.Until):
		return BreakerOpen
	}
	return BreakerHalfOpen
}

// fleetRefusedAt returns the refusal that a request to key would meet at
// the time at because the fleet holds its circuit open until after then.
func fleetRefusedAt(s BreakerStore, key string, at time.Time, cooldown time.Duration) error {
	fs := fleetView(s, key, time.Now(), cooldown)
	if fs.State != BreakerOpen || !at.Before(fs.Until) {
		return nil
	}
	return &CircuitOpenError{Key: key, State: BreakerOpen, RetryIn: time.Until(fs.Until)}
}
