package fleet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/fleet/internal/luascript"
	"golang.org/x/time/rate"

	"github.com/sturdyhttp/sturdy/ratelimit"
)

// Limit is a rate that a whole fleet may send to one host at, whichever
// processes send.
type Limit struct {
	// Host is the host's key, as the Tracker and the breakers name it:
	// "https://api.openai.com".
	Host string
	// Requests is how many requests the fleet may send per Per.
	Requests int
	// Per is the period of Requests. Zero or negative means a minute.
	Per time.Duration
	// Burst is how many requests may go out at once after a quiet spell
	// (the bucket's depth), and the largest batch of places one process
	// leases at a time. Zero or negative means 100ms worth of the rate,
	// at least 1.
	Burst int
	// Processes is how many processes share the limit. It is used only
	// while Redis cannot be reached: each process then sends at most
	// Requests/Processes per Per on its own. Zero or negative means 1.
	Processes int
}

// QuotaStore is the fleet's [ratelimit.QuotaStore]: a fleet-wide rate per
// host ([Options.Limits]) and the pauses servers ask for, shared on
// Redis. Get it from [Fleet.Quotas] and set it as ratelimit.Options.Store.
//
//   - The rate is a GCRA bucket in Redis (one Lua script per call, on the
//     host's slot). A process leases places in batches and spends them
//     locally, so a busy process makes far fewer than one round trip per
//     request; the batch doubles while the places are all spent within
//     RefreshInterval, and shrinks to what was spent when some are left.
//     A leased place not spent within RefreshInterval is dropped, so the
//     fleet never sends more than the limit, plus Burst, plus one
//     RefreshInterval's worth of the rate, in any window.
//   - When no place is free, the lease reserves the next one ahead, and
//     Take returns the wait until it comes; or, beyond maxWait, takes
//     nothing and returns the wait so that the request fails at once.
//   - Pause records the end of a server-asked pause in the host's hash, in
//     the background (one round trip). Every lease reads it, and every
//     process reads it every RefreshInterval: so a 429 with Retry-After
//     seen by one process holds back each other one from its next lease
//     or next refresh, whichever comes first.
//   - When Redis cannot be reached, Take waits on it at most Timeout,
//     once; from then until a refresh gets through, it uses a local
//     limiter of Requests/Processes and does not ask Redis.
type QuotaStore struct{ f *Fleet }

var _ ratelimit.QuotaStore = QuotaStore{}

// Quotas returns the fleet's quota store.
func (f *Fleet) Quotas() QuotaStore { return QuotaStore{f} }

// limit is a [Limit] resolved for use.
type limit struct {
	emission time.Duration // time per request
	burst    int
	local    rate.Limit // the fallback rate of one process
}

func newLimit(l Limit) (limit, error) {
	if l.Requests <= 0 {
		return limit{}, fmt.Errorf("fleet: limit of %s: Requests is %d, want > 0", l.Host, l.Requests)
	}
	per := l.Per
	if per <= 0 {
		per = time.Minute
	}
	r := limit{emission: max(per/time.Duration(l.Requests), time.Microsecond), burst: l.Burst}
	if r.burst <= 0 {
		r.burst = max(1, int(100*time.Millisecond/r.emission))
	}
	r.local = rate.Limit(float64(l.Requests) / per.Seconds() / float64(max(l.Processes, 1)))
	return r, nil
}

// quotaView is what one process holds of one host's quota.
type quotaView struct {
	mu      sync.Mutex
	tokens  int           // leased places left
	expires time.Time     // when they are dropped
	batch   int           // places asked for by the next lease
	leasing chan struct{} // closed when the lease in flight ends
	waiters int           // goroutines waiting for it
	// exhausted is set when the last lease found no place free: each
	// request then reserves its own, without waiting for another's lease.
	exhausted bool
	pauses    map[string]time.Time // resource → end of a pause ("" the whole host)
	fallback  *rate.Limiter
}

// pausedUntil returns the end of the pause that holds resource back.
// qv.mu must be held.
func (qv *quotaView) pausedUntil(resource string) time.Time {
	p := qv.pauses[""]
	if r := qv.pauses[resource]; r.After(p) {
		p = r
	}
	return p
}

