package fleet

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/transport"
)

// BreakerStore is the fleet's [transport.BreakerStore]: the breakers of
// all the processes share each host's "open until" state and its probe.
// Get it from [Fleet.Breakers] and set it as transport.BreakerSettings.Store.
//
//   - When a process's breaker opens or closes, Publish queues the change
//     and returns; the Fleet's goroutine writes it at once (one Lua
//     script, one round trip), with a version taken from Redis's clock.
//   - Every process reads the state of the hosts it uses every
//     RefreshInterval, in one pipeline. So when one process sees a host
//     down, the others fail fast within RefreshInterval + Timeout (150ms
//     by default), having sent at most what they sent in that time.
//   - Load answers from that view, in memory.
//   - While a host is half-open, ClaimProbe is SET NX PX on the host's
//     probe key: one process in the fleet wins and probes; the others are
//     refused until the prober publishes the outcome, or until the claim
//     expires if it never does. Publishing an opening keeps the claim
//     taken until the open period ends, so a process that has not yet
//     read it cannot probe early. It waits at most Timeout. A process that
//     lost the claim answers its next claims from memory, without a
//     round trip, until the host's state changes or RefreshInterval
//     passes.
//
// No lock is held across a request, in Redis or in the process.
type BreakerStore struct{ f *Fleet }

var (
	_ transport.BreakerStore  = BreakerStore{}
	_ transport.ProbeReleaser = BreakerStore{}
)

// Breakers returns the fleet's breaker store.
func (f *Fleet) Breakers() BreakerStore { return BreakerStore{f} }

// sharedBreaker is a host's breaker state as last read or written.
type sharedBreaker = transport.SharedBreakerState

// breakerTTL is how long a host's breaker state is kept past its open
// period: long enough for every process to have read it.
const breakerTTL = 10 * time.Minute

// breakerPublish writes a host's state with a version that grows: Redis's
// clock in microseconds, or one more than the last version. It settles
// the probe claim, whose outcome this is: an opening keeps the claim taken
// until the open period ends (so that a process that has not yet read the
// opening cannot probe before then), a closing frees it. A value fleet did
// not write makes it fail (wrong type) or is overwritten.
//
// KEYS: the state hash, the probe key. ARGV: state, until (Unix ms), TTL
// of the state (ms), how long the claim stays taken (ms; 0 frees it).
var breakerPublish = rueidis.NewLuaScript(`
local t = redis.call('TIME')
local v = tonumber(t[1]) * 1000000 + tonumber(t[2])
local old = tonumber(redis.call('HGET', KEYS[1], 'v') or '0') or 0
if v <= old then v = old + 1 end
redis.call('HSET', KEYS[1], 's', ARGV[1], 'u', ARGV[2], 'v', v)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if tonumber(ARGV[4]) > 0 then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
else
  redis.call('DEL', KEYS[2])
end
return v`)

// Publish implements [transport.BreakerStore].
func (b BreakerStore) Publish(key string, s transport.SharedBreakerState) {
	f := b.f
	state, until := "c", int64(0)
	if s.State == transport.BreakerOpen {
		state, until = "o", s.Until.UnixMilli()
	}
	rk := f.hostKey("brk", key)
	hv := f.view(key)
	if hv != nil {
		hv.usedBreaker.Store(true)
	}
	f.enqueue(rk, func(ctx context.Context) bool {
		// The TTLs count from now, when the change is sent (perhaps
		// again, after Redis was down), not from the Publish.
		ttl, hold := breakerTTL, "0"
		if s.State == transport.BreakerOpen {
			d := time.Until(s.Until)
			if d <= 0 {
				// The opening ended before it could be sent: it says
				// nothing now, and sending it would free a probe claim
				// won since (and hide a closing published since).
				return false
			}
			ttl += d
			hold = millis(d)
		}
		v, err := breakerPublish.Exec(ctx, f.client, []string{rk, rk + ":probe"},
			[]string{state, strconv.FormatInt(until, 10), millis(ttl), hold}).AsInt64()
		if err != nil {
			f.report("breaker publish", callErr("breaker publish", rk, err))
			// An opening matters until it ends, a closing until the next change.
			return s.State != transport.BreakerOpen || time.Now().Before(s.Until)
		}
		if hv != nil {
			s.Version = uint64(v)
			hv.storeBreaker(s)
		}
		return false
	})
}

// Load implements [transport.BreakerStore].
func (b BreakerStore) Load(key string) transport.SharedBreakerState {
	hv := b.f.view(key)
	if hv == nil {
		return transport.SharedBreakerState{}
	}
	if !hv.usedBreaker.Load() {
		hv.usedBreaker.Store(true)
	}
	if s := hv.breaker.Load(); s != nil {
		return *s
	}
	return transport.SharedBreakerState{}
}

