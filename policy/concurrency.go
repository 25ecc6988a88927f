package policy

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// ReasonConcurrencyLimit: a host's adaptive concurrency limit was full
// and the request's time did not allow it to wait for a slot; it was
// refused unsent.
const ReasonConcurrencyLimit Reason = "concurrency limit"

// Defaults of [Concurrency], used where a field is zero.
const (
	DefaultConcurrencyInitial   = 20
	DefaultConcurrencyMin       = 2
	DefaultConcurrencyMax       = 1000
	DefaultConcurrencyTolerance = 1.5
	DefaultConcurrencyBackoff   = 0.9
	DefaultConcurrencyHealthy   = 30 * time.Second
)

// MaxConcurrencyLimit is the highest limit a [ConcurrencyLimit] holds,
// whatever Concurrency.Max says.
const MaxConcurrencyLimit = 4000

// Concurrency is the rule that bounds the requests in flight to one host
// and learns the bound from what the host does. It is a gradient on an
// absolute healthy latency, with multiplicative decrease on losses:
//
//   - The reference is the lowest mean latency of a window (at least
//     two reference latencies long, and 16 outcomes unless it lasts 10s)
//     the host has shown. It falls at once
//     to a lower window mean. It rises only after Healthy has passed
//     with no loss and no request finding the limit full; so in a long
//     incident, while the host is slow and the limit is pressed, it stays
//     where the healthy host put it and the limit keeps falling.
//   - At the end of each window, a loss (a timeout, a 5xx, a 429, an
//     error) multiplies the limit by Backoff, once for the window.
//   - Otherwise the limit moves toward limit×gradient + √limit, where
//     gradient is Tolerance×reference÷(the window's mean latency),
//     at most 1 and at least 1/2. The √limit of headroom is added only
//     when the window had evidence of need: as many requests in flight
//     at once as half the limit, or a request that found the limit full.
//     So latency past Tolerance times the healthy level lowers the limit,
//     and a limit that is not used never grows.
//   - While the host keeps up (no window with a loss or a gradient under
//     1 for Healthy, or ever), the second window in a row in which a
//     request found the limit full and whose mean stayed within half the
//     tolerance of the reference doubles the limit instead. A strain in
//     the next window undoes the doubling, and none is tried again until
//     the host has kept up for Healthy.
//   - Outcomes that say nothing of the host (a cancel, a hedge that lost,
//     a layer's refusal) are not counted at all. A stream
//     ([ConcurrencyUntimed]) counts as an outcome with no latency.
//
// The zero value is ready to use with the documented defaults. The
// transport keeps one [ConcurrencyLimit] per host, made with
// [Concurrency.NewLimit]. docs/concurrency.md tells how the rule was
// chosen, with the measurements.
type Concurrency struct {
	// Initial is the limit of a host before anything is learnt. Zero
	// means [DefaultConcurrencyInitial] (20).
	Initial int
	// Min is the lowest limit. Zero means [DefaultConcurrencyMin] (2).
	Min int
	// Max is the highest limit, at most [MaxConcurrencyLimit]. Zero means
	// [DefaultConcurrencyMax] (1,000).
	Max int
	// Tolerance is how many times its healthy latency a host may take
	// before the limit falls. Zero or less than 1 means
	// [DefaultConcurrencyTolerance] (1.5).
	Tolerance float64
	// Backoff is what a window with a loss multiplies the limit by, in
	// (0, 1). Zero or out of range means [DefaultConcurrencyBackoff]
	// (0.9).
	Backoff float64
	// Healthy is how long a host must go with no loss and no request
	// finding its limit full before its healthy latency may rise, and
	// with no strain before its limit may double again. Zero or less
	// means [DefaultConcurrencyHealthy] (30s).
	Healthy time.Duration
}

// ConcurrencyOutcome is what an attempt teaches a [ConcurrencyLimit].
type ConcurrencyOutcome uint8

const (
	// ConcurrencyIgnored teaches nothing: the caller canceled, a hedge
	// lost, a layer refused the request, or net/http proved the server
	// did not process it.
	ConcurrencyIgnored ConcurrencyOutcome = iota
	// ConcurrencyServed is a response the host served; its latency is a
	// sample.
	ConcurrencyServed
	// ConcurrencyUntimed is a response served whose latency says nothing
	// of the host's load (a stream timed to its first event).
	ConcurrencyUntimed
	// ConcurrencyLoss is a timeout, a 5xx, a 429 or an error of the host.
	ConcurrencyLoss
)

