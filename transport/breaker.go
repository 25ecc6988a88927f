package transport

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/sturdyhttp/sturdy/policy"
)

// Defaults of [BreakerSettings], used where a field is zero.
const (
	DefaultBreakerFailures    = 5
	DefaultBreakerCooldown    = time.Second
	DefaultBreakerMaxCooldown = 30 * time.Second
	DefaultBreakerMinRequests = 20
	DefaultBreakerWindow      = 60 * time.Second
	DefaultBreakerMaxHosts    = 10000
	DefaultBreakerIdleTimeout = 10 * time.Minute
)

// ErrCircuitOpen is matched by errors.Is for every request that a
// [Breaker] refused to send: the breaker of its host was open, or it was
// half-open and all its probes were already taken. The error itself is a
// [*CircuitOpenError].
var ErrCircuitOpen = errors.New("transport: circuit open")

// BreakerSettings configures [Breaker]. The zero value is ready to use: it
// opens a host's breaker after 5 failures in a row, keeps it open for 1s,
// then lets 1 probe through; each failed probe doubles the open period, up
// to 30s, and a success closes the breaker.
//
// A failure is what IsFailure says; by default a transport error or a 5xx
// response. A 4xx response, 429 included, is not a failure: the host is
// healthy and answering (a rate limit is handled by [RateLimitAware]). A
// request that ends because the caller canceled it, or because the
// caller's own deadline (the request context's) passed, counts neither as
// a failure nor as a success: it says nothing about the host. A request
// that ran out of the time of a [Deadline] layer (a [*DeadlineError]), as
// [New]'s Timeout and AttemptTimeout are, is a failure: the host did not
// answer within what the stack allows it, so a host that hangs opens its
// breaker.
type BreakerSettings struct {
	// ConsecutiveFailures opens the breaker after this many failures in a
	// row. Zero means [DefaultBreakerFailures] (5), unless FailureRatio is
	// set: then zero means the breaker trips on the ratio alone.
	ConsecutiveFailures uint32

	// Cooldown is how long a breaker that opens refuses requests before
	// it turns half-open and lets probes through. When a probe fails, the
	// breaker opens again for twice as long as the last time, up to
	// MaxCooldown; when the probes succeed, it closes and the next opening
	// starts from Cooldown again. So callers see a short outage end within
	// about a second, while a host that stays down gets ever rarer
	// probes. Zero or negative means [DefaultBreakerCooldown] (1s).
	Cooldown time.Duration

	// MaxCooldown is the longest a breaker stays open. Zero or negative
	// means [DefaultBreakerMaxCooldown] (30s), or Cooldown if that is
	// longer; set it to Cooldown for a fixed open period.
	MaxCooldown time.Duration

	// HalfOpenRequests is how many probes a half-open breaker lets
	// through. When all of them succeed the breaker closes; the first
	// that fails opens it again, for twice as long as the last time (see
	// Cooldown). A probe canceled by
	// its caller frees its place. Zero means 1.
	HalfOpenRequests uint32

	// FailureRatio, when above zero, also opens the breaker when at least
	// MinRequests requests ended within the last Window and at least this
	// fraction of them failed (0.25 means a quarter), for hosts that fail
	// steadily but not in long runs. Zero means no ratio rule. A value
	// above 1 never trips.
	FailureRatio float64

	// MinRequests is how many requests must have ended within Window
	// before FailureRatio is applied. Zero means
	// [DefaultBreakerMinRequests] (20). Used only with FailureRatio.
	MinRequests uint32

	// Window is the rolling window over which FailureRatio is measured,
	// kept in ten buckets of Window/10 each. Zero or negative means
	// [DefaultBreakerWindow] (60s). Used only with FailureRatio; without
	// it, counts are kept until the breaker changes state.
	Window time.Duration

	// IsFailure decides whether a request's outcome counts against its
	// host; resp is nil when err is not. It is called once per request
	// that was sent, when RoundTrip returns (what happens while the body
	// is read is not counted), and not for requests the caller canceled
	// (see the type's doc). A response it calls a failure is still
	// returned to the caller, body intact. Nil means [DefaultIsFailure].
	IsFailure func(resp *http.Response, err error) bool

	// Key gives the breaker a request belongs to. A request for which it
	// returns "" bypasses the breakers. Nil means one breaker per scheme
	// and host (port included), as [HostKey] gives, computed without
	// allocating.
	Key func(*http.Request) string

	// OnStateChange, when set, is called on every change of a breaker's
	// state, with the breaker's key, for logs and metrics. It is called
	// synchronously while the breaker is locked: keep it short and do not
	// send requests from it. Nil means no hook.
	OnStateChange func(key string, from, to BreakerState)

	// MaxHosts bounds how many breakers are remembered. When a new key
	// would go over it, breakers unused since the last sweep are dropped,
	// then other closed ones, until an eighth of the room is free; an
	// open breaker is kept until its open period has passed. If none can
	// be dropped, the new key's requests pass through unguarded until
	// there is room. Zero or negative means [DefaultBreakerMaxHosts]
	// (10,000).
	MaxHosts int

	// IdleTimeout is how long a breaker may go unused before it is
	// dropped, to keep the map small; a dropped key starts again with a
	// new closed breaker. Breakers are swept when a new key is added, at
	// most once per IdleTimeout, and a sweep drops those not used since
	// the previous one, unless they are open (and their open period has
	// not passed). So while keys keep being added, an idle breaker goes
	// between one and two IdleTimeouts after its last use. Zero or
	// negative means [DefaultBreakerIdleTimeout] (10 min).
	IdleTimeout time.Duration
}