// addPause records a pause, keeping the later end. qv.mu must be held.
func (qv *quotaView) addPause(resource string, until time.Time) {
	if qv.pauses == nil {
		qv.pauses = map[string]time.Time{}
	}
	if until.After(qv.pauses[resource]) {
		qv.pauses[resource] = until
	}
}

// quotaLease is the lease script (see luascript.Lease for its keys,
// arguments and answer).
var quotaLease = rueidis.NewLuaScript(luascript.Lease)

// quotaPause records the end of a pause (Unix ms) for a resource, keeping
// the later one, and keeps the hash until the last pause has ended.
//
// KEYS: the pause hash. ARGV: resource, until (ms).
var quotaPause = rueidis.NewLuaScript(`
local f = 'p:' .. ARGV[1]
local u = tonumber(ARGV[2])
local old = tonumber(redis.call('HGET', KEYS[1], f) or 0) or 0
if u > old then redis.call('HSET', KEYS[1], f, ARGV[2]) end
local t = redis.call('TIME')
local want = math.max(math.ceil(u - (tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000)) + 1000, 1)
if redis.call('PTTL', KEYS[1]) < want then redis.call('PEXPIRE', KEYS[1], want) end
return 1`)

// Take implements [ratelimit.QuotaStore].
func (q QuotaStore) Take(ctx context.Context, key, resource string, maxWait time.Duration) (time.Duration, error) {
	f := q.f
	hv := f.view(key)
	if hv == nil {
		return 0, nil
	}
	if !hv.usedQuota.Load() {
		hv.usedQuota.Store(true)
	}
	qv := &hv.quota
	lim, limited := f.limits[key]
	qv.mu.Lock()
	for {
		now := time.Now()
		if p := qv.pausedUntil(resource); p.After(now) {
			qv.mu.Unlock()
			return p.Sub(now), nil
		}
		if !limited {
			qv.mu.Unlock()
			return 0, nil
		}
		if qv.tokens > 0 && now.Before(qv.expires) {
			qv.tokens--
			qv.mu.Unlock()
			return 0, nil
		}
		if f.isDown(now) {
			d := reserveLocal(qv.local(lim).fallback, now, maxWait)
			qv.mu.Unlock()
			return d, errRedisDown
		}
		if qv.leasing == nil || qv.exhausted {
			break
		}
		// Another goroutine is leasing for this host: wait for its
		// batch rather than lease one more.
		ch := qv.leasing
		qv.waiters++
		qv.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			qv.mu.Lock()
			qv.waiters--
			qv.mu.Unlock()
			return 0, ctx.Err()
		}
		qv.mu.Lock()
		qv.waiters--
	}
	n := 1
	var ch chan struct{}
	if qv.leasing == nil {
		// Lead a lease, sized by how the last batch was spent and by the
		// goroutines waiting for this one. (When the bucket is
		// exhausted, each request reserves its own place instead.)
		now := time.Now()
		switch {
		case qv.batch == 0:
			qv.batch = 1
		case qv.tokens == 0 && now.Before(qv.expires):
			qv.batch = min(2*qv.batch, lim.burst)
		case qv.tokens > 0:
			qv.batch = max(1, qv.batch-qv.tokens)
		}
		qv.tokens = 0
		n = min(max(qv.batch, qv.waiters+1), lim.burst)
		ch = make(chan struct{})
		qv.leasing = ch
	}
	qv.mu.Unlock()

	granted, wait, paused, err := f.lease(ctx, key, resource, lim, n, maxWait)

	now := time.Now()
	qv.mu.Lock()
	defer qv.mu.Unlock()
	if ch != nil {
		qv.leasing = nil
		close(ch)
	}
	switch {
	case err != nil:
		return reserveLocal(qv.local(lim).fallback, now, maxWait), err
	case paused:
		qv.addPause(resource, now.Add(wait))
		return wait, nil
	case wait > 0: // a place reserved ahead, or none within maxWait
		qv.exhausted = true
		return wait, nil
	}
	qv.exhausted = false
	qv.tokens += granted - 1
	qv.expires = now.Add(f.interval)
	return 0, nil
}

var errRedisDown = errors.New("fleet: Redis unreachable; local limits apply until a refresh gets through")

