package transport

import (
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sturdyhttp/sturdy/internal/window"
	"github.com/sturdyhttp/sturdy/policy"
)

// BreakerState is the state of one circuit breaker.
type BreakerState int

// The states of a circuit breaker.
const (
	// BreakerClosed: requests are sent and their outcomes counted.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: a few probes are sent to learn whether the host
	// has recovered; other requests are refused.
	BreakerHalfOpen
	// BreakerOpen: every request is refused until the open period ends.
	BreakerOpen
)

// String returns "closed", "half-open" or "open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	}
	return "BreakerState(" + strconv.Itoa(int(s)) + ")"
}

// circuit is the breaker of one host: one state machine, its state in
// atomics that the request path reads without a lock.
//
// While it is closed, outcomes are counted without a lock: a window of
// successes and failures and a run of failures. When they show the host
// is down, the circuit opens (trip). After its open period the first
// request turns it half-open and is a probe (admit); probes' outcomes
// close it or open it again (settle). Changes of state take mu, and are
// delivered to the hooks after mu is released (see deliver).
type circuit struct {
	c     *breakerConfig
	epoch time.Time
	name  string

	state     atomic.Int32  // BreakerState, as of the last change
	gen       atomic.Uint64 // counts changes: outcomes from before the last one are dropped
	openUntil atomic.Int64  // since epoch: when an open circuit lets probes through

	win        window.Counter // A: successes, B: failures; while closed
	streak     atomic.Uint64  // failures in a row, while closed, counting those sent after the run's first failure
	streakFrom atomic.Int64   // since epoch: when the run's first failure ended
	streakSeq  atomic.Uint64  // failSeq as the run's first failure left it
	failSeq    atomic.Uint64  // failures counted while closed, ever
	quietRun   atomic.Uint64  // failures in a row, each sent after the last one counted ended
	quietSeq   atomic.Uint64  // failSeq as the last failure counted in quietRun left it

	mu         sync.Mutex    // held to change state, to admit and settle probes, and over events
	probes     uint32        // probes let through while half-open, less those that said nothing
	probesOK   uint32        // probes that succeeded while half-open
	events     []stateChange // recorded, not yet delivered
	delivering bool          // a goroutine is delivering events
}

type stateChange struct{ from, to BreakerState }

func newCircuit(c *breakerConfig, epoch time.Time, name string) *circuit {
	e := &circuit{c: c, epoch: epoch, name: name}
	e.win.Init(int64(c.window / window.Buckets))
	return e
}

// since returns the time since the breakers' epoch: one read of the
// monotonic clock.
func (e *circuit) since() time.Duration { return time.Since(e.epoch) }

// open reports whether the circuit refuses requests at now without a
// lock: it is open and its open period has not passed.
func (e *circuit) open(now time.Duration) bool {
	return BreakerState(e.state.Load()) == BreakerOpen && int64(now) < e.openUntil.Load()
}

// record counts the outcome of a request sent while the circuit was
// closed, in generation gen; seq is failSeq as it was when the request
// was sent. A failure that was in flight when the last one counted ended
// is part of one event with it, such as connections dialed together and
// hung by one fault timing out together: it does not lengthen the quiet
// host's run. A request sent after that one ended is fresh evidence, and
// does, whatever else was in flight (a few callers, each sending one
// request at a time to a host that hangs them all, overlap each other
// forever). A busy host's run counts the failures of requests
// sent after its first failure: those already in flight then (every
// request of a client that a stall held up, timing out one after the
// other) neither lengthen it nor break it. Fresh requests that fail too
// are the evidence that the host is down.
func (e *circuit) record(gen uint64, v policy.HostVerdict, seq uint64) {
	switch v {
	case policy.HostHealthy:
		now := e.since()
		if e.gen.Load() != gen {
			return
		}
		e.win.Add(int64(now), 1, 0)
		if e.streak.Load() != 0 { // read first: busy hosts share the line
			e.streak.Store(0)
		}
		if e.quietRun.Load() != 0 {
			e.quietRun.Store(0)
		}
	case policy.HostFailing:
		now := e.since()
		if e.gen.Load() != gen {
			return
		}
		e.win.Add(int64(now), 0, 1)
		n := e.failSeq.Add(1)
		for {
			q := e.quietSeq.Load()
			if seq < q { // in flight when the last counted failure ended
				break
			}
			if e.quietSeq.CompareAndSwap(q, n) {
				e.quietRun.Add(1)
				break
			}
		}
		if e.streak.CompareAndSwap(0, 1) { // this failure starts a run
			e.streakSeq.Store(n)
			e.streakFrom.Store(int64(now))
		} else if seq >= e.streakSeq.Load() { // sent after the run's first failure
			e.streak.Add(1)
		}
		if e.tripped(now) {
			e.trip(gen)
		}
	}
}

