package ratelimit

import (
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// sameWindow is how far apart two resets may be and still be taken for
// the same window: servers that send delta seconds round them, so one
// window's reset moves by up to a second from response to response.
const sameWindow = time.Second

// releaseAfterPause is how long after a pause ends that arriving requests
// are spread even though they did not wait here.
const releaseAfterPause = time.Second

// awaitNewsMax bounds a wait for the first response of a new window
// whose reset is not known yet; past it, the request goes anyway.
const awaitNewsMax = time.Second

// Tracker keeps the rate-limit quota of each host (or each key, see
// [Options.Key]) from the responses it has seen, and holds requests back
// when the quota is spent:
//
//   - [Tracker.Observe] records the quota each response reports (see
//     [ParseHeaders]).
//   - [Tracker.Pause] records a server-asked pause (a 429 or 503 with
//     Retry-After): every request to the key waits until it ends, all on
//     the same clock.
//   - [Tracker.Wait], called before each request, returns at once when
//     the key has room. When Remaining is at or below [Options.Reserve]
//     and the reset is ahead, it waits until the reset; during a pause, it
//     waits until the pause ends. Requests that waited are then let go
//     through a token bucket at the quota's rate (Limit per Window; 20 per
//     second when the quota does not say), so they do not all arrive in
//     the same millisecond.
//
// Between responses, a Tracker counts the requests it lets through
// against the last Remaining it saw, so that many goroutines sharing a
// quota stop at its end instead of each learning about it from a 429. When
// a window ends and the server has not said when the next one ends,
// requests beyond Limit wait (at most a second) for a response of the new
// window to tell.
//
// A wait that cannot end before the request's context deadline or
// [Options.MaxWait] is not started: Wait returns a [*QuotaError] at once.
// Cancelling the context ends every wait at once.
//
// A Tracker starts no goroutines. It is safe for use by multiple
// goroutines; keys that have sent no quota headers cost one map lookup
// under a read lock. Each request that Wait lets through should be
// followed by one call to Observe, with the response's headers or nil.
type Tracker struct {
	o     Options
	mu    sync.RWMutex
	hosts map[hostKey]*host
	// waitingNews counts the hosts whose requests wait for news, so
	// that a response without quota headers costs no lookup otherwise.
	waitingNews atomic.Int32
	// evictFailed is when an eviction last found no room (t.mu held):
	// while every host is busy, new keys go untracked for a second
	// rather than each paying a scan of every host.
	evictFailed time.Time
}

// hostKey is the map key of a host: the request URL's scheme and host for
// the default key, kept apart so that no string is built per request; the
// custom key in host, with an empty scheme, for Options.Key.
type hostKey struct{ scheme, host string }

func (k hostKey) String() string {
	if k.scheme == "" {
		return k.host
	}
	return k.scheme + "://" + k.host
}

// NewTracker returns a Tracker with options o.
func NewTracker(o Options) *Tracker {
	return &Tracker{o: o, hosts: make(map[hostKey]*host)}
}

// host is the quota state of one key.
type host struct {
	lastUsed atomic.Int64 // unix nanoseconds
	waiters  atomic.Int32

	mu        sync.Mutex
	limit     int // Unknown when not known
	remaining int // counted down as requests go; Unknown when not known
	reset     time.Time
	window    time.Duration
	policy    string
	family    Family
	pause     time.Time // end of a server-asked pause
	// awaiting is set when a window ended with no known next reset;
	// sentSinceRoll counts the requests let through since.
	awaiting      bool
	sentSinceRoll int
	news          chan struct{} // closed by the next Observe or Pause
	release       *rate.Limiter // spreads requests released by a wait
	releaseUntil  time.Time     // requests arriving before this join the spread
	client        *rate.Limiter // Options.Rate; nil when off
}

func (t *Tracker) key(r *http.Request) hostKey {
	if t.o.Key != nil {
		return hostKey{host: t.o.Key(r)}
	}
	if r.URL == nil {
		return hostKey{}
	}
	return hostKey{scheme: r.URL.Scheme, host: r.URL.Host}
}

// lookup returns the state of k, creating it when create is set. It
// returns nil when k is not tracked (and create is unset, or every
// tracked key is busy).
func (t *Tracker) lookup(k hostKey, create bool, now time.Time) *host {
	t.mu.RLock()
	h := t.hosts[k]
	t.mu.RUnlock()
	if h == nil && create {
		h = t.insert(k, now)
	}
	if h != nil {
		h.touch(now)
	}
	return h
}

// touch records that h is in use at now, for eviction. It writes at
// most once a second, so that parallel requests share the cache line
// read-only.
func (h *host) touch(now time.Time) {
	n := now.UnixNano()
	if n-h.lastUsed.Load() > int64(time.Second) {
		h.lastUsed.Store(n)
	}
}

func (t *Tracker) insert(k hostKey, now time.Time) *host {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h := t.hosts[k]; h != nil {
		return h
	}
	if len(t.hosts) >= t.o.maxHosts() {
		if now.Sub(t.evictFailed) < time.Second {
			return nil
		}
		if !t.evict(now) {
			t.evictFailed = now
			return nil
		}
	}
	h := &host{limit: Unknown, remaining: Unknown}
	h.lastUsed.Store(now.UnixNano())
	if t.o.Rate > 0 {
		h.client = rate.NewLimiter(t.o.Rate, t.o.burst())
	}
	t.hosts[k] = h
	return h
}

// evict drops idle hosts, least recently used first, until a tenth of
// MaxHosts is free. It reports whether there is room for one more.
// t.mu is held.
func (t *Tracker) evict(now time.Time) bool {
	type cand struct {
		k    hostKey
		used int64
	}
	var idle []cand
	for k, h := range t.hosts {
		if h.idle(now, t.o.Reserve) {
			idle = append(idle, cand{k, h.lastUsed.Load()})
		}
	}
	slices.SortFunc(idle, func(a, b cand) int {
		switch {
		case a.used < b.used:
			return -1
		case a.used > b.used:
			return 1
		}
		return 0
	})
	limit := t.o.maxHosts()
	target := limit - limit/10
	for _, c := range idle {
		if len(t.hosts) < target {
			break
		}
		h := t.hosts[c.k]
		h.mu.Lock()
		t.closeNews(h)
		h.mu.Unlock()
		delete(t.hosts, c.k)
	}
	return len(t.hosts) < limit
}

// idle reports whether dropping h loses nothing that holds a request
// back: no waiter, no pause, no exhausted window ahead, no spread of
// released requests, no request awaiting news of a new window. A window
// with quota left is not worth keeping a host for: the next response says
// it again.
func (h *host) idle(now time.Time, reserve int) bool {
	if h.waiters.Load() > 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	exhausted := h.remaining != Unknown && h.remaining <= reserve && now.Before(h.reset)
	return !now.Before(h.pause) && !exhausted && !now.Before(h.releaseUntil) && h.news == nil
}

// Wait blocks until r may be sent to its key, as the [Tracker] doc
// describes. It returns nil when r may go; a [*QuotaError] (matching
// [ErrQuotaExhausted]) when the wait would not end before r's context
// deadline or [Options.MaxWait]; r's context error when the context ends
// during the wait.
func (t *Tracker) Wait(r *http.Request) error {
	k := t.key(r)
	t.mu.RLock()
	h := t.hosts[k]
	t.mu.RUnlock()
	if h == nil && t.o.Rate <= 0 {
		return nil // the common case: nothing known, nothing to count
	}
	now := time.Now()
	if h == nil {
		if h = t.insert(k, now); h == nil {
			return nil
		}
	}
	h.touch(now)
	w := waiter{t: t, r: r, k: k, h: h, start: now}
	if h.client != nil && !h.client.AllowN(now, 1) {
		if err := w.clientRate(); err != nil {
			return err
		}
	}
	return w.admit()
}

// waiter is one request going through Wait.
type waiter struct {
	t     *Tracker
	r     *http.Request
	k     hostKey
	h     *host
	start time.Time
}

// verdict is what the state of a host says to one request.
type verdict struct {
	until  time.Time         // wait until then, unless zero
	reason string            // why; "" means go
	news   chan struct{}     // ReasonAwaitQuota: wait for this to close
	res    *rate.Reservation // ReasonReleaseRate: the reservation held
}

func (w *waiter) admit() error {
	waited, spread, giveUp := false, false, false
	for {
		now := time.Now()
		v := w.h.decide(w.t, now, w.t.o.Reserve, waited, spread, giveUp)
		switch v.reason {
		case "":
			return nil
		case ReasonAwaitQuota:
			if err := w.awaitNews(now, v.news); err != nil {
				return err
			}
			giveUp = true // one round of news at most; then go on what is known
			continue
		case ReasonReleaseRate:
			if err := w.sleep(now, v.until, v.reason, v.res); err != nil {
				return err
			}
			spread = true
			continue
		}
		if err := w.sleep(now, v.until, v.reason, nil); err != nil {
			return err
		}
		waited, spread = true, false
	}
}

// decide applies the host's state to a request at now: it either lets
// the request go (and counts it) or says how long to wait. waited asks
// for a place in the release spread, for a request that has waited;
// spread says it has had its place already; giveUp, that it has waited
// for news of a new window once already.
func (h *host) decide(t *Tracker, now time.Time, reserve int, waited, spread, giveUp bool) verdict {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now.Before(h.pause) {
		return verdict{until: h.pause, reason: ReasonRetryAfter}
	}
	if !h.reset.IsZero() && !now.Before(h.reset) {
		h.roll(now)
	}
	if h.remaining != Unknown && h.remaining <= reserve {
		if !h.reset.IsZero() {
			return verdict{until: h.reset, reason: ReasonQuota}
		}
		if h.awaiting && h.sentSinceRoll > 0 && !giveUp {
			if h.news == nil {
				h.news = make(chan struct{})
				t.waitingNews.Add(1)
			}
			return verdict{reason: ReasonAwaitQuota, news: h.news}
		}
	}
	// Requests that waited here, that arrive while others are being
	// spread, or that arrive in the second after a pause ended (they
	// waited elsewhere, say in a retry layer that read the same
	// Retry-After) take a place in the spread.
	if !spread && (waited || now.Before(h.releaseUntil) || now.Sub(h.pause) < releaseAfterPause) {
		lim := h.releaseLimit()
		if h.release == nil {
			h.release = rate.NewLimiter(lim, 1)
		} else if h.release.Limit() != lim {
			h.release.SetLimitAt(now, lim)
		}
		res := h.release.ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 {
			if until := now.Add(d); until.After(h.releaseUntil) {
				h.releaseUntil = until
			}
			return verdict{until: now.Add(d), reason: ReasonReleaseRate, res: res}
		}
	}
	if h.remaining > 0 {
		h.remaining--
	}
	if h.awaiting {
		h.sentSinceRoll++
	}
	return verdict{}
}

// roll starts the next window once the reset has passed: Remaining is
// whole again. The next reset is one Window later when the window is
// known; otherwise it is unknown until a response says.
func (h *host) roll(now time.Time) {
	h.remaining = h.limit
	if h.window > 0 {
		n := now.Sub(h.reset)/h.window + 1
		h.reset = h.reset.Add(n * h.window)
		return
	}
	h.reset = time.Time{}
	h.awaiting, h.sentSinceRoll = true, 0
}

// releaseLimit is the rate at which requests that waited are let go: the
// quota's own rate when known, else DefaultReleaseRate.
func (h *host) releaseLimit() rate.Limit {
	if h.limit > 0 && h.window > 0 {
		return rate.Limit(float64(h.limit) / h.window.Seconds())
	}
	return DefaultReleaseRate
}

// budget returns the latest time a wait may end: start+MaxWait, or the
// request's deadline if sooner. ok is false when no wait is allowed.
func (w *waiter) budget() (limit time.Time, strict bool, ok bool) {
	mw := w.t.o.maxWait()
	if mw < 0 {
		return time.Time{}, false, false
	}
	limit = w.start.Add(mw)
	if d, has := w.r.Context().Deadline(); has && !d.After(limit) {
		return d, true, true
	}
	return limit, false, true
}

// sleep waits until until, or fails fast when that is past the budget.
// res, when set, is cancelled if the wait does not happen.
func (w *waiter) sleep(now, until time.Time, reason string, res *rate.Reservation) error {
	d := until.Sub(now)
	if d <= 0 {
		return nil
	}
	limit, strict, ok := w.budget()
	if !ok || until.After(limit) || (strict && !until.Before(limit)) {
		if res != nil {
			res.CancelAt(now)
		}
		return w.reject(d, until, reason)
	}
	if f := w.t.o.OnWait; f != nil {
		f(WaitEvent{Request: w.r, Key: w.k.String(), Wait: d, Reason: reason})
	}
	w.h.waiters.Add(1)
	defer w.h.waiters.Add(-1)
	timer := time.NewTimer(d)
	defer timer.Stop()
	ctx := w.r.Context()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		if res != nil {
			res.Cancel()
		}
		return ctx.Err()
	}
}

