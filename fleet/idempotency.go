package fleet

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/sturdyhttp/sturdy/idempotency"
)

// Defaults of [IdempotencyOptions], used where a field is zero.
const (
	DefaultPrefix             = "sturdy"
	DefaultMaxStoredBytes     = 1<<20 + 64<<10 // 1 MiB of body plus 64 KiB of status and headers
	DefaultIdempotencyTimeout = time.Second
)

// IdempotencyOptions configures an [IdempotencyStore]. The zero value is
// ready to use.
type IdempotencyOptions struct {
	// Prefix starts every key the store writes. Empty means
	// [DefaultPrefix], "sturdy".
	Prefix string

	// MaxStoredBytes bounds one stored response, encoded (status, headers
	// and body). A larger one is not stored: Complete keeps the lock and
	// returns an error that wraps [idempotency.ErrTooLarge], and the
	// handler then marks the key completed without it. Zero or
	// negative means [DefaultMaxStoredBytes] (1 MiB + 64 KiB), enough for
	// the largest body [idempotency.Handler] stores by default.
	MaxStoredBytes int

	// Timeout bounds each call to Redis, on top of the context's own
	// deadline. A Begin that fails makes the handler answer 503 with
	// Retry-After; it never lets a request run unguarded. Zero or negative
	// means [DefaultIdempotencyTimeout] (1s).
	Timeout time.Duration

	// Replicas is how many replicas must acknowledge a key's lock (Redis
	// WAIT, on the connection that took it) before Begin hands it to the
	// handler, so that a failover that promotes one of them keeps the
	// lock. A lock not acknowledged within Timeout is given up, and Begin
	// fails with an error that wraps [ErrNotReplicated]: the handler
	// answers 503 with Retry-After and does not run.
	//
	// Zero, the default, means 1 wherever a failover may promote a
	// replica, and none where there is no replica to promote:
	//   - through Sentinel, 1 always (the primary cannot tell a replica
	//     that is down from none);
	//   - on a Redis Cluster, 1 for a key whose shard the cluster lists a
	//     replica for, up or failed (CLUSTER NODES, read at most once a
	//     second), and none for a shard without replicas;
	//   - with a single Redis, none.
	//
	// So a replica configured but down refuses every key of its shard
	// until it is back or removed from the cluster (CLUSTER FORGET), and a
	// Begin that cannot read the cluster's topology (its Redis user needs
	// CLUSTER NODES) fails as one that cannot reach Redis. Negative means none: at most once then holds
	// only while the primary does not fail over. Run at least two replicas
	// per primary, so that a promoted primary keeps one to acknowledge.
	Replicas int
}

// ErrNotReplicated is matched by errors.Is when Begin took a key's lock
// but not enough replicas acknowledged it within Timeout
// (IdempotencyOptions.Replicas): the lock is given up and the request
// must not run.
var ErrNotReplicated = errors.New("fleet: idempotency lock not acknowledged by the replicas in time")

// IdempotencyStore is an [idempotency.Store] on Redis, for
// [idempotency.Handler]s on many servers that must run each keyed request
// once between them. Each method is one Lua script, so one round trip,
// on the keys of one hash tag (on a Redis Cluster with the default
// Replicas, the store also reads the cluster's topology, at most once a
// second):
//
//	<prefix>:idem:{<key>}               hash: fp, tok (while in flight), resp (once completed; empty when not kept), ctok (the token that completed it)
//	<prefix>:idem:{<key>}:gone:<token>  string: a Begin that got no answer, for the lock TTL (none when <key> starts with '}')
//
// The key expires after the lock TTL while in flight, after the response
// TTL once completed. A key completed without its response (a nil resp to
// Complete) keeps an empty resp, so that Begin answers Completed with a
// nil Response and the request is not run again. A lock carries a random token, and Complete and
// Release act only while the key still holds the caller's token, so a
// handler slower than the lock TTL cannot overwrite the response of the
// request that took the key after it. A Begin that gets no answer in time
// (the handler answers 503) may still run when Redis gets to it: the store
// then deletes the lock it takes, or marks its token gone so that it takes
// none, retrying every Timeout until Redis answers, for at most the lock
// TTL (64 such Begins at a time; the lock of one past them, if taken,
// lasts its TTL).
//
// Memory is bounded per response by MaxStoredBytes and overall by Redis's
// maxmemory. Use maxmemory-policy noeviction (or volatile-lru with room to
// spare): a Redis that evicts an in-flight lock lets a retry run while the
// first request still is; a full Redis under noeviction fails Begin, and
// the handler answers 503.
//
// It is safe for concurrent use by multiple goroutines.
type IdempotencyStore struct {
	client   rueidis.Client
	prefix   string
	maxBytes int
	timeout  time.Duration
	// replicas is how many replicas to wait for, or perShard: as many
	// as the cluster's topology says (waitFor).
	replicas int
	topo     topology
	// abandoning bounds the goroutines that undo unanswered Begins, so
	// that a long stall of Redis under load does not pile them up.
	abandoning chan struct{}
}

