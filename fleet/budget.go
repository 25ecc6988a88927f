package fleet

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/policy"
)

// maxBudgetBatch bounds how many retries one process leases at a time.
const maxBudgetBatch = 64

// BudgetStore is the fleet's [policy.BudgetStore]: one retry budget per
// host for every process of the fleet. Get it from [Fleet.Budgets] and
// set it as policy.Budget.Store:
//
//	o.Retry.Budget = &policy.Budget{Store: f.Budgets()}
//
// The budget's counts are kept in Redis, a hash per host of operations
// and retries in ten buckets of a tenth of the Window each, on Redis's
// clock. The rule is the Budget's: over the last Window, the host may see
// MinRetries + Ratio × the fleet's operations retries. Every process must
// give the same Ratio, MinRetries and Window.
//
//   - Operations are counted locally and sent in the background, once per
//     RefreshInterval, in the pipeline that reads the breakers' and
//     quotas' views: they cost no round trip of their own.
//   - Retries are leased: one Lua script counts a batch of them in Redis,
//     if the fleet's budget has room, and the process spends them
//     locally. A retry is counted when it is decided, before its backoff,
//     so retries waiting to be sent are in the count. The batch doubles
//     while it is spent within RefreshInterval, and shrinks to what was
//     spent when some is left; leased retries not spent within
//     RefreshInterval are handed back. While a process has asked for
//     retries, the background pipeline leases its next batch; when the
//     budget has no room, the process refuses retries without asking
//     Redis until the next refresh. So a busy process makes far fewer
//     than one round trip per request.
//   - When Redis cannot be reached, a retry waits on it at most Timeout,
//     once; from then until a refresh gets through, each process's own
//     budget decides, on its own counts, and no operation is sent to
//     Redis. The fleet's budget applies again from the first refresh that
//     gets through.
type BudgetStore struct{ f *Fleet }

var _ policy.BudgetStore = BudgetStore{}

// Budgets returns the fleet's retry budget store.
func (f *Fleet) Budgets() BudgetStore { return BudgetStore{f} }

// budgetView is what one process holds of one host's budget.
type budgetView struct {
	pending atomic.Int64 // operations not yet sent to Redis
	wanted  atomic.Int64 // retries asked for since the last refresh
	ruled   atomic.Bool  // rule is set

	mu      sync.Mutex
	rule    policy.BudgetRule // the rule of the last retry asked for
	tokens  int               // leased retries left
	expires time.Time         // when they are handed back
	batch   int               // retries asked for by the next lease
	leasing chan struct{}     // closed when the lease in flight ends
	// refused is the time until which the fleet's budget is taken as
	// spent: the last lease got less than it asked for.
	refused time.Time
}

// budgetLease counts operations and hands back or leases retries in a
// host's budget, in one step.
//
// KEYS: the budget hash. ARGV: bucket width (ms), operations to add,
// retries handed back, retries wanted, Ratio, MinRetries. Fields are
// "o:<tick>" and "r:<tick>", a tick being Redis's time in ms divided by
// the width; the window is the ten ticks that end at the current one.
// It answers {granted, the window's operations, its retries}.
var budgetLease = `
local t = redis.call('TIME')
local width = tonumber(ARGV[1])
local cur = math.floor((tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) / width)
local ops, rets = 0, 0
local h = redis.call('HGETALL', KEYS[1])
for i = 1, #h, 2 do
  local kind, tick = string.match(h[i], '^([or]):(%d+)$')
  tick = tonumber(tick)
  local n = tonumber(h[i + 1])
  if not tick or not n then return redis.error_reply('malformed field ' .. h[i]) end
  if tick <= cur - 10 then
    redis.call('HDEL', KEYS[1], h[i])
  elseif kind == 'o' then
    ops = ops + n
  else
    rets = rets + n
  end
end
local add = tonumber(ARGV[2])
if add > 0 then
  redis.call('HINCRBY', KEYS[1], 'o:' .. cur, add)
  ops = ops + add
end
local back = math.min(tonumber(ARGV[3]), rets)
if back > 0 then
  redis.call('HINCRBY', KEYS[1], 'r:' .. cur, -back)
  rets = rets - back
end
local room = tonumber(ARGV[6]) + math.floor(tonumber(ARGV[5]) * ops) - rets
local g = math.max(0, math.min(tonumber(ARGV[4]), room))
if g > 0 then
  redis.call('HINCRBY', KEYS[1], 'r:' .. cur, g)
  rets = rets + g
end
redis.call('PEXPIRE', KEYS[1], width * 10 + 1000)
return {g, ops, rets}`

