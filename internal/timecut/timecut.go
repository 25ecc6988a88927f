// Package timecut is the one mechanism that cuts work which runs too
// long: past a deadline, or when a Read has been blocked for an idle
// limit. The transport's bounds, the failed bodies Retry and Hedge read,
// and a stream's read ahead to its first event all use it.
package timecut

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Limits are what a Watch enforces: a deadline and an idle limit, each
// with the error that names it.
type Limits struct {
	D       time.Duration // the deadline, from the start; 0: none
	Idle    time.Duration // the longest a Read may stay blocked; 0: none
	Tick    time.Duration // how often the idle watch looks: Idle/8
	Name    string        // the bound's name, as its errors give it
	DlErr   error         // the deadline's error
	IdleErr error         // the idle limit's error
}

// NewLimits returns the limits d and idle (0 or less: none) named name;
// dlErr and idleErr make the errors that name them.
func NewLimits(d, idle time.Duration, name string, dlErr, idleErr func(time.Duration) error) Limits {
	l := Limits{D: max(d, 0), Idle: max(idle, 0), Name: name}
	l.DlErr = dlErr(l.D)
	if l.Idle > 0 {
		l.Tick = max(l.Idle/8, time.Millisecond)
		l.IdleErr = idleErr(l.Idle)
	}
	return l
}

// Watch is the one mechanism that cuts work which runs too long: a
// bound's attempt or body (its cut cancels the bound's context), a
// failed body that Retry or Hedge reads, and a stream's read ahead to
// its first event (their cut closes the body). One timer serves both
// limits: it fires at the deadline, and every tick while a body is
// watched for idleness. Read counts its entries and returns in an atomic
// counter, so no timer is touched per Read; a Read blocked for the idle
// limit is cut between that limit and two ticks later.
type Watch struct {
	L   *Limits
	Up  *Watch      // the bound above, when this is a bound's
	cut func(error) // ends the work; called once, without the lock

	// activity counts entries to and returns from the body's Read: odd
	// while a Read is blocked.
	activity atomic.Uint64

	// reported is the deadline on the Now scale plus one while it
	// is reported (armed, lapsed, or what ended the watch), else 0: read
	// without the lock by the layers that wait.
	reported atomic.Int64

	// state is live, or how the watch ended: written under mu, once;
	// read without it by Release and CutErr, which a body's EOF and its
	// Close both call.
	state atomic.Uint32

	mu        sync.Mutex
	pending   bool // the timer is set
	dlArmed   bool
	idleArmed bool
	ahead     uint8 // streams beneath that hold the deadline off (see hold)
	timer     *time.Timer
	begun     time.Duration // Now at the start
	seen      uint64        // activity at the last tick
	quiet     time.Duration // since when activity has been seen unchanged
}

// How a watch ended.
const (
	live uint32 = iota
	endReleased
	endDeadline
	endIdle
)

// The bits of watch.ahead.
const (
	aheadCount  = 1<<5 - 1 // how many streams beneath read ahead
	aheadLapsed = 1 << 5   // the deadline passed while held: it is reported, and cuts only what Timeout bounds
	aheadHeld   = 1 << 6   // the deadline was armed when the first began, and is held off
	aheadWon    = 1 << 7   // a stream was committed: the deadline stays off
)

// start arms the deadline, l.D after now (none when l.D is 0). It is
// called once, before the watch is shared.
//
// The timer is set once, here, at the nearer of the deadline and the
// first idle tick, and is left alone on the way (a response that comes
// back at once costs one timer, set and stopped): each time it fires it
// looks at what is armed then.
func (w *Watch) Start(l *Limits, now time.Duration, cut func(error)) {
	w.L, w.cut, w.begun = l, cut, now
	next := time.Duration(-1)
	if l.D > 0 {
		w.setArmed(true)
		next = l.D
	}
	if l.Idle > 0 && (next < 0 || l.Tick < next) {
		next = l.Tick
	}
	if next >= 0 {
		w.mu.Lock() // the timer may fire before it is stored
		w.pending = true
		w.timer = time.AfterFunc(next, w.fire)
		w.mu.Unlock()
	}
}

// setArmed arms or disarms the deadline; under mu once shared.
func (w *Watch) setArmed(on bool) {
	w.dlArmed = on
	if on {
		w.reported.Store(int64(w.due()) + 1)
	} else {
		w.reported.Store(0)
	}
}

// due returns the deadline on the Now scale.
func (w *Watch) due() time.Duration {
	if w.begun > math.MaxInt64-w.L.D {
		return math.MaxInt64
	}
	return w.begun + w.L.D
}

// Deadline returns the watch's deadline while it is armed (a deadline
// that lapsed while held is still reported, so that nothing more is
// sent).
func (w *Watch) Deadline() (time.Duration, bool) {
	r := w.reported.Load()
	return time.Duration(r - 1), r != 0
}

// BodyStarts says that the body is now being handed out: the deadline
// stays armed when keep is set; the idle watch starts when idle is set.
func (w *Watch) BodyStarts(keep, idle bool) {
	w.mu.Lock()
	if w.state.Load() != live {
		w.mu.Unlock()
		return
	}
	if !keep && w.dlArmed {
		w.setArmed(false)
	}
	lapsed := w.ahead&aheadLapsed != 0
	w.ahead &^= aheadLapsed
	if lapsed && keep {
		// The deadline passed while a stream held it: it cuts a body it
		// bounds at once.
		w.mu.Unlock()
		w.end(endDeadline)
		return
	}
	if idle && w.L.Idle > 0 {
		// quiet is set by the first tick that finds a Read blocked: no
		// Read can be blocked before the body is handed out.
		w.idleArmed = true
		w.seen = w.activity.Load()
		if !w.pending {
			w.rearmLocked(Now())
		}
	}
	w.mu.Unlock()
}