// DefaultIsFailure is the failure rule of the zero [BreakerSettings]: an
// error, or a response with a 5xx status.
func DefaultIsFailure(resp *http.Response, err error) bool {
	return err != nil || resp == nil || resp.StatusCode >= 500
}

// BreakerState is the state of one circuit breaker.
type BreakerState int

// The states of a circuit breaker.
const (
	// BreakerClosed: requests are sent and their outcomes counted.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: a few probes are sent to learn whether the host
	// has recovered; other requests are refused.
	BreakerHalfOpen
	// BreakerOpen: every request is refused until the cooldown ends.
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

func stateOf(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	case gobreaker.StateOpen:
		return BreakerOpen
	}
	return BreakerClosed
}

// CircuitOpenError is the error of a request that a [Breaker] refused to
// send. It matches [ErrCircuitOpen] with errors.Is, unwraps to
// gobreaker's ErrOpenState (open) or ErrTooManyRequests (half-open, all
// probes taken), and is not retriable: an open circuit is reported to the
// caller at once, not waited on.
type CircuitOpenError struct {
	// Key is the key of the breaker that refused, "https://api.example.com"
	// by default.
	Key string
	// State is BreakerOpen or BreakerHalfOpen.
	State BreakerState
	// RetryIn is how long until an open breaker lets a probe through; zero
	// when half-open, where a place frees up as soon as a probe ends.
	RetryIn time.Duration

	err error
}

// Error returns a one-line message that names the key and says when the
// breaker will try again.
func (e *CircuitOpenError) Error() string {
	if e.State == BreakerHalfOpen {
		return "transport: circuit half-open for " + e.Key + " (all probes in flight, retry when they end)"
	}
	return "transport: circuit open for " + e.Key + " (retry in " + e.RetryIn.Round(time.Millisecond).String() + ")"
}

// Is reports whether target is [ErrCircuitOpen].
func (e *CircuitOpenError) Is(target error) bool { return target == ErrCircuitOpen }

// Unwrap returns gobreaker's error: [gobreaker.ErrOpenState] or
// [gobreaker.ErrTooManyRequests].
func (e *CircuitOpenError) Unwrap() error { return e.err }

// Retriable returns false: the policy package's DefaultClassifier obeys it,
// so [Retry] does not retry a request refused by an open circuit.
func (e *CircuitOpenError) Retriable() bool { return false }

// Breaker returns a middleware that keeps a circuit breaker per host
// (github.com/sony/gobreaker/v2) and stops sending to a host that keeps
// failing. While a host's breaker is open, its requests are not sent: they
// fail at once with a [*CircuitOpenError] that matches [ErrCircuitOpen].
// After the cooldown, a few probes are let through; their success closes
// the breaker, a failure opens it again. See [BreakerSettings] for what
// counts as a failure and for the defaults.
//
// Breakers are created on first use of a key, one per key however many
// goroutines race for it, and dropped when idle so that a client talking
// to many hosts keeps a bounded map. Each call of the returned middleware
// makes a RoundTripper with its own breakers; it is safe for concurrent
// use, and on success it adds no allocation to a request.
func Breaker(s BreakerSettings) Middleware {
	return func(next http.RoundTripper) http.RoundTripper {
		return newBreakerTransport(s, next)
	}
}

