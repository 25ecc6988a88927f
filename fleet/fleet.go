package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Defaults of [Options], used where a field is zero.
const (
	DefaultTimeout         = 50 * time.Millisecond
	DefaultRefreshInterval = 100 * time.Millisecond
	DefaultMaxHosts        = 10_000
	DefaultIdleTimeout     = time.Minute
)

// maxPending bounds the keys with a change waiting to be sent to Redis;
// past it, new changes are dropped (and reported to OnError).
const maxPending = 4096

// Options configures a [Fleet]. The zero value is ready to use.
type Options struct {
	// Prefix starts every key the fleet reads and writes. Processes that
	// share state must use the same prefix. Empty means [DefaultPrefix],
	// "sturdy".
	Prefix string

	// Timeout bounds every Redis call. A request waits on Redis only to
	// claim a breaker's probe or to lease quota or retries, and never
	// longer than this: when Redis does not answer in time the request goes on under
	// the process's own state. Zero or negative means [DefaultTimeout]
	// (50ms).
	Timeout time.Duration

	// RefreshInterval is how often the fleet's view of the hosts in use
	// is read from Redis, in one pipeline (one round trip on a single
	// node). A change published by one process reaches the others within
	// RefreshInterval + Timeout. Zero or negative means
	// [DefaultRefreshInterval] (100ms).
	RefreshInterval time.Duration

	// MaxHosts bounds how many hosts' views are kept and refreshed; the
	// requests to a host beyond it go on under local state alone. Zero or
	// negative means [DefaultMaxHosts] (10,000).
	MaxHosts int

	// IdleTimeout is how long a host may go unused before its view is no
	// longer refreshed and is dropped, so an idle process makes no calls
	// to Redis. Zero or negative means [DefaultIdleTimeout] (1 minute).
	IdleTimeout time.Duration

	// Limits are the rates the fleet may send to hosts at, shared by
	// every process through [Fleet.Quotas]. A host without a limit is
	// held back only by the pauses its servers ask for.
	Limits []Limit

	// OnError, when set, is called with the errors of Redis calls and
	// with malformed keys ([ErrMalformed]), at most once per second per
	// kind of call, never with a lock held. The state those calls would
	// have shared is then local only: requests are not held back by a
	// failing Redis. Nil means errors are not reported.
	OnError func(error)
}

// Fleet is the state that a fleet of processes shares on Redis: the
// breakers' states ([Fleet.Breakers]), the hosts' quotas ([Fleet.Quotas])
// and retry budgets ([Fleet.Budgets]). Each process
// makes one Fleet over its Redis client and hands its parts to
// transport.New; one background goroutine per Fleet sends the changes
// this process makes and reads, every RefreshInterval, the fleet's view of
// the hosts it uses. Close stops it.
//
// A Fleet is safe for concurrent use by multiple goroutines.
type Fleet struct {
	client   rueidis.Client
	prefix   string
	timeout  time.Duration
	interval time.Duration
	maxHosts int
	idle     time.Duration
	onError  func(error)
	limits   map[string]limit

	down atomic.Int64 // Unix ns until which Redis is taken as unreachable

	views  sync.Map // string → *hostView
	nviews atomic.Int64
	tick   atomic.Int64 // refreshes started; views record the tick of their last use

	mu      sync.Mutex
	pending map[string]change // by Redis key: only the latest change of a key is sent
	wake    chan struct{}

	errMu   sync.Mutex
	errLast map[string]time.Time

	refreshes atomic.Int64 // refreshes completed, for tests
	downs     atomic.Int64 // times Redis was marked unreachable, for tests
	done      chan struct{}
	stopped   chan struct{}
	closeOnce sync.Once
}

// hostView is what this process knows of the fleet's state of one host.
type hostView struct {
	key         string
	used        atomic.Int64 // the tick of the last use
	usedBreaker atomic.Bool  // the breaker state is read at each refresh
	usedQuota   atomic.Bool  // the quota state is read at each refresh
	usedBudget  atomic.Bool  // the budget is synced at each refresh
	breaker     atomic.Pointer[sharedBreaker]
	probeLost   atomic.Pointer[probeLoss]
	probeClaim  atomic.Pointer[string] // the token of the probe claim this process won last, until it gives it up
	quota       quotaView
	budget      budgetView
}

