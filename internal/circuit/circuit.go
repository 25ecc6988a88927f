// Package circuit is the state machine of one host's circuit breaker:
// closed, open and half-open, its state in atomics that the request path
// reads without a lock. transport.Breaker wires it to requests.
package circuit

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

// Config is a circuit's settings, defaults applied.
type Config struct {
	Consecutive uint32        // a quiet host trips after this many failures in a row
	MinRequests uint64        // a busy host: the least requests in Window for the ratio rule
	Ratio       float64       // failures over requests in Window that trip a busy host
	Window      time.Duration // how long outcomes are counted
	Cooldown    time.Duration // how long an open circuit refuses, at most
	HalfOpen    uint32        // probes let through while half-open
	// OnChange, when set, is told of each change of state, in order,
	// with no lock held.
	OnChange func(e *Circuit, from, to State)
}

// The defaults of a Config's fields, documented on
// transport.BreakerSettings.
const (
	DefaultConsecutive = 5
	DefaultMinRequests = 20
	DefaultRatio       = 0.8
	DefaultWindow      = 10 * time.Second
	DefaultCooldown    = 200 * time.Millisecond
	DefaultHalfOpen    = 1
)

// WithDefaults returns c with its zero fields set to their defaults: a
// zero Ratio is DefaultRatio, and one that is negative, above 1 or NaN
// is never reached; a Window or Cooldown of zero or less is the default.
func (c Config) WithDefaults() Config {
	if c.Consecutive == 0 {
		c.Consecutive = DefaultConsecutive
	}
	if c.MinRequests == 0 {
		c.MinRequests = DefaultMinRequests
	}
	switch {
	case c.Ratio == 0:
		c.Ratio = DefaultRatio
	case !(c.Ratio > 0 && c.Ratio <= 1): // negative, above 1, NaN
		c.Ratio = math.Inf(1) // never reached
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.Cooldown <= 0 {
		c.Cooldown = DefaultCooldown
	}
	if c.HalfOpen == 0 {
		c.HalfOpen = DefaultHalfOpen
	}
	return c
}

// minStreakSpan is how long a busy host's run of failures must last to
// open its breaker: a burst of failures that end within a few
// milliseconds is one event, not evidence that the host is down.
const minStreakSpan = 50 * time.Millisecond

// Name returns the circuit's key.
func (e *Circuit) Name() string { return e.name }

// Epoch returns the time the circuit's clock counts from.
func (e *Circuit) Epoch() time.Time { return e.epoch }

// State returns the circuit's state as of its last change.
func (e *Circuit) State() State { return State(e.state.Load()) }

// Gen returns the circuit's generation: it counts changes of state.
func (e *Circuit) Gen() uint64 { return e.gen.Load() }

// FailSeq returns the failures counted while closed, ever.
func (e *Circuit) FailSeq() uint64 { return e.failSeq.Load() }

// OpenUntil returns, since the epoch, when an open circuit lets probes
// through.
func (e *Circuit) OpenUntil() time.Duration { return time.Duration(e.openUntil.Load()) }

// State is the state of one circuit.
type State int

// The states of a circuit.
const (
	// Closed: requests are sent and their outcomes counted.
	Closed State = iota
	// HalfOpen: a few probes are sent to learn whether the host has
	// recovered; other requests are refused.
	HalfOpen
	// Open: every request is refused until the open period ends.
	Open
)

// String returns "closed", "half-open" or "open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case HalfOpen:
		return "half-open"
	case Open:
		return "open"
	}
	return "BreakerState(" + strconv.Itoa(int(s)) + ")"
}