// Sentinels reported to gobreaker in place of the real outcome.
var (
	errBreakerFailure  = errors.New("transport: breaker failure")
	errBreakerExcluded = errors.New("transport: breaker excluded")
)

func isBreakerExcluded(err error) bool { return err == errBreakerExcluded }

const breakerShards = 32

// breakerKey is what breakers are mapped by: scheme and host taken from
// the URL (no allocation), or the custom Key's result in custom.
type breakerKey struct{ scheme, host, custom string }

type breakerShard struct {
	mu sync.RWMutex
	m  map[breakerKey]*breakerEntry
	_  [64 - 32]byte // keep shards on separate cache lines
}

type breakerEntry struct {
	cb        *gobreaker.CircuitBreaker[*http.Response]
	name      string
	used      atomic.Bool  // set on use, cleared by each sweep
	state     atomic.Int32 // BreakerState, as of the last transition
	openUntil atomic.Int64 // time.Duration since breakerTransport.epoch
	strikes   atomic.Int32 // openings since the breaker last closed, the first one not counted
}

type breakerTransport struct {
	next        http.RoundTripper
	key         func(*http.Request) string
	isFailure   func(*http.Response, error) bool
	onChange    func(string, BreakerState, BreakerState)
	consecutive uint32
	ratio       float64
	minRequests uint32
	cooldown    time.Duration
	maxCooldown time.Duration
	halfOpen    uint32
	window      time.Duration
	maxHosts    int64
	idle        time.Duration
	readyToTrip func(gobreaker.Counts) bool

	epoch  time.Time
	seed   maphash.Seed
	shards [breakerShards]breakerShard
	count  atomic.Int64

	sweepMu   sync.Mutex
	lastSweep time.Duration // since epoch
}

func newBreakerTransport(s BreakerSettings, next http.RoundTripper) *breakerTransport {
	next = orDefault(next)
	b := &breakerTransport{
		next:        next,
		key:         s.Key,
		isFailure:   s.IsFailure,
		onChange:    s.OnStateChange,
		consecutive: s.ConsecutiveFailures,
		ratio:       s.FailureRatio,
		minRequests: s.MinRequests,
		cooldown:    s.Cooldown,
		maxCooldown: s.MaxCooldown,
		halfOpen:    s.HalfOpenRequests,
		window:      s.Window,
		maxHosts:    int64(s.MaxHosts),
		idle:        s.IdleTimeout,
		epoch:       time.Now(),
		seed:        maphash.MakeSeed(),
	}
	if b.isFailure == nil {
		b.isFailure = DefaultIsFailure
	}
	if !(b.ratio > 0) { // negative and NaN too
		b.ratio = 0
	}
	if b.consecutive == 0 && b.ratio == 0 {
		b.consecutive = DefaultBreakerFailures
	}
	if b.minRequests == 0 {
		b.minRequests = DefaultBreakerMinRequests
	}
	if b.cooldown <= 0 {
		b.cooldown = DefaultBreakerCooldown
	}
	if b.maxCooldown <= 0 {
		b.maxCooldown = max(DefaultBreakerMaxCooldown, b.cooldown)
	}
	b.maxCooldown = max(b.maxCooldown, b.cooldown)
	if b.halfOpen == 0 {
		b.halfOpen = 1
	}
	if b.window <= 0 {
		b.window = DefaultBreakerWindow
	}
	// gobreaker rounds Window up to whole buckets (Window + Window/10):
	// keep that from overflowing. Half of MaxInt64 is still 146 years.
	b.window = min(b.window, math.MaxInt64/2)
	if b.maxHosts <= 0 {
		b.maxHosts = DefaultBreakerMaxHosts
	}
	if b.idle <= 0 {
		b.idle = DefaultBreakerIdleTimeout
	}
	b.readyToTrip = b.tripped
	for i := range b.shards {
		b.shards[i].m = make(map[breakerKey]*breakerEntry)
	}
	return b
}

