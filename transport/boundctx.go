package transport

import (
	"context"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// boundCtx is the context that a bound ([Deadline], and the Timeout,
// AttemptTimeout and IdleTimeout of [New]) gives the requests beneath it.
// It does what context.WithTimeoutCause does, for less (one allocation
// shared with the request copy and the body wrapper, instead of four),
// and two things it cannot:
//
//   - its deadline can be disarmed while the context lives on, so that a
//     stream's body stays readable after its headers end the bound on
//     getting a response;
//   - one coarse timer also watches the body for idleness: Read counts its
//     calls in an atomic counter, and the timer (which fires every
//     IdleTimeout/8 while a body is read) cuts the body when a Read has
//     been blocked for IdleTimeout. No timer is touched per Read;
//   - the timer is made only once something waits for the context to
//     end: Done or AfterFunc (net/http calls both for every request it
//     sends). Until then nothing can be interrupted, so nothing needs to
//     fire: Err and Value compare the deadline with the clock instead. A
//     request that an in-memory transport answers, or a response served
//     from a cache, costs no timer at all.
//
// Its Err is [context.DeadlineExceeded] when it is cut (by the deadline or
// for idleness), the parent's error when the parent ends first, and
// [context.Canceled] once released. [context.Cause] gives the
// [*DeadlineError] that names the bound, so net/http (which reports
// context.Cause on HTTP/1 and ctx.Err on HTTP/2) returns errors that match
// context.DeadlineExceeded either way; the bound then replaces them with
// its *DeadlineError. Contexts derived from it with context.WithCancel
// register through its AfterFunc method, without a goroutine.
//
// It is allocated with the request copy, which is 304 bytes: its fields
// are kept few and packed (how it ended is one word, from which Err and
// the cause are derived), so that the whole allocation stays in a small
// size class. Every byte of it is paid for by each request.
type boundCtx struct {
	parent context.Context // a *boundCtx when the bound above is followed directly
	b      *bound

	// activity counts entries to and returns from the body's Read: odd
	// while a Read is blocked. The timer reads it; Read only adds.
	activity atomic.Uint64

	// state is how the context ended (an endKind; live while it has
	// not), with doneMade set once Done has made its channel. It is
	// written under mu and read anywhere.
	state atomic.Uint32

	mu        sync.Mutex
	watched   bool // Done or AfterFunc was called: the timer runs
	ownsStack bool // the layers beneath meet in b.stack: no layer above carries a stack
	dlArmed   bool
	idleArmed bool
	isStream  bool          // media's verdict: its body is a stream
	ahead     uint8         // streams beneath read ahead to their first event, holding the deadline (see holdDeadline)
	nextID    uint16        // a context registers a few functions: 65,536 before an ID comes back
	seen      uint32        // activity at the last tick, its low 32 bits
	done      chan struct{} // made by Done; read without mu once state has doneMade
	timer     *time.Timer
	begun     time.Duration            // when the bound began (clockNow); its deadline is begun+b.d, while dlArmed
	quiet     time.Duration            // since when activity has been seen unchanged (clockNow; valid while idleArmed)
	after     afterEntry               // the first function registered (net/http registers one per request); id 0: none
	more      *[]afterEntry            // the others
	stop      func() bool              // stops watching the parent
	media     *http.Response           // a response whose media type a layer beneath judged already (see streamOf)
	breakers  atomic.Pointer[Breakers] // the Breakers that judged the operation's last attempt, while ownsStack (see joinBreakers)
}

// An endKind says how a boundCtx ended; its Err and its cause follow.
type endKind = uint32

const (
	live        endKind = iota
	endReleased         // its work is over: Err is context.Canceled
	endParent           // the parent ended: Err is the parent's
	endDeadline         // cut by the deadline: Err is context.DeadlineExceeded, the cause b.dlErr
	endIdle             // cut for idleness: Err is context.DeadlineExceeded, the cause b.idleErr

	endMask  = 7
	doneMade = 8 // a flag beside the endKind in state
)

// ended returns how the context ended, or live.
func (c *boundCtx) ended() endKind { return c.state.Load() & endMask }

// up returns the bound above, when it is the parent, followed directly.
func (c *boundCtx) up() *boundCtx {
	p, _ := c.parent.(*boundCtx)
	return p
}

type afterEntry struct {
	id uint16
	f  func()
}

// boundCtxKey finds the nearest boundCtx in a context chain.
type boundCtxKey struct{}

// cancelCtxKey is the key with which [context.Cause] asks a context for
// its nearest cancelable ancestor. A boundCtx answers it (nil, or a
// context canceled with its own cause) so that context.Cause reports the
// boundCtx's cause and not an ancestor's: the key is unexported, so it is
// learned once by watching what Cause asks for.
var cancelCtxKey = func() any {
	p := &keyProbe{Context: context.Background()}
	context.Cause(p)
	return p.key
}()

type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Err() error { return context.Canceled }

func (p *keyProbe) Value(k any) any {
	p.key = k
	return nil
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// start arms the bound's deadline, b.d after now (b.d zero: none), and
// begins to follow the parent. It is called once, before the context is
// shared. The timer that enforces the deadline is made later, by watch.
func (c *boundCtx) start(parent context.Context, b *bound, now time.Duration) {
	c.parent, c.b = parent, b
	if b.d > 0 {
		c.begun, c.dlArmed = now, true
	}
	// A parent bound is followed directly, without making it watch: it
	// is watched when this context is.
	if p, ok := parent.(*boundCtx); ok {
		if stop := p.follow(c.parentDone); stop != nil {
			c.setStop(stop)
		} else {
			c.end(endParent)
		}
		return
	}
	pdone := parent.Done()
	if pdone == nil {
		return
	}
	select {
	case <-pdone:
		c.end(endParent)
		return
	default:
	}
	// A parent bound further up is followed directly (no allocation
	// beyond the registration); any other cancelable parent through
	// context.AfterFunc.
	if p, ok := parent.Value(boundCtxKey{}).(*boundCtx); ok && p.Done() == pdone {
		c.setStop(p.AfterFunc(c.parentDone))
	} else {
		c.setStop(context.AfterFunc(parent, c.parentDone))
	}
}

// setStop keeps the function that stops following the parent. The
// parent may have ended the context already, from its own goroutine:
// stop is kept under the lock that end reads it with, and called here if
// the context was released meanwhile and end found nothing to call.
func (c *boundCtx) setStop(stop func() bool) {
	c.mu.Lock()
	k := c.ended()
	if k == live {
		c.stop = stop
		c.mu.Unlock()
		return
	}
	fromParent := k == endParent
	c.mu.Unlock()
	if !fromParent {
		stop()
	}
}

func (c *boundCtx) parentDone() { c.end(endParent) }

// Deadline reports the sooner of the bound's armed deadline and the
// parent's.
func (c *boundCtx) Deadline() (time.Time, bool) {
	pdl, pok := c.parent.Deadline()
	c.mu.Lock()
	dl, armed := c.deadline(), c.dlArmed
	c.mu.Unlock()
	if armed && (!pok || dl.Before(pdl)) {
		return dl, true
	}
	return pdl, pok
}

func (c *boundCtx) Done() <-chan struct{} {
	if c.state.Load()&doneMade != 0 {
		return c.done
	}
	// A deadline that passed while nothing watched ends the context
	// now, so that the channel made below is closed already, as a
	// context.WithTimeout's would be.
	c.Err()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.state.Load()
	if s&doneMade != 0 {
		return c.done
	}
	if s&endMask != live {
		c.done = closedChan
	} else {
		c.done = make(chan struct{})
		c.watchLocked()
	}
	c.state.Store(s | doneMade)
	return c.done
}

func (c *boundCtx) Err() error {
	if k := c.ended(); k != live {
		return c.errOf(k)
	}
	// Nothing has ended it yet. It ends now if its deadline passed
	// while no timer watched, or if its parent has ended and the news
	// has not arrived (context.AfterFunc brings it on a goroutine of its
	// own): Err is the parent's from the moment the parent is done, as
	// for a context.WithCancel.
	c.mu.Lock()
	expired := c.expiredLocked()
	c.mu.Unlock()
	switch up := c.up(); {
	case expired:
		c.end(endDeadline)
	case up != nil:
		if up.Err() != nil { // looks at the clock and the parent there too
			c.end(endParent)
		}
	case c.parent.Err() != nil:
		c.end(endParent)
	}
	return c.errOf(c.ended())
}

// errOf returns the Err of a context that ended as k.
func (c *boundCtx) errOf(k endKind) error {
	switch k {
	case live:
		return nil
	case endReleased:
		return context.Canceled
	case endParent:
		return c.parent.Err()
	}
	return context.DeadlineExceeded
}

// expiredLocked reports whether the deadline has passed unseen: the
// context is not done yet, and no timer runs to end it because nothing
// has waited for it.
func (c *boundCtx) expiredLocked() bool {
	return c.ended() == live && !c.watched && c.dlArmed && c.ahead&aheadLapsed == 0 && clockNow() >= c.due()
}

// due returns the bound's own deadline on the clockNow scale
// (meaningful while dlArmed). A bound so long that the sum overflows
// (math.MaxInt64, the longest Duration) ends at the end of the scale.
func (c *boundCtx) due() time.Duration {
	if c.begun > math.MaxInt64-c.b.d {
		return math.MaxInt64
	}
	return c.begun + c.b.d
}

// deadline returns the bound's own deadline as a time. It is computed
// when asked: a request that succeeds never asks.
func (c *boundCtx) deadline() time.Time { return clockTime(c.due()) }

// watchLocked starts the timer, now that something waits for the
// context to end, and has the bounds it follows do the same.
func (c *boundCtx) watchLocked() {
	if c.watched {
		return
	}
	c.watched = true
	now := clockNow()
	if c.idleArmed {
		c.quiet = now
	}
	c.rearmLocked(now)
	if up := c.up(); up != nil {
		up.watch()
	}
}

func (c *boundCtx) watch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended() == live {
		c.watchLocked()
	}
}

func (c *boundCtx) Value(key any) any {
	// A type switch first: the keys sturdy asks for on every request
	// cost a compare of type words, not a call to compare interfaces.
	switch key.(type) {
	case stackKey:
		if c.ownsStack {
			return &c.b.stack
		}
		return c.parent.Value(key)
	case opBreakersKey:
		if c.ownsStack {
			return &c.breakers
		}
		return c.parent.Value(key)
	case boundCtxKey:
		return c
	}
	switch key {
	case cancelCtxKey:
		c.Err() // ends the context if its deadline passed unseen
		switch k := c.ended(); k {
		case live:
			return nil // not done: no cause, whatever the ancestors say
		case endDeadline, endIdle:
			// A context canceled with the same cause: what context.Cause
			// reads it from. Made when asked, which only a cut's
			// error path does.
			cc, cancel := context.WithCancelCause(context.Background())
			cancel(c.cut())
			return cc
		case endParent:
			return c.parent.Value(key)
		}
		return nil // released: the cause is Err, context.Canceled
	}
	return c.parent.Value(key)
}

// AfterFunc arranges for f to run once the context is done (at once, on
// its own goroutine, if it is done already). The returned stop reports
// whether it kept f from running. It makes the context an afterFuncer, so
// context.WithCancel(c) follows c without a goroutine; net/http derives
// such a context for every HTTP/1 request.
func (c *boundCtx) AfterFunc(f func()) (stop func() bool) {
	if stop = c.register(f, true); stop == nil {
		go f()
		stop = func() bool { return false }
	}
	return stop
}

// follow is AfterFunc for a bound beneath this one, which makes this one
// watch only once something watches that one. It returns nil, and
// arranges nothing, when the context is done already.
func (c *boundCtx) follow(f func()) (stop func() bool) {
	return c.register(f, false)
}

// register adds f to the functions run when the context ends, unless it
// has ended (then it returns nil); with watch, it starts the timer.
func (c *boundCtx) register(f func(), watch bool) (stop func() bool) {
	c.Err() // a deadline that passed unseen, here or up the chain, ends it first
	c.mu.Lock()
	if c.ended() != live {
		c.mu.Unlock()
		return nil
	}
	if watch {
		c.watchLocked()
	}
	c.nextID++
	if c.nextID == 0 { // 0 marks an empty c.after
		c.nextID = 1
	}
	id := c.nextID
	if e := (afterEntry{id: id, f: f}); c.after.id == 0 {
		c.after = e
	} else {
		if c.more == nil {
			c.more = new([]afterEntry)
		}
		*c.more = append(*c.more, e)
	}
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.after.id == id {
			c.after = afterEntry{}
			return true
		}
		if c.more == nil {
			return false
		}
		for i, e := range *c.more {
			if e.id == id {
				*c.more = append((*c.more)[:i], (*c.more)[i+1:]...)
				return true
			}
		}
		return false
	}
}

