// Package hosts is the one per-host registry of the module: a bounded,
// sharded map from a host's [Key] to the state that each package keeps
// for it (a breaker, a quota, a retry budget), side by side.
//
// A package stores its state in a [Slot] of its own type: the registry
// knows nothing of the types it holds, so packages that internal cannot
// import (ratelimit, policy) fill slots too. Reading the state of a known
// host takes no lock and allocates nothing.
package hosts

import (
	"hash/maphash"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of [Options], used where a field is zero or negative.
const (
	DefaultMaxHosts    = 10000
	DefaultIdleTimeout = 10 * time.Minute
)

// maxSlots bounds the slots of one registry: a breaker, a tracker and a
// budget use three.
const maxSlots = 8

const (
	shardBits = 6
	shards    = 1 << shardBits
)

// Options configures a [Registry].
type Options struct {
	// MaxHosts bounds how many hosts are remembered. Zero or negative
	// means [DefaultMaxHosts].
	MaxHosts int
	// IdleTimeout is how long a host may go unused before it is
	// forgotten. Zero or negative means [DefaultIdleTimeout].
	IdleTimeout time.Duration
}

// Registry maps hosts to their state. The zero value is not usable: call
// [New].
//
// Eviction has one rule. When a host is added, and IdleTimeout has passed
// since the last sweep or the registry is full, a sweep drops every host
// unused since the previous sweep, and, if the registry is still full,
// hosts used since, until an eighth of the room is free. A host whose
// state is live (an open breaker, a quota whose reset is ahead: each
// slot's live function says) is never dropped, however long unused. If
// nothing can be dropped, the new host is not added and [Slot.Get]
// returns nil: the caller goes on without state for it.
//
// A Registry is safe for concurrent use by multiple goroutines.
type Registry struct {
	maxHosts int64
	idle     time.Duration
	seed     maphash.Seed
	count    atomic.Int64
	epoch    time.Time
	shards   [shards]shard

	mu        sync.Mutex // held by sweeps and slot registration
	slots     atomic.Pointer[[]liveFunc]
	lastSweep time.Duration // since epoch

	// recent is the host of the last lookup by URL: the layers of one
	// request look up the same host one after another, and find it
	// here with two string comparisons, without hashing.
	recent atomic.Pointer[Host]
}

type liveFunc func(state any, now time.Time) bool

type shard struct {
	mu sync.Mutex            // held by writers, which copy the table
	t  atomic.Pointer[table] // read without a lock
	_  [48]byte              // keep shards on separate cache lines
}

// table is an immutable open-addressing hash table of one shard: a
// writer copies it, so readers need no lock.
type table struct {
	mask  uint64
	slots []*Host // len is a power of two, at most half full
	n     int
}

func newTable(n int) *table {
	size := 8
	for size < 2*n {
		size *= 2
	}
	return &table{mask: uint64(size - 1), slots: make([]*Host, size)}
}

func (t *table) find(k Key, h uint64) *Host {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := t.slots[i]
		if e == nil || e.hash == h && e.key == k {
			return e
		}
	}
}

func (t *table) put(e *Host) {
	i := e.hash & t.mask
	for t.slots[i] != nil {
		i = (i + 1) & t.mask
	}
	t.slots[i] = e
	t.n++
}

// with returns a copy of t holding only the hosts keep keeps (it is
// called once per host), and room for extra more.
func (t *table) with(keep func(*Host) bool, extra int) *table {
	kept := make([]*Host, 0, t.n)
	for _, e := range t.slots {
		if e != nil && keep(e) {
			kept = append(kept, e)
		}
	}
	c := newTable(len(kept) + extra)
	for _, e := range kept {
		c.put(e)
	}
	return c
}

// Host is one host's entry: its key and each slot's state.
type Host struct {
	hash    uint64
	key     Key
	name    string
	used    atomic.Bool
	dropped atomic.Bool             // no longer in the registry
	raw     atomic.Pointer[rawName] // how a URL named it, set on its first lookup by URL
	keyRaw  rawName                 // the key's own spelling, which raw points to when a URL spells it alike
	states  [maxSlots]atomic.Value  // *T of slot i
}

// rawName is a URL's scheme and host as written, before [KeyOf]
// normalizes them.
type rawName struct{ scheme, host string }

// Key returns the host's key.
func (h *Host) Key() Key { return h.key }

// Name returns the host's key as a string, made once.
func (h *Host) Name() string { return h.name }

// New returns an empty registry.
func New(o Options) *Registry {
	r := &Registry{
		maxHosts: int64(o.MaxHosts),
		idle:     o.IdleTimeout,
		seed:     maphash.MakeSeed(),
		epoch:    time.Now(),
	}
	if r.maxHosts <= 0 {
		r.maxHosts = DefaultMaxHosts
	}
	if r.idle <= 0 {
		r.idle = DefaultIdleTimeout
	}
	for i := range r.shards {
		r.shards[i].t.Store(newTable(0))
	}
	r.slots.Store(new([]liveFunc))
	return r
}

// Len returns how many hosts are remembered.
func (r *Registry) Len() int { return int(r.count.Load()) }