// tripped is gobreaker's ReadyToTrip, called on each failure while closed.
func (b *breakerTransport) tripped(c gobreaker.Counts) bool {
	if b.consecutive > 0 && c.ConsecutiveFailures >= b.consecutive {
		return true
	}
	if b.ratio > 0 {
		n := c.TotalSuccesses + c.TotalFailures // ended, exclusions and in-flight left out
		return n >= b.minRequests && float64(c.TotalFailures) >= b.ratio*float64(n)
	}
	return false
}

// RoundTrip sends req through its host's breaker.
func (b *breakerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	e := b.entry(req)
	if e == nil {
		return b.next.RoundTrip(req)
	}
	if !e.used.Load() {
		e.used.Store(true)
	}
	// An open breaker refuses here, until its own open period ends; then
	// gobreaker, whose timeout is the shorter Cooldown, lets probes
	// through. This also spares refused requests gobreaker's lock.
	if e.open(time.Since(b.epoch)) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, b.refusal(e, gobreaker.ErrOpenState)
	}
	var (
		sent bool
		err  error
	)
	// Execute rather than the two-step breaker: its callback would cost
	// an allocation per request, and this closure stays on the stack.
	resp, verdict := e.cb.Execute(func() (*http.Response, error) {
		sent = true
		var resp *http.Response
		resp, err = b.next.RoundTrip(req)
		return resp, b.judge(req, resp, err)
	})
	if !sent {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, b.refusal(e, verdict)
	}
	return resp, err
}

// judge turns an outcome into what gobreaker is told: nil for a success,
// errBreakerFailure or errBreakerExcluded.
func (b *breakerTransport) judge(req *http.Request, resp *http.Response, err error) error {
	if err != nil && (errors.Is(err, context.Canceled) || callerEnded(req.Context()) || policy.CheckRequest(req) != nil) {
		return errBreakerExcluded // says nothing about the host
	}
	if b.isFailure(resp, err) {
		return errBreakerFailure
	}
	return nil
}

// callerEnded reports whether ctx ended for a reason of the caller's: it
// was canceled, or a deadline other than a [Deadline] layer's passed. A
// request that ran out of a Deadline's time counts against its host: the
// host did not answer within what the stack allows it.
func callerEnded(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	var de *DeadlineError
	return !errors.As(context.Cause(ctx), &de)
}

func (b *breakerTransport) refusal(e *breakerEntry, err error) *CircuitOpenError {
	ce := &CircuitOpenError{Key: e.name, State: BreakerOpen, err: err}
	if errors.Is(err, gobreaker.ErrTooManyRequests) {
		ce.State = BreakerHalfOpen
		return ce
	}
	ce.RetryIn = max(0, time.Duration(e.openUntil.Load())-time.Since(b.epoch))
	return ce
}

// CloseIdleConnections forwards to the next RoundTripper.
func (b *breakerTransport) CloseIdleConnections() { closeIdle(b.next) }

// entry returns req's breaker, creating it on first use; nil when req
// bypasses the breakers.
func (b *breakerTransport) entry(req *http.Request) *breakerEntry {
	sh, k, ok := b.shard(req)
	if !ok {
		return nil
	}
	sh.mu.RLock()
	e := sh.m[k]
	sh.mu.RUnlock()
	if e != nil {
		return e
	}
	return b.create(sh, k)
}

// shard returns req's key and the shard that holds its breaker; false
// when req bypasses the breakers.
func (b *breakerTransport) shard(req *http.Request) (*breakerShard, breakerKey, bool) {
	var k breakerKey
	var h uint64
	if b.key != nil {
		k.custom = b.key(req)
		if k.custom == "" {
			return nil, k, false
		}
		h = maphash.String(b.seed, k.custom)
	} else {
		if req.URL == nil {
			return nil, k, false
		}
		k.scheme, k.host = req.URL.Scheme, req.URL.Host
		h = maphash.String(b.seed, k.host)
	}
	return &b.shards[h%breakerShards], k, true
}

// refuses reports whether req's breaker will still be open at the time
// at, so that [Retry] does not wait only to be refused.
func (b *breakerTransport) refuses(req *http.Request, at time.Time) error {
	sh, k, ok := b.shard(req)
	if !ok {
		return nil
	}
	sh.mu.RLock()
	e := sh.m[k]
	sh.mu.RUnlock()
	if e == nil || !e.open(at.Sub(b.epoch)) {
		return refusal(b.next, req, at)
	}
	return b.refusal(e, gobreaker.ErrOpenState)
}