// ConcurrencyOutcomeOf returns what the attempt that v judged teaches:
// status is its response's status (0 for none), canceled whether its
// caller canceled it or a hedge that won did. A timeout, the stack's or
// the caller's, is a loss ([Verdict].Lost).
func ConcurrencyOutcomeOf(v Verdict, status int, canceled bool) ConcurrencyOutcome {
	switch {
	case canceled || v.Refusal != "":
		return ConcurrencyIgnored
	case status != 0:
		if !v.Accepted { // a 5xx or a 429, as Judge says
			return ConcurrencyLoss
		}
		return ConcurrencyServed
	case v.Lost || v.Host == HostFailing:
		return ConcurrencyLoss
	}
	return ConcurrencyIgnored
}

// The word of a ConcurrencyLimit packs what the success path changes, so
// that taking a slot is one atomic add and giving it back with a latency
// sample another: bits 0-12 hold the requests in flight (room above
// MaxConcurrencyLimit for adds that race past the limit and are undone),
// bits 13-21 the samples of the window, bits 22-57 the samples' sum in
// units of 4µs, and bits 58-63 a ticket that each Acquire turns in the
// same add (it picks the attempts that are timed; its carry leaves the
// word).
const (
	flightBits  = 13
	flightMask  = 1<<flightBits - 1
	countShift  = flightBits
	countMask   = 1<<9 - 1
	sumShift    = 22
	ticketShift = 58
	ticketMask  = 63 << ticketShift
	acquireOne  = 1<<ticketShift + 1 // adding it turns the ticket and adds one to the flight
	maxSparse   = 63                 // one attempt in 64 timed at the least
	sumUnit     = 4 * time.Microsecond
	maxSamples  = 256                                         // a window closes at this many samples; more are not counted
	minSamples  = 16                                          // and, before maxWindowNS, not with fewer
	maxSample   = (1<<(ticketShift-sumShift) - 1) / countMask // the longest sample, in sumUnits (537s), so the sum cannot overflow
	releaseOne  = 1<<countShift - 1                           // adding it takes one from the flight and adds one to the count
	minWindowNS = int64(time.Millisecond)                     // the shortest window
	maxWindowNS = int64(10 * time.Second)                     // the longest window
	noReference = int64(math.MaxInt64 / 2)                    // the reference before any sample
	noStrain    = math.MinInt64 / 2                           // strained before any strain
)

// ConcurrencyLimit is one host's limit and its requests in flight. Make
// it with [Concurrency.NewLimit]. It is safe for concurrent use by
// multiple goroutines; [ConcurrencyLimit.Acquire] and
// [ConcurrencyLimit.Release] take no lock unless a window ends.
type ConcurrencyLimit struct {
	word    atomic.Uint64
	limit   atomic.Int64
	startAt atomic.Int64  // when the window started, in nanoseconds since epoch
	width   atomic.Int64  // how long it lasts at the least, in nanoseconds
	half    atomic.Int64  // in flight at once that shows the limit is used: half the exact limit, rounded up
	busy    atomic.Bool   // as many as half were in flight at once in the window
	pressed atomic.Bool   // a request found the limit full in the window
	eager   atomic.Bool   // no strain seen for Healthy: the limit, not the host, is what is short
	untimed atomic.Uint64 // streams held to their first event that ended in the window
	sparse  atomic.Uint64 // one attempt in sparse+1 is timed: a mask of the ticket

	mu       sync.Mutex // held while a window ends and while a loss is counted
	c        Concurrency
	epoch    time.Time
	losses   int     // in the window
	strained int64   // when a window last had a loss or a latency past Tolerance; noStrain: never
	grew     float64 // the limit before the last window's doubling; 0: the last window did not double it
	short    int     // windows in a row in which the limit was short and the host kept up
	ref      int64   // the healthy latency, in nanoseconds
	calm     int64   // the start of the current calm (no loss, limit not full)
	calmMin  int64   // the lowest window mean in the calm
	exact    float64 // the limit before rounding
}