// budgetLeaseScript runs budgetLease on its own, by its SHA when Redis
// has it.
var budgetLeaseScript = rueidis.NewLuaScript(budgetLease)

// Request implements [policy.BudgetStore].
func (s BudgetStore) Request(key string, now time.Time, rule policy.BudgetRule) {
	f := s.f
	hv := f.view(key)
	if hv == nil {
		return
	}
	if !hv.usedBudget.Load() {
		hv.usedBudget.Store(true)
	}
	bv := &hv.budget
	if !bv.ruled.Load() {
		// The refresh sends the operations in the rule's buckets: with
		// none, it would count them in buckets of another width, and
		// drop the fleet's counts as expired.
		bv.mu.Lock()
		bv.rule = rule
		bv.mu.Unlock()
		bv.ruled.Store(true)
	}
	if !f.isDown(now) { // the fleet's count resumes with Redis
		bv.pending.Add(1)
	}
}

// Retry implements [policy.BudgetStore].
func (s BudgetStore) Retry(key string, now time.Time, rule policy.BudgetRule) (allowed, ok bool) {
	f := s.f
	hv := f.view(key)
	if hv == nil {
		return false, false
	}
	if !hv.usedBudget.Load() {
		hv.usedBudget.Store(true)
	}
	bv := &hv.budget
	bv.wanted.Add(1)
	bv.mu.Lock()
	bv.rule = rule
	bv.ruled.Store(true)
	for {
		t := time.Now()
		if bv.tokens > 0 && t.Before(bv.expires) {
			bv.tokens--
			bv.mu.Unlock()
			return true, true
		}
		if f.isDown(t) {
			bv.mu.Unlock()
			return false, false
		}
		if t.Before(bv.refused) {
			bv.mu.Unlock()
			return false, true
		}
		if bv.leasing == nil {
			break
		}
		// A lease is in flight, this process's or the refresh's: wait
		// for its batch (at most Timeout) rather than lease one more.
		ch := bv.leasing
		bv.mu.Unlock()
		<-ch
		bv.mu.Lock()
	}
	t := time.Now()
	switch {
	case bv.batch == 0:
		bv.batch = 1
	case bv.tokens == 0 && t.Before(bv.expires): // the last batch was all spent in time
		bv.batch = min(2*bv.batch, maxBudgetBatch)
	case bv.tokens > 0:
		bv.batch = max(1, bv.batch-bv.tokens)
	}
	back, want := bv.tokens, bv.batch
	bv.tokens = 0
	ch := make(chan struct{})
	bv.leasing = ch
	bv.mu.Unlock()

	ops := bv.pending.Swap(0)
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	vals, err := budgetLeaseScript.Exec(ctx, f.client, []string{f.hostKey("bud", key)}, budgetArgs(rule, ops, back, want)).AsIntSlice()
	cancel()
	granted, err := f.budgetResult(key, vals, err)

	t = time.Now()
	bv.mu.Lock()
	defer bv.mu.Unlock()
	bv.leasing = nil
	close(ch)
	if err != nil {
		return false, false
	}
	bv.grant(t, f.interval, granted, want)
	if bv.tokens == 0 {
		return false, true
	}
	bv.tokens--
	return true, true
}

// grant records a lease of want retries that got granted at now.
// bv.mu must be held.
func (bv *budgetView) grant(now time.Time, interval time.Duration, granted, want int) {
	bv.tokens += granted
	bv.expires = now.Add(interval)
	if granted < want {
		bv.refused = now.Add(interval)
	} else {
		bv.refused = time.Time{}
	}
}