// maxAbandoning is how many unanswered Begins a store undoes at once;
// past it, a Begin's lock, if it is taken late, lasts its TTL.
const maxAbandoning = 64

// NewIdempotencyStore returns a store that keeps its keys in the Redis
// that client talks to. The client stays the caller's to close.
func NewIdempotencyStore(client rueidis.Client, o IdempotencyOptions) *IdempotencyStore {
	s := &IdempotencyStore{client: client, prefix: o.Prefix, maxBytes: o.MaxStoredBytes, timeout: o.Timeout,
		replicas: replicasFor(client, o.Replicas), abandoning: make(chan struct{}, maxAbandoning)}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxStoredBytes
	}
	if s.timeout <= 0 {
		s.timeout = DefaultIdempotencyTimeout
	}
	return s
}

var _ idempotency.Store = (*IdempotencyStore)(nil)

// replicasFor returns how many replicas a store waits for: n when
// positive, none when negative, and for zero 1 under a Sentinel client,
// whose primary may be replaced by a replica, perShard under a Cluster
// client, none otherwise.
func replicasFor(client rueidis.Client, n int) int {
	switch {
	case n > 0:
		return n
	case n < 0:
		return 0
	case client.Mode() == rueidis.ClientModeSentinel:
		return 1
	case client.Mode() == rueidis.ClientModeCluster:
		return perShard
	}
	return 0
}

// perShard, as a store's replicas, waits for 1 replica for a key whose
// shard has one in the cluster's topology, and for none otherwise.
const perShard = -1

// topologyTTL is how long a store uses the cluster topology it read.
const topologyTTL = time.Second

// topology is what a store last read of its cluster's shards.
type topology struct {
	mu   sync.Mutex // held to read it
	last atomic.Pointer[shards]
}

// shards is the cluster's shards, as read at a time.
type shards struct {
	at   time.Time
	list []shard
}

// shard is a range of slots, and how many replicas its primary has.
type shard struct {
	lo, hi   uint16
	replicas int
}

// waitFor returns how many replicas to wait for on the record rk. Under
// perShard it reads the cluster's topology (CLUSTER NODES, from the
// primary of rk's slot) when the one it has is older than topologyTTL;
// when that fails, it fails, or with stale it uses the old one if any.
func (s *IdempotencyStore) waitFor(ctx context.Context, rk string, stale bool) (int, error) {
	if s.replicas != perShard {
		return s.replicas, nil
	}
	cmd := s.client.B().Arbitrary("CLUSTER", "NODES").Build().SetSlot(rk)
	slot := cmd.Slot()
	last := s.topo.last.Load()
	if last == nil || time.Since(last.at) >= topologyTTL {
		var err error
		if last, err = s.readTopology(ctx, cmd); err != nil && (!stale || last == nil) {
			return 0, fmt.Errorf("cluster topology: %w", err)
		}
	}
	for _, sh := range last.list {
		if sh.lo <= slot && slot <= sh.hi {
			return min(sh.replicas, 1), nil
		}
	}
	return 0, fmt.Errorf("cluster topology: no primary serves slot %d", slot)
}

// readTopology reads the cluster's shards with cmd (CLUSTER NODES), one
// call at a time: a call that finds a topology read while it waited uses
// it. On an error, it returns the error and the last topology read, if
// any.
func (s *IdempotencyStore) readTopology(ctx context.Context, cmd rueidis.Completed) (*shards, error) {
	t := &s.topo
	t.mu.Lock()
	defer t.mu.Unlock()
	if last := t.last.Load(); last != nil && time.Since(last.at) < topologyTTL {
		return last, nil
	}
	text, err := s.client.Do(ctx, cmd).ToString()
	var list []shard
	if err == nil {
		list, err = parseClusterNodes(text)
	}
	if err != nil {
		return t.last.Load(), err
	}
	last := &shards{at: time.Now(), list: list}
	t.last.Store(last)
	return last, nil
}