// hash returns k's hash and shard.
func (r *Registry) hash(k Key) (uint64, *shard) {
	h := maphash.String(r.seed, k.Host)
	return h, &r.shards[h>>(64-shardBits)]
}

// Lookup returns k's entry, nil when k is not remembered. It takes no
// lock, allocates nothing and marks the host used.
func (r *Registry) Lookup(k Key) *Host {
	h := r.find(k)
	if h != nil && !h.used.Load() { // read first: busy hosts share the line
		h.used.Store(true)
	}
	return h
}

// LookupURL is Lookup(KeyOf(u)), faster for the host of the last
// lookup by URL.
func (r *Registry) LookupURL(u *url.URL) *Host {
	h := r.findURL(u)
	if h != nil && !h.used.Load() {
		h.used.Store(true)
	}
	return h
}

// HostURL is Host(KeyOf(u)), faster for the host of the last lookup by
// URL.
func (r *Registry) HostURL(u *url.URL) *Host {
	if h := r.LookupURL(u); h != nil {
		return h
	}
	if u == nil {
		return r.Host(Key{})
	}
	h := r.add(KeyOf(u))
	r.remember(h, u)
	return h
}

// findURL is find(KeyOf(u)): first the recent host, compared with u's
// scheme and host as written, then the table.
func (r *Registry) findURL(u *url.URL) *Host {
	if u == nil {
		return r.find(Key{})
	}
	if h := r.recentFor(u); h != nil {
		return h
	}
	h := r.find(KeyOf(u))
	r.remember(h, u)
	return h
}

// recentFor returns the recent host when u names it as it was first
// written; nil otherwise, or when u is nil.
func (r *Registry) recentFor(u *url.URL) *Host {
	h := r.recent.Load()
	if h == nil || u == nil {
		return nil
	}
	if n := h.raw.Load(); n != nil && n.host == u.Host && n.scheme == u.Scheme && !h.dropped.Load() {
		return h
	}
	return nil
}

// remember makes h, found for u, the recent host. The first URL that
// names a host gives the spelling compared; others are found through
// the table.
func (r *Registry) remember(h *Host, u *url.URL) {
	if h == nil {
		return
	}
	if h.raw.Load() == nil {
		h.raw.CompareAndSwap(nil, h.rawOf(u))
	}
	if r.recent.Load() != h {
		r.recent.Store(h)
	}
}

// find is Lookup without marking the host used.
func (r *Registry) find(k Key) *Host {
	h, sh := r.hash(k)
	return sh.t.Load().find(k, h)
}

// Host returns k's entry, adding it when k is new; nil when the registry
// is full and no host can be dropped.
func (r *Registry) Host(k Key) *Host {
	if h := r.Lookup(k); h != nil {
		return h
	}
	return r.add(k)
}

func (r *Registry) add(k Key) *Host {
	r.maybeSweep()
	hash, sh := r.hash(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.t.Load()
	if h := t.find(k, hash); h != nil {
		return h
	}
	if r.count.Add(1) > r.maxHosts {
		r.count.Add(-1)
		return nil
	}
	// One string holds the name and, as parts of it, the key: a host's
	// entry is one object fewer for the collector to mark, and its
	// strings share no memory with a long raw URL.
	var name string
	if k.Scheme != "" {
		name = k.String() // a new string
		k = Key{Scheme: name[:len(k.Scheme)], Host: name[len(k.Scheme)+len("://"):]}
	} else {
		name = strings.Clone(k.Host)
		k = Key{Host: name}
	}
	h := &Host{hash: hash, key: k, name: name, keyRaw: rawName{scheme: k.Scheme, host: k.Host}}
	h.used.Store(true)
	t = t.with(func(*Host) bool { return true }, 1)
	t.put(h)
	sh.t.Store(t)
	return h
}

// rawOf returns u's scheme and host as written, which name h: the
// key's own spelling when u spells them alike (the common case), else a
// copy of them in one string.
func (h *Host) rawOf(u *url.URL) *rawName {
	if u.Scheme == h.key.Scheme && u.Host == h.key.Host {
		return &h.keyRaw // set before h was shared, never written again
	}
	b := u.Scheme + u.Host // a new string, unless one of them is empty
	if u.Scheme == "" || u.Host == "" {
		b = strings.Clone(b)
	}
	return &rawName{scheme: b[:len(u.Scheme)], host: b[len(u.Scheme):]}
}

// since returns the time since the registry was made, the clock of its
// sweeps.
func (r *Registry) since(now time.Time) time.Duration { return now.Sub(r.epoch) }

// maybeSweep runs a sweep when IdleTimeout has passed since the last one
// or the registry is full. Only adds call it: the hot path never pays.
func (r *Registry) maybeSweep() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	full := r.count.Load() >= r.maxHosts
	if !full && r.since(now)-r.lastSweep < r.idle {
		return
	}
	r.lastSweep = r.since(now)
	// First pass, a clock sweep: drop hosts unused since the last sweep
	// unless their state is live, and mark the others unused.
	r.filter(func(h *Host) bool { return h.used.Swap(false) || r.live(h, now) })
	if !full {
		return
	}
	// Still full: drop hosts whose state is not live, used or not, until
	// an eighth of the room is free, so that the next adds do not sweep.
	target := r.maxHosts - max(1, r.maxHosts/8)
	r.filter(func(h *Host) bool { return r.count.Load() <= target || r.live(h, now) })
}