// tripped reports whether the counts show the host is down (see
// [BreakerSettings]).
func (e *circuit) tripped(now time.Duration) bool {
	ok, failed := e.win.Sum(int64(now))
	if ok+failed < e.c.minRequests { // a quiet host
		return e.quietRun.Load() >= uint64(e.c.consecutive)
	}
	run := e.streak.Load()
	return float64(failed) >= e.c.ratio*float64(ok+failed) ||
		run >= e.c.minRequests && now-time.Duration(e.streakFrom.Load()) >= minStreakSpan
}

// trip opens the circuit, unless it changed state since generation gen.
func (e *circuit) trip(gen uint64) {
	e.mu.Lock()
	if e.gen.Load() == gen {
		e.setState(BreakerOpen)
	}
	e.mu.Unlock()
	e.deliver()
}

// admit decides a request that found e not closed: it returns the
// refusal of an open circuit, or of a half-open one whose probes are all
// taken; else e's generation, and whether the request is a probe (not if
// e closed meanwhile). An open circuit whose open period has passed turns
// half-open: its first HalfOpenRequests requests are probes.
func (e *circuit) admit() (gen uint64, probe bool, refusal *CircuitOpenError) {
	now := e.since()
	if e.open(now) { // no lock for a refusal
		return 0, false, e.refusal(now, false)
	}
	e.mu.Lock()
	st := BreakerState(e.state.Load())
	if st == BreakerOpen && int64(now) >= e.openUntil.Load() {
		e.setState(BreakerHalfOpen)
		st = BreakerHalfOpen
	}
	gen = e.gen.Load()
	switch {
	case st == BreakerOpen: // opened again since the check above
		refusal = e.refusal(now, false)
	case st == BreakerHalfOpen && e.probes >= e.c.halfOpen:
		refusal = e.refusal(now, true)
	case st == BreakerHalfOpen:
		e.probes++
		probe = true
	}
	e.mu.Unlock()
	e.deliver()
	return gen, probe, refusal
}

// settle counts the verdict v of a probe of generation gen: a failure
// opens the circuit again, HalfOpenRequests successes close it, and a
// probe that says nothing frees its place. An outcome from an earlier
// generation is dropped.
func (e *circuit) settle(gen uint64, v policy.HostVerdict) {
	e.mu.Lock()
	if e.gen.Load() == gen {
		switch v {
		case policy.HostIgnored:
			e.probes--
		case policy.HostFailing:
			e.setState(BreakerOpen)
		default:
			if e.probesOK++; e.probesOK >= e.c.halfOpen {
				e.setState(BreakerClosed)
			}
		}
	}
	e.mu.Unlock()
	e.deliver()
}

// setState changes e's state to to, with mu held: it updates what the
// lock-free paths read and records the change for the hooks.
func (e *circuit) setState(to BreakerState) {
	from := BreakerState(e.state.Load())
	if from == to {
		return
	}
	switch to {
	case BreakerOpen:
		now := e.since()
		// Between Cooldown/2 and Cooldown, so that many clients' probes
		// spread out.
		d := e.c.cooldown/2 + rand.N(e.c.cooldown-e.c.cooldown/2+1)
		until := now + d
		if until < now { // a huge Cooldown: saturate rather than wrap
			until = math.MaxInt64
		}
		e.openUntil.Store(int64(until))
	case BreakerClosed:
		e.win.Reset()
		e.streak.Store(0)
		e.quietRun.Store(0)
	}
	e.probes, e.probesOK = 0, 0
	e.gen.Add(1)
	e.state.Store(int32(to))
	if e.c.onChange != nil || e.c.store != nil {
		e.events = append(e.events, stateChange{from, to})
	}
}

// deliver calls the hook for the changes recorded so far, in order, with
// no lock held. One goroutine delivers at a time: one that finds another
// at it leaves its changes to it, so changes are never delivered out of
// order, and a hook that causes a change (by sending a request through
// the same stack) does not wait for itself.
func (e *circuit) deliver() {
	if e.c.onChange == nil && e.c.store == nil {
		return
	}
	e.mu.Lock()
	if e.delivering || len(e.events) == 0 {
		e.mu.Unlock()
		return
	}
	e.delivering = true
	for len(e.events) > 0 {
		batch := e.events
		e.events = nil
		e.mu.Unlock()
		for _, ch := range batch {
			if e.c.store != nil {
				e.publish(ch.to)
			}
			if e.c.onChange != nil {
				e.c.onChange(e.name, ch.from, ch.to)
			}
		}
		e.mu.Lock()
	}
	e.delivering = false
	e.mu.Unlock()
}

// refusal is the error of a request refused by e at now.
func (e *circuit) refusal(now time.Duration, halfOpen bool) *CircuitOpenError {
	if halfOpen {
		return &CircuitOpenError{Key: e.name, State: BreakerHalfOpen}
	}
	return &CircuitOpenError{Key: e.name, State: BreakerOpen, RetryIn: max(0, time.Duration(e.openUntil.Load())-now)}
}

// liveAt reports whether e must be kept however long its host goes
// unused: it is open and its open period has not passed. Forgetting it
// would send requests to a host known to be down.
func (e *circuit) liveAt(now time.Time) bool { return e.open(now.Sub(e.epoch)) }
