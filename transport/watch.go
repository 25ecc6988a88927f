package transport

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// limits are what a watch enforces: a deadline and an idle limit, each
// with the error that names it.
type limits struct {
	d       time.Duration // the deadline, from the start; 0: none
	idle    time.Duration // the longest a Read may stay blocked; 0: none
	tick    time.Duration // how often the idle watch looks: idle/8
	name    string        // the bound's name, as its errors give it
	dlErr   *DeadlineError
	idleErr *DeadlineError
}

func newLimits(d, idle time.Duration, name string) limits {
	l := limits{d: max(d, 0), idle: max(idle, 0), name: name}
	l.dlErr = &DeadlineError{Bound: name, Limit: l.d}
	if l.idle > 0 {
		l.tick = max(l.idle/8, time.Millisecond)
		l.idleErr = &DeadlineError{Bound: boundIdle, Limit: l.idle}
	}
	return l
}

// watch is the one mechanism that cuts work which runs too long: a
// bound's attempt or body (its cut cancels the bound's context), a
// failed body that Retry or Hedge reads, and a stream's read ahead to
// its first event (their cut closes the body). One timer serves both
// limits: it fires at the deadline, and every tick while a body is
// watched for idleness. Read counts its entries and returns in an atomic
// counter, so no timer is touched per Read; a Read blocked for the idle
// limit is cut between that limit and two ticks later.
type watch struct {
	l   *limits
	up  *watch      // the bound above, when this is a bound's
	cut func(error) // ends the work; called once, without the lock

	// activity counts entries to and returns from the body's Read: odd
	// while a Read is blocked.
	activity atomic.Uint64

	// reported is the deadline on the clockNow scale plus one while it
	// is reported (armed, lapsed, or what ended the watch), else 0: read
	// without the lock by the layers that wait.
	reported atomic.Int64

	mu        sync.Mutex
	state     uint8 // live, or how it ended
	pending   bool  // the timer is set
	dlArmed   bool
	idleArmed bool
	ahead     uint8 // streams beneath that hold the deadline off (see hold)
	timer     *time.Timer
	begun     time.Duration // clockNow at the start
	seen      uint64        // activity at the last tick
	quiet     time.Duration // since when activity has been seen unchanged
}

// How a watch ended.
const (
	live uint8 = iota
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

// start arms the deadline, l.d after now (none when l.d is 0). It is
// called once, before the watch is shared.
//
// The timer is set once, here, at the nearer of the deadline and the
// first idle tick, and is left alone on the way (a response that comes
// back at once costs one timer, set and stopped): each time it fires it
// looks at what is armed then.
func (w *watch) start(l *limits, now time.Duration, cut func(error)) {
	w.l, w.cut, w.begun = l, cut, now
	next := time.Duration(-1)
	if l.d > 0 {
		w.setArmed(true)
		next = l.d
	}
	if l.idle > 0 && (next < 0 || l.tick < next) {
		next = l.tick
	}
	if next >= 0 {
		w.mu.Lock() // the timer may fire before it is stored
		w.pending = true
		w.timer = time.AfterFunc(next, w.fire)
		w.mu.Unlock()
	}
}

// setArmed arms or disarms the deadline; under mu once shared.
func (w *watch) setArmed(on bool) {
	w.dlArmed = on
	if on {
		w.reported.Store(int64(w.due()) + 1)
	} else {
		w.reported.Store(0)
	}
}

// due returns the deadline on the clockNow scale.
func (w *watch) due() time.Duration {
	if w.begun > math.MaxInt64-w.l.d {
		return math.MaxInt64
	}
	return w.begun + w.l.d
}

// deadline returns the watch's deadline while it is armed (a deadline
// that lapsed while held is still reported, so that nothing more is
// sent).
func (w *watch) deadline() (time.Duration, bool) {
	r := w.reported.Load()
	return time.Duration(r - 1), r != 0
}

// bodyStarts says that the body is now being handed out: the deadline
// stays armed when keep is set; the idle watch starts when idle is set.
func (w *watch) bodyStarts(keep, idle bool) {
	w.mu.Lock()
	if w.state != live {
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
	if idle && w.l.idle > 0 {
		now := clockNow()
		w.idleArmed = true
		w.seen = w.activity.Load()
		w.quiet = now
		if !w.pending {
			w.rearmLocked(now)
		}
	}
	w.mu.Unlock()
}

// rearmLocked sets the timer for the next thing it must check, and stops
// it when nothing is armed.
func (w *watch) rearmLocked(now time.Duration) {
	var next time.Duration = -1
	if w.idleArmed {
		next = w.l.tick
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
func (w *watch) fire() {
	now := clockNow()
	w.mu.Lock()
	w.pending = false
	if w.state != live {
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
		} else if now-w.quiet >= w.l.idle {
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
func (w *watch) end(k uint8) bool {
	w.mu.Lock()
	if w.state != live {
		w.mu.Unlock()
		return false
	}
	w.state = k
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
func (w *watch) errOf(k uint8) error {
	switch k {
	case endDeadline:
		return w.l.dlErr
	case endIdle:
		return w.l.idleErr
	}
	return nil
}

// cutErr returns the *DeadlineError that ended the watch, or nil.
func (w *watch) cutErr() error {
	w.mu.Lock()
	k := w.state
	w.mu.Unlock()
	return w.errOf(k)
}

// release ends the watch once its work is over. It returns the cut that
// ended it before, if any.
func (w *watch) release() error {
	if w.end(endReleased) {
		return nil
	}
	return w.cutErr()
}

// settle returns the cut that a failure is blamed on: the deadline, when
// it lapsed while a stream held it off, or whatever cut the work.
func (w *watch) settle() error {
	w.mu.Lock()
	lapsed := w.state == live && (w.ahead&aheadLapsed != 0 || w.dlArmed && clockNow() >= w.due())
	w.ahead &^= aheadLapsed
	w.mu.Unlock()
	if lapsed {
		w.end(endDeadline)
	}
	return w.cutErr()
}

// hold holds off the deadline while a stream beneath waits for its first
// event. It reports false, holding nothing, when the watch has ended, a
// stream won already, or too many hold it.
func (w *watch) hold() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != live || w.ahead&aheadCount == aheadCount || w.ahead&aheadWon != 0 {
		return false
	}
	w.ahead++
	if w.dlArmed {
		w.setArmed(false) // the timer, when it fires, finds it disarmed
		w.ahead |= aheadHeld
	}
	return true
}

// unhold ends a hold: committed says whether the stream was handed back.
// The deadline comes back, as it was, when every stream that held it
// has failed; once one is committed it stays off.
func (w *watch) unhold(committed bool) {
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
	if w.state != live {
		return
	}
	w.setArmed(true)
	if now := clockNow(); now >= w.due() {
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

// enter and leave mark a Read blocked on the body, for the idle watch.
func (w *watch) enter() { w.activity.Add(1) }
func (w *watch) leave() { w.activity.Add(1) }

// clockBase anchors the bounds' clock: clockNow is the time since it,
// which reads only the monotonic clock. Inside a testing/synctest
// bubble, whose times carry no monotonic reading, the same arithmetic
// runs on the bubble's wall clock.
var clockBase = time.Now()

// clockNow reads the bounds' clock.
func clockNow() time.Duration { return time.Since(clockBase) }

// clockTime turns a clockNow reading into a time.
func clockTime(d time.Duration) time.Time { return clockBase.Add(d) }

// clockOf turns a time into a clockNow reading.
func clockOf(t time.Time) time.Duration { return t.Sub(clockBase) }