// filter keeps the hosts for which keep returns true and drops the
// others. r.mu is held.
func (r *Registry) filter(keep func(*Host) bool) {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		t := sh.t.Load()
		dropped := 0
		c := t.with(func(h *Host) bool {
			if keep(h) {
				return true
			}
			dropped++
			r.count.Add(-1)
			h.dropped.Store(true)
			return false
		}, 0)
		if dropped > 0 {
			sh.t.Store(c)
		}
		sh.mu.Unlock()
	}
}

// live reports whether any slot's state of h is live at now.
func (r *Registry) live(h *Host, now time.Time) bool {
	for i, f := range *r.slots.Load() {
		if s := h.states[i].Load(); s != nil && f(s, now) {
			return true
		}
	}
	return false
}

// Range calls f for each host remembered, in no order, until f returns
// false. Hosts added or dropped meanwhile may or may not be seen.
func (r *Registry) Range(f func(*Host) bool) {
	for i := range r.shards {
		for _, h := range r.shards[i].t.Load().slots {
			if h != nil && !f(h) {
				return
			}
		}
	}
}

// Slot is one package's state in every host of a [Registry], of type T.
type Slot[T any] struct {
	r    *Registry
	i    int
	make func(*Host) *T
}

// NewSlot adds a slot to r. newState makes a host's state on its first
// [Slot.Get]; live reports whether a state must be kept at now however
// long its host has gone unused (nil: never). It returns nil when r has
// no slot left (it has 8).
func NewSlot[T any](r *Registry, newState func(Key) *T, live func(state *T, now time.Time) bool) *Slot[T] {
	return NewSlotOf(r, func(h *Host) *T { return newState(h.key) }, live)
}

// NewSlotOf is [NewSlot] for a state made from the host's entry, so that
// it can share the entry's strings (its [Host.Name]) rather than make its
// own.
func NewSlotOf[T any](r *Registry, newState func(*Host) *T, live func(state *T, now time.Time) bool) *Slot[T] {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.slots.Load()
	if len(old) >= maxSlots {
		return nil
	}
	f := func(any, time.Time) bool { return false }
	if live != nil {
		f = func(s any, now time.Time) bool { return live(s.(*T), now) }
	}
	slots := append(old[:len(old):len(old)], f)
	r.slots.Store(&slots)
	return &Slot[T]{r: r, i: len(old), make: newState}
}

// Registry returns the registry the slot belongs to.
func (s *Slot[T]) Registry() *Registry { return s.r }

// Get returns k's state, making it (and k's entry) on first use; nil
// when the registry is full and no host can be dropped. For an existing
// host and state it takes no lock and allocates nothing.
func (s *Slot[T]) Get(k Key) *T {
	h := s.r.Host(k)
	if h == nil {
		return nil
	}
	return s.Of(h)
}

// GetURL is Get(KeyOf(u)), faster for the host of the last lookup by
// URL (see [Registry.HostURL]).
func (s *Slot[T]) GetURL(u *url.URL) *T {
	if h := s.r.recentFor(u); h != nil { // the common case, inlined
		if !h.used.Load() {
			h.used.Store(true)
		}
		return s.Of(h)
	}
	h := s.r.HostURL(u)
	if h == nil {
		return nil
	}
	return s.Of(h)
}

// Peek returns k's state, nil when k has none. It makes nothing and does
// not count as a use of k.
func (s *Slot[T]) Peek(k Key) *T {
	return s.stateOf(s.r.find(k))
}

// PeekURL is Peek(KeyOf(u)), faster for the host of the last lookup by
// URL.
func (s *Slot[T]) PeekURL(u *url.URL) *T {
	if h := s.r.recentFor(u); h != nil {
		return s.stateOf(h)
	}
	return s.stateOf(s.r.findURL(u))
}

// stateOf returns h's state in s, nil when h or its state is nil.
func (s *Slot[T]) stateOf(h *Host) *T {
	if h == nil {
		return nil
	}
	if v := h.states[s.i].Load(); v != nil {
		return v.(*T)
	}
	return nil
}

// Range calls f for each host that has a state in s, in no order,
// until f returns false. It makes nothing and does not count as a use.
func (s *Slot[T]) Range(f func(k Key, state *T) bool) {
	s.r.Range(func(h *Host) bool {
		v := h.states[s.i].Load()
		return v == nil || f(h.key, v.(*T))
	})
}

// Of returns the state of h, making it on first use.
func (s *Slot[T]) Of(h *Host) *T {
	v := &h.states[s.i]
	if t := v.Load(); t != nil {
		return t.(*T)
	}
	t := s.make(h)
	if v.CompareAndSwap(nil, t) {
		return t
	}
	return v.Load().(*T) // another goroutine made it first
}