// New returns a Fleet over client and starts its goroutine. The client
// stays the caller's: close it after the Fleet. It fails only on a Limit
// without Requests.
func New(client rueidis.Client, o Options) (*Fleet, error) {
	f := &Fleet{
		client:   client,
		prefix:   o.Prefix,
		timeout:  o.Timeout,
		interval: o.RefreshInterval,
		maxHosts: o.MaxHosts,
		idle:     o.IdleTimeout,
		onError:  o.OnError,
		limits:   make(map[string]limit, len(o.Limits)),
		pending:  map[string]change{},
		wake:     make(chan struct{}, 1),
		errLast:  map[string]time.Time{},
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	if f.prefix == "" {
		f.prefix = DefaultPrefix
	}
	if f.timeout <= 0 {
		f.timeout = DefaultTimeout
	}
	if f.interval <= 0 {
		f.interval = DefaultRefreshInterval
	}
	if f.maxHosts <= 0 {
		f.maxHosts = DefaultMaxHosts
	}
	if f.idle <= 0 {
		f.idle = DefaultIdleTimeout
	}
	for _, l := range o.Limits {
		lim, err := newLimit(l)
		if err != nil {
			return nil, err
		}
		f.limits[l.Host] = lim
	}
	go f.run()
	return f, nil
}

// Close stops the Fleet's goroutine, after sending the changes still
// pending (each within Timeout). It does not close the client.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() { close(f.done) })
	<-f.stopped
	return nil
}

func (f *Fleet) run() {
	defer close(f.stopped)
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		select {
		case <-f.done:
			f.flush()
			return
		case <-f.wake:
			f.flush()
			// A change that failed waits for the tick, so that an
			// unreachable Redis is not tried in a loop.
		case <-t.C:
			f.flush()
			f.refresh()
		}
	}
}

// change is a write to Redis that this process wants the fleet to see.
// send makes it within ctx and reports whether it should be tried again
// (it failed and still matters).
type change struct {
	send func(ctx context.Context) (again bool)
}

// enqueue queues the change of one Redis key, in place of any older one
// of the same key still waiting, and wakes the goroutine. It never blocks.
func (f *Fleet) enqueue(rk string, send func(context.Context) bool) {
	f.mu.Lock()
	_, waiting := f.pending[rk]
	full := !waiting && len(f.pending) >= maxPending
	if !full {
		f.pending[rk] = change{send}
	}
	f.mu.Unlock()
	if full {
		f.report("publish", fmt.Errorf("fleet: %d keys' changes already wait for Redis; the change of %s is dropped", maxPending, rk))
		return
	}
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// flush sends the pending changes, each within Timeout, concurrently:
// rueidis pipelines them onto one connection. A change that failed and
// still matters is queued again, unless a newer one of its key came in
// meanwhile, and retried at the next refresh: so what a process learned
// while Redis was down reaches the fleet when it returns.
func (f *Fleet) flush() {
	f.mu.Lock()
	sends := f.pending
	if len(sends) == 0 {
		f.mu.Unlock()
		return
	}
	f.pending = make(map[string]change, len(sends))
	f.mu.Unlock()
	var wg sync.WaitGroup
	for rk, c := range sends {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
			again := c.send(ctx)
			cancel()
			if !again {
				return
			}
			f.mu.Lock()
			if _, newer := f.pending[rk]; !newer {
				f.pending[rk] = c
			}
			f.mu.Unlock()
		})
	}
	wg.Wait()
}

// view returns key's view, made on first use (nil when MaxHosts views
// exist), and marks it used.
func (f *Fleet) view(key string) *hostView {
	tick := f.tick.Load()
	if v, ok := f.views.Load(key); ok {
		hv := v.(*hostView)
		if hv.used.Load() != tick {
			hv.used.Store(tick)
		}
		return hv
	}
	if f.nviews.Load() >= int64(f.maxHosts) {
		return nil
	}
	hv := &hostView{key: key}
	hv.used.Store(tick)
	if v, loaded := f.views.LoadOrStore(key, hv); loaded {
		return v.(*hostView)
	}
	f.nviews.Add(1)
	return hv
}