// NewLimit returns a host's limit, starting at Initial, its clock started
// at now.
func (c *Concurrency) NewLimit(now time.Time) *ConcurrencyLimit {
	l := &ConcurrencyLimit{c: c.normal(), epoch: now, ref: noReference, calmMin: noReference, strained: noStrain}
	l.eager.Store(true)
	l.exact = float64(l.c.Initial)
	l.limit.Store(int64(l.c.Initial))
	l.half.Store(int64(math.Ceil(l.exact / 2)))
	l.width.Store(minWindowNS)
	return l
}

// normal returns c with its defaults filled in and its bounds ordered.
func (c *Concurrency) normal() Concurrency {
	n := Concurrency{}
	if c != nil {
		n = *c
	}
	if n.Max <= 0 {
		n.Max = DefaultConcurrencyMax
	}
	n.Max = min(n.Max, MaxConcurrencyLimit)
	if n.Min <= 0 {
		n.Min = DefaultConcurrencyMin
	}
	n.Min = min(n.Min, n.Max)
	if n.Initial <= 0 {
		n.Initial = DefaultConcurrencyInitial
	}
	n.Initial = min(max(n.Initial, n.Min), n.Max)
	if !(n.Tolerance >= 1) || math.IsInf(n.Tolerance, 0) {
		n.Tolerance = DefaultConcurrencyTolerance
	}
	if !(n.Backoff > 0 && n.Backoff < 1) {
		n.Backoff = DefaultConcurrencyBackoff
	}
	if n.Healthy <= 0 {
		n.Healthy = DefaultConcurrencyHealthy
	}
	return n
}

// Acquire takes a slot when fewer requests than the limit are in flight,
// and reports whether it did. Without contention it is one atomic add
// (an add that races past the limit is undone, and a slot then sought
// with a compare-and-swap); a limit found full costs no write. timed
// says whether the attempt should be timed: every one while a window
// sees few, one in up to 64 when it sees many, so that a busy host's
// requests do not all pay for reading the clock twice. An attempt not
// timed is released with [ConcurrencyUntimed] and a zero time, unless it
// is a loss.
func (l *ConcurrencyLimit) Acquire() (ok, timed bool) {
	limit := uint64(l.limit.Load())
	if l.word.Load()&flightMask >= limit {
		return false, false
	}
	w := l.word.Add(acquireOne) - acquireOne
	if w&flightMask >= limit {
		// Raced past the limit: undo, and take a slot only if one is
		// free once the races are undone, so that no slot stays free
		// while a request was refused for this add.
		l.word.Add(^uint64(0))
		if w, ok = l.acquireSlow(); !ok {
			return false, false
		}
	}
	return true, (w>>ticketShift)&l.sparse.Load() == 0
}

// acquireSlow takes a slot with a compare-and-swap, when the limit
// allows one, and returns the word it found.
func (l *ConcurrencyLimit) acquireSlow() (uint64, bool) {
	for {
		w := l.word.Load()
		if int64(w&flightMask) >= l.limit.Load() {
			return w, false
		}
		if l.word.CompareAndSwap(w, w+1) {
			return w, true
		}
	}
}

// Full records that a request found the limit full: it is evidence that
// the limit is used, and it ends a calm.
func (l *ConcurrencyLimit) Full() {
	if !l.pressed.Load() {
		l.pressed.Store(true)
	}
}