// rearmLocked sets the timer for the next thing it must check, and stops
// it when nothing is armed.
func (w *Watch) rearmLocked(now time.Duration) {
	var next time.Duration = -1
	if w.idleArmed {
		next = w.L.Tick
	}
	if w.dlArmed && w.ahead&aheadLapsed == 0 {
		if d := w.due() - now; next < 0 || d < next {
			next = max(d, 0)
		}
	}
	w.pending = next >= 0
	switch {
	case next >= 0 && w.timer == nil:
		w.timer = time.AfterFunc(next, w.fire)
	case next >= 0:
		w.timer.Reset(next)
	case w.timer != nil:
		w.timer.Stop()
	}
}

// fire runs on the timer: it cuts the work when its deadline has passed
// or a Read has been blocked for the idle limit, and otherwise sets the
// next tick.
func (w *Watch) fire() {
	now := Now()
	w.mu.Lock()
	w.pending = false
	if w.state.Load() != live {
		w.mu.Unlock()
		return
	}
	cut := live
	switch {
	case w.dlArmed && w.ahead&aheadLapsed == 0 && now >= w.due():
		cut = endDeadline
	case w.idleArmed:
		a := w.activity.Load()
		if a != w.seen || a%2 == 0 {
			w.seen, w.quiet = a, now
		} else if now-w.quiet >= w.L.Idle {
			cut = endIdle
		}
	}
	if cut == live {
		w.rearmLocked(now)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	w.end(cut)
}

// end ends the watch as k says, unless it has ended; it reports whether
// it did.
func (w *Watch) end(k uint32) bool {
	if w.state.Load() != live {
		return false // ended already: no lock
	}
	w.mu.Lock()
	if w.state.Load() != live {
		w.mu.Unlock()
		return false
	}
	w.state.Store(k)
	if k != endDeadline {
		w.setArmed(false)
	}
	w.dlArmed, w.idleArmed, w.pending = false, false, false
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	if w.cut != nil {
		w.cut(w.errOf(k))
	}
	return true
}

// errOf returns the error of a watch that ended as k: nil when released.
func (w *Watch) errOf(k uint32) error {
	switch k {
	case endDeadline:
		return w.L.DlErr
	case endIdle:
		return w.L.IdleErr
	}
	return nil
}

// CutErr returns the *DeadlineError that ended the watch, or nil.
func (w *Watch) CutErr() error { return w.errOf(w.state.Load()) }

// Release ends the watch once its work is over. It returns the cut that
// ended it before, if any.
func (w *Watch) Release() error {
	if w.end(endReleased) {
		return nil
	}
	return w.CutErr()
}

// Settle returns the cut that a failure is blamed on: the deadline, when
// it lapsed while a stream held it off, or whatever cut the work.
func (w *Watch) Settle() error {
	w.mu.Lock()
	lapsed := w.state.Load() == live && (w.ahead&aheadLapsed != 0 || w.dlArmed && Now() >= w.due())
	w.ahead &^= aheadLapsed
	w.mu.Unlock()
	if lapsed {
		w.end(endDeadline)
	}
	return w.CutErr()
}

// Hold holds off the deadline while a stream beneath waits for its first
// event. It reports false, holding nothing, when the watch has ended, a
// stream won already, or too many hold it.
func (w *Watch) Hold() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state.Load() != live || w.ahead&aheadCount == aheadCount || w.ahead&aheadWon != 0 {
		return false
	}
	w.ahead++
	if w.dlArmed {
		w.setArmed(false) // the timer, when it fires, finds it disarmed
		w.ahead |= aheadHeld
	}
	return true
}

// Unhold ends a hold: committed says whether the stream was handed back.
// The deadline comes back, as it was, when every stream that held it
// has failed; once one is committed it stays off.
func (w *Watch) Unhold(committed bool) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ahead--
	if committed {
		w.ahead |= aheadWon
	}
	if w.ahead&aheadCount != 0 || w.ahead&(aheadHeld|aheadWon) != aheadHeld {
		return
	}
	w.ahead &^= aheadHeld
	if w.state.Load() != live {
		return
	}
	w.setArmed(true)
	if now := Now(); now >= w.due() {
		// The deadline passed while streams held it off. It comes back
		// for the layers above (deadline reports it, so Retry sends
		// nothing more), but it does not cut now: what is left to hand
		// back is the last stream, which Timeout does not bound.
		// bodyStarts cuts a body that Timeout bounds, and settle a
		// failure.
		w.ahead |= aheadLapsed
	} else {
		w.rearmLocked(now)
	}
}

// Enter and leave mark a Read blocked on the body, for the idle watch.
func (w *Watch) Enter() { w.activity.Add(1) }
func (w *Watch) Leave() { w.activity.Add(1) }

// Base anchors the bounds' clock: Now is the time since it,
// which reads only the monotonic clock. Inside a testing/synctest
// bubble, whose times carry no monotonic reading, the same arithmetic
// runs on the bubble's wall clock.
var Base = time.Now()

// Now reads the bounds' clock.
func Now() time.Duration { return time.Since(Base) }

// Time turns a Now reading into a time.
func Time(d time.Duration) time.Time { return Base.Add(d) }

// Of turns a time into a Now reading.
func Of(t time.Time) time.Duration { return t.Sub(Base) }

// StartIdle starts a watch of l's idle limit only (no deadline) over a
// body being read: cut ends the work.
func (w *Watch) StartIdle(l *Limits, cut func(error)) {
	w.L, w.cut = l, cut
	w.BodyStarts(false, true)
}