// refresh reads the fleet's state of every host used within IdleTimeout
// in one pipeline, and drops the views of the others.
func (f *Fleet) refresh() {
	tick := f.tick.Add(1)
	idleTicks := int64(f.idle/f.interval) + 1
	var views []*hostView
	f.views.Range(func(k, v any) bool {
		hv := v.(*hostView)
		if tick-hv.used.Load() > idleTicks {
			f.views.Delete(k)
			f.nviews.Add(-1)
			return true
		}
		views = append(views, hv)
		return true
	})
	cmds := make(rueidis.Commands, 0, 2*len(views))
	type sent struct {
		hv                     *hostView
		breaker, quota, budget bool
		sync                   budgetSync
	}
	sents := make([]sent, 0, len(views))
	now := time.Now()
	for _, hv := range views {
		s := sent{hv: hv}
		if hv.usedBreaker.Load() {
			cmds = append(cmds, f.breakerRead(hv.key))
			s.breaker = true
		}
		if hv.usedQuota.Load() {
			cmds = append(cmds, f.quotaRead(hv.key))
			s.quota = true
		}
		if hv.usedBudget.Load() {
			var cmd rueidis.Completed
			if cmd, s.sync, s.budget = f.budgetSyncCmd(hv, now); s.budget {
				cmds = append(cmds, cmd)
			}
		}
		sents = append(sents, s)
	}
	if len(cmds) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		results := f.client.DoMulti(ctx, cmds...)
		cancel()
		i, failed := 0, 0
		for _, s := range sents {
			if s.breaker && i < len(results) {
				failed += f.breakerUpdate(s.hv, results[i])
				i++
			}
			if s.quota && i < len(results) {
				failed += f.quotaUpdate(s.hv, results[i])
				i++
			}
			if s.budget {
				if i < len(results) {
					failed += f.budgetUpdate(s.sync, results[i])
					i++
				} else {
					f.budgetCancel(s.sync)
				}
			}
		}
		if failed == 0 {
			f.markUp()
		} else if failed == len(results) {
			f.markDown()
		}
	}
	f.refreshes.Add(1)
}

// markDown takes Redis as unreachable until a refresh gets through:
// requests go on under local state without waiting on Redis. Each failed
// refresh extends it, and a refresh starts at most RefreshInterval after
// the last one ended (which took at most Timeout), so it lasts until
// Redis answers.
func (f *Fleet) markDown() {
	f.down.Store(time.Now().Add(f.interval + 2*f.timeout).UnixNano())
	f.downs.Add(1)
}

// markUp takes Redis as reachable again.
func (f *Fleet) markUp() {
	if f.down.Load() != 0 {
		f.down.Store(0)
	}
}

// isDown reports whether Redis is taken as unreachable at now.
func (f *Fleet) isDown(now time.Time) bool {
	d := f.down.Load()
	return d != 0 && now.UnixNano() < d
}

// report passes err to OnError, at most once per second per kind.
func (f *Fleet) report(kind string, err error) {
	if f.onError == nil {
		return
	}
	now := time.Now()
	f.errMu.Lock()
	last, seen := f.errLast[kind]
	ok := !seen || now.Sub(last) >= time.Second
	if ok {
		f.errLast[kind] = now
	}
	f.errMu.Unlock()
	if ok {
		f.onError(err)
	}
}

// hostKey returns the Redis key of a host's state of one kind: all of a
// host's keys carry the host as their hash tag, so they share a slot.
func (f *Fleet) hostKey(kind, key string) string {
	return f.prefix + ":" + kind + ":{" + key + "}"
}

// unreachable returns 1 when err says that Redis could not be reached or
// did not answer in time, 0 when Redis answered (an error reply, nil).
func unreachable(err error) int {
	if err == nil || rueidis.IsRedisNil(err) {
		return 0
	}
	if _, ok := rueidis.IsRedisErr(err); ok {
		return 0
	}
	return 1
}

func callErr(op, key string, err error) error {
	return fmt.Errorf("fleet: %s %s: %w", op, key, err)
}