// Release gives back a slot taken by Acquire, with what its attempt
// taught: o, and for [ConcurrencyServed] the attempt's latency rtt. now
// is the time of its end; it may be zero for an attempt that was not
// timed (see [ConcurrencyLimit.Acquire]) and is no loss. It reports whether the limit changed, and from
// and to what. Without a window ending it is one atomic add.
func (l *ConcurrencyLimit) Release(now time.Time, rtt time.Duration, o ConcurrencyOutcome) (changed bool, from, to int) {
	var w uint64
	switch o {
	case ConcurrencyServed:
		if (l.word.Load()>>countShift)&countMask >= maxSamples {
			w = l.word.Add(^uint64(0)) // the window is full and about to end: the sample is not counted
			break
		}
		u := uint64(max(rtt, 0) / sumUnit)
		if u == 0 {
			u = 1 // a sample under the unit still counts
		}
		u = min(u, maxSample)
		w = l.word.Add(u<<sumShift + releaseOne)
		if int64(w&flightMask)+1 >= l.half.Load() && !l.busy.Load() {
			l.busy.Store(true) // once a window: a store per rise of a peak would be a locked write on the success path
		}
	case ConcurrencyLoss:
		l.word.Add(^uint64(0))
		l.mu.Lock()
		l.losses++
		l.mu.Unlock()
	default:
		w = l.word.Add(^uint64(0))
		if o == ConcurrencyIgnored || now.IsZero() {
			return false, 0, 0
		}
	}
	n := (w >> countShift) & countMask
	if o == ConcurrencyUntimed { // a stream timed to its first event: an outcome with no latency
		n += l.untimed.Add(1)
	}
	t := now.Sub(l.epoch).Nanoseconds()
	if o != ConcurrencyLoss && !l.due(t, n) {
		return false, 0, 0
	}
	if !l.mu.TryLock() {
		return false, 0, 0 // another request ends the window
	}
	defer l.mu.Unlock()
	return l.endWindow(t)
}

// Eager reports whether the host has kept up (no strain for Healthy, or
// ever), so that a request that finds the limit full may wait as long as
// its operation's time allows (see [ConcurrencyLimit.Wait]).
func (l *ConcurrencyLimit) Eager() bool { return l.eager.Load() }

// Limit returns the limit now.
func (l *ConcurrencyLimit) Limit() int { return int(l.limit.Load()) }

// InFlight returns the requests in flight now.
func (l *ConcurrencyLimit) InFlight() int { return int(l.word.Load() & flightMask) }

// Reference returns the healthy latency the limit is judged against; 0
// before any sample.
func (l *ConcurrencyLimit) Reference() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ref == noReference {
		return 0
	}
	return time.Duration(l.ref)
}

// due reports whether the window ends at t with n outcomes (samples and
// losses): when it has lasted two reference latencies and has at least
// minSamples of them, so that one slow request of a host whose requests
// differ is not a trend; or has lasted maxWindowNS; or has maxSamples.
func (l *ConcurrencyLimit) due(t int64, n uint64) bool {
	if n >= maxSamples {
		return true
	}
	age := t - l.startAt.Load()
	return age >= l.width.Load() && (n >= minSamples || age >= maxWindowNS)
}