// parseClusterNodes reads the answer of CLUSTER NODES: a line per node,
// "<id> <addr> <flags> <primary id or -> <ping> <pong> <epoch> <link>
// <slot or lo-hi>...", and returns each primary's slot ranges with how
// many nodes it lists as its replicas, failed ones too.
func parseClusterNodes(text string) ([]shard, error) {
	text = strings.TrimPrefix(text, "txt:") // RESP3 marks it verbatim text
	replicas := map[string]int{}
	type ranges struct {
		id     string
		lo, hi []uint16
	}
	var primaries []ranges
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q: %d fields, want at least 8", line, len(f))
		}
		if f[3] != "-" {
			replicas[f[3]]++
			continue
		}
		r := ranges{id: f[0]}
		for _, sl := range f[8:] {
			if strings.HasPrefix(sl, "[") {
				continue // a slot being imported or migrated: still served by its owner's range
			}
			los, his, _ := strings.Cut(sl, "-")
			if his == "" {
				his = los
			}
			lo, err1 := strconv.ParseUint(los, 10, 14)
			hi, err2 := strconv.ParseUint(his, 10, 14)
			if err1 != nil || err2 != nil || lo > hi {
				return nil, fmt.Errorf("CLUSTER NODES line %q: bad slot range %q", line, sl)
			}
			r.lo, r.hi = append(r.lo, uint16(lo)), append(r.hi, uint16(hi))
		}
		primaries = append(primaries, r)
	}
	shards := []shard{}
	for _, p := range primaries {
		for i := range p.lo {
			shards = append(shards, shard{lo: p.lo[i], hi: p.hi[i], replicas: replicas[p.id]})
		}
	}
	return shards, nil
}

// The scripts answer with a status letter: a(cquired), i(n flight),
// c(ompleted), l(ost), d(one), x (malformed: a hash fleet did not write),
// g(one: the Begin was abandoned, and no one awaits its answer).
const idemBeginSrc = `
if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then return {'g'} end
local v = redis.call('HMGET', KEYS[1], 'fp', 'tok', 'resp')
if v[1] then
  if v[3] then return {'c', v[1], v[3]} end
  if v[2] then return {'i', v[1]} end
  return {'x'}
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'x'} end
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'tok', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'a'}`

// idemCompleteSrc stores the response of the lock's holder. Resent by
// the store (ARGV[4] '1') for the token that completed it (ctok), it
// answers done.
const idemCompleteSrc = `
local v = redis.call('HMGET', KEYS[1], 'tok', 'resp', 'ctok')
if ARGV[4] == '1' and v[2] and v[3] == ARGV[1] then return 'd' end
if v[1] ~= ARGV[1] or v[2] then return 'l' end
redis.call('HSET', KEYS[1], 'resp', ARGV[2], 'ctok', ARGV[1])
redis.call('HDEL', KEYS[1], 'tok')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 'd'`

var (
	idemBegin = rueidis.NewLuaScript(idemBeginSrc)

	idemComplete = rueidis.NewLuaScript(idemCompleteSrc)

	idemRelease = rueidis.NewLuaScript(`
local v = redis.call('HMGET', KEYS[1], 'tok', 'resp')
if v[1] ~= ARGV[1] or v[2] then return 'l' end
redis.call('DEL', KEYS[1])
return 'd'`)

	// idemAbandon undoes a Begin whose answer did not come: it deletes
	// the lock if the Begin took it, and otherwise marks its token gone,
	// so that the Begin, should it run later, takes nothing.
	idemAbandon = rueidis.NewLuaScript(`
if redis.call('HGET', KEYS[1], 'tok') == ARGV[1] then
  redis.call('DEL', KEYS[1])
elseif KEYS[2] then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
end
return 'd'`)
)

func (s *IdempotencyStore) redisKey(key string) string {
	return s.prefix + ":idem:{" + key + "}"
}