func (c *boundCtx) String() string { return "transport.boundCtx" }

// end makes the context done, as k says, unless it is done already; it
// reports whether it did.
func (c *boundCtx) end(k endKind) bool {
	c.mu.Lock()
	s := c.state.Load()
	if s&endMask != live {
		c.mu.Unlock()
		return false
	}
	c.state.Store(s | k)
	if s&doneMade != 0 {
		close(c.done)
	} // else Done, asked later, finds it ended and returns closedChan
	if c.timer != nil {
		c.timer.Stop()
	}
	c.dlArmed, c.idleArmed = false, false
	first, more := c.after, c.more
	c.after, c.more = afterEntry{}, nil
	stop := c.stop
	c.mu.Unlock()
	if stop != nil && k != endParent {
		stop()
	}
	if first.id != 0 {
		first.f()
	}
	if more != nil {
		for _, e := range *more {
			e.f()
		}
	}
	return true
}

// settle ends the context if its deadline has passed unseen (nothing
// watched it, so no timer ran), and returns the cut that ended it, if
// any: what a failure is blamed on.
func (c *boundCtx) settle() error {
	c.mu.Lock()
	lapsed := c.ahead&aheadLapsed != 0 && c.ended() == live
	c.ahead &^= aheadLapsed
	c.mu.Unlock()
	if lapsed {
		c.end(endDeadline) // a failure after the deadline lapsed is the deadline's
	}
	c.Err()
	return c.cut()
}