// Circuit is the breaker of one host: one state machine, its state in
// atomics that the request path reads without a lock.
//
// While it is closed, outcomes are counted without a lock: a window of
// successes and failures and a run of failures. When they show the host
// is down, the Circuit opens (trip). After its open period the first
// request turns it half-open and is a probe (admit); probes' outcomes
// close it or open it again (settle). Changes of state take mu, and are
// delivered to the hooks after mu is released (see deliver).
type Circuit struct {
	c     *Config
	epoch time.Time
	name  string

	state     atomic.Int32  // State, as of the last change
	gen       atomic.Uint64 // counts changes: outcomes from before the last one are dropped
	openUntil atomic.Int64  // since epoch: when an open Circuit lets probes through

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

type stateChange struct{ from, to State }

// New returns a closed circuit named name, with settings c, whose clock
// counts from epoch.
func New(c *Config, epoch time.Time, name string) *Circuit {
	e := &Circuit{c: c, epoch: epoch, name: name}
	e.win.Init(int64(c.Window / window.Buckets))
	return e
}

// Since returns the time since the breakers' epoch: one read of the
// monotonic clock.
func (e *Circuit) Since() time.Duration { return time.Since(e.epoch) }

// IsOpen reports whether the Circuit refuses requests at now without a
// lock: it is open and its open period has not passed.
func (e *Circuit) IsOpen(now time.Duration) bool {
	return State(e.state.Load()) == Open && int64(now) < e.openUntil.Load()
}

// Record counts the outcome of a request sent while the Circuit was
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
func (e *Circuit) Record(gen uint64, v policy.HostVerdict, seq uint64) {
	switch v {
	case policy.HostHealthy:
		now := e.Since()
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
		now := e.Since()
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
// the breaker's settings).
func (e *Circuit) tripped(now time.Duration) bool {
	ok, failed := e.win.Sum(int64(now))
	if ok+failed < e.c.MinRequests { // a quiet host
		return e.quietRun.Load() >= uint64(e.c.Consecutive)
	}
	run := e.streak.Load()
	return float64(failed) >= e.c.Ratio*float64(ok+failed) ||
		run >= e.c.MinRequests && now-time.Duration(e.streakFrom.Load()) >= minStreakSpan
}

// trip opens the Circuit, unless it changed state since generation gen.
func (e *Circuit) trip(gen uint64) {
	e.mu.Lock()
	if e.gen.Load() == gen {
		e.setState(Open)
	}
	e.mu.Unlock()
	e.deliver()
}

// Admit decides a request that found e not closed: it returns the
// refusal of an open Circuit, or of a half-open one whose probes are all
// taken; else e's generation, and whether the request is a probe (not if
// e closed meanwhile). An open Circuit whose open period has passed turns
// half-open: its first HalfOpenRequests requests are probes.
func (e *Circuit) Admit() (gen uint64, probe bool, refusal *Refusal) {
	now := e.Since()
	if e.IsOpen(now) { // no lock for a refusal
		return 0, false, e.Refusal(now, false)
	}
	e.mu.Lock()
	st := State(e.state.Load())
	if st == Open && int64(now) >= e.openUntil.Load() {
		e.setState(HalfOpen)
		st = HalfOpen
	}
	gen = e.gen.Load()
	switch {
	case st == Open: // opened again since the check above
		refusal = e.Refusal(now, false)
	case st == HalfOpen && e.probes >= e.c.HalfOpen:
		refusal = e.Refusal(now, true)
	case st == HalfOpen:
		e.probes++
		probe = true
	}
	e.mu.Unlock()
	e.deliver()
	return gen, probe, refusal
}

// Settle counts the verdict v of a probe of generation gen: a failure
// opens the Circuit again, HalfOpenRequests successes close it, and a
// probe that says nothing frees its place. An outcome from an earlier
// generation is dropped.
func (e *Circuit) Settle(gen uint64, v policy.HostVerdict) {
	e.mu.Lock()
	if e.gen.Load() == gen {
		switch v {
		case policy.HostIgnored:
			e.probes--
		case policy.HostFailing:
			e.setState(Open)
		default:
			if e.probesOK++; e.probesOK >= e.c.HalfOpen {
				e.setState(Closed)
			}
		}
	}
	e.mu.Unlock()
	e.deliver()
}

// setState changes e's state to to, with mu held: it updates what the
// lock-free paths read and records the change for the hooks.
func (e *Circuit) setState(to State) {
	from := State(e.state.Load())
	if from == to {
		return
	}
	switch to {
	case Open:
		now := e.Since()
		// Between Cooldown/2 and Cooldown, so that many clients' probes
		// spread out.
		d := e.c.Cooldown/2 + rand.N(e.c.Cooldown-e.c.Cooldown/2+1)
		until := now + d
		if until < now { // a huge Cooldown: saturate rather than wrap
			until = math.MaxInt64
		}
		e.openUntil.Store(int64(until))
	case Closed:
		e.win.Reset()
		e.streak.Store(0)
		e.quietRun.Store(0)
	}
	e.probes, e.probesOK = 0, 0
	e.gen.Add(1)
	e.state.Store(int32(to))
	if e.c.OnChange != nil {
		e.events = append(e.events, stateChange{from, to})
	}
}

// deliver calls the hook for the changes recorded so far, in order, with
// no lock held. One goroutine delivers at a time: one that finds another
// at it leaves its changes to it, so changes are never delivered out of
// order, and a hook that causes a change (by sending a request through
// the same stack) does not wait for itself.
func (e *Circuit) deliver() {
	if e.c.OnChange == nil {
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
			e.c.OnChange(e, ch.from, ch.to)
		}
		e.mu.Lock()
	}
	e.delivering = false
	e.mu.Unlock()
}

// Refusal says why a circuit refused a request: it was open (for
// RetryIn more), or half-open with all its probes taken.
type Refusal struct {
	HalfOpen bool
	RetryIn  time.Duration
}

// Refusal is the refusal of a request by e at now.
func (e *Circuit) Refusal(now time.Duration, halfOpen bool) *Refusal {
	if halfOpen {
		return &Refusal{HalfOpen: true}
	}
	return &Refusal{RetryIn: max(0, time.Duration(e.openUntil.Load())-now)}
}

// LiveAt reports whether e must be kept however long its host goes
// unused: it is open and its open period has not passed. Forgetting it
// would send requests to a host known to be down.
func (e *Circuit) LiveAt(now time.Time) bool { return e.IsOpen(now.Sub(e.epoch)) }