// idemKeys returns the keys of the Begin sent with token: its record, and
// the key that marks the Begin abandoned. The marker is left out when the
// record's hash tag is empty (a key that starts with '}'): Redis Cluster
// then hashes the whole name, and no other key shares the record's slot.
// Such a Begin, if it runs after its abandon, keeps its lock for its TTL.
func (s *IdempotencyStore) idemKeys(key, token string) []string {
	rk := s.redisKey(key)
	if i := strings.IndexByte(rk, '{'); rk[i+1] == '}' {
		return []string{rk}
	}
	return []string{rk, rk + ":gone:" + token}
}

// Begin implements [idempotency.Store].
func (s *IdempotencyStore) Begin(ctx context.Context, key, fingerprint string, lockTTL time.Duration) (idempotency.BeginResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	token := rand.Text()
	rk := s.redisKey(key)
	keys, args := s.idemKeys(key, token), []string{fingerprint, token, millis(lockTTL)}
	n, err := s.waitFor(ctx, rk, false)
	if err != nil {
		return idempotency.BeginResult{}, fmt.Errorf("fleet: idempotency begin %q: %w", rk, err)
	}
	var vals []rueidis.RedisMessage
	acked := int64(-1)
	if n == 0 {
		vals, err = idemBegin.Exec(ctx, s.client, keys, args).ToArray()
	} else {
		vals, acked, err = s.beginWait(ctx, keys, args, n)
	}
	if err != nil {
		// The script may run yet: sent, and answered too late. The lock
		// it would take holds this token, which no one else knows, until
		// lockTTL: undo it.
		if _, answered := rueidis.IsRedisErr(err); !answered && (!noRedis(err) || n > 0) {
			s.abandonLater(key, token, lockTTL, n)
		}
		return idempotency.BeginResult{}, fmt.Errorf("fleet: idempotency begin %q: %w", rk, err)
	}
	st, _ := str(vals, 0)
	switch st {
	case "a":
		if acked >= 0 && acked < int64(n) {
			// Not on enough replicas: a failover now could lose the
			// lock, and another server run the key. Give it up.
			s.abandonLater(key, token, lockTTL, n)
			return idempotency.BeginResult{}, fmt.Errorf("fleet: idempotency begin %q: %d of %d replicas in %v: %w",
				rk, acked, n, s.timeout, ErrNotReplicated)
		}
		return idempotency.BeginResult{State: idempotency.Acquired, Token: token}, nil
	case "i":
		fp, ok := str(vals, 1)
		if ok {
			return idempotency.BeginResult{State: idempotency.InFlight, Fingerprint: fp}, nil
		}
	case "c":
		fp, ok1 := str(vals, 1)
		enc, ok2 := str(vals, 2)
		if ok1 && ok2 && enc == "" {
			return idempotency.BeginResult{State: idempotency.Completed, Fingerprint: fp}, nil
		}
		if ok1 && ok2 {
			resp, err := decodeResponse(enc)
			if err != nil {
				return idempotency.BeginResult{}, fmt.Errorf("%w: %s: %v", ErrMalformed, rk, err)
			}
			return idempotency.BeginResult{State: idempotency.Completed, Fingerprint: fp, Response: resp}, nil
		}
	}
	return idempotency.BeginResult{}, fmt.Errorf("%w: %s is not an idempotency record", ErrMalformed, rk)
}

// beginWait runs idemBegin and then WAIT for n replicas, pipelined on
// one connection, so that WAIT waits for the lock's write: one round
// trip, which lasts until the replicas acknowledge. It returns the
// script's answer and how many replicas acknowledged.
func (s *IdempotencyStore) beginWait(ctx context.Context, keys, args []string, n int) ([]rueidis.RedisMessage, int64, error) {
	res := s.client.DoMulti(ctx,
		s.client.B().Eval().Script(idemBeginSrc).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(),
		s.client.B().Wait().Numreplicas(int64(n)).Timeout(waitMillis(ctx, s.timeout)).Build())
	vals, err := res[0].ToArray()
	if err != nil {
		return nil, 0, err
	}
	acked, err := res[1].AsInt64()
	if err != nil {
		acked = 0 // the script ran, and nothing says a replica has its lock
	}
	return vals, acked, nil
}