// release ends the context once its work is over (the body is read or
// closed, or the round trip failed). It returns the cut that ended the
// context before, if any.
func (c *boundCtx) release() error {
	if c.ended() == live && c.end(endReleased) {
		return nil
	}
	return c.cut()
}

// cut returns the *DeadlineError that ended the context, or nil.
func (c *boundCtx) cut() error {
	switch c.ended() {
	case endDeadline:
		return c.b.dlErr
	case endIdle:
		return c.b.idleErr
	}
	return nil
}

// bodyStarts says that the response body is now being handed out: the
// deadline stays armed when keep is set and is disarmed otherwise; the
// idle watch starts when idle is set.
func (c *boundCtx) bodyStarts(keep, idle bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended() != live {
		return
	}
	if !keep {
		c.dlArmed = false
	}
	// A deadline that lapsed while held (see releaseDeadline) cuts a body
	// it bounds at once, and nothing else.
	c.ahead &^= aheadLapsed
	if idle {
		c.idleArmed = true
		c.seen = uint32(c.activity.Load())
	}
	if c.watched {
		now := clockNow()
		if idle {
			c.quiet = now
		}
		c.rearmLocked(now)
	}
}

// rearmLocked sets the timer for the next thing it must check: the
// deadline, or the next idle tick, whichever comes first; it stops it
// when nothing is armed. It is called only once the context is watched.
func (c *boundCtx) rearmLocked(now time.Duration) {
	var next time.Duration = -1
	if c.idleArmed {
		next = c.b.tick
	}
	if c.dlArmed && c.ahead&aheadLapsed == 0 {
		if d := c.due() - now; next < 0 || d < next {
			next = max(d, 0)
		}
	}
	switch {
	case next >= 0 && c.timer == nil:
		c.timer = time.AfterFunc(next, c.tick)
	case next >= 0:
		c.timer.Reset(next)
	case c.timer != nil:
		c.timer.Stop()
	}
}