// reserveLocal takes a place in the local fallback's schedule and
// returns its wait; a place more than maxWait away is not kept (the
// request fails now), so that refused requests do not push back the
// ones that follow.
func reserveLocal(l *rate.Limiter, now time.Time, maxWait time.Duration) time.Duration {
	r := l.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if d > maxWait {
		r.CancelAt(now)
	}
	return d
}

// local makes the fallback limiter on first use. qv.mu must be held.
func (qv *quotaView) local(lim limit) *quotaView {
	if qv.fallback == nil {
		qv.fallback = rate.NewLimiter(lim.local, max(1, int(lim.local/10)))
	}
	return qv
}

// lease runs quotaLease within Timeout.
func (f *Fleet) lease(ctx context.Context, key, resource string, lim limit, n int, maxWait time.Duration) (granted int, wait time.Duration, paused bool, err error) {
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	rk := f.hostKey("rate", key)
	maxMs := "1e15"
	if maxWait < time.Duration(math.MaxInt64) {
		maxMs = strconv.FormatFloat(float64(maxWait)/float64(time.Millisecond), 'f', 3, 64)
	}
	vals, err := quotaLease.Exec(ctx, f.client, []string{rk, f.hostKey("q", key)}, []string{
		strconv.FormatFloat(float64(lim.emission)/float64(time.Millisecond), 'f', 6, 64),
		strconv.Itoa(lim.burst), strconv.Itoa(n), maxMs, resource,
	}).AsIntSlice()
	switch {
	case err != nil:
		if unreachable(err) == 1 && caller.Err() == nil { // not ended by the caller's cancel or deadline
			f.markDown()
		}
		err = callErr("quota lease", rk, err)
		f.report("quota lease", err)
		return 0, 0, false, err
	case len(vals) != 3:
		err = fmt.Errorf("%w: %s: lease answered %v", ErrMalformed, rk, vals)
		f.report("quota lease", err)
		return 0, 0, false, err
	}
	f.markUp()
	return int(vals[0]), time.Duration(vals[1]) * time.Microsecond, vals[2] == 1, nil
}

// Return implements [ratelimit.QuotaStore].
func (q QuotaStore) Return(key, resource string) {
	hv, ok := q.f.views.Load(key)
	if !ok {
		return
	}
	qv := &hv.(*hostView).quota
	qv.mu.Lock()
	if time.Now().Before(qv.expires) {
		qv.tokens++
	}
	qv.mu.Unlock()
}

// Pause implements [ratelimit.QuotaStore].
func (q QuotaStore) Pause(key, resource string, until time.Time) {
	f := q.f
	if hv := f.view(key); hv != nil {
		hv.usedQuota.Store(true)
		hv.quota.mu.Lock()
		hv.quota.addPause(resource, until)
		hv.quota.mu.Unlock()
	}
	rk := f.hostKey("q", key)
	ms := strconv.FormatInt(until.UnixMilli(), 10)
	f.enqueue(rk+" "+resource, func(ctx context.Context) bool {
		err := quotaPause.Exec(ctx, f.client, []string{rk}, []string{resource, ms}).Error()
		if err != nil {
			f.report("quota pause", callErr("quota pause", rk, err))
			return time.Now().Before(until)
		}
		return false
	})
}

func (f *Fleet) quotaRead(key string) rueidis.Completed {
	return f.client.B().Hgetall().Key(f.hostKey("q", key)).Build()
}

// quotaUpdate merges the pauses read by quotaRead into hv. It returns 1
// when Redis could not be reached, 0 otherwise.
func (f *Fleet) quotaUpdate(hv *hostView, r rueidis.RedisResult) int {
	m, err := r.AsStrMap()
	if err != nil {
		f.report("quota read", callErr("quota read", f.hostKey("q", hv.key), err))
		return unreachable(err)
	}
	var malformed []error // reported once the lock is released: OnError may use the fleet
	hv.quota.mu.Lock()
	for field, v := range m {
		res, ok := strings.CutPrefix(field, "p:")
		ms, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			malformed = append(malformed, fmt.Errorf("%w: %s: field %q = %q", ErrMalformed, f.hostKey("q", hv.key), field, v))
			continue
		}
		hv.quota.addPause(res, time.UnixMilli(ms))
	}
	hv.quota.mu.Unlock()
	for _, err := range malformed {
		f.report("quota read", err)
	}
	return 0
}