// endWindow ends the window at t (since epoch) when it is due, and moves
// the limit as its samples and losses say. l.mu is held.
func (l *ConcurrencyLimit) endWindow(t int64) (changed bool, from, to int) {
	var count, sum, untimed uint64
	for {
		w := l.word.Load()
		count, sum = (w>>countShift)&countMask, (w&^ticketMask)>>sumShift
		untimed = l.untimed.Load()
		if !l.due(t, count+untimed+uint64(l.losses)) {
			return false, 0, 0 // not yet, or ended by another request meanwhile
		}
		if l.word.CompareAndSwap(w, w&(flightMask|ticketMask)) {
			break
		}
	}
	if untimed > 0 {
		l.untimed.Add(-untimed) // those that ended meanwhile count in the next window
	}
	losses, pressed, busy := l.losses, l.pressed.Load(), l.busy.Load()
	l.losses = 0
	if pressed { // a store only when it changes: each is a locked write
		l.pressed.Store(false)
	}
	if busy {
		l.busy.Store(false)
	}

	from = int(l.limit.Load())
	var mean int64
	if count > 0 {
		mean = int64(sum/count) * int64(sumUnit)
	}
	known := l.ref != noReference // before this window: a first window's mean is its own reference
	l.learnReference(t, mean, losses > 0 || pressed)
	c := &l.c
	g := 1.0 // a window of streams alone says nothing of latency
	if count > 0 {
		g = min(1, max(0.5, c.Tolerance*float64(l.ref)/float64(mean)))
	}
	strained := losses > 0 || g < 1
	if strained {
		l.strained = t
		if l.grew > 0 {
			l.exact = l.grew // the doubling overshot: undo it, then judge the window as usual
		}
	}
	eager := t-l.strained >= c.Healthy.Nanoseconds()
	l.grew = 0
	// The limit is short and the host keeps up: no strain for Healthy,
	// requests found the limit full, and the latency stayed within half
	// the tolerance of the healthy one (a window of streams alone has
	// none to judge).
	if eager && pressed && losses == 0 &&
		(count == 0 && untimed > 0 || count > 0 && known && float64(mean) <= float64(l.ref)*(1+(c.Tolerance-1)/2)) {
		l.short++
	} else {
		l.short = 0
	}
	switch {
	case losses > 0:
		l.exact *= c.Backoff
	case l.short >= 2:
		// Two such windows in a row (one could straddle the start of an
		// overload): double the limit; a strain in the next window
		// undoes the doubling.
		l.grew = l.exact
		l.exact *= 2
	case count > 0 || untimed > 0:
		target := l.exact * g
		if pressed || busy {
			target += math.Sqrt(l.exact)
		}
		l.exact = 0.8*l.exact + 0.2*target
	}
	if eager != l.eager.Load() {
		l.eager.Store(eager)
	}
	l.exact = min(max(l.exact, float64(c.Min)), float64(c.Max))
	to = int(math.Round(l.exact))
	if to != from {
		l.limit.Store(int64(to))
	}
	if h := int64(math.Ceil(l.exact / 2)); h != l.half.Load() {
		l.half.Store(h)
	}

	// Time one attempt in more when the window had many samples, in
	// fewer when it had few: between 16 and 64 samples a window.
	switch m := l.sparse.Load(); {
	case count > 64 && m < maxSparse:
		l.sparse.Store(m<<1 | 1)
	case count < 16 && m > 0:
		l.sparse.Store(m >> 1)
	}
	width := minWindowNS
	if l.ref != noReference {
		width = min(max(2*l.ref, minWindowNS), maxWindowNS)
	}
	l.startAt.Store(t)
	if width != l.width.Load() {
		l.width.Store(width)
	}
	return to != from, from, to
}

// learnReference moves the healthy latency with a window that ended at
// t with the mean latency mean (0: no sample); stressed says the window
// had a loss or found the limit full.
func (l *ConcurrencyLimit) learnReference(t, mean int64, stressed bool) {
	if mean > 0 && mean < l.ref {
		l.ref = mean // a lower latency is always healthy
	}
	if stressed || l.ref == noReference {
		l.calm, l.calmMin = t, noReference
		return
	}
	if mean > 0 {
		l.calmMin = min(l.calmMin, mean)
	}
	if t-l.calm >= l.c.Healthy.Nanoseconds() {
		if l.calmMin != noReference {
			l.ref = max(l.ref, l.calmMin) // a calm as long as Healthy may raise it
		}
		l.calm, l.calmMin = t, noReference
	}
}

// Wait decides whether a request that found l full may wait for a slot,
// and for how long. waiting is how many requests wait already; left is
// the time its operation has, when hasDeadline. While the host keeps up
// (no strain for Healthy: see [Concurrency]) the limit, not the host, is
// short: the request may wait while its operation would still have the
// healthy latency left (10s at most without a deadline), behind fewer
// than Max others. Once the host has strained, it may wait when fewer
// than the limit wait already (a queue that one round of the limit
// drains), for at most the healthy latency (a second before any is
// known), and only while its operation would still have the healthy
// latency left when the wait ends. ok false means it must be refused
// now.
func (l *ConcurrencyLimit) Wait(waiting int, left time.Duration, hasDeadline bool) (d time.Duration, ok bool) {
	ref := l.Reference()
	if l.eager.Load() {
		// The host has shown no strain for Healthy: the limit is short,
		// not the host, and it doubles after two windows that show it. Wait as
		// long as the operation's time allows.
		if waiting >= l.c.Max {
			return 0, false
		}
		d = time.Duration(maxWindowNS)
		if hasDeadline {
			d = min(d, left-ref)
		}
		return d, d > 0
	}
	if waiting >= l.Limit() {
		return 0, false
	}
	d = time.Second
	if ref > 0 {
		d = ref
	}
	if hasDeadline {
		d = min(d, left-ref)
	}
	return d, d > 0
}