// tick runs on the timer's goroutine: it cuts the context when its
// deadline has passed or its body has been blocked in Read for the idle
// limit, and otherwise sets the next tick.
func (c *boundCtx) tick() {
	now := clockNow()
	c.mu.Lock()
	if c.ended() != live {
		c.mu.Unlock()
		return
	}
	cut := live
	switch {
	case c.dlArmed && c.ahead&aheadLapsed == 0 && now >= c.due():
		cut = endDeadline
	case c.idleArmed:
		// Progress, or the caller is not waiting on the body. (The low
		// 32 bits could come round to the same value only if 2^31 Reads
		// returned between two ticks.)
		a := c.activity.Load()
		if uint32(a) != c.seen || a%2 == 0 {
			c.seen, c.quiet = uint32(a), now
		} else if now-c.quiet >= c.b.idle {
			cut = endIdle
		}
	}
	if cut == live {
		c.rearmLocked(now)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.end(cut)
}

// startOf returns when the operation of ctx began, on the bounds' clock:
// read off the bound above when there is one (the clock read it made
// when it started), else off the clock.
func startOf(ctx context.Context) time.Duration {
	if c, ok := ctx.(*boundCtx); ok && c.b.d > 0 {
		return c.begun // written only before the context is shared
	}
	return clockNow()
}

// clockBase anchors the bounds' clock: clockNow is the time since it,
// which reads only the monotonic clock (time.Now reads the wall clock
// too, and costs twice as much). Inside a testing/synctest bubble, whose
// times carry no monotonic reading, the same arithmetic runs on the
// bubble's wall clock: readings stay consistent with each other and with
// the bubble's time.Now.
var clockBase = time.Now()

// clockNow reads the bounds' clock.
func clockNow() time.Duration { return time.Since(clockBase) }

// clockTime turns a clockNow reading into a time.
func clockTime(d time.Duration) time.Time { return clockBase.Add(d) }

// clockOf turns a time into a clockNow reading.
func clockOf(t time.Time) time.Duration { return t.Sub(clockBase) }