// abandonLater undoes, in the background, the Begin sent with token,
// which waited for n replicas.
func (s *IdempotencyStore) abandonLater(key, token string, lockTTL time.Duration, n int) {
	select {
	case s.abandoning <- struct{}{}:
		go func() {
			defer func() { <-s.abandoning }()
			s.abandon(key, token, lockTTL, n)
		}()
	default: // maxAbandoning at work already
	}
}

// abandon undoes the Begin sent with token, which got no answer: it may
// have run, or may run yet when Redis gets to it (a stalled Redis runs what
// it was sent when it resumes), maybe after a command sent later on
// another connection. idemAbandon works in either order; it is sent until
// Redis answers, every Timeout, for at most lockTTL, after which a lock
// would have expired anyway.
func (s *IdempotencyStore) abandon(key, token string, lockTTL time.Duration, n int) {
	keys := s.idemKeys(key, token)
	args := []string{token, millis(lockTTL)}
	end := time.Now().Add(lockTTL)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		err := idemAbandon.Exec(ctx, s.client, keys, args).Error()
		cancel()
		// A Redis that is not there lost what it was sent, unless a
		// replica got it and is being promoted: with Replicas, try on.
		if _, answered := rueidis.IsRedisErr(err); err == nil || answered || (noRedis(err) && n == 0) ||
			errors.Is(err, rueidis.ErrClosing) || time.Now().Add(s.timeout).After(end) {
			return
		}
		time.Sleep(s.timeout)
	}
}