func (b *breakerTransport) create(sh *breakerShard, k breakerKey) *breakerEntry {
	b.maybeSweep()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[k]; e != nil {
		return e
	}
	if b.count.Add(1) > b.maxHosts {
		b.count.Add(-1)
		return nil
	}
	// Clone: the URL's strings may share memory with a long raw URL.
	k.scheme, k.host, k.custom = strings.Clone(k.scheme), strings.Clone(k.host), strings.Clone(k.custom)
	name := k.custom
	if b.key == nil {
		name = k.scheme + "://" + k.host
	}
	e := &breakerEntry{name: name}
	st := gobreaker.Settings{
		Name:        name,
		MaxRequests: b.halfOpen,
		Timeout:     b.cooldown,
		ReadyToTrip: b.readyToTrip,
		OnStateChange: func(_ string, from, to gobreaker.State) {
			b.changed(e, stateOf(from), stateOf(to))
		},
		IsExcluded: isBreakerExcluded,
	}
	if b.ratio > 0 {
		st.Interval = b.window
		st.BucketPeriod = b.window / 10
	}
	e.cb = gobreaker.NewCircuitBreaker[*http.Response](st)
	sh.m[k] = e
	return e
}

// changed runs under the gobreaker's lock on every state change.
func (b *breakerTransport) changed(e *breakerEntry, from, to BreakerState) {
	switch to {
	case BreakerOpen:
		var k int32
		if from == BreakerHalfOpen { // a probe failed
			k = e.strikes.Add(1)
		} else {
			e.strikes.Store(0)
		}
		now, d := time.Since(b.epoch), b.openFor(k)
		until := now + d
		if until < now { // a huge MaxCooldown: saturate rather than wrap
			until = math.MaxInt64
		}
		e.openUntil.Store(int64(until))
	case BreakerClosed:
		e.strikes.Store(0)
	}
	e.state.Store(int32(to))
	if b.onChange != nil {
		b.onChange(e.name, from, to)
	}
}

// openFor is how long a breaker stays open after k failed probes in a
// row: Cooldown doubled k times, at most MaxCooldown.
func (b *breakerTransport) openFor(k int32) time.Duration {
	d := b.cooldown
	for ; k > 0 && d < b.maxCooldown; k-- {
		if d > b.maxCooldown/2 { // doubling would pass the cap, or overflow
			return b.maxCooldown
		}
		d *= 2
	}
	return min(d, b.maxCooldown)
}

// maybeSweep drops idle breakers when IdleTimeout has passed since the
// last sweep, or when the map is full. It is called only when a key is
// added, so the hot path never pays for it.
func (b *breakerTransport) maybeSweep() {
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	// Checked under the lock: a sweep that ran while we waited for it
	// may have made room already.
	full := b.count.Load() >= b.maxHosts
	now := time.Since(b.epoch)
	if !full && now-b.lastSweep < b.idle {
		return
	}
	b.lastSweep = now
	// First pass, a clock sweep: drop breakers unused since the last
	// sweep unless they are open, and mark the others unused. A half-open
	// breaker is dropped here too: unused that long, its probes are stuck.
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if !e.used.Swap(false) && !e.open(now) {
				delete(sh.m, k)
				b.count.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
	if !full {
		return
	}
	// Still full: drop closed breakers, used or not, until an eighth of
	// the room is free, so that the next adds do not sweep again.
	target := b.maxHosts - max(1, b.maxHosts/8)
	for i := range b.shards {
		if b.count.Load() <= target {
			break
		}
		sh := &b.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if b.count.Load() <= target {
				break
			}
			if st := BreakerState(e.state.Load()); st == BreakerClosed || st == BreakerOpen && !e.open(now) {
				delete(sh.m, k)
				b.count.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
}

// open reports whether e is open and its open period has not passed:
// forgetting it would send requests to a host known to be failing. A
// breaker that gobreaker turned half-open before the end of that period
// (gobreaker's own timeout is the shorter Cooldown, and any late outcome
// makes it check) is still open here: no probe goes out early.
func (e *breakerEntry) open(now time.Duration) bool {
	return BreakerState(e.state.Load()) != BreakerClosed && now <= time.Duration(e.openUntil.Load()) // as gobreaker: open until past its expiry
}