// ClaimProbe implements [transport.BreakerStore].
func (b BreakerStore) ClaimProbe(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	f := b.f
	now := time.Now()
	if f.isDown(now) {
		return false, errRedisDown
	}
	hv := f.view(key)
	if hv != nil && hv.lostProbe(now, f.interval) {
		return false, nil // lost a moment ago, and nothing has changed since
	}
	caller := ctx
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	rk := f.hostKey("brk", key) + ":probe"
	token := rand.Text() // this claim's own: a late release never deletes a later one
	err := f.client.Do(ctx, f.client.B().Set().Key(rk).Value(token).Nx().PxMilliseconds(max(ttl.Milliseconds(), 1)).Build()).Error()
	switch {
	case err == nil:
		f.markUp()
		if hv != nil {
			hv.probeClaim.Store(&token)
		}
		return true, nil
	case rueidis.IsRedisNil(err):
		f.markUp()
		if hv != nil {
			hv.probeLost.Store(&probeLoss{at: now, version: hv.version()})
		}
		return false, nil
	}
	if unreachable(err) == 1 && caller.Err() == nil { // not ended by the caller's cancel or deadline
		f.markDown()
	}
	err = callErr("breaker probe claim", rk, err)
	f.report("breaker probe claim", err)
	return false, err
}

var probeRelease = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// ReleaseProbe implements [transport.ProbeReleaser]: it deletes the
// probe claim this process won last for key, if it still stands, in the
// background. A claim that expired, and one won since, stays.
func (b BreakerStore) ReleaseProbe(key string) {
	f := b.f
	hv := f.view(key)
	if hv == nil {
		return
	}
	token := hv.probeClaim.Swap(nil)
	if token == nil {
		return
	}
	rk := f.hostKey("brk", key) + ":probe"
	f.enqueue(rk, func(ctx context.Context) bool {
		if err := probeRelease.Exec(ctx, f.client, []string{rk}, []string{*token}).Error(); err != nil {
			f.report("breaker probe release", callErr("breaker probe release", rk, err))
		}
		return false // the claim expires anyway
	})
}

// probeLoss records a probe claim this process lost: until the fleet's
// state of the host changes, or RefreshInterval passes, another claim
// would lose too, so it is answered from memory.
type probeLoss struct {
	at      time.Time
	version uint64
}

func (hv *hostView) lostProbe(now time.Time, interval time.Duration) bool {
	l := hv.probeLost.Load()
	return l != nil && now.Sub(l.at) < interval && l.version == hv.version()
}

func (hv *hostView) version() uint64 {
	if s := hv.breaker.Load(); s != nil {
		return s.Version
	}
	return 0
}

// storeBreaker replaces the view's state with s unless it holds a newer
// one.
func (hv *hostView) storeBreaker(s transport.SharedBreakerState) {
	for {
		old := hv.breaker.Load()
		if old != nil && old.Version >= s.Version {
			return
		}
		if hv.breaker.CompareAndSwap(old, &s) {
			return
		}
	}
}

func (f *Fleet) breakerRead(key string) rueidis.Completed {
	return f.client.B().Hmget().Key(f.hostKey("brk", key)).Field("s", "u", "v").Build()
}

// breakerUpdate applies the answer of breakerRead to hv. It returns 1
// when Redis could not be reached, 0 otherwise.
func (f *Fleet) breakerUpdate(hv *hostView, r rueidis.RedisResult) int {
	vals, err := r.ToArray()
	if err != nil {
		f.report("breaker read", callErr("breaker read", f.hostKey("brk", hv.key), err))
		return unreachable(err)
	}
	if len(vals) == 3 && vals[0].IsNil() && vals[1].IsNil() && vals[2].IsNil() {
		return 0 // nothing known
	}
	s, err := parseBreaker(vals)
	if err != nil {
		f.report("breaker read", fmt.Errorf("%w: %s: %v", ErrMalformed, f.hostKey("brk", hv.key), err))
		return 0
	}
	hv.storeBreaker(s)
	return 0
}

func parseBreaker(vals []rueidis.RedisMessage) (transport.SharedBreakerState, error) {
	var s transport.SharedBreakerState
	st, ok1 := str(vals, 0)
	u, ok2 := str(vals, 1)
	v, ok3 := str(vals, 2)
	if !ok1 || !ok2 || !ok3 {
		return s, fmt.Errorf("fields s, u, v missing")
	}
	until, err1 := strconv.ParseInt(u, 10, 64)
	version, err2 := strconv.ParseUint(v, 10, 64)
	if err1 != nil || err2 != nil || version == 0 {
		return s, fmt.Errorf("bad until %q or version %q", u, v)
	}
	switch st {
	case "o":
		s.State, s.Until = transport.BreakerOpen, time.UnixMilli(until)
	case "c":
		s.State = transport.BreakerClosed
	default:
		return s, fmt.Errorf("bad state %q", st)
	}
	s.Version = version
	return s, nil
}