// awaitNews waits for the next response of the key, at most
// awaitNewsMax, and not at all when the request's deadline is nearer.
func (w *waiter) awaitNews(now time.Time, news <-chan struct{}) error {
	limit, _, ok := w.budget()
	if !ok || limit.Sub(now) <= awaitNewsMax {
		return nil
	}
	if f := w.t.o.OnWait; f != nil {
		f(WaitEvent{Request: w.r, Key: w.k.String(), Reason: ReasonAwaitQuota})
	}
	w.h.waiters.Add(1)
	defer w.h.waiters.Add(-1)
	timer := time.NewTimer(awaitNewsMax)
	defer timer.Stop()
	ctx := w.r.Context()
	select {
	case <-news:
		return nil
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// clientRate waits for the client-side limiter.
func (w *waiter) clientRate() error {
	now := time.Now()
	res := w.h.client.ReserveN(now, 1)
	if !res.OK() {
		return w.reject(w.t.o.maxWait(), now.Add(w.t.o.maxWait()), ReasonClientRate)
	}
	d := res.DelayFrom(now)
	return w.sleep(now, now.Add(d), ReasonClientRate, res)
}

func (w *waiter) reject(d time.Duration, until time.Time, reason string) error {
	err := &QuotaError{Key: w.k.String(), Reset: until, Wait: d, Reason: reason}
	if f := w.t.o.OnReject; f != nil {
		f(RejectEvent{Request: w.r, Key: err.Key, Wait: d, Reason: reason, Err: err})
	}
	return err
}

// Observe records the quota that the response headers h of request r
// report (see [ParseHeaders]), read at the current time. Call it once for
// each request that [Tracker.Wait] let through; h is nil when the request
// got no response.
func (t *Tracker) Observe(r *http.Request, h http.Header) {
	seen := scan(h)
	if seen == 0 && t.waitingNews.Load() == 0 {
		return // the common case: no quota headers, nobody waiting for them
	}
	now := time.Now()
	q, ok := parseSeen(h, seen, now)
	st := t.lookup(t.key(r), ok, now)
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	t.closeNews(st)
	if ok {
		st.update(q, now)
	}
}

// closeNews wakes the requests waiting for news of h. h.mu is held.
func (t *Tracker) closeNews(h *host) {
	if h.news != nil {
		close(h.news)
		h.news = nil
		t.waitingNews.Add(-1)
	}
}

// update merges a quota read from a response into the host's state.
func (h *host) update(q Quota, now time.Time) {
	if q.Limit != Unknown {
		h.limit = q.Limit
	}
	if q.Window > 0 {
		h.window = q.Window
		if h.client != nil && q.Limit != Unknown {
			if r := rate.Limit(float64(q.Limit) / q.Window.Seconds()); h.client.Limit() != r {
				h.client.SetLimitAt(now, r)
			}
		}
	}
	h.family = q.Family
	if q.Remaining == Unknown {
		return
	}
	switch {
	case !q.Reset.IsZero() && !q.Reset.After(now):
		// The window it describes is over: its Remaining is stale.
	case h.reset.IsZero():
		// The first news of this window (or of this host). After a
		// roll, the requests let through since count too.
		if h.awaiting {
			h.remaining = minKnown(h.remaining, q.Remaining)
		} else {
			h.remaining = q.Remaining
		}
		h.reset = q.Reset
		h.policy = q.Policy
		if !q.Reset.IsZero() {
			h.awaiting = false
		}
	case q.Policy != h.policy || q.Reset.Sub(h.reset) > sameWindow:
		// The server has moved to another window or quota.
		h.reset, h.remaining, h.policy = q.Reset, q.Remaining, q.Policy
	default:
		// The same window: what the server saw and what has gone since.
		h.remaining = minKnown(h.remaining, q.Remaining)
		if q.Reset.After(h.reset) {
			h.reset = q.Reset
		}
	}
}

func minKnown(a, b int) int {
	if a == Unknown {
		return b
	}
	return min(a, b)
}

// Pause holds every request to r's key until until, as a server's
// Retry-After asks: requests already waiting wait longer, and new ones
// wait too. A pause never shortens one already in force. A pause more
// than 400 days ahead is taken for garbage and ignored, as ParseHeaders
// ignores such resets.
func (t *Tracker) Pause(r *http.Request, until time.Time) {
	now := time.Now()
	if !until.After(now) || until.Sub(now) > maxReset {
		return
	}
	h := t.lookup(t.key(r), true, now)
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if until.After(h.pause) {
		h.pause = until
	}
	t.closeNews(h)
}

// Quota returns the state tracked for r's key: the last quota its
// responses reported, with Remaining counted down by the requests let
// through since. It reports false when the key has no quota state.
func (t *Tracker) Quota(r *http.Request) (Quota, bool) {
	t.mu.RLock()
	h := t.hosts[t.key(r)]
	t.mu.RUnlock()
	if h == nil {
		return Quota{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.limit == Unknown && h.remaining == Unknown {
		return Quota{}, false
	}
	return Quota{
		Limit: h.limit, Remaining: h.remaining, Reset: h.reset,
		Window: h.window, Policy: h.policy, Family: h.family,
	}, true
}

// Paused returns the end of the server-asked pause of r's key, and
// whether one is in force at now.
func (t *Tracker) Paused(r *http.Request, now time.Time) (time.Time, bool) {
	t.mu.RLock()
	h := t.hosts[t.key(r)]
	t.mu.RUnlock()
	if h == nil {
		return time.Time{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pause, now.Before(h.pause)
}

// Len returns the number of keys tracked.
func (t *Tracker) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.hosts)
}