// noRedis reports whether err says that no Redis listens at the address:
// what the one before was sent died with it.
func noRedis(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

// Complete implements [idempotency.Store]. A nil resp is stored as an
// empty one: the key is completed without its response.
func (s *IdempotencyStore) Complete(ctx context.Context, key, token string, resp *idempotency.StoredResponse, ttl time.Duration) error {
	var enc []byte
	if resp != nil {
		enc = encodeResponse(resp)
	}
	if len(enc) > s.maxBytes {
		return fmt.Errorf("fleet: response of %d bytes over the limit of %d: %w", len(enc), s.maxBytes, idempotency.ErrTooLarge)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rk := s.redisKey(key)
	args := []string{token, rueidis.BinaryString(enc), millis(ttl), "0"}
	n, err := s.waitFor(ctx, rk, true)
	if err != nil {
		n = 1 // a topology never read: wait, and send again until a replica or a new primary has it
	}
	if n == 0 {
		st, err := idemComplete.Exec(ctx, s.client, []string{rk}, args).ToString()
		return s.result("complete", rk, st, err)
	}
	st, acked, err := s.completeWait(ctx, rk, args, n)
	if _, answered := rueidis.IsRedisErr(err); (err != nil && !answered) || (err == nil && st == "d" && acked < int64(n)) {
		// The response may be on the primary alone, and lost with it in
		// a failover, which would leave the replicas the lock: send it
		// again until a replica has it, or a primary that took over.
		select {
		case s.abandoning <- struct{}{}:
			go func() {
				defer func() { <-s.abandoning }()
				s.recomplete(rk, args, n, err != nil)
			}()
			return nil
		default:
			if err == nil {
				err = fmt.Errorf("%d of %d replicas in %v: %w", acked, n, s.timeout, ErrNotReplicated)
			}
		}
	}
	return s.result("complete", rk, st, err)
}

// completeWait runs idemComplete and WAIT, pipelined on one connection,
// as beginWait does.
func (s *IdempotencyStore) completeWait(ctx context.Context, rk string, args []string, n int) (string, int64, error) {
	res := s.client.DoMulti(ctx,
		s.client.B().Eval().Script(idemCompleteSrc).Numkeys(1).Key(rk).Arg(args...).Build(),
		s.client.B().Wait().Numreplicas(int64(n)).Timeout(waitMillis(ctx, s.timeout)).Build())
	st, err := res[0].ToString()
	if err != nil {
		return "", 0, err
	}
	acked, err := res[1].AsInt64()
	if err != nil {
		acked = 0
	}
	return st, acked, nil
}

// recomplete sends a completion again, every Timeout, until n replicas
// acknowledge it, or until a primary answers it after a call that got no
// answer (a failover: the new primary may have no replica yet), or the
// lock is found lost, for at most recompleteFor.
func (s *IdempotencyStore) recomplete(rk string, args []string, n int, failed bool) {
	args = append(args[:3:3], "1")
	for end := time.Now().Add(recompleteFor); time.Now().Before(end); {
		time.Sleep(s.timeout)
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		st, acked, err := s.completeWait(ctx, rk, args, n)
		cancel()
		if errors.Is(err, rueidis.ErrClosing) {
			return
		}
		if _, answered := rueidis.IsRedisErr(err); err != nil && !answered {
			failed = true
			continue
		}
		if err != nil || st != "d" || acked >= int64(n) || failed {
			return
		}
	}
}

// recompleteFor bounds how long a completion is sent again.
const recompleteFor = time.Minute

// waitMillis returns WAIT's timeout for a call within ctx: short of its
// deadline by 150ms (Redis checks the timeouts of blocked clients up to
// 100ms late, at its default hz of 10), or by half of the time left when
// that is less, so that WAIT answers before the deadline cuts it off; at
// least 1 (0 would wait for ever).
func waitMillis(ctx context.Context, d time.Duration) int64 {
	if dl, ok := ctx.Deadline(); ok {
		d = time.Until(dl)
	}
	return max((d - min(d/2, 150*time.Millisecond)).Milliseconds(), 1)
}

// Release implements [idempotency.Store].
func (s *IdempotencyStore) Release(ctx context.Context, key, token string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rk := s.redisKey(key)
	st, err := idemRelease.Exec(ctx, s.client, []string{rk}, []string{token}).ToString()
	return s.result("release", rk, st, err)
}

func (s *IdempotencyStore) result(op, rk, st string, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("fleet: idempotency %s %q: %w", op, rk, err)
	case st == "l":
		return fmt.Errorf("fleet: idempotency %s %q: %w", op, rk, idempotency.ErrLockLost)
	case st == "d":
		return nil
	}
	return fmt.Errorf("%w: %s: script answered %q", ErrMalformed, rk, st)
}

// str returns vals[i] as a string, and whether it is one.
func str(vals []rueidis.RedisMessage, i int) (string, bool) {
	if i >= len(vals) {
		return "", false
	}
	s, err := vals[i].ToString()
	return s, err == nil
}

// millis formats d in whole milliseconds, at least 1: PEXPIRE and PX
// refuse 0.
func millis(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}

// encodeResponse writes resp as: a version byte (1), the status, the
// number of header fields, each field's name and values, then the body.
// Numbers are uvarints, strings a uvarint length then the bytes.
func encodeResponse(resp *idempotency.StoredResponse) []byte {
	n := 1 + 2*binary.MaxVarintLen64 + len(resp.Body)
	for k, vs := range resp.Header {
		n += 2*binary.MaxVarintLen64 + len(k)
		for _, v := range vs {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, 1)
	b = binary.AppendUvarint(b, uint64(resp.Status))
	b = binary.AppendUvarint(b, uint64(len(resp.Header)))
	for k, vs := range resp.Header {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return append(b, resp.Body...)
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decodeResponse reads what encodeResponse wrote, checking every length
// against what is left.
func decodeResponse(enc string) (*idempotency.StoredResponse, error) {
	d := decoder{s: enc}
	if v := d.uvarint(); v != 1 {
		return nil, fmt.Errorf("unknown encoding version %d", v)
	}
	status := d.uvarint()
	fields := d.uvarint()
	if d.err != nil || status < 100 || status > 999 || fields > uint64(len(d.s)) {
		return nil, errors.New("bad response head")
	}
	resp := &idempotency.StoredResponse{Status: int(status)}
	if fields > 0 {
		resp.Header = make(http.Header, fields)
	}
	for range fields {
		k := d.string()
		nv := d.uvarint()
		if d.err != nil || nv > uint64(len(d.s)) {
			return nil, errors.New("bad header field")
		}
		vs := make([]string, 0, nv)
		for range nv {
			vs = append(vs, d.string())
		}
		resp.Header[k] = vs
	}
	if d.err != nil {
		return nil, d.err
	}
	resp.Body = []byte(d.s)
	return resp, nil
}

type decoder struct {
	s   string
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint([]byte(d.s[:min(len(d.s), binary.MaxVarintLen64)]))
	if n <= 0 {
		d.err = errors.New("bad number")
		return 0
	}
	d.s = d.s[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.s)) {
		d.err = errors.New("string past the end")
		return ""
	}
	v := d.s[:n]
	d.s = d.s[n:]
	return v
}