// budgetArgs returns budgetLease's arguments.
func budgetArgs(rule policy.BudgetRule, ops int64, back, want int) []string {
	width := max(rule.Window/10, time.Millisecond)
	ratio := rule.Ratio
	if ratio > 1e12 || math.IsInf(ratio, 0) {
		ratio = 1e12 // every operation earns more retries than anyone asks for
	}
	return []string{
		strconv.FormatInt(width.Milliseconds(), 10),
		strconv.FormatInt(ops, 10),
		strconv.Itoa(back),
		strconv.Itoa(want),
		strconv.FormatFloat(ratio, 'g', -1, 64),
		strconv.Itoa(rule.MinRetries),
	}
}

// budgetResult checks budgetLease's answer for key's budget and returns
// the retries granted. An unreachable Redis is marked down.
func (f *Fleet) budgetResult(key string, vals []int64, err error) (int, error) {
	rk := f.hostKey("bud", key)
	switch {
	case err != nil:
		if unreachable(err) == 1 {
			f.markDown()
		}
		err = callErr("budget lease", rk, err)
		f.report("budget lease", err)
		return 0, err
	case len(vals) != 3 || vals[0] < 0:
		err = fmt.Errorf("%w: %s: lease answered %v", ErrMalformed, rk, vals)
		f.report("budget lease", err)
		return 0, err
	}
	f.markUp()
	return int(vals[0]), nil
}

// budgetSync is the background part of a host's budget in one refresh:
// the operations counted since the last, the leased retries that expired
// unspent, and, when retries were asked for and none is left, the next
// batch.
type budgetSync struct {
	hv   *hostView
	want int
	back int
	ops  int64
	ch   chan struct{}
}

// budgetSyncCmd returns the command of hv's budget for a refresh, and
// its sync; ok is false when there is nothing to send or a lease of the
// host is in flight already.
func (f *Fleet) budgetSyncCmd(hv *hostView, now time.Time) (cmd rueidis.Completed, s budgetSync, ok bool) {
	bv := &hv.budget
	bv.mu.Lock()
	defer bv.mu.Unlock()
	if bv.leasing != nil || bv.rule.Window <= 0 {
		// A lease in flight, or no rule yet to count in (a host whose
		// view was made by neither Request nor Retry).
		return cmd, s, false
	}
	s = budgetSync{hv: hv}
	if bv.tokens > 0 && !now.Before(bv.expires) {
		s.back, bv.tokens = bv.tokens, 0
		bv.batch = max(1, bv.batch-s.back)
	}
	if bv.wanted.Swap(0) > 0 && bv.tokens == 0 {
		s.want = max(bv.batch, 1)
	}
	s.ops = bv.pending.Swap(0)
	if s.ops == 0 && s.back == 0 && s.want == 0 {
		return cmd, s, false
	}
	s.ch = make(chan struct{})
	bv.leasing = s.ch
	cmd = f.client.B().Eval().Script(budgetLease).Numkeys(1).Key(f.hostKey("bud", hv.key)).
		Arg(budgetArgs(bv.rule, s.ops, s.back, s.want)...).Build()
	return cmd, s, true
}

// budgetUpdate records the answer to a budget sync. It returns 1 when
// Redis could not be reached, 0 otherwise.
func (f *Fleet) budgetUpdate(s budgetSync, r rueidis.RedisResult) int {
	vals, err := r.AsIntSlice()
	if err != nil {
		f.report("budget lease", callErr("budget lease", f.hostKey("bud", s.hv.key), err))
	} else if len(vals) != 3 || vals[0] < 0 {
		err = fmt.Errorf("%w: %s: lease answered %v", ErrMalformed, f.hostKey("bud", s.hv.key), vals)
		f.report("budget lease", err)
	}
	if unreachable(err) == 1 {
		f.markDown() // before the retries waiting for this lease wake
	}
	bv := &s.hv.budget
	now := time.Now()
	bv.mu.Lock()
	bv.leasing = nil
	close(s.ch)
	if err == nil && s.want > 0 {
		bv.grant(now, f.interval, int(vals[0]), s.want)
	}
	bv.mu.Unlock()
	if err != nil {
		return unreachable(err)
	}
	return 0
}

// budgetCancel ends a sync that was not sent.
func (f *Fleet) budgetCancel(s budgetSync) {
	bv := &s.hv.budget
	bv.mu.Lock()
	bv.leasing = nil
	close(s.ch)
	bv.mu.Unlock()
}
